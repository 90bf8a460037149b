"""The model runner: a micro-batch's waves of events -> predictions, and the learners' new states.

For a wave (each learner at most once) it stacks the learners' states into
one batch, encodes the events with the model's vocabularies (unknown ids ->
index 1), runs ``model.predict`` under ``torch.inference_mode()`` from the
state at the start of each event's step, and then ``model.update`` for the
events that carry a response. Prediction-only events leave the state alone.
The new states go into the learners' *working copies*; the cache only sees
them after the batch is committed (see ktstream.engine.engine).

How the states are stacked, updated and kept is the model's layout's
(``layout_for``: dense tensors in rows of an arena, or key/value windows).
When an update only appends what the interaction alone determines
(``Layout.entries``: attention caches without encoder stacks) the runner skips
the model call per wave: the waves append their entries, and afterwards every
event is predicted from the state it was queried with, in one call for the
micro-batch (states are never written once made, so each reads what it read in
its wave). A family that derives something from the events alone (embeddings,
addressing) computes it once per micro-batch (``Prepares``); each wave takes its rows.

A wave is run in chunks of at most ``STACK_BYTES`` of stacked state (windows
cut to the slots the learners fill: short histories make large chunks), each
stacked into buffers the runner reuses from chunk to chunk (``StackBuffer``),
so that a chunk stays in the processor's cache from the stack through predict
and update. Chunks are
independent: no prediction depends on its batch mates (invariant 1).

Letters: B learners in the wave, K response categories, C concepts per event.
"""

from __future__ import annotations

import math
from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch

from ktstream.core import LearnerState, memory_nbytes, step_key
from ktstream.data.histories import NO_RESPONSE, Interactions
from ktstream.data.vocab import Vocabulary
from ktstream.models.base import KTModel, State
from ktstream.schema import MAX_EXTRA_VALUES
from ktstream.serving.layouts import layout_for
from ktstream.serving.stacking import StackBuffer, split_state

#: Most bytes of learner state stacked for one model call (see the module docstring).
STACK_BYTES = 8 << 20


class Planned(Protocol):
    """One event of a wave as the runner reads it (the engine's ``ktstream.engine.batcher.Planned``):
    the decoded event (``decoded.event``, ``decoded.record``, ``decoded.event_time_ms``), the learner's
    working state, and whether the event is late."""

    decoded: Any
    learner: LearnerState
    late: bool


@runtime_checkable
class Prepares(Protocol):
    """A family that computes what ``predict`` and ``update`` derive from the interactions alone
    (embeddings, addressing) once, for a whole micro-batch (``histories.Prepared``); the runner
    then hands each wave its rows (``Interactions.take``)."""

    def prepare(self, interactions: Interactions) -> Interactions: ...


class ModelRunner:
    """One model version serving waves of learners: see the module docstring."""

    def __init__(self, model: KTModel, items: Vocabulary, concepts: Vocabulary, version: str,
                 describe: bool = True):
        self.model = model.eval()
        self.items, self.concepts, self.version = items, concepts, version
        self.layout = layout_for(model)
        self.prepares = isinstance(model, Prepares)
        # the extras cost a second pass over the state's read (attention maps): they can be switched off
        self.describes = describe
        self._query_buffer, self._update_buffer = StackBuffer(), StackBuffer()
        self._initial: State | None = None

    @property
    def name(self) -> str:
        return self.model.name

    def initial_states(self, n: int) -> list[State]:
        """States of ``n`` learners with no history (leading dim 1 each): one state, shared. Nothing
        writes into a state (``update`` returns new tensors; a layout's appends go only to memory of
        its own), so a learner's first update replaces it, as any other."""
        if self._initial is None:
            with torch.inference_mode():
                self._initial = split_state(self.model.init_state(1))[0]
        return [self._initial] * n

    def encode(self, wave: list[Planned]) -> Interactions:
        return self.encode_decoded([p.decoded for p in wave])

    def encode_decoded(self, decoded: list[Any]) -> Interactions:
        """Decoded events (``decoded.event``, ``decoded.event_time_ms``) -> (B,) query/interaction tensors;
        times float64 epoch seconds, NaN if absent.

        Built as numpy arrays (``torch.tensor`` of a Python list costs several times more per call,
        and this runs once per wave) from the decoded event times (no datetime arithmetic here).
        """
        events = [d.event for d in decoded]
        counts = np.fromiter((len(e.concept_ids) for e in events), np.intp, len(events))
        flat = np.array(self.concepts.encode_all(c for e in events for c in e.concept_ids), np.int64)
        width = max(int(counts.max(initial=0)), 1)
        if flat.size == counts.size * width:  # every event has the same number of concepts
            concepts = flat.reshape(len(events), width)
        else:  # ragged: left-aligned, padded with 0
            concepts = np.zeros((len(events), width), np.int64)
            concepts[np.arange(width) < counts[:, None]] = flat
        items = np.array(self.items.encode_all(e.item_id for e in events), np.int64)
        responses = np.fromiter((NO_RESPONSE if e.response is None else e.response for e in events), np.int64,
                                len(events))
        times = np.fromiter((math.nan if d.event_time_ms is None else d.event_time_ms / 1000.0 for d in decoded),
                            np.float64, len(decoded))
        return Interactions(*map(torch.from_numpy, (items, concepts, responses, times)))

    def run(self, waves: list[list[Planned]]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Predict every event of the waves and apply the responses to the working states, wave
        after wave. Returns probs (N, K) and the model's ``describe`` extras (leading dim N), the
        events in wave order.

        When the model's state changes depend on the interactions alone (``Layout.entries``:
        attention caches without encoder stacks), the waves only append those entries, and every
        event is then predicted from the state it was queried with, in one model call for the
        micro-batch instead of one per wave (a learner's several events in a micro-batch each
        make a wave; a wave's model call costs about a millisecond whatever its size).
        """
        flat = [p for wave in waves for p in wave]
        if not flat:
            return torch.empty(0, self.model.n_categories), {}
        with torch.inference_mode():
            query = self.encode(flat)
            if self.prepares:
                query = self.model.prepare(query)  # what each wave would compute from its events alone
            entries = self.layout.entries(query)
            if entries is not None:
                return self._append_then_predict(waves, query, entries)
        parts, start = [], 0
        for wave in waves:
            parts.append(self._run_wave(wave, _rows(query, start, start + len(wave))))
            start += len(wave)
        return _concat(parts)

    def _run_wave(self, wave: list[Planned], query: Interactions) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        size = self._chunk_size([p.learner.state for p in wave])
        return _concat([self._run_chunk(wave[i : i + size], _rows(query, i, i + size))
                        for i in range(0, len(wave), size)])

    def _chunk_size(self, states: list[State]) -> int:
        """Learners per chunk: as many as ``STACK_BYTES`` of stacked state holds, counting only the
        window slots these learners fill (``Layout.filled_slots``)."""
        first = states[0]
        if len(states) * memory_nbytes(first) <= STACK_BYTES:  # fits uncut (a row's bytes bound its stacked window)
            return len(states)
        tail = self.layout.filled_slots(states) or {}
        per_learner = sum(t.nbytes * tail[k] // t.shape[1] if k in tail else t.nbytes for k, t in first.items())
        return max(1, STACK_BYTES // max(per_learner, 1))

    def _run_chunk(self, wave: list[Planned], query: Interactions) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        events = [p.decoded.event for p in wave]
        with torch.inference_mode():
            q_states = [p.learner.query_state(step_key(e.step_id, p.decoded.event_time_ms))
                        for p, e in zip(wave, events)]
            batch = self.layout.stack(q_states, self.layout.filled_slots(q_states), self._query_buffer)
            probs, extras = self._predict(batch, query)
            rows = [b for b, e in enumerate(events) if e.response is not None]
            new_states: list[State | None] = [None] * len(wave)
            if rows:
                same = len(rows) == len(wave) and all(q is p.learner.state for q, p in zip(q_states, wave))
                previous, current = [wave[b].learner.state for b in rows], batch
                if not same:  # the query states were not all the current ones: stack what update reads
                    tail = self.layout.filled_slots(previous, update=True)
                    current = self.layout.stack(previous, tail, self._update_buffer)
                sub = query if len(rows) == len(wave) else query.take(torch.tensor(rows))
                for b, s in zip(rows, self.layout.update_rows(current, sub, previous)):  # never buffer views
                    new_states[b] = s
        self._applied(wave, new_states)
        return probs, extras

    def _append_then_predict(self, waves: list[list[Planned]], query: Interactions,
                             entries: dict[str, np.ndarray]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """``run`` for models whose updates append ``entries`` (row i: event i of the waves in order)."""
        q_states: list[State] = []
        fill = np.empty(len(query), np.int64)  # responses applied before each query: orders the chunks
        start = 0
        for wave in waves:
            n, events = len(wave), [p.decoded.event for p in wave]
            q_states += [p.learner.query_state(step_key(e.step_id, p.decoded.event_time_ms))
                         for p, e in zip(wave, events)]
            fill[start : start + n] = [p.learner.responses for p in wave]
            rows = [b for b, e in enumerate(events) if e.response is not None]
            new_states: list[State | None] = [None] * n
            if rows:
                take = slice(start, start + n) if len(rows) == n else np.array(rows, np.intp) + start
                built = self.layout.append_entries([wave[b].learner.state for b in rows],
                                                  {k: a[take] for k, a in entries.items()})
                for b, s in zip(rows, built):
                    new_states[b] = s
            self._applied(wave, new_states)
            start += n
        # the learners with the fullest windows first, so that each chunk stacks about as many slots as it uses
        order = np.argsort(-fill, kind="stable")
        ordered = [q_states[i] for i in order]
        parts, i = [], 0
        with torch.inference_mode():
            while i < len(ordered):
                size = self._chunk_size(ordered[i:])
                chunk = ordered[i : i + size]
                batch = self.layout.stack(chunk, self.layout.filled_slots(chunk), self._query_buffer)
                parts.append(self._predict(batch, query.take(torch.from_numpy(order[i : i + size]))))
                i += size
        probs, extras = _concat(parts)
        inverse = torch.from_numpy(np.argsort(order))
        return probs[inverse], {k: v[inverse] for k, v in extras.items()}

    def _predict(self, batch: State, query: Interactions) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        if self.describes:
            return self.model.predict(batch, query, describe=True, max_values=MAX_EXTRA_VALUES)  # (B, K), (B, ...)
        return self.model.predict(batch, query), {}

    def _applied(self, wave: list[Planned], new_states: list[State | None]) -> None:
        version = self.version
        for p, s in zip(wave, new_states):
            d, learner = p.decoded, p.learner
            learner.applied(s, d.record.tp, d.record.offset, d.event.event_id, d.event_time_ms, p.late)
            learner.model_version = version


def _rows(x: Interactions, start: int, stop: int) -> Interactions:
    return x if start == 0 and stop >= len(x) else x.take(slice(start, stop))


def _concat(parts: list[tuple[torch.Tensor, dict[str, torch.Tensor]]]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    if len(parts) == 1:
        return parts[0]
    return torch.cat([p for p, _ in parts]), {k: torch.cat([e[k] for _, e in parts]) for k in parts[0][1]}
