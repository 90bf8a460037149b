"""Training histories too large to hold, read again from their source on every pass, in buffers.

A `StreamedTrainingData` is the training window (events < ``cutoff_ms``) of a source that a subclass
reads in `_histories` (an archive, a large event log): each learner's events before the cutoff are
cut into segments and held in a buffer of about ``budget_events`` positions; each full buffer is put in
learner id order, checked by ``assert_before`` (nothing at or after the cutoff) and batched as the
trainer batches a list (learners of similar length, shuffled). Memory is one buffer plus what the
source's read needs, whatever the source's size. With a budget larger than the window there is one
buffer, and the batches are exactly those of the same histories held in a list.

Iterated, the source yields each learner's whole training history (no segments), one read per
iteration: what the leakage gate's data checks and the protocols' counts read.
"""

from __future__ import annotations

import copy
from typing import Callable, Iterator

import numpy as np

from ktstream.data.histories import LearnerHistory, assert_before, count_before, part
from ktstream.training.trainer import _batches


class StreamedTrainingData:
    """The training window of a source read by `_histories`, as a `BatchSource` and as a re-iterable
    stream of whole training histories. Subclasses set ``cutoff_ms``, ``budget_events`` and the
    fields below in their constructor and define `_histories`."""

    segment: int | None = None
    events: int | None = None  # positions before the cutoff, when counted
    per_pass: Callable[[], Callable[[LearnerHistory], LearnerHistory]] | None = None

    def __init__(self, cutoff_ms: int, budget_events: int, segment: int | None = None, events: int | None = None):
        assert budget_events > 0, "budgets must be positive"
        self.cutoff_ms, self.budget_events, self.segment, self.events = cutoff_ms, budget_events, segment, events

    def _histories(self) -> Iterator[LearnerHistory]:
        """Each learner's history as one read of the source gives it (events before the cutoff, and any
        later ones the read holds)."""
        raise NotImplementedError  # the source's read: subclasses

    def with_segment(self, segment: int | None) -> "StreamedTrainingData":
        """The same window cut into pieces of ``segment`` positions when batched."""
        out = copy.copy(self)
        out.segment = segment
        return out

    def mapped(self, per_pass: Callable[[], Callable[[LearnerHistory], LearnerHistory]]) -> "StreamedTrainingData":
        """The same window with every whole history passed through ``per_pass()`` (called at the start of each
        pass, so a function that draws from a generator draws the same on every pass) before it is cut."""
        out = copy.copy(self)
        out.per_pass = per_pass
        return out

    def __iter__(self) -> Iterator[LearnerHistory]:
        for buffer in self.with_segment(None).buffers():
            yield from buffer

    def __bool__(self) -> bool:
        if self.events is None:
            self.events = sum(len(h) for h in self)
        return self.events > 0

    def _segments(self, h: LearnerHistory) -> list[LearnerHistory]:
        if self.segment is None or len(h) <= self.segment:
            return [h]
        return [h.slice(s, s + self.segment) for s in range(0, len(h), self.segment)]  # as finetune.segments

    def buffers(self) -> Iterator[list[LearnerHistory]]:
        """Lists of training segments, each about ``budget_events`` positions, in learner id order."""
        buffer: list[LearnerHistory] = []
        size = 0
        each = self.per_pass() if self.per_pass is not None else None
        for h in self._histories():
            n = count_before(h, self.cutoff_ms)
            if n == 0:
                continue
            whole = h if n == len(h) else part(h, 0, n)
            buffer += self._segments(each(whole) if each is not None else whole)
            size += n
            if size >= self.budget_events:
                yield self._checked(buffer)
                buffer, size = [], 0
        if buffer:
            yield self._checked(buffer)

    def _checked(self, buffer: list[LearnerHistory]) -> list[LearnerHistory]:
        """The buffer in learner id order (a source may order learners by group; a stable sort keeps each
        learner's segments in order), checked by ``assert_before``."""
        buffer.sort(key=lambda h: h.learner_id)
        assert_before(buffer, self.cutoff_ms, "training")
        return buffer

    def batches(self, batch_size: int, rng: np.random.Generator | None, tokens: int) -> Iterator[list[LearnerHistory]]:
        for buffer in self.buffers():
            yield from _batches(buffer, batch_size, rng, tokens)
