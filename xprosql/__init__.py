"""xprosql: ML accelerator profiles as Parquet tables, analysed with SQL.

Example:
    >>> import xprosql
    >>> report = xprosql.ingest("logs/", into="run/")             # doctest: +SKIP
    >>> run = xprosql.load("run/")                                 # doctest: +SKIP
    >>> run.sql("SELECT name, sum(dur_ps) FROM events GROUP BY 1 ORDER BY 2 DESC LIMIT 10").pl()  # doctest: +SKIP
    >>> xprosql.analyses().pl().select("analysis", "description")  # doctest: +SKIP
"""

from __future__ import annotations

from xprosql._version import __version__
from xprosql.engine import Result, compact
from xprosql.engine.catalogue import analyses
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
from xprosql.ingest import IngestReport, ingest
from xprosql.run import Run, load

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
    "XprosqlError",
    "__version__",
    "analyses",
    "compact",
    "ingest",
    "load",
]
