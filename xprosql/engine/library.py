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
* ``-- Parameters:`` then one line per parameter,
  ``--   $name  TYPE  meaning, unit [range: LOW..HIGH] [choices: a, b] (default: VALUE)``; a parameter without
  a default must be given. The optional bracketed tags say which values it takes (every caller is held to
  them: :meth:`Library.bind`, so Python and the command line alike):

  - ``[range: LOW..HIGH]`` (numbers): ``LOW <= value <= HIGH``; either end may be left out (``1..``: at
    least 1); a ``<`` beside the dots makes that end strict, as in a chained comparison with the value in
    place of the dots (``0<..``: above 0; ``0..<1``: from 0 up to, not including, 1). Of a list, each item.
  - ``[choices: a, b]`` (strings): one of these words; of a list, each item. ``[choices: profiles.profile_id]``:
    a profile id of the warehouse the analysis runs on (the engine checks it, knowing the warehouse).

  A parameter takes NULL when its default is NULL or its meaning says what NULL does (the word ``NULL``);
  otherwise NULL is refused, since it would run the query with a comparison that is never true;
* ``-- Passes: $a $b``: parameters of its includes it lets callers set (they keep the include's type,
  default and meaning); every other parameter of an include is bound to its default, so an analysis
  exposes its own parameters and those it deliberately passes, not everything its includes declare;
* ``-- Show: a, b, c``: the columns that matter most, which a terminal table shows (:func:`shown_columns`;
  ``xprosql sql --columns all`` or ``--format csv`` gives every column);
* ``-- Columns:`` then one line per output column, ``--   name  TYPE  meaning, unit``.

In the body, a line ``-- @include <id>`` stands for the included module's SQL (inside a CTE), so the
expanded text runs on its own and says where every column comes from; ``-- @include <id> unordered`` leaves
out the included module's final ORDER BY (its last line), for a CTE whose readers need no order. Includes are resolved once per
library and cached.

A **union** module has no body but its include lines: its rows are those of the modules it includes (the same
columns), in the order of its ``-- Order: <SQL ORDER BY list>`` header line if it has one. The engine runs each
part on its own and concatenates them (``diagnose.findings``: one query over fourteen rules, each including the
step breakdown, plans and runs many times slower than the rules one by one); its text, where it is shown or
included, is the parts' ``UNION ALL``.

Values as text (the command line's ``--param NAME=VALUE``; :func:`parse_value`): a value is read as the
parameter's declared type. ``NULL``, unquoted, is NULL; a string may be written in SQL quotes (``'NULL'`` is
the string, ``''`` a quote inside); a list (``VARCHAR[]``) is comma-separated (``a,b``; no spaces needed)
or bracketed like JSON or Python (``['a', 'b']``, ``["a","b"]``: items holding a comma), ``[]`` being empty.

Example:
    >>> lib = library()
    >>> lib.module("memory_bound").id
    'ops.memory_bound'
    >>> lib.parameters("ops.memory_bound")["high_utilization"].default
    0.7
    >>> lib.parameters("ops.top_ops")["top"].range
    Range(low=1, low_strict=False, high=None, high_strict=False)
"""

from __future__ import annotations

import ast
import functools
import json
import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from xprosql.errors import AnalysisError, ParameterError, UnknownAnalysisError

__all__ = [
    "PROFILE_IDS", "VALUE_SYNTAX", "Column", "Library", "Module", "Parameter", "Range", "library", "parse_value", "placeholders",
    "shown_columns", "sql_dir", "sql_literal", "used_parameters",
]

_INCLUDE = re.compile(r"^[ \t]*--[ \t]*@include[ \t]+([A-Za-z0-9_.]+)(?:[ \t]+(unordered))?[ \t]*$", re.MULTILINE)
# A module's final ORDER BY (its last line), which an ``unordered`` include leaves out.
_FINAL_ORDER = re.compile(r"\nORDER BY [^\n]*\Z")
_PARAMETER = re.compile(r"^\$([A-Za-z_][A-Za-z0-9_]*)\s+(\S+)\s+(.*?)\s*$")
_COLUMN = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)\s{2,}(\S+(?: \S+)*?)\s{2,}(.*?)\s*$")
_DEFAULT = re.compile(r"\s*\(default:\s*(.*?)\)\s*$")
# A parameter's bracketed tags: [range: 1..], [choices: step, profile].
_TAG = re.compile(r"\s*\[([a-z]+):\s*([^\]]*?)\s*\]")
_NUMBER = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"
_RANGE = re.compile(rf"^(?:(?P<low>{_NUMBER})(?P<low_strict><)?)?\.\.(?:(?P<high_strict><)?(?P<high>{_NUMBER}))?$")
_NUMERIC_TYPES = ("BIGINT", "INTEGER", "DOUBLE")
# [choices: profiles.profile_id]: the profile ids of the warehouse queried, which only the engine knows.
PROFILE_IDS = "profiles.profile_id"
_PLACEHOLDER = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)")
_INPUT = re.compile(r"^Input:\s+([A-Za-z_][A-Za-z0-9_]*)\s+AS\s+(.+)$")
# A description ending in ", <unit>" names the unit of its value.
_UNIT = re.compile(
    r",\s*(ps|ns|us|ms|s|bytes|bytes/s|FLOP|FLOP/s|FLOP/byte|TFLOP/s|GB/s|Hz|cycles|%|0\.\.1)$"
)
_REQUIRED: Any = object()


# How a value is written on the command line (``xprosql analyses NAME`` prints it under the parameters).
VALUE_SYNTAX = (
    "values: --param NAME=VALUE, read as the parameter's type; NULL (unquoted) is NULL where a parameter takes it, "
    "'NULL' in quotes the string; a list is comma-separated (a,b) or bracketed (['a', 'b'], for items with a comma; "
    "[] is empty); [range: 1..] means at least 1, [range: 0<..] above 0, [range: 0..1] from 0 to 1"
)


@dataclass(frozen=True)
class Range:
    """The values a numeric parameter takes, as declared ``[range: LOW..HIGH]``: an end is None when open."""

    low: float | None = None
    low_strict: bool = False
    high: float | None = None
    high_strict: bool = False

    @classmethod
    def parse(cls, text: str, sql_type: str) -> Range:
        """``0..1``, ``1..``, ``0<..``, ``..<1``: ValueError for anything else."""
        match = _RANGE.match(text.replace(" ", ""))
        if match is None or (match["low"] is None and match["high"] is None):
            raise ValueError(f"range {text!r} is not LOW..HIGH (e.g. 1.., 0..1, 0<..)")
        number = int if sql_type in ("BIGINT", "INTEGER") else float

        def bound(value: str | None) -> Any:
            return None if value is None else number(float(value))

        return cls(bound(match["low"]), bool(match["low_strict"]), bound(match["high"]), bool(match["high_strict"]))

    def admits(self, value: float) -> bool:
        """True when ``value`` is in the range (NaN never is)."""
        if self.low is not None and not (value > self.low if self.low_strict else value >= self.low):
            return False
        return self.high is None or bool(value < self.high if self.high_strict else value <= self.high)

    def __str__(self) -> str:
        """As written in a header: ``0<..``."""
        low = "" if self.low is None else f"{self.low:g}{'<' if self.low_strict else ''}"
        high = "" if self.high is None else f"{'<' if self.high_strict else ''}{self.high:g}"
        return f"{low}..{high}"

    def said(self) -> str:
        """In words for a message: ``>= 0 and <= 1``."""
        parts = [] if self.low is None else [f"{'>' if self.low_strict else '>='} {self.low:g}"]
        parts += [] if self.high is None else [f"{'<' if self.high_strict else '<='} {self.high:g}"]
        return " and ".join(parts)


@dataclass(frozen=True)
class Parameter:
    """A declared ``$parameter``: its DuckDB type, meaning, unit, default (``default_sql`` as written) and the
    values it takes (``range`` of a number, ``choices`` of a string; of a list, of each item)."""

    name: str
    sql_type: str
    description: str
    unit: str | None = None
    default_sql: str | None = None
    range: Range | None = None
    choices: tuple[str, ...] | None = None

    @property
    def required(self) -> bool:
        return self.default_sql is None

    @property
    def default(self) -> Any:
        """The default as a Python value (None for NULL); raises for a required parameter."""
        if self.default_sql is None:
            raise ParameterError(f"${self.name} has no default")
        return _literal(self.default_sql)

    @property
    def nullable(self) -> bool:
        """Whether NULL is a value it takes: its default is NULL, or its meaning says what NULL does."""
        return (self.default_sql is not None and self.default_sql.strip().upper() == "NULL") or bool(
            re.search(r"\bNULL\b", self.description))

    @property
    def tags(self) -> str:
        """The values it takes, as its header says them: ``[range: 1..] [choices: a, b]`` (empty when any)."""
        said = [f"[range: {self.range}]"] if self.range else []
        said += [f"[choices: {', '.join(self.choices)}]"] if self.choices else []
        return " ".join(said)

    @property
    def profile_ids(self) -> bool:
        """Whether its values are profile ids of the warehouse queried (``[choices: profiles.profile_id]``)."""
        return self.choices == (PROFILE_IDS,)

    def check(self, module_id: str, value: Any) -> Any:
        """``value`` if this parameter takes it (type, NULL, range, choices); else a ParameterError naming both."""
        where = f"{module_id}: ${self.name}"
        if value is None:
            if not self.nullable:
                default = f"; leave it out for its default, {self.default_sql}" if not self.required else ""
                raise ParameterError(f"{where} does not take NULL{default}")
            return None
        items = _typed(where, self.sql_type, value)
        for item in items if self.sql_type.endswith("[]") else [value]:
            if self.range is not None and not self.range.admits(item):
                raise ParameterError(f"{where} must be {self.range.said()}, not {item!r}")
            if self.choices is not None and not self.profile_ids and item not in self.choices:
                raise ParameterError(f"{where} must be one of {', '.join(self.choices)}, not {item!r}")
        return items


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
    union: bool = False  # the body is include lines only: the union of their rows
    order: str | None = None  # a union module's ORDER BY list

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
        if line.strip() != "scope: fleet" and not line.strip().startswith(("Needs:", "Input:", "Order:")):
            description_lines.append(line.strip())
    section = None
    parameters: dict[str, Parameter] = {}
    columns: list[Column] = []
    passes: list[str] = []
    fleet = False
    needs = None
    order = None
    inputs: dict[str, str] = {}
    for line in header[1:]:
        stripped = line.strip()
        if stripped == "scope: fleet":
            fleet = True
        elif stripped.startswith("Order:"):
            order = stripped.removeprefix("Order:").strip()
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
            try:
                parameter = _parameter(*match.groups())
                if not parameter.required:
                    parameter.check(module_id, parameter.default)
            except (AnalysisError, ParameterError) as exc:
                # A header that contradicts itself is the library's mistake, found when it loads.
                raise AnalysisError(f"{path}: {exc}") from None
            parameters[parameter.name] = parameter
        elif section == "Columns" and (match := _COLUMN.match(stripped)):
            name, sql_type, rest = match.groups()
            columns.append(Column(name, sql_type, rest, _unit(name, rest)))
    includes = tuple(dict.fromkeys(match.group(1) for match in _INCLUDE.finditer(text)))
    body = [line for line in text.splitlines() if line.strip() and not line.lstrip().startswith("--")]
    union = bool(includes) and not body
    if union and (parameters or passes):
        raise AnalysisError(f"{path}: a union module (include lines only) runs its parts with their defaults: "
                            "it takes no parameters")
    return Module(
        id=module_id, path=path, text=text, description=" ".join(description_lines), fleet=fleet, needs=needs,
        includes=includes, own_parameters=parameters,
        passes=tuple(passes), columns=tuple(columns), inputs=inputs, union=union, order=order,
    )


def _parameter(name: str, sql_type: str, rest: str) -> Parameter:
    """A parameter line of a header, parsed: ``rest`` is its meaning, tags and default."""
    default = _DEFAULT.search(rest)
    description = rest[: default.start()] if default else rest
    value_range: Range | None = None
    choices: tuple[str, ...] | None = None
    for tag, value in _TAG.findall(description):
        if tag == "range" and sql_type in _NUMERIC_TYPES:
            try:
                value_range = Range.parse(value, sql_type)
            except ValueError as exc:
                raise AnalysisError(f"${name}: {exc}") from None
        elif tag == "choices" and sql_type in ("VARCHAR", "VARCHAR[]"):
            choices = tuple(c.strip() for c in value.split(",") if c.strip())
        else:
            raise AnalysisError(f"${name} ({sql_type}): no tag [{tag}: ...] for this type; "
                                "[range: LOW..HIGH] is for numbers, [choices: a, b] for strings")
    description = _TAG.sub("", description).strip()
    return Parameter(name, sql_type, description, _unit(name, description), default.group(1) if default else None,
                     value_range, choices)


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
    return _inline(text, {name: f"CAST({p.default_sql} AS {p.sql_type})" for name, p in parameters.items()})


def _inline(text: str, literals: Mapping[str, str]) -> str:
    """``text`` with each ``$name`` of ``literals`` replaced by its SQL (comment lines left as they are)."""
    if not literals:
        return text

    def literal(match: re.Match[str]) -> str:
        return literals.get(match.group(1), match.group(0))

    return "\n".join(
        line if line.lstrip().startswith("--") else _PLACEHOLDER.sub(literal, line) for line in text.split("\n")
    )


def sql_literal(value: Any, sql_type: str) -> str:
    """``value`` as a SQL expression of ``sql_type``: ``CAST(10 AS BIGINT)``, ``CAST(['a'] AS VARCHAR[])``."""

    def text(item: Any) -> str:
        if item is None:
            return "NULL"
        if isinstance(item, bool):
            return "true" if item else "false"
        if isinstance(item, float) and not math.isfinite(item):
            return f"'{item}'"
        if isinstance(item, (int, float)):
            return repr(item)
        if isinstance(item, (list, tuple)):
            return "[" + ", ".join(text(i) for i in item) + "]"
        return "'" + str(item).replace("'", "''") + "'"

    return f"CAST({text(value)} AS {sql_type})"


def _bracketed(text: str) -> list[Any]:
    """A list written like JSON or Python: ``["a", "b"]``, ``['a', 'b']``, ``[1, 2]``; ValueError otherwise."""
    try:
        value = json.loads(text)
    except ValueError:
        try:
            value = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            value = None
    if not isinstance(value, (list, tuple)):
        raise ValueError(f"{text!r} is not a list: write a,b or ['a', 'b']")
    return list(value)


def _unquoted(text: str) -> str:
    """A string as written: in SQL quotes (``'it''s'``) it is what they hold, else the text itself."""
    if len(text) >= 2 and text[0] == text[-1] == "'":
        return text[1:-1].replace("''", "'")
    return text


def parse_value(text: str, sql_type: str | None = None) -> Any:
    """A value written as text (``--param NAME=VALUE``) as the Python value of ``sql_type``; with no declared
    type (a free query's ``$name``), whichever of NULL, true/false, an integer, a number, a list or a string it reads as.

    ValueError says what it is not; :meth:`Library.bind` then checks ranges and choices.

    Example:
        >>> parse_value("a,b", "VARCHAR[]"), parse_value("['a', 'b']", "VARCHAR[]"), parse_value("NULL", "VARCHAR")
        (['a', 'b'], ['a', 'b'], None)
    """
    stripped = text.strip()
    if stripped.upper() == "NULL":
        return None
    if sql_type is None:
        if stripped.lower() in ("true", "false"):
            return stripped.lower() == "true"
        if re.fullmatch(r"[-+]?\d+", stripped):
            return int(stripped)
        if re.fullmatch(_NUMBER, stripped):
            return float(stripped)
        return _bracketed(stripped) if stripped.startswith("[") and stripped.endswith("]") else _unquoted(text)
    if sql_type.endswith("[]"):
        if stripped.startswith("["):
            return _bracketed(stripped)
        return [parse_value(item, sql_type[:-2]) for item in stripped.split(",") if item.strip()]
    if sql_type in ("BIGINT", "INTEGER") and re.fullmatch(r"[-+]?\d+", stripped):
        return int(stripped)
    if sql_type == "DOUBLE" and re.fullmatch(rf"{_NUMBER}|[-+]?inf(inity)?", stripped, re.IGNORECASE):
        return float(stripped)
    if sql_type == "BOOLEAN" and stripped.lower() in ("true", "false"):
        return stripped.lower() == "true"
    if sql_type not in (*_NUMERIC_TYPES, "BOOLEAN"):
        return _unquoted(text)  # VARCHAR, or a type DuckDB casts the string to
    said = _PYTHON_TYPES[sql_type][1]
    raise ValueError(f"{text!r} is not a {sql_type} ({said})")


# DuckDB type of a parameter -> the Python values it takes, and how to say so.
_PYTHON_TYPES: dict[str, tuple[tuple[type, ...], str]] = {
    "BIGINT": ((int,), "an integer"), "INTEGER": ((int,), "an integer"),
    "DOUBLE": ((int, float), "a number"), "BOOLEAN": ((bool,), "True or False"), "VARCHAR": ((str,), "a string"),
}


def _typed(where: str, sql_type: str, value: Any) -> Any:
    """``value`` (not None) if it fits the declared type, a list as a list; else ParameterError."""
    if sql_type.endswith("[]"):
        element = _PYTHON_TYPES.get(sql_type[:-2])
        if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
            raise ParameterError(f"{where} is a list ({sql_type}), not {value!r}")
        if element and not all(isinstance(v, element[0]) and not (isinstance(v, bool) and bool not in element[0])
                               for v in value):
            raise ParameterError(f"{where} takes a list of {element[1]}s, not {value!r}")
        return list(value)
    expected = _PYTHON_TYPES.get(sql_type)
    if expected is not None:
        kinds, said = expected
        if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
            raise ParameterError(f"{where} must be {said} ({sql_type}), not {value!r}")
    return value


class _Modules(Mapping[str, Module]):
    """The modules of one ``sql/`` folder by id, each parsed when first read: a command that runs one analysis
    parses it and its includes, not every file (about 35 ms of a command's start)."""

    def __init__(self, root: Path) -> None:
        self._paths = {".".join(path.relative_to(root).with_suffix("").parts): path for path in sorted(root.rglob("*.sql"))}
        self._parsed: dict[str, Module] = {}

    def __getitem__(self, module_id: str) -> Module:
        found = self._parsed.get(module_id)
        if found is None:
            found = self._parsed[module_id] = _parse(module_id, self._paths[module_id])
        return found

    def __contains__(self, module_id: object) -> bool:
        return module_id in self._paths

    def __iter__(self) -> Iterator[str]:
        return iter(self._paths)

    def __len__(self) -> int:
        return len(self._paths)


class Library:
    """Every module of one ``sql/`` folder, each parsed on first use; includes resolved on demand and cached. A
    module whose header is wrong raises :class:`AnalysisError`, naming its file, when it is first read."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.modules: Mapping[str, Module] = _Modules(root)
        self._by_name: dict[str, list[str]] = {}
        for module_id in self.modules:
            name = module_id.rsplit(".", 1)[-1]
            if not name.startswith("_"):
                self._by_name.setdefault(name, []).append(module_id)

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
            body = _bind_defaults(body, hidden).rstrip().rstrip(";")
            # Rows a CTE reads in no order need not be sorted (sorting half a million graph nodes is a tenth of
            # critical_path._rank_graph's time).
            return _FINAL_ORDER.sub("", body) if match.group(2) else body

        if module.union:
            parts = [include(match) for match in _INCLUDE.finditer(module.text)]
            ordered = f"\nORDER BY {module.order}" if module.order else ""
            return "\nUNION ALL\n".join(f"SELECT * FROM (\n{part}\n)" for part in parts) + ordered
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

    def shown(self, module_id: str, given: Mapping[str, Any] | None = None) -> str:
        """``module_id``'s SQL as it runs, with every parameter's value (``given`` over the defaults) written in
        place of its ``$name``: a text that runs as it is, to copy and adapt (``xprosql sql --show``).

        Example:
            >>> "LIMIT" in library().shown("fleet.worst_steps", {"top": 3})
            True
        """
        bound = self.bind(module_id, given or {})
        declared = self.parameters(module_id)
        return _inline(self.text(module_id), {n: sql_literal(v, declared[n].sql_type) for n, v in bound.items()})

    def from_text(self, module_id: str, texts: Mapping[str, str]) -> dict[str, Any]:
        """Values written as text (``--param NAME=VALUE``), each read as its declared type (:func:`parse_value`);
        :meth:`bind` checks them as it checks Python's."""
        self._known(module_id, texts)
        declared = self.parameters(module_id)
        values = {}
        for name, text in texts.items():
            try:
                values[name] = parse_value(text, declared[name].sql_type)
            except ValueError as exc:
                raise ParameterError(f"{module_id}: ${name}: {exc}") from None
        return values

    def _known(self, module_id: str, given: Mapping[str, Any]) -> None:
        declared = self.parameters(module_id)
        unknown = sorted(set(given) - set(declared))
        if unknown:
            accepted = ", ".join(declared) or "none"
            raise ParameterError(f"{module_id} has no parameter {', '.join(unknown)}; it takes: {accepted}")

    def bind(self, module_id: str, given: Mapping[str, Any]) -> dict[str, Any]:
        """``given`` completed with the declared defaults; an unknown or missing parameter, or a value its
        declaration does not take (type, NULL, range, choices), raises ParameterError naming the analysis and it."""
        self._known(module_id, given)
        declared = self.parameters(module_id)
        bound: dict[str, Any] = {}
        for name, parameter in declared.items():
            if name in given:
                bound[name] = parameter.check(module_id, given[name])
            elif parameter.required:
                raise ParameterError(f"{module_id} needs {name} ({parameter.sql_type}): {parameter.description}")
            else:
                bound[name] = parameter.default
        return bound


_SHOW = re.compile(r"^--[ \t]*Show:[ \t]*(.*?)[ \t]*$", re.MULTILINE)


def shown_columns(module: Module) -> tuple[str, ...]:
    """The columns its ``-- Show:`` header line names, which a terminal table shows first; () when it names none.

    Example:
        >>> shown_columns(library().module("bottlenecks"))[:3]
        ('scope', 'profile_id', 'device')
    """
    match = _SHOW.search(_header(module.text))
    return tuple(name.strip() for name in match.group(1).split(",") if name.strip()) if match else ()


def _header(text: str) -> str:
    """The leading ``--`` lines of a module (its body's comments never count as its header)."""
    lines = []
    for line in text.splitlines():
        if not line.startswith("--"):
            break
        lines.append(line)
    return "\n".join(lines)


@functools.cache
def library() -> Library:
    """The packaged library (parsed on first use)."""
    return Library(sql_dir())
