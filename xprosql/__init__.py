"""xprosql: ML accelerator profiles as Parquet tables, analysed with SQL.

Example:
    >>> import xprosql
    >>> report = xprosql.ingest("logs/", into="run/")             # doctest: +SKIP
    >>> run = xprosql.load("run/")                                 # doctest: +SKIP
    >>> run.sql("SELECT name, sum(dur_ps) FROM events GROUP BY 1 ORDER BY 2 DESC LIMIT 10").pl()  # doctest: +SKIP
    >>> xprosql.analyses().pl().select("analysis", "description")  # doctest: +SKIP
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

from xprosql._version import __version__
from xprosql.errors import (
    AnalysisError,
    IngestError,
    NotApplicableWarning,
    ParameterError,
    QueryError,
    UnknownAnalysisError,
    UnknownTableError,
    WarehouseError,
    XprosqlError,
)

if TYPE_CHECKING:
    from xprosql.engine import Result
    from xprosql.engine.catalogue import analyses
    from xprosql.ingest import IngestReport, compact, ingest
    from xprosql.run import Run, load
    from xprosql.watch import WatchReport, watch

# Imported on first use: DuckDB, Polars and pyarrow take a second to load, and `xprosql --help`,
# a worker process or `import xprosql.errors` need none of them.
_LAZY = {"Result": "xprosql.engine", "compact": "xprosql.ingest", "analyses": "xprosql.engine.catalogue",
         "IngestReport": "xprosql.ingest", "ingest": "xprosql.ingest", "Run": "xprosql.run", "load": "xprosql.run",
         "WatchReport": "xprosql.watch", "watch": "xprosql.watch"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'xprosql' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)


class _Package(types.ModuleType):
    # xprosql.ingest is a function and a subpackage: importing the subpackage would set the attribute to it.
    def __setattr__(self, name: str, value: Any) -> None:
        if not (name == "ingest" and isinstance(value, types.ModuleType)):
            super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


__all__ = [
    "AnalysisError",
    "IngestError",
    "IngestReport",
    "NotApplicableWarning",
    "ParameterError",
    "QueryError",
    "Result",
    "Run",
    "UnknownAnalysisError",
    "UnknownTableError",
    "WarehouseError",
    "WatchReport",
    "XprosqlError",
    "__version__",
    "analyses",
    "compact",
    "ingest",
    "load",
    "watch",
]
