"""The model runner: a micro-batch's waves of events -> predictions, and the learners' new states.

For a wave (each learner at most once) it stacks the learners' states into
one batch, encodes the events with the model's vocabularies (unknown ids ->
index 1), runs ``model.predict`` under ``torch.inference_mode()`` from the
state at the start of each event's step, and then ``model.update`` for the
events that carry a response. Prediction-only events leave the state alone.
The new states go into the learners' *working copies*; the cache only sees
them after the batch is committed (see ktstream.engine.engine).

Models whose update only appends what the interaction alone determines
(``KTModel.entries``: attention caches without encoder stacks) skip the model
call per wave: the waves append their entries, and afterwards every event is
predicted from the state it was queried with, in one call for the micro-batch
(states are never written once made, so each reads what it read in its wave).
Every model computes what it derives from the events alone (embeddings,
addressing) once per micro-batch (``KTModel.prepare``); each wave takes its rows.

A wave is run in chunks of at most ``STACK_BYTES`` of stacked state (windows
cut to the slots the learners fill: short histories make large chunks), each
stacked into buffers the runner reuses from chunk to chunk: a fresh (B, ...)
tensor per wave is a large allocation whose pages fault in on first touch
(measured: stacking 1,000 attention caches of 100 KB ran at 2.7 GB/s into a
new tensor, 8.8 GB/s into a reused one), and a chunk of this size stays in the
processor's cache from the stack through predict and update. Chunks are
independent: no prediction depends on its batch mates (invariant 1).

Letters: B learners in the wave, K response categories, C concepts per event.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ktstream.data.histories import NO_RESPONSE, Interactions
from ktstream.data.vocab import Vocabulary
from ktstream.engine.batcher import Planned
from ktstream.engine.learner import memory_nbytes, step_key
from ktstream.engine.messages import MAX_EXTRA_VALUES
from ktstream.models.base import KTModel, State, split_state

#: Most bytes of learner state stacked for one model call (see the module docstring).
STACK_BYTES = 8 << 20


class StackBuffer:
    """Grow-only destination memory for stacking per-learner states: the stacked state is a view of
    it, valid until the next ``stack``.

    ``tail`` (key -> L) cuts those keys to their last L entries along dim 1 (the slots of a window
    that any learner of the batch fills; see ``KTModel.filled_slots``). Those are copied through
    numpy; the others are one ``torch.cat`` each.
    """

    def __init__(self):
        self._buffers: dict[str, torch.Tensor] = {}

    def stack(self, states: list[State], tail: dict[str, int] | None = None) -> State:
        n, out = len(states), {}
        for key, first in states[0].items():
            shape = first.shape[1:]
            if tail and key in tail:
                shape = (tail[key], *shape[1:])
            need = n * math.prod(shape)
            buf = self._buffers.get(key)
            if buf is None or buf.numel() < need or buf.dtype != first.dtype or buf.device != first.device:
                buf = self._buffers[key] = first.new_empty(max(need, 1))
            out[key] = view = buf[:need].view(n, *shape)  # (B, ...), contiguous
            if shape == first.shape[1:]:
                torch.cat([s[key] for s in states], out=view)
            elif need:
                start = first.shape[1] - shape[0]
                np.concatenate([s[key].numpy()[:, start:] for s in states], out=view.numpy())
        return out


class ModelRunner:
    def __init__(self, model: KTModel, items: Vocabulary, concepts: Vocabulary, version: str,
                 describe: bool = True):
        self.model = model.eval()
        self.items, self.concepts, self.version = items, concepts, version
        # describe() costs a second read of the state (attention models): it can be switched off.
        self.describes = describe and type(model).describe is not KTModel.describe
        self._query_buffer, self._update_buffer = StackBuffer(), StackBuffer()
        self._initial: State | None = None

    @property
    def name(self) -> str:
        return self.model.name

    def initial_states(self, n: int) -> list[State]:
        """States of ``n`` learners with no history (leading dim 1 each): one state, shared. Nothing
        writes into a state (``update`` returns new tensors; an attention cache's in-place appends go
        only to buffers of its own), so a learner's first update replaces it, as any other."""
        if self._initial is None:
            with torch.inference_mode():
                self._initial = split_state(self.model.init_state(1))[0]
        return [self._initial] * n

    def encode(self, wave: list[Planned]) -> Interactions:
        """Events -> (B,) query/interaction tensors; times float64 epoch seconds, NaN if absent.

        Built as numpy arrays (``torch.tensor`` of a Python list costs several times more per call,
        and this runs once per wave) from the decoded event times (no datetime arithmetic here).
        """
        events = [p.decoded.event for p in wave]
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
        times = np.fromiter((math.nan if p.decoded.event_time_ms is None else p.decoded.event_time_ms / 1000.0
                             for p in wave), np.float64, len(wave))
        return Interactions(*map(torch.from_numpy, (items, concepts, responses, times)))

    def run(self, waves: list[list[Planned]]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Predict every event of the waves and apply the responses to the working states, wave
        after wave. Returns probs (N, K) and the model's ``describe`` extras (leading dim N), the
        events in wave order.

        When the model's state changes depend on the interactions alone (``KTModel.entries``:
        attention caches without encoder stacks), the waves only append those entries, and every
        event is then predicted from the state it was queried with, in one model call for the
        micro-batch instead of one per wave (a learner's several events in a micro-batch each
        make a wave; a wave's model call costs about a millisecond whatever its size).
        """
        flat = [p for wave in waves for p in wave]
        if not flat:
            return torch.empty(0, self.model.n_categories), {}
        with torch.inference_mode():
            query = self.model.prepare(self.encode(flat))  # what each wave would compute from its events alone
            entries = self.model.entries(query)
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
        window slots these learners fill (``KTModel.filled_slots``)."""
        first = states[0]
        if len(states) * memory_nbytes(first) <= STACK_BYTES:  # fits uncut (an arena row's bytes bound its stacked window)
            return len(states)
        tail = self.model.filled_slots(states) or {}
        per_learner = sum(t.nbytes * tail[k] // t.shape[1] if k in tail else t.nbytes for k, t in first.items())
        return max(1, STACK_BYTES // max(per_learner, 1))

    def _run_chunk(self, wave: list[Planned], query: Interactions) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        events = [p.decoded.event for p in wave]
        with torch.inference_mode():
            q_states = [p.learner.query_state(step_key(e.step_id, p.decoded.event_time_ms))
                        for p, e in zip(wave, events)]
            batch = self._stack(self._query_buffer, q_states, self.model.filled_slots(q_states))
            probs, extras = self._predict(batch, query)
            rows = [b for b, e in enumerate(events) if e.response is not None]
            new_states: list[State | None] = [None] * len(wave)
            if rows:
                same = len(rows) == len(wave) and all(q is p.learner.state for q, p in zip(q_states, wave))
                previous, current = [wave[b].learner.state for b in rows], batch
                if not same:  # the query states were not all the current ones: stack what update reads
                    current = self._stack(self._update_buffer, previous, self.model.filled_slots(previous, update=True))
                sub = query if len(rows) == len(wave) else query.take(torch.tensor(rows))
                for b, s in zip(rows, self.model.update_rows(current, sub, previous)):  # never buffer views
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
                built = self.model.append_entries([wave[b].learner.state for b in rows],
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
                batch = self._stack(self._query_buffer, chunk, self.model.filled_slots(chunk))
                parts.append(self._predict(batch, query.take(torch.from_numpy(order[i : i + size]))))
                i += size
        probs, extras = _concat(parts)
        inverse = torch.from_numpy(np.argsort(order))
        return probs[inverse], {k: v[inverse] for k, v in extras.items()}

    def _predict(self, batch: State, query: Interactions) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        if self.describes:
            return self.model.predict_described(batch, query, MAX_EXTRA_VALUES)  # (B, K), (B, ...)
        return self.model.predict(batch, query), {}

    def _applied(self, wave: list[Planned], new_states: list[State | None]) -> None:
        for p, s in zip(wave, new_states):
            d = p.decoded
            p.learner.applied(s, d.record.tp, d.record.offset, d.event.event_id, d.event_time_ms, p.late)
            p.learner.model_version = self.version

    def _stack(self, buffer: StackBuffer, states: list[State], tail: dict[str, int] | None) -> State:
        """The model's own stacking (states in its memory: ``KTModel.stack``), else views of ``buffer``."""
        stacked = self.model.stack(states, tail)
        return buffer.stack(states, tail) if stacked is None else stacked


def _rows(x: Interactions, start: int, stop: int) -> Interactions:
    return x if start == 0 and stop >= len(x) else x.take(slice(start, stop))


def _concat(parts: list[tuple[torch.Tensor, dict[str, torch.Tensor]]]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    if len(parts) == 1:
        return parts[0]
    return torch.cat([p for p, _ in parts]), {k: torch.cat([e[k] for _, e in parts]) for k in parts[0][1]}
