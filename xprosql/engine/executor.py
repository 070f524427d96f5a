"""How an analysis runs: one query, shares of profiles, stored summaries, or a Dask cluster.

:class:`Engine` is the interface every analysis (``xprosql.queries``) is written against. Given an
analysis of the SQL library and its parameters, it chooses:

* **stored rows**: profiles whose compaction stored the rows of a module the analysis
  builds on (``models.tables.PACK_DERIVED_TABLES``) read them, when every parameter of that module
  the caller can set has its default; the other profiles compute it from their events;
* **shares**: an analysis that scans events runs over shares of whole profiles of about
  ``SHARE_EVENTS`` events, one after another, so memory stays bounded (a :class:`Backend` decides the
  shares and runs them: :class:`LocalBackend` here, :class:`xprosql.engine.dask.DaskBackend` on a
  cluster), and the parts are combined in the analysis's own final order;
* **fleet** analyses (``-- scope: fleet``): their includes run as above, the fleet SQL once over the
  combined rows.

Otherwise it is one lazy DuckDB query. Every connection comes from :mod:`xprosql.engine.connection`.

Example:
    >>> engine = Engine(Warehouse("run/").snapshot())                       # doctest: +SKIP
    >>> engine.analysis("roofline", top=5).pl()                             # doctest: +SKIP
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

import duckdb
import pyarrow as pa

from xprosql._duckdb import connect
from xprosql.engine.connection import add_views, connect_views, query, query_rows, run_on_share, snapshot_connection, tables_named
from xprosql.engine.library import Library, library, used_parameters
from xprosql.engine.result import Result, first_line
from xprosql.errors import ParameterError, QueryError
from xprosql.models.tables import PACK_DERIVED_TABLES, TABLES
from xprosql.warehouse import PACK_TARGET_ROWS, Snapshot

__all__ = [
    "SHARE_EVENTS", "STREAM_ROWS", "Backend", "Engine", "LocalBackend", "combine", "derive_stored_tables", "profiles_where",
    "scans_events",
]

# Without a cluster, an analysis that scans events runs over shares of about this many events, one
# after another, so its memory stays bounded however large the run is.
SHARE_EVENTS = 4_000_000
# A query over at least this many rows (a share's events, or the rows of a fleet analysis's includes) has its rows
# streamed from a relation (connection.query_rows' stream): they may be as many (a job's graph edges), where a
# temporary table would hold them twice and write them once more; the second bind costs little beside such a query.
STREAM_ROWS = 1_000_000
_EVENTS = re.compile(r"\b(FROM|JOIN)\s+events\b", re.IGNORECASE)


class Backend(Protocol):
    """Splits a snapshot into shares for one SQL text and runs the SQL on each."""

    def shares(self, snapshot: Snapshot, sql: str, events: int) -> list[Snapshot]: ...

    def run(self, shares: list[Snapshot], sql: str, params: Mapping[str, Any]) -> list[pa.Table]: ...


class LocalBackend:
    """Here, one share after another: as fast as one query, with memory bounded by a share."""

    def __init__(self, share_events: int | None = None) -> None:
        self.share_events = share_events  # None: SHARE_EVENTS

    def shares(self, snapshot: Snapshot, sql: str, events: int) -> list[Snapshot]:
        if not scans_events(sql) or not snapshot.profile_ids:
            return [snapshot]
        return snapshot.shares(max(1, -(-events // (self.share_events or SHARE_EVENTS))))

    def run(self, shares: list[Snapshot], sql: str, params: Mapping[str, Any]) -> list[pa.Table]:
        return [run_on_share(share, sql, params) for share in shares]


def scans_events(sql: str) -> bool:
    """True when ``sql`` reads the events table (the analyses whose memory grows with events)."""
    return bool(_EVENTS.search(sql))


def _final_order(sql: str, params: Mapping[str, Any]) -> tuple[str, int | None]:
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
            elif value.get("class") == "PARAMETER":
                identifier = value.get("identifier") or value.get("parameter_nr")
                limit = params.get(str(identifier))
    return order, limit


def combine(parts: list[pa.Table], sql: str, params: Mapping[str, Any], *,
            order: str | None = None) -> pa.Table:
    """Concatenate per-share results and apply ``sql``'s outer ORDER BY and LIMIT to the whole (``order``: that
    ORDER BY list, known, and no LIMIT)."""
    parts = [p for p in parts if p.num_columns] or parts[:1]
    table = pa.concat_tables(parts, promote_options="permissive") if len(parts) > 1 else parts[0]
    order, limit = (order, None) if order is not None else _final_order(sql, params)
    if not order and limit is None:
        return table
    with connect() as con:
        con.register("_combined", table)
        limit_sql = f" LIMIT {int(limit)}" if limit is not None else ""
        try:
            return con.sql(f"SELECT * FROM _combined{f' ORDER BY {order}' if order else ''}{limit_sql}").to_arrow_table()
        except duckdb.Error:  # ordered by something not in the result: keep the limit only
            return con.sql(f"SELECT * FROM _combined{limit_sql}").to_arrow_table()


def derive_stored_tables(snapshot: Snapshot, *, upto: str | None = None) -> dict[str, pa.Table]:
    """The rows of every stored table (``PACK_DERIVED_TABLES``, in order; ``upto``: the last one wanted) over
    ``snapshot``: each its module with default parameters, on one connection, reading the tables before it where it
    builds on them. A union module's parts run one by one, and what two parts of any of the tables include is computed
    once (:func:`_shared_includes`: the findings' rules and the bottleneck steps share the asynchronous ops).

    Compaction's callback (``Warehouse.compact(derive=...)``): storage never runs analyses itself.
    """
    lib = library()
    names = list(PACK_DERIVED_TABLES)
    wanted = names[: names.index(upto) + 1] if upto else names
    modules = {name: lib.modules[PACK_DERIVED_TABLES[name]] for name in wanted}
    # A union module runs part by part; another is its one part.
    parts = {name: tuple(m.includes) if m.union else (m.id,) for name, m in modules.items()}
    read: set[str] = set()  # modules whose rows a registered table holds
    out: dict[str, pa.Table] = {}
    con = snapshot_connection(snapshot)

    def run(module_id: str) -> pa.Table:
        builds_on = lib.included(module_id) | {module_id}
        text = lib.text(module_id, frozenset((m, _alias(m)) for m in read & builds_on))
        return query_rows(con, text, used_parameters(text, lib.bind(module_id, {})), stream=True)  # many rows

    def register(module_id: str, rows: pa.Table) -> None:
        con.register(_alias(module_id), rows)
        read.add(module_id)

    try:
        for i, (name, module) in enumerate(modules.items()):
            needed = set().union(*(lib.included(part) for part in parts[name]))
            for shared in _shared_includes(lib, [p for later in list(parts)[i:] for p in parts[later]], read):
                if shared in needed:
                    register(shared, run(shared))
            rows = [run(part) for part in parts[name]]
            out[name] = combine(rows, "", {}, order=module.order or "") if module.union else rows[0]
            register(module.id, out[name])
        return out
    finally:
        con.close()


def _shared_includes(lib: Library, parts: Sequence[str], read: set[str]) -> list[str]:
    """The includes that two or more of ``parts`` (modules: the parts of union modules, or whole ones) would compute
    (those not in ``read``), innermost first: run once and read by each.

    Only an include that gets its own defaults in every part (what a part passes it defaults to the same value: with
    every default bound, as derivation runs, its rows are then the same in each; the rule of ``Engine._stored``),
    and that reads no includer's CTE."""
    def computed(module_id: str) -> set[str]:
        found: set[str] = set()
        for include in lib.modules[module_id].includes:
            if include not in read:
                found |= {include, *computed(include)}
        return found

    per_part = {part: computed(part) for part in parts}
    counts = Counter(include for found in per_part.values() for include in found)

    def own_defaults(include: str) -> bool:
        defaults = lib.parameters(include)
        return not lib.modules[include].inputs and all(
            lib.parameters(part)[name].default == defaults[name].default
            for part, found in per_part.items() if include in found for name in lib.passed(part, include))

    shared = [include for include, n in counts.items() if n > 1 and own_defaults(include)]
    return sorted(shared, key=lambda include: (len(lib.included(include)), include))


class Engine:
    """Runs SQL and the library's analyses over one snapshot of a warehouse.

    Example:
        >>> engine.sql("SELECT count(*) AS n FROM events").pl()                # doctest: +SKIP
        >>> engine.analysis("memory_bound", profiles=["3fa2c0de12345678"])     # doctest: +SKIP
    """

    def __init__(self, snapshot: Snapshot, *, backend: Backend | None = None, sql_library: Library | None = None) -> None:
        self.snapshot = snapshot
        self.backend: Backend = backend or LocalBackend()
        self.library = sql_library or library()
        self._connection: duckdb.DuckDBPyConnection | None = None
        self._views: set[str] = set()  # the tables with a view on the connection
        self._calls = 0  # fleet queries run on the engine's connection: their rows' names are unique per call

    @property
    def profile_ids(self) -> list[str]:
        return list(self.snapshot.profile_ids)

    @property
    def connection(self) -> duckdb.DuckDBPyConnection:
        """The connection holding a view per table over the whole snapshot (opened on first use)."""
        return self._connection_for(TABLES)

    def _connection_for(self, tables: Iterable[str]) -> duckdb.DuckDBPyConnection:
        """The engine's connection with a view of each of ``tables``. Views are made as queries need them: each costs
        a millisecond or two, and a command's one query reads a few tables of 27 (:func:`tables_named`)."""
        if self._connection is None:
            self._connection = snapshot_connection(self.snapshot, tables=())
        if missing := [t for t in tables if t not in self._views]:
            add_views(self._connection, self.snapshot.scan_sqls(missing), missing)
            self._views.update(missing)
        return self._connection

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None
            self._views = set()

    def sql(self, sql: str, params: Mapping[str, Any] | Sequence[Any] | None = None) -> Result:
        """DuckDB SQL over every table of the snapshot; ``params`` binds ``$name`` or ``?`` placeholders."""
        try:
            relation = query(self.connection, sql, params)
        except duckdb.Error as exc:
            raise QueryError(f"query failed: {exc}") from None
        if relation is None:  # a statement, not a query
            relation = self.connection.sql("SELECT 1 WHERE false")
        return Result(relation)

    def table(self, name: str) -> Any:
        """Table ``name`` as a Polars LazyFrame over the snapshot's files; None when it has no file."""
        return self.snapshot.scan_polars(name)

    def profiles_where(self, where: str) -> list[str]:
        """Profile ids whose ``profiles`` row satisfies the SQL expression ``where`` (one expression)."""
        return profiles_where(self.snapshot, where)

    def restricted(self, profiles: Iterable[str] | str | None) -> Snapshot:
        """The snapshot narrowed to ``profiles`` (all when None); an id it lacks raises ParameterError."""
        if profiles is None:
            return self.snapshot
        wanted = [profiles] if isinstance(profiles, str) else list(profiles)
        missing = sorted(set(wanted) - set(self.snapshot.profile_ids))
        if missing:
            raise ParameterError(f"profiles not in the warehouse {self.snapshot.root}: {', '.join(missing)}")
        return self.snapshot.restrict(wanted)

    def analysis(self, name: str, *, profiles: Iterable[str] | str | None = None, **params: Any) -> Result:
        """Run analysis ``name`` (``ops.roofline`` or ``roofline``) over ``profiles`` (default: all).

        Parameters left out take their declared defaults; see ``xprosql.analyses()``.
        """
        module = self.library.module(name)
        bound = self.library.bind(module.id, params)
        self._check_profile_ids(module.id, bound)
        snapshot = self.restricted(profiles)
        failure = f"analysis {module.id} failed with {_describe(bound)}"
        try:
            result = (self._fleet(module.id, bound, snapshot) if module.fleet and not module.union
                      else self._per_profile(module.id, bound, snapshot))
        except duckdb.Error as exc:
            raise QueryError(f"{failure}: {first_line(exc)}") from None
        result._failure = failure
        if module.needs is not None:
            result._expected = (module.id, module.needs, snapshot.profile_ids, self.source_names)
        return result

    def _check_profile_ids(self, module_id: str, bound: Mapping[str, Any]) -> None:
        """Values declared ``[choices: profiles.profile_id]`` must be profiles of this warehouse: an id it lacks
        (a typo, another warehouse's) would select nothing and the analysis return no rows, silently."""
        for name, parameter in self.library.parameters(module_id).items():
            value = bound[name]
            if not parameter.profile_ids or value is None:
                continue
            missing = sorted(set(value if isinstance(value, list) else [value]) - set(self.snapshot.profile_ids))
            if missing:
                raise ParameterError(f"{module_id}: ${name}: profiles not in the warehouse {self.snapshot.root}: "
                                     f"{', '.join(missing)}")

    def source_names(self, profile_ids: Sequence[str]) -> dict[str, str]:
        """Profile id -> the file it was ingested from (its name), to name profiles to a user."""
        sql = "SELECT profile_id, regexp_extract(source_path, '[^/]*$') FROM profiles WHERE list_contains($p, profile_id)"
        rows = self._connection_for(["profiles"]).execute(sql, {"p": list(profile_ids)}).fetchall()
        return {profile_id: name or profile_id for profile_id, name in rows}

    # -- plans ------------------------------------------------------------------------------------

    def _stored(self, module_id: str, bound: Mapping[str, Any]) -> dict[str, str]:
        """Stored modules ``module_id`` can read instead of computing: (module -> table)."""
        builds_on = self.library.included(module_id) | {module_id}
        usable = {}
        for table, stored_module in PACK_DERIVED_TABLES.items():
            if stored_module not in builds_on:
                continue
            defaults = self.library.parameters(stored_module)
            if all(bound[p] == defaults[p].default for p in self.library.passed(module_id, stored_module)):
                usable[stored_module] = table
        return usable

    def _per_profile(self, module_id: str, bound: Mapping[str, Any], snapshot: Snapshot) -> Result:
        if self.library.modules[module_id].union:
            return self._union(module_id, snapshot)
        text = self.library.text(module_id)
        stored = self._stored(module_id, bound)
        covered = snapshot.stored & set(snapshot.profile_ids) if stored else set()
        if not covered:
            return self._map(snapshot, text, bound, module_id)
        stored_text = self.library.text(module_id, frozenset(stored.items()))
        if module_id in stored:  # the module's own rows are stored: read them, in its order
            order, _ = _final_order(text, bound)
            stored_text = f"SELECT * FROM {stored[module_id]}" + (f" ORDER BY {order}" if order else "")
        rest = sorted(set(snapshot.profile_ids) - covered)
        if not rest:
            return self._map(snapshot, stored_text, bound, module_id)
        parts = [self._map(snapshot.restrict(covered), stored_text, bound, module_id).arrow(),
                 self._map(snapshot.restrict(rest), text, bound, module_id).arrow()]
        return Result.from_arrow(combine(parts, text, bound), description=module_id)

    def _map(self, snapshot: Snapshot, sql: str, bound: Mapping[str, Any], module_id: str) -> Result:
        params = used_parameters(sql, bound)
        events = self._events(snapshot) if scans_events(sql) else 0
        shares = self.backend.shares(snapshot, sql, events)
        if len(shares) == 1 and isinstance(self.backend, LocalBackend):
            stream = events >= STREAM_ROWS
            if shares[0] is self.snapshot:
                return Result.of_query(self._connection_for(tables_named(sql)), sql, params, stream=stream,
                                       description=module_id)
            con = snapshot_connection(shares[0], tables=tables_named(sql))
            return Result.of_query(con, sql, params, stream=stream, connection=con, description=module_id)
        parts = self.backend.run(shares, sql, params)
        return Result.from_arrow(combine(parts, sql, params), description=module_id)

    def _events(self, snapshot: Snapshot) -> int:
        sql = "SELECT coalesce(sum(n_events), 0) FROM profiles WHERE list_contains($p, profile_id)"
        rows = self._connection_for(["profiles"]).execute(sql, {"p": list(snapshot.profile_ids)}).fetchall()
        return int(rows[0][0])

    def _rows(self, table: pa.Table, module_id: str) -> Result:
        """Rows computed here as a Result on the engine's connection (a new connection costs more than small rows)."""
        return Result(self._connection_for(()).from_arrow(table), description=module_id)

    def _union(self, module_id: str, snapshot: Snapshot) -> Result:
        """A union module: the profiles that stored its rows read them. For the others each part runs on its own;
        one that compaction stores is computed as compaction would, the stored tables it builds on once for all
        its parts, share by share."""
        module = self.library.modules[module_id]
        stored = self._stored(module_id, {}).get(module_id)
        covered = snapshot.stored & set(snapshot.profile_ids) if stored else set()
        parts = []
        rest = sorted(set(snapshot.profile_ids) - covered)
        if covered:
            reading = snapshot.restrict(covered) if rest else snapshot
            parts.append(self._map(reading, f"SELECT * FROM {stored}", {}, module_id).arrow())
        if rest or not parts:
            others = snapshot.restrict(rest) if covered else snapshot
            table = next((t for t, m in PACK_DERIVED_TABLES.items() if m == module_id), None)
            if table is not None:
                shares = max(1, -(-self._events(others) // PACK_TARGET_ROWS))
                parts += [derive_stored_tables(share, upto=table)[table] for share in others.shares(shares)]
            else:
                done: dict[str, pa.Table] = {}
                for include in module.includes:
                    inner = self.library.bind(include, {})
                    if self.library.modules[include].fleet:
                        parts.append(self._fleet(include, inner, others, done).arrow())
                    else:
                        parts.append(self._per_profile(include, inner, others).arrow())
        return self._rows(combine(parts, "", {}, order=module.order or ""), module_id)

    def _fleet(self, module_id: str, bound: Mapping[str, Any], snapshot: Snapshot,
               done: dict[str, pa.Table] | None = None) -> Result:
        """A fleet analysis: its includes per profile (as above), then its own SQL once over their rows. ``done``: the
        rows of includes already computed in this run (by module and parameters), which a module two of its
        includes build on (jobs.stragglers under jobs.what_if and diagnose.stragglers) reads instead of computing."""
        module = self.library.modules[module_id]
        done = {} if done is None else done
        arrow = {}
        for include in module.includes:
            own = {k: bound[k] for k in self.library.parameters(include) if k in module.passes}
            inner = self.library.bind(include, own)
            key = f"{include} {sorted(inner.items())!r}"
            if key not in done:
                part = (self._fleet(include, inner, snapshot, done) if self.library.modules[include].fleet
                        else self._per_profile(include, inner, snapshot))
                done[key] = part.arrow()
            arrow[_alias(include)] = done[key]
        stream = sum(rows.num_rows for rows in arrow.values()) >= STREAM_ROWS
        if snapshot is self.snapshot and isinstance(self.backend, LocalBackend):
            # The engine's own connection, with the rows under names of this call alone, read now: a connection
            # with views over every file of a large warehouse takes a tenth of a second to make.
            self._calls += 1
            names = {include: f"{_alias(include)}_{self._calls}" for include in module.includes}
            text = self.library.text(module_id, frozenset(names.items()))
            con = self._connection_for(tables_named(text))
            for include, name in names.items():
                con.register(name, arrow[_alias(include)])
            try:
                rows = query_rows(con, text, used_parameters(text, bound), stream=stream)
            finally:
                for name in names.values():
                    con.unregister(name)
            return self._rows(rows, module_id)
        # Each include reads the rows computed above, as a stored table would be read.
        text = self.library.text(module_id, frozenset((include, _alias(include)) for include in module.includes))
        con = snapshot_connection(snapshot, arrow=arrow, tables=tables_named(text))
        return Result.of_query(con, text, used_parameters(text, bound), stream=stream, connection=con,
                               description=module_id)


def _alias(module_id: str) -> str:
    return "_rows_" + module_id.replace(".", "_")


def _describe(params: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in params.items()) or "no parameters"


def profiles_where(snapshot: Snapshot, where: str) -> list[str]:
    """Profile ids of ``snapshot`` whose ``profiles`` row satisfies the SQL expression ``where``.

    Reads the ``profiles`` table only (one small row per profile), so a predicate on tags prunes every
    other table to the matching profiles' files. ``where`` must be one expression, not a statement.

    Example:
        >>> profiles_where(snapshot, "tags['job'] = 'bert' AND host LIKE 'tpu-%'")  # doctest: +SKIP
        ['0a1b...', ...]
    """
    con = connect_views({"profiles": snapshot.scan_sql("profiles")}, filesystem=snapshot.filesystem())
    try:
        # Parsed as the one expression of a SELECT list: a second statement or clause does not parse.
        tree = json.loads(con.execute("SELECT json_serialize_sql(?)", [f"SELECT ({where})"]).fetchall()[0][0])
        if tree.get("error") or len(tree.get("statements", [])) != 1:
            raise ParameterError(f"bad profile predicate {where!r}: not one SQL expression")
        rows = con.execute(f"SELECT profile_id FROM profiles WHERE ({where}) ORDER BY profile_id").fetchall()
    except duckdb.Error as exc:
        raise ParameterError(f"bad profile predicate {where!r}: {first_line(exc)}") from None
    finally:
        con.close()
    return [r[0] for r in rows]

