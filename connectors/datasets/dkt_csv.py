"""The DKT paper's CSV (Piech et al. 2015, ``builder_train.csv`` / ``builder_test.csv``).

The same 3-line layout as DKVMN's (length / ids / responses) with a trailing
comma on the value lines and 0-based skill ids. The ids are skills, not
problems, so each interaction's item and concept are the skill id (kept
0-based, as in the file; ids are text in the event stream anyway).

Learners are ``f"{file_stem}:{record_index}"``; there are no timestamps
(``seq`` = position). The file keeps ASSISTments' one-row-per-skill repeats of
multi-skill problems (its 525,534 responses are the raw file's row count), and
without problem ids they cannot be merged: figures on this data are on rows as
given, which is what the DKT paper reported on.
"""

from __future__ import annotations

from typing import Any, Iterable, Iterator

from connectors.datasets.dkvmn import _file_events
from connectors.datasets.records import PathLike, as_paths
from connectors.datasets.stats import ConversionStats


def dkt_csv_events(inputs: PathLike | Iterable[PathLike],
                   stats: ConversionStats | None = None) -> Iterator[dict[str, Any]]:
    """Stream canonical event records from DKT-paper 3-line CSV files.

    Parameters
    ----------
    inputs
        One file or several, converted in the order given.
    stats
        Filled while the records are consumed.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "builder_test.csv"
    >>> _ = path.write_text("2\\n0,82,\\n1,0,\\n")
    >>> [(r["learner_id"], r["item_id"], r["concept_ids"], r["response"]) for r in dkt_csv_events(path)]
    [('builder_test:0', '0', ['0'], 1), ('builder_test:0', '82', ['82'], 0)]
    """
    stats = stats if stats is not None else ConversionStats("dkt-csv")
    for path in as_paths(inputs):
        yield from _file_events(path, None, stats)
