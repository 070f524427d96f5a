"""xprosql: ML accelerator profiles as Parquet tables, analysed with SQL.

Example:
    >>> import xprosql
    >>> report = xprosql.ingest("logs/", into="run/")             # doctest: +SKIP
    >>> run = xprosql.load("run/")                                 # doctest: +SKIP
    >>> run.sql("SELECT name, sum(dur_ps) FROM events GROUP BY 1 ORDER BY 2 DESC LIMIT 10")  # doctest: +SKIP
"""

from __future__ import annotations

__version__ = "0.1.0"

from xprosql.errors import IngestError, WarehouseError, XprosqlError
from xprosql.ingest import IngestReport, ingest
from xprosql.run import Result, Run, load

__all__ = [
    "__version__",
    "ingest",
    "load",
    "IngestReport",
    "Run",
    "Result",
    "XprosqlError",
    "IngestError",
    "WarehouseError",
]
