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

import xprosql
from xprosql.engine.library import library

ANALYSES = [m.id for m in library().public()]
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
    else:
        assert table.num_rows > 0, f"{analysis} is empty on every real sample"


# Analyses with a row set per profile (a profile_id column; not a fleet-wide top-N): a profile
# they have no rows for must be named, with what it lacks.
PER_PROFILE = [m.id for m in library().public()
               if not m.fleet and m.id != "fleet.worst_steps" and "profile_id" in [c.name for c in m.columns]]


@pytest.mark.parametrize("analysis", PER_PROFILE)
def test_a_profile_without_rows_is_named_with_what_it_lacks(run: xprosql.Run, analysis: str) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", xprosql.NotApplicableWarning)
        result = run.analysis(analysis)
        table = result.arrow()
    missing = set(run.profile_ids) - set(table.column("profile_id").to_pylist())
    notes = [str(w.message) for w in caught if issubclass(w.category, xprosql.NotApplicableWarning)]
    if missing:
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


def test_a_module_missing_from_the_library_is_named() -> None:
    # What an installation missing its sql/ folder, or a misspelt internal id, meets first.
    with pytest.raises(xprosql.AnalysisError, match=r"no SQL module ops\.nosuch in .*sql"):
        library().text("ops.nosuch")


def test_cli_lists_and_describes_every_analysis() -> None:
    listed = subprocess.run([sys.executable, "-m", "xprosql.cli", "analyses"], capture_output=True, text=True, check=True)
    assert [line.split()[0] for line in listed.stdout.splitlines()[: len(ANALYSES)]] == ANALYSES
    described = subprocess.run([sys.executable, "-m", "xprosql.cli", "analyses", "async_summary"], capture_output=True,
                               text=True, check=True).stdout
    parameters = described.split("parameters:")[1].split("columns:")[0].split()
    assert {"hidden_coverage", "prefer_async_line"} <= set(parameters)
    # The included async_ops' $kinds is bound to its default: a summary always covers every kind.
    assert "kinds" not in parameters and "exposed_ps" in described.split("columns:")[1]
