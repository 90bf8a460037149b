"""Reading the k-lines-per-learner text formats of the DKT / DKVMN / AKT benchmarks.

These files give each learner a block of comma-separated lines (length or
learner id, then one line per field, one value per response). They carry no
header and no learner key, so the only checks possible are structural: the
lines of a block have equal lengths, and match the declared length where there
is one. Those checks are made here once, with the file and line in every error.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

from connectors.datasets.exceptions import DatasetFormatError


def split_line(line: str) -> list[str]:
    """Comma-separated values; the trailing comma of the DKT paper's files is ignored.

    >>> split_line("7,9,7,\\n")
    ['7', '9', '7']
    >>> split_line("\\n")
    []
    """
    line = line.strip().rstrip(",")
    return [v.strip() for v in line.split(",")] if line else []


def read_blocks(path: Path, n_lines: int) -> Iterator[tuple[int, list[list[str]]]]:
    """Yield ``(line number of the block's first line, its n_lines split lines)``, streaming.

    Blank lines are skipped between blocks only: inside a block a blank line is
    a field with no values (a learner with zero responses), not a separator.
    All value lines of a block must have the same number of values.
    """
    with open(path, encoding="utf-8") as fh:
        block: list[list[str]] = []
        start = 0
        for lineno, line in enumerate(fh, 1):
            if not block:
                if not line.strip():
                    continue
                start = lineno
            block.append(split_line(line))
            if len(block) == n_lines:
                lengths = {len(values) for values in block[1:]}
                if len(lengths) > 1:
                    raise DatasetFormatError(
                        f"{path}:{start}: the value lines of this record have different lengths "
                        f"{[len(v) for v in block[1:]]}; expected {n_lines} lines per learner")
                yield start, block
                block = []
        if block:
            raise DatasetFormatError(
                f"{path}:{start}: the file ends inside a record ({len(block)} of {n_lines} lines)")


def declared_length(block: list[list[str]], path: Path, start: int) -> int:
    """Check the first line (a single count) against the number of values that follow."""
    header = block[0]
    if len(header) != 1 or not header[0].isdigit():
        raise DatasetFormatError(f"{path}:{start}: expected a sequence length, got {','.join(header)!r}")
    n = int(header[0])
    if n != len(block[1]):
        raise DatasetFormatError(f"{path}:{start}: length line says {n} but the record has {len(block[1])} values")
    return n
