"""The command line as a user runs it (a subprocess): every output format takes every value, and every user
mistake exits non-zero with one line ``error: ...`` on stderr, never a traceback.

The warehouse holds real profiles only: the CPU-only Kineto sample and a JAX CPU profile made here (its
device_stats hold a binary value, its profiles row the nested ``tags`` map); neither records peaks.
"""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from conftest import TEST_DATA

import xprosql

CPU_KINETO = TEST_DATA / "kineto" / "cpu_only.json.gz"


def _cli(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, COLUMNS="200")
    return subprocess.run([sys.executable, "-m", "xprosql.cli", *map(str, args)], capture_output=True, text=True,
                          timeout=300, check=False, env=env, cwd=cwd)


def _one_error(done: subprocess.CompletedProcess[str]) -> str:
    """The one line of a failed command's stderr, checked: non-zero exit, ``error: ...``, no traceback."""
    assert done.returncode != 0, done.stdout[-2000:]
    assert "Traceback" not in done.stderr and "panicked" not in done.stderr, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    return lines[0]


@pytest.fixture(scope="module")
def warehouse(jax_cpu_profile: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("cli") / "run"
    done = _cli("ingest", CPU_KINETO, jax_cpu_profile, "--into", root, "--tag", "team=nlp", "--tag", "job=bert")
    assert done.returncode == 0, done.stderr
    return root


# --- every format takes nested and binary values -----------------------------------------------------------------

def test_csv_of_profiles_writes_tags_as_json(warehouse: Path) -> None:
    done = _cli("sql", warehouse, "SELECT source_path, tags, drop_reasons, host FROM profiles ORDER BY 1", "--format", "csv")
    assert done.returncode == 0 and done.stderr == "", done.stderr
    rows = list(csv.DictReader(io.StringIO(done.stdout)))
    assert len(rows) == 2
    for row in rows:
        assert json.loads(row["tags"]) == {"job": "bert", "team": "nlp"}
        assert isinstance(json.loads(row["drop_reasons"]), list)
    # Every column of profiles: the one that failed (nested tags, lists, a timestamp).
    done = _cli("sql", warehouse, "SELECT * FROM profiles", "--format", "csv")
    assert done.returncode == 0, done.stderr
    assert len(list(csv.DictReader(io.StringIO(done.stdout)))) == 2


def test_binary_values_are_hex_in_csv_and_json(warehouse: Path) -> None:
    query = "SELECT stat, bytes_value FROM device_stats WHERE bytes_value IS NOT NULL ORDER BY ALL"
    expected = xprosql.load(warehouse).sql(query).rows()
    assert expected and all(isinstance(value, bytes) for _, value in expected)  # the JAX profile's profile_options
    want = [{"stat": stat, "bytes_value": value.hex()} for stat, value in expected]
    done = _cli("sql", warehouse, query, "--format", "csv")
    assert done.returncode == 0, done.stderr
    assert list(csv.DictReader(io.StringIO(done.stdout))) == want
    done = _cli("sql", warehouse, query, "--format", "json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == want


@pytest.mark.parametrize("table", ["profiles", "device_stats", "event_stats", "metadata_stats", "tracks"])
@pytest.mark.parametrize("format_", ["table", "csv", "json", "parquet"])
@pytest.mark.slow
def test_every_format_takes_every_table(warehouse: Path, tmp_path: Path, table: str, format_: str) -> None:
    out = tmp_path / f"{table}.{format_}"
    args = ["--out", out] if format_ != "table" else []
    done = _cli("sql", warehouse, f"SELECT * FROM {table}", "--format", format_, *args)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    n = xprosql.load(warehouse).sql(f"SELECT count(*) FROM {table}").rows()[0][0]
    if format_ == "csv":
        assert len(list(csv.DictReader(io.StringIO(out.read_text())))) == n
    elif format_ == "json":
        assert len(json.loads(out.read_text())) == n
    elif format_ == "parquet":
        assert pq.read_table(out).num_rows == n


def test_json_keeps_nesting(warehouse: Path) -> None:
    done = _cli("sql", warehouse, "SELECT tags, drop_reasons FROM profiles", "--format", "json")
    assert done.returncode == 0, done.stderr
    assert [row["tags"] for row in json.loads(done.stdout)] == [{"job": "bert", "team": "nlp"}] * 2


# --- user mistakes: one line, non-zero ---------------------------------------------------------------------------

MISTAKES = {
    "missing_dir": (["sql", "{missing}", "SELECT 1"], "no such warehouse directory"),
    "not_a_warehouse": (["sql", "{empty}", "SELECT 1"], "not an xprosql warehouse"),
    "bad_sql": (["sql", "{dir}", "SELEC 1"], 'syntax error at or near "SELEC"'),
    "unknown_table": (["sql", "{dir}", "SELECT * FROM nosuch"], "nosuch does not exist"),
    "unbound_param": (["sql", "{dir}", "SELECT $x"], "parameters: x"),
    "param_without_value": (["sql", "{dir}", "SELECT 1", "--param", "x"], "--param wants NAME=VALUE"),
    "unknown_analysis": (["sql", "{dir}", "--analysis", "nope"], "no analysis named 'nope'"),
    "unknown_analysis_listed": (["analyses", "nope"], "no analysis named 'nope'"),
    "unknown_parameter": (["sql", "{dir}", "--analysis", "roofline", "--param", "nope=1"], "no parameter nope"),
    "bad_parameter_value": (["sql", "{dir}", "--analysis", "roofline", "--param", "top=abc"], "'abc' is not a BIGINT"),
    # Values the header's [range: ...] and [choices: ...] refuse, as Python refuses them (one validation).
    "negative_top": (["sql", "{dir}", "--analysis", "top_ops", "--param", "top=-5"], "ops.top_ops: $top must be >= 1, not -5"),
    "zero_top": (["sql", "{dir}", "--analysis", "roofline", "--param", "top=0"], "ops.roofline: $top must be >= 1, not 0"),
    "negative_peak": (["sql", "{dir}", "--analysis", "roofline", "--param", "peak_flops_per_s=-1"],
                      "ops.roofline: $peak_flops_per_s must be > 0, not -1.0"),
    "zero_buckets": (["sql", "{dir}", "--analysis", "memory_timeline", "--param", "buckets=0"],
                     "memory.memory_timeline: $buckets must be >= 1, not 0"),
    "share_over_one": (["sql", "{dir}", "--analysis", "bottlenecks", "--param", "idle_share=10"],
                       "steps.bottlenecks: $idle_share must be >= 0 and <= 1, not 10.0"),
    "unknown_scope": (["sql", "{dir}", "--analysis", "bottlenecks", "--param", "scope=weird"],
                      "steps.bottlenecks: $scope must be one of step, profile, not 'weird'"),
    "null_where_not_taken": (["sql", "{dir}", "--analysis", "top_ops", "--param", "top=NULL"],
                             "ops.top_ops: $top does not take NULL; leave it out for its default, 10"),
    "unclosed_list": (["sql", "{dir}", "--analysis", "compare", "--param", "baseline=['a", "--param", "candidate=b"],
                      "fleet.compare: $baseline: \"['a\" is not a list: write a,b or ['a', 'b']"),
    "unknown_profile_id": (["sql", "{dir}", "--analysis", "compare", "--param", "baseline=nope,0000", "--param",
                            "candidate=nope"], "fleet.compare: $baseline: profiles not in the warehouse"),
    "show_without_required": (["sql", "{dir}", "--analysis", "compare", "--show"], "fleet.compare needs baseline"),
    "show_out_of_range": (["sql", "{dir}", "--analysis", "roofline", "--show", "--param", "top=0"], "$top must be >= 1"),
    "compare_empty_cohort": (["compare", "{dir}", "--baseline", "format = 'nope'", "--candidate", "true"],
                             "baseline cohort is empty: no profile satisfies \"format = 'nope'\""),
    "compare_bad_predicate": (["compare", "{dir}", "--baseline", "nosuch = 1", "--candidate", "true"],
                              "bad profile predicate 'nosuch = 1'"),
    "compare_negative_peak": (["compare", "{dir}", "--baseline", "true", "--candidate", "true", "--peak-flops", "-1"],
                              "$peak_flops_per_s must be > 0"),
    "query_and_analysis": (["sql", "{dir}", "SELECT 1", "--analysis", "roofline"], "not both"),
    "no_query": (["sql", "{dir}"], "give a SQL query"),
    "parquet_without_out": (["sql", "{dir}", "SELECT 1", "--format", "parquet"], "--format parquet needs --out"),
    "unknown_format": (["sql", "{dir}", "SELECT 1", "--format", "xml"], "invalid choice: 'xml'"),
    "out_in_missing_dir": (["sql", "{dir}", "SELECT * FROM profiles", "--format", "csv", "--out", "{missing}/x.csv"],
                           "No such file or directory"),
    "unknown_command": (["frobnicate"], "invalid choice: 'frobnicate'"),
    "tables_missing": (["tables", "{missing}"], "no such warehouse directory"),
    "compact_missing": (["compact", "{missing}"], "no such warehouse directory"),
    "report_missing": (["report", "{missing}"], "no such warehouse directory"),
    "report_unknown_profile": (["report", "{dir}", "--profile", "nope"], "profiles not in the warehouse"),
    "roofline_unknown_profile": (["roofline", "{dir}", "--profile", "nope"], "profiles not in the warehouse"),
    "bad_tag": (["ingest", CPU_KINETO, "--into", "{tmp}/run", "--tag", "bad"], "--tag wants KEY=VALUE"),
    "record_without_program": (["record", "--into", "{tmp}/run"], "record wants a Python program"),
}


@pytest.mark.parametrize("mistake", MISTAKES)
@pytest.mark.slow
def test_a_mistake_is_one_line_and_a_non_zero_exit(warehouse: Path, tmp_path: Path, mistake: str) -> None:
    args, words = MISTAKES[mistake]
    (tmp_path / "empty").mkdir()
    places = {"dir": warehouse, "missing": tmp_path / "missing", "empty": tmp_path / "empty", "tmp": tmp_path}
    done = _cli(*[str(a).format(**places) for a in args])
    line = _one_error(done)
    assert words in line, line


@pytest.mark.slow
def test_roofline_chart_without_peaks_names_the_options(warehouse: Path, tmp_path: Path) -> None:
    chart = tmp_path / "x.png"
    line = _one_error(_cli("roofline", warehouse, "--out", chart))
    assert "--peak-flops" in line and "--peak-hbm-bandwidth" in line and "--measure-cpu-peaks" in line, line
    assert "peak_flops_per_s" not in line  # not Python's keyword arguments
    assert not chart.exists()
    # One peak is not enough for the roofs either.
    line = _one_error(_cli("roofline", warehouse, "--out", chart, "--peak-flops", "1e12"))
    assert "--peak-hbm-bandwidth" in line and not chart.exists()
    # With both, the chart is drawn; what the command warns of is a line each, not a traceback.
    pytest.importorskip("matplotlib")
    done = _cli("roofline", warehouse, "--out", chart, "--peak-flops", "1e11", "--peak-hbm-bandwidth", "2e10")
    assert done.returncode == 0, done.stderr
    assert chart.stat().st_size > 0
    assert all(line.startswith(("wrote ", "warning: ")) for line in done.stderr.splitlines()), done.stderr


def test_ingest_failures_are_a_line_each(jax_cpu_profile: Path, tmp_path: Path) -> None:
    xprof_json = jax_cpu_profile.with_name(jax_cpu_profile.name.replace(".xplane.pb", ".trace.json.gz"))
    assert xprof_json.exists()  # jax.profiler.trace writes it beside the .xplane.pb
    done = _cli("ingest", xprof_json, tmp_path / "missing", "--into", tmp_path / "run")
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 2 and all(line.startswith("error: ") for line in lines), done.stderr
    assert f"error: {tmp_path / 'missing'}: no such file or directory" in lines
    (xprof,) = [line for line in lines if line.startswith(f"error: {xprof_json}: ")]
    assert "an XProf trace-viewer JSON" in xprof and f"ingest the {jax_cpu_profile.name}" in xprof
    assert "0 ingested, 0 already present, 2 failed" in done.stdout


# --- parameters: one validation, lists, NULL, the shown SQL, compare (issue 30) ---------------------------------

def _ids(warehouse: Path) -> dict[str, str]:
    """format -> profile id of the warehouse's two profiles."""
    return {fmt: pid for pid, fmt in xprosql.load(warehouse).sql("SELECT profile_id, format FROM profiles").rows()}


def _json(*args: str | Path) -> list[dict]:
    done = _cli(*args, "--format", "json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_a_list_is_comma_separated_or_bracketed(warehouse: Path) -> None:
    ids = _ids(warehouse)
    analysis = ["sql", warehouse, "--analysis", "compare", "--param", f"candidate={ids['xspace']}"]
    comma = _json(*analysis, "--param", f"baseline={ids['kineto']},{ids['kineto']}")
    assert comma and {row["baseline_profiles"] for row in comma} == {1}
    # The bracketed forms (JSON or Python) give the same rows; before, ['id'] was one id "['id']": no rows, silently.
    assert _json(*analysis, "--param", f"baseline=['{ids['kineto']}']") == comma
    assert _json(*analysis, "--param", f'baseline=["{ids["kineto"]}"]') == comma
    # And `analyses NAME` says how a list is written.
    described = _cli("analyses", "compare")
    assert described.returncode == 0, described.stderr
    assert "a list is comma-separated (a,b) or bracketed (['a', 'b']" in described.stdout
    assert "[choices: op, category, module]" in described.stdout


def test_null_unquoted_is_null_and_quoted_is_the_string(warehouse: Path) -> None:
    rows = _json("sql", warehouse, "SELECT $x IS NULL AS x_is_null, $y AS y, $n + 1 AS n", "--param", "x=NULL",
                 "--param", "y='NULL'", "--param", "n=41")
    assert rows == [{"x_is_null": True, "y": "NULL", "n": 42}]
    # A declared VARCHAR whose NULL means something: scope=NULL is both scopes, as its default.
    both = _json("sql", warehouse, "--analysis", "bottlenecks", "--param", "scope=NULL")
    assert {row["scope"] for row in both} == {"step", "profile"}
    assert both == _json("sql", warehouse, "--analysis", "bottlenecks")


@pytest.mark.slow
def test_shown_sql_runs_as_printed(warehouse: Path) -> None:
    for params in ([], ["--param", "top=2", "--param", "peak_flops_per_s=1e12", "--param", "peak_source=mine"]):
        shown = _cli("sql", warehouse, "--analysis", "roofline", "--show", *params)
        assert shown.returncode == 0 and shown.stderr == "", shown.stderr
        assert "$top" not in "\n".join(line for line in shown.stdout.splitlines() if not line.startswith("--"))
        # The printed text, run as a query of its own, gives the analysis's rows (before: "Values were not
        # provided for top").
        assert _json("sql", warehouse, shown.stdout) == _json("sql", warehouse, "--analysis", "roofline", *params)
    rows = _json("sql", warehouse, shown.stdout)
    assert {row["peak_flops_source"] for row in rows} == {"mine"} and {row["peak_flops_per_s"] for row in rows} == {1e12}
    assert len([row for row in rows if row["row_kind"] == "op"]) <= 2 * len({row["profile_id"] for row in rows})
    # A fleet analysis with its required lists written in runs as printed too.
    ids = _ids(warehouse)
    cohorts = ["--param", f"baseline={ids['kineto']}", "--param", f"candidate={ids['xspace']}"]
    shown = _cli("sql", warehouse, "--analysis", "compare", "--show", *cohorts)
    assert shown.returncode == 0, shown.stderr
    assert _json("sql", warehouse, shown.stdout) == _json("sql", warehouse, "--analysis", "compare", *cohorts)


@pytest.mark.slow
def test_compare_takes_the_cohorts_python_takes(warehouse: Path) -> None:
    run = xprosql.load(warehouse)
    for by in ("op", "bottleneck"):
        cli = _json("compare", warehouse, "--baseline", "format = 'kineto'", "--candidate", "format = 'xspace'", "--by", by)
        python = run.compare(baseline="format = 'kineto'", candidate="format = 'xspace'", by=by)  # type: ignore[arg-type]
        assert cli and cli == json.loads(python.pl().write_json())
    # Ids in a predicate: the same cohort.
    ids = _ids(warehouse)
    by_id = _json("compare", warehouse, "--baseline", f"profile_id IN ('{ids['kineto']}')", "--candidate",
                  "format = 'xspace'")
    assert by_id == _json("compare", warehouse, "--baseline", "format = 'kineto'", "--candidate", "format = 'xspace'")
