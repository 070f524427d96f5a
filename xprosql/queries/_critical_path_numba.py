"""The critical path's graph walks, numba-compiled, for graphs of many edges (a job, a 1 M-event trace).

The same loops as ``critical_path._relax`` and ``critical_path._topological``, on int64 arrays; compiled on first use
and cached (``cache=True``), so a process after the first loads the machine code.
"""

from __future__ import annotations

import heapq

import numpy as np
from numba import njit

__all__ = ["cut", "relax", "topological"]


@njit(cache=True)
def relax(visit: np.ndarray, starts: np.ndarray, in_edges: np.ndarray, src: np.ndarray,
          weight: np.ndarray) -> tuple[np.ndarray, np.ndarray]:  # pragma: no cover - compiled
    """Distances and best incoming edges of the nodes visited in ``visit`` order: each node takes the first incoming
    edge (in ``in_edges`` order, ``starts`` bounding each node's) of the greatest source distance plus weight."""
    n = visit.shape[0]
    dist = np.zeros(n, dtype=np.int64)
    best_edge = np.full(n, -1, dtype=np.int64)
    for rank in range(n):
        v = visit[rank]
        best = -1
        chosen = -1
        for k in range(starts[rank], starts[rank + 1]):
            e = in_edges[k]
            candidate = dist[src[e]] + weight[e]
            if candidate > best:
                best = candidate
                chosen = e
        if chosen >= 0:
            dist[v] = best
            best_edge[v] = chosen
    return dist, best_edge


@njit(cache=True)
def topological(n: int, s: np.ndarray, d: np.ndarray, position: np.ndarray) -> np.ndarray:  # pragma: no cover
    """A topological order taking ready nodes by ``position`` (Kahn's algorithm); shorter than ``n`` on a cycle."""
    indegree = np.zeros(n, dtype=np.int64)
    for k in range(d.shape[0]):
        indegree[d[k]] += 1
    by_src = np.argsort(s, kind="mergesort")
    starts = np.searchsorted(s[by_src], np.arange(n + 1))
    targets = d[by_src]
    node_at = np.empty(n, dtype=np.int64)
    for v in range(n):
        node_at[position[v]] = v
    ready = [np.int64(x) for x in range(0)]
    for v in range(n):
        if indegree[v] == 0:
            ready.append(position[v])
    heapq.heapify(ready)
    order = np.empty(n, dtype=np.int64)
    count = 0
    while len(ready) > 0:
        v = node_at[heapq.heappop(ready)]
        order[count] = v
        count += 1
        for k in range(starts[v], starts[v + 1]):
            t = targets[k]
            indegree[t] -= 1
            if indegree[t] == 0:
                heapq.heappush(ready, position[t])
    return order[:count]


@njit(cache=True)
def cut(best_edge: np.ndarray, source: np.ndarray, dist: np.ndarray, v: int,
        since: int) -> tuple[np.ndarray, np.ndarray]:  # pragma: no cover - compiled
    """The best-edge path back from node ``v`` while its distance is above ``since``: the edges in order, and the part
    of each edge's weight after ``since``."""
    n = 0
    u = v
    while best_edge[u] >= 0 and dist[u] > since:
        n += 1
        u = source[best_edge[u]]
    edges = np.empty(n, dtype=np.int64)
    weights = np.empty(n, dtype=np.int64)
    u = v
    for k in range(n - 1, -1, -1):
        e = best_edge[u]
        w = source[e]
        edges[k] = e
        weights[k] = dist[u] - max(dist[w], since)
        u = w
    return edges, weights
