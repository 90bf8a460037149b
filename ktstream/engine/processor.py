"""One micro-batch, start to finish, without I/O: records -> outputs + staged learner states.

Steps (``Processor.process``):
1. decode and validate every record; failures become dead letters;
2. load the learners' committed states (cache, or the model's initial state)
   as *working copies*; the cache itself is only read; a state built by an
   earlier model version is rebuilt from its raw window (ktstream.engine.swap);
3. screen and plan waves (duplicates, late policy; ktstream.engine.batcher);
4. run the waves through the model (ktstream.serving.runner), building one
   prediction per kept event;
5. return a ``Batch``: outputs for the sink, the staged states, the offsets to
   commit and what the metrics need. Nothing is applied here: the engine makes
   the staged states current only after the sink flushed and the offsets were
   committed (ktstream.engine.engine).

Before sending, the engine asks ``drop_oversized`` to check every output's size
(changelog records included, which the engine's durable state adds after ``process``): a learner
with a prediction or changelog record over the limit can never be sent, so its
events of the batch become ``output_too_large`` dead letters and its staged state
is dropped (it keeps its committed state); a dead letter over the limit keeps
fewer original bytes (its source offset points at the whole record).
"""

from __future__ import annotations

import base64
import json
from collections import Counter, deque
from dataclasses import dataclass, field

from ktstream.core import LearnerState, Output, Record, TopicPartition
from ktstream.engine import messages
from ktstream.engine.batcher import LatePolicy, Planned, plan
from ktstream.engine.decode import Decoded, Rejected, decode
from ktstream.engine.state_cache import StateCache
from ktstream.engine.swap import rebuild_learners, window_record
from ktstream.serving.runner import ModelRunner

#: What a record costs in a Kafka request besides its key, value and headers (record-batch header:
#: 61 bytes; the record's own length, delta and count varints: at most about 30).
RECORD_OVERHEAD_BYTES = 128


def output_nbytes(o: Output) -> int:
    """The size an output has in a produce request (an upper bound of kafka-python's estimate)."""
    size = len(o.key or b"") + len(o.value or b"") + RECORD_OVERHEAD_BYTES
    if o.headers:  # changelog records: predictions and dead letters have none (no generator per output)
        size += sum(len(k.encode()) + len(v or b"") for k, v in o.headers)
    return size


@dataclass
class Batch:
    outputs: list[Output] = field(default_factory=list)
    staged: list[LearnerState] = field(default_factory=list)
    offsets: dict[TopicPartition, int] = field(default_factory=dict)  # next offset to read
    first_offsets: dict[TopicPartition, int] = field(default_factory=dict)  # where a retry restarts
    received_ms: int = 0
    records: int = 0
    predictions: int = 0
    dead_letters: Counter = field(default_factory=Counter)  # reason -> count
    late_applied: int = 0
    duplicates: int = 0
    wave_sizes: list[int] = field(default_factory=list)
    end_to_end_ms: list[int] = field(default_factory=list)  # produced - event time
    outcomes: list[tuple[float, int]] = field(default_factory=list)  # (p_correct, response), binary
    rebuilt: int = 0  # learner states rebuilt for this batch after a model swap
    predicted: dict[str, list[Record]] = field(default_factory=dict)  # learner -> records it predicted
    metric_learners: tuple[list[str], list[str]] = field(default_factory=lambda: ([], []))  # of end_to_end, outcomes


def batch_for(records: list[Record]) -> Batch:
    """A micro-batch of ``records`` with nothing in it yet: received now, the offsets to commit after it
    and where a retry restarts, per partition."""
    batch = Batch(received_ms=messages.now_ms(), records=len(records))
    for rec in records:
        batch.offsets[rec.tp] = max(batch.offsets.get(rec.tp, 0), rec.offset + 1)
        batch.first_offsets[rec.tp] = min(batch.first_offsets.get(rec.tp, rec.offset), rec.offset)
    return batch


class Processor:
    def __init__(self, runner: ModelRunner, cache: StateCache, predictions_topic: str, dead_letter_topic: str,
                 late_policy: LatePolicy = "dead-letter", max_record_bytes: int = 65536, window: int = 200,
                 max_clock_skew_s: float = 300.0, window_bytes: int | None = 262_144):
        self.runner, self.cache = runner, cache
        self.max_clock_skew_ms = int(max_clock_skew_s * 1000)  # later event times are dead-lettered as future
        self.predictions_topic, self.dead_letter_topic = predictions_topic, dead_letter_topic
        self.late_policy, self.max_record_bytes = late_policy, max_record_bytes
        self.window = window  # raw interactions kept per learner for rebuilding after a swap
        self.window_bytes = window_bytes  # and the bytes they may hold (None: no bound)
        self.stale: deque[str] = deque()  # cached learners still to rebuild in the background

    def swap(self, runner: ModelRunner) -> None:
        """Serve with ``runner`` from the next micro-batch on; every cached learner becomes stale."""
        self.runner = runner
        self.stale = deque(self.cache.keys())

    def rebuild_stale(self, limit: int) -> int:
        """Background pass: rebuild up to ``limit`` stale cached learners (committed state in, committed
        state out, so the cache takes them directly). Returns how many were rebuilt."""
        todo = []
        while self.stale and len(todo) < limit:
            st = self.cache.peek(self.stale.popleft())
            if st is not None and st.model_version != self.runner.version:
                todo.append(st)
        for st in rebuild_learners(self.runner, todo):
            self.cache.replace(st)
        return len(todo)

    def process(self, records: list[Record]) -> Batch:
        return self.process_decoded(*self.decode(records))

    def decode(self, records: list[Record]) -> tuple[Batch, list[Decoded]]:
        """Step 1 alone: it reads no learner state, so the engine may run it while the previous batch's
        outputs are still in flight."""
        batch = batch_for(records)
        valid: list[Decoded] = []
        for rec in records:
            d = decode(rec, self.max_record_bytes, batch.received_ms + self.max_clock_skew_ms)
            if isinstance(d, Decoded) and d.event.response is not None \
                    and d.event.response >= self.runner.model.n_categories:
                d = Rejected(rec, "schema", f"response: {d.event.response} is outside 0..."
                             f"{self.runner.model.n_categories - 1} for this model")
            if isinstance(d, Rejected):
                self._dead_letter(batch, d.record, d.reason, d.detail)
            else:
                valid.append(d)
        return batch, valid

    def process_decoded(self, batch: Batch, valid: list[Decoded]) -> Batch:
        """Steps 2-5, for the events ``decode`` kept."""
        learners = self._working_states(valid, batch)
        planned = plan(valid, learners, self.late_policy)
        for d in planned.late:
            self._dead_letter(batch, d.record, "late", f"event time {d.event_time_ms} is older than the "
                              f"learner's last applied event ({learners[d.event.learner_id].last_event_time_ms})")
        for d in planned.repeated:
            self._dead_letter(batch, d.record, "duplicate", f"event id {d.event.event_id!r} is the learner's "
                              f"last applied event's: delivered again, it is not applied twice")
        batch.late_applied, batch.duplicates = planned.late_applied, len(planned.duplicates)
        flat = [p for wave in planned.waves for p in wave]
        # wave i holds each learner's i-th event, which makes its event count (the raw window's seq) ...
        seqs = [p.learner.events + i + 1 for i, wave in enumerate(planned.waves) for p in wave]
        probs, extras = self.runner.run(planned.waves)  # ... once applied
        fields = [None] * len(flat)
        if extras:
            vocab = self.runner.concepts
            concepts = [{c: vocab.encode(c) for c in p.decoded.event.concept_ids} for p in flat] \
                if "mastery" in extras else None  # only mastery reads them
            fields = messages.describe_rows(extras, concepts)
        self._predict(batch, flat, probs.tolist(), fields, seqs)
        batch.wave_sizes = [len(wave) for wave in planned.waves]
        touched = dict.fromkeys(p.learner.learner_id for p in flat)
        batch.staged = [learners[lid] for lid in touched]
        return batch

    def _working_states(self, valid: list[Decoded], batch: Batch) -> dict[str, LearnerState]:
        """Working copies of the committed states; learners never seen start from the initial state,
        states of an earlier model version are rebuilt from their raw windows."""
        out: dict[str, LearnerState] = {}
        fresh: list[str] = []
        stale: list[LearnerState] = []
        for lid in dict.fromkeys(d.event.learner_id for d in valid):
            st = self.cache.get(lid)
            if st is None:
                fresh.append(lid)
            elif st.model_version == self.runner.version:
                out[lid] = st.copy()
            else:
                stale.append(st)
        for st in rebuild_learners(self.runner, stale):
            out[st.learner_id] = st
        batch.rebuilt = len(stale)
        if fresh:
            for lid, s in zip(fresh, self.runner.initial_states(len(fresh))):
                out[lid] = LearnerState(lid, s, self.runner.version)
        return out

    def _predict(self, batch: Batch, flat: list[Planned], probs: list[list[float]], fields: list[dict | None],
                 seqs: list[int]) -> None:
        """The prediction of each planned event (wave order) into ``batch``, and the event into its learner's
        raw window. One loop for the micro-batch, its lookups hoisted: it runs once per event."""
        topic, name, version = self.predictions_topic, self.runner.name, self.runner.version
        received = batch.received_ms
        outputs, predicted, end_to_end, outcomes = batch.outputs, batch.predicted, batch.end_to_end_ms, batch.outcomes
        e2e_learners, outcome_learners = batch.metric_learners
        window, window_bytes = self.window, self.window_bytes
        for p, row, f, seq in zip(flat, probs, fields, seqs):
            d = p.decoded
            out, produced = messages.prediction(topic, d, name, version, row, p.late, received, f)
            e = d.event
            lid = e.learner_id
            outputs.append(out)
            predicted.setdefault(lid, []).append(d.record)
            if d.event_time_ms is not None:
                end_to_end.append(produced - d.event_time_ms)
                e2e_learners.append(lid)
            if len(row) == 2 and e.response is not None:
                outcomes.append((row[1], e.response))
                outcome_learners.append(lid)
            p.learner.remember(window_record(d, seq), window, window_bytes)
        batch.predictions += len(flat)

    def _dead_letter(self, batch: Batch, record: Record, reason: str, detail: str) -> None:
        batch.outputs.append(messages.dead_letter(self.dead_letter_topic, record, reason, detail))
        batch.dead_letters[reason] += 1

    def drop_oversized(self, batch: Batch, limit: int) -> int:
        """Make every output of ``batch`` at most ``limit`` bytes (``output_nbytes``) before it is sent.

        A learner with a larger prediction or changelog record loses all its outputs of the batch and
        its staged state; each event it predicted becomes an ``output_too_large`` dead letter instead.
        A larger dead letter keeps fewer original bytes. Returns how many learners were dropped."""
        too_large: dict[bytes, tuple[str, int]] = {}  # learner key -> (topic, size) of its first oversized output
        for o in batch.outputs:
            if o.topic != self.dead_letter_topic and o.key not in too_large and (size := output_nbytes(o)) > limit:
                too_large[o.key] = (o.topic, size)
        if too_large:
            self._drop_learners(batch, too_large, limit)
        for i, o in enumerate(batch.outputs):
            if o.topic == self.dead_letter_topic and (size := output_nbytes(o)) > limit:
                batch.outputs[i] = _shrunk_dead_letter(o, size - limit)
        return len(too_large)

    def _drop_learners(self, batch: Batch, too_large: dict[bytes, tuple[str, int]], limit: int) -> None:
        learners = {lid.encode(): lid for lid in batch.predicted}
        assert set(too_large) <= set(learners), "an oversized output that belongs to no learner of the batch"
        dropped = {learners[key] for key in too_large}
        batch.outputs = [o for o in batch.outputs if o.topic == self.dead_letter_topic or o.key not in too_large]
        batch.staged = [st for st in batch.staged if st.learner_id not in dropped]
        for key, (topic, size) in too_large.items():
            lid = learners[key]
            detail = (f"learner {lid[:200]!r}: its record for {topic} would take {size} bytes, over the "
                      f"{limit}-byte limit (engine.max_output_record_bytes); its events of this batch are "
                      f"dead-lettered and its state is kept as it was")
            for rec in batch.predicted.pop(lid):
                self._dead_letter(batch, rec, "output_too_large", detail)
                batch.predictions -= 1
        (e2e_learners, outcome_learners), keep = batch.metric_learners, lambda lid: lid not in dropped
        batch.end_to_end_ms = [x for x, lid in zip(batch.end_to_end_ms, e2e_learners) if keep(lid)]
        batch.outcomes = [x for x, lid in zip(batch.outcomes, outcome_learners) if keep(lid)]
        batch.metric_learners = ([lid for lid in e2e_learners if keep(lid)],
                                 [lid for lid in outcome_learners if keep(lid)])


def _shrunk_dead_letter(o: Output, excess: int) -> Output:
    """``o`` (a DeadLetter) with at least ``excess`` fewer bytes: less of its original record (and no key,
    if the key alone is too large)."""
    msg = json.loads(o.value)
    original = base64.b64decode(msg["original"])
    keep = max(0, len(original) - (excess + 300) * 3 // 4 - 3)
    msg["original"] = base64.b64encode(original[:keep]).decode()
    msg["detail"] = (msg["detail"][:1000] + f" [original truncated to its first {keep} of {len(original)} bytes "
                     f"to fit the output limit; the full record is at its source offset]")
    value = json.dumps(msg, separators=(",", ":"), ensure_ascii=False).encode()
    return Output(o.topic, o.key if len(value) <= len(o.value) - excess else None, value)
