"""The critical path of each step (sql/critical_path, xprosql.queries.critical_path) against Holistic Trace
Analysis's own critical path (HTA 0.5, run under pandas 3 with the fixes tests/critical_path_profiles.py lists), and
on a generated CPU PyTorch job with a known sleep in a known op.

Parity runs like for like: HTA's microsecond rounding (us_rounding), its loader's dropped last step
(include_last_step=False) and its launch names in the stream queue (launch_calls='hta'). HTA's step instances are
its ProfilerStep annotations on the CPU; a trace without steps is one whole-trace window on both sides.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest
from conftest import TEST_DATA
from critical_path_profiles import (
    SLEEP_OP,
    SLEEP_S,
    hta_critical_path,
    hta_step_instances,
    hta_trace,
    make_sleep_job_profile,
)
from hypothesis import given, settings
from hypothesis import strategies as st

import xprosql
from xprosql.errors import AnalysisError
from xprosql.queries.critical_path import (
    BOUND_BY,
    Walk,
    _topological,
    _topological_compiled,
    critical_path,
    critical_path_edges,
    critical_path_graph,
    replay,
)

# Slow (tests/conftest.py): every rule or analysis over every real sample; `--runslow` runs them (CI does).
pytestmark = pytest.mark.slow

# Real NVIDIA traces where HTA's critical path runs (tests/data/README.md).
TRACES = ["a100_nccl_rank0", "sampled_rank0", "h100_qwen1.5_0.5b", "b200_eager_nccl_rank0", "alexnet",
          "event_sync_multi_stream", "triton_example"]
LENGTH_REL = 0.01
SHARE_PP = 1.0


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("critical_path")
    files = [TEST_DATA / "kineto" / f"{name}.json.gz" for name in TRACES]
    assert xprosql.ingest(files, into=root / "run").ok
    run = xprosql.load(root / "run")
    names = dict(run.engine.sql("SELECT regexp_extract(source_path, '([^/]*)[.]json[.]gz$', 1), profile_id "
                                "FROM profiles").rows())
    ours = critical_path(run.engine, include_last_step=False, us_rounding=True, launch_calls="hta").pl()
    return {"root": root, "run": run, "ids": names, "ours": ours}


@pytest.mark.parametrize("name", TRACES)
def test_length_and_breakdown_match_hta(warehouse: dict[str, Any], name: str, tmp_path: Path) -> None:
    pytest.importorskip("hta", reason="holistictraceanalysis (test extra) is not installed")
    trace = hta_trace(TEST_DATA / "kineto" / f"{name}.json.gz", tmp_path)
    ours = warehouse["ours"].filter(pl.col("profile_id") == warehouse["ids"][name])
    compared = 0
    for step, instance in hta_step_instances(trace).items():
        theirs = hta_critical_path(trace, instance)
        if not theirs["ok"]:  # HTA's loader dropped this step (its last one)
            continue
        row = ours.filter(pl.col("step").is_null() if step is None else pl.col("step") == step)
        assert row.height == 1, (name, step)
        mine = row.row(0, named=True)
        length_ps = theirs["length_us"] * 1e6
        assert abs(mine["length_ps"] - length_ps) <= LENGTH_REL * length_ps, (name, step, mine["length_ps"], length_ps)
        for category in BOUND_BY:
            share = theirs["bound_by"].get(category, 0.0) / theirs["length_us"]
            assert abs((mine[f"{category}_share"] or 0.0) - share) * 100 <= SHARE_PP, (name, step, category)
        assert abs(sum(mine[f"{b}_share"] for b in BOUND_BY) - 1) < 1e-9
        compared += 1
    assert compared >= 1, f"HTA gave no critical path for {name}"


def test_the_path_is_a_chain_and_its_weights_sum_to_the_length(warehouse: dict[str, Any]) -> None:
    run, ours = warehouse["run"], warehouse["ours"]
    path = critical_path_edges(run.engine, include_last_step=False, us_rounding=True, launch_calls="hta").pl()
    for (profile, step_index), edges in path.group_by(["profile_id", "step_index"]):
        edges = edges.sort("position")
        assert edges["src_node"][1:].to_list() == edges["dst_node"][:-1].to_list()
        length = ours.filter((pl.col("profile_id") == profile) & (pl.col("step_index") == step_index))["length_ps"][0]
        assert edges["weight_ps"].sum() == length
        assert edges.filter(pl.col("weight_ps") > 0)["bound_by"].null_count() == 0


def test_edges_say_what_the_trace_lacks(warehouse: dict[str, Any]) -> None:
    graph = critical_path_graph(warehouse["run"].engine, us_rounding=True).pl()
    lacks = dict(graph.group_by("profile_id").agg(pl.col("missing_edges").first()).iter_rows())
    ids = warehouse["ids"]
    assert any("no cuda_sync events" in m for m in lacks[ids["a100_nccl_rank0"]])
    assert not any("no cuda_sync events" in m for m in lacks[ids["alexnet"]])
    assert any("without their cudaEventRecord" in m for m in lacks[ids["alexnet"]])  # its Event Syncs name none
    kinds = set(graph.filter(pl.col("profile_id") == ids["event_sync_multi_stream"])["edge_kind"])
    assert kinds == {"operator", "dependency", "kernel_launch_delay", "kernel_kernel_delay", "sync_dependency"}


def test_cu_launch_kernel_ex_is_a_launch_by_default(warehouse: dict[str, Any]) -> None:
    # The B200 trace's cuBLAS kernels are launched with cuLaunchKernelEx, which HTA's queue does not count: it
    # reads the GPU waiting for the CPU as a 1.7 ms kernel-kernel gap. Counted as a launch, the path stays on the CPU.
    run, profile = warehouse["run"], warehouse["ids"]["b200_eager_nccl_rank0"]
    default = critical_path(run.engine, profiles=[profile], include_last_step=False, us_rounding=True).pl().row(0, named=True)
    hta_like = warehouse["ours"].filter(pl.col("profile_id") == profile).row(0, named=True)
    assert hta_like["gpu_kernel_kernel_overhead_ps"] > 1_000_000_000
    assert default["gpu_kernel_kernel_overhead_ps"] < hta_like["gpu_kernel_kernel_overhead_ps"]


# --- a generated CPU PyTorch job with a known sleep in a known op ---------------------------------------------


@pytest.fixture(scope="session")
def sleep_job(tmp_path_factory: pytest.TempPathFactory) -> xprosql.Run:
    root = tmp_path_factory.mktemp("sleep_job")
    trace = make_sleep_job_profile(root / "trace")
    assert xprosql.ingest(trace, into=root / "run").ok
    return xprosql.load(root / "run")


@pytest.mark.slow
def test_the_critical_path_holds_the_sleeping_op(sleep_job: xprosql.Run) -> None:
    steps = critical_path(sleep_job.engine).pl()
    assert steps.height == 12 and (steps["cpu_bound_share"] == 1.0).all()
    assert steps["missing_edges"].to_list()[0] == ["no GPU ops: CPU edges only"]
    path = critical_path_edges(sleep_job.engine).pl()
    sleepy = [s for s in steps["step"].to_list() if s % 2 == 0]
    for step in sleepy:
        on_path = path.filter(pl.col("step") == step)
        assert SLEEP_OP in set(on_path["name"]), step
        # The op's span on the path holds the sleep.
        span = on_path.filter(pl.col("name").str.contains("sleepy"))["weight_ps"].sum()
        assert span >= SLEEP_S * 1e12, step


@pytest.mark.slow
def test_removing_the_sleep_predicts_the_steps_without_it(sleep_job: xprosql.Run) -> None:
    steps = critical_path(sleep_job.engine).pl()
    replayed = critical_path(sleep_job.engine, changes={SLEEP_OP: 0.0}).pl()
    sleepy = steps["step"] % 2 == 0
    predicted = statistics.median(replayed.filter(sleepy)["length_ps"].to_list())
    measured = (steps["window_end_ps"] - steps["window_start_ps"]).filter(~sleepy)
    print(f"what-if {predicted / 1e9:.2f} ms, measured {measured.median() / 1e9:.2f} ms")
    # Within the steps without the sleep, give or take a tenth: on a loaded machine they vary by more than the
    # prediction's error (one run's median 35 ms, another's 41 ms). A sleep left in (+40 ms) or more taken out
    # than it lasted falls outside.
    assert 0.9 * measured.min() <= predicted <= 1.1 * measured.max(), (predicted, measured.to_list())
    # Each step saves exactly the op's inclusive time on its path (its callees' edges with its own: 0.7 ms a step
    # without the sleep, where the edges named for the op weigh 0.06-0.11 ms), neither more nor less.
    path = critical_path_edges(sleep_job.engine).pl()
    spans = sleep_job.sql(f"SELECT start_ps, start_ps + dur_ps AS end_ps FROM events WHERE name = '{SLEEP_OP}'").rows()
    for step, length in zip(steps["step"], steps["length_ps"], strict=True):
        saving = length - replayed.filter(pl.col("step") == step)["length_ps"].item()
        on = path.filter(pl.col("step") == step)
        inclusive = sum(on.filter((pl.col("src_ts_ps") >= start) & (pl.col("dst_ts_ps") <= end))["weight_ps"].sum()
                        for start, end in spans)
        assert saving == inclusive > 0, (step, saving, inclusive)


# --- XSpace: a GPU profile (CUPTI launches) and a TPU profile (XLA ops, enqueues), against the raw protobuf ----


def _xspace(path: Any) -> Any:
    from xprosql.protos import xplane_pb2

    space = xplane_pb2.XSpace()
    space.ParseFromString(path.read_bytes())
    return space


@pytest.fixture(scope="module")
def xspace_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    from conftest import GPU_SAMPLE, TPU_SAMPLE

    root = tmp_path_factory.mktemp("critical_path_xspace")
    assert xprosql.ingest([GPU_SAMPLE, TPU_SAMPLE], into=root / "run").ok
    run = xprosql.load(root / "run")
    ids = dict(run.engine.sql("SELECT CASE WHEN source_path LIKE '%tpu%' THEN 'tpu' ELSE 'gpu' END, profile_id "
                              "FROM profiles").rows())
    return {"run": run, "ids": ids, "steps": critical_path(run.engine).pl(),
            "graph": critical_path_graph(run.engine).pl(), "gpu": GPU_SAMPLE, "tpu": TPU_SAMPLE}


def test_tpu_path_is_the_longest_core_timeline(xspace_run: dict[str, Any]) -> None:
    # The TPU graph orders each core's XLA ops: its longest path is the longest core timeline, from its first op (or
    # the enqueue that launched it) to its last op. The cores' spans, from the XLA Ops lines of the protobuf itself.
    spans, busy = {}, {}
    for plane in _xspace(xspace_run["tpu"]).planes:
        if not plane.name.startswith("/device:TPU:"):
            continue
        for line in plane.lines:
            if line.name == "XLA Ops" and line.events:
                starts = [line.timestamp_ns * 1000 + e.offset_ps for e in line.events]
                ends = [s + e.duration_ps for s, e in zip(starts, line.events, strict=True)]
                spans[plane.name] = max(ends) - min(starts)
                busy[plane.name] = sum(e.duration_ps for e in line.events)
    row = xspace_run["steps"].filter(pl.col("profile_id") == xspace_run["ids"]["tpu"]).row(0, named=True)
    critical = max(spans, key=spans.__getitem__)
    assert spans[critical] <= row["length_ps"] <= spans[critical] * 1.001, (row["length_ps"], spans)
    # Where the core waited for the host to enqueue a program, the gap is launch overhead, else a kernel-kernel gap.
    gaps = row["gpu_kernel_kernel_overhead_ps"] + row["gpu_kernel_launch_overhead_ps"]
    assert gaps == pytest.approx(spans[critical] - busy[critical], abs=row["length_ps"] - spans[critical] + 1)
    assert row["gpu_kernel_launch_overhead_ps"] > 0
    op_ps = row["gpu_compute_bound_ps"] + row["gpu_communication_bound_ps"]
    assert op_ps == pytest.approx(busy[critical], rel=0.001)
    assert any("transfer time is not recorded" in m for m in row["missing_edges"])
    assert any("call stacks are not in the graph" in m for m in row["missing_edges"])
    kinds = set(xspace_run["graph"].filter(pl.col("profile_id") == xspace_run["ids"]["tpu"])["edge_kind"])
    assert kinds == {"operator", "kernel_kernel_delay", "kernel_launch_delay", "sync_dependency"}


def test_xspace_gpu_graph_holds_the_kernels_cupti_launched_in_the_step(xspace_run: dict[str, Any]) -> None:
    # Independent walk: host events with a correlation_id stat in the step window, and the stream events of the GPU
    # planes that share their correlation id.
    space = _xspace(xspace_run["gpu"])
    steps = xspace_run["steps"].filter(pl.col("profile_id") == xspace_run["ids"]["gpu"])
    assert steps.height == 1
    row = steps.row(0, named=True)
    origin = min(line.timestamp_ns * 1000 + e.offset_ps for p in space.planes for line in p.lines for e in line.events)

    def correlations(plane: Any, line: Any, inside: bool) -> set[int]:
        stat_id = next((k for k, m in plane.stat_metadata.items() if m.name == "correlation_id"), None)
        found = set()
        for e in line.events:
            start = line.timestamp_ns * 1000 + e.offset_ps - origin
            if inside and not (row["window_start_ps"] <= start <= row["window_end_ps"] and e.duration_ps > 0):
                continue
            for s in e.stats:
                if s.metadata_id == stat_id:
                    found.add(s.uint64_value or s.int64_value)
        return found

    launched = set().union(*[correlations(p, line, True) for p in space.planes if p.name == "/host:CPU" for line in p.lines])
    gpu_ops = set().union(*[correlations(p, line, False) for p in space.planes if p.name.startswith("/device:GPU")
                            for line in p.lines if line.name.startswith("Stream #")])
    graph = xspace_run["graph"].filter((pl.col("profile_id") == xspace_run["ids"]["gpu"])
                                       & pl.col("bound_by").is_in(["gpu_compute_bound", "gpu_communication_bound"]))
    assert graph.height == len(launched & gpu_ops) > 0
    assert row["gpu_compute_bound_ps"] > 0 and row["cpu_bound_ps"] > 0
    assert any(m.startswith("XSpace: launches are the host events CUPTI correlates") for m in row["missing_edges"])


def _kahn_by_position(n: int, s: list[int], d: list[int], position: list[int]) -> list[int]:
    """Kahn's algorithm as its definition reads: each time, of every ready node, the one of the lowest position."""
    indegree = [d.count(v) for v in range(n)]
    done: list[int] = []
    while ready := [v for v in range(n) if indegree[v] == 0 and v not in done]:
        v = min(ready, key=position.__getitem__)
        done.append(v)
        for src, dst in zip(s, d, strict=True):
            if src == v:
                indegree[dst] -= 1
    return done


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_both_topological_walks_take_the_ready_node_of_the_lowest_position(data: st.DataObject) -> None:
    # Graphs mostly forward in position (as a time-ordered trace's), with edges against it and cycles.
    n = data.draw(st.integers(1, 25))
    position = data.draw(st.permutations(range(n)))
    edges = data.draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=60))
    forward = data.draw(st.booleans())
    if forward:
        edges = [(a, b) if position[a] < position[b] else (b, a) for a, b in edges if a != b]
        edges += data.draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=3))
    s, d = [a for a, _ in edges], [b for _, b in edges]
    expected = _kahn_by_position(n, s, d, position)
    arrays = (n, np.array(s, dtype=np.int64), np.array(d, dtype=np.int64), np.array(position, dtype=np.int64))
    for walk in (_topological, _topological_compiled):
        if len(expected) < n:
            with pytest.raises(AnalysisError, match="cycle"):
                walk(*arrays)
        else:
            assert walk(*arrays).tolist() == expected


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_one_walk_replays_its_graph_with_any_weights_as_a_fresh_replay_and_the_longest_paths_do(data: st.DataObject) -> None:
    # A DAG whose edges run from lower to higher node index, in time order with ties (so some edges run against the
    # (time, id) order and the topological walk decides), with arbitrary node ids.
    n = data.draw(st.integers(2, 16))
    times = sorted(data.draw(st.lists(st.integers(0, 4), min_size=n, max_size=n)))
    ids = data.draw(st.lists(st.integers(0, 2**40), min_size=n, max_size=n, unique=True))
    pairs = data.draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)).filter(lambda p: p[0] < p[1]),
                               min_size=1, max_size=30))
    src, dst = np.array([ids[a] for a, _ in pairs]), np.array([ids[b] for _, b in pairs])
    src_ts, dst_ts = np.array([times[a] for a, _ in pairs]), np.array([times[b] for _, b in pairs])
    order = np.arange(len(pairs)) % 3
    for compiled in (False, True):
        walk = Walk.of(src, dst, src_ts, dst_ts, order, compiled=compiled)
        for _ in range(2):
            weight = np.array(data.draw(st.lists(st.integers(0, 100), min_size=len(pairs), max_size=len(pairs))))
            node_ids, dist, best, _, _ = replay(src, dst, weight, src_ts, dst_ts, order, compiled=compiled)
            assert all(np.array_equal(a, b) for a, b in zip(walk.relax(weight), (dist, best), strict=True))
            longest = [0] * n  # node index order is a topological order here
            for v in range(n):
                longest[v] = max((longest[a] + int(w) for (a, b), w in zip(pairs, weight, strict=True) if b == v), default=0)
            assert dict(zip(node_ids.tolist(), dist.tolist(), strict=True)) == {
                ids[v]: longest[v] for v in {x for pair in pairs for x in pair}}
