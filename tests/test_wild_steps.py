"""Step times on real profiles written here (tests/wild_profiles.py), against oracles computed
independently of xprosql:

* JAX XSpaces: XProf's own overview page (the xprof wheel, run in a subprocess on the same
  ``.xplane.pb``): the same steps, each within 0.1 ms; the steps XProf drops as incomplete (the
  first and last of more than 5) are the ones flagged ``complete = false``.
* PyTorch Kineto traces (single process, and both ranks of a gloo DDP run): each step's
  duration is its ``ProfilerStep#N`` event's ``dur`` in the raw JSON, exactly, in ps.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import polars as pl
import pytest

import xprosql

XPROF_TOLERANCE_MS = 0.1

# In its own process: the xprof wheel bundles a native Arrow that clashes with pyarrow's.
_OVERVIEW = (
    "import sys\n"
    "from xprof.convert.raw_to_tool_data import xspace_to_tool_data\n"
    "data, _ = xspace_to_tool_data([sys.argv[1]], 'overview_page', {'use_saved_result': False})\n"
    "sys.stdout.write(data.decode() if isinstance(data, bytes) else data)\n"
)


def _generated(make, *args, **kwargs):
    """A generator's files, or a skip when its framework (test extra) is not installed."""
    from wild_profiles import ProfileToolMissing

    try:
        return make(*args, **kwargs)
    except ProfileToolMissing as exc:
        pytest.skip(str(exc))


# --- JAX on 8 host devices, against XProf's overview page -------------------------------------

# 5 steps (XProf keeps all) and 6 (it drops the first and the last): both sides of its threshold.
JAX_STEP_COUNTS = [5, 6]


@pytest.fixture(scope="session", params=JAX_STEP_COUNTS, ids=[f"{n}steps" for n in JAX_STEP_COUNTS])
def jax_sharded(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[int, Path, xprosql.Run]:
    from wild_profiles import JAX_SHARDED_STEPS, make_jax_sharded_profile

    steps = request.param
    if steps == JAX_SHARDED_STEPS:  # the session's profile (conftest)
        run = xprosql.load(request.getfixturevalue("jax_sharded_warehouse"))
        return steps, Path(run.sql("SELECT source_path FROM profiles").rows()[0][0]), run
    root = tmp_path_factory.mktemp(f"jax_sharded_{steps}")
    profile = _generated(make_jax_sharded_profile, root / "log", steps=steps)
    report = xprosql.ingest(profile, into=root / "run")
    assert report.ok, str(report)
    return steps, profile, xprosql.load(root / "run")


def xprof_step_times(profile: Path, work: Path) -> dict[int, float]:
    """Step number -> step time (ms) on XProf's overview page (its step-time graph), for ``profile``."""
    if importlib.util.find_spec("xprof") is None:
        pytest.skip("the xprof wheel (test extra) is not installed")
    work.mkdir(parents=True, exist_ok=True)
    copy = work / profile.name  # XProf tools may write caches beside their input
    shutil.copy(profile, copy)
    done = subprocess.run([sys.executable, "-c", _OVERVIEW, str(copy)], check=True, capture_output=True, timeout=300)
    tables = json.loads(done.stdout)
    graph = next(t for t in tables if any(c["id"] == "stepTimeMs" for c in t.get("cols", [])))
    labels = [c["id"] for c in graph["cols"]]
    rows = [dict(zip(labels, (cell["v"] if cell else None for cell in row["c"]))) for row in graph["rows"]]
    # stepnum reads "<annotation name> <step_num>"
    return {int(str(r["stepnum"]).rsplit(" ", 1)[-1]): float(r["stepTimeMs"]) for r in rows}


def test_jax_sharded_profile_holds_what_the_program_ran(jax_sharded: tuple[int, Path, xprosql.Run]) -> None:
    from wild_profiles import JAX_SHARDED_DEVICES, JAX_SHARDED_MODULE

    steps, _, run = jax_sharded
    ops = dict(run.sql(
        "SELECT h.opcode, count(*) FROM events e JOIN hlo_ops h USING (profile_id, program_id, hlo_op) "
        "WHERE h.module = $m GROUP BY 1", {"m": JAX_SHARDED_MODULE}).rows())
    # each collective and the scan's while loop: once per step on every one of the 8 devices
    for opcode in ("all-reduce", "all-gather", "collective-permute", "all-to-all", "while"):
        assert ops.get(opcode) == steps * JAX_SHARDED_DEVICES, (opcode, ops)


def test_jax_step_times_equal_xprof_overview(jax_sharded: tuple[int, Path, xprosql.Run], tmp_path: Path) -> None:
    from wild_profiles import JAX_SHARDED_GAP_S, JAX_SHARDED_STEP_NAME

    steps, profile, run = jax_sharded
    theirs = xprof_step_times(profile, tmp_path / "xprof")
    ours = run.steps().pl()
    assert ours["step"].to_list() == list(range(steps))
    assert set(ours["source"]) == {"step_annotation"} and set(ours["step_name"]) == {JAX_SHARDED_STEP_NAME}
    assert set(ours["device_kind"]) == {"host"}

    # XProf keeps every step of 5, and drops the first and the last of 6 or more
    expected_kept = list(range(steps)) if steps <= 5 else list(range(1, steps - 1))
    assert sorted(theirs) == expected_kept
    kept = ours.filter(pl.col("complete"))
    assert kept["step"].to_list() == expected_kept
    assert ours.filter(~pl.col("complete"))["step"].to_list() == sorted(set(range(steps)) - set(expected_kept))

    for row in kept.iter_rows(named=True):
        ours_ms = row["wall_ps"] / 1e9
        assert abs(ours_ms - theirs[row["step"]]) <= XPROF_TOLERANCE_MS, (row["step"], ours_ms, theirs[row["step"]])
    # the mean XProf reports is the mean of the complete steps
    mean = kept["wall_ps"].mean() / 1e9
    assert abs(mean - sum(theirs.values()) / len(theirs)) <= XPROF_TOLERANCE_MS

    # the time between steps belongs to none: a step ending at the next one's start would be
    # JAX_SHARDED_GAP_S (2 ms) too long, far outside the tolerance
    starts, ends = ours["start_ps"].to_list(), ours["end_ps"].to_list()
    assert all(start - end >= JAX_SHARDED_GAP_S * 1e12 for end, start in zip(ends, starts[1:]))


def test_incomplete_steps_stay_out_of_step_statistics(jax_sharded: tuple[int, Path, xprosql.Run]) -> None:
    steps, _, run = jax_sharded
    every = run.steps().pl()
    complete = sorted(every.filter(pl.col("complete"))["step"].to_list())
    bottleneck_steps = run.bottlenecks(scope="step").pl()
    assert sorted(bottleneck_steps["step"].to_list()) == complete
    profile = run.bottlenecks(scope="profile").pl().row(0, named=True)
    assert profile["steps"] == len(complete) and profile["step_ps"] == every.filter(pl.col("complete"))["wall_ps"].sum()
    worst = run.worst(by="step", top=steps).pl()
    assert sorted(worst["step_index"].to_list()) == sorted(every.filter(pl.col("complete"))["step_index"].to_list())
    summary = run.worst(by="max_step_time_ps", top=1).pl().row(0, named=True)
    assert summary["max_step_time_ps"] == every.filter(pl.col("complete"))["wall_ps"].max()


# --- PyTorch on the CPU, against the raw Kineto JSON ----------------------------------------

def profiler_steps_in_json(trace: Path) -> dict[int, int]:
    """ProfilerStep#N -> its ``dur`` in ps, read from the raw JSON with exact decimals."""
    document = json.loads(trace.read_text(), parse_float=Decimal)
    steps: dict[int, int] = {}
    for event in document["traceEvents"]:
        name = str(event.get("name", ""))
        if event.get("ph") == "X" and event.get("cat") == "user_annotation" and name.startswith("ProfilerStep#"):
            ps = Decimal(event["dur"]) * 1_000_000  # us -> ps
            assert ps == ps.to_integral_value(), event
            steps[int(name.removeprefix("ProfilerStep#"))] = int(ps)
    return steps


@pytest.fixture(scope="session")
def torch_training(torch_training_warehouse: Path) -> tuple[list[Path], xprosql.Run]:
    """The trace and its warehouse (conftest: generated once a session)."""
    run = xprosql.load(torch_training_warehouse)
    return [Path(p) for (p,) in run.sql("SELECT source_path FROM profiles").rows()], run


@pytest.fixture(scope="session")
def gloo_ddp(gloo_ddp_warehouse: Path) -> tuple[list[Path], xprosql.Run]:
    """The DDP ranks' traces (rank 0 first) and their warehouse (conftest: generated once a session)."""
    run = xprosql.load(gloo_ddp_warehouse)
    return [Path(p) for (p,) in run.sql("SELECT source_path FROM profiles ORDER BY rank").rows()], run


def _assert_steps_are_profiler_steps(run: xprosql.Run, profile_id: str, trace: Path) -> None:
    from wild_profiles import TORCH_ACTIVE_STEPS

    expected = profiler_steps_in_json(trace)
    assert sorted(expected) == TORCH_ACTIVE_STEPS
    steps = run.steps(profiles=[profile_id]).pl()
    assert set(steps["source"]) == {"profiler_step"} and set(steps["device_kind"]) == {"host"}
    assert steps.select("step", "wall_ps").rows() == sorted(expected.items())
    assert steps["complete"].all()  # 3 steps: none is dropped


def test_torch_step_durations_are_the_profiler_steps(torch_training: tuple[list[Path], xprosql.Run]) -> None:
    traces, run = torch_training
    assert len(traces) == 1
    (profile_id,) = run.profile_ids
    _assert_steps_are_profiler_steps(run, profile_id, traces[0])


def test_gloo_ddp_step_durations_are_each_ranks_profiler_steps(gloo_ddp: tuple[list[Path], xprosql.Run]) -> None:
    from wild_profiles import DDP_WORLD_SIZE

    traces, run = gloo_ddp
    assert len(traces) == DDP_WORLD_SIZE
    by_rank = dict(run.sql("SELECT rank, profile_id FROM profiles").rows())
    assert sorted(by_rank) == list(range(DDP_WORLD_SIZE))
    for rank, trace in enumerate(traces):
        # each rank all-reduces its gradients over gloo in every step
        document = json.loads(trace.read_text())
        assert document["distributedInfo"]["backend"] == "gloo" and document["distributedInfo"]["rank"] == rank
        assert any(e.get("name") == "gloo:all_reduce" for e in document["traceEvents"])
        _assert_steps_are_profiler_steps(run, by_rank[rank], trace)
