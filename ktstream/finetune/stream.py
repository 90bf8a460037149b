"""Training histories streamed from the archive, in batches, within a memory budget.

For archives larger than memory: the training window (events < C) is read learner by learner
(``ktstream.data.columnar``: DuckDB sorts within its own memory limit), each learner's history encoded as
arrays, cut into segments, and held in a buffer of at most about ``budget_events`` positions; each full
buffer is batched as the trainer batches a list (learners of similar length, shuffled) and handed on.
Memory is the buffer's plus DuckDB's limit, whatever the archive's size. With a budget larger than the
training window there is one buffer, and the batches are exactly those of the in-memory list.

Every buffer is checked by ``assert_before`` (nothing at or after C) before any of it is batched.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import numpy as np
import pyarrow as pa

from ktstream.data.columnar import ScanConfig, connect, encode_table, learner_tables, scan
from ktstream.data.histories import LearnerHistory, count_before, part
from ktstream.data.vocab import Vocabulary
from ktstream.finetune.windows import assert_before
from ktstream.training.trainer import _batches


class ArchiveTrainingData:
    """The training window (< ``cutoff_ms``) of an archive as a `BatchSource` for the trainer."""

    def __init__(self, folder: str | Path, cutoff_ms: int, items: Vocabulary, concepts: Vocabulary,
                 segment: int | None = 200, budget_events: int = 2_000_000, cfg: ScanConfig | None = None,
                 table_events: int = 500_000):
        assert budget_events > 0 and table_events > 0, "budgets must be positive"
        self.folder, self.cutoff_ms, self.items, self.concepts = Path(folder), cutoff_ms, items, concepts
        self.segment, self.budget_events, self.cfg, self.table_events = segment, budget_events, cfg, table_events

    def _segments(self, h: LearnerHistory) -> list[LearnerHistory]:
        if self.segment is None or len(h) <= self.segment:
            return [h]
        return [h.slice(s, s + self.segment) for s in range(0, len(h), self.segment)]  # as finetune.segments

    def buffers(self) -> Iterator[list[LearnerHistory]]:
        """Lists of training segments, each about ``budget_events`` positions, in learner id order."""
        reader = scan(self.folder, end_ms=self.cutoff_ms, order="learner", cfg=self.cfg, con=connect(self.cfg))
        items, concepts = pa.array(self.items.ids, pa.string()), pa.array(self.concepts.ids, pa.string())
        buffer: list[LearnerHistory] = []
        size = 0
        for table in learner_tables(reader, self.table_events):
            for h in encode_table(table, self.items, self.concepts, arrow_ids=True, item_values=items,
                                  concept_values=concepts):
                n = count_before(h, self.cutoff_ms)
                if n == 0:
                    continue
                parts = self._segments(h if n == len(h) else part(h, 0, n))
                buffer += parts
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
