"""Exceptions raised by xprosql."""

from __future__ import annotations

__all__ = ["XprosqlError", "IngestError", "WarehouseError"]


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
