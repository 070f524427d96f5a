"""The critical path's graph walks, numba-compiled, for graphs of many edges (a job, a 1 M-event trace).

The same loops as ``critical_path._relax`` and ``critical_path._topological``, on int64 arrays; compiled on first use
and cached (``cache=True``), so a process after the first loads the machine code.
"""

from __future__ import annotations

import numpy as np

from xprosql._numba import njit

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
    """A topological order taking ready nodes by ``position`` (Kahn's algorithm); shorter than ``n`` on a cycle.

    Most nodes become ready in position order: a scan takes those, and a heap holds only the nodes readied behind it.
    """
    indegree = np.zeros(n, dtype=np.int64)
    for k in range(d.shape[0]):
        indegree[d[k]] += 1
    by_src = np.argsort(s, kind="mergesort")
    starts = np.searchsorted(s[by_src], np.arange(n + 1))
    targets = d[by_src]
    node_at = np.empty(n, dtype=np.int64)
    for v in range(n):
        node_at[position[v]] = v
    late = np.empty(n, dtype=np.int64)  # a binary min-heap of positions below the scan's
    size = 0
    scan = 0  # every node at a lower position was ready when the scan passed it, or is in or through the heap
    order = np.empty(n, dtype=np.int64)
    count = 0
    while True:
        while scan < n and indegree[node_at[scan]] != 0:
            scan += 1
        if size > 0 and (scan >= n or late[0] < scan):
            taken = late[0]
            size -= 1
            last = late[size]
            i = 0
            while 2 * i + 1 < size:
                child = 2 * i + 1
                if child + 1 < size and late[child + 1] < late[child]:
                    child += 1
                if late[child] >= last:
                    break
                late[i] = late[child]
                i = child
            late[i] = last
        elif scan < n:
            taken = scan
            scan += 1
        else:
            break
        v = node_at[taken]
        order[count] = v
        count += 1
        for k in range(starts[v], starts[v + 1]):
            t = targets[k]
            indegree[t] -= 1
            if indegree[t] == 0 and position[t] < scan:
                i = size
                size += 1
                while i > 0 and late[(i - 1) >> 1] > position[t]:
                    late[i] = late[(i - 1) >> 1]
                    i = (i - 1) >> 1
                late[i] = position[t]
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
