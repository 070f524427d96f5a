"""The job tables compaction stores (models.tables.JOB_DERIVED_TABLES; xprosql.queries.job_critical_path.
derive_job_tables): the job critical path and what-if of every job, read instead of replayed.

A job's rows depend on all its members, so they are kept per job: a job's id is the hash of its members, a member
arriving later makes a new job, computed at query time until the next compaction stores it and drops the old one.
Checked on the generated 4-rank jobs with a straggler and their control (tests/multirank_profiles.py), a 4-rank JAX
job (XSpace: what-if by subtraction) and the two real NCCL ranks of tests/data.
"""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path
from typing import Any

import pytest
from conftest import MULTIRANK_SAMPLED

import xprosql
import xprosql.queries.job_critical_path as jcp
from xprosql.engine import library
from xprosql.models.tables import JOB_DERIVED_TABLES, table_schema


def test_the_stored_tables_hold_every_column_the_analyses_return() -> None:
    steps = table_schema("stored_job_critical_path").names
    assert [f"{b}_ps" for b in jcp.JOB_BOUND_BY] == [n for n in steps if n.endswith("_ps") and n[:-3] in jcp.JOB_BOUND_BY]
    assert [f"{b}_share" for b in jcp.JOB_BOUND_BY] == [n for n in steps if n.endswith("_share") and n[:-6] in jcp.JOB_BOUND_BY]
    # jobs.what_if's columns, in its order: the stored what-if is its rows with the replayed savings.
    assert [c.name for c in library().modules["jobs.what_if"].columns] == table_schema("stored_job_what_if").names


def _no_replay(*_: Any, **__: Any) -> Any:
    raise AssertionError("a stored job was replayed again")


@pytest.mark.slow
def test_stored_rows_are_the_rows_computed_at_query_time(jobs_warehouse: dict, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    before = jobs_warehouse["run"]
    ids = set(before.jobs().pl()["job_id"])
    assert len(ids) == 4 and not before.engine.snapshot.stored_jobs
    computed = (before.job_critical_path().arrow(), before.what_if().arrow())
    root = tmp_path / "run"
    shutil.copytree(jobs_warehouse["root"], root)
    report = xprosql.compact(root)
    assert report is not None and all(report.rows.get(t, 0) > 0 for t in JOB_DERIVED_TABLES), str(report)
    assert report.jobs == 4 and "what-if of 4 new jobs stored" in str(report)
    after = xprosql.load(root)
    assert after.engine.snapshot.stored_jobs == ids
    # diagnose's straggler finding reads the stored replay (before compaction: the subtraction, labelled).
    _straggler_saving_is_the_what_if(before, jobs_warehouse["jobs"]["slow"], method="jobs.what_if")
    _straggler_saving_is_the_what_if(after, jobs_warehouse["jobs"]["slow"], method="replay")
    # Read, not replayed: the graphs are never built again.
    monkeypatch.setattr(jcp, "job_critical_path_graph", _no_replay)
    stored = (after.job_critical_path().arrow(), after.what_if().arrow())
    assert stored[0].num_rows > 0 and stored[0].equals(computed[0])
    assert stored[1].num_rows > 0 and stored[1].equals(computed[1])
    assert set(stored[1].column("method").to_pylist()) == {"replay", "subtraction"}  # the JAX job has no graph
    # Changes are replayed, whatever is stored.
    with pytest.raises(AssertionError, match="replayed again"):
        after.job_critical_path(like_median="slowest")
    # A second compaction finds every job stored: nothing to do.
    assert xprosql.compact(root).files_written == 0


@pytest.mark.slow
def test_a_job_without_gpu_launches_builds_no_graph_and_says_so(jobs_warehouse: dict,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    # The JAX job's XSpace CPU profiles launch nothing: critical_path.job_graph over them has no rows, so the job
    # analyses skip building it (it reads every event of the job) and name the job instead.
    import polars as pl

    run, jax = jobs_warehouse["run"], jobs_warehouse["jobs"]["jax"]
    members = run.jobs().pl().filter(pl.col("job_id") == jax)["profile_ids"].item().to_list()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert jcp.job_critical_path_graph(run.engine, profiles=members).arrow().num_rows == 0
    built: list[list[str]] = []
    real = jcp.job_critical_path_graph

    def graph(engine: Any, *, profiles: list[str], **options: Any) -> Any:
        built.append(profiles)
        return real(engine, profiles=profiles, **options)

    monkeypatch.setattr(jcp, "job_critical_path_graph", graph)
    with pytest.warns(xprosql.NotApplicableWarning, match=r"no graph for 1 of 4 jobs \(.*\): it needs Kineto"):
        steps = run.job_critical_path(like_median="slowest").pl()
    assert built and not set(members) & {p for batch in built for p in batch}
    assert jax not in set(steps["job_id"]) and len(set(steps["job_id"])) == 3


@pytest.mark.slow
def test_a_job_per_batch_built_ahead_gives_the_rows_of_one_batch(jobs_warehouse: dict,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    # The three jobs with a graph fit one batch; with a batch per job, each next graph is built on a thread while
    # the previous one is replayed (jcp._built_ahead), and every row must be the same, in the same order.
    import threading

    run = jobs_warehouse["run"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", xprosql.NotApplicableWarning)
        one_batch = (run.job_critical_path().arrow(), run.what_if().arrow(), run.job_critical_path_segments().arrow())
        threads: list[str] = []
        real = jcp.job_critical_path_graph

        def graph(engine: Any, **options: Any) -> Any:
            threads.append(threading.current_thread().name)
            return real(engine, **options)

        monkeypatch.setattr(jcp, "job_critical_path_graph", graph)
        monkeypatch.setattr(jcp, "JOB_BATCH_EVENTS", 1)
        batched = (run.job_critical_path().arrow(), run.what_if().arrow(), run.job_critical_path_segments().arrow())
    # Each analysis builds the three graphs, each on the thread.
    assert len(threads) == 3 * 3 and all(name.startswith("xprosql-job-graph") for name in threads)
    for expected, got in zip(one_batch, batched, strict=True):
        assert expected.num_rows > 0 and got.equals(expected)


def test_a_caller_that_stops_early_interrupts_the_graph_being_built() -> None:
    # Hand-made builds (the SQL of a real graph is seconds at most): the second one would hash 2 x 10^10 numbers, for
    # a minute or more. Closing the iterator over the first (what an error or Ctrl-C in the replay does) interrupts it.
    import threading

    import duckdb

    from xprosql._duckdb import connect, opened_connections

    ended: list[str] = []
    started = threading.Event()

    def build(batch: list[str]) -> str:
        if batch == ["long"]:
            started.set()
            con = connect()
            try:
                con.execute("SELECT sum(hash(i)) FROM range(20_000_000_000) AS r(i)").fetchall()
                ended.append("finished")
            except duckdb.InterruptException:
                ended.append("interrupted")
            finally:
                con.close()
        return batch[0]

    with opened_connections() as watched:  # a caller's watch (the MCP server's) sees the thread's connections too
        graphs = jcp._built_ahead(build, [["first"], ["long"]])
        assert next(graphs) == "first"
        assert started.wait(timeout=60)  # once it runs: a build not yet started is cancelled, and never runs
        graphs.close()
    assert ended == ["interrupted"] and len(watched) == 1


def test_a_watch_inside_another_sees_the_same_connections() -> None:
    from xprosql._duckdb import connect, opened_connections

    with opened_connections() as outer:
        first = connect()
        with opened_connections() as inner:
            second = connect()
        third = connect()
    assert outer == [first, second, third] and inner == [second]


@pytest.mark.slow
def test_a_member_arriving_later_is_a_new_job_until_the_next_compaction(tmp_path: Path) -> None:
    root = tmp_path / "run"
    assert xprosql.ingest(MULTIRANK_SAMPLED[:1], into=root, compact=False).ok
    xprosql.compact(root, min_profiles=1)
    alone = xprosql.load(root).engine.snapshot.stored_jobs
    assert len(alone) == 1
    assert xprosql.ingest(MULTIRANK_SAMPLED[1:], into=root, compact=False).ok
    run = xprosql.load(root)
    (job,) = run.jobs().pl()["job_id"]
    assert job not in run.engine.snapshot.stored_jobs and run.engine.snapshot.stored_jobs == alone
    fresh = tmp_path / "fresh"
    assert xprosql.ingest(MULTIRANK_SAMPLED, into=fresh, compact=False).ok
    expected = xprosql.load(fresh).job_critical_path().arrow()
    assert expected.num_rows == 2 and run.job_critical_path().arrow().equals(expected)
    xprosql.compact(root, min_profiles=1)
    run = xprosql.load(root)
    assert run.engine.snapshot.stored_jobs == {job}
    assert run.sql("SELECT DISTINCT job_id FROM stored_job_critical_path").rows() == [(job,)]  # the old job's rows went
    assert run.job_critical_path().arrow().equals(expected)
    # A restriction to part of a job is another job (its own members' hash): computed, not the stored rows.
    one = run.jobs(profiles=run.profile_ids[:1]).pl()["job_id"].to_list()
    assert one and job not in one and run.job_critical_path(profiles=run.profile_ids[:1]).arrow().num_rows > 0


@pytest.mark.slow
def test_a_failing_derivation_stores_no_job_and_says_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Hand-made failure (no real profile breaks the replay): compaction still packs and stores the profiles' rows.
    root = tmp_path / "run"
    assert xprosql.ingest(MULTIRANK_SAMPLED, into=root, compact=False).ok
    monkeypatch.setattr(jcp, "_replay", _no_replay)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        report = xprosql.compact(root)
    assert report is not None and report.files_written > 0
    assert any("job tables not stored" in str(w.message) and str(root) in str(w.message) for w in caught)
    run = xprosql.load(root)
    assert not run.engine.snapshot.stored_jobs and set(run.engine.snapshot.stored) == set(run.profile_ids)
    monkeypatch.undo()
    assert run.job_critical_path().arrow().num_rows == 2  # computed at query time


@pytest.mark.slow
def test_the_job_tables_derive_from_what_the_compaction_publishes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The job analyses read the packed files and the profiles' rows this compaction stores, as a query after it
    # does, not every new profile's events again; the rows they store are those computed after it.
    root = tmp_path / "run"
    assert xprosql.ingest(MULTIRANK_SAMPLED, into=root, compact=False).ok
    before = xprosql.load(root).engine.snapshot
    seen: list[Any] = []
    real = jcp.derive_job_tables

    def derive(snapshot: Any) -> Any:
        seen.append(snapshot)
        return real(snapshot)

    monkeypatch.setattr(jcp, "derive_job_tables", derive)
    assert xprosql.compact(root) is not None
    (snapshot,) = seen
    assert set(snapshot.stored) == set(before.profile_ids) and not before.stored
    after = xprosql.load(root).engine.snapshot
    for table in ("events", "stored_collective_calls"):
        assert sorted(f.path for f in snapshot.files[table]) == sorted(f.path for f in after.files[table]), table
    assert len(after.files["events"]) < len(before.files["events"])  # packed
    monkeypatch.undo()
    stored = xprosql.load(root)
    assert stored.engine.snapshot.stored_jobs
    monkeypatch.setattr(jcp, "job_critical_path_graph", _no_replay)  # read back, not replayed
    rows = stored.job_critical_path().arrow()
    monkeypatch.undo()
    fresh = tmp_path / "fresh"
    assert xprosql.ingest(MULTIRANK_SAMPLED, into=fresh, compact=False).ok
    assert rows.equals(xprosql.load(fresh).job_critical_path().arrow())


def _straggler_saving_is_the_what_if(run: Any, job: str, *, method: str) -> None:
    import polars as pl

    (finding,) = run.analysis("diagnose.stragglers").pl().filter(pl.col("job") == job).iter_rows(named=True)
    assert finding["saving_method"].startswith(method), finding["saving_method"]
    member = finding["subjects"][0]
    straggled = run.analysis("jobs.stragglers").pl().filter(
        (pl.col("job_id") == job) & (pl.col("member") == member) & pl.col("straggler"))["step"]
    what_if = run.what_if().pl().filter((pl.col("job_id") == job) & (pl.col("scope") == "step")
                                        & pl.col("step").is_in(straggled) & (pl.col("worst_member") == member))
    if method == "replay":
        assert set(what_if["method"]) == {"replay"}
        assert finding["expected_saving_ps"] == what_if["saving_ps"].sum() > 0
    else:  # the subtraction: the delay the rank imposed
        assert finding["expected_saving_ps"] == what_if["worst_delay_ps"].sum() > 0
    assert 0 < finding["expected_saving_share"] <= 1
