"""A read-only handle on a warehouse: DuckDB views over its Parquet files.

Example:
    >>> import xprosql
    >>> run = xprosql.load("run/")                                   # doctest: +SKIP
    >>> run.sql("SELECT name, sum(dur_ps) FROM events GROUP BY 1 ORDER BY 2 DESC LIMIT 3").pl()  # doctest: +SKIP
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import duckdb
import polars as pl
import pyarrow as pa

from xprosql.models.tables import PARTITION_COLUMN, TABLES
from xprosql.queries import analysis_sql
from xprosql.warehouse import Warehouse

__all__ = ["Run", "Result", "load"]

Params = Mapping[str, Any] | Sequence[Any] | None


class Result:
    """A query result, fetched once, handed out as Arrow, Polars or pandas.

    Example:
        >>> r = run.sql("SELECT count(*) AS n FROM events")         # doctest: +SKIP
        >>> r.pl()["n"][0], r.arrow().num_rows                       # doctest: +SKIP
    """

    def __init__(self, table: pa.Table) -> None:
        self._table = table

    def arrow(self) -> pa.Table:
        return self._table

    def pl(self) -> pl.DataFrame:
        return pl.from_arrow(self._table)  # type: ignore[return-value]

    def df(self) -> Any:
        """pandas DataFrame (pandas must be installed)."""
        return self._table.to_pandas()

    def rows(self) -> list[tuple]:
        columns = [c.to_pylist() for c in self._table.columns]
        return list(zip(*columns))

    @property
    def columns(self) -> list[str]:
        return self._table.column_names

    def __len__(self) -> int:
        return self._table.num_rows

    def __repr__(self) -> str:
        with pl.Config(tbl_rows=20, fmt_str_lengths=60, tbl_width_chars=160):
            return repr(self.pl())


def _sql_list(paths: list[str]) -> str:
    return "[" + ", ".join("'" + p.replace("'", "''") + "'" for p in paths) + "]"


class Run:
    """Snapshot of a warehouse taken at open: profiles committed later are not seen.

    Use :func:`load` to make one.
    """

    def __init__(self, path: str | os.PathLike[str], *, profiles: Sequence[str] | None = None) -> None:
        self.path = Path(path)
        self._warehouse = Warehouse(self.path)
        self._warehouse.check_readable()
        committed = self._warehouse.profile_ids()
        if profiles is not None:
            missing = sorted(set(profiles) - set(committed))
            if missing:
                raise KeyError(f"profiles not in {self.path}: {missing}")
            committed = [p for p in committed if p in set(profiles)]
        self.profile_ids: list[str] = committed
        self._files = {table: self._warehouse.table_files(table, committed) for table in TABLES}
        self._con = duckdb.connect(":memory:")
        for table in TABLES:
            self._con.execute(f"CREATE VIEW {table} AS {self._scan_sql(table)}")

    def _scan_sql(self, table: str) -> str:
        files = self._files[table]
        if not files:
            # No file yet (an empty warehouse): an empty relation with the table's columns.
            empty = TABLES[table].empty_table().add_column(0, PARTITION_COLUMN, pa.array([], pa.string()))
            self._con.register(f"_empty_{table}", empty)
            return f"SELECT * FROM _empty_{table}"
        return (
            f"SELECT {PARTITION_COLUMN}, * EXCLUDE ({PARTITION_COLUMN}) FROM read_parquet({_sql_list(files)}, "
            f"hive_partitioning = true, hive_types = {{'{PARTITION_COLUMN}': 'VARCHAR'}}, union_by_name = true)"
        )

    @property
    def tables(self) -> list[str]:
        return list(TABLES)

    @property
    def connection(self) -> duckdb.DuckDBPyConnection:
        """The DuckDB connection holding the views, for what :meth:`sql` does not cover."""
        return self._con

    def sql(self, query: str, params: Params = None) -> Result:
        """Run DuckDB SQL over every table. ``params`` binds ``$name`` or ``?`` parameters.

        Example:
            >>> run.sql("SELECT * FROM events WHERE dur_ps > $min", {"min": 10**9}).pl()  # doctest: +SKIP
        """
        relation = self._con.sql(query, params=params) if params else self._con.sql(query)
        if relation is None:
            return Result(pa.table({}))
        return Result(relation.to_arrow_table())

    def analysis(self, name: str, **params: Any) -> Result:
        """Run a packaged analysis (a file of ``sql/``) by name with named parameters."""
        return self.sql(analysis_sql(name), params or None)

    def table(self, name: str) -> pl.LazyFrame:
        """A table as a Polars LazyFrame over the same files (``profile_id`` included)."""
        if name not in TABLES:
            raise KeyError(f"unknown table {name!r}; tables are {list(TABLES)}")
        files = self._files[name]
        if not files:
            schema = {PARTITION_COLUMN: pl.String, **pl.Schema(pl.from_arrow(TABLES[name].empty_table()).schema)}
            return pl.LazyFrame(schema=schema)
        return pl.scan_parquet(
            files, hive_partitioning=True, hive_schema={PARTITION_COLUMN: pl.String}, missing_columns="insert"
        )

    @property
    def profiles(self) -> pl.DataFrame:
        """The ``profiles`` table, one row per profile."""
        return self.sql("SELECT * FROM profiles ORDER BY source_path").pl()

    def row_counts(self) -> dict[str, int]:
        return {t: self._con.execute(f"SELECT count(*) FROM {t}").fetchall()[0][0] for t in TABLES}

    def close(self) -> None:
        self._con.close()

    def __enter__(self) -> Run:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Run({str(self.path)!r}, {len(self.profile_ids)} profiles)"


def load(path: str | os.PathLike[str], *, profiles: Sequence[str] | None = None) -> Run:
    """Open a warehouse read-only. Cheap: lists files, copies no data.

    Example:
        >>> run = load("run/")                                       # doctest: +SKIP
        >>> run.sql("SELECT count(*) FROM events").rows()            # doctest: +SKIP
        [(37443,)]
    """
    return Run(path, profiles=profiles)
