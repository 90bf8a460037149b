"""The training window of an archive, streamed to the trainer in batches within a memory budget.

For archives larger than memory: the training window (events < C) is read learner by learner
(``ktstream.data.columnar``: DuckDB sorts within its own memory limit), each learner's history encoded as
arrays, and handed on in buffers of about ``budget_events`` positions (``ktstream.training.streamed``:
segments, buffers checked by ``assert_before``, batches as the trainer batches a list). Memory is the
buffer's plus DuckDB's limit, whatever the archive's size.

Iterated, the source yields each learner's whole training history (no segments), one archive pass per
iteration: what the leakage gate's data checks read when a fine-tuning cycle streams its training window.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

from ktstream.data.columnar import ScanConfig, connect, encoded_tables, scan
from ktstream.data.histories import LearnerHistory
from ktstream.data.vocab import Vocabulary
from ktstream.training.streamed import StreamedTrainingData


class ArchiveTrainingData(StreamedTrainingData):
    """The training window (< ``cutoff_ms``) of an archive as a `BatchSource` for the trainer, and as a
    re-iterable stream of whole training histories."""

    def __init__(self, folder: str | Path, cutoff_ms: int, items: Vocabulary, concepts: Vocabulary,
                 segment: int | None = 200, budget_events: int = 2_000_000, cfg: ScanConfig | None = None,
                 table_events: int = 500_000, events: int | None = None):
        assert table_events > 0, "budgets must be positive"
        super().__init__(cutoff_ms, budget_events, segment, events)
        self.folder, self.items, self.concepts = Path(folder), items, concepts
        self.cfg, self.table_events = cfg, table_events

    def _histories(self) -> Iterator[LearnerHistory]:
        reader = scan(self.folder, end_ms=self.cutoff_ms, order="learner", cfg=self.cfg, con=connect(self.cfg))
        for histories in encoded_tables(reader, self.items, self.concepts, self.table_events):
            yield from histories
