"""Terminal tables of plain columns (text, integers, floats, booleans) from Arrow, without loading Polars.

The CLI's tables are Polars' (``UTF8_FULL_CONDENSED`` boxes, a header of name, ``---`` and dtype, long
text cut at 70 characters with ``…``, the middle rows of a long table as one ``…`` row): Polars takes
0.15-0.3 s to import, more than a small analysis takes to run. :func:`render` draws the same table
character for character (tests/test_cli_table.py compares the two) for the tables it can: columns of
those types, characters one terminal cell wide, a table that fits the width given. For any other
(nested values, dates, decimals, a table the terminal has to wrap) it answers None and the caller
prints with Polars.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from decimal import Decimal
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["Column", "column_of", "float_text", "render", "table_columns"]

# Arrow type name -> Polars' dtype name, for the types drawn here.
_DTYPES = {
    "string": "str", "large_string": "str", "string_view": "str", "bool": "bool", "null": "null",
    "int8": "i8", "int16": "i16", "int32": "i32", "int64": "i64",
    "uint8": "u8", "uint16": "u16", "uint32": "u32", "uint64": "u64",
    "float": "f32", "double": "f64", "halffloat": "f16",
}
_DTYPE_NAMES = frozenset(_DTYPES.values())
_STR_LENGTH = 70  # Polars' fmt_str_lengths as the CLI sets it
_SCIENTIFIC_BOUND = 999999.0  # Polars' bound for plain floats
# Control characters as Unicode's pictures of them (ESC as ␛), as xprosql._cli_output.printable shows them.
_PICTURES = {**{c: 0x2400 + c for c in range(0x20)}, 0x7F: 0x2421}


class Column:
    """One column to draw: its ``name``, Polars' ``dtype`` name and its Python ``values`` (None: null)."""

    __slots__ = ("dtype", "name", "values")

    def __init__(self, name: str, dtype: str, values: Sequence[Any]) -> None:
        self.name, self.dtype, self.values = name, dtype, values


def column_of(name: str, column: pa.ChunkedArray | pa.Array) -> Column | None:
    """``column`` as a :class:`Column`, or None for a type not drawn here."""
    dtype = _DTYPES.get(str(column.type))
    return None if dtype is None else Column(name, dtype, column.to_pylist())


def table_columns(table: pa.Table, names: Sequence[str] | None = None) -> list[Column] | None:
    """``table``'s columns (``names``, default all) as :class:`Column`, or None when one is of a type not drawn here."""
    out = []
    for name in table.column_names if names is None else names:
        column = column_of(name, table.column(name))
        if column is None:
            return None
        out.append(column)
    return out


def _one_cell_wide(text: str) -> bool:
    """Whether every character of ``text`` takes one terminal cell (what the widths here count)."""
    return text.isascii() or all(ord(c) < 0x300 or 0x2400 <= ord(c) <= 0x2421 or c == "…" for c in text)


def float_text(value: float, precision: int | None) -> str:
    """``value`` as Polars prints a float in a table (its fmt_float: ``precision`` is ``float_precision``)."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    if precision is not None:
        fixed = f"{value:.{precision}f}"
        return _exponent(f"{value:.{precision}e}") if len(fixed) > 19 else fixed
    if value == int(value) and abs(value) < _SCIENTIFIC_BOUND:
        return f"{value:.1f}"
    plain = _display(value)
    if len(plain) > 9:
        if not 0.000001 <= abs(value) <= _SCIENTIFIC_BOUND:
            return _exponent(f"{value:.4e}")
        text = f"{value:.6f}"
        if text.endswith("0"):
            text = text.rstrip("0")
            return text + "0" if text.endswith(".") else text
        return text
    if value == int(value):
        return _shortest_exponent(value)
    return plain


def _shortest(value: float) -> tuple[str, str, int]:
    """(sign, digits, exponent): the shortest digits that read back as ``value`` (no leading or trailing zero;
    "0" for zero), the first digit's place being 10**exponent."""
    sign, digits, exponent = Decimal(repr(value)).as_tuple()
    text = "".join(map(str, digits)).lstrip("0")
    if not text:
        return "-" if sign else "", "0", 0
    place = len(text) - 1 + int(exponent)
    return "-" if sign else "", text.rstrip("0"), place


def _display(value: float) -> str:
    """Rust's ``{}`` of an f64: the shortest digits that read back as ``value``, never an exponent."""
    sign, digits, place = _shortest(value)
    if place < 0:
        return f"{sign}0.{'0' * (-place - 1)}{digits}"
    if place + 1 >= len(digits):
        return sign + digits + "0" * (place + 1 - len(digits))
    return f"{sign}{digits[:place + 1]}.{digits[place + 1:]}"


def _shortest_exponent(value: float) -> str:
    """Rust's ``{:e}`` of an f64: the shortest digits, as ``d.ddde<exp>``."""
    sign, digits, place = _shortest(value)
    return f"{sign}{digits[0]}{'.' + digits[1:] if len(digits) > 1 else ''}e{place}"


def _exponent(text: str) -> str:
    """Python's ``1.2345e+15`` as Rust writes it: ``1.2345e15`` (``e-7``: kept)."""
    mantissa, _, exponent = text.partition("e")
    return f"{mantissa}e{int(exponent)}"


def _cell(value: Any, dtype: str, precision: int | None) -> str:
    if value is None:
        return "null"
    if dtype == "str":
        text = value.translate(_PICTURES)
        return text[:_STR_LENGTH] + "…" if len(text) > _STR_LENGTH else text
    if dtype == "bool":
        return "true" if value else "false"
    if dtype in ("f64", "f32", "f16"):
        return float_text(float(value), precision)
    return str(value)


def render(columns: Sequence[Column], *, max_rows: int, float_precision: int | None = None,
           width: int | None = None) -> str | None:
    """``columns`` as Polars prints a frame of them (shape hidden, at most ``max_rows`` rows), or None where
    Polars would print it otherwise: a column not drawn here, a character not one cell wide, a name longer
    than 70 characters, or a table wider than ``width`` (which Polars wraps)."""
    if not columns or any(c.dtype not in _DTYPE_NAMES for c in columns):
        return None
    height = len(columns[0].values)
    if any(len(c.values) != height for c in columns):
        return None
    if height > max_rows:
        head, tail = (max_rows + 1) // 2, max_rows // 2
        picked = [[*c.values[:head], *c.values[height - tail:]] for c in columns]
    else:
        head, picked = height, [list(c.values) for c in columns]
    cells = [[_cell(v, c.dtype, float_precision) for v in values] for c, values in zip(columns, picked)]
    if height > max_rows:
        cells = [[*texts[:head], "…", *texts[head:]] for texts in cells]
    headers = [[c.name, "---", c.dtype] for c in columns]
    widths = []
    for header, texts in zip(headers, cells):
        if len(header[0]) > _STR_LENGTH or not all(_one_cell_wide(t) for t in (*header, *texts)):
            return None
        widths.append(max(len(t) for t in (*header, *texts)))
    if width is not None and sum(widths) + 3 * len(widths) + 1 > width:
        return None

    def line(left: str, fill: str, middle: str, right: str) -> str:
        return left + middle.join(fill * (w + 2) for w in widths) + right

    def row(texts: Sequence[str]) -> str:
        return "│" + "┆".join(f" {t.ljust(w)} " for t, w in zip(texts, widths)) + "│"

    lines = [line("┌", "─", "┬", "┐"), *(row([h[i] for h in headers]) for i in range(3)), line("╞", "═", "╪", "╡")]
    lines.extend(row([texts[i] for texts in cells]) for i in range(len(cells[0])))
    lines.append(line("└", "─", "┴", "┘"))
    return "\n".join(lines)
