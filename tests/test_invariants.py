"""Every number possible, every number one truth: invariants that every public analysis keeps, on every real
sample of tests/data and on the generated 4-rank gloo jobs (a known straggler and its control, tests/test_multirank).

* A share, utilization or fraction lies in [0, 1] (a ``*_pct`` in [0, 100]; a difference of two, signed in its
  header, in [-1, 1]), except an op above its roof: that row says so (``above_roof``) and why (``above_roof_reason``).
* No negative time or size: a ``*_ps`` or ``*_bytes`` column is never below 0, unless its header says the value
  is signed (a clock offset, a difference to a median).
* A breakdown sums to its whole: the bottleneck categories to the step, the memory_bound span shares to 1.
* The same quantity printed by two analyses (or the report and an analysis) is equal.
* An analysis that has no rows for a profile names it and says what it needs; a fleet analysis without rows says
  what it needs.
"""

from __future__ import annotations

import math
import re
import warnings
from pathlib import Path

import polars as pl
import pytest
from conftest import cohort_parameters

import xprosql
from xprosql.engine.library import library

PUBLIC = sorted(m.id for m in library().modules.values() if not m.private)
_SHARE = re.compile(r"(_share|_utilization|_fraction)$")
_AMOUNT = re.compile(r"(_ps|_bytes)$")
_SIGNED = re.compile(r"\bsigned\b")
_TOL = 1e-9
# The top rows over every profile: a profile without any is not one the analysis cannot apply to.
_RANKED_ACROSS_PROFILES = {"fleet.worst_steps"}


def _signed(module_id: str, column: str) -> bool:
    described = {c.name: c.description for c in library().module(module_id).columns}
    return bool(_SIGNED.search(described.get(column, "")))


class _Results(dict):
    """Each public analysis's rows and notes on ``run``, run at first use: the fast tests need a few of them."""

    def __init__(self, run: xprosql.Run) -> None:
        super().__init__()
        self.run = run

    def __missing__(self, module_id: str) -> tuple[pl.DataFrame, list[str]]:
        arguments = cohort_parameters(self.run) if module_id.startswith("fleet.compare") else {}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = self.run.analysis(module_id, **arguments)
            self[module_id] = (result.pl(), list(result.notes))
        return self[module_id]

    def complete(self) -> _Results:
        """Every public analysis run."""
        for module_id in PUBLIC:
            self[module_id]
        return self


@pytest.fixture(scope="module")
def sample_results(samples_warehouse: Path) -> _Results:
    return _Results(xprosql.load(samples_warehouse))


@pytest.fixture(scope="module")
def job_results(jobs_warehouse: dict) -> _Results:
    return _Results(jobs_warehouse["run"]).complete()


def _impossible(results: dict[str, tuple[pl.DataFrame, list[str]]]) -> list[str]:
    found = []
    for module_id, (frame, _notes) in results.items():
        for column, dtype in frame.schema.items():
            if not dtype.is_numeric():
                continue
            values = frame[column]
            if _SHARE.search(column) or column.endswith("_pct"):
                top = 100.0 if column.endswith("_pct") else 1.0
                # A signed share (a difference of two) lies in [-1, 1].
                values = values.abs() if _signed(module_id, column) else values
                excused = (frame["above_roof"].cast(pl.Boolean).fill_null(False) if "above_roof" in frame.columns
                           else pl.Series([False] * frame.height, dtype=pl.Boolean))
                bad = frame.filter((values.is_not_nan() & ((values < -_TOL) | (values > top * (1 + _TOL)))) & ~excused)
                if bad.height:
                    found.append(f"{module_id}.{column}: {bad.height} rows outside [0, {top:g}], e.g. {bad[column].to_list()[:3]}")
            elif _AMOUNT.search(column) and not _signed(module_id, column):
                bad = frame.filter(values < 0)
                if bad.height:
                    found.append(f"{module_id}.{column}: {bad.height} negative rows, e.g. {bad[column].to_list()[:3]}")
        if "above_roof" in frame.columns:
            unexplained = frame.filter(pl.col("above_roof").fill_null(False) & pl.col("above_roof_reason").is_null())
            if unexplained.height:
                found.append(f"{module_id}: {unexplained.height} rows above a roof without a reason")
    return found


@pytest.mark.slow
def test_every_number_is_possible_on_the_samples(sample_results: _Results) -> None:
    assert _impossible(sample_results.complete()) == []


@pytest.mark.slow
def test_every_number_is_possible_on_the_generated_jobs(job_results: dict) -> None:
    assert _impossible(job_results) == []


def _unnamed(results: dict[str, tuple[pl.DataFrame, list[str]]], run: xprosql.Run) -> list[str]:
    names = dict(run.sql("SELECT profile_id, regexp_extract(source_path, '[^/]*$') FROM profiles").rows())
    found = []
    for module_id, (frame, notes) in results.items():
        text = " ".join(notes)
        if module_id in _RANKED_ACROSS_PROFILES or module_id.startswith("diagnose."):
            continue  # a profile without findings has nothing wrong; run.diagnose names those no rule applies to
        if "profile_id" not in frame.columns or library().module(module_id).fleet:  # rows compare profiles
            if frame.is_empty() and not text:
                found.append(f"{module_id}: no rows and no note")
            continue
        missing = set(names) - set(frame["profile_id"].drop_nulls())
        if missing and not (f"no rows for {len(missing)} of" in text and "it needs" in text):
            found.append(f"{module_id}: no rows for {sorted(names[m] for m in missing)[:3]} and no note naming them")
    return found


@pytest.mark.slow
def test_an_analysis_without_rows_says_why(sample_results: _Results, samples_warehouse: Path) -> None:
    assert _unnamed(sample_results.complete(), xprosql.load(samples_warehouse)) == []


def test_breakdowns_sum_to_their_whole(sample_results: _Results) -> None:
    bottlenecks = sample_results["steps.bottlenecks"][0].filter(pl.col("step_ps") > 0)
    categories = ["compute_bound", "memory_bound", "other_compute", "exposed_collective", "exposed_host_offload",
                  "exposed_dma", "launch_overhead", "input_wait", "host_wait", "idle"]
    ps = bottlenecks.select(pl.sum_horizontal([f"{c}_ps" for c in categories]) - pl.col("step_ps"))
    assert ps.to_series().abs().max() == 0
    shares = bottlenecks.select(pl.sum_horizontal([f"{c}_share" for c in categories])).to_series()
    assert shares.to_list() == pytest.approx([1.0] * bottlenecks.height)
    spans = sample_results["ops.memory_bound"][0].filter((pl.col("row_kind") == "profile") & (pl.col("device_time_ps") > 0))
    parts = [f"span_{c}_share" for c in ("memory_bound", "compute_bound", "no_cost_data", "unknown", "collective", "idle")]
    # Idle is the span the ops' self times leave; where it is above 0 the shares sum to exactly 1 (at 0, ops on
    # several streams overlap and their self times may fill more than the span).
    totals = spans.filter(pl.col("span_idle_share") > 0).select(pl.sum_horizontal(parts)).to_series().to_list()
    assert totals and totals == pytest.approx([1.0] * len(totals)), totals


def _one_kind(frame: pl.DataFrame) -> pl.DataFrame:
    return frame.filter(pl.col("profile_id").is_in(
        frame.group_by("profile_id").len().filter(pl.col("len") == 1)["profile_id"].implode()))


def test_profile_summary_is_the_bottlenecks_profile_row(sample_results: _Results) -> None:
    summary = _one_kind(sample_results["fleet.profile_summary"][0])
    profile_rows = sample_results["steps.bottlenecks"][0].filter(pl.col("scope") == "profile")
    joined = summary.join(profile_rows, on="profile_id", suffix="_b")
    assert joined.height == summary.height > 10
    for column in ("idle_share", "memory_bound_share", "compute_bound_share", "other_compute_share",
                   "step_flop_utilization", "step_hbm_utilization", "primary_bottleneck"):
        left, right = joined[column].to_list(), joined[f"{column}_b"].to_list()
        if joined[column].dtype.is_numeric():
            assert [None if v is None else pytest.approx(v) for v in right] == left, column
        else:
            assert left == right, column
    assert (joined["steps"] == joined["steps_b"]).all()


def test_roofline_and_memory_bound_share_their_profile_numbers(sample_results: _Results) -> None:
    keys = ["profile_id", "device_kind"]
    roofline = sample_results["ops.roofline"][0].filter(pl.col("row_kind") == "profile")
    bound = sample_results["ops.memory_bound"][0].filter(pl.col("row_kind") == "profile")
    joined = roofline.join(bound, on=keys, suffix="_m")
    assert joined.height == roofline.height == bound.height
    for column in ("flop_utilization", "hbm_utilization", "device_time_ps"):
        assert joined[column].to_list() == joined[f"{column}_m"].to_list(), column


def test_ops_and_steps_agree_on_device_activity(sample_results: _Results, samples_warehouse: Path) -> None:
    """A profile with accelerators has ops (top_ops, roofline) exactly when it has device steps."""
    run = xprosql.load(samples_warehouse)
    accelerated = {r[0] for r in run.sql("SELECT DISTINCT profile_id FROM devices WHERE kind IN ('tpu', 'gpu')").rows()}
    with_steps = set(sample_results["steps.steps"][0]["profile_id"]) & accelerated
    assert set(sample_results["ops.top_ops"][0]["profile_id"]) & accelerated == with_steps
    assert set(sample_results["ops.roofline"][0]["profile_id"]) & accelerated == with_steps


def test_launch_analyses_agree(sample_results: _Results, samples_warehouse: Path) -> None:
    """Where launch_coverage joins kernels to their calls, launch_stats has those kernels, unless every call is a
    driver launch (HTA's rule), which its note says."""
    coverage = sample_results["gpu.launch_coverage"][0]
    stats, notes = sample_results["hta.launch_stats"]
    launched = coverage.filter(pl.col("kernels_launched") > 0).join(stats.group_by("profile_id").len(), on="profile_id",
                                                                    how="left")
    without = launched.filter(pl.col("len").is_null())["profile_id"].to_list()
    run = xprosql.load(samples_warehouse)
    for profile_id in without:
        apis = {r[0] for r in run.sql("SELECT DISTINCT a.api FROM kernels k JOIN api_calls a USING (profile_id, correlation_id) "
                                      "WHERE profile_id = $p", {"p": profile_id}).rows()}
        assert apis == {"driver"}, (profile_id, apis)
        assert "driver launches" in " ".join(notes)
    assert launched.height - len(without) >= 10


def test_memory_reserved_covers_in_use(sample_results: _Results) -> None:
    peaks = sample_results["memory.memory_peaks"][0].filter(pl.col("reserved_at_peak_bytes").is_not_null())
    assert peaks.height > 5
    assert (peaks["reserved_at_peak_bytes"] >= peaks["peak_in_use_bytes"]).all(), peaks.select(
        "allocator", "peak_in_use_bytes", "reserved_at_peak_bytes")
    events = sample_results["memory.memory_timeline"][0].filter(pl.col("reserved_bytes").is_not_null())
    assert (events["reserved_bytes"] >= events["in_use_bytes"]).all()


@pytest.mark.slow
def test_report_summary_equals_its_sections(samples_warehouse: Path) -> None:
    from xprosql.report import build_report

    run = xprosql.load(samples_warehouse)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = build_report(run, charts=False, progress=False, sections=100)
    fleet = {row["profile_id"]: row for row in report.fleet.iter_rows(named=True)}
    checked = 0
    for section in report.profiles:
        row, summary = fleet[section.profile_id], section.summary
        if summary is None or "+" in str(summary["device_kind"]):
            continue
        checked += 1
        for column in ("idle_share", "memory_bound_share", "step_flop_utilization", "step_hbm_utilization",
                       "primary_bottleneck"):
            a, b = row[column], summary[column]
            assert (a == b) if not isinstance(a, float) else math.isclose(a, b, rel_tol=1e-9), (section.profile_id, column, a, b)
    assert checked > 10


@pytest.mark.slow
def test_straggler_costs_are_possible_and_as_injected(job_results: dict, jobs_warehouse: dict) -> None:
    from multirank_profiles import DDP_DELAY_S, DDP_DELAYED_STEPS, DDP_SLOW_RANK

    ids = jobs_warehouse["jobs"]
    stragglers = job_results["jobs.stragglers"][0]
    slow = stragglers.filter((pl.col("job_id") == ids["slow"]) & pl.col("step").is_in(DDP_DELAYED_STEPS)
                             & (pl.col("rank") == DDP_SLOW_RANK))
    assert slow["delay_imposed_ps"].to_list() == pytest.approx([DDP_DELAY_S * 1e12] * len(DDP_DELAYED_STEPS), rel=0.10)
    assert not stragglers.filter(pl.col("job_id") == ids["control"])["straggler"].any()
    what_if = job_results["jobs.what_if"][0].filter((pl.col("job_id") == ids["slow"]) & (pl.col("scope") == "step"))
    saved = what_if.filter(pl.col("step").is_in(DDP_DELAYED_STEPS))["saving_ps"].to_list()
    assert saved == pytest.approx([DDP_DELAY_S * 1e12] * len(DDP_DELAYED_STEPS), rel=0.20)
    assert (what_if["what_if_step_ps"] >= 0).all() and what_if["saving_share"].is_between(0, 1).all()
    # One truth: what_if's worst delay is stragglers' delay_imposed_ps of the rank at position 1.
    worst = stragglers.filter(pl.col("position") == 1).select("job_id", "step", pl.col("delay_imposed_ps").alias("worst"))
    both = job_results["jobs.what_if"][0].filter(pl.col("scope") == "step").join(worst, on=["job_id", "step"])
    assert (both["worst_delay_ps"] == both["worst"]).all()


def _v100(samples_warehouse: Path) -> str:
    rows = xprosql.load(samples_warehouse).sql(
        "SELECT profile_id FROM profiles WHERE source_path LIKE '%gpu_v100_tf_bert.xplane.pb'").rows()
    return rows[0][0]


def test_a_device_without_step_markers_is_left_out_and_said(sample_results: _Results, samples_warehouse: Path) -> None:
    """The V100 sample's GPU:1 has no steps of its own beside the other GPUs' 20 ms steps: it is not one giant step."""
    steps = sample_results["steps.steps"][0].filter(pl.col("profile_id") == _v100(samples_warehouse))
    unmarked = steps.filter(pl.col("source") == "unmarked")
    assert unmarked["device"].to_list() == ["/device:GPU:1"] and not unmarked["complete"].any()
    summary = sample_results["fleet.profile_summary"][0].filter(pl.col("profile_id") == unmarked["profile_id"][0]).row(0, named=True)
    assert summary["steps"] == steps.filter(pl.col("source") == "steps_line").height
    assert summary["max_step_time_ps"] < 100e9 < unmarked["wall_ps"][0]
    assert summary["primary_bottleneck"] != "host_bound"


def test_a_relative_clock_is_no_date(sample_results: _Results, samples_warehouse: Path) -> None:
    summary = sample_results["fleet.profile_summary"][0]
    v100 = summary.filter(pl.col("profile_id") == _v100(samples_warehouse)).row(0, named=True)
    assert (v100["time_ns"], v100["clock_absolute"]) == (None, False)
    dated = summary.filter(pl.col("clock_absolute"))
    assert dated.height == summary.height - 1 and (dated["time_ns"] > 1.5e18).all()  # after 2017

