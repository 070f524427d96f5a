"""Scale-out on Dask: the same ``sql/`` analyses, per share of profiles, on a cluster.

``xprosql.load(DIR, cluster=client)`` with a ``dask.distributed.Client`` makes
:meth:`xprosql.Run.analysis` (and what is built on it: ``roofline``,
``memory_bound``, ``compare``, ...) run here:

* A **per-profile** analysis (every output row depends on one profile's rows; all
  of ``sql/`` but the fleet ones) is a map/reduce: the snapshot is split into
  shares of whole profiles (a pack is never split, see
  :meth:`xprosql.warehouse.Snapshot.shares`), each task opens DuckDB views over
  its share's Parquet files and runs the analysis text unchanged, and the
  results are concatenated and put in the analysis's own final order (its
  outer ``ORDER BY`` and ``LIMIT``, read from DuckDB's parse tree).
* A **fleet** analysis (header line ``-- scope: fleet``) compares profiles with
  each other; the analyses it includes (``-- @include NAME``) are per-profile:
  they run on the cluster as above, and the fleet SQL itself then runs here over
  their combined results.

Without a cluster the same map/reduce runs here, one share after another, for
the per-profile analyses that scan events, over shares of about
``SHARE_EVENTS`` events: as fast as one query, with memory bounded by a share.

Tasks get file paths, not data: the workers must see the warehouse at the same
paths (a shared file system; any path DuckDB reads works inside a task). The
driver's snapshot lease keeps those files alive until the run is closed.

Example:
    >>> from dask.distributed import Client, LocalCluster               # doctest: +SKIP
    >>> client = Client(LocalCluster(n_workers=4, threads_per_worker=1))   # doctest: +SKIP
    >>> run = xprosql.load("run/", cluster=client)                        # doctest: +SKIP
    >>> run.roofline().equals(xprosql.load("run/").roofline())           # doctest: +SKIP
    True
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import duckdb
import pyarrow as pa

from xprosql._duckdb import connect
from xprosql.models.tables import PACK_DERIVED_TABLES, TABLES
from xprosql.queries import analysis_sql
from xprosql.queries.analyses import analysis_parameters, analysis_text, included_analyses
from xprosql.warehouse import Snapshot

if TYPE_CHECKING:
    from xprosql.run import Result, Run

__all__ = [
    "SHARES_PER_WORKER", "SHARE_EVENTS", "combine", "distributed_analysis", "is_fleet_analysis", "run_on_share", "scans_events",
]

# More shares than workers evens out profiles of different sizes.
SHARES_PER_WORKER = 2
# Without a cluster, an analysis that scans events runs over shares of about this many
# events, one after another, so its memory stays bounded however large the run is.
SHARE_EVENTS = 4_000_000
_EVENTS = re.compile(r"\b(FROM|JOIN)\s+events\b", re.IGNORECASE)
_FLEET = re.compile(r"^--\s*scope:\s*fleet\b", re.MULTILINE)
_INCLUDE = re.compile(r"^[ \t]*--[ \t]*@include[ \t]+([A-Za-z0-9_]+)[ \t]*$", re.MULTILINE)
_PARAM = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)")


def is_fleet_analysis(name: str) -> bool:
    """True when ``sql/<name>.sql`` says ``-- scope: fleet`` (rows compare profiles)."""
    return bool(_FLEET.search(analysis_sql(name)))


def _connect(share: Snapshot) -> duckdb.DuckDBPyConnection:
    """A connection with one view per table over ``share``'s files, as :class:`xprosql.Run` makes."""
    from xprosql.models.tables import PARTITION_COLUMN
    from xprosql.queries.functions import register_functions

    con = connect()
    for table in TABLES:
        scan = share.scan_sql(table)
        if scan is None:
            empty = TABLES[table].empty_table().add_column(0, PARTITION_COLUMN, pa.array([], pa.string()))
            con.register(f"_empty_{table}", empty)
            scan = f"SELECT * FROM _empty_{table}"
        con.execute(f"CREATE VIEW {table} AS {scan}")
    register_functions(con)
    return con


def run_on_share(share: Snapshot, sql: str, params: Mapping[str, Any] | None) -> pa.Table:
    """Run ``sql`` over one share of a snapshot (in a Dask task, or here)."""
    con = _connect(share)
    try:
        relation = con.sql(sql, params=dict(params)) if params else con.sql(sql)
        return relation.to_arrow_table()
    finally:
        con.close()


def _final_order(sql: str, params: Mapping[str, Any] | None) -> tuple[str, int | None]:
    """The outer ORDER BY (as column names of the result) and LIMIT of ``sql``."""
    with connect() as con:
        tree = json.loads(con.execute("SELECT json_serialize_sql(?)", [sql]).fetchall()[0][0])
    if tree.get("error"):
        return "", None
    node = tree["statements"][-1]["node"]
    order, limit = "", None
    for modifier in node.get("modifiers", []):
        if modifier["type"] == "ORDER_MODIFIER":
            keys = []
            for item in modifier["orders"]:
                expression = item["expression"]
                if expression.get("class") != "COLUMN_REF":
                    return "", None  # an expression we cannot re-evaluate on the result: keep task order
                column = '"' + expression["column_names"][-1].replace('"', '""') + '"'
                direction = "DESC" if item["type"] == "DESCENDING" else "ASC"
                nulls = {"NULLS FIRST": " NULLS FIRST", "NULLS LAST": " NULLS LAST"}.get(item["null_order"], "")
                keys.append(f"{column} {direction}{nulls}")
            order = ", ".join(keys)
        elif modifier["type"] == "LIMIT_MODIFIER" and modifier.get("limit"):
            value = modifier["limit"]
            if value.get("class") == "CONSTANT":
                limit = int(value["literal"]["text"])
            elif value.get("class") == "PARAMETER" and params:
                identifier = value.get("identifier") or value.get("parameter_nr")
                limit = params.get(str(identifier))  # type: ignore[assignment]
    return order, limit


def combine(parts: list[pa.Table], sql: str, params: Mapping[str, Any] | None) -> pa.Table:
    """Concatenate per-share results and apply ``sql``'s outer ORDER BY and LIMIT to the whole."""
    parts = [p for p in parts if p.num_columns] or parts[:1]
    table = pa.concat_tables(parts, promote_options="permissive") if len(parts) > 1 else parts[0]
    order, limit = _final_order(sql, params)
    if not order and limit is None:
        return table
    with connect() as con:
        con.register("_combined", table)
        limit_sql = f" LIMIT {int(limit)}" if limit is not None else ""
        try:
            return con.sql(f"SELECT * FROM _combined{f' ORDER BY {order}' if order else ''}{limit_sql}").to_arrow_table()
        except duckdb.Error:  # ordered by something not in the result: keep the limit only
            return con.sql(f"SELECT * FROM _combined{limit_sql}").to_arrow_table()


def scans_events(sql: str) -> bool:
    """True when ``sql`` reads the events table (the analyses whose memory grows with events)."""
    return bool(_EVENTS.search(sql))


def _local_shares(run: Run, sql: str, params: Mapping[str, Any] | None) -> list[Snapshot]:
    """Shares of about SHARE_EVENTS events for an event-scanning ``sql``; one share otherwise."""
    snapshot = run._snapshot
    chosen = (params or {}).get("profiles")
    if chosen is not None:
        snapshot = snapshot.restrict(chosen)
    if not scans_events(sql) or not snapshot.profile_ids:
        return [snapshot]
    events = run.sql("SELECT sum(n_events) FROM profiles WHERE list_contains($p, profile_id)",
                     {"p": list(snapshot.profile_ids)}).rows()[0][0] or 0
    return snapshot.shares(max(1, -(-int(events) // SHARE_EVENTS)))


def _map(run: Run, sql: str, params: Mapping[str, Any] | None) -> pa.Table:
    client = run._cluster
    if client is None:  # here, one share after another: the same time, memory bounded by a share
        shares = _local_shares(run, sql, params)
        if len(shares) == 1:
            return run.sql(sql, params).arrow()
        return combine([run_on_share(share, sql, params) for share in shares], sql, params)
    workers = max(len(client.scheduler_info().get("workers", {})), 1)
    shares = run._snapshot.shares(workers * SHARES_PER_WORKER)
    if not shares:  # an empty warehouse: run here over the empty views
        return run.sql(sql, params).arrow()
    futures = client.map(run_on_share, shares, sql=sql, params=dict(params) if params else None, pure=False)
    return combine(client.gather(futures), sql, params)


def _stored_analyses(name: str, params: Mapping[str, Any] | None) -> list[str]:
    """The pack-derived tables that can stand in for analyses ``name`` builds on: run with their defaults."""
    given = dict(params or {})
    builds_on = included_analyses(name) | {name}
    return [
        table for table in PACK_DERIVED_TABLES
        if table in builds_on and all(
            given.get(p.name, p.default) == p.default for p in analysis_parameters(table).values() if p.name != "profiles"
        )
    ]


def _per_profile(run: Run, name: str, params: Mapping[str, Any] | None) -> pa.Table:
    """A per-profile analysis: packed profiles read what compaction stored for them, the others their events."""
    text = analysis_text(name)
    stored = _stored_analyses(name, params)
    if not stored:
        return _map(run, text, params)
    given = dict(params or {})
    snapshot = run._snapshot if given.get("profiles") is None else run._snapshot.restrict(given["profiles"])
    wanted = set(snapshot.profile_ids)
    covered = {p for pack in snapshot.packs if all(t in pack.rows for t in stored) for p in pack.profiles} & wanted
    rest = sorted(wanted - covered)
    if not covered:
        return _map(run, text, params)
    stored_text = analysis_text(name, stored=stored)
    stored_params = {k: v for k, v in given.items() if k in set(_PARAM.findall(stored_text))}
    if not rest:  # all packed (one small query, unless what is not stored scans events)
        return _map(run, stored_text, stored_params)
    parts = [_map(run, stored_text, {**stored_params, "profiles": sorted(covered)}), _map(run, text, {**given, "profiles": rest})]
    return combine(parts, text, params)


def distributed_analysis(run: Run, name: str, params: Mapping[str, Any] | None) -> Result:
    """Run analysis ``name`` with bound ``params`` on ``run``'s cluster, or here share by share."""
    from xprosql.run import Result

    if not is_fleet_analysis(name):
        return Result(_per_profile(run, name, params))
    # Fleet: its included per-profile analyses on the cluster, then the fleet SQL here.
    text = analysis_sql(name)
    given = dict(params or {})
    for include in dict.fromkeys(_INCLUDE.findall(text)):
        own = {k: given[k] for k in analysis_parameters(include) if k in given}
        result = distributed_analysis(run, include, own)
        assert result is not None
        run.connection.register(f"_fleet_{include}", result.arrow())
    text = _INCLUDE.sub(lambda m: f"SELECT * FROM _fleet_{m.group(1)}", text)
    used = set(_PARAM.findall(text))
    return run.sql(text, {k: v for k, v in given.items() if k in used} or None)
