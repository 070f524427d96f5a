"""The catalogue is the contract: every public analysis runs on the real samples and returns exactly
the columns, in the order and of the types, that its SQL header declares."""

from __future__ import annotations

import subprocess
import sys
import warnings
from pathlib import Path

import pyarrow as pa
import pytest
from conftest import cohort_parameters
from polars.testing import assert_frame_equal

import xprosql
from xprosql.engine.library import Library, Range, library, placeholders, sql_dir

ANALYSES = [m.id for m in library().public()]
# Run over every sample, the rules and the newest areas take minutes: slow, as their own tests (CI runs them).
_SLOW_AREAS = ("diagnose.", "critical_path.", "names.")
# Declared DuckDB type -> the Arrow types a Result may hold for it (integer sums arrive as int64).
_ARROW = {
    "VARCHAR": (pa.string(), pa.large_string(), pa.string_view()),
    "BIGINT": (pa.int64(),), "INTEGER": (pa.int32(),), "SMALLINT": (pa.int16(),), "DOUBLE": (pa.float64(),),
    "BOOLEAN": (pa.bool_(),), "VARCHAR[]": (pa.list_(pa.string()), pa.large_list(pa.string())),
}
# Analyses whose input no sample in tests/data has (they have their own tests on generated profiles).
_NO_SAMPLE_INPUT = {
    "counters.utilization": "TPU performance counters (tests/test_counters.py generates them)",
    "counters.utilization_metrics": "TPU performance counters",
    "counters.utilization_samples": "TPU performance counters",
    "fleet.regressions": "a series of profiles tagged with one job over time (tests/test_fleet.py)",
    "fleet.anomalies": "a series of profiles tagged with one job over time (tests/test_watch.py)",
    "fleet.op_history": "profiles of one job in several runs (tests/test_op_history.py)",
    "names.graph_kernels": "a CUDA/HIP graph launch: the vLLM traces of tests/data/graphs (tests/test_graph_kernels.py)",
    "names.graph_launches": "a CUDA/HIP graph launch: the vLLM traces of tests/data/graphs (tests/test_graph_kernels.py)",
}


@pytest.fixture(scope="module")
def run(samples_warehouse: Path) -> xprosql.Run:
    return xprosql.load(samples_warehouse)


def _arguments(run: xprosql.Run, analysis: str) -> dict:
    return cohort_parameters(run) if analysis.startswith("fleet.compare") else {}


def test_the_catalogue_lists_every_public_module() -> None:
    listed = xprosql.analyses().pl()
    on_disk = sorted(".".join(p.relative_to(library().root).with_suffix("").parts) for p in library().root.rglob("*.sql"))
    assert sorted(listed["analysis"]) == [m for m in on_disk if not m.rsplit(".", 1)[1].startswith("_")]
    assert len(listed) >= 20 and all(listed["description"].str.len_chars() > 20)
    assert all(len(columns) > 0 for columns in listed["columns"])


@pytest.mark.parametrize("analysis", ANALYSES)
@pytest.mark.slow
def test_analysis_columns_are_the_declared_ones(run: xprosql.Run, analysis: str) -> None:
    module = library().module(analysis)
    result = run.analysis(analysis, **_arguments(run, analysis))
    table = result.arrow()
    assert [c.name for c in module.columns] == table.column_names
    for column in module.columns:
        actual = table.schema.field(column.name).type
        assert not pa.types.is_decimal(actual), column.name
        expected = _ARROW.get(column.sql_type)
        if expected is not None:
            assert actual in expected or (pa.types.is_dictionary(actual) and column.sql_type == "VARCHAR"), (
                f"{analysis}.{column.name}: declared {column.sql_type}, got {actual}")
    if analysis in _NO_SAMPLE_INPUT:
        assert table.num_rows == 0
    elif analysis.startswith("diagnose.") and analysis != "diagnose.findings":
        pass  # a rule is silent where nothing is wrong: tests/test_diagnose*.py fire each one, and keep controls silent
    else:
        assert table.num_rows > 0, f"{analysis} is empty on every real sample"


# Analyses with a row set per profile (a profile_id column; not a fleet-wide top-N): a profile
# they have no rows for must be named, with what it lacks.
PER_PROFILE = [m.id for m in library().public()
               if not m.fleet and m.id != "fleet.worst_steps" and "profile_id" in [c.name for c in m.columns]]


@pytest.mark.parametrize("analysis", [pytest.param(a, marks=pytest.mark.slow) if a.startswith(_SLOW_AREAS) else a
                                      for a in PER_PROFILE])
def test_a_profile_without_rows_is_named_with_what_it_lacks(run: xprosql.Run, analysis: str) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", xprosql.NotApplicableWarning)
        result = run.analysis(analysis)
        table = result.arrow()
    missing = set(run.profile_ids) - set(table.column("profile_id").to_pylist())
    notes = [str(w.message) for w in caught if issubclass(w.category, xprosql.NotApplicableWarning)]
    if analysis.startswith("diagnose."):
        # A profile without findings has nothing wrong: no note; run.diagnose names the profiles no rule applies to.
        assert library().module(analysis).needs is None and notes == [], notes
    elif missing:
        needs = library().module(analysis).needs
        assert needs, f"{analysis} has no rows for {len(missing)} profiles and no -- Needs: line to say why"
        assert notes == result.notes == [notes[0]] and f"no rows for {len(missing)} of {len(run.profile_ids)}" in notes[0]
        assert notes[0].endswith(f"it needs {needs}")
    else:
        assert notes == [] and result.notes == []


@pytest.mark.parametrize("analysis", ANALYSES)
def test_every_parameter_is_typed_and_described(analysis: str) -> None:
    for parameter in library().parameters(library().module(analysis).id).values():
        assert parameter.sql_type and len(parameter.description) > 5, parameter
        if not parameter.required:
            parameter.default  # noqa: B018 - parses, or raises


def test_mistakes_raise_xprosql_errors(run: xprosql.Run) -> None:
    with pytest.raises(xprosql.UnknownAnalysisError, match="no analysis named 'rooflines'"):
        run.analysis("rooflines")
    with pytest.raises(xprosql.UnknownAnalysisError):
        run.analysis("hta._gpu_ops")  # private building blocks are not run by name
    with pytest.raises(xprosql.ParameterError, match="has no parameter toppp; it takes: top"):
        run.analysis("top_ops", toppp=3)
    with pytest.raises(xprosql.ParameterError, match="needs baseline"):
        run.analysis("fleet.compare")
    with pytest.raises(xprosql.ParameterError, match="profiles not in the warehouse"):
        run.top_ops(profiles=["0000000000000000"])
    with pytest.raises(xprosql.ParameterError, match=r"\$top must be an integer \(BIGINT\), not 'many'"):
        run.analysis("roofline", top="many")
    with pytest.raises(xprosql.ParameterError, match="must be a number"):
        run.analysis("memory_bound", high_utilization=True)
    # A mistake DuckDB finds reads as ours: the analysis and the parameters, not a line of our SQL.
    with pytest.raises(xprosql.QueryError, match="analysis steps.bottlenecks failed with .*input_events") as raised:
        run.bottlenecks(input_events="(unclosed").arrow()
    assert "LINE" not in str(raised.value)


def test_an_analysis_reads_the_same_rows_through_its_relation(run: xprosql.Run) -> None:
    # Rows are read by running the query once; the relation, asked for, is bound then, to refine with DuckDB's API.
    read = run.analysis("top_ops", top=5)
    refined = run.analysis("top_ops", top=5)
    relation = refined.relation
    assert relation.columns == refined.columns == read.arrow().column_names
    assert read.arrow().num_rows > 0  # the shares' float sums may differ in their last bits from run to run
    assert_frame_equal(refined.pl(), read.pl(), check_exact=False, rel_tol=1e-12)
    assert relation.filter("occurrences > 0").aggregate("count(*)").fetchall() == [(read.arrow().num_rows,)]


def test_rows_streamed_are_the_rows_a_temporary_table_holds(run: xprosql.Run, monkeypatch: pytest.MonkeyPatch) -> None:
    # A query over STREAM_ROWS rows or more has its rows streamed from a relation, not held in a temporary table.
    # Forced for every query: an analysis over events and a fleet analysis over its includes' rows (the job graph of
    # the real NCCL ranks, in no set order) give the same rows as below the threshold.
    import xprosql.engine.executor as executor
    import xprosql.engine.result as result

    streamed: list[bool] = []
    query_rows = result.query_rows

    def spy(*args: object, stream: bool = False) -> pa.Table:
        streamed.append(stream)
        return query_rows(*args, stream=stream)  # type: ignore[arg-type]

    monkeypatch.setattr(result, "query_rows", spy)
    monkeypatch.setattr(executor, "query_rows", spy)
    analyses = {"hta.idle_time": {}, "critical_path.job_graph": {}}
    held = {name: run.analysis(name, **params).pl() for name, params in analyses.items()}
    assert streamed and not any(streamed)
    below = len(streamed)
    monkeypatch.setattr(executor, "STREAM_ROWS", 0)
    for name, params in analyses.items():
        assert held[name].height > 0, name
        keys = [c for c, dtype in held[name].schema.items() if not dtype.is_nested()]
        assert_frame_equal(run.analysis(name, **params).pl().sort(keys), held[name].sort(keys))
    assert len(streamed) > below and all(streamed[below:])


def test_a_module_missing_from_the_library_is_named() -> None:
    # What an installation missing its sql/ folder, or a misspelt internal id, meets first.
    with pytest.raises(xprosql.AnalysisError, match=r"no SQL module ops\.nosuch in .*sql"):
        library().text("ops.nosuch")


def test_every_sql_file_is_ascii() -> None:
    # DuckDB's Python layer maps a non-ASCII query's tokens back to characters one character at a time: one "·" in a
    # comment of a 28 KB module cost each of its queries 3-5 ms more.
    found = [f"{path.relative_to(sql_dir())}:{number}" for path in sorted(sql_dir().rglob("*.sql"))
             for number, line in enumerate(path.read_text().splitlines(), 1) if not line.isascii()]
    assert not found, f"non-ASCII characters at {found}"


def test_cli_lists_and_describes_every_analysis() -> None:
    listed = subprocess.run([sys.executable, "-m", "xprosql.cli", "analyses"], capture_output=True, text=True, check=True)
    assert [line.split()[0] for line in listed.stdout.splitlines()[: len(ANALYSES)]] == ANALYSES
    described = subprocess.run([sys.executable, "-m", "xprosql.cli", "analyses", "async_summary"], capture_output=True,
                               text=True, check=True).stdout
    parameters = described.split("parameters:")[1].split("columns:")[0].split()
    assert {"hidden_coverage", "prefer_async_line"} <= set(parameters)
    # The included async_ops' $kinds is bound to its default: a summary always covers every kind.
    assert "kinds" not in parameters and "exposed_ps" in described.split("columns:")[1]


# --- the values a parameter takes: declared in the header, checked the same for every caller (issue 30) ----------

def test_values_the_header_refuses_raise_naming_analysis_and_parameter(run: xprosql.Run) -> None:
    refused = [
        (lambda: run.top_ops(top=0), r"ops.top_ops: \$top must be >= 1, not 0"),
        (lambda: run.analysis("top_ops", top=-5), r"ops.top_ops: \$top must be >= 1, not -5"),
        (lambda: run.roofline(peak_flops_per_s=-1), r"ops.roofline: \$peak_flops_per_s must be > 0, not -1"),
        (lambda: run.memory_timeline(buckets=0), r"memory.memory_timeline: \$buckets must be >= 1, not 0"),
        (lambda: run.analysis("bottlenecks", scope="weird"), r"steps.bottlenecks: \$scope must be one of step, profile"),
        (lambda: run.bottlenecks(scope="weird"), r"steps.bottlenecks: \$scope must be one of step, profile, not 'weird'"),  # type: ignore[arg-type]
        (lambda: run.bottlenecks(idle_share=1.5), r"steps.bottlenecks: \$idle_share must be >= 0 and <= 1, not 1.5"),
        (lambda: run.memory_bound(high_utilization=float("nan")), r"\$high_utilization must be >= 0 and <= 1, not nan"),
        (lambda: run.analysis("fleet.compare", baseline=["x"], candidate=["y"], by="nope"),
         r"fleet.compare: \$by must be one of op, category, module, not 'nope'"),
        # NULL where the header gives it no meaning: it would compare with NULL and return nothing.
        (lambda: run.analysis("top_ops", top=None), r"ops.top_ops: \$top does not take NULL; leave it out for its default, 10"),
        (lambda: run.analysis("fleet.compare", baseline=None, candidate=["y"]), r"fleet.compare: \$baseline does not take NULL"),
    ]
    for call, message in refused:
        with pytest.raises(xprosql.ParameterError, match=message) as raised:
            call()
        assert "\n" not in str(raised.value)
    # NULL where the header says what it does, and the edges of a range, are taken.
    assert library().bind("memory.hlo_memory", {"color": None, "top": 1})["color"] is None
    assert library().bind("steps.bottlenecks", {"idle_share": 0, "host_bound_share": 1.0, "scope": "step"})["idle_share"] == 0


def test_header_tags_parse_and_a_contradiction_is_the_librarys_mistake(tmp_path: Path) -> None:
    def module(parameters: str) -> Path:
        (tmp_path / "x").mkdir(exist_ok=True)
        path = tmp_path / "x" / "m.sql"
        path.write_text(f"-- x.m: a test module\n--\n-- Parameters:\n{parameters}\n--\n-- Columns:\n--   a  BIGINT  a\nSELECT 1 AS a\n")
        return path

    module("--   $n  BIGINT  a count, at least one [range: 1..] (default: 3)\n"
           "--   $share  DOUBLE  a share [range: 0..<1] (default: 0.5)\n"
           "--   $peak  DOUBLE  a peak; NULL: the profile's [range: 0<..] (default: NULL)\n"
           "--   $kind  VARCHAR  which [choices: a, b] (default: 'a')")
    declared = Library(tmp_path).parameters("x.m")
    assert declared["n"].range == Range(1, False, None, False) and declared["n"].description == "a count, at least one"
    assert declared["share"].range == Range(0.0, False, 1.0, True) and str(declared["share"].range) == "0..<1"
    assert declared["peak"].range == Range(0.0, True, None, False) and declared["peak"].nullable
    assert declared["kind"].choices == ("a", "b") and declared["kind"].tags == "[choices: a, b]"
    with pytest.raises(xprosql.ParameterError, match=r"x.m: \$share must be >= 0 and < 1, not 1"):
        Library(tmp_path).bind("x.m", {"share": 1})
    for line, words in [
        ("--   $n  BIGINT  a count [range: 1..] (default: 0)", r"m.sql: x.m: \$n must be >= 1, not 0"),
        ("--   $n  BIGINT  a count [range: one..] (default: 1)", r"m.sql: \$n: range 'one..' is not LOW..HIGH"),
        ("--   $n  BIGINT  a count [choices: 1, 2] (default: 1)", r"m.sql: \$n \(BIGINT\): no tag \[choices: ...\]"),
        ("--   $n  BIGINT  a count [rnage: 1..] (default: 1)", r"no tag \[rnage: ...\]"),
    ]:
        module(line)
        with pytest.raises(xprosql.AnalysisError, match=words):
            Library(tmp_path).module("x.m")


def test_an_unordered_include_leaves_out_the_final_order_only(tmp_path: Path) -> None:
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "_inner.sql").write_text(
        "-- x._inner: rows\n--\n-- Columns:\n--   a  BIGINT  a\n"
        "SELECT a FROM (SELECT unnest([3, 1, 2]) AS a ORDER BY a DESC)\nORDER BY a\n")
    (tmp_path / "x" / "m.sql").write_text(
        "-- x.m: both\n--\n-- Columns:\n--   a  BIGINT  a\n"
        "WITH o AS (\n-- @include x._inner\n), u AS (\n-- @include x._inner unordered\n)\n"
        "SELECT a FROM o UNION ALL SELECT a FROM u\n")
    lib = Library(tmp_path)
    text = lib.text("x.m")
    assert lib.modules["x.m"].includes == ("x._inner",)
    assert text.count("\nORDER BY a\n") == 1 and text.count("ORDER BY a DESC") == 2  # the inner one stays
    import duckdb

    assert sorted(r[0] for r in duckdb.connect().execute(text).fetchall()) == [1, 1, 2, 2, 3, 3]


@pytest.mark.parametrize("analysis", ANALYSES)
@pytest.mark.slow
def test_shown_sql_has_every_value_written_in(run: xprosql.Run, analysis: str) -> None:
    text = library().shown(analysis, _arguments(run, analysis))
    assert not placeholders(text), analysis
    run.sql(f"EXPLAIN {text}").rows()  # DuckDB binds it: no parameter left to provide, every literal of its type


def test_compare_takes_a_predicate_or_profile_ids(run: xprosql.Run) -> None:
    cohorts = cohort_parameters(run)
    by_predicate = run.compare(baseline="format = 'xspace'", candidate="format = 'kineto'", by="category").pl()
    by_ids = run.compare(baseline=cohorts["baseline"], candidate=tuple(cohorts["candidate"]), by="category").pl()
    assert by_predicate.height > 0 and by_ids.equals(by_predicate)
    # The analysis module takes the same ids: one meaning of a cohort of ids.
    assert run.analysis("fleet.compare", **cohorts, by="category").pl().equals(by_predicate)
    with pytest.raises(xprosql.ParameterError, match="profiles not in the warehouse .*: 0000000000000000"):
        run.compare(baseline=["0000000000000000"], candidate="true")
    with pytest.raises(xprosql.ParameterError, match=r"fleet.compare: \$candidate: profiles not in the warehouse .*: 0000, nope"):
        run.analysis("fleet.compare", baseline=cohorts["baseline"], candidate=["nope", "0000"])
    with pytest.raises(xprosql.ParameterError, match="candidate cohort is empty"):
        run.compare(baseline="true", candidate=[])


def test_parts_share_an_include_only_where_it_runs_with_its_own_defaults(tmp_path: Path) -> None:
    """Hand-built modules (no packaged module passes a parameter with another default): derivation runs what two
    parts of a union include once, which is right only where each part would run it with the same values."""
    from xprosql.engine.executor import _shared_includes

    (tmp_path / "x").mkdir()
    columns = "--\n-- Columns:\n--   a  BIGINT  a\n"
    (tmp_path / "x" / "_inner.sql").write_text(
        f"-- x._inner: rows\n--\n-- Parameters:\n--   $n  BIGINT  a count (default: 3)\n{columns}SELECT $n AS a\n")
    include = "WITH i AS (\n-- @include x._inner\n)\nSELECT a FROM i\n"
    (tmp_path / "x" / "hides.sql").write_text(f"-- x.hides: its default\n{columns}{include}")
    (tmp_path / "x" / "passes.sql").write_text(f"-- x.passes: the same default\n--\n-- Passes: $n\n{columns}{include}")
    (tmp_path / "x" / "other.sql").write_text(
        f"-- x.other: another default\n--\n-- Parameters:\n--   $n  BIGINT  a count (default: 5)\n--\n-- Passes: $n\n"
        f"{columns}{include}")
    lib = Library(tmp_path)
    assert _shared_includes(lib, ["x.hides", "x.passes"], set()) == ["x._inner"]
    assert _shared_includes(lib, ["x.hides", "x.other"], set()) == []
    assert _shared_includes(lib, ["x.hides"], set()) == []
    assert _shared_includes(lib, ["x.hides", "x.passes"], {"x._inner"}) == []  # read from a stored table
