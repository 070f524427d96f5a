"""Exceptions raised by xprosql: every mistake a user can make raises an :class:`XprosqlError`."""

from __future__ import annotations

__all__ = [
    "AnalysisError",
    "IngestError",
    "NotApplicableWarning",
    "ParameterError",
    "QueryError",
    "UnknownAnalysisError",
    "UnknownTableError",
    "WarehouseError",
    "XprosqlError",
    "one_line",
]


class XprosqlError(Exception):
    """Base class of every error xprosql raises on purpose."""


class IngestError(XprosqlError):
    """A source file could not be ingested. The warehouse is left as it was.

    Example:
        >>> str(IngestError("run/x.xplane.pb", "empty file"))
        'run/x.xplane.pb: empty file'
    """

    def __init__(self, path: object, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = str(path)
        self.problem = problem


class WarehouseError(XprosqlError):
    """A warehouse directory is missing, unreadable or not a warehouse."""


class UnknownAnalysisError(XprosqlError, LookupError):
    """No analysis has that name (the message lists those that exist)."""


class UnknownTableError(XprosqlError, LookupError):
    """No warehouse table has that name (the message lists the tables)."""


class ParameterError(XprosqlError, ValueError):
    """An analysis was given a parameter it does not take, a value of the wrong kind, or not one it needs."""


class QueryError(XprosqlError):
    """DuckDB refused a query: the message says which query and why."""


class NotApplicableWarning(UserWarning):
    """An analysis has no rows for some profiles, and says why (what those profiles lack).

    Example:
        >>> import warnings
        >>> warnings.simplefilter("error", NotApplicableWarning)  # doctest: +SKIP
    """


class AnalysisError(XprosqlError):
    """A file of the SQL library is malformed (a bug of xprosql or of a user's own module)."""


def one_line(message: str) -> str:
    """A message of several lines (DuckDB's: the query line, a caret under it) as one, as the CLI prints it."""
    lines = [line.strip() for line in message.strip().splitlines()]
    return " ".join(line for line in lines if line.strip("^ ")) or message.strip()
