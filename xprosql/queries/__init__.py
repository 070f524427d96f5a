"""Packaged analyses: the ``.sql`` files of ``sql/``, found by name.

Example:
    >>> "FROM events" in analysis_sql("top_ops")
    True
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

__all__ = ["analysis_sql", "analysis_names", "sql_dir"]


def sql_dir() -> Path:
    """Where the ``.sql`` files are: inside the wheel, or ``sql/`` of a source checkout."""
    packaged = Path(str(resources.files("xprosql"))) / "sql"
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parents[2] / "sql"


def analysis_names() -> list[str]:
    return sorted(p.stem for p in sql_dir().glob("*.sql"))


def analysis_sql(name: str) -> str:
    """The SQL text of analysis ``name`` (file ``sql/<name>.sql``)."""
    path = sql_dir() / f"{name}.sql"
    if not path.is_file():
        raise KeyError(f"no analysis named {name!r}; analyses are {analysis_names()}")
    return path.read_text()
