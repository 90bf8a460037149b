"""What a conversion did: rows read, interactions written, rows merged, and the counts to check.

Converters fill a `ConversionStats` while they stream, so the figures are final
once the record iterator is exhausted. The counts are the ones dataset
provenance notes give (learners, items, concepts, share correct), which is how
tests check a conversion against the source.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from connectors.datasets.exceptions import DatasetFormatError


@dataclass
class ConversionStats:
    """Counts of one conversion.

    Parameters
    ----------
    format
        Registry name of the source format (``"akt"``, ``"ednet-kt1"``, ...).
    rows_in
        Source rows (responses as the file gives them) that were read.
    interactions_out
        Canonical event records produced.
    rows_merged
        Source rows folded into the interaction before them (multi-skill
        problems stored as one row per skill). ``rows_in - rows_merged ==
        interactions_out`` whenever nothing else was dropped.
    duplicate_rows
        Rows kept although they repeat an earlier row of the same learner
        exactly (e.g. EdNet's duplicated (timestamp, question) rows).
    notes
        Format-specific counts and choices (concept map used, ids shortened,
        records skipped because they repeat another input file, ...).

    Examples
    --------
    >>> s = ConversionStats("demo")
    >>> s.observe({"learner_id": "u1", "item_id": "q1", "concept_ids": ["c"], "response": 1})
    >>> s.observe({"learner_id": "u1", "item_id": "q2", "concept_ids": [], "response": 0})
    >>> s.learners, s.items, s.concepts, s.share_correct
    (1, 2, 1, 0.5)
    """

    format: str
    rows_in: int = 0
    interactions_out: int = 0
    rows_merged: int = 0
    duplicate_rows: int = 0
    notes: dict[str, Any] = field(default_factory=dict)
    response_counts: dict[int, int] = field(default_factory=dict)
    _learners: set[str] = field(default_factory=set, init=False, repr=False, compare=False)
    _items: set[str] = field(default_factory=set, init=False, repr=False, compare=False)
    _concepts: set[str] = field(default_factory=set, init=False, repr=False, compare=False)

    def observe(self, record: dict[str, Any]) -> None:
        """Count one output record (converters call this for every record they yield)."""
        self.interactions_out += 1
        self._learners.add(record["learner_id"])
        self._items.add(record["item_id"])
        self._concepts.update(record["concept_ids"])
        r = record.get("response")
        if r is not None:
            self.response_counts[r] = self.response_counts.get(r, 0) + 1

    def start_learner(self, learner_id: str, where: str) -> None:
        """Refuse a learner whose events were already emitted.

        Per-learner order (invariant 3) needs each learner's events together and
        in order; a learner that shows up again in a later input file would
        restart its sequence, so that is an error, not a silent append.
        """
        if learner_id in self._learners:
            raise DatasetFormatError(
                f"{where}: learner {learner_id!r} was already converted from an earlier record or file; "
                "pass each learner's data once (e.g. not both a split file and the file it was cut from)")

    def note(self, key: str, increment: int = 1) -> None:
        """Add to a format-specific count in `notes`."""
        self.notes[key] = self.notes.get(key, 0) + increment

    @property
    def learners(self) -> int:
        return len(self._learners)

    @property
    def items(self) -> int:
        return len(self._items)

    @property
    def concepts(self) -> int:
        return len(self._concepts)

    @property
    def share_correct(self) -> float | None:
        """Share of output interactions with response 1 (binary sources), else None."""
        if not self.interactions_out or set(self.response_counts) - {0, 1}:
            return None
        return self.response_counts.get(1, 0) / self.interactions_out

    @property
    def share_rows_merged(self) -> float:
        return self.rows_merged / self.rows_in if self.rows_in else 0.0

    def as_dict(self) -> dict[str, Any]:
        """Plain dict for printing (the CLI prints it as JSON)."""
        share = self.share_correct
        return {
            "format": self.format,
            "rows_in": self.rows_in,
            "interactions_out": self.interactions_out,
            "rows_merged": self.rows_merged,
            "share_rows_merged": round(self.share_rows_merged, 4),
            "duplicate_rows": self.duplicate_rows,
            "learners": self.learners,
            "items": self.items,
            "concepts": self.concepts,
            "share_correct": None if share is None else round(share, 4),
            "response_counts": {str(k): v for k, v in sorted(self.response_counts.items())},
            "notes": dict(self.notes),
        }
