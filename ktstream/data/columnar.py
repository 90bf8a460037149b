"""The event archive in columns: read, deduplicate, time-filter and order with DuckDB; histories as arrays.

No Python object per event: DuckDB reads the archive's Parquet files, drops repeats by (learner id,
event id) keeping the first in the archive's file order (date folder, then file name, then row), and
streams the rows back as Arrow record batches, in one of two orders:

- ``"time"``: event time, learner id, ``seq`` (absent: 0), file order; undated events last, in file order
  (``read_archive``'s order);
- ``"learner"``: each learner's rows together, in event time, ``seq``, file order (the per-learner order
  that ``ktstream.data.histories.group_by_learner`` gives the same dated records; undated ones, which
  histories for training never hold, come last). Learners come in id order within a group of files
  that no learner spans (`learner_groups`), groups in the order of their first file: an archive small
  enough to sort at once is one group, so all of it is in learner id order.

The time filter ``start_ms <= event_time < end_ms`` applies after the deduplication, as the record reader
does. DuckDB keeps within ``memory_limit`` by spilling sorts and hash tables to ``temp_directory``, so
the memory a scan needs is set by the configuration, not by the archive's size. The learner order sorts
one group of files at a time, so an archive whose learners are split among files (the archiver writes
one file per topic partition, and a learner's events are keyed to one partition) sorts in memory however
large it grows, instead of spilling. `learner_tables` cuts a
learner-ordered stream into tables of whole learners of about ``max_events`` rows, and `encode_table`
turns one such table into `LearnerHistory` arrays with vectorised Arrow and numpy operations.

>>> import tempfile, pathlib
>>> from ktstream.data.eventlog import write_parquet
>>> root = pathlib.Path(tempfile.mkdtemp()); (root / "event_date=1970-01-01").mkdir()
>>> recs = [{"event_id": e, "learner_id": "u", "item_id": "q", "event_time": t} for e, t in [("b", 5), ("a", 2)]]
>>> _ = write_parquet(recs + recs[:1], root / "event_date=1970-01-01" / "part-0.parquet")
>>> scan_table(root).column("event_id").to_pylist()
['a', 'b']
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime, timezone
from pathlib import Path
from typing import Iterator

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

from ktstream.data.eventlog import PARQUET_SCHEMA
from ktstream.data.histories import NO_RESPONSE, LearnerHistory
from ktstream.data.vocab import UNKNOWN, Vocabulary

PREFIX, UNDATED = "event_date=", "none"
DAY_MS = 86_400_000


def _day_start_ms(d: date) -> int:
    return int(datetime(d.year, d.month, d.day, tzinfo=timezone.utc).timestamp() * 1000)


def archive_files(folder: str | Path, start_ms: int | None = None, end_ms: int | None = None,
                  include_undated: bool = False) -> list[Path]:
    """Parquet files of the date folders overlapping [start_ms, end_ms), in date and name order."""
    out = []
    for sub in sorted(Path(folder).glob(f"{PREFIX}*")):
        value = sub.name[len(PREFIX):]
        if value == UNDATED:
            if include_undated:
                out += sorted(sub.glob("part-*.parquet"))
            continue
        lo = _day_start_ms(date.fromisoformat(value))
        if (start_ms is not None and lo + DAY_MS <= start_ms) or (end_ms is not None and lo >= end_ms):
            continue
        out += sorted(sub.glob("part-*.parquet"))  # hidden .part-*.tmp files are never matched
    return out


COLUMNS = ["learner_id", "event_id", "item_id", "concept_ids", "response", "event_time", "seq", "step_id"]
ORDERS = {
    "time": "event_time IS NULL, event_time, CASE WHEN event_time IS NULL THEN '' ELSE learner_id END, "
            "CASE WHEN event_time IS NULL THEN 0 ELSE coalesce(seq, 0) END, fidx, frow",
    "learner": "learner_id, event_time IS NULL, event_time, coalesce(seq, 0), fidx, frow",
}


SORT_ROW_BYTES = 250  # DuckDB's memory per archive row it sorts, with a margin (measured: 10M rows in 1.9 GB)
_UNITS = {"b": 1, "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9, "gb": 10**9, "t": 10**12,
          "tb": 10**12, "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def memory_bytes(limit: str) -> int:
    """Bytes of a DuckDB memory limit given as a size, such as ``"2GB"``, ``"2G"`` or ``"512 MiB"``."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-z]+)\s*", limit.lower())
    if not match or match.group(2) not in _UNITS:
        raise ValueError(f"memory limit {limit!r} is not a size such as 512MB or 2GB: give one, or set "
                         f"ScanConfig.sort_rows (the rows the learner order sorts at once)")
    return int(float(match.group(1)) * _UNITS[match.group(2)])


@dataclass(frozen=True)
class ScanConfig:
    """How much a scan may use: DuckDB's memory limit (it spills past it), threads, rows per Arrow batch,
    rows sorted at once in the learner order (None: as many as ``memory_limit`` holds)."""

    memory_limit: str = "2GB"
    threads: int | None = None  # None: one per core
    temp_directory: str | None = None  # None: a folder under the system's temporary directory
    batch_rows: int = 262_144
    sort_rows: int | None = None

    def __post_init__(self):
        if self.batch_rows < 1 or (self.sort_rows is not None and self.sort_rows < 1):
            raise ValueError(f"batch_rows and sort_rows must be positive, got {self.batch_rows}, {self.sort_rows}")
        if self.threads is not None and self.threads < 1:
            raise ValueError(f"threads must be positive (None: one per core), got {self.threads}")
        self.rows_sorted_at_once()  # a memory limit this cannot size groups by is refused here, not mid-scan

    def rows_sorted_at_once(self) -> int:
        return self.sort_rows or max(1, memory_bytes(self.memory_limit) // SORT_ROW_BYTES)


def connect(cfg: ScanConfig | None = None) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection bounded by ``cfg`` (spilling to its temporary directory)."""
    cfg = cfg or ScanConfig()
    con = duckdb.connect(config={"memory_limit": cfg.memory_limit,
                                 "temp_directory": cfg.temp_directory or os.path.join(tempfile.gettempdir(),
                                                                                      "ktstream-duckdb"),
                                 "preserve_insertion_order": False})
    con.execute("SET enable_progress_bar = false")
    if cfg.threads:
        con.execute(f"SET threads = {int(cfg.threads)}")
    return con


def _files_sql(files: Sequence[Path], file_row_number: bool = True) -> str:
    quoted = ", ".join("'" + str(p).replace("'", "''") + "'" for p in files)
    return f"read_parquet([{quoted}], file_row_number = {str(file_row_number).lower()})"


def learner_groups(con: duckdb.DuckDBPyConnection, files: Sequence[Path], max_rows: int) -> list[list[Path]]:
    """``files`` in groups that share no learner, each of at most ``max_rows`` rows where it can be, in
    file order: the units the learner order sorts one at a time.

    Files linked by a learner they both hold (directly or through other files) always go together: the
    groups are unions of the connected components of the graph of files and learners, taken in the order
    of each component's first file and packed up to ``max_rows`` (a larger component is a group alone,
    and DuckDB spills its sort). An archive of at most ``max_rows`` rows is one group (its size comes
    from the files' footers)."""
    files = list(files)
    if len(files) < 2 or con.execute(f"SELECT count(*) FROM {_files_sql(files, False)}").fetchall()[0][0] <= max_rows:
        return [files]
    pairs = con.sql(f"SELECT file_index AS f, hash(learner_id) AS l, count(*) AS n FROM {_files_sql(files, False)} "
                    f"GROUP BY ALL").fetchnumpy()
    f = pairs["f"].astype(np.int64)
    learners, learner = np.unique(pairs["l"], return_inverse=True)
    nodes = len(files) + len(learners)
    graph = coo_matrix((np.ones(len(f), np.int8), (f, len(files) + learner)), shape=(nodes, nodes))
    label = connected_components(graph, directed=False)[1][:len(files)]
    _, first, component = np.unique(label, return_index=True, return_inverse=True)
    component = np.argsort(np.argsort(first))[component]  # numbered in the order of their first file
    rows = np.bincount(component, weights=np.bincount(f, weights=pairs["n"], minlength=len(files)))
    group, k, size = np.empty(len(rows), np.int64), 0, 0
    for c, n in enumerate(rows.tolist()):  # consecutive components packed up to max_rows
        if size and size + n > max_rows:
            k, size = k + 1, 0
        group[c], size = k, size + n
    of_file = group[component].tolist()
    return [[p for p, g in zip(files, of_file) if g == i] for i in range(k + 1)]


def deduplicated_sql(files: Sequence[Path], start_ms: int | None = None, end_ms: int | None = None,
                     columns: Sequence[str] = COLUMNS) -> str:
    """SQL of the archive's distinct events (first copy in file order), then the time filter; with
    the file-order columns ``fidx`` and ``frow``."""
    cols = ", ".join(columns)
    keep = []
    if start_ms is not None:
        keep.append(f"event_time >= {int(start_ms)}")
    if end_ms is not None:
        keep.append(f"event_time < {int(end_ms)}")
    where = f"WHERE event_time IS NULL OR ({' AND '.join(keep)})" if keep else ""
    return (f"SELECT * FROM (SELECT {cols}, file_index AS fidx, file_row_number AS frow FROM {_files_sql(files)} "
            f"QUALIFY row_number() OVER (PARTITION BY learner_id, event_id ORDER BY file_index, file_row_number) = 1"
            f") {where}")


def scan(folder: str | Path, start_ms: int | None = None, end_ms: int | None = None,
         include_undated: bool = False, order: str = "time", cfg: ScanConfig | None = None,
         con: duckdb.DuckDBPyConnection | None = None, columns: Sequence[str] = COLUMNS) -> pa.RecordBatchReader:
    """The archive's distinct events in ``order`` ("time" or "learner") as a stream of Arrow batches of
    ``columns``."""
    if order not in ORDERS:
        raise ValueError(f"order must be one of {sorted(ORDERS)}, got {order!r}")
    cfg = cfg or ScanConfig()
    files = archive_files(folder, start_ms, end_ms, include_undated)
    if not files:
        return pa.RecordBatchReader.from_batches(pa.schema([PARQUET_SCHEMA.field(c) for c in columns]), [])
    con = con or connect(cfg)
    if order == "learner":
        return _scan_by_learner(con, learner_groups(con, files, cfg.rows_sorted_at_once()), start_ms, end_ms,
                                columns, cfg.batch_rows)
    needed = list(dict.fromkeys([*columns, "learner_id", "event_id", "event_time", "seq"]))
    sql = (f"SELECT {', '.join(columns)} FROM ({deduplicated_sql(files, start_ms, end_ms, needed)}) "
           f"ORDER BY {ORDERS[order]}")
    # a relation's reader keeps ORDER BY (DuckDB 2.0's DB-API result reader does not, without insertion order)
    return con.sql(sql).to_arrow_reader(cfg.batch_rows)


def _scan_by_learner(con: duckdb.DuckDBPyConnection, groups: Sequence[Sequence[Path]], start_ms: int | None,
                     end_ms: int | None, columns: Sequence[str], batch_rows: int) -> pa.RecordBatchReader:
    """The "learner" order with the deduplication after the sort: DuckDB sorts every row of a group of
    files once (no window over (learner, event id), which cost about as much again as the sort), with a
    64-bit hash of (learner id, event id); the repeats, which share a learner and so a group, are dropped
    in the learner-ordered stream a run of whole learners at a time (rows with equal hashes compared by
    their ids: a collision drops nothing), then the time filter. Per group, the same rows as
    ``deduplicated_sql`` ordered by ``ORDERS["learner"]``."""
    extra = [c for c in ("learner_id", "event_id", "event_time") if c not in columns]

    def sorted_group(files: Sequence[Path]) -> pa.RecordBatchReader:
        sql = (f"SELECT {', '.join([*columns, *extra])}, hash(learner_id, event_id) AS _h, "
               f"file_index AS _f, file_row_number AS _r FROM {_files_sql(files)} "
               f"ORDER BY {ORDERS['learner'].replace('fidx, frow', 'file_index, file_row_number')}")
        return con.sql(sql).to_arrow_reader(batch_rows)

    first = sorted_group(groups[0])
    schema = pa.schema([first.schema.field(c) for c in columns])

    def runs() -> Iterator[pa.RecordBatch]:
        for i, files in enumerate(groups):  # one group sorted at a time
            reader = first if i == 0 else sorted_group(files)
            for table in learner_tables(reader, batch_rows):
                yield from _distinct_in_range(table, start_ms, end_ms, columns)

    return pa.RecordBatchReader.from_batches(schema, runs())


def _distinct_in_range(table: pa.Table, start_ms: int | None, end_ms: int | None,
                       columns: Sequence[str]) -> list[pa.RecordBatch]:
    """Rows of whole learners with each (learner, event id)'s first copy in file order kept, then those
    in [start_ms, end_ms) (and undated ones), in ``columns``.

    A copy written again by an at-least-once writer has its original's time and ``seq``, so it sorts right
    after it: a row that repeats the row before it, written earlier in file order, is dropped first, in
    one vectorised pass (equal hashes, then equal ids).
    Only hashes that still recur afterwards (an id written again with another time, or a collision) go
    to the exact comparison by (learner id, event id), the first in file order kept."""
    n = table.num_rows
    h = table.column("_h").to_numpy()
    keep = np.ones(n, bool)
    if n > 1:
        twin = np.flatnonzero(h[1:] == h[:-1]) + 1  # rows whose hash equals the row before
        if len(twin):
            f, r = table.column("_f").to_numpy(), table.column("_r").to_numpy()
            same = (f[twin - 1] < f[twin]) | ((f[twin - 1] == f[twin]) & (r[twin - 1] < r[twin]))
            for col in (table.column(c).combine_chunks() for c in ("learner_id", "event_id")):
                same &= pc.equal(col.take(pa.array(twin)), col.take(pa.array(twin - 1))).to_numpy(
                    zero_copy_only=False)
            keep[twin[same]] = False  # a later copy, in file order, of the row before
    rest = np.flatnonzero(keep) if not keep.all() else None
    remaining = h if rest is None else h[rest]
    ordered = np.sort(remaining)
    repeated = ordered[1:][ordered[1:] == ordered[:-1]]
    if len(repeated):  # hashes that recur apart: compared by (learner id, event id), the first in file order kept
        repeated = np.unique(repeated)
        at = np.minimum(np.searchsorted(repeated, remaining), len(repeated) - 1)
        rows = np.flatnonzero(repeated[at] == remaining)
        rows = rows if rest is None else rest[rows]
        f = table.column("_f").to_numpy()[rows]
        r = table.column("_r").to_numpy()[rows]
        rows = rows[np.lexsort((r, f))]
        idx = pa.array(rows)
        seen = set()
        for row, key in zip(rows.tolist(), zip(table.column("learner_id").take(idx).to_pylist(),
                                               table.column("event_id").take(idx).to_pylist())):
            if key in seen:
                keep[row] = False  # a later copy in file order
            seen.add(key)
    if start_ms is not None or end_ms is not None:
        t = table.column("event_time")
        dated = pc.is_valid(t).to_numpy()
        times = pc.fill_null(t, 0).to_numpy()
        inside = np.ones(n, bool)
        if start_ms is not None:
            inside &= times >= start_ms
        if end_ms is not None:
            inside &= times < end_ms
        keep &= ~dated | inside
    table = table.select(list(columns))
    if keep.all():
        return table.to_batches()
    edges = np.flatnonzero(np.diff(np.r_[False, keep, False].astype(np.int8)))
    if len(edges) > n // 256:  # many gaps: one copy of the kept rows
        return table.filter(pa.array(keep)).to_batches()
    # few gaps (the usual few repeats): the runs of kept rows as zero-copy slices
    return [b for lo, hi in zip(edges[::2].tolist(), edges[1::2].tolist())
            for b in table.slice(lo, hi - lo).to_batches()]


def scan_table(folder: str | Path, start_ms: int | None = None, end_ms: int | None = None,
               include_undated: bool = False, order: str = "time", cfg: ScanConfig | None = None,
               columns: Sequence[str] = COLUMNS) -> pa.Table:
    """``scan`` read whole (for archives that fit in memory)."""
    return scan(folder, start_ms, end_ms, include_undated, order, cfg, columns=columns).read_all()


def scan_log(path: str | Path | Sequence[str | Path], cfg: ScanConfig | None = None,
             con: duckdb.DuckDBPyConnection | None = None) -> pa.RecordBatchReader:
    """A canonical event log in Parquet (``ktstream convert -o FILE.parquet``; several files: one stream in
    their order) by learner, in the order ``histories.group_by_learner`` gives its records (event time,
    absent first; ``seq``, absent 0; log order), streamed as Arrow batches within ``cfg``'s memory:
    `learner_tables` and `encode_table` make its histories without one object per event. A log is not
    deduplicated (it holds one record per interaction)."""
    paths = [Path(path)] if isinstance(path, (str, Path)) else [Path(p) for p in path]
    for p in paths:
        if p.suffix != ".parquet":
            raise ValueError(f"scan_log reads a Parquet event log; convert {p.name} with `ktstream convert -o "
                             f"FILE.parquet` first")
    cfg = cfg or ScanConfig()
    con = con or connect(cfg)
    sql = (f"SELECT {', '.join(COLUMNS)} FROM {_files_sql(paths)} ORDER BY learner_id, coalesce(event_time, -1), "
           f"coalesce(seq, 0), file_index, file_row_number")
    return con.sql(sql).to_arrow_reader(cfg.batch_rows)


def first_seen(folder: str | Path, before_ms: int, cfg: ScanConfig | None = None,
               con: duckdb.DuckDBPyConnection | None = None,
               files_end_ms: int | None = None) -> tuple[list[str], list[str]]:
    """Item and concept ids of the distinct events before ``before_ms``, in the order the time-ordered
    stream first shows them (a concept list in its own order): the vocabularies' order. Repeats are
    dropped over the files of dates before ``files_end_ms`` (default ``before_ms``), as a read up to
    ``files_end_ms`` drops them.

    Dropping repeats only removes events, so an id's first event among all rows stays its first among the
    distinct ones whenever that event is itself a first copy: the ids' first events are found over all
    rows (a minimum of the event time per id, then the full order among the events at that time), and
    only if one of them has an earlier copy in file order is the exact deduplicated query run instead."""
    files = archive_files(folder, end_ms=before_ms if files_end_ms is None else max(before_ms, files_end_ms))
    if not files:
        return [], []
    con = con or connect(cfg)
    src = _files_sql(files)
    rows = (f"SELECT learner_id AS l, event_id AS e, item_id, concept_ids, event_time AS t, coalesce(seq, 0) AS s, "
            f"file_index AS f, file_row_number AS r FROM {src} WHERE event_time < {int(before_ms)}")
    items = con.sql(
        f"WITH ev AS ({rows}), m AS (SELECT item_id, min(t) AS t FROM ev GROUP BY item_id) "
        f"SELECT ev.item_id AS id, l, e, t, s, f, r, 0 AS i FROM ev JOIN m USING (item_id, t) "
        f"QUALIFY row_number() OVER (PARTITION BY ev.item_id ORDER BY l, s, f, r) = 1").to_arrow_table()
    concepts = con.sql(
        f"WITH ev AS (SELECT unnest(concept_ids) AS c, generate_subscripts(concept_ids, 1) AS i, l, e, t, s, f, r "
        f"FROM ({rows})), m AS (SELECT c, min(t) AS t FROM ev GROUP BY c) "
        f"SELECT ev.c AS id, l, e, t, s, f, r, i FROM ev JOIN m USING (c, t) "
        f"QUALIFY row_number() OVER (PARTITION BY ev.c ORDER BY l, s, f, r, i) = 1").to_arrow_table()
    firsts = pa.concat_tables([items, concepts.cast(items.schema)])
    con.register("_ktstream_firsts", firsts)
    try:
        shadowed = con.execute(
            f"SELECT count(*) FROM {src} p JOIN _ktstream_firsts c ON p.learner_id = c.l AND p.event_id = c.e "
            f"WHERE p.file_index < c.f OR (p.file_index = c.f AND p.file_row_number < c.r)").fetchall()[0][0]
    finally:
        con.unregister("_ktstream_firsts")
    if shadowed:
        return _first_seen_exact(files, before_ms, con)
    key = ["t", "l", "s", "f", "r", "i"]
    return ([v for v in items.sort_by([(k, "ascending") for k in key]).column("id").to_pylist()],
            [v for v in concepts.sort_by([(k, "ascending") for k in key]).column("id").to_pylist()])


def _first_seen_exact(files: Sequence[Path], before_ms: int, con: duckdb.DuckDBPyConnection) -> tuple[list[str], list[str]]:
    """`first_seen` over the deduplicated events (a window over every (learner, event id)): the slow way,
    for archives where an id's first event is a repeat."""
    events = deduplicated_sql(files, end_ms=before_ms)
    key = "struct_pack(t := event_time, l := learner_id, s := coalesce(seq, 0), f := fidx, r := frow)"
    items = con.execute(f"SELECT item_id FROM ({events}) WHERE event_time IS NOT NULL GROUP BY item_id "
                        f"ORDER BY min({key})").fetchall()
    concepts = con.execute(
        f"SELECT c FROM (SELECT unnest(concept_ids) AS c, generate_subscripts(concept_ids, 1) AS i, {key} AS k "
        f"FROM ({events}) WHERE event_time IS NOT NULL) GROUP BY c ORDER BY min(struct_pack(k := k, i := i))"
    ).fetchall()
    return [r[0] for r in items], [r[0] for r in concepts]


def learner_tables(batches: Iterator[pa.RecordBatch] | pa.RecordBatchReader,
                   max_events: int) -> Iterator[pa.Table]:
    """Tables of whole learners from a learner-ordered stream, each about ``max_events`` rows (a
    learner with more rows comes whole, alone): the unit that bounds the memory of building histories."""
    pending: list[pa.RecordBatch] = []
    rows = 0
    for batch in batches:
        if batch.num_rows == 0:
            continue
        pending.append(batch)
        rows += batch.num_rows
        if rows < max_events:
            continue
        cut = _first_row_of_last_learner(pending)
        if cut == 0:  # one learner so far: wait for its end
            continue
        table = pa.Table.from_batches(pending)
        yield table.slice(0, cut)
        rest = table.slice(cut)
        pending, rows = rest.to_batches(), rest.num_rows
    if rows:
        yield pa.Table.from_batches(pending)


def _first_row_of_last_learner(batches: list[pa.RecordBatch]) -> int:
    """Row (over all ``batches``) where the last learner's rows begin: searched from the end, so only
    the batches that learner spans are read."""
    last = batches[-1].column("learner_id")[-1]
    before = sum(b.num_rows for b in batches)
    for batch in reversed(batches):
        before -= batch.num_rows
        differ = np.flatnonzero(~pc.equal(batch.column("learner_id"), last).to_numpy(zero_copy_only=False))
        if len(differ):
            return before + int(differ[-1]) + 1
    return 0


class ArrowIds(Sequence):
    """Event ids of one history kept in their Arrow column (no Python string per event until read): a
    view of rows ``start``..``stop`` of the column, sliced without touching Arrow."""

    def __init__(self, values: pa.Array, start: int = 0, stop: int | None = None):
        self._values, self._start = values, start
        self._stop = len(values) if stop is None else stop

    def __len__(self) -> int:
        return self._stop - self._start

    def __getitem__(self, index):
        if isinstance(index, slice):
            start, stop, step = index.indices(len(self))
            assert step == 1, "event ids slice with step 1 only"
            return ArrowIds(self._values, self._start + start, self._start + max(start, stop))
        if not -len(self) <= index < len(self):
            raise IndexError(index)
        return self._values[self._start + index % len(self)].as_py()

    def __iter__(self):
        return iter(self._values.slice(self._start, len(self)).to_pylist())

    def arrow(self) -> pa.Array:
        """The ids as an Arrow array (a zero-copy slice of the column)."""
        return self._values.slice(self._start, len(self))

    def __add__(self, other) -> list:
        return list(self) + list(other)


def _encode_ids(values: pa.ChunkedArray | pa.Array, vocab_ids: pa.Array) -> np.ndarray:
    index = pc.index_in(values, value_set=vocab_ids)
    return pc.fill_null(pc.add(index, 2), UNKNOWN).to_numpy(zero_copy_only=False).astype(np.int64)


def _step_starts(learner_start: np.ndarray, step: pa.Array, times: np.ndarray, n: int) -> np.ndarray:
    """First row of each row's step (a step: equal step id, or no step id and one event time), absolute."""
    if n == 0:
        return np.zeros(0, np.int64)
    valid = step.is_valid().to_numpy(zero_copy_only=False)
    same_id = np.zeros(n, bool)
    same_id[1:] = pc.equal(step.slice(1), step.slice(0, n - 1)).fill_null(False).to_numpy(zero_copy_only=False)
    same_time = np.zeros(n, bool)
    same_time[1:] = ~valid[1:] & ~valid[:-1] & (times[1:] == times[:-1])  # NaN (no clock) never equal
    same = np.where(valid, same_id & np.r_[False, valid[:-1]], same_time)
    same[learner_start] = False
    return np.maximum.accumulate(np.where(same, 0, np.arange(n)))


def encoded_tables(reader: pa.RecordBatchReader, items: Vocabulary, concepts: Vocabulary,
                   table_events: int = 500_000) -> Iterator[list[LearnerHistory]]:
    """The histories of a learner-ordered stream, one list per table of whole learners (`learner_tables`),
    encoded with ``items`` and ``concepts``, event ids kept in Arrow: what a pass over a source too
    large to hold reads."""
    item_values, concept_values = pa.array(items.ids, pa.string()), pa.array(concepts.ids, pa.string())
    for table in learner_tables(reader, table_events):
        yield encode_table(table, items, concepts, arrow_ids=True, item_values=item_values,
                           concept_values=concept_values)


def encode_table(table: pa.Table, items: Vocabulary, concepts: Vocabulary, arrow_ids: bool = False,
                 item_values: pa.Array | None = None, concept_values: pa.Array | None = None) -> list[LearnerHistory]:
    """One `LearnerHistory` per learner of a learner-ordered table, as `histories.encode` makes them from
    the same records. ``arrow_ids``: event ids as `ArrowIds` (else lists of str). ``item_values`` /
    ``concept_values``: the vocabularies' ids as Arrow arrays, when the caller keeps them across tables."""
    n = table.num_rows
    if n == 0:
        return []
    table = table.combine_chunks()
    learner = table.column("learner_id").chunk(0)
    change = np.ones(n, bool)
    change[1:] = ~pc.equal(learner.slice(1), learner.slice(0, n - 1)).to_numpy(zero_copy_only=False)
    starts = np.flatnonzero(change)
    stops = np.r_[starts[1:], n]
    item_values = item_values if item_values is not None else pa.array(items.ids, pa.string())
    concept_values = concept_values if concept_values is not None else pa.array(concepts.ids, pa.string())
    item_idx = _encode_ids(table.column("item_id"), item_values)
    lists = table.column("concept_ids").chunk(0)
    counts = pc.fill_null(pc.list_value_length(lists), 0).to_numpy(zero_copy_only=False).astype(np.int64)
    flat = _encode_ids(pc.list_flatten(lists), concept_values)
    width = max(1, int(counts.max()))
    conc = np.zeros((n, width), np.int64)
    rows = np.repeat(np.arange(n), counts)
    conc[rows, np.arange(len(flat)) - np.repeat(np.cumsum(counts) - counts, counts)] = flat
    widths = np.maximum(np.maximum.reduceat(counts, starts), 1)
    t = table.column("event_time").chunk(0)
    times = pc.divide(pc.cast(t, pa.float64()), 1000.0).fill_null(np.nan).to_numpy(zero_copy_only=False)
    resp = pc.fill_null(table.column("response").chunk(0), NO_RESPONSE).to_numpy(zero_copy_only=False).astype(np.int64)
    steps = _step_starts(starts, table.column("step_id").chunk(0), times, n)
    ids = table.column("event_id").chunk(0)
    all_ids = None if arrow_ids else ids.to_pylist()
    names = learner.take(pa.array(starts)).to_pylist()
    out = []
    for name, lo, hi, w in zip(names, starts.tolist(), stops.tolist(), widths.tolist()):
        event_ids = ArrowIds(ids, lo, hi) if arrow_ids else all_ids[lo:hi]
        out.append(LearnerHistory(name, item_idx[lo:hi], conc[lo:hi, :w], resp[lo:hi], times[lo:hi],
                                  steps[lo:hi] - lo, event_ids))
    return out
