"""DuckDB connections as xprosql opens them."""

from __future__ import annotations

from typing import Any

import duckdb

__all__ = ["connect"]


def connect(*, config: dict[str, Any] | None = None) -> duckdb.DuckDBPyConnection:
    """An in-memory connection that writes nothing to stdout.

    DuckDB draws a progress bar on stdout for queries over two seconds, even
    when stdout is a file or a pipe; a library embedded in pipelines must not.
    ``run.connection.execute("SET enable_progress_bar = true")`` brings it back.
    """
    con = duckdb.connect(":memory:", config=config or {})
    con.execute("SET enable_progress_bar = false")
    return con
