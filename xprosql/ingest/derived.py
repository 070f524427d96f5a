"""Tables derived from a profile at ingest, by the packaged SQL, so fleet queries need not rescan events.

``op_stats`` (``sql/ops/_op_stats.sql``) sums every op per device: the part of the
roofline that reads events; ``framework_op_kernels`` and ``framework_op_stats``
(``sql/torch/``) place the GPU work of PyTorch traces in their CPU op trees. It is computed once, from the decoded tables of the
profile being ingested (in memory when they are small, else their staged
Parquet files), and committed with them, so the roofline of thousands of
profiles reads a few hundred rows of each.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator

import duckdb
import pyarrow as pa

from xprosql.engine.connection import connect_views, query
from xprosql.engine.library import library, used_parameters
from xprosql.models.tables import INGEST_DERIVED_TABLES, TABLES
from xprosql.warehouse import StagedProfile

__all__ = ["DERIVE_MEMORY_LIMIT", "DecodedTables", "Deriver"]

# DuckDB's memory limit while deriving: what does not fit spills to disk (a large profile's staging directory,
# deleted with it; the shared connection's own temporary directory), so a profile of tens of millions of events
# ingests in a few GB.
DERIVE_MEMORY_LIMIT = "2GB"
_DECODED = [table for table in TABLES if table not in INGEST_DERIVED_TABLES]
# Included by more than one derived table (the CPU op tree of PyTorch traces): computed once per profile.
_SHARED = {"torch._op_tree": "_shared_op_tree"}
# Profiles whose decoded tables take less Arrow memory than this are derived from memory, while the writer thread
# still compresses the same batches to Parquet; larger ones from the staged files, once written.
_IN_MEMORY_BYTES = 256 * 2**20


class DecodedTables:
    """The batches of a profile's decoded tables, kept while they are small enough to derive from in memory."""

    def __init__(self, limit_bytes: int | None = None) -> None:
        self._batches: dict[str, list[pa.RecordBatch]] | None = {}
        self._left = _IN_MEMORY_BYTES if limit_bytes is None else limit_bytes

    def add(self, table: str, batch: pa.RecordBatch) -> None:
        if self._batches is None:
            return
        self._left -= batch.nbytes
        if self._left < 0:
            self._batches = None  # too large: derive from the files
        else:
            self._batches.setdefault(table, []).append(batch)

    def tables(self) -> dict[str, pa.Table] | None:
        """Every decoded table, or None when they outgrew the limit."""
        if self._batches is None:
            return None
        return {table: pa.Table.from_batches(self._batches.get(table, []), TABLES[table]) for table in _DECODED}


def _quoted(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


class Deriver:
    """Derives the tables of profiles one after another, those small enough to keep in memory on one DuckDB connection.

    A connection with a view per table and the SQL functions takes 60-100 ms to set up: most of what deriving a
    small profile costs. Larger profiles get a connection of their own, spilling to their staging directory.

    Example:
        >>> deriver = Deriver()                                      # doctest: +SKIP
        >>> for table, rows in deriver.derive(staged, decoded):      # doctest: +SKIP
        ...     staged.write(table, rows)
        >>> deriver.close()                                          # doctest: +SKIP
    """

    def __init__(self) -> None:
        self._con: duckdb.DuckDBPyConnection | None = None
        self._spill: str | None = None

    def close(self) -> None:
        """Close the shared connection and remove its spill directory (the next profile opens another)."""
        if self._con is not None:
            self._con.close()
            self._con = None
        if self._spill is not None:
            shutil.rmtree(self._spill, ignore_errors=True)
            self._spill = None

    def derive(self, staged: StagedProfile, decoded: DecodedTables | None = None) -> Iterator[tuple[str, pa.Table]]:
        """(table, rows) of every derived table of ``staged``, from ``decoded`` when it kept every table, else from
        the staged files.

        Reading the files closes them: the profile's decoded tables must all be written.
        """
        kept = decoded.tables() if decoded is not None else None
        if kept is None:
            staged.finish(_DECODED)
            # One profile: its id is dropped from the result, and an empty one is the cheapest key to sort by.
            sources = {table: f"SELECT * REPLACE ('' AS profile_id) FROM read_parquet({_quoted(str(staged.file(table)))})"
                       for table in _DECODED}
            con = connect_views(sources, config={"memory_limit": DERIVE_MEMORY_LIMIT,
                                                 "temp_directory": str(staged.directory / ".spill")})
            try:
                yield from _derived(con)
            finally:
                con.close()
            return
        con = self._connection(kept)
        try:
            yield from _derived(con)
        except BaseException:
            self.close()  # a failed query can leave a connection unusable: the next profile opens another
            raise
        else:  # the connection as the next profile expects it: no rows of this one
            for table in kept:
                con.unregister(f"decoded_{table}")
            for name in INGEST_DERIVED_TABLES:
                con.execute(f"CREATE OR REPLACE VIEW {name} AS SELECT * FROM _columns_{name}")
                con.unregister(f"derived_{name}")
            for table in _SHARED.values():
                con.execute(f"DROP TABLE IF EXISTS {table}")

    def _connection(self, kept: dict[str, pa.Table]) -> duckdb.DuckDBPyConnection:
        """The shared connection, reading ``kept`` as the decoded tables."""
        if self._con is None:
            # DuckDB cannot change its spill directory once used: one for the connection's life.
            self._spill = tempfile.mkdtemp(prefix="xprosql-derive-")
            sources = {table: f"SELECT '' AS profile_id, * FROM decoded_{table}" for table in _DECODED}
            self._con = connect_views(sources, arrow={f"decoded_{t}": rows for t, rows in kept.items()},
                                      config={"memory_limit": DERIVE_MEMORY_LIMIT, "temp_directory": self._spill})
        else:
            for table, rows in kept.items():
                self._con.register(f"decoded_{table}", rows)
        return self._con


def _derived(con: duckdb.DuckDBPyConnection) -> Iterator[tuple[str, pa.Table]]:
    """The derived tables, from the views of ``con``, each one readable by the next as it is made."""
    lib = library()
    # Building blocks that several derived tables include run once, into a temporary table.
    for module_id, table in _SHARED.items():
        text, params = lib.runnable(module_id)
        con.execute(f"CREATE TEMP TABLE {table} AS {text}", params)
    for name, module_id in INGEST_DERIVED_TABLES.items():
        text = lib.text(module_id, frozenset(_SHARED.items()))
        params = used_parameters(text, lib.bind(module_id, {}))
        rows = query(con, text, params).to_arrow_table()
        con.register(f"derived_{name}", rows)  # what the next derived tables read
        con.execute(f"CREATE OR REPLACE VIEW {name} AS SELECT * FROM derived_{name}")
        yield name, rows.drop_columns(["profile_id"]).cast(TABLES[name])
