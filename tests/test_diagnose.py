"""The diagnose framework: every rule of sql/diagnose/ returns the findings columns (models.tables' stored_findings),
with possible numbers, on the real samples."""

from __future__ import annotations

import io
import re
import shutil
import subprocess
from pathlib import Path

import polars as pl
import pyarrow as pa
import pytest
from test_cli import xprosql_command

import xprosql
from xprosql.engine.library import library
from xprosql.models.tables import TABLES
from xprosql.report import build_report

RULES = sorted(m.id for m in library().public() if m.id.startswith("diagnose.") and m.id != "diagnose.findings")
FINDINGS = pa.schema([pa.field("profile_id", pa.string()), *TABLES["stored_findings"]])


def test_rules_exist() -> None:
    assert "diagnose.input_bound" in RULES


@pytest.mark.parametrize("rule", RULES)
def test_rule_declares_the_findings_columns(rule: str) -> None:
    declared = [(c.name, c.sql_type) for c in library().modules[rule].columns]
    assert [name for name, _ in declared] == FINDINGS.names, rule


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.slow
def test_rule_returns_the_findings_columns_with_possible_numbers(rule: str, samples_warehouse: Path) -> None:
    run = xprosql.load(samples_warehouse)
    table = run.analysis(rule).arrow()
    for field in FINDINGS:
        assert table.schema.field(field.name).type == field.type, (rule, field.name, table.schema.field(field.name).type)
    rows = table.to_pylist()
    for row in rows:
        assert row["rule"] == rule.split(".", 1)[1]
        assert row["severity"] in ("high", "medium", "low")
        assert row["expected_saving_ps"] is not None and row["expected_saving_ps"] >= 0, row
        assert 0 <= row["expected_saving_share"] <= 1, row
        assert row["title"] and row["evidence"] and row["fix"] and row["reference"] and row["saving_method"], row
        assert all(v is None or v >= 0 or k.endswith("_signed") for k, v in row["measures"]), row


# -- the facade, the command line, the stored findings ----------------------------------------------------------------

@pytest.mark.slow
def test_diagnose_is_every_rule_at_its_defaults(samples_warehouse: Path) -> None:
    run = xprosql.load(samples_warehouse)
    together = run.diagnose().arrow()
    one_by_one = pa.concat_tables([run.analysis(rule).arrow() for rule in RULES])
    assert together.num_rows == one_by_one.num_rows
    key = ["profile_id", "rule", "step", "rank", "device", "expected_saving_ps"]
    assert sorted(together.select(key).to_pylist(), key=str) == sorted(one_by_one.select(key).to_pylist(), key=str)
    savings = together.column("expected_saving_ps").to_pylist()
    assert savings == sorted(savings, reverse=True)


@pytest.mark.slow
def test_thresholds_and_rules_are_checked(samples_warehouse: Path) -> None:
    run = xprosql.load(samples_warehouse)
    with pytest.raises(xprosql.ParameterError, match="no rule 'nope'"):
        run.diagnose(rules=["nope"])
    with pytest.raises(xprosql.ParameterError, match="min_share"):
        run.diagnose(rules=["input_bound"], thresholds={"input_bound": {"min_share": 2.0}})
    with pytest.raises(xprosql.ParameterError, match="not run"):
        run.diagnose(rules=["input_bound"], thresholds={"gpu_gaps": {}})
    with pytest.raises(xprosql.ParameterError, match="min_severity"):
        run.diagnose(min_severity="urgent")  # type: ignore[arg-type]


@pytest.mark.slow
def test_a_lower_threshold_finds_more_and_severity_filters(samples_warehouse: Path) -> None:
    run = xprosql.load(samples_warehouse)
    default = run.diagnose(rules=["input_bound"]).pl()
    everything = run.diagnose(rules=["input_bound"], thresholds={"input_bound": {"min_share": 0.0}}).pl()
    assert everything.height > default.height >= 1
    shares = everything["expected_saving_share"]
    assert everything.filter(pl.col("severity") == "low")["expected_saving_share"].max() < 0.05
    medium = run.diagnose(rules=["input_bound"], thresholds={"input_bound": {"min_share": 0.0}}, min_severity="medium").pl()
    assert medium.height == int((shares >= 0.05).sum())


@pytest.mark.slow
def test_a_profile_no_rule_applies_to_is_named(samples_warehouse: Path) -> None:
    run = xprosql.load(samples_warehouse)
    with pytest.warns(xprosql.NotApplicableWarning, match=r"no rule applies to 1 of .*cupti_counters"):
        run.diagnose()


@pytest.mark.slow
def test_compacted_findings_are_read_back_equal(samples_warehouse: Path, tmp_path: Path) -> None:
    copy = tmp_path / "run"
    shutil.copytree(samples_warehouse, copy)
    before = xprosql.load(copy).diagnose().arrow()
    xprosql.compact(copy)
    run = xprosql.load(copy)
    across_profiles = {"stragglers", "regressions", "anomalies"}  # diagnose.findings computes these from every profile's rows
    per_profile = [r for r in before.column("rule").to_pylist() if r not in across_profiles]
    assert run.sql("SELECT count(*) FROM stored_findings").rows()[0][0] == len(per_profile) > 0
    assert "stored_findings" in run.engine.library.text("diagnose.findings", frozenset(
        run.engine._stored("diagnose.findings", {}).items()))
    _equal_but_the_replayed_stragglers(run.diagnose().arrow(), before)


def _equal_but_the_replayed_stragglers(after: pa.Table, before: pa.Table) -> None:
    """Compaction also stores each job's replayed what-if, which the straggler finding then reads where it had the
    subtraction (sql/diagnose/stragglers.sql): the same stragglers, their saving replayed and labelled so; every other
    finding equal, in the same order."""
    def split(table: pa.Table) -> tuple[list[dict], list[dict]]:
        rows = table.to_pylist()
        return [r for r in rows if r["rule"] != "stragglers"], [r for r in rows if r["rule"] == "stragglers"]

    (others_after, stragglers_after), (others_before, stragglers_before) = split(after), split(before)
    assert others_after == others_before

    def key(r: dict) -> tuple:
        return r["profile_id"], r["job"], r["rank"], r["subjects"]

    assert sorted(map(key, stragglers_after)) == sorted(map(key, stragglers_before))
    assert all(r["saving_method"].startswith("replay") for r in stragglers_after), stragglers_after
    assert all(0 <= r["expected_saving_share"] <= 1 for r in stragglers_after)


@pytest.mark.slow
def test_command_line_text_and_rows(samples_warehouse: Path) -> None:
    command = [*xprosql_command(), "diagnose", str(samples_warehouse)]
    text = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert text.returncode == 0, text.stderr
    rows = xprosql.load(samples_warehouse).diagnose().pl()
    for row in rows.iter_rows(named=True):
        assert f"[{row['severity']}] {row['rule']}: {row['title']}" in text.stdout
    assert f"{rows.height} finding" in text.stdout
    assert "no rule applies to 1 of" in text.stderr
    as_csv = subprocess.run([*command, "--format", "csv", "--param", "input_bound.min_share=0"],
                            capture_output=True, text=True, timeout=300)
    assert as_csv.returncode == 0, as_csv.stderr
    frame = pl.read_csv(io.StringIO(as_csv.stdout))
    assert set(frame["rule"]) == {"input_bound"} and frame.height > rows.filter(pl.col("rule") == "input_bound").height
    bad = subprocess.run([*command, "--param", "input_bound.min_share=2"], capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and bad.stderr.startswith("error: ") and "min_share" in bad.stderr
    bad = subprocess.run([*command, "--param", "min_share=0.1"], capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and "RULE.NAME=VALUE" in bad.stderr
    # a threshold of no rule is refused, even beside --rule (it was dropped without a word)
    bad = subprocess.run([*command, "--rule", "input_bound", "--param", "nope.min_share=0.1"], capture_output=True,
                         text=True, timeout=300)
    assert bad.returncode == 2 and "no rule 'nope'" in bad.stderr


@pytest.mark.slow
def test_report_opens_with_the_findings(samples_warehouse: Path, tmp_path: Path) -> None:
    run = xprosql.load(samples_warehouse)
    findings = run.diagnose().pl()
    page = build_report(run, charts=False, sections=2).html()
    assert page.index("<section id='findings'>") < page.index("<section id='summary'>")
    first = findings.row(0, named=True)
    assert first["title"] in page
    # The largest finding's profile gets a section, and the table links to its evidence there.
    anchor = re.search(r"href='#(finding-[^']+)'", page)
    assert anchor is not None and f"id='{anchor.group(1)}'" in page and first["profile_id"] in anchor.group(1)


@pytest.mark.slow
def test_readme_worked_example_is_what_diagnose_prints(tmp_path: Path) -> None:
    """The README's diagnose example on the bundled H100 sample: its findings, titles and savings as printed."""
    sample = Path(__file__).resolve().parent / "data" / "kineto" / "h100_qwen1.5_0.5b.json.gz"
    assert xprosql.ingest(sample, into=tmp_path / "h100").ok
    done = subprocess.run([*xprosql_command(), "diagnose", str(tmp_path / "h100")], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    example = readme.split("xprosql diagnose h100/", 1)[1].split("4 findings", 1)[0]
    printed = [line for line in done.stdout.splitlines() if line.startswith("[")]
    assert len(printed) == 4 and done.stdout.rstrip().endswith("4 findings")
    for line in printed:
        assert line in example, line
    savings = [line.split("):", 1)[0] for line in done.stdout.splitlines() if line.strip().startswith("saving:")]
    for saving in savings[:2]:  # the README quotes the first two findings' savings
        assert saving in example, saving


@pytest.mark.slow
def test_profiles_stored_by_an_xprosql_with_fewer_stored_tables_are_stored_again(
        samples_warehouse: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A warehouse compacted before stored_findings and stored_collective_calls existed (simulated: compaction with
    the first two stored tables only) reads as not stored, so nothing reads a table it lacks as empty; the next
    compaction stores every table again, once."""
    import xprosql.engine.executor as executor
    import xprosql.warehouse as warehouse

    copy = tmp_path / "run"
    shutil.copytree(samples_warehouse, copy)
    live = xprosql.load(copy).diagnose().arrow()
    first = {t: m for t, m in warehouse.PACK_DERIVED_TABLES.items() if t in ("stored_steps", "stored_bottleneck_steps")}
    with monkeypatch.context() as patched:
        patched.setattr(warehouse, "PACK_DERIVED_TABLES", first)
        patched.setattr(executor, "PACK_DERIVED_TABLES", first)
        xprosql.compact(copy)
    old = xprosql.load(copy)
    assert old.engine.snapshot.stored == frozenset()
    assert old.sql("SELECT count(*) FROM stored_findings").rows()[0][0] == 0
    _equal_but_the_replayed_stragglers(old.diagnose().arrow(), live)
    steps_before = old.sql("SELECT count(*) FROM stored_steps").rows()[0][0]
    xprosql.compact(copy)
    new = xprosql.load(copy)
    assert new.engine.snapshot.stored == frozenset(new.profile_ids)
    assert new.sql("SELECT count(*) FROM stored_steps").rows()[0][0] == steps_before > 0  # stored again, not twice
    assert new.sql("SELECT count(*) FROM stored_collective_calls").rows()[0][0] > 0
    _equal_but_the_replayed_stragglers(new.diagnose().arrow(), live)
