"""A conversion's rows sorted outside Python's heap: Parquet in a temporary folder, ordered by DuckDB.

Two formats need every row of a learner before the learner's first record: raw ASSISTments (sorted by
``order_id``) and DataShop exports (sorted by time), whose files are not in each learner's order. Their
converters parse and check each row in Python, as they always have (same CSV reader, same errors with the
same line numbers), and append the parsed fields here; `SortedRows.sorted` then streams the rows back,
ordered by a key that ends in the row's position in the input (so ties keep the input's order, as a
stable sort does), from DuckDB run within ``memory_limit``, which spills its sort to the same folder.
What the conversion holds in memory is then one batch of rows on the way in, DuckDB's limit, and one
batch on the way out; what grows with the input is disk: the rows as Parquet, then DuckDB's sorted runs.
The folder is removed when the rows are closed.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterator

DEFAULT_MEMORY_LIMIT = "1GB"
BATCH_ROWS = 16_384
THREADS: int | None = None  # DuckDB's threads for the sort; None: one per core
INT64_MIN, INT64_MAX = -2 ** 63, 2 ** 63 - 1


class SortedRows:
    """Rows appended one at a time, written to Parquet a batch at a time, read back sorted.

    Parameters
    ----------
    schema
        The rows' Arrow schema (``pyarrow.Schema``); `append` takes one value per field, in order.
    memory_limit
        DuckDB's memory limit for the sort (a DuckDB size, e.g. ``"1GB"``).
    batch_rows
        Rows per Parquet row group and per batch read back (None: `BATCH_ROWS`).
    threads
        DuckDB threads for the sort (None: `THREADS`).

    Examples
    --------
    >>> import pyarrow as pa
    >>> rows = SortedRows(pa.schema([("k", pa.int64()), ("pos", pa.int64())]), "64MB", batch_rows=2)
    >>> for pos, k in enumerate([3, 1, 3, 2, 1]):
    ...     rows.append(k, pos)
    >>> [r for batch in rows.sorted("k, pos") for r in iter_rows(batch)]
    [(1, 1), (1, 4), (2, 3), (3, 0), (3, 2)]
    >>> rows.close(); rows.folder.exists()
    False
    """

    def __init__(self, schema: Any, memory_limit: str = DEFAULT_MEMORY_LIMIT, batch_rows: int | None = None,
                 threads: int | None = None):
        self.schema = schema
        self.memory_limit, self.threads = memory_limit, threads or THREADS
        self.batch_rows = batch_rows or BATCH_ROWS
        self.folder = Path(tempfile.mkdtemp(prefix="ktstream-convert-"))
        self.rows = 0
        self._columns: list[list[Any]] = [[] for _ in schema]
        self._writer = None

    def append(self, *values: Any) -> None:
        """Add one row (one value per schema field)."""
        for column, value in zip(self._columns, values, strict=True):
            column.append(value)
        self.rows += 1
        if len(self._columns[0]) >= self.batch_rows:
            self._flush()

    def _flush(self) -> None:
        if not self._columns[0]:
            return
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = pa.Table.from_arrays([pa.array(c, f.type) for c, f in zip(self._columns, self.schema)],
                                     schema=self.schema)
        if self._writer is None:
            self._writer = pq.ParquetWriter(self.folder / "rows.parquet", self.schema)
        self._writer.write_table(table)
        self._columns = [[] for _ in self.schema]

    def sorted(self, order_by: str, columns: str = "*") -> Iterator[Any]:
        """The rows appended so far as Arrow record batches of ``columns`` (SQL), in ``order_by`` (SQL)."""
        self._flush()
        if self._writer is None:
            return
        self._writer.close()
        self._writer = None
        import duckdb  # as ktstream.data.columnar.connect, without importing the training stack

        con = duckdb.connect(config={"memory_limit": self.memory_limit, "temp_directory": str(self.folder / "duckdb"),
                                     "preserve_insertion_order": False})
        try:
            con.execute("SET enable_progress_bar = false")
            if self.threads:
                con.execute(f"SET threads = {int(self.threads)}")
            path = str(self.folder / "rows.parquet").replace("'", "''")
            # a relation's reader keeps ORDER BY (see ktstream.data.columnar.scan)
            yield from con.sql(f"SELECT {columns} FROM read_parquet('{path}') ORDER BY {order_by}").to_arrow_reader(
                self.batch_rows)
        finally:
            con.close()

    def close(self) -> None:
        """Remove the folder and everything in it."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        shutil.rmtree(self.folder, ignore_errors=True)


def iter_rows(batch: Any) -> Iterator[tuple]:
    """The rows of an Arrow record batch as tuples of Python values."""
    return zip(*(column.to_pylist() for column in batch.columns))


def check_int64(value: int, what: str, where: str) -> int:
    """`value`, or DatasetFormatError if a 64-bit column cannot hold it (the sort stores integers as int64).

    >>> check_int64(5, "order_id", "f.csv:2")
    5
    """
    if not INT64_MIN <= value <= INT64_MAX:
        from connectors.datasets.exceptions import DatasetFormatError

        raise DatasetFormatError(f"{where}: {what} {value} is outside the 64-bit integer range")
    return value
