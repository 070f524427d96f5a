"""The CLI's Polars-free terminal tables (xprosql/_cli_table.py) against Polars itself, the reference they copy:
the same text, character for character, or no answer (and the CLI prints with Polars)."""

from __future__ import annotations

import os
import random
import re
import subprocess
import sys
from pathlib import Path

import polars as pl
import pyarrow as pa
import pytest

from xprosql._cli_table import float_text, render, table_columns

_OPTIONS = {"tbl_hide_dataframe_shape": True, "tbl_cols": -1, "fmt_str_lengths": 70}


def _polars(table: pa.Table, *, max_rows: int, precision: int | None) -> str:
    with pl.Config(**_OPTIONS, tbl_rows=max_rows, float_precision=precision, tbl_width_chars=65_000):  # type: ignore[arg-type]
        return str(pl.from_arrow(table))


def _floats(rng: random.Random, n: int) -> list[float | None]:
    special = [0.0, -0.0, 1.0, -1.0, 0.1, 1 / 3, 999999.0, 1e6, 1e-7, 1e15, 5e-324, 1e300, 0.03125, 0.0078125,
               12.0000000001, 123456789.0, 1e22, float("nan"), float("inf"), -float("inf"), None]
    return [*special, *(rng.choice([1, -1]) * rng.random() * 10 ** rng.randint(-12, 25) for _ in range(n)),
            *(float(rng.randint(-10**8, 10**8)) for _ in range(n)),
            *(rng.randint(0, 10**6) / 10 ** rng.randint(0, 8) for _ in range(n))]


@pytest.mark.parametrize("precision", [None, 4, 2])
def test_floats_print_as_polars_prints_them(precision: int | None) -> None:
    values = _floats(random.Random(precision or 7), 3000)
    table = pa.table({"x": pa.array(values, pa.float64())})
    expected = _polars(table, max_rows=len(values), precision=precision)
    columns = table_columns(table)
    assert columns is not None
    assert render(columns, max_rows=len(values), float_precision=precision) == expected
    for value in values[:30]:  # one by one too: the column's width pads every cell
        if value is not None:
            one = pa.table({"x": pa.array([value], pa.float64())})
            assert _polars(one, max_rows=5, precision=precision).splitlines()[5] == f"│ {float_text(value, precision)} │"


def test_text_ints_bools_nulls_and_long_tables() -> None:
    rng = random.Random(3)
    n = 57
    table = pa.table({
        "name": pa.array([rng.choice(["a" * 75, "b" * 70, "c" * 71, " lead", "trail ", "", "é" * 72, "tab\there",
                                      "esc\x1b[31m", None, "x"]) for _ in range(n)], pa.string()),
        "long_column_name_here": pa.array([rng.randint(-10**12, 10**12) for _ in range(n)], pa.int64()),
        "u": pa.array([rng.randint(0, 2**64 - 1) for _ in range(n)], pa.uint64()),
        "i32": pa.array([rng.choice([None, rng.randint(-5, 5)]) for _ in range(n)], pa.int32()),
        "flag": pa.array([rng.choice([True, False, None]) for _ in range(n)], pa.bool_()),
        "nothing": pa.nulls(n),
        "f": pa.array(_floats(rng, 12)[:n], pa.float64()),
    })
    columns = table_columns(table)
    assert columns is not None
    for max_rows in (1, 4, 5, 10, 40, 50, n, 100):
        for precision in (None, 4):
            # Polars' own tables print control characters as they are: the CLI shows their pictures first
            shown = table.set_column(0, "name", pa.array(
                [None if v is None else v.translate({c: 0x2400 + c for c in range(0x20)} | {0x7F: 0x2421})
                 for v in table.column("name").to_pylist()], pa.string()))
            assert render(columns, max_rows=max_rows, float_precision=precision) == _polars(
                shown, max_rows=max_rows, precision=precision), (max_rows, precision)
    empty = table.slice(0, 0)
    assert render(table_columns(empty) or [], max_rows=10) == _polars(empty, max_rows=10, precision=None)


def test_what_it_does_not_draw_is_left_to_polars() -> None:
    assert table_columns(pa.table({"l": pa.array([[1]])})) is None  # nested
    assert table_columns(pa.table({"d": pa.array([1], pa.decimal128(5, 0))})) is None
    wide = table_columns(pa.table({"s": ["日本語"]}))
    assert wide is not None and render(wide, max_rows=5) is None  # two cells a character
    fits = table_columns(pa.table({"s": ["abc"]}))
    assert fits is not None and render(fits, max_rows=5, width=6) is None and render(fits, max_rows=5, width=7)


def _pandas_loaded(stderr: str) -> bool | None:
    found = re.search(r"^LOADED (True|False) (True|False)$", stderr, re.M)
    return None if found is None else found.group(2) == "True"


@pytest.mark.slow  # whole processes at three widths
def test_roofline_prints_as_with_polars(tmp_path: Path) -> None:
    """A whole `xprosql roofline` and `xprosql sql` does not load pandas, and prints what it printed with Polars
    (the columns, the rounding, the cut, the parts a narrow terminal gets)."""
    from conftest import TPU_SAMPLE

    import xprosql
    from xprosql._cli_output import frame_of, print_frame

    assert xprosql.ingest(TPU_SAMPLE, into=tmp_path / "run").ok
    probe = ("import sys, runpy\nsys.argv = ['xprosql', *sys.argv[1:]]\ntry:\n"
             "    runpy.run_module('xprosql.cli', run_name='__main__')\nfinally:\n"
             "    print('LOADED', 'polars' in sys.modules, 'pandas' in sys.modules, file=sys.stderr)\n")
    env = {**os.environ, "COLUMNS": "400"}
    frame = xprosql.load(tmp_path / "run").roofline().pl()
    shown = frame.select(
        "row_kind", pl.col("profile_id").str.slice(0, 8), "device_kind", pl.coalesce("op", "module").alias("op"),
        "category", "occurrences",
        (pl.col("self_time_ps") / 1e9).round(3).alias("self_ms"),
        (100 * pl.col("self_time_share")).round(2).alias("self_%"),
        (pl.col("flop_rate") / 1e12).alias("TFLOP/s"),
        (pl.col("hbm_bandwidth") / 1e9).alias("HBM GB/s"),
        pl.col("operational_intensity").alias("FLOP/B"), "ridge_point", "bound_by", "roofline_efficiency",
    )
    import contextlib
    import io

    for width in (400, 120, 60):  # one table; parts led by profile_id
        done = subprocess.run([sys.executable, "-c", probe, "roofline", str(tmp_path / "run")], capture_output=True,
                              text=True, env={**env, "COLUMNS": str(width)}, timeout=300)
        assert done.returncode == 0, done.stderr
        assert _pandas_loaded(done.stderr) is False
        with contextlib.redirect_stdout(io.StringIO()) as expected:
            print_frame(shown, max_rows=40, float_precision=4, width=width)
        assert done.stdout == expected.getvalue(), width
    query = "SELECT name, count(*) AS n, sum(dur_ps) / 1e9 AS ms FROM events GROUP BY 1 ORDER BY 3 DESC, 1 LIMIT 60"
    done = subprocess.run([sys.executable, "-c", probe, "sql", str(tmp_path / "run"), query], capture_output=True,
                          text=True, env=env, timeout=300)
    assert done.returncode == 0 and _pandas_loaded(done.stderr) is False, done.stderr
    with contextlib.redirect_stdout(io.StringIO()) as expected:
        print_frame(frame_of(xprosql.load(tmp_path / "run").sql(query).arrow(), nested_as_json=False), width=400)
    assert done.stdout == expected.getvalue()


def test_an_analysis_loads_no_polars(xspace_warehouse: Path) -> None:
    probe = "import sys\nfrom xprosql.cli import main\nmain(sys.argv[1:])\nprint('polars' in sys.modules, file=sys.stderr)\n"
    # 120 columns: every part of the table fits; a narrower terminal, where a cell must wrap, takes Polars' path.
    done = subprocess.run([sys.executable, "-c", probe, "roofline", str(xspace_warehouse)], capture_output=True,
                          text=True, timeout=300, env={**os.environ, "COLUMNS": "120"})
    assert done.returncode == 0 and done.stderr.split()[-1] == "False", done.stderr
