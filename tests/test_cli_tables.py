"""Terminal tables that fit the terminal and show the columns that matter (issue 30, item 6), and what the
ingest help and the README say (item 10), as a user meets them: whole processes."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from conftest import TEST_DATA

import xprosql
from xprosql.engine.library import library, shown_columns

README = Path(__file__).resolve().parents[1] / "README.md"


def _xprosql(*args: str, columns: int | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ}
    env.pop("COLUMNS", None)
    if columns is not None:
        env["COLUMNS"] = str(columns)
    return subprocess.run([sys.executable, "-m", "xprosql.cli", *args], capture_output=True, text=True, env=env,
                          timeout=300)


def _headers(stdout: str) -> list[str]:
    """The column names of every table printed (the first text row of each box)."""
    lines = stdout.splitlines()
    return [name.strip() for i, line in enumerate(lines) if i and lines[i - 1].startswith("┌")
            for name in line.strip("│").split("┆")]


def test_every_shown_column_is_declared() -> None:
    for module in library().public():
        declared = [column.name for column in module.columns]
        assert set(shown_columns(module)) <= set(declared), module.id
        assert len(shown_columns(module)) == len(set(shown_columns(module))), module.id


def test_a_narrow_terminal_sees_the_main_columns_in_parts(xspace_warehouse: Path) -> None:
    width = 60
    done = _xprosql("sql", str(xspace_warehouse), "--analysis", "bottlenecks", "--param", "scope=profile",
                    columns=width)
    assert done.returncode == 0, done.stderr
    assert max(len(line) for line in done.stdout.splitlines()) <= width
    shown = shown_columns(library().module("bottlenecks"))
    headers = _headers(done.stdout)
    assert "primary_bottleneck" in headers and set(shown) == set(headers) and "…" not in headers
    assert headers.count("profile_id") == done.stdout.count("┌") > 1  # parts, each led by the profile
    declared = library().module("bottlenecks").columns
    assert f"{len(shown)} of {len(declared)} columns of steps.bottlenecks shown" in done.stderr
    assert "--columns all" in done.stderr and "--format csv" in done.stderr


def test_columns_all_and_a_chosen_few(xspace_warehouse: Path) -> None:
    every = _xprosql("sql", str(xspace_warehouse), "--analysis", "bottlenecks", "--param", "scope=profile",
                     "--columns", "all", columns=80)
    assert every.returncode == 0, every.stderr
    assert max(len(line) for line in every.stdout.splitlines()) <= 80
    declared = [column.name for column in library().module("bottlenecks").columns]
    assert set(_headers(every.stdout)) == set(declared) and "columns of" not in every.stderr
    few = _xprosql("sql", str(xspace_warehouse), "--analysis", "bottlenecks", "--param", "scope=profile",
                   "--columns", "profile_id,primary_bottleneck,exposed_collective_share", columns=80)
    assert few.returncode == 0, few.stderr
    assert _headers(few.stdout) == ["profile_id", "primary_bottleneck", "exposed_collective_share"]
    wrong = _xprosql("sql", str(xspace_warehouse), "--analysis", "bottlenecks", "--columns", "profile_id,nope")
    assert wrong.returncode != 0 and wrong.stdout == ""
    assert re.fullmatch(r"error: --columns: no column nope; the result has: scope, profile_id, .*\n", wrong.stderr)


def test_one_wide_row_is_transposed(xspace_warehouse: Path) -> None:
    done = _xprosql("sql", str(xspace_warehouse), "SELECT * FROM profiles ORDER BY profile_id LIMIT 1", columns=70)
    assert done.returncode == 0, done.stderr
    assert _headers(done.stdout) == ["column", "value"]
    assert max(len(line) for line in done.stdout.splitlines()) <= 70
    assert "│ n_events " in done.stdout and "│ producer " in done.stdout


def test_a_table_that_fits_is_one_table(xspace_warehouse: Path) -> None:
    done = _xprosql("sql", str(xspace_warehouse), "--analysis", "launch_coverage", columns=200)
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("┌") == 1 and "…" not in _headers(done.stdout) and done.stderr == ""


def test_ingest_help_names_every_format() -> None:
    done = _xprosql("ingest", "--help", columns=100)
    assert done.returncode == 0
    text = " ".join(done.stdout.split())
    for pattern in ("*.xplane.pb", "*.json", "*.json.gz", "*.cupti.json.gz", "Kineto", "CUPTI"):
        assert pattern in text, pattern


def test_readme_launch_coverage_of_the_h100_sample(tmp_path: Path) -> None:
    h100 = TEST_DATA / "kineto" / "h100_qwen1.5_0.5b.json.gz"
    assert xprosql.ingest(h100, into=tmp_path / "run").ok
    row = xprosql.load(tmp_path / "run").analysis("gpu.launch_coverage").pl().row(0, named=True)
    kernels, launched = row["kernels"], row["kernels_launched"]
    said = " ".join(README.read_text().split())
    assert (f"{launched:,} of its {kernels:,} kernels ({launched / kernels:.1%}) join their call; the other "
            f"{kernels - launched:,} ({1 - launched / kernels:.1%}) have no call in the file") in said
