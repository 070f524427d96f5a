"""The critical path of a job across its ranks and what-if by replay (sql/critical_path/_rank_graph.sql,
job_graph.sql, xprosql.queries.job_critical_path), against ground truth the generated jobs carry:

* a 2-rank gloo job (tests/critical_path_profiles.py, make_sync_job_profiles) whose steps cycle through four
  known structures in one run: a known op sleeping on rank 0 before an added sync (dist.barrier), the sync alone,
  work on both ranks on either side of the sync, and that work without the sync. A what-if on one structure is
  checked against the measured steps of another (the sleep removed against the sync alone; the sync removed
  against the work without it);
* the 4-rank gloo DDP job with a straggler and its control run (tests/multirank_profiles.py, the jobs_warehouse
  fixture of conftest.py): the job's path runs through the straggler in the delayed steps, and the straggler
  running like the median predicts the control run's step;
* the real two ranks of one NCCL job in tests/data (sampled_rank0/1): their graphs joined through NCCL kernels.

Every test here generates or ingests jobs: slow (``--runslow``).
"""

from __future__ import annotations

import statistics
from typing import Any

import polars as pl
import pytest
from conftest import MULTIRANK_SAMPLED
from critical_path_profiles import SLEEP_OP, SYNC_SLEEP_S, SYNC_VARIANTS, SYNC_WORK_S, make_sync_job_profiles

import xprosql
from xprosql.queries.job_critical_path import JOB_BOUND_BY

pytestmark = pytest.mark.slow

PREDICTION = 0.10   # the issue's: a what-if within 10% of the measured step it predicts
STRAGGLER_PREDICTION = 0.15


@pytest.fixture(scope="module")
def sync_job(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("sync_job")
    files = make_sync_job_profiles(root / "traces")
    assert xprosql.ingest(files, into=root / "run").ok
    run = xprosql.load(root / "run")
    steps = run.job_critical_path().pl().with_columns(
        (pl.col("step") % 4).replace_strict(SYNC_VARIANTS, return_dtype=pl.String).alias("variant"))
    return {"run": run, "steps": steps, "segments": run.job_critical_path_segments().pl()}


def _median(frame: pl.DataFrame, variant: str, column: str) -> float:
    return statistics.median(frame.filter(pl.col("variant") == variant)[column].to_list())


def test_replay_unchanged_gives_the_measured_steps(sync_job: dict[str, Any]) -> None:
    # Every wait of the graph is explained by an edge (a collective, a thread): replayed unchanged, the steps come
    # back as measured on the job clock.
    steps = sync_job["steps"]
    assert steps.height == 12 and (steps["ranks"] == 2).all()
    for row in steps.iter_rows(named=True):
        assert row["baseline_ps"] == pytest.approx(row["measured_ps"], rel=0.01), row["step"]
        assert row["length_ps"] == row["baseline_ps"] and row["saving_ps"] == 0
        shares = [row[f"{b}_share"] for b in JOB_BOUND_BY]
        assert all(0 <= s <= 1 for s in shares) and sum(shares) == pytest.approx(1.0)
        assert all(row[f"{b}_ps"] >= 0 for b in JOB_BOUND_BY)


def test_the_path_holds_the_sleeping_op_and_crosses_ranks_at_the_sync(sync_job: dict[str, Any]) -> None:
    steps, segments = sync_job["steps"], sync_job["segments"]
    for step in steps.filter(pl.col("variant") == "sleep")["step"]:
        mine = segments.filter(pl.col("step") == step)
        sleeping = mine.filter((pl.col("kind") == "rank") & (pl.col("rank") == 0)
                               & pl.col("top_op").str.contains("sleepy"))
        assert sleeping.height >= 1 and sleeping["top_op_ps"].max() >= 0.9 * SYNC_SLEEP_S * 1e12, (step, mine)
        assert steps.filter(pl.col("step") == step)["held_by_rank"].item() == 0
    # With work on both sides of the barrier, the job waits for rank 0's work, the barrier, then rank 1's work.
    for step in steps.filter(pl.col("variant") == "work_sync")["step"]:
        mine = segments.filter(pl.col("step") == step).sort("position")
        kinds = list(zip(mine["kind"], mine["rank"], mine["instance"].fill_null(""), strict=True))
        barrier = next(i for i, (k, _, inst) in enumerate(kinds) if k == "collective" and "barrier" in inst)
        before = mine[:barrier].filter((pl.col("kind") == "rank") & pl.col("top_op").str.contains("sleepy"))
        after = mine[barrier + 1:].filter((pl.col("kind") == "rank") & pl.col("top_op").str.contains("sleepy"))
        assert before["rank"].to_list() == [0] and after["rank"].to_list() == [1], (step, mine)
        assert mine["member"][barrier] == "rank 0" and mine["next_member"][barrier] == "rank 1"
        assert after["top_op_ps"].item() >= 0.9 * SYNC_WORK_S * 1e12


def test_removing_the_sleep_predicts_the_steps_without_it(sync_job: dict[str, Any]) -> None:
    run = sync_job["run"]
    replayed = run.job_critical_path(changes={SLEEP_OP: 0.0}).pl().join(
        sync_job["steps"].select("step", "variant"), on="step")
    predicted = _median(replayed, "sleep", "length_ps")
    measured = _median(sync_job["steps"], "sync", "measured_ps")
    slept = _median(sync_job["steps"], "sleep", "measured_ps")
    print(f"sleep removed: predicted {predicted / 1e9:.1f} ms, measured without it {measured / 1e9:.1f} ms "
          f"(with it {slept / 1e9:.1f} ms)")
    assert abs(predicted - measured) <= PREDICTION * measured
    assert slept - measured > 0.5 * SYNC_SLEEP_S * 1e12  # the sleep mattered: a replay that ignored it would fail


def test_removing_the_sync_predicts_the_steps_without_it(sync_job: dict[str, Any]) -> None:
    run = sync_job["run"]
    replayed = run.job_critical_path(remove=["c10d::barrier"]).pl().join(
        sync_job["steps"].select("step", "variant"), on="step")
    predicted = _median(replayed, "work_sync", "length_ps")
    measured = _median(sync_job["steps"], "work", "measured_ps")
    synced = _median(sync_job["steps"], "work_sync", "measured_ps")
    print(f"sync removed: predicted {predicted / 1e9:.1f} ms, measured without it {measured / 1e9:.1f} ms "
          f"(with it {synced / 1e9:.1f} ms)")
    assert abs(predicted - measured) <= PREDICTION * measured
    assert synced - measured > 0.5 * SYNC_WORK_S * 1e12
    # Removing the gloo call by its own name takes the wait out too (the c10d:: op's own time stays).
    by_call = run.job_critical_path(remove=["gloo:barrier"]).pl().join(
        sync_job["steps"].select("step", "variant"), on="step")
    assert synced - _median(by_call, "work_sync", "length_ps") > 0.5 * SYNC_WORK_S * 1e12


def test_overlapped_communication_takes_no_path_time(sync_job: dict[str, Any]) -> None:
    overlapped = sync_job["run"].job_critical_path(overlap_communication=True).pl()
    assert (overlapped["host_communication_bound_ps"] == 0).all()
    # A step may replay longer than measured when the step before it ends earlier (its start moves up more than
    # its end); the job's time up to each step's end never grows.
    through = overlapped.sort("job_id", "step").select(
        pl.col("length_ps").cum_sum().over("job_id"), pl.col("baseline_ps").cum_sum().over("job_id"))
    assert (through["length_ps"] <= through["baseline_ps"]).all()
    assert (overlapped["saving_ps"] > 0).any()


# --- the 4-rank DDP job with a straggler, and its control run -----------------------------------------------


@pytest.fixture(scope="module")
def ddp(jobs_warehouse: dict) -> dict[str, Any]:
    run = jobs_warehouse["run"]
    ids = jobs_warehouse["jobs"]
    return {"run": run, "ids": ids,
            "slow": run.job_critical_path().pl().filter(pl.col("job_id") == ids["slow"]),
            "control": run.job_critical_path().pl().filter(pl.col("job_id") == ids["control"])}


def test_the_job_path_runs_through_the_straggler_in_its_delayed_steps(ddp: dict[str, Any]) -> None:
    from multirank_profiles import DDP_DELAY_S, DDP_DELAYED_STEPS, DDP_SLOW_RANK, DDP_STEPS

    slow = ddp["slow"]
    assert sorted(slow["step"].to_list()) == DDP_STEPS
    segments = ddp["run"].job_critical_path_segments().pl().filter(pl.col("job_id") == ddp["ids"]["slow"])
    for step in DDP_DELAYED_STEPS:
        row = slow.filter(pl.col("step") == step).row(0, named=True)
        assert row["held_by_rank"] == DDP_SLOW_RANK and DDP_SLOW_RANK in row["path_ranks"], row
        # The delay is a sleep in DDP's forward: host time outside profiled ops, named by its annotation.
        mine = segments.filter((pl.col("step") == step) & (pl.col("rank") == DDP_SLOW_RANK) & (pl.col("kind") == "rank"))
        assert mine["top_op"].to_list()[0] == "DistributedDataParallel.forward"
        assert mine["top_op_ps"].max() >= DDP_DELAY_S * 1e12
        assert row["cpu_untraced_share"] > 0.5
    for rows in (ddp["slow"], ddp["control"]):
        assert rows["baseline_ps"].to_list() == pytest.approx(rows["measured_ps"].to_list(), rel=0.01)


@pytest.mark.parametrize("like", ["rank", "slowest"])
def test_the_straggler_like_the_median_predicts_the_control_run(ddp: dict[str, Any], like: str) -> None:
    from multirank_profiles import DDP_DELAYED_STEPS, DDP_SLOW_RANK

    run, ids = ddp["run"], ddp["ids"]
    replayed = run.job_critical_path(like_median=[DDP_SLOW_RANK] if like == "rank" else "slowest").pl()
    delayed = replayed.filter((pl.col("job_id") == ids["slow"]) & pl.col("step").is_in(DDP_DELAYED_STEPS))
    control = statistics.median(ddp["control"]["measured_ps"].to_list())
    for row in delayed.iter_rows(named=True):
        print(f"step {row['step']}: measured {row['measured_ps'] / 1e9:.1f} ms, straggler like the median "
              f"{row['length_ps'] / 1e9:.1f} ms, control run {control / 1e9:.1f} ms")
        assert abs(row["length_ps"] - control) <= STRAGGLER_PREDICTION * control, row
        assert row["measured_ps"] > (1 + STRAGGLER_PREDICTION) * control  # the delay mattered


def test_what_if_replays_where_the_graph_exists_and_says_so(ddp: dict[str, Any]) -> None:
    from multirank_profiles import DDP_DELAY_S, DDP_DELAYED_STEPS

    rows = ddp["run"].what_if().pl()
    slow = rows.filter((pl.col("job_id") == ddp["ids"]["slow"]) & (pl.col("scope") == "step"))
    assert set(slow["method"]) == {"replay"}
    saved = slow.filter(pl.col("step").is_in(DDP_DELAYED_STEPS))["saving_ps"].to_list()
    assert saved == pytest.approx([DDP_DELAY_S * 1e12] * len(saved), rel=0.15)
    # The JAX job's ranks are XSpace files: no graph here, the subtraction estimate, labelled.
    jax = rows.filter(pl.col("job_id") == ddp["ids"]["jax"])
    assert jax.height > 0 and set(jax["method"]) == {"subtraction"}
    assert (rows["what_if_step_ps"] >= 0).all() and rows["saving_share"].drop_nulls().is_between(0, 1).all()


# --- a real NCCL job: two ranks of tests/data -------------------------------------------------------------


def test_real_nccl_ranks_join_through_their_kernels(tmp_path: Any) -> None:
    assert xprosql.ingest(MULTIRANK_SAMPLED, into=tmp_path / "run").ok
    run = xprosql.load(tmp_path / "run")
    graph = run.analysis("critical_path.job_graph").pl()
    transfers = graph.filter(pl.col("edge_kind") == "collective_transfer")
    assert transfers.height > 0 and set(transfers["rank"]) == {0, 1}
    assert set(transfers["bound_by"].drop_nulls()) <= {"gpu_communication_bound"}
    # Each joined call lost its own wait-and-transfer edge: one arrival and one transfer per call.
    arrivals = graph.filter(pl.col("edge_kind") == "collective_arrival")
    assert arrivals.select("profile_id", "event_id").sort("profile_id", "event_id").equals(
        transfers.select("profile_id", "event_id").sort("profile_id", "event_id"))
    steps = run.job_critical_path().pl()
    assert steps.height == 2 and (steps["ranks"] == 2).all()
    assert steps["baseline_ps"].to_list() == pytest.approx(steps["measured_ps"].to_list(), rel=0.01)


def test_ranks_that_tie_give_one_path_the_lowest_rank(tmp_path: Any) -> None:
    # Hand-made from a real trace, for what no real job shows: four ranks that are the same trace (sampled_rank0
    # with distributedInfo.rank set to 0..3), so every path ties with three others. The replay must not choose among
    # them by chance: the first in order (window start, then rank) holds every step, run after run.
    import gzip
    import json

    trace = json.loads(gzip.decompress(MULTIRANK_SAMPLED[0].read_bytes()))
    logdir = tmp_path / "job"
    logdir.mkdir()
    for rank in range(4):
        trace["distributedInfo"]["rank"] = rank
        (logdir / f"rank{rank}.json.gz").write_bytes(gzip.compress(json.dumps(trace).encode()))
    assert xprosql.ingest(logdir, into=tmp_path / "run").ok
    run = xprosql.load(tmp_path / "run")
    steps = run.job_critical_path().pl()
    assert steps.height > 0 and (steps["ranks"] == 4).all()
    assert (steps["held_by_rank"] == 0).all() and steps["path_ranks"].to_list() == [[0]] * steps.height
    assert run.job_critical_path().pl().equals(steps)


def test_compiled_walks_give_the_python_ones(sync_job: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    # Graphs of COMPILED_EDGES edges or more are walked by numba-compiled loops: on this real job graph, forced
    # through them, every row and path comes out the same.
    import xprosql.queries.critical_path as cp
    import xprosql.queries.job_critical_path as jcp

    run = sync_job["run"]
    python = (run.job_critical_path(like_median="slowest").pl(), run.job_critical_path_segments().pl())
    monkeypatch.setattr(cp, "COMPILED_EDGES", 0)
    monkeypatch.setattr(jcp, "COMPILED_EDGES", 0)
    compiled = (run.job_critical_path(like_median="slowest").pl(), run.job_critical_path_segments().pl())
    assert python[0].equals(compiled[0]) and python[1].equals(compiled[1])
