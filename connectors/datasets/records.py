"""Building canonical event records, shared by every converter.

Converters build the plain dict of `Event.to_record()` directly instead of
constructing a pydantic `Event` per row: the largest benchmark files hold
hundreds of thousands of rows and validation would dominate the run time. The
tests check that every record a converter writes is a fixed point of
`Event.model_validate(r).to_record()`, so the shortcut cannot drift from the schema.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any, Iterable, Sequence

from connectors.datasets.exceptions import DatasetFormatError
from ktstream.schema import MAX_CONCEPTS, MAX_ID_BYTES

PathLike = str | os.PathLike


def event_record(event_id: str, learner_id: str, item_id: str, concept_ids: list[str], response: int, *,
                 seq: int, event_time: int | None = None, step_id: str | None = None,
                 elapsed_ms: int | None = None, attributes: dict[str, Any] | None = None) -> dict[str, Any]:
    """One record in the exact form of `Event.to_record()`.

    Absent fields are left out (not ``None``) and an empty ``attributes`` dict
    is dropped, as `Event.to_record()` does, so a converted file and a file
    written from validated events are byte-identical.

    >>> event_record("e1", "u1", "q7", ["c3"], 1, seq=0)
    {'event_id': 'e1', 'learner_id': 'u1', 'item_id': 'q7', 'concept_ids': ['c3'], 'response': 1, 'seq': 0}
    """
    rec: dict[str, Any] = {"event_id": event_id, "learner_id": learner_id, "item_id": item_id,
                           "concept_ids": concept_ids, "response": response}
    if event_time is not None:
        rec["event_time"] = event_time
    rec["seq"] = seq
    if step_id is not None:
        rec["step_id"] = step_id
    if elapsed_ms is not None:
        rec["elapsed_ms"] = elapsed_ms
    if attributes:
        rec["attributes"] = attributes
    return rec


def fit_id(value: str, stats: Any | None = None) -> str:
    """Return `value` if it fits the schema's id size, else a stable shortened id.

    Some sources use long descriptions as ids (Cognitive Tutor KC names reach
    660 characters) while the event schema caps ids at 256 bytes of UTF-8. A
    long id keeps its first characters, so it stays readable, and ends in a hash
    of the whole text, so distinct ids stay distinct. The full text of every
    shortened id is kept in ``stats.notes["shortened_ids"]``.

    >>> fit_id("short")
    'short'
    >>> long = fit_id("x" * 300)
    >>> len(long), long[:3], long[-17]
    (256, 'xxx', '#')
    >>> len(fit_id("é" * 200).encode())
    255
    """
    encoded = value.encode("utf-8")
    if len(encoded) <= MAX_ID_BYTES:
        return value
    digest = hashlib.sha1(encoded).hexdigest()[:16]
    short = encoded[:MAX_ID_BYTES - 17].decode("utf-8", errors="ignore") + "#" + digest  # a cut character dropped
    if stats is not None:
        stats.notes.setdefault("shortened_ids", {})[short] = value
    return short


def check_concepts(concept_ids: list[str], where: str) -> list[str]:
    """Fail early, with the location, where an item carries more concepts than the schema allows."""
    if len(concept_ids) > MAX_CONCEPTS:
        raise DatasetFormatError(f"{where}: {len(concept_ids)} concepts on one interaction (at most {MAX_CONCEPTS})")
    return concept_ids


def as_paths(inputs: PathLike | Iterable[PathLike]) -> list[Path]:
    """One path or several, as a list of `Path` (a lone string is one path, not its characters)."""
    if isinstance(inputs, (str, os.PathLike)):
        return [Path(inputs)]
    paths = [Path(p) for p in inputs]
    if not paths:
        raise ValueError("no input files given")
    return paths


def parse_int(text: str, what: str, where: str) -> int:
    """An integer written as ``3`` or ``3.0`` (pandas exports write floats); anything else is an error.

    >>> parse_int("30000.0", "elapsed_time", "f.csv:2")
    30000
    """
    try:
        value = float(text)
    except ValueError:
        raise DatasetFormatError(f"{where}: {what} {text!r} is not a number") from None
    if not value.is_integer():
        raise DatasetFormatError(f"{where}: {what} {text!r} is not a whole number")
    return int(value)


_SIMPLE_INTS = {str(i): i for i in range(10)}


def parse_response(text: str, where: str, allowed: Sequence[int] = (0, 1)) -> int:
    """A response category, checked against the values the format allows."""
    value = _SIMPLE_INTS.get(text)  # the common case, without float parsing
    if value is None:
        value = parse_int(text.strip(), "response", where)
    if value not in allowed:
        raise DatasetFormatError(f"{where}: response {text!r} is not one of {list(allowed)}")
    return value


def clean_id(text: str) -> str:
    """An id as text: surrounding blanks removed, and ``12.0`` (a float-typed integer column) written ``12``.

    >>> clean_id(" 7.0 "), clean_id("b3442"), clean_id("2.5")
    ('7', 'b3442', '2.5')
    """
    text = text.strip()
    if text.endswith(".0") and text[:-2].lstrip("-").isdigit():
        return text[:-2]
    return text
