"""The critical path of a job's steps across its ranks, and what-if by replay over that graph.

``sql/critical_path/job_graph.sql`` joins the ranks' replay graphs (``_rank_graph``: HTA's graph made
time-faithful, host collectives as nodes) through the collective instances they share: an instance ends when
its last member arrives plus the transfer. Each node's time is the latest of its predecessors' times plus the
edge's weight, so the longest path from the job's start is the job's step, and it names the ranks and ops that
held the job. A change moves the weights and the step is propagated again over the same graph (ByteDance's
what-if analysis of stragglers, OSDI 2025: replay, not subtraction):

* ``changes``: op name or event id -> factor on its time (0 removes it, 0.5 makes it 2x faster), as
  :func:`xprosql.queries.critical_path.critical_path` (a CPU op's callees with it);
* ``like_median``: ranks that run like the median rank: in each step, a rank's compute (its edges of
  cpu_bound, cpu_untraced, gpu_compute_bound and the GPU's gaps and launch delays) is scaled by the median over
  the step's ranks of their own step time without communication (each rank's graph alone, its collectives
  taking no time and waiting for no one) over its own; ``"slowest"``: in each step the rank whose own step
  time is the longest;
* ``remove``: ops or calls (names or event ids) taken out: their time is 0, the sync edges they stand for go
  (a cudaDeviceSynchronize no longer waits for the GPU) and a named collective (its call, e.g. gloo:barrier, or
  the c10d:: op that issued it) no longer joins the ranks: each member goes on at once;
* ``overlap_communication``: every transfer (collective kernels, host collectives, their issue) takes no time;
  the ranks still meet at each collective (the last arrival still holds the others).

:func:`job_critical_path` gives one row per job and step (length, breakdown, who held the job),
:func:`job_critical_path_segments` the path as segments of one rank or one collective, and :func:`job_what_if`
``jobs.what_if`` with the replay's number where the graph exists (``method``).

Example:
    >>> job_critical_path(run.engine).pl()                                           # doctest: +SKIP
    >>> job_critical_path(run.engine, like_median="slowest").pl()                    # doctest: +SKIP
    >>> job_critical_path(run.engine, remove=["c10d::barrier"]).pl()                 # doctest: +SKIP
"""

from __future__ import annotations

import contextvars
import statistics
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any, Literal

import duckdb
import numpy as np
import pyarrow as pa

from xprosql._duckdb import opened_connections
from xprosql.engine import Engine, Result
from xprosql.errors import NotApplicableWarning
from xprosql.models.tables import PARTITION_COLUMN, table_schema
from xprosql.queries._params import Profiles, given
from xprosql.queries.critical_path import _EDGE_ORDER, BOUND_BY, COMPILED_EDGES, Walk, _factors, replay
from xprosql.warehouse import JobRows, Snapshot

__all__ = ["JOB_BATCH_EVENTS", "JOB_BOUND_BY", "LikeMedian", "derive_job_tables", "job_critical_path", "job_critical_path_graph",
           "job_critical_path_segments", "job_what_if"]

# The categories of a job's path: HTA's, host time outside profiled ops, host collectives, late starts.
JOB_BOUND_BY = (*BOUND_BY, "cpu_untraced", "host_communication_bound", "start_skew")
# What "runs like the median" scales: a rank's own work, not its transfers nor its waits.
_COMPUTE = ("cpu_bound", "cpu_untraced", "gpu_compute_bound", "gpu_kernel_kernel_overhead", "gpu_kernel_launch_overhead")
_COMMUNICATION = ("gpu_communication_bound", "host_communication_bound")
_JOB_EDGES = ("start_skew", "step_gap", "job_end", "collective_arrival", "collective_transfer")
# Edge kinds as the replay's arrays hold them: a rank's own edge (or a removed collective's arrival, which now leads
# straight to its end), a collective's arrival, its transfer, another of the job's edges.
_OWN, _ARRIVAL, _TRANSFER, _OTHER_JOB_EDGE = 0, 1, 2, 3
_KIND_CODES = {"collective_arrival": _ARRIVAL, "collective_transfer": _TRANSFER,
               **{k: _OTHER_JOB_EDGE for k in _JOB_EDGES if not k.startswith("collective_")}}
# Ranks that run like the median: these ranks in every step, the slowest rank of each step, or per (job_id, step).
LikeMedian = int | Sequence[int] | Literal["slowest"] | Mapping[tuple[str, int | None], int]

# A step's row is what compaction stores for a job's steps (the schema with its columns' descriptions).
_STEP_SCHEMA = table_schema("stored_job_critical_path")
_WHAT_IF_SCHEMA = table_schema("stored_job_what_if")
_SEGMENT_SCHEMA = pa.schema([
    ("job_id", pa.string()), ("step", pa.int64()), ("position", pa.int64()), ("kind", pa.string()),
    ("profile_id", pa.string()), ("member", pa.string()), ("rank", pa.int64()), ("instance", pa.string()),
    ("next_member", pa.string()), ("start_ps", pa.int64()), ("end_ps", pa.int64()), ("length_ps", pa.int64()),
    ("bound_by", pa.string()), ("top_op", pa.string()), ("top_op_ps", pa.int64()), ("edges", pa.int64()),
])


# Jobs are analysed in batches of about this many events (a larger job alone): a graph holds about 4 edges per
# event, which the replay holds several times over (1 M events of a 4 M-edge job: 8.7 GB peak).
JOB_BATCH_EVENTS = 1_000_000


@dataclass(frozen=True)
class _Plan:
    """The changes of one replay."""

    changes: Mapping[str | int, float] = field(default_factory=dict)
    like_median: LikeMedian | None = None
    remove: Sequence[str | int] = ()
    overlap_communication: bool = False

    @property
    def empty(self) -> bool:
        return not self.changes and self.like_median is None and not self.remove and not self.overlap_communication


def job_critical_path_graph(engine: Engine, *, profiles: Profiles = None, include_last_step: bool | None = None) -> Result:
    """Every edge of every job step's graph (``sql/critical_path/job_graph.sql``)."""
    return engine.analysis("critical_path.job_graph", profiles=profiles, **given(include_last_step=include_last_step))


def job_critical_path(engine: Engine, *, profiles: Profiles = None, changes: Mapping[str | int, float] | None = None,
                      like_median: LikeMedian | None = None, remove: Sequence[str | int] | None = None,
                      overlap_communication: bool = False, include_last_step: bool | None = None) -> Result:
    """One row per job and step: the job's critical path across its ranks and, with changes, the replayed step.

    A job's step N takes from the latest end of its ranks' step N - 1 windows (for the first step, the first
    window start) to the latest end of their step N windows, on the job clock: the time between two completions
    of the job's steps, whatever the ranks' own step boundaries.

    Columns: job_id, job, job_tag, step; ranks (members with a window of the step); measured_ps (the step's time
    as measured, ps); longest_wall_ps (the longest member window of the step, ps); baseline_ps (the graph
    replayed unchanged: measured_ps where every wait is explained); length_ps (replayed with the changes: the
    what-if step time); saving_ps (baseline_ps - length_ps, never below 0) and saving_share (of baseline_ps);
    ``<category>_ps`` and ``<category>_share`` of the path for each of :data:`JOB_BOUND_BY` (shares of
    length_ps, summing to 1); path_ranks (the ranks the path runs through, in order), rank_switches;
    held_by_member / held_by_rank / held_by_share (the member with most time on the path, and its share);
    held_by_op, held_by_op_rank, held_by_op_ps (the op or annotation with most time on the path);
    collectives_on_path (instances whose last arrival the path waits for); changed (the changes applied, as
    text); path_edges; graph_edges (the edges of the step's windows); missing_edges (what the members' traces
    lack, ``rank N:`` before each).

    Without changes and ``include_last_step``, the rows of jobs a compaction stored (``stored_job_critical_path``)
    are read, not replayed; the others are computed. Rows come in the order of the jobs' starts, then by step.
    """
    plan = _Plan(dict(changes or {}), like_median, tuple(remove or ()), overlap_communication)
    listed = _jobs(engine, profiles)
    stored = _stored(engine, listed) if plan.empty and include_last_step is None else set()
    parts = [_stored_rows(engine, "stored_job_critical_path", stored)]
    parts += [_replay(graph, plan, want_segments=False)[0]
              for graph in _job_graphs(engine, _without(listed, stored), include_last_step=include_last_step)]
    return Result.from_arrow(_in_job_order(pa.concat_tables(parts), listed), description="job_critical_path")


def job_critical_path_segments(engine: Engine, *, profiles: Profiles = None,
                               changes: Mapping[str | int, float] | None = None, like_median: LikeMedian | None = None,
                               remove: Sequence[str | int] | None = None, overlap_communication: bool = False,
                               include_last_step: bool | None = None) -> Result:
    """The job critical path of each step as segments, in order (``position`` from 0).

    kind: ``rank`` (consecutive edges of one member: profile_id, member, rank), ``collective`` (the path waited
    for a collective instance: member and rank are the last to arrive, next_member the one the path goes on
    in, length_ps the transfer) or ``start_skew`` (the member that began the step late). start_ps / end_ps:
    replayed times from the job step's start, ps; length_ps their difference; bound_by the segment's largest
    category; top_op / top_op_ps the op or annotation with most time in it; edges the path edges it holds. Rows
    come in the order of the jobs' starts, then by step and position.
    """
    plan = _Plan(dict(changes or {}), like_median, tuple(remove or ()), overlap_communication)
    listed = _jobs(engine, profiles)
    segments = [_SEGMENT_SCHEMA.empty_table()]
    segments += [_replay(graph, plan, want_segments=True)[1]
                 for graph in _job_graphs(engine, listed, include_last_step=include_last_step)]
    return Result.from_arrow(_in_job_order(pa.concat_tables(segments), listed), description="job_critical_path_segments")


def job_what_if(engine: Engine, *, profiles: Profiles = None, min_matched: int | None = None) -> Result:
    """``jobs.what_if`` (each step's worst rank running like the median rank), its saving replayed over the job's
    graph where the job has one (``method`` replay), else its subtraction estimate (``method`` subtraction).

    A replayed step: the worst rank (jobs.what_if's worst_rank) runs like the median (``like_median``), the
    saving is the replayed step's (baseline_ps - length_ps) and ``what_if_step_ps`` = job_step_ps - saving_ps.
    A job row sums its steps; its method is replay, subtraction, or mixed. With the default ``min_matched`` the
    rows of jobs a compaction stored (``stored_job_what_if``) are read, not replayed; the others are computed.
    """
    listed = _jobs(engine, profiles)
    stored = _stored(engine, listed) if min_matched is None else set()
    rest = _without(listed, stored)
    estimate, chosen = _what_if_estimate(engine, rest, min_matched, over=profiles if not stored else _members(rest))
    replayed: dict[tuple[str, int | None], int] = {}
    with warnings.catch_warnings():  # profiles without a graph keep the estimate, labelled: nothing to warn of
        warnings.simplefilter("ignore", NotApplicableWarning)
        for graph in _job_graphs(engine, rest.filter(_is_in("job_id", {job for job, _ in chosen}))):
            replayed.update(_replayed_savings(graph, chosen))
    table = pa.concat_tables([_stored_rows(engine, "stored_job_what_if", stored), _what_if_rows(estimate, replayed)])
    keyed = table.append_column("_step", _nulls_last(table.column("step")))
    order = [("job_id", "ascending"), ("scope", "descending"), ("_step", "ascending")]
    return Result.from_arrow(keyed.sort_by(order).drop(["_step"]), description="job_what_if")


def derive_job_tables(snapshot: Snapshot) -> JobRows | None:
    """The job tables a compaction stores (``JOB_DERIVED_TABLES``): :func:`job_critical_path` without changes and
    :func:`job_what_if` with its defaults, for every job of ``snapshot``; None when its jobs are those stored already.

    The rows of jobs stored before are kept, those of jobs no longer there (a member arrived: a new job id) go, and
    the new jobs' graphs are built once for both tables. Compaction's callback (``Warehouse.compact(derive_jobs=...)``).
    A failure stores nothing (a warning says why): the job analyses then compute every job at query time.
    """
    engine = Engine(snapshot)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", NotApplicableWarning)  # a job without a graph stores the estimate, labelled
            return _job_tables(engine, snapshot.stored_jobs)
    except Exception as exc:
        warnings.warn(f"{snapshot.root}: job tables not stored ({type(exc).__name__}: {exc}); the job analyses "
                      "compute every job at query time", RuntimeWarning, stacklevel=2)
        return None
    finally:
        engine.close()


def _job_tables(engine: Engine, stored_jobs: frozenset[str]) -> JobRows | None:
    listed = _jobs(engine, None)
    current = set(listed["job_id"].to_list())
    if current == stored_jobs:
        return None
    kept = current & stored_jobs
    rest = _without(listed, kept)
    estimate, chosen = _what_if_estimate(engine, rest, None, over=None if not kept else _members(rest))
    steps = [_stored_rows(engine, "stored_job_critical_path", kept)]
    replayed: dict[tuple[str, int | None], int] = {}
    for graph in _job_graphs(engine, rest):
        baselines: _Baselines = {}  # the plain replay is the like-median replay's baseline: walked once
        steps.append(_replay(graph, _Plan(), want_segments=False, baselines=baselines)[0])
        if chosen:
            replayed.update(_replayed_savings(graph, chosen, baselines=baselines))
    what_if = pa.concat_tables([_stored_rows(engine, "stored_job_what_if", kept), _what_if_rows(estimate, replayed)])
    first = {job: min(ids) for job, ids in zip(listed["job_id"].to_list(), listed["profile_ids"].to_list(), strict=True)}
    tables = {name: rows.append_column(PARTITION_COLUMN, pa.array([first[j] for j in rows.column("job_id").to_pylist()],
                                                                  pa.string()))
              for name, rows in (("stored_job_critical_path", pa.concat_tables(steps)), ("stored_job_what_if", what_if))}
    return JobRows(tuple(sorted(current)), tables)


def _jobs(engine: Engine, profiles: Profiles) -> Any:
    """jobs.jobs over ``profiles`` (a Polars frame), in the order of the jobs' starts."""
    return engine.analysis("jobs.jobs", profiles=profiles).pl().sort("start_ns", "job_id")


def _is_in(column: str, values: set[str]) -> Any:
    import polars as pl

    return pl.col(column).is_in(sorted(values))


def _without(listed: Any, jobs: set[str]) -> Any:
    return listed.filter(~_is_in("job_id", jobs))


def _stored(engine: Engine, listed: Any) -> set[str]:
    """The jobs of ``listed`` whose rows a compaction stored: a job id is the hash of its members, so a stored job
    is the same job."""
    return set(listed["job_id"].to_list()) & engine.snapshot.stored_jobs


def _stored_rows(engine: Engine, table: str, jobs: set[str]) -> pa.Table:
    """The stored rows of ``jobs`` in job table ``table``, as the analysis returns them."""
    schema = _STEP_SCHEMA if table == "stored_job_critical_path" else _WHAT_IF_SCHEMA
    if not jobs:
        return schema.empty_table()
    rows = engine.sql(f"SELECT * EXCLUDE ({PARTITION_COLUMN}) FROM {table} WHERE job_id IN (SELECT unnest($jobs))",
                      {"jobs": sorted(jobs)}).arrow()
    return rows.select(schema.names).cast(schema)


def _in_job_order(rows: pa.Table, listed: Any) -> pa.Table:
    """``rows`` (steps or segments) by job in the order of the jobs' starts, then by step (stable: stored and computed
    rows alike, and a step's segments keep their positions)."""
    position = {job: i for i, job in enumerate(listed["job_id"].to_list())}
    order = pa.array([position.get(job, len(position)) for job in rows.column("job_id").to_pylist()], pa.int64())
    keyed = rows.append_column("_job_order", order).append_column("_step", _nulls_last(rows.column("step")))
    return keyed.sort_by([("_job_order", "ascending"), ("_step", "ascending")]).drop(["_job_order", "_step"])


def _nulls_last(column: Any) -> Any:
    """A sort key of an int64 column that puts its nulls last (Arrow's sort options do that per key in newer
    versions only)."""
    import pyarrow.compute as pc

    return pc.fill_null(column, np.iinfo(np.int64).max)


def _members(listed: Any) -> list[str]:
    """The profiles of the jobs ``listed``."""
    return sorted({p for ids in listed["profile_ids"].to_list() for p in ids})


def _what_if_estimate(engine: Engine, listed: Any, min_matched: int | None, *,
                      over: Profiles) -> tuple[Any, dict[tuple[str, int | None], int]]:
    """jobs.what_if over the profiles ``over`` (whose jobs are ``listed``, a Polars frame) and each step's worst rank,
    which the replay runs like the median."""
    import polars as pl

    if not listed.height:
        return pl.from_arrow(_WHAT_IF_SCHEMA.empty_table()), {}
    estimate = engine.analysis("jobs.what_if", profiles=over, **given(min_matched=min_matched)).pl()
    steps = estimate.filter((pl.col("scope") == "step") & pl.col("worst_rank").is_not_null())
    return estimate, {(row[0], row[1]): row[2] for row in steps.select("job_id", "step", "worst_rank").iter_rows()}


def _replayed_savings(frame: Any, chosen: Mapping[tuple[str, int | None], int], *,
                      baselines: _Baselines | None = None) -> dict[tuple[str, int | None], int]:
    """The replayed saving of each chosen step of ``frame``'s jobs (a :func:`_job_graphs` batch) when its worst rank
    runs like the median (``baselines``: as :func:`_replay` takes them)."""
    rows, _ = _replay(frame, _Plan(like_median=chosen), want_segments=False, baselines=baselines)
    return {(row["job_id"], row["step"]): int(row["saving_ps"]) for row in rows.select(["job_id", "step", "saving_ps"]).to_pylist()
            if (row["job_id"], row["step"]) in chosen}


def _what_if_rows(estimate: Any, replayed: Mapping[tuple[str, int | None], int]) -> pa.Table:
    """jobs.what_if's rows with the replayed savings in place of the estimate where there is one (``method``)."""
    import polars as pl

    out = []
    for row in estimate.iter_rows(named=True):
        if row["scope"] != "step":
            continue
        key = (row["job_id"], row["step"])
        if key in replayed:
            saving = min(replayed[key], row["job_step_ps"] or 0)
            row.update(what_if_step_ps=(row["job_step_ps"] or 0) - saving, saving_ps=saving,
                       saving_share=saving / row["job_step_ps"] if row["job_step_ps"] else None, method="replay")
        out.append(row)
    for row in estimate.filter(pl.col("scope") == "job").iter_rows(named=True):
        mine = [r for r in out if r["job_id"] == row["job_id"]]
        methods = {r["method"] for r in mine}
        saving = sum(r["saving_ps"] or 0 for r in mine)
        total = row["job_step_ps"] or 0
        row.update(saving_ps=saving, what_if_step_ps=max(total - saving, 0),
                   saving_share=saving / total if total else None,
                   method=methods.pop() if len(methods) == 1 else ("mixed" if methods else row["method"]))
        out.append(row)
    return pa.Table.from_pylist(out, schema=_WHAT_IF_SCHEMA)


def _job_graphs(engine: Engine, listed: Any, *, include_last_step: bool | None = None) -> Iterator[Any]:
    """The job graphs of the jobs ``listed`` (jobs.jobs rows, a Polars frame), a batch of whole jobs at a time (about
    :data:`JOB_BATCH_EVENTS` events, a larger job alone), so a fleet's graphs never sit in memory at once. A job is its
    members as jobs.jobs groups them: restricted to one job's profiles, the job is the same. Each batch comes in the
    replay's order (:func:`_in_replay_order`), which every replay of it reads."""
    import polars as pl

    # critical_path.job_graph joins no captures of a job that holds a rank twice: its members' graphs are not built.
    _say_without_graph(listed.filter(~pl.col("one_run")), listed, "they hold a rank twice (several runs under one job tag, "
                       "or a rank captured twice), and it needs a job that holds each rank once")
    counts = dict(engine.connection.execute("SELECT profile_id, n_events FROM profiles").fetchall())
    # critical_path._nodes takes Kineto traces and XSpace profiles with GPU launches (hta._gpu_ops' launch_api, from
    # api_calls): a job with neither has no graph, and building it would read all the job's events for nothing.
    able = [p for (p,) in engine.connection.execute(
        "SELECT profile_id FROM profiles WHERE format = 'kineto' "
        "OR profile_id IN (SELECT profile_id FROM api_calls WHERE api = 'launch')").fetchall()]
    one_run = listed.filter(pl.col("one_run"))
    with_graph = pl.col("profile_ids").list.eval(pl.element().is_in(able)).list.any()
    _say_without_graph(one_run.filter(~with_graph), listed, "it needs Kineto (PyTorch profiler) traces or XSpace GPU "
                       "profiles with kernels, and their members are neither")
    batches: list[list[str]] = []
    events = 0
    for members in one_run.filter(with_graph)["profile_ids"].to_list():
        size = sum(int(counts.get(p) or 0) for p in members)
        if not batches or events + size > JOB_BATCH_EVENTS:
            batches.append([])
            events = 0
        batches[-1] += members
        events += size

    def build(batch: list[str]) -> Any:
        return _in_replay_order(job_critical_path_graph(engine, profiles=batch, include_last_step=include_last_step).arrow())

    yield from _built_ahead(build, batches)


def _built_ahead(build: Callable[[list[str]], Any], batches: list[list[str]]) -> Iterator[Any]:
    """``build(batch)`` of each batch in turn, the next one built on a thread while the caller replays this one: the
    graph's SQL (DuckDB, outside the GIL) and the replay (one core) then keep both cores busy. The caller must not use
    the engine between two batches. Two batches' graphs are in memory at once. A caller that stops early (an error,
    Ctrl-C, the iterator closed) interrupts the graph being built rather than wait for it."""
    if not batches:
        return
    building: list[Any] = []  # the connections of the build under way

    def watched(batch: list[str]) -> Any:
        nonlocal building
        with opened_connections() as building:
            return build(batch)

    def start(batch: list[str]) -> Future[Any]:
        # In this context: the thread's connections join a watching caller's too (the MCP server's time limit).
        return pool.submit(contextvars.copy_context().run, watched, batch)

    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="xprosql-job-graph") as pool:
        pending = start(batches[0])
        try:
            for batch in batches[1:]:
                current = pending.result()
                pending = start(batch)
                yield current
                del current
            yield pending.result()
        except BaseException:
            # Interrupt its queries until it gives up: the thread may not have opened the connection yet, and a
            # build runs several queries one after another.
            pending.cancel()
            while not pending.done():
                for connection in list(building):
                    with suppress(duckdb.Error):
                        connection.interrupt()
                wait([pending], timeout=0.05)
            raise


def _say_without_graph(jobs: Any, listed: Any, why: str) -> None:
    if jobs.height:
        names = sorted(jobs["job"].to_list())
        warnings.warn(f"critical_path.job_graph: no graph for {jobs.height} of {listed.height} jobs "
                      f"({', '.join(names[:3])}{' ...' if len(names) > 3 else ''}): {why}", NotApplicableWarning,
                      stacklevel=4)


# -- replay ---------------------------------------------------------------------------------------------


def _in_replay_order(graph: pa.Table) -> Any:
    """critical_path.job_graph rows as a Polars frame in a total order: of paths of equal length the replay takes the
    first, so the same graph gives the same path. Sorted once for every replay of it (0.5 s a million edges)."""
    import polars as pl

    frame = pl.from_arrow(graph)
    assert isinstance(frame, pl.DataFrame)
    return frame.sort(["job_id", "member_index", "window_start_ps", "src_ts_ps", "src_key", "dst_key", "edge_kind",
                       "weight_ps", "event_id"], nulls_last=True)


# Job id -> the walk of its graph and the nodes' distances replayed unchanged (the baseline of a replay with changes).
_Baselines = dict[str, tuple[Walk, np.ndarray]]


def _replay(frame: Any, plan: _Plan, *, want_segments: bool,
            baselines: _Baselines | None = None) -> tuple[pa.Table, pa.Table]:
    """Paths and replays of every job of ``frame`` (critical_path.job_graph rows, :func:`_in_replay_order`), step by step.

    ``baselines``: the unchanged replays of ``frame``'s jobs, read where there and added to where not (a replay with
    changes walks the unchanged graph too, for baseline_ps: a caller replaying the same frame twice walks it once).

    A job's graph is replayed whole (a change in one step moves the later ones with it); step N's time is from the
    latest end of step N - 1's windows to the latest end of its own, and its path the longest path to that end,
    cut where it crosses the previous step's end (the edge that crosses counts for its part after it).
    """
    import polars as pl

    base = frame["weight_ps"].fill_null(0).clip(lower_bound=0).to_numpy().astype(np.float64)
    factor = np.ones(frame.height)
    # Codes and masks rather than strings: numpy compares a million Python strings one by one. A copy: a removal
    # rewrites it, and Polars hands out its own memory read-only.
    kind = frame["edge_kind"].replace_strict(_KIND_CODES, default=_OWN, return_dtype=pl.Int8).to_numpy().copy()
    src_key = frame["src_key"].to_numpy()
    dst_key = frame["dst_key"].to_numpy()
    new_dst = dst_key.copy()
    keep = np.ones(frame.height, dtype=bool)
    changed: list[str] = []
    if plan.changes:
        factor *= _factors(frame, plan.changes)
        changed += [f"{k}: x{v:g}" for k, v in plan.changes.items()]
    if plan.remove:
        factor *= _factors(frame, {k: 0.0 for k in plan.remove})
        _remove_syncs(frame, plan.remove, keep, new_dst, kind)
        changed += [f"{k}: removed" for k in plan.remove]
    if plan.overlap_communication:
        factor[frame["bound_by"].is_in(_COMMUNICATION).fill_null(False).to_numpy()] = 0.0
        changed.append("communication overlapped")
    weight = np.rint(base * factor).astype(np.int64)
    unchanged = np.rint(base).astype(np.int64)
    order = frame["edge_kind"].replace_strict(_EDGE_ORDER, default=3).to_numpy()
    src_ts, dst_ts = frame["src_ts_ps"].to_numpy(), frame["dst_ts_ps"].to_numpy()
    is_compute = frame["bound_by"].is_in(_COMPUTE).fill_null(False).to_numpy() & (kind == _OWN)

    # The walks of all these jobs, however small each, are the work: compiled loops when it adds up to a large graph.
    compiled = frame.height >= COMPILED_EDGES
    step_rows: list[dict[str, Any]] = []
    segment_rows: list[dict[str, Any]] = []
    groups = frame.select("job_id").with_row_index("_row").group_by("job_id", maintain_order=True).agg(pl.col("_row"))
    for job_id, every in groups.iter_rows():
        every = np.asarray(every, dtype=np.int64)
        rows = every[keep[every]]
        part = _rows_of(frame, rows)
        w = weight[rows].copy()
        notes = list(changed)
        if plan.like_median is not None:
            notes += _like_median(part, rows, w, src_key, new_dst, src_ts, dst_ts, order, kind, is_compute,
                                  plan.like_median, job_id, compiled=compiled)
        known = baselines.get(job_id) if baselines is not None else None
        base_walk = known[0] if known else Walk.of(src_key[every], dst_key[every], src_ts[every], dst_ts[every],
                                                   order[every], compiled=compiled)
        # Without removals the changed graph has the unchanged one's edges, ends and times: the same walk.
        walk = base_walk if not plan.remove else Walk.of(src_key[rows], new_dst[rows], src_ts[rows], dst_ts[rows],
                                                         order[rows], compiled=compiled)
        dist, best = walk.relax(w)
        ids, source = walk.ids, walk.source
        if known:
            base_dist = known[1]
        else:
            base_dist = dist if plan.empty else base_walk.relax(unchanged[every])[0]
        base_ids = base_walk.ids
        if baselines is not None:
            baselines[job_id] = (base_walk, base_dist)
        # One edge enters each window (start_skew into a member's first, step_gap into the next ones): its row
        # carries the window and what the member's trace lacks there.
        windows = (_rows_of(frame, every).filter(pl.col("edge_kind").is_in(["start_skew", "step_gap"]))
                   .select("step", "member_index", "step_index", "window_start_ps", "window_end_ps", "window_end_key",
                           "missing_edges", "rank")
                   .unique(["member_index", "step_index"]).sort("window_start_ps", "member_index", "step_index"))
        job_start = int(windows["window_start_ps"].to_numpy().min())
        steps = (windows.group_by("step", maintain_order=True)
                 .agg(pl.col("window_start_ps").min().alias("_first"), pl.col("window_end_ps").max().alias("_end"),
                      pl.col("window_end_key"), pl.col("member_index").n_unique().alias("_ranks"),
                      (pl.col("window_end_ps") - pl.col("window_start_ps")).max().alias("_wall"),
                      pl.struct("rank", "missing_edges").alias("_missing"))
                 .sort("_first"))
        previous = {"measured": 0, "baseline": 0, "length": 0}
        for step, _, end_ps, end_keys, ranks, wall, missing in steps.iter_rows():
            keys = np.asarray(end_keys, dtype=np.int64)
            at = dist[np.searchsorted(ids, keys)]
            reached = int(at.max())
            v = int(np.searchsorted(ids, keys[int(np.argmax(at))]))
            baseline = int(base_dist[np.searchsorted(base_ids, keys)].max())
            measured = int(end_ps) - job_start
            path, pw = _cut(best, source, dist, v, previous["length"], compiled=compiled)
            on = part[path] if path else part.head(0)
            in_step = ((part["step"] == step).fill_null(False) if step is not None else part["step"].is_null()).to_numpy()
            row = _step_row(part.row(0, named=True), step, on, pw, notes,
                            measured=max(measured - previous["measured"], 0),
                            baseline=max(baseline - previous["baseline"], 0),
                            length=max(reached - previous["length"], 0), ranks=int(ranks), wall=int(wall),
                            missing=missing, graph_edges=int(in_step.sum()))
            step_rows.append(row)
            if want_segments:
                segment_rows += _segments(on, pw, job_id, step)
            previous = {"measured": max(measured, previous["measured"]), "baseline": max(baseline, previous["baseline"]),
                        "length": max(reached, previous["length"])}
    return (pa.Table.from_pylist(step_rows, schema=_STEP_SCHEMA),
            pa.Table.from_pylist(segment_rows, schema=_SEGMENT_SCHEMA))


def _rows_of(frame: Any, rows: np.ndarray) -> Any:
    """``frame[rows]`` (ascending row numbers), as a slice, which copies nothing, where they are consecutive (a job's
    rows in the replay's order)."""
    if len(rows) and int(rows[-1]) - int(rows[0]) + 1 == len(rows):
        return frame.slice(int(rows[0]), len(rows))
    return frame[rows]


def _cut(best: np.ndarray, source: np.ndarray, dist: np.ndarray, v: int, since: int, *,
         compiled: bool) -> tuple[list[int], np.ndarray]:
    """The longest path to node index ``v`` after distance ``since``: its edges in order and the part of each
    edge's weight after ``since`` (the first edge may cross it); ``compiled``: by the numba-compiled loop."""
    if compiled:
        from xprosql.queries._critical_path_numba import cut

        edges, parts = cut(best, source, dist, v, since)
        return edges.tolist(), parts
    path: list[int] = []
    weights: list[int] = []
    while best[v] >= 0 and dist[v] > since:
        e = int(best[v])
        u = int(source[e])
        path.append(e)
        weights.append(int(dist[v] - max(int(dist[u]), since)))
        v = u
    path.reverse()
    weights.reverse()
    return path, np.asarray(weights, dtype=np.int64)


def _remove_syncs(frame: Any, remove: Sequence[str | int], keep: np.ndarray, dst_key: np.ndarray, kind: np.ndarray) -> None:
    """Take the named syncs out of the graph: their sync edges go, and a named collective (its call or the c10d:: op
    that issued it) no longer joins the ranks: each member's arrival leads straight to its end (weight 0)."""
    import polars as pl

    names = [r for r in remove if isinstance(r, str)]
    ids = [r for r in remove if isinstance(r, int)]
    named = (pl.col("name").is_in(names) | pl.col("event_id").is_in(ids)).fill_null(False)
    indexed = frame.with_row_index("_row")
    syncs = indexed.filter(named & (pl.col("edge_kind") == "sync_dependency"))["_row"].to_numpy()
    keep[syncs] = False
    # Calls named, or issued by a named op (collective_issue edges leave the issuer's start node, 2 x its id).
    issuers = indexed.filter(named).select("profile_id", "step_index", "event_id").unique()
    issued = (indexed.filter(pl.col("edge_kind") == "collective_issue")
              .with_columns((pl.col("src_node") // 2).alias("_issuer"))
              .join(issuers, left_on=["profile_id", "step_index", "_issuer"], right_on=["profile_id", "step_index", "event_id"])
              .select("profile_id", "step_index", "event_id"))
    calls = pl.concat([indexed.filter(named).select("profile_id", "step_index", "event_id"), issued]).unique()
    joined = indexed.filter(pl.col("edge_kind").is_in(["collective_arrival", "collective_transfer"])).join(
        calls, on=["profile_id", "step_index", "event_id"])
    arrivals = joined.filter(pl.col("edge_kind") == "collective_arrival")
    transfers = joined.filter(pl.col("edge_kind") == "collective_transfer")
    pairs = arrivals.join(transfers.select("profile_id", "step_index", "event_id", pl.col("dst_key").alias("_end")),
                          on=["profile_id", "step_index", "event_id"])
    rows = pairs["_row"].to_numpy()
    dst_key[rows] = pairs["_end"].to_numpy()
    kind[rows] = _OWN
    keep[transfers["_row"].to_numpy()] = False


def _like_median(part: Any, rows: np.ndarray, w: np.ndarray, src_key: np.ndarray, dst_key: np.ndarray, src_ts: np.ndarray,
                 dst_ts: np.ndarray, order: np.ndarray, kind: np.ndarray, is_compute: np.ndarray, like: LikeMedian,
                 job_id: str, *, compiled: bool) -> list[str]:
    """Scale the compute of the chosen members' windows by median / own, step by step (module docstring), in ``w``."""
    import polars as pl

    k = kind[rows]
    events = part["event_id"].to_numpy()
    inside = k == _OWN
    windows = (part.with_row_index("_i").group_by(["step", "member_index", "step_index"], maintain_order=True)
               .agg(pl.col("_i"), pl.col("rank").first()))
    own: dict[Any, list[tuple[int, int, np.ndarray]]] = {}  # step -> (length, rank, local rows)
    for step, _, _, local, rank in windows.iter_rows():
        local = np.asarray(local, dtype=np.int64)
        mine = local[inside[local]]
        # Its collectives take no time and wait for no one: each arrival leads straight to its end.
        transfers, arrivals = local[k[local] == _TRANSFER], local[k[local] == _ARRIVAL]
        ends = dict(zip(events[transfers].tolist(), dst_key[rows[transfers]].tolist(), strict=True))
        extra = [(src, ends[event]) for src, event in zip(src_key[rows[arrivals]].tolist(), events[arrivals].tolist(),
                                                          strict=True) if event in ends]
        n = len(extra)
        g = rows[mine]
        # Its longest path's length (the path itself is not wanted): the greatest distance.
        _, dist, *_ = replay(
            np.concatenate([src_key[g], np.asarray([x[0] for x in extra], dtype=np.int64)]),
            np.concatenate([dst_key[g], np.asarray([x[1] for x in extra], dtype=np.int64)]),
            np.concatenate([w[mine], np.zeros(n, dtype=np.int64)]),
            np.concatenate([src_ts[g], np.zeros(n, dtype=np.int64)]),
            np.concatenate([dst_ts[g], np.zeros(n, dtype=np.int64)]),
            np.concatenate([order[g], np.full(n, 3)]), compiled=compiled)
        length = int(dist.max()) if len(dist) else 0
        own.setdefault(step, []).append((length, int(rank), local))
    notes = []
    for step, found in own.items():
        median = statistics.median(x[0] for x in found)
        if like == "slowest":
            chosen = [max(found, key=lambda x: (x[0], -x[1]))]
        elif isinstance(like, Mapping):
            wanted = like.get((job_id, step))
            chosen = [x for x in found if x[1] == wanted]
        else:
            ranks = {like} if isinstance(like, int) else set(like)
            chosen = [x for x in found if x[1] in ranks]
        for length, rank, local in chosen:
            f = median / length if length > 0 else 1.0
            scaled = local[is_compute[rows[local]]]
            w[scaled] = np.rint(w[scaled] * f).astype(np.int64)
            notes.append(f"step {step}: rank {rank} like the median: its compute x{f:.3f} "
                         f"({length / 1e9:.3f} ms -> {median / 1e9:.3f} ms)")
    return notes


def _step_row(head: dict[str, Any], step: int | None, on: Any, pw: np.ndarray, notes: list[str], *, measured: int,
              baseline: int, length: int, ranks: int, wall: int, missing: list[dict[str, Any]],
              graph_edges: int) -> dict[str, Any]:
    import polars as pl

    path = on.select("member", "rank", "name", "edge_kind", "bound_by").with_columns(pl.Series("_w", pw, dtype=pl.Int64))
    row: dict[str, Any] = {"job_id": head["job_id"], "job": head["job"], "job_tag": head["job_tag"], "step": step,
                           "ranks": ranks, "measured_ps": measured, "longest_wall_ps": wall, "baseline_ps": baseline,
                           "length_ps": length}
    row["saving_ps"] = max(baseline - length, 0)
    row["saving_share"] = row["saving_ps"] / baseline if baseline > 0 else None
    timed = path.filter(pl.col("bound_by").is_not_null() & (pl.col("_w") > 0))
    by = dict(timed.group_by("bound_by").agg(pl.col("_w").sum()).iter_rows())
    total = sum(by.values())
    for b in JOB_BOUND_BY:
        row[f"{b}_ps"] = int(by.get(b, 0))
        row[f"{b}_share"] = by.get(b, 0) / total if total > 0 else None
    # Who held the job: the members and ops with most time on the path (job edges and collectives aside).
    own = path.filter(~pl.col("edge_kind").is_in(_JOB_EDGES))
    ranks_in_order = own["rank"]
    changes = ranks_in_order.ne_missing(ranks_in_order.shift(1)).fill_null(True)
    path_ranks = ranks_in_order.filter(changes).to_list()
    members = own.group_by("member", "rank").agg(pl.col("_w").sum()).sort(["_w", "rank"], descending=[True, False])
    ops = (own.filter(pl.col("name").is_not_null()).group_by("name", "rank").agg(pl.col("_w").sum())
           .sort(["_w", "rank", "name"], descending=[True, False, False]))
    top_member = members.row(0, named=True) if members.height else None
    top_op = ops.row(0, named=True) if ops.height else None
    row.update(path_ranks=path_ranks, rank_switches=max(len(path_ranks) - 1, 0),
               held_by_member=top_member["member"] if top_member else None,
               held_by_rank=top_member["rank"] if top_member else None,
               held_by_share=top_member["_w"] / total if top_member and total > 0 else None,
               held_by_op=top_op["name"] if top_op else None, held_by_op_rank=top_op["rank"] if top_op else None,
               held_by_op_ps=top_op["_w"] if top_op else None,
               collectives_on_path=int((path["edge_kind"] == "collective_transfer").sum()), changed=notes,
               path_edges=path.height, graph_edges=graph_edges)
    row["missing_edges"] = sorted({f"rank {m['rank']}: {x}" for m in missing for x in (m["missing_edges"] or [])})
    return row


def _segments(on: Any, pw: np.ndarray, job_id: str, step: int | None) -> list[dict[str, Any]]:
    """The path of one job step as segments of one member, one collective, or a late start."""
    out: list[dict[str, Any]] = []
    clock = 0
    current: dict[str, Any] | None = None
    for edge, x in zip(on.iter_rows(named=True), pw.tolist(), strict=True):
        k = edge["edge_kind"]
        if k == "job_end":
            clock += x
            continue
        if k == "start_skew":
            segment_kind = "start_skew"
        elif k in ("collective_arrival", "collective_transfer"):
            segment_kind = "collective"
        else:
            segment_kind = "rank"
        same = current is not None and current["kind"] == segment_kind and (
            (segment_kind == "rank" and current["profile_id"] == edge["profile_id"])
            or (segment_kind == "collective" and k == "collective_transfer" and current["next_member"] is None))
        if not same:
            current = {"job_id": job_id, "step": step, "position": len(out), "kind": segment_kind,
                       "profile_id": edge["profile_id"], "member": edge["member"], "rank": edge["rank"],
                       "instance": edge["instance"], "next_member": None, "start_ps": clock, "end_ps": clock,
                       "length_ps": 0, "_by": {}, "_ops": {}, "edges": 0}
            out.append(current)
        assert current is not None
        if segment_kind == "collective" and k == "collective_transfer":
            current["next_member"] = edge["member"]
        clock += x
        current["end_ps"] = clock
        current["length_ps"] += x
        current["edges"] += 1
        if edge["bound_by"] is not None and x > 0:
            current["_by"][edge["bound_by"]] = current["_by"].get(edge["bound_by"], 0) + x
        if edge["name"] is not None and x > 0:
            current["_ops"][edge["name"]] = current["_ops"].get(edge["name"], 0) + x
    for segment in out:
        by, ops = segment.pop("_by"), segment.pop("_ops")
        segment["bound_by"] = max(by, key=by.__getitem__) if by else None
        top = max(ops.items(), key=lambda kv: kv[1], default=None)
        segment["top_op"], segment["top_op_ps"] = (top[0], top[1]) if top else (None, None)
    return out
