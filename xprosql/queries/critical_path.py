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
* :func:`critical_path_graph`: the whole graph's edges (``sql/critical_path/_edges.sql``).
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
from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa

from xprosql.engine import Engine, Result
from xprosql.engine.connection import query, snapshot_connection
from xprosql.engine.library import used_parameters
from xprosql.queries._params import Profiles, given

__all__ = ["BOUND_BY", "critical_path", "critical_path_edges", "critical_path_graph"]

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
    """Every edge of HTA's critical-path graph of every step (``sql/critical_path/_edges.sql``)."""
    module = "critical_path._edges"
    text = engine.library.text(module)
    bound = engine.library.bind(module, given(include_last_step=include_last_step, us_rounding=us_rounding,
                                                   launch_calls=launch_calls))
    con = snapshot_connection(engine.restricted(profiles))
    return Result(query(con, text, used_parameters(text, bound)), connection=con, description=module)


def critical_path(engine: Engine, *, profiles: Profiles = None, include_last_step: bool | None = True,
                  us_rounding: bool | None = None, launch_calls: str | None = None,
                  changes: Mapping[str | int, float] | None = None) -> Result:
    """One row per profile and step: the critical path's length and HTA's breakdown of it, ps and share.

    Columns: the window (profile_id, rank, step_index, step, step_name, window_start_ps, window_end_ps),
    ``length_ps``, ``<bound_by>_ps`` and ``<bound_by>_share`` for each of :data:`BOUND_BY`, ``path_edges``,
    ``graph_nodes``, ``graph_edges`` and ``missing_edges`` (what the trace lacks for HTA's edges).
    ``changes``: op name or event id -> factor on its attributed time, a what-if replay (module docstring).
    """
    steps, _ = _solve(critical_path_graph(engine, profiles=profiles, include_last_step=include_last_step,
                                          us_rounding=us_rounding, launch_calls=launch_calls).arrow(),
                      changes, want_path=False)
    return Result.from_arrow(steps, description="critical_path")


def critical_path_edges(engine: Engine, *, profiles: Profiles = None, include_last_step: bool | None = True,
                        us_rounding: bool | None = None, launch_calls: str | None = None,
                        changes: Mapping[str | int, float] | None = None) -> Result:
    """The critical path of each step, one row per edge in order (``position`` from 0): its nodes, kind, weight
    (as counted: negative weights 0, scaled by ``changes``), the event its time belongs to and its bound_by."""
    _, path = _solve(critical_path_graph(engine, profiles=profiles, include_last_step=include_last_step,
                                         us_rounding=us_rounding, launch_calls=launch_calls).arrow(),
                     changes, want_path=True)
    return Result.from_arrow(path, description="critical_path_edges")


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
    for _, window in frame.group_by(["profile_id", "step_index"], maintain_order=True):
        head = window.row(0, named=True)
        chosen = _longest_path(window)
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
    """
    factor = np.ones(frame.height)
    if not changes:
        return factor
    import polars as pl

    wanted_ids = [k for k in changes if isinstance(k, int)]
    named = frame.filter(pl.col("event_id").is_in(wanted_ids) | pl.col("name").is_in([k for k in changes if isinstance(k, str)]))
    by_event: dict[tuple[Any, ...], float] = {}
    for row in named.select("profile_id", "step_index", "event_id", "name").unique().iter_rows():
        by_event[row[:3]] = float(changes[row[2]] if row[2] in changes else changes[row[3]])
    if not by_event:
        return factor
    key_cols = ("profile_id", "step_index", "event_id")
    keys = list(zip(*(frame[c].to_list() for c in key_cols)))
    for i, key in enumerate(keys):
        if key in by_event:
            factor[i] = by_event[key]
    # CPU ops: their inclusive span on their thread, from their start node (2 x id) to their end node (+ 1).
    cpu = frame.filter(pl.col("bound_by") == "cpu_bound")
    starts = dict(zip(zip(cpu["profile_id"], cpu["step_index"], cpu["src_node"]),
                      zip(cpu["src_ts_ps"], cpu["device_id"], cpu["track_id"])))
    ends = dict(zip(zip(cpu["profile_id"], cpu["step_index"], cpu["dst_node"]), cpu["dst_ts_ps"]))
    profile, step = frame["profile_id"].to_numpy(), frame["step_index"].to_numpy()
    src_ts, dst_ts = frame["src_ts_ps"].to_numpy(), frame["dst_ts_ps"].to_numpy()
    device, track = frame["device_id"].to_numpy(), frame["track_id"].to_numpy()
    is_cpu = (frame["bound_by"] == "cpu_bound").fill_null(False).to_numpy()
    for (p, w, event), f in by_event.items():
        start = starts.get((p, w, 2 * event))
        end = ends.get((p, w, 2 * event + 1))
        if start is None or end is None:
            continue
        inside = (is_cpu & (profile == p) & (step == w) & (device == start[1]) & (track == start[2])
                  & (src_ts >= start[0]) & (dst_ts <= end))
        factor[inside] = f
    return factor


def _longest_path(window: Any) -> list[int]:
    """Row indices of ``window``'s edges on its longest path, in order (networkx's dag_longest_path rule)."""
    src = window["src_node"].to_numpy()
    dst = window["dst_node"].to_numpy()
    weight = window["_w"].to_numpy()
    ts = np.concatenate([window["src_ts_ps"].to_numpy(), window["dst_ts_ps"].to_numpy()])
    ids, inverse = np.unique(np.concatenate([src, dst]), return_inverse=True)
    n, m = len(ids), len(src)
    s, d = inverse[:m], inverse[m:]
    node_ts = np.zeros(n, dtype=np.int64)
    node_ts[inverse] = ts
    # Time order first; where an edge runs against it (equal times, skewed clocks), Kahn's algorithm.
    order = np.lexsort((ids, node_ts))
    position = np.empty(n, dtype=np.int64)
    position[order] = np.arange(n)
    if np.any(position[s] >= position[d]):
        order = _topological(n, s, d, position)
        position[order] = np.arange(n)
    # Incoming edges per node, in HTA's order of adding them.
    by_dst = np.lexsort((window["_order"].to_numpy(), position[d]))
    starts = np.searchsorted(position[d][by_dst], np.arange(n + 1))
    dist = [0] * n
    best_edge = [-1] * n
    s_list, w_list, in_edges = s.tolist(), weight.tolist(), by_dst.tolist()
    for rank, v in enumerate(order.tolist()):
        best, chosen = -1, -1
        for k in range(starts[rank], starts[rank + 1]):
            e = in_edges[k]
            candidate = dist[s_list[e]] + w_list[e]
            if candidate > best:
                best, chosen = candidate, e
        if chosen >= 0:
            dist[v], best_edge[v] = best, chosen
    ordered_dist = np.asarray(dist)[order]
    v = int(order[int(np.argmax(ordered_dist))])
    path: list[int] = []
    while best_edge[v] >= 0:
        path.append(best_edge[v])
        v = s_list[best_edge[v]]
    path.reverse()
    return path


def _topological(n: int, s: np.ndarray, d: np.ndarray, position: np.ndarray) -> np.ndarray:
    """A topological order of the DAG, taking ready nodes in time order (Kahn's algorithm); a cycle raises."""
    indegree = np.bincount(d, minlength=n).tolist()
    by_src = np.argsort(s, kind="stable")
    starts = np.searchsorted(s[by_src], np.arange(n + 1)).tolist()
    targets = d[by_src].tolist()
    pos = position.tolist()
    ready = [(pos[v], v) for v in range(n) if indegree[v] == 0]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        _, v = heapq.heappop(ready)
        order.append(v)
        for k in range(starts[v], starts[v + 1]):
            t = targets[k]
            indegree[t] -= 1
            if indegree[t] == 0:
                heapq.heappush(ready, (pos[t], t))
    if len(order) < n:
        from xprosql.errors import AnalysisError

        raise AnalysisError(f"the critical-path graph has a cycle through {n - len(order)} nodes")
    return np.asarray(order, dtype=np.int64)

