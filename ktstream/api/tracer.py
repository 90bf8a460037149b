"""Online knowledge tracing in River's style, on the engine's own serving path.

A ``Tracer`` keeps a state per learner and answers ``predict_one(event)`` (the probability of a correct
response, or of each category for an ordinal model) and ``learn_one(event)`` (apply the response), with
``predict_many`` / ``learn_many`` for batches. Events are dicts (or ``Event`` objects) of the event
schema; a prediction needs ``learner_id``, ``item_id`` and, where the model uses them, ``concept_ids``
and ``event_time``; learning needs the ``response`` too.

It runs what the engine runs, minus Kafka and durable state: each batch is laid out in waves by the
engine's micro-batcher (``ktstream.engine.batcher.plan``: a learner at most once per wave, in the
learner's order; late and repeated events screened) and the waves go through the engine's model
runner (``ktstream.serving.ModelRunner``: states stacked from the serving layer's memory, ``predict``
from the state at the start of the event's step, then ``update``). So a learner's events of one step
(same ``step_id``, or same event time) are all predicted from the state before that step, as in
training (invariant 1), and the tracer's predictions are the engine's (invariant 2).

Unlike the engine, which dead-letters them, a tracer raises ``TracerError`` on an event older than the
learner's last learned one (``late="apply"`` applies it, as the engine's late policy of that name
does), and on an ``event_id`` it has learned already; nothing of such a batch is applied.

>>> import ktstream, torch
>>> events = ktstream.simulate(n_learners=3, mean_length=8, seed=2)
>>> vocab = ktstream.Vocab.build(events)
>>> torch.manual_seed(0) and None
>>> model = ktstream.models.create("dkt", n_items=len(vocab.items), n_concepts=len(vocab.concepts), dim=8, hidden=8)
>>> tracer = Tracer(model.eval(), vocab)
>>> query = {"learner_id": "ann", "item_id": "q3", "concept_ids": ["c1"], "event_time": 1_700_000_000_000}
>>> p = tracer.predict_one(query)
>>> tracer.learn_one({**query, "response": 1})
>>> 0 < p < 1, tracer.learners
(True, ['ann'])
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Literal, Mapping, Sequence

import numpy as np
import torch

from ktstream.api.bundle import Vocab, check_pair
from ktstream.api.events import is_table, table_rows, to_event
from ktstream.core import LearnerState, Record
from ktstream.engine.batcher import plan
from ktstream.engine.decode import Decoded
from ktstream.exceptions import KTStreamError
from ktstream.models.base import KTModel
from ktstream.schema import Event
from ktstream.serving import ModelRunner, StackBuffer
from ktstream.serving.mastery import Probes

#: What the tracer does with an event older than the learner's last learned one.
LATE_POLICIES = ("raise", "apply")
#: The topic name the tracer's records carry (the runner records a source position per event).
TOPIC = "tracer"


class TracerError(KTStreamError, ValueError):
    """An event the tracer will not learn: late (under ``late="raise"``) or learned already."""


class Tracer:
    """Learners' states under one model, updated one event (or one batch) at a time; see the module docstring.

    Parameters
    ----------
    model, vocab
        The model and its vocabularies (``ktstream.train`` or ``ktstream.load`` gives both).
    version
        The model version the learners' states record (default: the family's name).
    late
        ``"raise"`` or ``"apply"``: what ``learn_*`` does with an event older than the learner's last one.
    """

    def __init__(self, model: KTModel, vocab: Vocab, *, version: str | None = None,
                 late: Literal["raise", "apply"] = "raise"):
        check_pair(model, vocab)
        if late not in LATE_POLICIES:
            raise ValueError(f"late must be one of {LATE_POLICIES}, got {late!r}")
        self.model, self.vocab, self.late = model.eval(), vocab, late
        self.version = version or model.name
        self._runner = ModelRunner(self.model, vocab.items, vocab.concepts, self.version, describe=False)
        self._learners: dict[str, LearnerState] = {}
        self._seen = 0  # events passed through so far: each gets the next source offset

    # -- River's interface ---------------------------------------------------------
    def predict_one(self, event: Mapping[str, Any] | Event) -> float | np.ndarray:
        """P(correct) of ``event`` for its learner now (ordinal models: the (K,) category probabilities);
        its response, if any, is not read and nothing changes."""
        out = self._out(self._run([event], learn=False))[0]
        return float(out) if out.ndim == 0 else out

    def learn_one(self, event: Mapping[str, Any] | Event) -> None:
        """Apply ``event``'s response to its learner's state (an event without one changes nothing)."""
        self._run([event], learn=True)

    def predict_many(self, events: Any) -> np.ndarray:
        """``predict_one`` of each event (a list of dicts or a table), all from the learners' states now:
        (N,) P(correct), or (N, K) for an ordinal model."""
        return self._out(self._run(_rows(events), learn=False))

    def learn_many(self, events: Any) -> np.ndarray:
        """Learn the events in order (each learner's in the order given) and return what the engine publishes:
        each event's prediction made before its own response was applied, as ``predict_many`` shapes them."""
        return self._out(self._run(_rows(events), learn=True))

    # -- learners ------------------------------------------------------------------
    @property
    def learners(self) -> list[str]:
        """Ids of the learners with a state, sorted."""
        return sorted(self._learners)

    def forget(self, learner_id: str) -> None:
        """Drop a learner's state: its next event starts from no history."""
        self._learners.pop(learner_id, None)

    def mastery(self, learner_id: str, concepts: Sequence[str] | None = None,
                probes: dict[str, list[str]] | None = None) -> dict[str, float]:
        """The learner's mastery of each concept now: the mean predicted score (P(correct); ordinal: expected
        score / (K-1)) over the concept's probe items (``vocab.probes``, or ``probes`` given), asked at the
        learner's last event time. ``concepts``: those only (default: every concept with probe items)."""
        probes = self.vocab.probes if probes is None else probes
        wanted = list(probes) if concepts is None else list(concepts)
        missing = [c for c in wanted if not probes.get(c)]
        if missing:
            raise ValueError(f"no probe items for concept(s) {missing[:5]}; give probes={{concept: [item ids]}}")
        learner = self._learners.get(learner_id)
        if learner is None:
            state = self._runner.initial_states(1)[0]
        else:
            state = self._runner.layout.stack([learner.state], None, StackBuffer())  # the stored state as tensors
        last = learner.last_event_time_ms if learner is not None else None
        values, _ = Probes(self.vocab.items, self.vocab.concepts, {c: probes[c] for c in wanted}).read(
            self.model, state, math.nan if last is None else last / 1000.0)
        return dict(zip(wanted, values.tolist()))

    # -- the engine's path ---------------------------------------------------------
    def _run(self, events: Iterable[Mapping[str, Any] | Event], learn: bool) -> torch.Tensor:
        decoded = [self._decode(e, learn) for e in events]
        if not decoded:
            return torch.empty(0, self.model.n_categories)
        initial = self._runner.initial_states(1)[0]
        learners = {}
        for d in decoded:
            lid = d.event.learner_id
            if lid not in learners:
                known = self._learners.get(lid)
                if known is None:
                    learners[lid] = LearnerState(lid, initial, self.version)
                else:  # a prediction works on a copy, dropped afterwards: it changes no state
                    learners[lid] = known if learn else known.copy()
        waves = plan(decoded, learners, "apply" if self.late == "apply" or not learn else "dead-letter")
        if waves.late or waves.repeated:
            d, why = (waves.late[0], "is older than the learner's last learned event (late=\"apply\" applies it)") \
                if waves.late else (waves.repeated[0], "has been learned already")
            raise TracerError(f"event {d.event.event_id!r} of learner {d.event.learner_id!r} {why}; nothing of this "
                              f"batch was learned")
        probs, _ = self._runner.run(waves.waves)
        if learn:
            self._learners.update(learners)
        position = {id(p.decoded): i for i, p in enumerate(p for wave in waves.waves for p in wave)}
        return probs[torch.tensor([position[id(d)] for d in decoded], dtype=torch.long)]

    def _decode(self, event: Mapping[str, Any] | Event, learn: bool) -> Decoded:
        self._seen += 1
        offset = self._seen
        generated = f"{TOPIC}-{offset}"
        ev = to_event(event, generated)
        if not learn:  # a query: its response unread, an id of its own (never a repeat of a learned event)
            ev = ev.model_copy(update={"response": None, "event_id": generated})
        return Decoded(Record(TOPIC, 0, offset, ev.learner_id.encode(), None), ev, ev.event_time_ms)

    def _out(self, probs: torch.Tensor) -> np.ndarray:
        probs = probs.double().numpy()
        return probs[:, 1] if self.model.n_categories == 2 else probs

    def __repr__(self) -> str:
        return f"Tracer({self.model.name!r}, version {self.version!r}, {len(self._learners)} learners)"


def _rows(events: Any) -> list:
    return table_rows(events) if is_table(events) else list(events)
