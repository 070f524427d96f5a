"""Steps (sql/steps/steps.sql): step boundaries from every source, with busy time checked
against an independent interval union computed here in Python."""

from __future__ import annotations

import itertools
from pathlib import Path

import polars as pl
import pytest
from conftest import GPU_SAMPLE, TEST_DATA, TPU_SAMPLE

import xprosql

A100 = TEST_DATA / "kineto" / "a100_nccl_rank0.json.gz"


def busy_in(intervals: list[tuple[int, int]], start: int, end: int) -> int:
    """Length of the union of ``intervals`` inside [start, end)."""
    total, reach = 0, start
    for a, b in sorted(intervals):
        a, b = max(a, reach), min(b, end)
        if b > a:
            total += b - a
            reach = b
    return total


@pytest.fixture(scope="module")
def jax_steps(tmp_path_factory: pytest.TempPathFactory) -> xprosql.Run:
    from jax_profiles import jax_available, make_jax_steps_profile

    if not jax_available():
        pytest.skip("jax is not installed (test extra): cannot generate a JAX CPU profile")
    root = tmp_path_factory.mktemp("jaxsteps")
    profile = make_jax_steps_profile(root / "log")
    assert xprosql.ingest(profile, into=root / "run").ok
    return xprosql.load(root / "run")


def test_jax_step_trace_annotation_gives_one_row_per_step(jax_steps: xprosql.Run) -> None:
    from jax_profiles import JAX_STEPS_NAME, JAX_STEPS_NUMBERS

    steps = jax_steps.steps().pl()
    assert steps["step"].to_list() == JAX_STEPS_NUMBERS
    assert set(steps["source"]) == {"step_annotation"} and set(steps["step_name"]) == {JAX_STEPS_NAME}
    assert set(steps["device_kind"]) == {"host"}
    # each step is its annotation's own interval, as recorded (the gaps between them belong to no step)
    marks = jax_steps.sql(
        "SELECT step_num, start_ps, start_ps + dur_ps FROM events WHERE name = $n AND step_num IS NOT NULL ORDER BY 1",
        {"n": JAX_STEPS_NAME},
    ).rows()
    assert [m[0] for m in marks] == JAX_STEPS_NUMBERS
    assert steps.select("start_ps", "end_ps").rows() == [(m[1], m[2]) for m in marks]
    assert all(a[2] <= b[1] for a, b in itertools.pairwise(marks))
    # 4 steps: XProf keeps all of them (it drops the first and last only of more than 5)
    assert steps["complete"].to_list() == [True] * len(JAX_STEPS_NUMBERS)
    # busy: the XLA:CPU thunks (events with an HLO op) on any thread, counted once where threads overlap
    thunks = jax_steps.sql("SELECT start_ps, start_ps + dur_ps FROM events WHERE hlo_op IS NOT NULL").rows()
    for row in steps.iter_rows(named=True):
        assert row["busy_ps"] == busy_in(thunks, row["start_ps"], row["end_ps"]) > 0
        assert row["busy_ps"] + row["idle_ps"] == row["wall_ps"]


@pytest.fixture(scope="module")
def xspace_run(xspace_warehouse: Path) -> xprosql.Run:
    return xprosql.load(xspace_warehouse)


def test_gpu_steps_line(xspace_run: xprosql.Run) -> None:
    pid = xspace_run.sql("SELECT profile_id FROM profiles WHERE source_path LIKE $p", {"p": f"%{GPU_SAMPLE.name}"}).rows()[0][0]
    steps = xspace_run.steps(profiles=[pid]).pl().filter(pl.col("source") == "steps_line")
    assert steps["device"].to_list() == ["/device:GPU:4", "/device:GPU:6"]
    marks = xspace_run.sql(
        "SELECT e.device_id, e.start_ps, e.start_ps + e.dur_ps FROM events e JOIN tracks t USING (profile_id, device_id, track_id) "
        "WHERE t.name = 'Steps' AND e.profile_id = $p ORDER BY 1", {"p": pid}
    ).rows()
    assert steps.select("device_id", "start_ps", "end_ps").rows() == marks
    assert steps["step"].to_list() == [0, 0]
    for row in steps.iter_rows(named=True):
        ops = xspace_run.sql(
            "SELECT start_ps, start_ps + dur_ps FROM kernels WHERE profile_id = $p AND device_id = $d UNION ALL "
            "SELECT start_ps, start_ps + dur_ps FROM memcpys WHERE profile_id = $p AND device_id = $d",
            {"p": pid, "d": row["device_id"]},
        ).rows()
        assert row["busy_ps"] == busy_in(ops, row["start_ps"], row["end_ps"])
        assert 0.5 < row["busy_fraction"] < 1


def test_tpu_without_steps_is_one_step_per_device(xspace_run: xprosql.Run) -> None:
    pid = xspace_run.sql("SELECT profile_id FROM profiles WHERE source_path LIKE $p", {"p": f"%{TPU_SAMPLE.name}"}).rows()[0][0]
    duration = xspace_run.sql("SELECT duration_ps FROM profiles WHERE profile_id = $p", {"p": pid}).rows()[0][0]
    steps = xspace_run.steps(profiles=[pid]).pl()
    assert steps.select("device", "source", "step", "start_ps", "end_ps").rows() == [
        (f"/device:TPU:{i}", "profile", None, 0, duration) for i in range(4)
    ]
    ops = xspace_run.sql(
        "SELECT e.device_id, e.start_ps, e.start_ps + e.dur_ps FROM events e JOIN tracks t USING (profile_id, device_id, track_id) "
        "WHERE t.name = 'XLA Ops' AND e.profile_id = $p", {"p": pid}
    ).rows()
    for row in steps.iter_rows(named=True):
        assert row["busy_ps"] == busy_in([(a, b) for d, a, b in ops if d == row["device_id"]], 0, duration)


def test_pytorch_profiler_steps(tmp_path: Path) -> None:
    assert xprosql.ingest(A100, into=tmp_path / "run").ok
    run = xprosql.load(tmp_path / "run")
    steps = run.steps().pl()
    assert steps.select("step", "step_name", "source", "complete").rows() == [
        (n, f"ProfilerStep#{n}", "profiler_step", True) for n in (4, 5, 6)
    ]
    assert set(steps["device"]) == {"/device:GPU:0"}
    # each step is its ProfilerStep#N annotation's own interval, not up to the next one's start
    marks = run.sql(
        "SELECT start_ps, start_ps + dur_ps FROM events WHERE category = 'user_annotation' AND name LIKE 'ProfilerStep#%' "
        "ORDER BY start_ps"
    ).rows()
    assert steps.select("start_ps", "end_ps").rows() == marks
    assert all(end < start for (_, end), (start, _) in itertools.pairwise(marks))  # gaps between the steps
