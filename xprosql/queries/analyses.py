"""Packaged analyses as runnable SQL: includes expanded, parameters with their defaults.

An analysis (``sql/<name>.sql``) declares its parameters in its header::

    -- Parameters:
    --   $top  BIGINT  op rows kept per profile; NULL for all (default: NULL)

A parameter with ``(default: VALUE)`` may be left out when running it; one
without must be given. An analysis may build on another with a line
``-- @include NAME`` inside its SQL, which :func:`analysis_text` replaces by
the text of ``sql/NAME.sql`` (its header included), so the printed SQL runs
on its own and says where every column comes from.

Example:
    >>> "WITH roofline AS (" in analysis_text("memory_bound")
    True
    >>> bind_parameters("roofline", {"top": 5})["top"], bind_parameters("roofline", {})["peak_source"]
    (5, 'user')
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from xprosql.queries import analysis_sql

__all__ = ["Parameter", "analysis_frame", "analysis_parameters", "analysis_text", "bind_parameters", "included_analyses"]

_INCLUDE = re.compile(r"^[ \t]*--[ \t]*@include[ \t]+([A-Za-z0-9_]+)[ \t]*$", re.MULTILINE)
_PARAMETER = re.compile(r"^--\s+\$([A-Za-z_][A-Za-z0-9_]*)\s+([A-Za-z0-9_\[\]]+)\s+(.*?)\s*$", re.MULTILINE)
_DEFAULT = re.compile(r"\(default:\s*(.*?)\)\s*$")
_NO_DEFAULT = object()


@dataclass(frozen=True)
class Parameter:
    """One declared ``$parameter`` of an analysis."""

    name: str
    sql_type: str
    description: str
    default: Any = _NO_DEFAULT

    @property
    def required(self) -> bool:
        return self.default is _NO_DEFAULT


def analysis_text(name: str, *, stored: Collection[str] = ()) -> str:
    """The SQL of analysis ``name`` with every ``-- @include OTHER`` line replaced by OTHER's SQL.

    ``stored``: analyses whose rows a table of the same name holds (see
    ``PACK_DERIVED_TABLES``); they are read from it, for the ``$profiles`` chosen.
    """
    return _expand(name, (), frozenset(stored))


def included_analyses(name: str) -> set[str]:
    """Every analysis ``name`` builds on, through its includes and theirs."""
    found: set[str] = set()
    for include in _INCLUDE.findall(analysis_sql(name)):
        found |= {include, *included_analyses(include)}
    return found


def _expand(name: str, seen: tuple[str, ...], stored: frozenset[str]) -> str:
    if name in seen:
        raise ValueError(f"analysis {name!r} includes itself: {' -> '.join((*seen, name))}")
    if name in stored:
        return (f"SELECT * FROM {name} WHERE CAST($profiles AS VARCHAR[]) IS NULL "
                f"OR list_contains(CAST($profiles AS VARCHAR[]), profile_id)")
    text = analysis_sql(name)
    return _INCLUDE.sub(lambda m: _expand(m.group(1), (*seen, name), stored).rstrip().rstrip(";"), text)


def _literal(text: str) -> Any:
    text = text.strip()
    if text.upper() == "NULL":
        return None
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    if len(text) >= 2 and text[0] == text[-1] == "'":
        return text[1:-1].replace("''", "'")
    try:
        return int(text)
    except ValueError:
        return float(text)


def analysis_parameters(name: str) -> dict[str, Parameter]:
    """Parameters the analysis (its includes too) declares, in order of declaration."""
    found: dict[str, Parameter] = {}
    for match in _PARAMETER.finditer(analysis_text(name)):
        pname, sql_type, description = match.groups()
        default_match = _DEFAULT.search(description)
        default = _literal(default_match.group(1)) if default_match else _NO_DEFAULT
        found.setdefault(pname, Parameter(pname, sql_type, description, default))
    return found


def bind_parameters(name: str, params: Mapping[str, Any] | None) -> dict[str, Any]:
    """``params`` completed with the declared defaults; raises KeyError on unknown or missing ones."""
    declared = analysis_parameters(name)
    given = dict(params or {})
    unknown = sorted(set(given) - set(declared))
    if unknown:
        raise KeyError(f"analysis {name!r} has no parameter {', '.join(unknown)}; it takes {list(declared) or 'none'}")
    bound: dict[str, Any] = {}
    for pname, parameter in declared.items():
        if pname in given:
            bound[pname] = given[pname]
        elif not parameter.required:
            bound[pname] = parameter.default
        else:
            raise KeyError(f"analysis {name!r} needs parameter ${pname} ({parameter.sql_type}): {parameter.description}")
    return bound


def analysis_frame(run: Any, name: str, profiles: Sequence[str] | None, params: dict[str, Any]) -> Any:
    """Run analysis ``name`` on ``run`` (a :class:`xprosql.Run`), limited to ``profiles`` when given, as Polars."""
    if profiles is not None:
        params["profiles"] = list(profiles)
    return run.analysis(name, **params).pl()
