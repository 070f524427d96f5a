"""The rules across profiles: diagnose.stragglers (a job's late rank) and diagnose.regressions (a series got slower).

* stragglers: the generated 4-rank gloo DDP job of tests/multirank_profiles.py (conftest's ``jobs_warehouse``), where
  rank DDP_SLOW_RANK sleeps DDP_DELAY_S more in DDP_DELAYED_STEPS, against the same job run without the delay (its
  control run, profiled the same way): the finding names the delayed rank and its saving is what removing the delay
  saved, the two jobs' step times apart (from the raw ProfilerStep events).
* regressions: six runs of the real Kineto sample sampled_rank0 re-serialized by the benchmark's corpus builder
  (benchmarks/make_corpus.py), tagged job=reg, the last three with the kernel of most time 30% longer (the injection
  make_corpus does), beside six untouched runs tagged job=flat.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import polars as pl
import pytest

import xprosql

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import make_corpus
from multirank_profiles import DDP_DELAY_S, DDP_DELAYED_STEPS, DDP_RANKS, DDP_SLOW_RANK

pytestmark = pytest.mark.slow  # generated jobs (minutes) and a generated fleet


def _job_profiles(run: xprosql.Run, job_id: str) -> list[str]:
    return run.jobs().pl().filter(pl.col("job_id") == job_id)["profile_ids"].item().to_list()


def _job_step_time(run: xprosql.Run, profiles: list[str]) -> pl.DataFrame:
    """Per step, the job's step time from the raw ProfilerStep#N events: the longest rank's."""
    steps = run.sql("SELECT profile_id, name, dur_ps FROM events WHERE name LIKE 'ProfilerStep#%'").pl()
    return (steps.filter(pl.col("profile_id").is_in(profiles))
            .with_columns(pl.col("name").str.extract(r"#(\d+)$").cast(pl.Int64).alias("step"))
            .group_by("step").agg(pl.col("dur_ps").max().alias("job_step_ps"), pl.len().alias("ranks"))
            .sort("step"))


def test_stragglers_names_the_delayed_rank_and_what_its_delay_costs(jobs_warehouse: dict) -> None:
    run, jobs = jobs_warehouse["run"], jobs_warehouse["jobs"]
    found = run.analysis("diagnose.stragglers").pl()
    assert set(found["rule"]) <= {"stragglers"}
    slow = found.filter(pl.col("job") == jobs["slow"])
    assert slow.height == 1, slow
    row = slow.row(0, named=True)
    slow_profiles = _job_profiles(run, jobs["slow"])
    assert len(slow_profiles) == DDP_RANKS
    assert row["rank"] == DDP_SLOW_RANK and row["subjects"] == [f"rank {DDP_SLOW_RANK}"]
    assert row["profile_id"] in slow_profiles
    assert row["step"] in DDP_DELAYED_STEPS and row["device"]
    assert row["measures"]["straggled_steps_count"] == len(DDP_DELAYED_STEPS)
    for step in DDP_DELAYED_STEPS:
        assert f"{step}" in row["evidence"]
    # The measured saving: the job's step times with the delay less those of the same job without it.
    with_delay = _job_step_time(run, slow_profiles)
    without = _job_step_time(run, _job_profiles(run, jobs["control"]))
    assert with_delay["step"].to_list() == without["step"].to_list() and set(with_delay["ranks"]) == {DDP_RANKS}
    measured = with_delay["job_step_ps"].sum() - without["job_step_ps"].sum()
    assert measured > 0.8 * len(DDP_DELAYED_STEPS) * DDP_DELAY_S * 1e12  # the delay did slow the job
    assert abs(row["expected_saving_ps"] - measured) <= 0.25 * measured, (row["expected_saving_ps"], measured)
    # The share is of the delayed job's step time, summed over its steps.
    assert row["expected_saving_share"] == pytest.approx(row["expected_saving_ps"] / with_delay["job_step_ps"].sum(), rel=0.01)
    assert row["severity"] == "high"  # two half-second delays in four ~0.5 s steps: about a third of the job's time
    # The control run of the same job has no straggler.
    assert found.filter(pl.col("job") == jobs["control"]).height == 0


def test_stragglers_threshold_is_the_stragglers_analysis_one(jobs_warehouse: dict) -> None:
    run, jobs = jobs_warehouse["run"], jobs_warehouse["jobs"]
    # The delay is about half of each delayed step: a threshold above it names no one.
    strict = run.analysis("diagnose.stragglers", min_cost_share=0.7).pl()
    assert strict.filter(pl.col("job") == jobs["slow"]).height == 0
    # The same ranks and steps as jobs.stragglers marks.
    marked = run.analysis("jobs.stragglers").pl().filter((pl.col("job_id") == jobs["slow"]) & pl.col("straggler"))
    assert set(marked["rank"]) == {DDP_SLOW_RANK} and sorted(marked["step"]) == DDP_DELAYED_STEPS


REG_RUNS = 6
REG_FROM = 3  # the first regressed run


@pytest.fixture(scope="module")
def regressed_fleet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    logs = tmp_path_factory.mktemp("regfleet")
    for job in ("reg", "flat"):
        (logs / job).mkdir()
        (logs / job / "xprosql.json").write_text(json.dumps({"tags": {"job": job}}))
        for i in range(REG_RUNS):
            directory = logs / job / f"run{i}"
            directory.mkdir()
            (directory / "xprosql.json").write_text(json.dumps({"tags": {"commit": f"c{i}", "run": str(i)}}))
            start_ns = make_corpus.BASE_TIME_NS + (i * 3600 + (job == "flat")) * 10**9
            data = make_corpus.make_kineto("sampled", rank=0, start_ns=start_ns, regress=job == "reg" and i >= REG_FROM)
            (directory / f"{job}-host{i:02d}.json.gz").write_bytes(data)
    root = tmp_path_factory.mktemp("regfleetwh") / "run"
    report = xprosql.ingest(logs, into=root, jobs=1)
    assert report.ok and len(report.ingested) == 2 * REG_RUNS, str(report)
    return root


def test_regressions_find_the_slowed_op_from_its_first_profile(regressed_fleet: Path) -> None:
    run = xprosql.load(regressed_fleet)
    profiles = run.sql("SELECT profile_id, host, tags['job'] AS job, tags['commit'] AS commit FROM profiles").pl()
    by_host = {r["host"]: r for r in profiles.to_dicts()}
    first = by_host[f"reg-host{REG_FROM:02d}"]["profile_id"]
    before = by_host[f"reg-host{REG_FROM - 1:02d}"]["profile_id"]
    flat = set(profiles.filter(pl.col("job") == "flat")["profile_id"])

    found = run.analysis("diagnose.regressions", window=3).pl()
    assert found.height >= 1 and set(found["rule"]) == {"regressions"}
    assert not set(found["profile_id"]) & flat  # the series without the injection is silent
    assert set(found["profile_id"]) == {first}
    # The kernel make_corpus stretched (the one with the most time) and the PyTorch ops that launch it.
    kernels = run.sql("SELECT profile_id, name, dur_ps FROM kernels").pl()
    slowed = (kernels.filter(pl.col("profile_id") == before).group_by("name").agg(pl.col("dur_ps").sum())
              .sort("dur_ps", descending=True)["name"][0])
    launching = {op for (op,) in run.sql("SELECT DISTINCT f.op FROM framework_op_kernels f JOIN kernels k "
                                         "USING (profile_id, event_id) WHERE k.name = $k", {"k": slowed}).rows()}
    top = found.row(0, named=True)
    assert top["subjects"][0] in launching, (top["subjects"], launching)
    assert top["subjects"][1:] == [first, before]
    assert "c2" in top["fix"] and "c3" in top["fix"]  # the commits to bisect between
    # The regressed amount, from the raw kernels: the slowed kernel's time per step under the op named (its launches
    # inside that op, with the input shapes and dtypes of the op's key: framework_op_kernels), median of the runs
    # from the change on less that of the runs before.
    op = top["subjects"][0]
    key = re.search(r"op_key ([0-9a-f]{16})", top["evidence"]).group(1)
    signatures = run.sql("SELECT DISTINCT input_shapes, input_dtypes FROM op_stats WHERE op_key = $key", {"key": key}).rows()
    assert len(signatures) == 1
    under_op = run.sql("SELECT f.profile_id, k.dur_ps FROM framework_op_kernels f JOIN kernels k USING (profile_id, event_id) "
                       "WHERE k.name = $k AND f.op = $op AND f.input_shapes IS NOT DISTINCT FROM $shapes "
                       "AND f.input_dtypes IS NOT DISTINCT FROM $dtypes",
                       {"k": slowed, "op": op, "shapes": signatures[0][0], "dtypes": signatures[0][1]}).pl()
    steps = run.sql("SELECT profile_id, count(*) AS steps, sum(dur_ps) AS step_ps FROM events "
                    "WHERE name LIKE 'ProfilerStep#%' GROUP BY profile_id").pl()
    per_step = (under_op.group_by("profile_id").agg(pl.col("dur_ps").sum())
                .join(steps, on="profile_id").with_columns((pl.col("dur_ps") / pl.col("steps")).alias("per_step")))
    reg_hosts = {by_host[f"reg-host{i:02d}"]["profile_id"]: i for i in range(REG_RUNS)}
    per_step = per_step.filter(pl.col("profile_id").is_in(list(reg_hosts))).with_columns(
        pl.col("profile_id").replace_strict(reg_hosts).alias("run"))
    assert per_step.height == REG_RUNS
    added = (per_step.filter(pl.col("run") >= REG_FROM)["per_step"].median()
             - per_step.filter(pl.col("run") < REG_FROM)["per_step"].median())
    first_steps = steps.filter(pl.col("profile_id") == first).row(0, named=True)
    expected = added * first_steps["steps"]
    assert expected > 0
    assert abs(top["expected_saving_ps"] - expected) <= 0.25 * expected, (top["expected_saving_ps"], expected)
    assert top["expected_saving_share"] == pytest.approx(top["expected_saving_ps"] / first_steps["step_ps"], rel=0.01)
    assert top["measures"]["change_ratio"] == pytest.approx(make_corpus.REGRESSION_FACTOR - 1, abs=0.1)
    # A threshold above the 30% injected finds nothing.
    assert run.analysis("diagnose.regressions", window=3, threshold=0.5).pl().height == 0
