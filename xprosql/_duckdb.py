"""DuckDB connections as xprosql opens them."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import duckdb

__all__ = ["connect", "opened_connections"]

# The lists of the callers watching the connections opened in this context (opened_connections), outermost first.
_OPENED: ContextVar[tuple[list[duckdb.DuckDBPyConnection], ...]] = ContextVar("xprosql_opened_connections", default=())


def connect(*, config: dict[str, Any] | None = None) -> duckdb.DuckDBPyConnection:
    """An in-memory connection that writes nothing to stdout.

    DuckDB draws a progress bar on stdout for queries over two seconds, even
    when stdout is a file or a pipe; a library embedded in pipelines must not.
    ``run.connection.execute("SET enable_progress_bar = true")`` brings it back.
    """
    con = duckdb.connect(":memory:", config=config or {})
    con.execute("SET enable_progress_bar = false")
    # An ASOF join whose left side DuckDB estimates at 64 rows or fewer runs as a nested loop; over a compacted
    # warehouse it estimates the critical path's call stacks (critical_path._edges) at 1 row and the nested loop
    # over millions took 77 s for 3 profiles where the ASOF join takes 0.1 s.
    con.execute("SET asof_loop_join_threshold = 0")
    for opened in _OPENED.get():
        opened.append(con)
    return con


@contextmanager
def opened_connections() -> Iterator[list[duckdb.DuckDBPyConnection]]:
    """A list that every connection :func:`connect` opens in this context (this thread) joins while inside: what a
    caller must interrupt to stop an analysis, whose shares and final steps run on connections of their own (the MCP
    server's time limit: ``xprosql.mcp_server``). Inside another caller's, a connection joins both lists."""
    opened: list[duckdb.DuckDBPyConnection] = []
    token = _OPENED.set((*_OPENED.get(), opened))
    try:
        yield opened
    finally:
        _OPENED.reset(token)
