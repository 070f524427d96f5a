"""Tables derived from a profile at ingest, by the packaged SQL, so fleet queries need not rescan events.

``op_stats`` (``sql/ops/_op_stats.sql``) sums every op per device: the part of the
roofline that reads events; ``framework_op_kernels`` and ``framework_op_stats``
(``sql/torch/``) place the GPU work of PyTorch traces in their CPU op trees. It is computed once, from the decoded tables of the
profile being ingested (in memory when they are small, else their staged
Parquet files), and committed with them, so the roofline of thousands of
profiles reads a few hundred rows of each.
"""

from __future__ import annotations

import functools
import shutil
import tempfile
from collections.abc import Iterator, Mapping, Sequence

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from xprosql.engine.connection import connect_views, empty_relation, query_rows, tables_named
from xprosql.engine.library import library, used_parameters
from xprosql.models.tables import INGEST_DERIVED_TABLES, TABLES
from xprosql.warehouse import StagedProfile

__all__ = ["DERIVE_MEMORY_LIMIT", "IN_MEMORY_BYTES", "DecodedTables", "Deriver"]

# DuckDB's memory limit while deriving: what does not fit spills to disk (a large profile's staging directory,
# deleted with it; the shared connection's own temporary directory), so a profile of tens of millions of events
# ingests in a few GB.
DERIVE_MEMORY_LIMIT = "2GB"
_DECODED = [table for table in TABLES if table not in INGEST_DERIVED_TABLES]
# Included by more than one derived table (the CPU op tree of PyTorch traces): computed once per profile.
_SHARED = {"torch._op_tree": "_shared_op_tree"}
_TORCH = "torch."  # the PyTorch modules (sql/torch/)
# Derived tables of a row per op (or framework op) and device: few enough rows to fetch by binding the query once.
_SUMMARIES = frozenset({"op_stats", "framework_op_stats"})
# Profiles whose decoded tables take less Arrow memory than this are derived from memory, while the writer thread
# still compresses the same batches to Parquet (a batch ingest's worker derives such profiles together up to this
# much); larger ones from the staged files, once written.
IN_MEMORY_BYTES = 256 * 2**20


class DecodedTables:
    """The batches of a profile's decoded tables, kept while they are small enough to derive from in memory."""

    def __init__(self) -> None:
        self._batches: dict[str, list[pa.RecordBatch]] | None = {}
        self.nbytes = 0  # the Arrow memory of the batches kept

    def add(self, table: str, batch: pa.RecordBatch) -> None:
        if self._batches is None:
            return
        self.nbytes += batch.nbytes
        if self.nbytes > IN_MEMORY_BYTES:
            self._batches = None  # too large: derive from the files
            self.nbytes = 0
        else:
            self._batches.setdefault(table, []).append(batch)

    def tables(self) -> dict[str, pa.Table] | None:
        """Every decoded table, or None when they outgrew the limit."""
        if self._batches is None:
            return None
        return {table: pa.Table.from_batches(self._batches.get(table, []), TABLES[table]) for table in _DECODED}


@functools.cache
def _tables_read() -> tuple[list[str], list[str]]:
    """The tables the derived tables' SQL names (views: a view costs a millisecond or two) and the decoded ones of
    them (what a connection must read)."""
    lib = library()
    texts = [lib.runnable(module_id)[0] for module_id in _SHARED]
    texts += [lib.text(module_id, frozenset(_SHARED.items())) for module_id in INGEST_DERIVED_TABLES.values()]
    named = tables_named("\n".join(texts))
    return named, [table for table in _DECODED if table in named]


def _quoted(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


class Deriver:
    """Derives the tables of profiles: those small enough to keep in memory on one DuckDB connection, several at
    once (:meth:`derive_together`), larger ones one at a time from their staged files.

    A connection with the views its SQL names and the SQL functions takes 30-45 ms to set up, and each query's
    planning tens of ms: most of what deriving a small profile costs. The decoded tables in memory are registered
    under their tables' names, without views: they have every column, in the tables' types, and the views took 20 ms
    of the 170 ms of the TPU sample. Larger profiles get a connection of their own, spilling to their staging
    directory.

    Example:
        >>> deriver = Deriver()                                      # doctest: +SKIP
        >>> first, second = deriver.derive_together([decoded_a.tables(), decoded_b.tables()])  # doctest: +SKIP
        >>> for table, rows in deriver.derive(large_staged):         # doctest: +SKIP
        ...     large_staged.write(table, rows)
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

    def derive(self, staged: StagedProfile) -> Iterator[tuple[str, pa.Table]]:
        """(table, rows) of every derived table of ``staged``, from its staged files: a profile too large to keep in
        memory (:class:`DecodedTables`), on a connection of its own.

        Reading the files closes them: the profile's decoded tables must all be written.
        """
        staged.finish(_DECODED)
        # One profile: its id is dropped from the result, and an empty one is the cheapest key to sort by.
        views, decoded = _tables_read()
        sources = {table: f"SELECT * REPLACE ('' AS profile_id) FROM read_parquet({_quoted(str(staged.file(table)))})"
                   for table in decoded if staged.rows[table]}  # a table without rows has no file: its view is empty
        con = connect_views(sources, config={"memory_limit": DERIVE_MEMORY_LIMIT,
                                             "temp_directory": str(staged.directory / ".spill")}, tables=views)
        try:
            for name, rows in _derived(con):
                yield name, _file_rows(name, rows)
        finally:
            con.close()

    def derive_together(self, profiles: Sequence[Mapping[str, pa.Table]]) -> list[dict[str, pa.Table]]:
        """The derived tables of several profiles kept in memory (each one's ``DecodedTables.tables()``), from one
        run of each query over all of them: per profile, table -> rows.

        A query's parsing, planning and connection cost the same for one profile or many: a batch of small
        profiles derived together costs little more than one (8 TPU samples: 106 ms where one takes 64 ms).
        """
        # Short keys: DuckDB keeps strings of up to 12 bytes inline, so joins on them compare no heap strings.
        keys = [str(i) for i in range(len(profiles))]
        tables = {table: pa.concat_tables([_keyed(kept[table], key) for kept, key in zip(profiles, keys, strict=True)])
                  for table in _tables_read()[1]}
        con = self._connection(tables)
        out: list[dict[str, pa.Table]] = [{} for _ in profiles]
        try:
            for name, rows in _derived(con):
                ids = rows.column("profile_id")
                for key, derived in zip(keys, out, strict=True):
                    derived[name] = _file_rows(name, rows.filter(pc.equal(ids, key)) if len(keys) > 1 else rows)
        except BaseException:
            self.close()  # a failed query can leave a connection unusable: the next profiles open another
            raise
        # The connection as the next profiles expect it: no rows of these.
        for table in tables:
            con.unregister(table)
        for name in INGEST_DERIVED_TABLES:
            con.execute(f"CREATE OR REPLACE VIEW {name} AS {empty_relation(name)}")
            con.unregister(f"derived_{name}")
        for table in _SHARED.values():
            con.execute(f"DROP TABLE IF EXISTS {table}")
        return out

    def _connection(self, tables: dict[str, pa.Table]) -> duckdb.DuckDBPyConnection:
        """The shared connection, reading ``tables`` (``profile_id`` first) as the decoded tables."""
        if self._con is None:
            # DuckDB cannot change its spill directory once used: one for the connection's life.
            self._spill = tempfile.mkdtemp(prefix="xprosql-derive-")
            views, decoded = _tables_read()
            self._con = connect_views({}, config={"memory_limit": DERIVE_MEMORY_LIMIT, "temp_directory": self._spill},
                                      tables=[table for table in views if table not in decoded])
        for table, rows in tables.items():
            self._con.register(table, rows)
        return self._con


def _keyed(rows: pa.Table, key: str) -> pa.Table:
    """``rows`` with ``profile_id`` ``key`` in front."""
    return rows.add_column(0, "profile_id", pa.repeat(pa.scalar(key), rows.num_rows))


def _file_rows(name: str, rows: pa.Table) -> pa.Table:
    """Derived rows as a staged profile takes them: without ``profile_id`` (it adds its own), in the table's types."""
    return rows.drop_columns(["profile_id"]).cast(TABLES[name])


def _derived(con: duckdb.DuckDBPyConnection) -> Iterator[tuple[str, pa.Table]]:
    """The derived tables (``profile_id`` first), from the views of ``con``, each one readable by the next as it is made."""
    # Decoding's Arrow memory, freed, stays with Arrow's allocator for its next use; DuckDB allocates its own. Handed
    # back first, it is not held beside DuckDB's (the peak of a 32 MB file's ingest: benchmarks/RESULTS.md).
    pa.default_memory_pool().release_unused()
    lib = library()
    # The PyTorch modules place GPU work in the op tree of a Kineto trace's cpu_op events: without any (an XSpace
    # profile) they have no rows, and planning their SQL was a third of deriving the TPU sample (40 of 120 ms).
    torch_ops = con.execute("SELECT EXISTS (SELECT 1 FROM events WHERE category = 'cpu_op')").fetchall() == [(True,)]
    # Building blocks that several derived tables include run once, into a temporary table.
    for module_id, table in _SHARED.items():
        if torch_ops or not module_id.startswith(_TORCH):
            text, params = lib.runnable(module_id)
            con.execute(f"CREATE TEMP TABLE {table} AS {text}", params)
    for name, module_id in INGEST_DERIVED_TABLES.items():
        if torch_ops or not module_id.startswith(_TORCH):
            text = lib.text(module_id, frozenset(_SHARED.items()))
            params = used_parameters(text, lib.bind(module_id, {}))
            rows = query_rows(con, text, params, stream=name not in _SUMMARIES)
        else:
            rows = _keyed(TABLES[name].empty_table(), "")
        con.register(f"derived_{name}", rows)  # what the next derived tables read
        con.execute(f"CREATE OR REPLACE VIEW {name} AS SELECT * FROM derived_{name}")
        yield name, rows
