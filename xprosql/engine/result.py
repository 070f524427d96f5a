"""One result type for every query and analysis: lazy until asked, then Arrow, Polars or pandas.

Example:
    >>> import duckdb
    >>> r = Result(duckdb.connect().sql("SELECT sum(range) AS total_ps FROM range(4)"))
    >>> r.arrow().schema.field("total_ps").type    # DuckDB's HUGEINT sum comes back as int64, not decimal
    DataType(int64)
    >>> r.pl()["total_ps"].to_list()
    [6]
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import duckdb
import pyarrow as pa

from xprosql.engine.connection import query, query_rows
from xprosql.errors import NotApplicableWarning, QueryError, XprosqlError

if TYPE_CHECKING:
    import polars

__all__ = ["Result", "first_line"]


def first_line(exc: Exception) -> str:
    """DuckDB's message without the lines that quote SQL the user did not write."""
    return str(exc).strip().split("\n", 1)[0]


def _normalised(table: pa.Table) -> pa.Table:
    """DuckDB's integer sums (HUGEINT, which Arrow receives as decimal128(38, 0)) as int64, and other
    decimals as float64. An integer column whose values do not fit in int64 stays exact (decimal128)."""
    for index, field in enumerate(table.schema):
        if not pa.types.is_decimal(field.type):
            continue
        column = table.column(index)
        if field.type.scale == 0:
            try:
                column = column.cast(pa.int64())
            except pa.ArrowInvalid:  # beyond int64: keep every digit
                continue
        else:
            column = column.cast(pa.float64())
        table = table.set_column(index, field.with_type(column.type), column)
    return table


class Result:
    """Rows of a query or an analysis. Nothing runs until the rows are asked for; then they are kept.

    An analysis that has no rows for some profiles says why when its rows are read: a
    :class:`~xprosql.NotApplicableWarning` naming them and what they lack, also kept in ``.notes``.

    ``.pl()`` (Polars), ``.lazy()`` (Polars LazyFrame), ``.arrow()`` (PyArrow), ``.df()`` (pandas,
    needs ``pip install 'xprosql[pandas]'``), ``.rows()`` (tuples), ``.relation`` (the DuckDB relation,
    to refine with DuckDB's relational API). Integer picosecond sums come back as 64-bit integers.
    """

    def __init__(self, relation: duckdb.DuckDBPyRelation | None, *, connection: duckdb.DuckDBPyConnection | None = None,
                 description: str = "query") -> None:
        self._relation = relation
        # A query not bound yet (of_query): (connection, SQL, parameters), and whether its rows are streamed.
        self._query: tuple[duckdb.DuckDBPyConnection, str, Mapping[str, Any] | None] | None = None
        self._stream = False
        self._table: pa.Table | None = None
        # A connection opened for this result alone lives as long as the result.
        self._connection = connection
        self._description = description
        # Set for an analysis: what failed, said in our words, with DuckDB's first line only (the rest
        # points into SQL the user did not write).
        self._failure: str | None = None
        # Set for an analysis that declares what it needs: (module id, what it needs, the profiles it ran
        # over, their files' names by id, read when the rows are). Profiles without rows are then named.
        self._expected: tuple[str, str, Sequence[str], Callable[[Sequence[str]], Mapping[str, str]]] | None = None
        self.notes: list[str] = []

    @classmethod
    def of_query(cls, con: duckdb.DuckDBPyConnection, sql: str, params: Mapping[str, Any] | None, *,
                 stream: bool = False, connection: duckdb.DuckDBPyConnection | None = None,
                 description: str = "query") -> Result:
        """The rows of ``sql`` on ``con``, run when they are read by
        :func:`~xprosql.engine.connection.query_rows` (``stream``: many rows expected); a relation, bound when
        ``.relation`` is asked for first, binds it to describe it and again to run it."""
        result = cls(None, connection=connection, description=description)
        result._query = (con, sql, params)
        result._stream = stream
        return result

    @classmethod
    def from_arrow(cls, table: pa.Table, *, description: str = "query") -> Result:
        """A result over rows already computed (share by share, or on a cluster)."""
        from xprosql._duckdb import connect

        con = connect()
        con.register("_rows", table)
        result = cls(con.table("_rows"), connection=con, description=description)
        return result

    @property
    def relation(self) -> duckdb.DuckDBPyRelation:
        if self._relation is None:
            assert self._query is not None
            pending = self._query
            self._relation = self._guarded(lambda: query(*pending))
        return self._relation

    def arrow(self) -> pa.Table:
        if self._table is None:
            self._table = _normalised(self._guarded(self._rows))
            self._name_profiles_without_rows(self._table)
        return self._table

    def _rows(self) -> pa.Table:
        if self._relation is None and self._query is not None:
            return query_rows(*self._query, stream=self._stream)
        return self.relation.to_arrow_table()

    def _guarded(self, run: Callable[[], Any]) -> Any:
        """``run()``, DuckDB's errors said as a QueryError naming the analysis or the query."""
        try:
            return run()
        except duckdb.Error as exc:
            if self._failure is not None:
                raise QueryError(f"{self._failure}: {first_line(exc)}") from None
            raise QueryError(f"{self._description}: {exc}") from None

    def _name_profiles_without_rows(self, table: pa.Table) -> None:
        if self._expected is None:
            return
        module_id, needs, profile_ids, source_names = self._expected
        if "profile_id" not in table.column_names:  # a fleet analysis: its rows are not per profile
            if table.num_rows == 0:
                self._note(f"{module_id}: no rows over {len(profile_ids)} profiles: it needs {needs}")
            return
        present = _distinct(table.column("profile_id"))
        # The files' names are read only to name the profiles without rows.
        if without := [profile_id for profile_id in profile_ids if profile_id not in present]:
            missing = sorted(source_names(without).values())
            shown = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
            self._note(f"{module_id}: no rows for {len(without)} of {len(profile_ids)} profiles ({shown}): it needs {needs}")

    def _note(self, note: str) -> None:
        self.notes.append(note)
        warnings.warn(note, NotApplicableWarning, stacklevel=5)

    def pl(self) -> polars.DataFrame:
        import polars

        return polars.from_arrow(self.arrow())  # type: ignore[return-value]

    def lazy(self) -> polars.LazyFrame:
        return self.pl().lazy()

    def df(self) -> Any:
        """A pandas DataFrame."""
        try:
            import pandas  # noqa: F401
        except ImportError:
            raise XprosqlError("Result.df() needs pandas: pip install 'xprosql[pandas]'") from None
        return self.arrow().to_pandas()

    def rows(self) -> list[tuple[Any, ...]]:
        columns = [c.to_pylist() for c in self.arrow().columns]
        return list(zip(*columns))

    @property
    def columns(self) -> list[str]:
        if self._table is not None:
            return list(self._table.column_names)
        return list(self.relation.columns)

    def __len__(self) -> int:
        return self.arrow().num_rows

    def __repr__(self) -> str:
        import polars as pl

        with pl.Config(tbl_rows=20, fmt_str_lengths=60, tbl_width_chars=160):
            return f"Result({self._description})\n{self.pl()!r}"


def _distinct(column: pa.ChunkedArray) -> set[Any]:
    """The distinct values of ``column``: a short one in Python, since importing pyarrow.compute costs a command that
    prints a few rows 25 ms."""
    if len(column) <= 10_000:
        return set(column.to_pylist())
    import pyarrow.compute as pc

    return set(pc.unique(column).to_pylist())
