"""The catalogue: every public analysis of the SQL library with its parameters and output columns.

Example:
    >>> rows = analyses().pl()
    >>> "ops.roofline" in rows["analysis"].to_list()
    True
"""

from __future__ import annotations

import pyarrow as pa

from xprosql.engine.library import library
from xprosql.engine.result import Result

__all__ = ["analyses", "describe"]

_PARAMETER = pa.struct([("name", pa.string()), ("type", pa.string()), ("default", pa.string()),
                        ("unit", pa.string()), ("description", pa.string()), ("range", pa.string()),
                        ("choices", pa.list_(pa.string()))])
_COLUMN = pa.struct([("name", pa.string()), ("type", pa.string()), ("unit", pa.string()), ("description", pa.string())])


def analyses() -> Result:
    """One row per public analysis: ``analysis`` (id to run it by), ``area``, ``description``, ``fleet``
    (rows compare profiles), ``needs`` (what a profile must hold to have rows), ``parameters`` (name, type, default as SQL, unit, description, and the
    values it takes: range as ``LOW..HIGH``, choices; a NULL default means required) and ``columns`` (name, type, unit, description)."""
    lib = library()
    rows = []
    for module in lib.public():
        rows.append({
            "analysis": module.id, "area": module.area, "description": module.description, "fleet": module.fleet,
            "needs": module.needs,
            "parameters": [{"name": p.name, "type": p.sql_type, "default": p.default_sql, "unit": p.unit,
                            "description": p.description, "range": str(p.range) if p.range else None,
                            "choices": list(p.choices) if p.choices else None}
                           for p in lib.parameters(module.id).values()],
            "columns": [{"name": c.name, "type": c.sql_type, "unit": c.unit, "description": c.description}
                        for c in module.columns],
        })
    schema = pa.schema([("analysis", pa.string()), ("area", pa.string()), ("description", pa.string()),
                        ("fleet", pa.bool_()), ("needs", pa.string()), ("parameters", pa.list_(_PARAMETER)), ("columns", pa.list_(_COLUMN))])
    return Result.from_arrow(pa.Table.from_pylist(rows, schema), description="analyses")


def describe(name: str) -> str:
    """Analysis ``name`` as text: what it answers, its parameters and its columns (what ``xprosql analyses NAME`` prints)."""
    lib = library()
    module = lib.module(name)
    lines = [f"{module.id}{' (fleet)' if module.fleet else ''}: {module.description}"]
    if module.needs:
        lines.append(f"needs: {module.needs}")
    lines += ["", "parameters:"]
    for p in lib.parameters(module.id).values():
        default = "required" if p.required else f"default {p.default_sql}"
        tags = f" {p.tags}" if p.tags else ""
        lines.append(f"  {p.name:<28} {p.sql_type:<10} {p.unit or '':<8} {p.description}{tags} ({default})")
    if not lib.parameters(module.id):
        lines.append("  (none)")
    lines += ["", "columns:"]
    lines += [f"  {c.name:<28} {c.sql_type:<10} {c.unit or '':<8} {c.description}" for c in module.columns]
    return "\n".join(lines)
