"""Id vocabularies built from the training window only (invariant 5).

Index 0 is padding, index 1 is the unknown / cold-start id that every id first
seen after the training window maps to.

>>> v = Vocabulary.build(["q1", "q2", "q1"])
>>> v.encode("q2"), v.encode("never-seen"), len(v)
(3, 1, 4)
"""

from __future__ import annotations

from typing import Iterable

PAD, UNKNOWN = 0, 1


class Vocabulary:
    def __init__(self, ids: list[str]):
        self.ids = list(ids)
        self._index = {x: i + 2 for i, x in enumerate(self.ids)}

    @classmethod
    def build(cls, ids: Iterable[str]) -> "Vocabulary":
        seen: dict[str, None] = {}
        for x in ids:
            seen.setdefault(x, None)
        return cls(list(seen))

    def encode(self, x: str) -> int:
        return self._index.get(x, UNKNOWN)

    def encode_all(self, xs: Iterable[str]) -> list[int]:
        """``encode`` of each (the engine's hot path: one call per wave, not per id)."""
        get = self._index.get
        return [get(x, UNKNOWN) for x in xs]

    def __len__(self) -> int:
        return len(self.ids) + 2

    def __contains__(self, x: str) -> bool:
        return x in self._index

    def to_json(self) -> list[str]:
        return list(self.ids)

    @classmethod
    def from_json(cls, ids: list[str]) -> "Vocabulary":
        return cls(ids)
