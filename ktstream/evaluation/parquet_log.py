"""A canonical Parquet event log for the time-ordered protocol, read in columns.

``ktstream evaluate prequential --events FILE.parquet`` on a log of tens of millions of events cannot
afford one Python dict per event (about 800 bytes each), nor every learner's history held as arrays
(about 70 bytes per event). `ParquetLog` answers what the protocol asks of the log with DuckDB and Arrow:
the event-time quantiles that place C1 and C0, the vocabularies of the training window (ids in order of
first appearance in the log, as ``Vocabulary.build`` over the records gives them) and the split files of
the run folder (written by DuckDB, rows in log order). `LogHistories` reads every learner's history as
arrays (``columnar.scan_log`` ordered, ``encoded_tables`` encoded) again on each iteration, a table of whole
learners at a time; `LogTrainingData` cuts the training window (events < C1) out of each such pass in
buffers of a set number of positions, as a fine-tuning cycle streams its archive. So the protocol holds
one training buffer and the histories of the learners with events at or after C1 (the selection and
test windows score only those), not the log. DuckDB's memory, up to the configured limit, is held only
while a query runs: each runs on a connection of its own.

Everything here equals the record path's result on the same log (with one training buffer, the very
batches): tests/evaluation/test_parquet_log.py runs both.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import islice
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ktstream.data.columnar import ArrowIds, ScanConfig, _files_sql, connect, encoded_tables, scan_log
from ktstream.data.histories import LearnerHistory
from ktstream.data.vocab import Vocabulary
from ktstream.training.streamed import StreamedTrainingData


class ParquetLog:
    """One or more canonical Parquet logs read as one stream (file order, then row order)."""

    def __init__(self, paths: Sequence[str | Path], cfg: ScanConfig | None = None):
        self.paths = [Path(p) for p in paths]
        bad = [p.name for p in self.paths if p.suffix != ".parquet"]
        if bad:
            raise ValueError(f"ParquetLog reads Parquet event logs only, not {', '.join(bad)}")
        self.cfg = cfg or ScanConfig()
        self._src = _files_sql(self.paths)

    def _query(self, sql: str) -> list[tuple]:
        """Rows of one query, on a connection of its own (closed after: DuckDB keeps the memory of its
        sorts until its connection closes)."""
        with connect(self.cfg) as con:
            return con.execute(sql).fetchall()

    def _one(self, sql: str):
        return self._query(sql)[0]

    def counts(self) -> tuple[int, int]:
        """(events, events without an event time)."""
        n, undated = self._one(f"SELECT count(*), count(*) FILTER (WHERE event_time IS NULL) FROM {self._src}")
        return int(n), int(undated)

    def learners(self) -> int:
        """How many learners the log holds."""
        return int(self._one(f"SELECT count(DISTINCT learner_id) FROM {self._src}")[0])

    def time_quantiles(self, qs: Sequence[float]) -> list[int]:
        """``int(np.quantile(times, q))`` for each q (linear interpolation), over the dated events."""
        values = self._one(f"SELECT {', '.join(f'quantile_cont(event_time, {float(q)!r})' for q in qs)} "
                           f"FROM {self._src} WHERE event_time IS NOT NULL")
        return [int(v) for v in values]

    def vocabularies(self, before_ms: int | None = None) -> tuple[Vocabulary, Vocabulary]:
        """Item and concept ids of the events before ``before_ms`` (all: None) in order of first appearance
        in the log (a concept list in its own order)."""
        where = "" if before_ms is None else f"WHERE event_time < {int(before_ms)}"
        rows = f"SELECT *, file_index AS _f, file_row_number AS _r FROM {self._src} {where}"
        items = self._query(f"SELECT item_id FROM ({rows}) GROUP BY item_id ORDER BY min((_f, _r))")
        concepts = self._query(
            f"SELECT c FROM (SELECT unnest(concept_ids) AS c, generate_subscripts(concept_ids, 1) AS i, _f, _r "
            f"FROM ({rows})) GROUP BY c ORDER BY min((_f, _r, i))")
        return Vocabulary([r[0] for r in items]), Vocabulary([r[0] for r in concepts])

    def histories(self, items: Vocabulary, concepts: Vocabulary, table_events: int = 500_000) -> list[LearnerHistory]:
        """Every learner's history (learner id order; per learner by event time, ``seq``, log order), encoded
        with ``items`` and ``concepts``, built a table of whole learners at a time."""
        return list(LogHistories(self, (items, concepts), table_events=table_events))

    def write_split(self, path: Path, start_ms: int | None, end_ms: int | None,
                    responses: Path | None = None) -> None:
        """The events in [start_ms, end_ms) to ``path`` (Parquet, log order); ``responses`` (a Parquet file of
        learner_id, event_id, response: `write_responses`) replaces their responses (the coin flips of a
        random-label run)."""
        keep = [f"event_time >= {int(start_ms)}" if start_ms is not None else "true",
                f"event_time < {int(end_ms)}" if end_ms is not None else "true"]
        rows = (f"SELECT * EXCLUDE (file_row_number), file_index AS _f, file_row_number AS _r FROM {self._src} "
                f"WHERE {' AND '.join(keep)}")
        with connect(self.cfg) as con:
            if responses is not None:
                rows = (f"SELECT l.* REPLACE (f.response::SMALLINT AS response) FROM ({rows}) l "
                        f"JOIN {_files_sql([responses], False)} f USING (learner_id, event_id)")
            quoted = str(path).replace("'", "''")
            con.execute(f"COPY (SELECT * EXCLUDE (_f, _r) FROM ({rows}) ORDER BY _f, _r) TO '{quoted}' "
                        f"(FORMAT parquet)")


Relabel = Callable[[], Callable[[list[LearnerHistory]], list[LearnerHistory]]]


class LogHistories:
    """Every learner's whole history in a log, read again from it on each iteration (learner id order):
    encoded with ``vocab`` (items, concepts); with ``relabel``, each table of learners passed through
    ``relabel()``, called once a pass (so a function that draws from a generator draws the same on every
    pass: ``random_labels.coin_flips_per_pass``), while encoded with ``vocab``; then moved to ``target``'s
    vocabularies (`recode`)."""

    def __init__(self, log: ParquetLog, vocab: tuple[Vocabulary, Vocabulary],
                 target: tuple[Vocabulary, Vocabulary] | None = None, relabel: Relabel | None = None,
                 table_events: int = 500_000):
        self.log, self.vocab, self.target = log, vocab, target
        self.relabel, self.table_events = relabel, table_events

    def __iter__(self) -> Iterator[LearnerHistory]:
        each = self.relabel() if self.relabel is not None else None
        with connect(self.log.cfg) as con:
            for hs in encoded_tables(scan_log(self.log.paths, self.log.cfg, con), *self.vocab, self.table_events):
                if each is not None:
                    hs = each(hs)
                yield from hs if self.target is None else recode(hs, self.vocab, self.target)


class LogTrainingData(StreamedTrainingData):
    """The training window (events < ``cutoff_ms``) of `LogHistories` as a `BatchSource` for the trainer:
    each pass reads the log again and hands on buffers of about ``budget_events`` positions, whole
    histories (no segments), each checked by ``assert_before``."""

    def __init__(self, histories: LogHistories, cutoff_ms: int, budget_events: int = 2_000_000):
        super().__init__(cutoff_ms, budget_events)
        self.source = histories

    def _histories(self) -> Iterator[LearnerHistory]:
        return iter(self.source)


def write_responses(histories: Iterable[LearnerHistory], path: Path, learners: int = 10_000) -> None:
    """(learner_id, event_id, response) of every event of ``histories`` to a Parquet file for
    `ParquetLog.write_split`, ``learners`` histories at a time (a streamed log is never held)."""
    schema = pa.schema([("learner_id", pa.string()), ("event_id", pa.string()), ("response", pa.int64())])
    it = iter(histories)
    with pq.ParquetWriter(str(path), schema) as writer:
        while chunk := list(islice(it, learners)):
            writer.write_table(response_table(chunk).cast(schema))


def response_table(histories: Sequence[LearnerHistory]) -> pa.Table:
    """(learner_id, event_id, response) of every event of ``histories``, for `ParquetLog.write_split`."""
    lengths = np.array([len(h) for h in histories], np.int64)
    names = pa.array([h.learner_id for h in histories], pa.string())
    ids = [h.event_ids.arrow() if isinstance(h.event_ids, ArrowIds) else pa.array(list(h.event_ids), pa.string())
           for h in histories]
    return pa.table({"learner_id": names.take(pa.array(np.repeat(np.arange(len(histories)), lengths))),
                     "event_id": pa.concat_arrays(ids) if ids else pa.array([], pa.string()),
                     "response": np.concatenate([h.responses for h in histories] or [np.zeros(0, np.int64)])})


def recode(histories: Sequence[LearnerHistory], source: tuple[Vocabulary, Vocabulary],
           target: tuple[Vocabulary, Vocabulary]) -> list[LearnerHistory]:
    """The same histories with item and concept indices of ``source``'s vocabularies moved to ``target``'s
    (ids ``target`` lacks become unknown): one scan serves every vocabulary the protocol needs."""
    maps = [np.array([0, 1] + t.encode_all(s.ids), np.int64) for s, t in zip(source, target)]
    return [LearnerHistory(h.learner_id, maps[0][h.items], maps[1][h.concepts], h.responses, h.times, h.step_start,
                           h.event_ids) for h in histories]
