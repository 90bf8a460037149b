"""One micro-batch, start to finish, without I/O: records -> outputs + staged learner states.

Steps (``Processor.process``):
1. decode and validate every record; failures become dead letters;
2. load the learners' committed states (cache, or the model's initial state)
   as *working copies*; the cache itself is only read; a state built by an
   earlier model version is rebuilt from its raw window (ktstream.engine.swap);
3. screen and plan waves (duplicates, late policy; ktstream.engine.batcher);
4. run the waves through the model (ktstream.engine.runner), building one
   prediction per kept event;
5. return a ``Batch``: outputs for the sink, the staged states, the offsets to
   commit and what the metrics need. Nothing is applied here: the engine makes
   the staged states current only after the sink flushed and the offsets were
   committed (ktstream.engine.engine).
"""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass, field

from ktstream.engine import messages
from ktstream.engine.batcher import LatePolicy, plan
from ktstream.engine.decode import Decoded, Rejected, decode
from ktstream.engine.learner import LearnerState
from ktstream.engine.records import Output, Record, TopicPartition
from ktstream.engine.runner import ModelRunner
from ktstream.engine.state_cache import StateCache
from ktstream.engine.swap import rebuild_learners, window_record


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


class Processor:
    def __init__(self, runner: ModelRunner, cache: StateCache, predictions_topic: str, dead_letter_topic: str,
                 late_policy: LatePolicy = "dead-letter", max_record_bytes: int = 65536, window: int = 200,
                 max_clock_skew_s: float = 300.0):
        self.runner, self.cache = runner, cache
        self.max_clock_skew_ms = int(max_clock_skew_s * 1000)  # later event times are dead-lettered as future
        self.predictions_topic, self.dead_letter_topic = predictions_topic, dead_letter_topic
        self.late_policy, self.max_record_bytes = late_policy, max_record_bytes
        self.window = window  # raw interactions kept per learner for rebuilding after a swap
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
        batch = Batch(received_ms=messages.now_ms(), records=len(records))
        valid: list[Decoded] = []
        for rec in records:
            batch.offsets[rec.tp] = max(batch.offsets.get(rec.tp, 0), rec.offset + 1)
            batch.first_offsets[rec.tp] = min(batch.first_offsets.get(rec.tp, rec.offset), rec.offset)
            d = decode(rec, self.max_record_bytes, batch.received_ms + self.max_clock_skew_ms)
            if isinstance(d, Decoded) and d.event.response is not None \
                    and d.event.response >= self.runner.model.n_categories:
                d = Rejected(rec, "schema", f"response: {d.event.response} is outside 0..."
                             f"{self.runner.model.n_categories - 1} for this model")
            if isinstance(d, Rejected):
                self._dead_letter(batch, d.record, d.reason, d.detail)
            else:
                valid.append(d)
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
        for p, row, f, seq in zip(flat, probs.tolist(), fields, seqs):
            self._predict(batch, p.decoded, row, p.late, f)
            p.learner.remember(window_record(p.decoded, seq), self.window)
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

    def _predict(self, batch: Batch, d: Decoded, probs: list[float], late: bool, fields: dict | None) -> None:
        out, produced = messages.prediction(self.predictions_topic, d, self.runner.name, self.runner.version,
                                            probs, late, batch.received_ms, fields)
        batch.outputs.append(out)
        batch.predictions += 1
        if d.event_time_ms is not None:
            batch.end_to_end_ms.append(produced - d.event_time_ms)
        if len(probs) == 2 and d.event.response is not None:
            batch.outcomes.append((probs[1], d.event.response))

    def _dead_letter(self, batch: Batch, record: Record, reason: str, detail: str) -> None:
        batch.outputs.append(messages.dead_letter(self.dead_letter_topic, record, reason, detail))
        batch.dead_letters[reason] += 1
