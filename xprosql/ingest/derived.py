"""Tables derived from a profile at ingest, by the packaged SQL, so fleet queries need not rescan events.

``op_stats`` (``sql/op_stats.sql``) sums every op per device: the part of the
roofline that reads events. It is computed once, from the staged Parquet files
of the profile being ingested, and committed with them, so the roofline of
thousands of profiles reads a few hundred rows of each.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa

from xprosql._duckdb import connect
from xprosql.models.tables import INGEST_DERIVED_TABLES, TABLES
from xprosql.queries.analyses import analysis_text, bind_parameters
from xprosql.queries.functions import register_functions
from xprosql.warehouse import StagedProfile

__all__ = ["derive_tables"]


def _quoted(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def derive_tables(staged: StagedProfile) -> Iterator[tuple[str, pa.Table]]:
    """(table, rows) of every derived table of ``staged``.

    Closes the staged files of every other table: the profile's decoded tables must all be written.
    """
    con = connect()
    try:
        register_functions(con)
        decoded = [table for table in TABLES if table not in INGEST_DERIVED_TABLES]
        staged.finish(decoded)
        pid = _quoted(staged.profile_id)
        for table in decoded:
            path = _quoted(str(staged.file(table)))
            con.execute(f"CREATE VIEW {table} AS SELECT {pid} AS profile_id, * FROM read_parquet({path})")
        for name in INGEST_DERIVED_TABLES:
            rows = con.sql(analysis_text(name), params=bind_parameters(name, {})).to_arrow_table()
            yield name, rows.drop_columns(["profile_id"]).cast(TABLES[name])
    finally:
        con.close()
