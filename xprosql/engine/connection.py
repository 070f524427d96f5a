"""The one place a DuckDB connection gets its views: one per warehouse table, functions registered.

Every execution path opens its connections here: a :class:`~xprosql.engine.Engine` over a snapshot,
each share of a share-by-share run (here or in a Dask task), compaction's stored tables, and ingest
deriving ``op_stats`` from a profile's decoded tables. So a file written by an older xprosql, lacking
a column, reads the same everywhere: the column is NULL.

Example:
    >>> con = connect_views({"profiles": None})
    >>> con.sql("SELECT count(*) FROM events").fetchall()
    [(0,)]
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import duckdb
import pyarrow as pa

from xprosql._duckdb import connect
from xprosql.engine.functions import register_functions
from xprosql.models.tables import PARTITION_COLUMN, TABLES
from xprosql.warehouse import Snapshot, unsigned_sql

__all__ = ["add_views", "connect_views", "empty_relation", "query", "query_rows", "run_on_share", "snapshot_connection",
           "tables_named"]


def connect_views(
    sources: Mapping[str, str | None],
    *,
    arrow: Mapping[str, pa.Table] | None = None,
    config: Mapping[str, Any] | None = None,
    filesystem: Any = None,
    tables: Iterable[str] | None = None,
) -> duckdb.DuckDBPyConnection:
    """A connection with a view for every table of :data:`~xprosql.models.tables.TABLES`.

    ``sources[table]`` is the SQL that reads the table (``profile_id`` included); a table left out or
    None has no file yet and is empty. ``arrow``: in-memory tables registered first, under their
    names, for the sources to read. Columns a source lacks read as NULL; unsigned columns, which data files
    store as int64 of the same bits (Delta has no unsigned type), read as UBIGINT. ``filesystem``: the fsspec file
    system the sources' object-storage files are read through (:meth:`~xprosql.warehouse.Snapshot.filesystem`).
    ``tables``: the tables to make views of (default: every one). A view costs a millisecond or two to make, and a
    connection for one query reads a few tables (:func:`tables_named`).
    """
    con = connect(config=dict(config or {}))
    if filesystem is not None:
        con.register_filesystem(filesystem)
    for name, table in (arrow or {}).items():
        con.register(name, table)
    add_views(con, sources, TABLES if tables is None else tables)
    register_functions(con)
    return con


def add_views(con: duckdb.DuckDBPyConnection, sources: Mapping[str, str | None], tables: Iterable[str]) -> None:
    """Views of ``tables`` on ``con``, as :func:`connect_views` makes them."""
    for table in tables:
        # The empty relation of the table's columns: the whole view when there is no file, and what fills the
        # columns that files written by an older xprosql lack.
        empty = empty_relation(table)
        scan = sources.get(table)
        body = empty if scan is None else (
            f"SELECT *{unsigned_sql(table)} FROM (SELECT * FROM ({scan}) UNION ALL BY NAME {empty})")
        con.execute(f"CREATE VIEW {table} AS {body}")


_TABLE_NAME = re.compile(r"\b(" + "|".join(TABLES) + r")\b", re.IGNORECASE)


def tables_named(sql: str) -> list[str]:
    """The tables of :data:`~xprosql.models.tables.TABLES` whose names appear in ``sql`` as words (in any case, as
    DuckDB's names go), in TABLES' order."""
    named = {name.lower() for name in _TABLE_NAME.findall(sql)}
    return [table for table in TABLES if table in named]


def empty_relation(table: str) -> str:
    """A SELECT of no rows with ``table``'s columns (and the partition column) in SQL: registering an Arrow table
    instead makes DuckDB import pandas (0.1-0.2 s of a command's start) to check what kind of object it is."""
    columns = [f"NULL::VARCHAR AS {PARTITION_COLUMN}",
               *(f'NULL::{_sql_type(field.type)} AS "{field.name}"' for field in TABLES[table])]
    return f"SELECT {', '.join(columns)} WHERE false"


_SQL_TYPES = {pa.string(): "VARCHAR", pa.int64(): "BIGINT", pa.int32(): "INTEGER", pa.uint64(): "UBIGINT",
              pa.float64(): "DOUBLE", pa.binary(): "BLOB", pa.bool_(): "BOOLEAN"}


def _sql_type(arrow_type: pa.DataType) -> str:
    """DuckDB's name for ``arrow_type``, as DuckDB reads an Arrow column of that type."""
    if pa.types.is_dictionary(arrow_type):
        return _sql_type(arrow_type.value_type)
    if pa.types.is_list(arrow_type):
        return f"{_sql_type(arrow_type.value_type)}[]"
    if pa.types.is_struct(arrow_type):
        fields = ", ".join('"' + field.name + '" ' + _sql_type(field.type) for field in arrow_type)
        return f"STRUCT({fields})"
    if pa.types.is_map(arrow_type):
        return f"MAP({_sql_type(arrow_type.key_type)}, {_sql_type(arrow_type.item_type)})"
    if pa.types.is_timestamp(arrow_type) and arrow_type.tz is not None:
        return "TIMESTAMPTZ"
    try:
        return _SQL_TYPES[arrow_type]
    except KeyError:
        raise TypeError(f"no DuckDB type for the Arrow type {arrow_type}") from None


def query(con: duckdb.DuckDBPyConnection, sql: str,
          params: Mapping[str, Any] | Sequence[Any] | None = None) -> duckdb.DuckDBPyRelation:
    """``sql`` on ``con`` as a lazy relation; ``params`` binds its ``$name`` or ``?`` placeholders (none: no binding,
    which DuckDB needs for texts without placeholders)."""
    return con.sql(sql, params=_values(params))


def query_rows(con: duckdb.DuckDBPyConnection, sql: str,
               params: Mapping[str, Any] | Sequence[Any] | None = None, *, stream: bool = False) -> pa.Table:
    """The rows of the query ``sql`` on ``con``: bound once, or streamed when ``stream`` (many rows expected).

    ``query(...).to_arrow_table()`` binds a query twice, once to describe its relation and once to run it: 0.3 s of
    the 110 KB ``steps.bottlenecks``, 20 ms of the 26 KB ``ops._op_stats``. Without ``stream`` it is bound once, into
    a temporary table, so the rows are held twice (DuckDB's and Arrow's) for a moment, and written once more (10 M
    rows of three columns: 1.75 s against 0.82 s through a relation; a job's 1.1 M graph edges of twenty columns:
    0.7 s in DuckDB's profile): for a few thousand rows less than the second bind, for many rows more. ``stream``
    takes the relation, its rows streamed into Arrow. (DuckDB's DB-API result binds once too, but its Arrow output
    warns of its copy, a warning that reaches any caller recording warnings.)
    """
    if stream:
        return query(con, sql, params).to_arrow_table()
    table = f"_xprosql_rows_{next(_ROWS)}"
    con.execute(f"CREATE TEMP TABLE {table} AS {sql}", _values(params))
    try:
        return con.table(table).to_arrow_table()
    finally:
        con.execute(f"DROP TABLE {table}")


_ROWS = itertools.count()  # a table name per call: no call relies on another having dropped its table


def _values(params: Mapping[str, Any] | Sequence[Any] | None) -> dict[str, Any] | list[Any] | None:
    """``params`` as DuckDB binds them; none at all for a text without placeholders, which DuckDB requires."""
    if not params:
        return None
    return dict(params) if isinstance(params, Mapping) else list(params)


def snapshot_connection(snapshot: Snapshot, *, arrow: Mapping[str, pa.Table] | None = None,
                        tables: Iterable[str] | None = None) -> duckdb.DuckDBPyConnection:
    """Views over the files of ``snapshot`` (``arrow``, ``tables``: as in :func:`connect_views`)."""
    tables = list(TABLES if tables is None else tables)
    return connect_views(snapshot.scan_sqls(tables), arrow=arrow,
                         filesystem=snapshot.filesystem(), tables=tables)


def run_on_share(share: Snapshot, sql: str, params: Mapping[str, Any] | None) -> pa.Table:
    """Run ``sql`` over one share of a snapshot (in a Dask task, or here) and return its rows."""
    con = snapshot_connection(share, tables=tables_named(sql))
    try:
        return query_rows(con, sql, params, stream=True)  # may be many rows
    finally:
        con.close()
