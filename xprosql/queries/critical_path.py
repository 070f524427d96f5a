"""The critical path of each step (Holistic Trace Analysis's model): the Python side of ``sql/critical_path/``.

``sql/critical_path/_nodes.sql`` and ``_edges.sql`` build HTA 0.5's graph per profile and step window (each
``ProfilerStep#N``, else the whole trace) from the warehouse: a start and an end node per CPU op, runtime call and
GPU op; operator, dependency, kernel_launch_delay, kernel_kernel_delay and sync_dependency edges with HTA's
weights, each attributed to an event and a bound_by category. Here the longest path of each window's DAG is
taken, as HTA takes it (``networkx.dag_longest_path``: negative weights count 0; ties: the first best
predecessor in HTA's order of adding edges, CPU edges before sync edges before GPU delay edges, and the first
best end node in topological order), and broken down by HTA's categories.

* :func:`critical_path`: one row per profile and step: ``length_ps``, ps and share of each bound_by category
  (shares in [0, 1], summing to 1 when the length is above 0), the graph's size and what the trace lacks for
  HTA's edges (``missing_edges``).
* :func:`critical_path_edges`: the path itself, edge by edge in order, with the op each edge's time belongs to.
* :func:`critical_path_graph`: the whole graph's edges (``sql/critical_path/_edges.sql``; for XSpace TPU profiles
  ``_tpu_edges.sql``, the graph their stats allow: XLA ops in order on each core, program enqueues, async pairs,
  with what it cannot express in ``missing_edges``).
* ``changes=`` (both): a what-if replay: the weight of every edge attributed to a named op (or event id) is
  scaled by a factor (0 removes the op's own time, 0.5 makes it twice as fast) and the longest path is taken
  again over the same graph, propagating rather than subtracting: another path may become critical.

``launch_calls='hta'`` counts HTA 0.5's exact launch names in the stream queue (default ``'all'``: also
``cuLaunchKernelEx`` and the HIP launches, whose ops HTA sees as kernel-kernel gaps). ``include_last_step`` defaults
to True here (every step keeps its GPU ops); HTA's loader drops the last step's
GPU ops (``include_last_step=False``), and ``us_rounding=True`` rounds every event to whole microseconds as HTA
does: both for like-for-like comparisons with HTA.

Example:
    >>> import xprosql
    >>> run = xprosql.load("run/")                                             # doctest: +SKIP
    >>> critical_path(run.engine).pl()                                         # doctest: +SKIP
    >>> critical_path(run.engine, changes={"sleepy_op": 0.0}).pl()             # doctest: +SKIP
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import pyarrow as pa

from xprosql.engine import Engine, Result
from xprosql.engine.connection import query_rows, snapshot_connection, tables_named
from xprosql.engine.executor import SHARE_EVENTS
from xprosql.engine.library import used_parameters
from xprosql.queries._params import Profiles, given

__all__ = ["BOUND_BY", "COMPILED_EDGES", "Walk", "critical_path", "critical_path_edges", "critical_path_graph",
           "longest_path", "replay"]

# HTA's bound_by categories, in its order.
BOUND_BY = ("cpu_bound", "gpu_compute_bound", "gpu_communication_bound", "gpu_kernel_kernel_overhead",
            "gpu_kernel_launch_overhead")
# HTA adds a node's incoming edges in this order (CPU call stacks, then per GPU op its stream wait, then its
# launch or kernel-kernel edge; CPU sync edges last): networkx keeps the first best predecessor.
_EDGE_ORDER = {"operator": 0, "dependency": 0, "sync_dependency": 1, "kernel_launch_delay": 2, "kernel_kernel_delay": 2}
_WINDOW = ("profile_id", "rank", "step_index", "step", "step_name", "window_start_ps", "window_end_ps")

_STEP_SCHEMA = pa.schema([
    ("profile_id", pa.string()), ("rank", pa.int64()), ("step_index", pa.int64()), ("step", pa.int64()),
    ("step_name", pa.string()), ("window_start_ps", pa.int64()), ("window_end_ps", pa.int64()),
    ("length_ps", pa.int64()),
    *[(f"{b}_ps", pa.int64()) for b in BOUND_BY],
    *[(f"{b}_share", pa.float64()) for b in BOUND_BY],
    ("path_edges", pa.int64()), ("graph_nodes", pa.int64()), ("graph_edges", pa.int64()),
    ("missing_edges", pa.list_(pa.string())),
])
_PATH_SCHEMA = pa.schema([
    ("profile_id", pa.string()), ("rank", pa.int64()), ("step_index", pa.int64()), ("step", pa.int64()),
    ("position", pa.int64()), ("src_node", pa.int64()), ("dst_node", pa.int64()), ("src_ts_ps", pa.int64()),
    ("dst_ts_ps", pa.int64()), ("edge_kind", pa.string()), ("weight_ps", pa.int64()), ("event_id", pa.int64()),
    ("name", pa.string()), ("bound_by", pa.string()),
])


def critical_path_graph(engine: Engine, *, profiles: Profiles = None, include_last_step: bool | None = True,
                        us_rounding: bool | None = None, launch_calls: str | None = None) -> Result:
    """Every edge of the critical-path graph of every step: HTA's for Kineto traces and XSpace GPU profiles
    (``sql/critical_path/_edges.sql``), what the stats allow for XSpace TPU profiles (``_tpu_edges.sql``: the
    options do not apply there)."""
    parts = list(_graphs(engine, profiles, include_last_step=include_last_step, us_rounding=us_rounding,
                         launch_calls=launch_calls))
    rows = pa.concat_tables(parts, promote_options="permissive") if len(parts) > 1 else parts[0]
    return Result.from_arrow(rows, description="critical_path._edges")


def _graphs(engine: Engine, profiles: Profiles, **options: Any) -> Iterator[pa.Table]:
    """The graph's edges share by share (shares of whole profiles of about SHARE_EVENTS events, one after another,
    so a fleet's graphs never sit in memory at once); every share's table has the same columns."""
    snapshot = engine.restricted(profiles)
    module = "critical_path._edges"
    text = engine.library.text(module)
    bound = engine.library.bind(module, given(**options))
    tpu_text = engine.library.text("critical_path._tpu_edges")
    counts = dict(engine.connection.execute(
        "SELECT p.profile_id, p.n_events FROM profiles AS p WHERE list_contains($p, p.profile_id)",
        {"p": list(snapshot.profile_ids)}).fetchall())
    tpus = {r[0] for r in engine.connection.execute(
        "SELECT DISTINCT profile_id FROM devices WHERE kind = 'tpu' AND list_contains($p, profile_id)",
        {"p": list(snapshot.profile_ids)}).fetchall()}
    events = sum(int(n or 0) for n in counts.values())
    shares = snapshot.shares(max(1, -(-events // SHARE_EVENTS))) if snapshot.profile_ids else [snapshot]
    schema = None
    for share in shares:
        con = snapshot_connection(share, tables=tables_named(text + tpu_text))
        try:
            tables = [query_rows(con, text, used_parameters(text, bound), stream=True)]
            if tpus & set(share.profile_ids):
                tables.append(query_rows(con, tpu_text, {}, stream=True))
        finally:
            con.close()
        table = pa.concat_tables(tables, promote_options="permissive") if len(tables) > 1 else tables[0]
        schema = schema or table.schema
        yield table.cast(schema)


def critical_path(engine: Engine, *, profiles: Profiles = None, include_last_step: bool | None = True,
                  us_rounding: bool | None = None, launch_calls: str | None = None,
                  changes: Mapping[str | int, float] | None = None) -> Result:
    """One row per profile and step: the critical path's length and HTA's breakdown of it, ps and share.

    Columns: the window (profile_id, rank, step_index, step, step_name, window_start_ps, window_end_ps),
    ``length_ps``, ``<bound_by>_ps`` and ``<bound_by>_share`` for each of :data:`BOUND_BY`, ``path_edges``,
    ``graph_nodes``, ``graph_edges`` and ``missing_edges`` (what the trace lacks for HTA's edges).
    ``changes``: op name or event id -> factor on its attributed time, a what-if replay (module docstring).
    """
    steps = [_solve(part, changes, want_path=False)[0]
             for part in _graphs(engine, profiles, include_last_step=include_last_step, us_rounding=us_rounding,
                                 launch_calls=launch_calls)]
    return Result.from_arrow(pa.concat_tables(steps), description="critical_path")


def critical_path_edges(engine: Engine, *, profiles: Profiles = None, include_last_step: bool | None = True,
                        us_rounding: bool | None = None, launch_calls: str | None = None,
                        changes: Mapping[str | int, float] | None = None) -> Result:
    """The critical path of each step, one row per edge in order (``position`` from 0): its nodes, kind, weight
    (as counted: negative weights 0, scaled by ``changes``), the event its time belongs to and its bound_by."""
    paths = [_solve(part, changes, want_path=True)[1]
             for part in _graphs(engine, profiles, include_last_step=include_last_step, us_rounding=us_rounding,
                                 launch_calls=launch_calls)]
    return Result.from_arrow(pa.concat_tables(paths), description="critical_path_edges")


def _solve(edges: pa.Table, changes: Mapping[str | int, float] | None,
           want_path: bool) -> tuple[pa.Table, pa.Table]:
    """Longest path of every window of ``edges`` (rows of critical_path._edges)."""
    import polars as pl

    frame = pl.from_arrow(edges)
    assert isinstance(frame, pl.DataFrame)
    factor = _factors(frame, changes)
    weight = frame["weight_ps"].fill_null(0).clip(lower_bound=0).to_numpy().astype(np.float64) * factor
    frame = frame.with_columns(pl.Series("_w", np.rint(weight).astype(np.int64)),
                               pl.col("edge_kind").replace_strict(_EDGE_ORDER, default=3).alias("_order"))
    step_rows: list[dict[str, Any]] = []
    path_rows: list[dict[str, Any]] = []
    # A large graph's windows, however small each, are walked by the compiled loops: all of them are the work.
    compiled = frame.height >= COMPILED_EDGES
    for _, window in frame.group_by(["profile_id", "step_index"], maintain_order=True):
        head = window.row(0, named=True)
        chosen = _longest_path(window, compiled=compiled)
        on_path = window[chosen]
        length = int(on_path["_w"].sum())
        row = {k: head[k] for k in _WINDOW}
        row["length_ps"] = length
        by = dict(on_path.group_by("bound_by").agg(pl.col("_w").sum()).iter_rows())
        for b in BOUND_BY:
            row[f"{b}_ps"] = int(by.get(b, 0) or 0)
            row[f"{b}_share"] = (row[f"{b}_ps"] / length) if length > 0 else None
        nodes = np.unique(np.concatenate([window["src_node"].to_numpy(), window["dst_node"].to_numpy()]))
        row.update(path_edges=len(chosen), graph_nodes=len(nodes), graph_edges=window.height,
                   missing_edges=head["missing_edges"] or [])
        step_rows.append(row)
        if want_path:
            for position, edge in enumerate(on_path.iter_rows(named=True)):
                path_rows.append({
                    "profile_id": head["profile_id"], "rank": head["rank"], "step_index": head["step_index"],
                    "step": head["step"], "position": position, "src_node": edge["src_node"],
                    "dst_node": edge["dst_node"], "src_ts_ps": edge["src_ts_ps"], "dst_ts_ps": edge["dst_ts_ps"],
                    "edge_kind": edge["edge_kind"], "weight_ps": edge["_w"], "event_id": edge["event_id"],
                    "name": edge["name"], "bound_by": edge["bound_by"]})
    return (pa.Table.from_pylist(step_rows, schema=_STEP_SCHEMA),
            pa.Table.from_pylist(path_rows, schema=_PATH_SCHEMA))


def _factors(frame: Any, changes: Mapping[str | int, float] | None) -> np.ndarray:
    """Per edge, the factor ``changes`` puts on its weight (1 for edges no change names).

    A change names an op by name or events.event_id. It scales the edges attributed to the op and, for a CPU op,
    every CPU edge of its thread between its start and its end (the ops it calls, its inclusive time): "this op
    2x faster" speeds up what it does, callees included. A GPU op named is scaled alone (its kernel time).
    ``frame``: edges with profile_id, step_index, src_node, dst_node, src_ts_ps, dst_ts_ps, device_id, track_id,
    event_id, name and bound_by (critical_path._edges, _rank_graph or job_graph rows).
    """
    factor = np.ones(frame.height)
    if not changes or frame.height == 0:
        return factor
    import polars as pl

    by_id = {k: float(v) for k, v in changes.items() if isinstance(k, int)}
    by_name = {k: float(v) for k, v in changes.items() if isinstance(k, str)}
    keyed = frame.select("profile_id", "step_index", "event_id", "name").with_row_index("_row")
    # A change by id wins over one by name (the more specific).
    ids = pl.DataFrame({"event_id": list(by_id), "_f_id": list(by_id.values())},
                       schema={"event_id": pl.Int64, "_f_id": pl.Float64})
    names = pl.DataFrame({"name": list(by_name), "_f_name": list(by_name.values())},
                         schema={"name": pl.String, "_f_name": pl.Float64})
    named = (keyed.join(ids, on="event_id", how="left").join(names, on="name", how="left")
             .with_columns(pl.coalesce("_f_id", "_f_name").alias("_f")).filter(pl.col("_f").is_not_null()))
    if named.height == 0:
        return factor
    factor[named["_row"].to_numpy()] = named["_f"].to_numpy()
    # CPU ops: their inclusive span on their thread, from their start node (2 x id) to their end node (+ 1).
    events = named.select("profile_id", "step_index", "event_id", "_f").unique(["profile_id", "step_index", "event_id"])
    cpu = frame.filter(pl.col("bound_by") == "cpu_bound")
    starts = (cpu.filter(pl.col("src_node") % 2 == 0)
              .select("profile_id", "step_index", (pl.col("src_node") // 2).alias("event_id"),
                      pl.col("src_ts_ps").alias("_from"), "device_id", "track_id")
              .unique(["profile_id", "step_index", "event_id"]))
    ends = (cpu.filter(pl.col("dst_node") % 2 == 1)
            .select("profile_id", "step_index", (pl.col("dst_node") // 2).alias("event_id"), pl.col("dst_ts_ps").alias("_to"))
            .unique(["profile_id", "step_index", "event_id"]))
    spans = events.join(starts, on=["profile_id", "step_index", "event_id"]).join(
        ends, on=["profile_id", "step_index", "event_id"])
    if spans.height == 0:
        return factor
    inside = (frame.select("profile_id", "step_index", "device_id", "track_id", "src_ts_ps", "dst_ts_ps", "bound_by")
              .with_row_index("_row").filter(pl.col("bound_by") == "cpu_bound")
              .join(spans.select("profile_id", "step_index", "device_id", "track_id", "_from", "_to", pl.col("_f").alias("_g")),
                    on=["profile_id", "step_index", "device_id", "track_id"])
              .filter((pl.col("src_ts_ps") >= pl.col("_from")) & (pl.col("dst_ts_ps") <= pl.col("_to")))
              .sort("_from").unique("_row", keep="last"))  # nested named ops: the innermost's factor
    factor[inside["_row"].to_numpy()] = inside["_g"].to_numpy()
    return factor


def _longest_path(window: Any, *, compiled: bool) -> list[int]:
    """Row indices of ``window``'s edges on its longest path, in order (networkx's dag_longest_path rule)."""
    path, _ = longest_path(window["src_node"].to_numpy(), window["dst_node"].to_numpy(), window["_w"].to_numpy(),
                           window["src_ts_ps"].to_numpy(), window["dst_ts_ps"].to_numpy(), window["_order"].to_numpy(),
                           compiled=compiled)
    return path


def longest_path(src: np.ndarray, dst: np.ndarray, weight: np.ndarray, src_ts: np.ndarray, dst_ts: np.ndarray,
                 order: np.ndarray, *, compiled: bool | None = None) -> tuple[list[int], int]:
    """The longest path of a DAG given as edge arrays (node ids, integer weights, the nodes' times, each edge's rank
    among the incoming edges of its target for ties): the indices of its edges in order, and its length.

    Each node takes the first best incoming edge in ``order`` (networkx's dag_longest_path rule, as HTA takes it);
    the path ends at the first node, in visiting order, of the greatest distance (:func:`replay`, as is ``compiled``).
    """
    if len(src) == 0:
        return [], 0
    _, dist, best_edge, s, visit = replay(src, dst, weight, src_ts, dst_ts, order, compiled=compiled)
    v = int(visit[int(np.argmax(dist[visit]))])
    length = int(dist[v])
    path: list[int] = []
    while best_edge[v] >= 0:
        path.append(int(best_edge[v]))
        v = int(s[best_edge[v]])
    path.reverse()
    return path, length


def replay(src: np.ndarray, dst: np.ndarray, weight: np.ndarray, src_ts: np.ndarray, dst_ts: np.ndarray,
           order: np.ndarray, *, compiled: bool | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Every node's distance from the roots of a DAG (edge arrays as :func:`longest_path`'s): the latest of its
    predecessors' distances plus the edge's weight, 0 for a root. Over a time-faithful graph whose one root is the
    start, a node's distance is its time from the start.

    Returns the sorted node ids, their distances and best incoming edges (-1 for a root), each edge's source as an
    index into the ids, and the visiting order (node indices): time order, or Kahn's algorithm where an edge runs
    against it (equal times, skewed clocks). ``compiled``: walk with the numba-compiled loops (compiled once per
    install) or in Python; by default, graphs of :data:`COMPILED_EDGES` edges or more are walked compiled. A caller
    walking many small parts of a large graph passes True.
    """
    walk = Walk.of(src, dst, src_ts, dst_ts, order, compiled=compiled)
    dist, best_edge = walk.relax(weight)
    return walk.ids, dist, best_edge, walk.source, walk.visit


class Walk:
    """The order a replay visits a graph's nodes and their incoming edges in (:func:`replay`), whatever the edges'
    weights: a graph replayed with other weights (a what-if and its baseline) is ordered once. Sorting the node ids
    and the topological order were nearly all of the whole-job replays of the 100-profile corpus's job tables."""

    def __init__(self, ids: np.ndarray, source: np.ndarray, visit: np.ndarray, starts: np.ndarray,
                 in_edges: np.ndarray, compiled: bool) -> None:
        self.ids, self.source, self.visit, self.compiled = ids, source, visit, compiled
        self._starts, self._in_edges = starts, in_edges

    @classmethod
    def of(cls, src: np.ndarray, dst: np.ndarray, src_ts: np.ndarray, dst_ts: np.ndarray, order: np.ndarray, *,
           compiled: bool | None = None) -> Walk:
        """The walk of the graph of these edges (as :func:`replay` takes them)."""
        m = len(src)
        ts = np.concatenate([src_ts, dst_ts])
        ids, inverse = np.unique(np.concatenate([src, dst]), return_inverse=True)
        n = len(ids)
        s, d = inverse[:m].astype(np.int64), inverse[m:].astype(np.int64)
        node_ts = np.zeros(n, dtype=np.int64)
        node_ts[inverse] = ts
        visit = np.lexsort((ids, node_ts)).astype(np.int64)
        position = np.empty(n, dtype=np.int64)
        position[visit] = np.arange(n)
        if compiled is None:
            compiled = m >= COMPILED_EDGES
        if np.any(position[s] >= position[d]):
            visit = _topological_compiled(n, s, d, position) if compiled else _topological(n, s, d, position)
            position[visit] = np.arange(n)
        # Incoming edges per node, in HTA's order of adding them.
        by_dst = np.lexsort((order, position[d])).astype(np.int64)
        starts = np.searchsorted(position[d][by_dst], np.arange(n + 1)).astype(np.int64)
        return cls(ids, s, visit, starts, by_dst, compiled)

    def relax(self, weight: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each node's distance and best incoming edge with the edges weighing ``weight`` (:func:`replay`)."""
        relax = _relax_compiled if self.compiled else _relax
        return relax(self.visit, self._starts, self._in_edges, self.source, np.asarray(weight, dtype=np.int64))


# Graphs this large are walked by compiled loops: below it the Python loop is done before numba is imported.
COMPILED_EDGES = 300_000


def _relax(visit: np.ndarray, starts: np.ndarray, in_edges: np.ndarray, src: np.ndarray,
           weight: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distances and best incoming edges of the nodes, visited in ``visit`` order (a topological order)."""
    n = len(visit)
    dist = [0] * n
    best_edge = [-1] * n
    s_list, w_list, edges = src.tolist(), weight.tolist(), in_edges.tolist()
    bounds = starts.tolist()
    for rank, v in enumerate(visit.tolist()):
        best, chosen = -1, -1
        for k in range(bounds[rank], bounds[rank + 1]):
            e = edges[k]
            candidate = dist[s_list[e]] + w_list[e]
            if candidate > best:
                best, chosen = candidate, e
        if chosen >= 0:
            dist[v], best_edge[v] = best, chosen
    return np.asarray(dist, dtype=np.int64), np.asarray(best_edge, dtype=np.int64)


def _relax_compiled(visit: np.ndarray, starts: np.ndarray, in_edges: np.ndarray, src: np.ndarray,
                    weight: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_relax`, numba-compiled."""
    from xprosql.queries._critical_path_numba import relax

    return relax(visit, starts, in_edges, src, weight)


def _topological_compiled(n: int, s: np.ndarray, d: np.ndarray, position: np.ndarray) -> np.ndarray:
    """:func:`_topological`, numba-compiled."""
    from xprosql.queries._critical_path_numba import topological

    order = topological(n, s, d, position)
    if len(order) < n:
        from xprosql.errors import AnalysisError

        raise AnalysisError(f"the critical-path graph has a cycle through {n - len(order)} nodes")
    return order


def _topological(n: int, s: np.ndarray, d: np.ndarray, position: np.ndarray) -> np.ndarray:
    """A topological order of the DAG, taking ready nodes in time order (Kahn's algorithm); a cycle raises. Most
    nodes become ready in time order: a scan takes those, and a heap holds only the nodes readied behind it."""
    indegree = np.bincount(d, minlength=n).tolist()
    by_src = np.argsort(s, kind="stable")
    starts = np.searchsorted(s[by_src], np.arange(n + 1)).tolist()
    targets = d[by_src].tolist()
    pos = position.tolist()
    node_at = [0] * n
    for v, p in enumerate(pos):
        node_at[p] = v
    late: list[int] = []  # positions below the scan's
    scan = 0
    order: list[int] = []
    while True:
        while scan < n and indegree[node_at[scan]]:
            scan += 1
        if late and (scan >= n or late[0] < scan):
            v = node_at[heapq.heappop(late)]
        elif scan < n:
            v = node_at[scan]
            scan += 1
        else:
            break
        order.append(v)
        for k in range(starts[v], starts[v + 1]):
            t = targets[k]
            indegree[t] -= 1
            if indegree[t] == 0 and pos[t] < scan:
                heapq.heappush(late, pos[t])
    if len(order) < n:
        from xprosql.errors import AnalysisError

        raise AnalysisError(f"the critical-path graph has a cycle through {n - len(order)} nodes")
    return np.asarray(order, dtype=np.int64)

