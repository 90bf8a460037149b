"""Training histories streamed from the archive, in batches, within a memory budget.

For archives larger than memory: the training window (events < C) is read learner by learner
(``ktstream.data.columnar``: DuckDB sorts within its own memory limit), each learner's history encoded as
arrays, cut into segments, and held in a buffer of at most about ``budget_events`` positions; each full
buffer is batched as the trainer batches a list (learners of similar length, shuffled) and handed on.
Memory is the buffer's plus DuckDB's limit, whatever the archive's size. With a budget larger than the
training window there is one buffer, and the batches are exactly those of the in-memory list.

Every buffer is checked by ``assert_before`` (nothing at or after C) before any of it is batched.

Iterated, the source yields each learner's whole training history (no segments), one archive pass per
iteration: what the leakage gate's data checks read when a fine-tuning cycle streams its training window.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Callable, Iterator

import numpy as np
import pyarrow as pa

from ktstream.data.columnar import ScanConfig, connect, encode_table, learner_tables, scan
from ktstream.data.histories import LearnerHistory, count_before, part
from ktstream.data.vocab import Vocabulary
from ktstream.finetune.windows import assert_before
from ktstream.training.trainer import _batches


class ArchiveTrainingData:
    """The training window (< ``cutoff_ms``) of an archive as a `BatchSource` for the trainer, and as a
    re-iterable stream of whole training histories."""

    def __init__(self, folder: str | Path, cutoff_ms: int, items: Vocabulary, concepts: Vocabulary,
                 segment: int | None = 200, budget_events: int = 2_000_000, cfg: ScanConfig | None = None,
                 table_events: int = 500_000, events: int | None = None):
        assert budget_events > 0 and table_events > 0, "budgets must be positive"
        self.folder, self.cutoff_ms, self.items, self.concepts = Path(folder), cutoff_ms, items, concepts
        self.segment, self.budget_events, self.cfg, self.table_events = segment, budget_events, cfg, table_events
        self.events = events  # positions before the cutoff, when the caller has counted them
        self.per_pass: Callable[[], Callable[[LearnerHistory], LearnerHistory]] | None = None

    def with_segment(self, segment: int | None) -> "ArchiveTrainingData":
        """The same window cut into pieces of ``segment`` positions when batched."""
        out = copy.copy(self)
        out.segment = segment
        return out

    def mapped(self, per_pass: Callable[[], Callable[[LearnerHistory], LearnerHistory]]) -> "ArchiveTrainingData":
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

    def _histories(self) -> Iterator[LearnerHistory]:
        """Each learner's encoded history as one archive read gives it (events < C, and any later ones of
        the files it reads)."""
        reader = scan(self.folder, end_ms=self.cutoff_ms, order="learner", cfg=self.cfg, con=connect(self.cfg))
        items, concepts = pa.array(self.items.ids, pa.string()), pa.array(self.concepts.ids, pa.string())
        for table in learner_tables(reader, self.table_events):
            yield from encode_table(table, self.items, self.concepts, arrow_ids=True, item_values=items,
                                    concept_values=concepts)

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
        """The buffer in learner id order (the scan orders learners by group of files; a stable sort keeps
        each learner's segments in order), checked by ``assert_before``."""
        buffer.sort(key=lambda h: h.learner_id)
        assert_before(buffer, self.cutoff_ms, "training")
        return buffer

    def batches(self, batch_size: int, rng: np.random.Generator | None, tokens: int) -> Iterator[list[LearnerHistory]]:
        for buffer in self.buffers():
            yield from _batches(buffer, batch_size, rng, tokens)
