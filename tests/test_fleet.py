"""Fleet queries over a small fleet made from a real trace: compare, regressions, worst.

The fleet is the real Kineto trace sampled_rank0 re-serialized by the benchmark's
corpus builder (times shifted per profile). The regression is injected, since no
real file shows one: from the 6th profile of job "reg" on, the kernel with the
most time runs 30% longer (benchmarks/make_corpus.py, REGRESSION_FACTOR).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import polars as pl
import pytest

import xprosql

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import make_corpus

# Slow (tests/conftest.py): the module's fleet of generated profiles takes half a minute to make and ingest.
pytestmark = pytest.mark.slow

PER_JOB = 10
CHANGE_AT = 5


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    logs = tmp_path_factory.mktemp("fleet")
    for job in ("reg", "flat"):
        (logs / job).mkdir()
        (logs / job / "xprosql.json").write_text(json.dumps({"tags": {"job": job}}))
        for i in range(PER_JOB):
            commit = f"c{int(i >= CHANGE_AT)}"
            directory = logs / job / commit
            directory.mkdir(exist_ok=True)
            (directory / "xprosql.json").write_text(json.dumps({"tags": {"commit": commit}}))
            start_ns = make_corpus.BASE_TIME_NS + (i * 3600 + (job == "flat")) * 10**9
            data = make_corpus.make_kineto("sampled", rank=i, start_ns=start_ns, regress=job == "reg" and i >= CHANGE_AT)
            (directory / f"{job}-host{i:02d}.json.gz").write_bytes(data)
    root = tmp_path_factory.mktemp("fleetwh") / "run"
    report = xprosql.ingest(logs, into=root, jobs=2)
    assert report.ok and len(report.ingested) == 2 * PER_JOB, str(report)
    return root


def _host_of(run: xprosql.Run, profile_id: str) -> str:
    return run.sql("SELECT host FROM profiles WHERE profile_id = $p", {"p": profile_id}).rows()[0][0]


def test_regressions_find_the_first_profile_after_the_change(fleet: Path) -> None:
    run = xprosql.load(fleet)
    found = run.regressions(tag="job", window=3).pl()
    assert set(found["series"]) == {"reg"}, found  # the flat job has no change
    assert found["direction"].to_list() == ["slower"] * found.height
    slowest = found.filter(pl.col("metric").str.starts_with("op_time_per_step_ps:")).sort("change", descending=True).row(0, named=True)
    assert _host_of(run, slowest["first_profile_id"]) == f"reg-host{CHANGE_AT:02d}"
    # 30% longer kernels; self time grows less where a longer kernel now spans the next one on its stream.
    assert 0.1 < slowest["change"] <= 0.3 + 1e-6
    # A stricter threshold than the change finds nothing.
    assert run.regressions(tag="job", window=3, threshold=0.5).pl().height == 0


def test_compare_cohorts_by_op_and_bottleneck(fleet: Path) -> None:
    run = xprosql.load(fleet)
    cohorts = {"baseline": "tags['job'] = 'reg' AND tags['commit'] = 'c0'", "candidate": "tags['job'] = 'reg' AND tags['commit'] = 'c1'"}
    by_op = run.compare(**cohorts).pl()
    top = by_op.row(0, named=True)
    assert top["baseline_profiles"] == CHANGE_AT and top["candidate_profiles"] == PER_JOB - CHANGE_AT
    assert 1.1 < top["time_ratio"] <= 1.3 + 1e-6
    assert by_op["delta_time_per_profile_ps"].abs().is_sorted(descending=True)
    # The corpus slows one kernel (by name): the ops that change are the PyTorch ops launching it.
    slow = run.sql("SELECT name FROM kernels GROUP BY name ORDER BY sum(dur_ps) DESC LIMIT 1").rows()[0][0]
    launching = {op for (op,) in run.sql("SELECT DISTINCT f.op FROM framework_op_kernels f JOIN kernels k "
                                         "USING (profile_id, event_id) WHERE k.name = $k", {"k": slow}).rows()}
    changed = by_op.filter(pl.col("delta_time_per_profile_ps").abs() > top["delta_time_per_profile_ps"] / 10)
    assert launching and set(changed["key"]) <= launching, (set(changed["key"]), launching)
    flat = run.compare(baseline="tags['job'] = 'flat'", candidate="tags['job'] = 'flat'").pl()
    assert flat["delta_time_per_profile_ps"].abs().max() == 0
    by_bottleneck = run.compare(**cohorts, by="bottleneck").pl()
    assert {"device_kind", "bottleneck", "delta_share"} <= set(by_bottleneck.columns) and by_bottleneck.height > 0
    with pytest.raises(xprosql.XprosqlError, match="empty"):
        run.compare(baseline="tags['job'] = 'nope'", candidate="true").pl()


def test_worst_steps_and_profiles(fleet: Path) -> None:
    run = xprosql.load(fleet)
    steps = run.worst(by="step", top=4).pl()
    assert steps.height == 4 and steps["wall_ps"].is_sorted(descending=True)
    everything = run.analysis("steps").pl()
    assert steps["wall_ps"].to_list() == everything["wall_ps"].sort(descending=True).head(4).to_list()
    profiles = run.worst(by="step_time_ps", top=3).pl()
    assert profiles.height == 3 and profiles["step_time_ps"].is_sorted(descending=True)
    ops = run.worst(analysis="roofline", by="self_time_ps", top=2).pl()
    assert ops["self_time_ps"].to_list() == run.roofline().pl()["self_time_ps"].sort(descending=True).head(2).to_list()
    stuck = run.worst(analysis="bottlenecks", scope="step", by="host_wait_ps", top=3).pl()
    assert set(stuck["scope"]) == {"step"} and stuck["host_wait_ps"].is_sorted(descending=True)
    with pytest.raises(xprosql.ParameterError, match="no column"):
        run.worst(by="nope").pl()
