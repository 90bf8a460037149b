"""DKVMN's 3-line format: ``length`` / question ids / responses, one block per learner.

Used by the DKVMN, Deep-IRT and many later repositories for ASSISTments 2009
("assist2009_updated"), ASSISTments 2015, STATICS 2011 and FSAI-F1toF3.

What the format lacks, and what the converter does about it:

- No learner ids. A learner is named ``f"{file_stem}:{record_index}"`` (0-based
  block index in the file): stable for a given file, and distinct between the
  train and test files of a split. The same person in two files cannot be
  recognised, so pass either a split's files or the file they were cut from,
  not both.
- No timestamps. ``event_time`` is left out and ``seq`` is the position in the
  block; the order is the source's time order, but nothing time-based (gaps,
  cross-learner time splits) can be derived.
- One id per response, whose meaning depends on the data set: see
  `connectors.datasets.concept_maps`. By default ("auto") the data set's own map
  next to the file is used (STATICS: ``STATICS_qid_sid_sname``; FSAI:
  ``conceptname_question_id.csv``; the ASSISTments folders carry an identity
  ``*_qid_sid``), else the id is its own concept.
- Multi-skill problems. The ASSISTments 2009 copy repeats a multi-skill problem
  as consecutive rows (one per skill, same response), like the AKT copy where
  15.7% of rows are such repeats; without problem ids those rows cannot be told
  apart from genuine consecutive attempts, so they are kept as given. Use the
  AKT copy (format ``"akt"``), which merges them, for ASSISTments 2009.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

from connectors.datasets.concept_maps import resolve_concept_map
from connectors.datasets.multiline import declared_length, read_blocks
from connectors.datasets.records import PathLike, as_paths, check_concepts, event_record, fit_id, parse_response
from connectors.datasets.stats import ConversionStats


def dkvmn_events(inputs: PathLike | Iterable[PathLike], stats: ConversionStats | None = None, *,
                 concepts: str | PathLike | Mapping[str, list[str]] | None = "auto") -> Iterator[dict[str, Any]]:
    """Stream canonical event records from DKVMN 3-line files.

    Parameters
    ----------
    inputs
        One file or several, converted in the order given.
    stats
        Filled while the records are consumed (rows read, learners, ...).
    concepts
        Question -> concepts: ``"auto"`` (the data set's own map beside each
        input, else identity), ``None`` or ``"identity"`` (the id is the
        concept: right for the ASSISTments skill-level files), a path to a map
        file, or a mapping. A question missing from a map gets no concept and is
        counted in ``stats.notes["items_without_concept"]``.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (folder / "toy_train.csv").write_text("3\\n4,4,9\\n1,0,1\\n")
    >>> [(r["learner_id"], r["item_id"], r["concept_ids"], r["response"], r["seq"])
    ...  for r in dkvmn_events(folder / "toy_train.csv")]
    [('toy_train:0', '4', ['4'], 1, 0), ('toy_train:0', '4', ['4'], 0, 1), ('toy_train:0', '9', ['9'], 1, 2)]
    """
    stats = stats if stats is not None else ConversionStats("dkvmn")
    for path in as_paths(inputs):
        mapping, source = resolve_concept_map(concepts, path)
        stats.notes.setdefault("concept_map", {})[path.name] = source
        yield from _file_events(path, mapping, stats)


def _file_events(path: Path, mapping: dict[str, list[str]] | None, stats: ConversionStats,
                 learner_prefix: str | None = None) -> Iterator[dict[str, Any]]:
    """Events of one 3-line file (shared with the DKT paper's CSV, which has the same layout)."""
    prefix = learner_prefix if learner_prefix is not None else path.stem
    for index, (start, block) in enumerate(read_blocks(path, 3)):
        declared_length(block, path, start)
        learner = f"{prefix}:{index}"
        stats.start_learner(learner, f"{path}:{start}")
        questions, responses = block[1], block[2]
        where = f"{path}:{start} (record {index})"
        for pos, (q, r) in enumerate(zip(questions, responses)):
            stats.rows_in += 1
            if mapping is None:
                cids = [fit_id(q, stats)]
            else:
                cids = [fit_id(c, stats) for c in mapping.get(q, ())]
                if not cids:
                    stats.note("items_without_concept")
                check_concepts(cids, where)
            rec = event_record(f"{learner}:{pos}", learner, fit_id(q, stats), cids,
                               parse_response(r, where), seq=pos)
            stats.observe(rec)
            yield rec
