"""Question-to-concept maps that ship beside the DKVMN-format benchmark files.

The 3-line files hold one id per response. Whether that id is a skill
(ASSISTments 2009 "updated", ASSISTments 2015) or a question that belongs to a
skill (STATICS, FSAI) depends on the data set, and only the side files say
which. A converter therefore takes an explicit map, or finds the data set's own
map next to the input ("auto"), or uses the id itself as its concept.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Mapping

from connectors.datasets.exceptions import DatasetFormatError

ConceptMap = dict[str, list[str]]

# Side files searched by "auto", best first. A file name ending is matched when
# the input's stem starts with the part before it (several data sets may share a folder).
AUTO_MAP_FILES = ("conceptname_question_id.csv", "_qid_sid_sname", "_qid_sid")


def load_concept_map(path: str | Path) -> ConceptMap:
    """Read a question -> concepts map.

    Two layouts are understood:

    - FSAI's ``conceptname_question_id.csv``: CSV with a header
      ``dataset_question_id, question_id, concept_name``; the concept is the name
      (the file has no concept number).
    - DKVMN's ``*_qid_sid_sname`` / ``*_qid_sid``: tab-separated
      ``qid, skill id[, skill name]``, with or without a header; the concept is
      the skill id. A qid on several lines has several concepts.
    """
    path = Path(path)
    with open(path, encoding="utf-8-sig", newline="") as fh:
        first = fh.readline()
        fh.seek(0)
        reader = csv.reader(fh, delimiter="\t" if "\t" in first else ",")
        rows = [row for row in reader if row and any(v.strip() for v in row)]
    if not rows:
        raise DatasetFormatError(f"{path}: empty concept map")
    header = [v.strip() for v in rows[0]]
    if "dataset_question_id" in header and "concept_name" in header:
        q_col, c_col = header.index("dataset_question_id"), header.index("concept_name")
        rows = rows[1:]
    else:
        q_col, c_col = 0, 1
        if not header[0].isdigit():
            rows = rows[1:]
    mapping: ConceptMap = {}
    for i, row in enumerate(rows, 2):
        if len(row) <= max(q_col, c_col):
            raise DatasetFormatError(f"{path}: row {i} has {len(row)} fields, expected a question and a concept")
        q, c = row[q_col].strip(), row[c_col].strip()
        concepts = mapping.setdefault(q, [])
        if c and c not in concepts:
            concepts.append(c)
    return mapping


def find_concept_map(input_path: Path) -> Path | None:
    """The data set's own map file next to `input_path`, or None."""
    folder = input_path.parent
    for ending in AUTO_MAP_FILES:
        if not ending.startswith("_"):
            if (folder / ending).is_file():
                return folder / ending
            continue
        for candidate in sorted(folder.glob("*" + ending)):
            prefix = candidate.name[: -len(ending)]
            if input_path.stem.startswith(prefix):
                return candidate
    return None


def resolve_concept_map(concepts: str | Path | Mapping[str, list[str]] | None,
                        input_path: Path) -> tuple[ConceptMap | None, str]:
    """Turn the `concepts` option into a map (None = each id is its own concept) and a description."""
    if concepts is None or concepts == "identity":
        return None, "identity"
    if isinstance(concepts, Mapping):
        return {str(k): [str(c) for c in v] for k, v in concepts.items()}, "given mapping"
    if concepts == "auto":
        found = find_concept_map(input_path)
        return (load_concept_map(found), str(found)) if found else (None, "identity")
    return load_concept_map(concepts), str(concepts)


def load_concept_names(folder: str | Path) -> dict[str, str]:
    """Concept id -> the name the data set ships for it, from the side files in ``folder`` ({} if none).

    Understood: DKVMN's ``*_sname_sid`` (name, id) and ``*_sid_sname`` / ``*_qid_sid_sname`` (id[s], name;
    with or without a header) and pyKT/AKT's ``skill.json`` ({name: index}). Ids whose name is empty, or
    equal to the id, are left out: a report then shows the id alone.

    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp())
    >>> _ = (d / "toy_sname_sid").write_text("Circumference\\t31\\nRounding\\t38\\n")
    >>> load_concept_names(d)
    {'31': 'Circumference', '38': 'Rounding'}
    """
    folder = Path(folder)
    names: dict[str, str] = {}
    if (folder / "skill.json").is_file():
        import json

        names.update({str(index): str(name) for name, index in json.loads((folder / "skill.json").read_text(
            encoding="utf-8")).items()})
    for path in sorted(folder.glob("*_sname_sid")) + sorted(folder.glob("*_sid_sname")):
        name_first = path.name.endswith("_sname_sid")
        with open(path, encoding="utf-8-sig", newline="") as fh:
            for row in csv.reader(fh, delimiter="\t"):
                if len(row) < 2:
                    continue
                sid, name = (row[-1], row[0]) if name_first else (row[-2], row[-1])
                sid, name = sid.strip(), name.strip()
                if sid.isdigit() and name and name != sid:
                    names.setdefault(sid, name)
    return names
