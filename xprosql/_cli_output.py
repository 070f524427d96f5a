"""How the CLI prints a result: a table for the terminal, CSV, JSON, with the values every format can hold.

Apart from :mod:`xprosql._cli_commands` because it loads pyarrow (and Polars, for the tables
:mod:`xprosql._cli_table` does not draw, CSV and JSON): the commands that print no result (``ingest``,
``compact``, ``tables``) never do.
"""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from xprosql._cli_table import Column, render, table_columns

if TYPE_CHECKING:
    import polars as pl

    from xprosql.engine import Result

__all__ = ["choose_columns", "frame_of", "print_columns", "print_frame", "print_table", "printable", "write"]


def print_table(result: Result, *, max_rows: int = 50, columns: str | None = None, shown: Sequence[str] = (),
                what: str = "the result") -> None:
    """``result`` as a terminal table: the ``columns`` asked for, else those ``shown`` names (an analysis's
    ``-- Show:`` line) when it has more, else all; see :func:`print_frame`."""
    table = result.arrow()
    chosen = choose_columns(table.column_names, columns, shown=shown)
    plain = table_columns(table, chosen)
    if plain is not None and print_columns(plain, total=table.num_columns, max_rows=max_rows, what=what):
        return
    frame = frame_of(table, nested_as_json=False)
    print_frame(frame, max_rows=max_rows, columns=chosen, what=what)


def choose_columns(available: Sequence[str], asked: str | None, *, shown: Sequence[str] = ()) -> list[str]:
    """The columns to print: ``asked`` (``--columns a,b`` or ``all``), else the ``shown`` ones present, else all.

    Raises XprosqlError for an asked column the result does not have, listing those it has."""
    from xprosql.errors import XprosqlError

    if asked is not None and asked.strip().lower() != "all":
        names = [name.strip() for name in asked.split(",") if name.strip()]
        unknown = [name for name in names if name not in available]
        if unknown or not names:
            raise XprosqlError(f"--columns: no column {', '.join(unknown) or repr(asked)}; "
                               f"the result has: {', '.join(available)}")
        return names
    if asked is None:
        chosen = [name for name in shown if name in available]
        if chosen:
            return chosen
    return list(available)


# A terminal narrower than this still gets tables this wide (wrapped by the terminal) rather than slivers.
_MIN_WIDTH = 40


def print_columns(columns: Sequence[Column], *, total: int | None = None, max_rows: int = 50, what: str = "the result",
                  float_precision: int | None = None, width: int | None = None) -> bool:
    """:func:`print_frame` of plain ``columns`` (of ``total`` in the result) without Polars, printing the same text;
    False, having printed nothing, where only Polars can print them (see :func:`xprosql._cli_table.render`)."""
    width = max(width or shutil.get_terminal_size((120, 24)).columns, _MIN_WIDTH)

    def drawn(chosen: Sequence[Column], limit: int | None = None) -> str | None:
        return render(chosen, max_rows=max_rows, float_precision=float_precision, width=limit)

    whole = drawn(columns)
    if whole is None:
        return False
    if _text_width(whole) <= width:
        text: str | None = whole
    elif len(columns) <= 1:
        return False  # Polars wraps its cells
    elif len(columns[0].values) == 1:  # a line per column, as _transposed
        text = drawn([Column("column", "str", [c.name for c in columns]),
                      Column("value", "str", [None if c.values[0] is None else _text(c.values[0]) for c in columns])],
                     width)
    else:  # parts, as _parts
        key = next((c for c in columns if c.name.endswith("_id")), columns[0])
        parts: list[list[Column]] = []
        current: list[Column] = []
        for column in (c for c in columns if c is not key):
            candidate = drawn([key, *current, column])
            if current and (candidate is None or _text_width(candidate) > width):
                parts.append(current)
                current = []
            current.append(column)
        parts.append(current)
        texts = [drawn([key, *names], width) for names in parts]
        text = None if any(t is None for t in texts) else "\n\n".join(t for t in texts if t is not None)
    if text is None:
        return False
    print(text)
    hidden = (len(columns) if total is None else total) - len(columns)
    if hidden > 0:
        sys.stdout.flush()
        print(_hidden_note(len(columns), len(columns) + hidden, [c.name for c in columns], what), file=sys.stderr)
    return True


def _text_width(text: str) -> int:
    return max(len(line) for line in text.splitlines())


def _hidden_note(shown: int, total: int, chosen: Sequence[str], what: str) -> str:
    return (f"xprosql: {shown} of {total} columns of {what} shown; every column: --columns all "
            f"(or --format csv), some: --columns {','.join(chosen[:2])},...")


def print_frame(frame: pl.DataFrame, *, max_rows: int = 50, columns: Sequence[str] | None = None,
                what: str = "the result", float_precision: int | None = None, width: int | None = None) -> None:
    """``frame``'s ``columns`` (default all) as tables that fit the terminal's ``width`` (default: ``COLUMNS``,
    else the terminal's, else 120 characters): one table when they fit; else a one-row frame transposed
    (a line per column), or the columns in parts, each a table led by a key column; then, on stderr, how
    many columns were left out and how to see them."""
    import polars as pl

    chosen = list(frame.columns if columns is None else columns)
    width = max(width or shutil.get_terminal_size((120, 24)).columns, _MIN_WIDTH)
    shown = printable(frame.select(chosen))
    options = {"tbl_rows": max_rows, "fmt_str_lengths": 70, "tbl_hide_dataframe_shape": True, "tbl_cols": -1,
               "float_precision": float_precision}
    with pl.Config(**options, tbl_width_chars=width):  # type: ignore[arg-type]
        if _width(shown) <= width or shown.width <= 1:
            print(shown)
        elif shown.height == 1:
            print(_transposed(shown))
        else:
            print("\n\n".join(str(part) for part in _parts(shown, width)))
    hidden = frame.width - len(chosen)
    if hidden > 0:
        sys.stdout.flush()  # the table first, then the note, where both go to one terminal
        print(_hidden_note(len(chosen), frame.width, chosen, what), file=sys.stderr)


def _width(frame: pl.DataFrame) -> int:
    """The characters of the widest line of ``frame``'s table as it prints unconstrained."""
    import polars as pl

    with pl.Config(tbl_width_chars=65_000):  # polars takes a u16
        return max(len(line) for line in str(frame).splitlines())


def _transposed(frame: pl.DataFrame) -> pl.DataFrame:
    """A one-row frame as a table of (column, value) rows, the values as they print."""
    import polars as pl

    values = [None if value is None else _text(value) for value in frame.row(0)]
    return pl.DataFrame({"column": frame.columns, "value": values}, schema={"column": pl.String, "value": pl.String})


def _text(value: Any) -> str:
    """A value as one line of text: lists and structs as JSON, anything else as Python prints it."""
    if isinstance(value, (list, dict)):
        return json.dumps(value, default=_json_default, ensure_ascii=False)
    return str(value)


def _parts(frame: pl.DataFrame, width: int) -> list[pl.DataFrame]:
    """``frame``'s columns split into frames that each fit ``width``, each led by the key: its first ``*_id``
    column (``profile_id``, ``job_id``), else its first column."""
    key = next((name for name in frame.columns if name.endswith("_id")), frame.columns[0])
    rest = [name for name in frame.columns if name != key]
    parts: list[list[str]] = []
    current: list[str] = []
    for name in rest:
        if current and _width(frame.select(key, *current, name)) > width:
            parts.append(current)
            current = []
        current.append(name)
    parts.append(current)
    return [frame.select(key, *names) for names in parts]


# Control characters as Unicode's pictures of them (ESC as ␛): names from a profile cannot drive the terminal.
_CONTROLS = [chr(c) for c in (*range(0x20), 0x7F)]
_PICTURES = [chr(0x2400 + c) for c in range(0x20)] + ["\u2421"]


def printable(frame: pl.DataFrame) -> pl.DataFrame:
    """``frame`` with the control characters of its text shown, not sent, for a terminal."""
    import polars as pl

    return frame.with_columns(pl.col(pl.String).str.replace_many(_CONTROLS, _PICTURES))


def frame_of(table: pa.Table, *, nested_as_json: bool) -> pl.DataFrame:
    """A result as a frame that every output format takes: binary values as hex text (at any depth), a map whose
    keys are not text as its entries (a list of key, value structs), nested values (lists, structs, maps) as JSON
    text when ``nested_as_json`` (CSV has no nesting), and values of types Polars cannot hold (intervals,
    unions) as text."""
    import polars as pl

    columns = []
    for name, column in zip(table.column_names, table.columns):
        type_ = column.type
        if nested_as_json and pa.types.is_nested(type_):
            texts = [None if v is None else json.dumps(_plain(v, type_, objects=True), default=_json_default,
                                                       ensure_ascii=False) for v in column.to_pylist()]
            column = pa.chunked_array([pa.array(texts, pa.string())])
        elif _output_type(type_) != type_:
            column = pa.chunked_array([pa.array([_plain(v, type_) for v in column.to_pylist()], _output_type(type_))])
        try:
            columns.append(pl.from_arrow(column).alias(name))  # type: ignore[union-attr]
        except (pl.exceptions.PolarsError, pa.ArrowException, TypeError, ValueError):
            columns.append(pl.Series(name, [None if v is None else str(v) for v in column.to_pylist()], pl.String))
    return pl.DataFrame(columns)


def _is_binary(type_: pa.DataType) -> bool:
    return (pa.types.is_binary(type_) or pa.types.is_large_binary(type_) or pa.types.is_fixed_size_binary(type_)
            or getattr(pa.types, "is_binary_view", _never)(type_))


def _is_text(type_: pa.DataType) -> bool:
    return (pa.types.is_string(type_) or pa.types.is_large_string(type_)
            or getattr(pa.types, "is_string_view", _never)(type_))


def _never(type_: pa.DataType) -> bool:
    return False


def _output_type(type_: pa.DataType) -> pa.DataType:
    """``type_`` as the output holds it: binary as string (hex text), a map whose keys are not text (after that)
    as a list of its entries, at any depth."""
    if _is_binary(type_):
        return pa.string()
    if pa.types.is_map(type_):
        key, item = _output_type(type_.key_type), _output_type(type_.item_type)
        return pa.map_(key, item) if _is_text(key) else pa.list_(pa.struct([("key", key), ("value", item)]))
    if pa.types.is_struct(type_):
        return pa.struct([field.with_type(_output_type(field.type)) for field in type_])
    if pa.types.is_large_list(type_):
        return pa.large_list(_output_type(type_.value_type))
    if pa.types.is_fixed_size_list(type_):
        return pa.list_(_output_type(type_.value_type), type_.list_size)
    if pa.types.is_list(type_):
        return pa.list_(_output_type(type_.value_type))
    return type_


def _plain(value: Any, type_: pa.DataType, *, objects: bool = False) -> Any:
    """The Python value of an Arrow value of ``type_`` in :func:`_output_type` (bytes as hex text at any depth),
    or with ``objects`` as JSON writes it (a map as an object of text keys, else as [key, value] pairs)."""
    if value is None:
        return None
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).hex()
    if pa.types.is_map(type_):
        pairs = [(_plain(k, type_.key_type, objects=objects), _plain(v, type_.item_type, objects=objects))
                 for k, v in value]
        text_keys = _is_text(_output_type(type_.key_type))
        if objects:
            return dict(pairs) if text_keys and all(isinstance(k, str) for k, _ in pairs) else [list(p) for p in pairs]
        return pairs if text_keys else [{"key": k, "value": v} for k, v in pairs]
    if pa.types.is_struct(type_):
        return {field.name: _plain(value.get(field.name), field.type, objects=objects) for field in type_}
    if isinstance(value, list) and type_.num_fields == 1:
        return [_plain(v, type_.field(0).type, objects=objects) for v in value]
    return value


def _json_default(value: Any) -> Any:
    """JSON of what json does not write: dates and times as ISO text, anything else (decimals, ...) as its text."""
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return str(value)


def write(frame: pl.DataFrame, format_: str, out: str | None) -> None:
    """``frame`` as CSV or JSON (an array of row objects) to the file ``out``, else to stdout."""
    text = frame.write_csv() if format_ == "csv" else frame.write_json() + "\n"
    if out:
        Path(out).write_text(text)
    else:
        sys.stdout.write(text)
