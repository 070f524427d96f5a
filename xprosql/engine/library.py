"""The SQL library: the analyses of ``sql/<area>/<name>.sql`` as modules with includes and scoped parameters.

A module is one file. Its id is its path with a dot (``ops.roofline``); a name starting with ``_``
is a private building block (``hta._gpu_ops``), never listed to users nor run by name. Its header
(the leading ``--`` lines) declares, in this order of use:

* a first line ``-- <id>: what it answers`` (the catalogue's description is the first paragraph);
* ``-- scope: fleet`` when its rows compare profiles (they do not split by profile);
* ``-- Needs: what a profile must hold to have rows`` (e.g. GPU kernels): a run names the profiles
  without rows and says this, rather than return nothing silently;
* ``-- Input: <name> AS <query>``: a private building block that reads a CTE ``<name>`` its includer
  defines; run on its own, ``<query>`` defines it;
* ``-- Parameters:`` then one line per parameter, ``--   $name  TYPE  meaning, unit (default: VALUE)``;
  a parameter without a default must be given;
* ``-- Passes: $a $b``: parameters of its includes it lets callers set (they keep the include's type,
  default and meaning); every other parameter of an include is bound to its default, so an analysis
  exposes its own parameters and those it deliberately passes, not everything its includes declare;
* ``-- Columns:`` then one line per output column, ``--   name  TYPE  meaning, unit``.

In the body, a line ``-- @include <id>`` stands for the included module's SQL (inside a CTE), so the
expanded text runs on its own and says where every column comes from. Includes are resolved once per
library and cached.

Example:
    >>> lib = library()
    >>> lib.module("memory_bound").id
    'ops.memory_bound'
    >>> lib.parameters("ops.memory_bound")["high_utilization"].default
    0.7
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from xprosql.errors import AnalysisError, ParameterError, UnknownAnalysisError

__all__ = ["Column", "Library", "Module", "Parameter", "library", "placeholders", "sql_dir", "used_parameters"]

_INCLUDE = re.compile(r"^[ \t]*--[ \t]*@include[ \t]+([A-Za-z0-9_.]+)[ \t]*$", re.MULTILINE)
_PARAMETER = re.compile(r"^\$([A-Za-z_][A-Za-z0-9_]*)\s+(\S+)\s+(.*?)\s*$")
_COLUMN = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)\s{2,}(\S+(?: \S+)*?)\s{2,}(.*?)\s*$")
_DEFAULT = re.compile(r"\s*\(default:\s*(.*?)\)\s*$")
_PLACEHOLDER = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)")
_INPUT = re.compile(r"^Input:\s+([A-Za-z_][A-Za-z0-9_]*)\s+AS\s+(.+)$")
# A description ending in ", <unit>" names the unit of its value.
_UNIT = re.compile(
    r",\s*(ps|ns|us|ms|s|bytes|bytes/s|FLOP|FLOP/s|FLOP/byte|TFLOP/s|GB/s|Hz|cycles|%|0\.\.1)$"
)
_REQUIRED: Any = object()


@dataclass(frozen=True)
class Parameter:
    """A declared ``$parameter``: its DuckDB type, meaning, unit and default (``default_sql`` as written)."""

    name: str
    sql_type: str
    description: str
    unit: str | None = None
    default_sql: str | None = None

    @property
    def required(self) -> bool:
        return self.default_sql is None

    @property
    def default(self) -> Any:
        """The default as a Python value (None for NULL); raises for a required parameter."""
        if self.default_sql is None:
            raise ParameterError(f"${self.name} has no default")
        return _literal(self.default_sql)


@dataclass(frozen=True)
class Column:
    """A declared output column: DuckDB type, meaning and unit."""

    name: str
    sql_type: str
    description: str
    unit: str | None = None


@dataclass(frozen=True)
class Module:
    """One file of ``sql/``, parsed."""

    id: str
    path: Path
    text: str
    description: str
    fleet: bool
    needs: str | None
    includes: tuple[str, ...]
    own_parameters: dict[str, Parameter] = field(repr=False)
    passes: tuple[str, ...]
    columns: tuple[Column, ...] = field(repr=False)
    inputs: dict[str, str] = field(default_factory=dict, repr=False)

    @property
    def area(self) -> str:
        return self.id.rsplit(".", 1)[0]

    @property
    def name(self) -> str:
        return self.id.rsplit(".", 1)[1]

    @property
    def private(self) -> bool:
        return self.name.startswith("_")


def sql_dir() -> Path:
    """Where the ``.sql`` files are: inside the wheel, or ``sql/`` of a source checkout."""
    packaged = Path(str(resources.files("xprosql"))) / "sql"
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parents[2] / "sql"


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


# Else the name says it: the project's naming rule for columns and parameters.
_UNIT_SUFFIXES = (("_bytes_per_s", "bytes/s"), ("_flops_per_s", "FLOP/s"), ("flop_rate", "FLOP/s"), ("_ps", "ps"),
                  ("_ns", "ns"), ("_bytes", "bytes"), ("flops", "FLOP"), ("_share", "0..1"), ("_fraction", "0..1"),
                  ("_utilization", "0..1"))


def _unit(name: str, description: str) -> str | None:
    match = _UNIT.search(description)
    if match:
        return match.group(1)
    return next((unit for suffix, unit in _UNIT_SUFFIXES if name.endswith(suffix)), None)


def _parse(module_id: str, path: Path) -> Module:
    text = path.read_text()
    header: list[str] = []
    for line in text.splitlines():
        if not line.startswith("--"):
            break
        header.append(line[2:].rstrip())
    first = header[0].strip() if header else ""
    if not first.startswith(f"{module_id}:"):
        raise AnalysisError(f"{path}: the first line must be '-- {module_id}: <what it answers>'")
    description_lines = [first[len(module_id) + 1:].strip()]
    for line in header[1:]:
        if not line.strip():
            break
        if line.strip() != "scope: fleet" and not line.strip().startswith(("Needs:", "Input:")):
            description_lines.append(line.strip())
    section = None
    parameters: dict[str, Parameter] = {}
    columns: list[Column] = []
    passes: list[str] = []
    fleet = False
    needs = None
    inputs: dict[str, str] = {}
    for line in header[1:]:
        stripped = line.strip()
        if stripped == "scope: fleet":
            fleet = True
        elif match := _INPUT.match(stripped):
            inputs[match.group(1)] = match.group(2)
        elif stripped.startswith("Needs:"):
            needs = stripped.removeprefix("Needs:").strip()
        elif stripped.startswith("Passes:"):
            passes += _PLACEHOLDER.findall(stripped)
        elif stripped in ("Parameters:", "Columns:"):
            section = stripped[:-1]
        elif not stripped or not line.startswith("   "):
            section = None
        elif section == "Parameters" and (match := _PARAMETER.match(stripped)):
            name, sql_type, rest = match.groups()
            default = _DEFAULT.search(rest)
            description = rest[: default.start()] if default else rest
            description = description.strip()
            parameters[name] = Parameter(name, sql_type, description, _unit(name, description),
                                         default.group(1) if default else None)
        elif section == "Columns" and (match := _COLUMN.match(stripped)):
            name, sql_type, rest = match.groups()
            columns.append(Column(name, sql_type, rest, _unit(name, rest)))
    return Module(
        id=module_id, path=path, text=text, description=" ".join(description_lines), fleet=fleet, needs=needs,
        includes=tuple(dict.fromkeys(_INCLUDE.findall(text))), own_parameters=parameters,
        passes=tuple(passes), columns=tuple(columns), inputs=inputs,
    )


def placeholders(text: str) -> set[str]:
    """The ``$names`` a SQL text uses (comment lines left out): DuckDB refuses values for any other."""
    return {name for line in text.split("\n") if not line.lstrip().startswith("--")
            for name in _PLACEHOLDER.findall(line)}


def used_parameters(text: str, params: Mapping[str, Any]) -> dict[str, Any]:
    """The entries of ``params`` whose ``$name`` ``text`` uses."""
    names = placeholders(text)
    return {k: v for k, v in params.items() if k in names}


def _bind_defaults(text: str, parameters: Mapping[str, Parameter]) -> str:
    """``text`` with each ``$p`` of ``parameters`` replaced by its typed default (comment lines left as they are)."""
    if not parameters:
        return text

    def literal(match: re.Match[str]) -> str:
        parameter = parameters.get(match.group(1))
        if parameter is None:
            return match.group(0)
        return f"CAST({parameter.default_sql} AS {parameter.sql_type})"

    return "\n".join(
        line if line.lstrip().startswith("--") else _PLACEHOLDER.sub(literal, line) for line in text.split("\n")
    )


# DuckDB type of a parameter -> the Python values it takes, and how to say so.
_PYTHON_TYPES: dict[str, tuple[tuple[type, ...], str]] = {
    "BIGINT": ((int,), "an integer"), "INTEGER": ((int,), "an integer"),
    "DOUBLE": ((int, float), "a number"), "BOOLEAN": ((bool,), "True or False"), "VARCHAR": ((str,), "a string"),
}


def _checked(module_id: str, parameter: Parameter, value: Any) -> Any:
    """``value`` if it fits the parameter's declared type (None is NULL); else ParameterError."""
    if value is None:
        return value
    if parameter.sql_type.endswith("[]"):
        element = _PYTHON_TYPES.get(parameter.sql_type[:-2])
        if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
            raise ParameterError(f"{module_id}: ${parameter.name} is a list ({parameter.sql_type}), not {value!r}")
        if element and not all(isinstance(v, element[0]) and not (isinstance(v, bool) and bool not in element[0])
                               for v in value):
            raise ParameterError(f"{module_id}: ${parameter.name} takes a list of {element[1]}s, not {value!r}")
        return list(value)
    expected = _PYTHON_TYPES.get(parameter.sql_type)
    if expected is not None:
        kinds, said = expected
        if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
            raise ParameterError(f"{module_id}: ${parameter.name} must be {said} ({parameter.sql_type}), not {value!r}")
    return value


class Library:
    """Every module of one ``sql/`` folder, parsed once; includes resolved on demand and cached."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.modules: dict[str, Module] = {}
        for path in sorted(root.rglob("*.sql")):
            module_id = ".".join(path.relative_to(root).with_suffix("").parts)
            self.modules[module_id] = _parse(module_id, path)
        self._by_name: dict[str, list[str]] = {}
        for module in self.modules.values():
            if not module.private:
                self._by_name.setdefault(module.name, []).append(module.id)

    def public(self) -> list[Module]:
        """The analyses users run, by id."""
        return [m for m in self.modules.values() if not m.private]

    def module(self, name: str, *, private: bool = False) -> Module:
        """The module with id ``name`` (``ops.roofline``), or the public one whose file is ``name``.sql."""
        found = self.modules.get(name)
        if found is None and name in self._by_name and len(self._by_name[name]) == 1:
            found = self.modules[self._by_name[name][0]]
        if found is None or (found.private and not private):
            names = ", ".join(sorted(m.id for m in self.public()))
            raise UnknownAnalysisError(f"no analysis named {name!r}; analyses are {names}")
        return found

    @functools.cache  # noqa: B019 - a library lives as long as the process
    def parameters(self, module_id: str) -> dict[str, Parameter]:
        """What a caller of ``module_id`` may set: its own parameters and those it passes from its includes."""
        module = self.modules[module_id]
        exposed = dict(module.own_parameters)
        for name in module.passes:
            for include in module.includes:
                if name in self.parameters(include):
                    exposed.setdefault(name, self.parameters(include)[name])
                    break
            else:
                raise AnalysisError(f"{module.path}: passes ${name}, which none of its includes declares")
        for include in module.includes:
            hidden = set(self.parameters(include)) - set(exposed)
            required = sorted(p for p in hidden if self.parameters(include)[p].required)
            if required:
                raise AnalysisError(f"{module.path}: include {include} needs ${', $'.join(required)}; pass them")
        return exposed

    def passed(self, module_id: str, target: str) -> set[str]:
        """The parameters of ``target`` (``module_id`` itself or a module it builds on) that a caller of
        ``module_id`` sets; every other parameter of ``target`` runs with its default there."""
        if module_id == target:
            return set(self.parameters(target))
        module = self.modules[module_id]
        found: set[str] = set()
        for include in module.includes:
            if include == target or target in self.included(include):
                found |= self.passed(include, target) & set(module.passes)
        return found

    def included(self, module_id: str) -> set[str]:
        """Every module ``module_id`` builds on, through its includes and theirs."""
        found: set[str] = set()
        for include in self.modules[module_id].includes:
            found |= {include, *self.included(include)}
        return found

    @functools.cache  # noqa: B019
    def text(self, module_id: str, stored: frozenset[tuple[str, str]] = frozenset()) -> str:
        """The runnable SQL of ``module_id``: includes expanded, their hidden parameters bound to defaults.

        ``stored``: (module id, table) pairs; such an include reads the table that stores its rows instead.
        """
        text = self._expand(module_id, (), dict(stored))
        inputs = self.modules[module_id].inputs
        if not inputs:
            return text
        # Run on its own, a building block reads the inputs it declares, as an includer would define them.
        return "WITH " + ", ".join(f"{name} AS ({query})" for name, query in inputs.items()) + f"\nSELECT * FROM (\n{text}\n)"

    def _expand(self, module_id: str, seen: tuple[str, ...], stored: dict[str, str]) -> str:
        if module_id in seen:
            raise AnalysisError(f"{module_id} includes itself: {' -> '.join((*seen, module_id))}")
        if module_id not in self.modules:
            if not seen:
                raise AnalysisError(f"no SQL module {module_id} in {self.root}")
            raise AnalysisError(f"{self.modules[seen[-1]].path}: includes {module_id}, which does not exist")
        module = self.modules[module_id]

        def include(match: re.Match[str]) -> str:
            included = match.group(1)
            body = f"SELECT * FROM {stored[included]}" if included in stored else self._expand(
                included, (*seen, module_id), stored)
            # Scoped: only what this module passes reaches the include; an own parameter of the same
            # name is this module's, not the include's.
            hidden = {n: p for n, p in self.parameters(included).items() if n not in module.passes}
            return _bind_defaults(body, hidden).rstrip().rstrip(";")

        return _INCLUDE.sub(include, self.modules[module_id].text)

    def runnable(self, module_id: str, given: Mapping[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        """``module_id``'s SQL and the values of the placeholders it uses (``given`` over the defaults):
        what to hand DuckDB, which refuses values for placeholders a text lacks.

        Example:
            >>> text, params = library().runnable("ops.roofline", {"top": 5})
            >>> params["top"], params["peak_source"]
            (5, 'user')
        """
        text = self.text(module_id)
        return text, used_parameters(text, self.bind(module_id, given or {}))

    def bind(self, module_id: str, given: Mapping[str, Any]) -> dict[str, Any]:
        """``given`` completed with the declared defaults; unknown or missing parameters raise ParameterError."""
        declared = self.parameters(module_id)
        unknown = sorted(set(given) - set(declared))
        if unknown:
            accepted = ", ".join(declared) or "none"
            raise ParameterError(f"{module_id} has no parameter {', '.join(unknown)}; it takes: {accepted}")
        bound: dict[str, Any] = {}
        for name, parameter in declared.items():
            if name in given:
                bound[name] = _checked(module_id, parameter, given[name])
            elif parameter.required:
                raise ParameterError(f"{module_id} needs {name} ({parameter.sql_type}): {parameter.description}")
            else:
                bound[name] = parameter.default
        return bound


@functools.cache
def library() -> Library:
    """The packaged library (parsed on first use)."""
    return Library(sql_dir())
