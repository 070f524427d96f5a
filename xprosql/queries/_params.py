"""What every entry point of :mod:`xprosql.queries` shares: the ``profiles=`` type and how options pass."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = ["Profiles", "given"]

# Profile ids to run over (one id, or several); None for every profile of the run.
Profiles = Iterable[str] | str | None


def given(**options: Any) -> dict[str, Any]:
    """The options a caller set: None means "the analysis's declared default" (``xprosql.analyses()``), kept in
    one place, the SQL header, instead of a copy in every Python signature."""
    return {name: value for name, value in options.items() if value is not None}
