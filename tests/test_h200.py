"""Real captures of one workload on an NVIDIA H200 (tests/data/h200, made by its capture.sh): two transformer
blocks' bf16 training steps, by JAX (XSpace, with and without XLA's command buffers), by torch.profiler (Kineto,
eager and CUDA graph) and by xprosql's own CUPTI recorder (eager, CUDA graph, PM sampling).

Differential checks against XProf's own tools run on the XSpace files; the rest compares the captures of the
same workload with each other and with what the trace's own JSON says.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import math
import re
from collections import Counter
from pathlib import Path

import polars as pl
import pytest
from conftest import TEST_DATA
from test_xprof_differential import xprof_tool

import xprosql
from xprosql.models import hardware

H200 = TEST_DATA / "h200"
JAX = H200 / "h200_jax_train.xplane.pb"
JAX_NO_COMMAND_BUFFERS = H200 / "h200_jax_train_no_command_buffers.xplane.pb"
KINETO_EAGER = H200 / "h200_eager_train.json.gz"
KINETO_GRAPH = H200 / "h200_graph_train.json.gz"
CUPTI_EAGER = H200 / "h200_eager_train.cupti.json.gz"
CUPTI_GRAPH = H200 / "h200_graph_train.cupti.json.gz"
CUPTI_PM = H200 / "h200_eager_train_pm.cupti.json.gz"
CAPTURES = [JAX, JAX_NO_COMMAND_BUFFERS, KINETO_EAGER, KINETO_GRAPH, CUPTI_EAGER, CUPTI_GRAPH, CUPTI_PM]
STEPS = 3  # measured steps in every capture (workload_*.py: MEASURED)

needs_xprof = pytest.mark.skipif(importlib.util.find_spec("xprof") is None,
                                 reason="the xprof wheel (test extra) is not installed")


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> xprosql.Run:
    root = tmp_path_factory.mktemp("h200") / "run"
    report = xprosql.ingest(CAPTURES, into=root)
    assert report.ok and len(report.ingested) == len(CAPTURES), str(report)
    return xprosql.load(root)


def _profile(run: xprosql.Run, path: Path) -> str:
    (row,) = run.sql("SELECT profile_id FROM profiles WHERE source_path LIKE '%/' || $name", {"name": path.name}).rows()
    return row[0]


def test_every_capture_is_small_and_ingests_whole(run: xprosql.Run) -> None:
    assert all(path.stat().st_size <= 5 << 20 for path in CAPTURES)
    formats = dict(run.sql("SELECT regexp_extract(source_path, '[^/]+$'), format FROM profiles").rows())
    assert formats == {JAX.name: "xspace", JAX_NO_COMMAND_BUFFERS.name: "xspace", KINETO_EAGER.name: "kineto",
                       KINETO_GRAPH.name: "kineto", CUPTI_EAGER.name: "cupti", CUPTI_GRAPH.name: "cupti",
                       CUPTI_PM.name: "cupti"}
    models = {row[0] for row in run.sql("SELECT model FROM devices WHERE kind = 'gpu'").rows()}
    assert models == {"NVIDIA H200"}


@needs_xprof
@pytest.mark.parametrize("sample", [JAX, JAX_NO_COMMAND_BUFFERS], ids=["command_buffers", "no_command_buffers"])
def test_xspace_kernels_match_xprof_kernel_stats(run: xprosql.Run, sample: Path, tmp_path: Path) -> None:
    theirs: dict[str, list[float]] = {}
    for row in xprof_tool(sample, "kernel_stats", tmp_path):  # XProf groups by (name, launch configuration)
        count, total = theirs.setdefault(row["kernel_name"], [0, 0.0])
        theirs[row["kernel_name"]] = [count + row["occurrences"], total + row["total_duration_us"]]
    ours = run.sql("SELECT name, count(*), sum(dur_ps) / 1e6 FROM kernels WHERE profile_id = $p GROUP BY 1",
                   {"p": _profile(run, sample)}).rows()
    assert {name for name, _, _ in ours} == set(theirs)
    for name, count, total_us in ours:
        assert count == theirs[name][0] and total_us == pytest.approx(theirs[name][1], rel=1e-6), name
    # 71 kernels a step; the step's 25 memsets (XLA's "Memset 0" on the same stream) are copies, not kernels.
    assert sum(count for _, count, _ in ours) == 71 * STEPS
    assert run.sql("SELECT count(*) FROM memcpys WHERE profile_id = $p AND kind = 'memset'",
                   {"p": _profile(run, sample)}).rows() == [(25 * STEPS,)]


@needs_xprof
def test_roofline_matches_xprof_and_the_matmuls_sit_near_the_bf16_roof(run: xprosql.Run, tmp_path: Path) -> None:
    rows = xprof_tool(JAX_NO_COMMAND_BUFFERS, "roofline_model", tmp_path)
    properties = rows[0]["_properties"]
    theirs = {r["operation"]: r for r in rows if r["step"] == "Total" and r["category"] != "Program"}
    roofline = run.roofline(profiles=[_profile(run, JAX_NO_COMMAND_BUFFERS)]).pl()
    ours = roofline.filter(pl.col("row_kind") == "op")
    # XProf's H200 roof: 132 SMs x 1.98 GHz x 4,096 dense bf16 FLOP per SM per clock.
    assert roofline["peak_flops_per_s"].unique().to_list() == [pytest.approx(float(properties["peak_flop_rate"]) * 1e9)]
    assert float(properties["peak_flop_rate"]) * 1e9 == pytest.approx(
        hardware.gpu_peak_flops_per_s(compute_capability=(9, 0), sm_count=132, clock_khz=1_980_000), rel=1e-6)
    assert set(ours["op"]) == set(theirs)
    for r in ours.iter_rows(named=True):
        t = theirs[r["op"]]
        assert r["total_time_ps"] / 1e6 == pytest.approx(t["total_time"], rel=1e-6), r["op"]
        ratio = 0.5 if r["cost_source"] == "library" else 1.0  # XProf counts a cuBLAS GEMM's FLOPs and bytes twice
        assert r["memory_bandwidth"] / 2**30 == pytest.approx(t["measured_memory_bw"] * ratio, rel=1e-3), r["op"]
        if r["cost_source"] in ("library", "triton_gemm"):
            assert r["flop_rate"] / 1e9 == pytest.approx(t["measured_flop_rate"] * ratio, rel=2e-2), r["op"]
        if r["cost_source"] != "library":
            assert r["roofline_efficiency"] == pytest.approx(t["roofline_efficiency"], abs=1e-3), r["op"]
            assert r["bound_by"].lower() == t["bound_by"].lower(), r["op"]
    assert ours["roofline_efficiency"].max() <= 1.0 and not ours["above_roof"].any()
    # The matmuls: cuBLAS custom calls and Triton GEMM fusions, against the H200's dense bf16 roof.
    matmuls = ours.filter(pl.col("cost_source").is_in(["library", "triton_gemm"]))
    share = matmuls["flops"].sum() / (matmuls["total_time_ps"].sum() * 1e-12) / roofline["peak_flops_per_s"][0]
    assert matmuls.height >= 20 and 0.6 < share < 1.0


def _kernels_per_step(run: xprosql.Run, path: Path) -> list[int]:
    """Kernels whose launch falls in each step: ProfilerStep#N (Kineto) or the NVTX range 'step N' (CUPTI)."""
    rows = run.sql("""
        SELECT s.name, count(k.event_id)
        FROM events AS s
        JOIN api_calls AS a ON a.profile_id = s.profile_id AND a.start_ps >= s.start_ps AND a.start_ps < s.start_ps + s.dur_ps
        JOIN kernels AS k ON k.profile_id = a.profile_id AND k.correlation_id = a.correlation_id
        WHERE s.profile_id = $p AND ((s.category = 'nvtx' AND s.name LIKE 'step %')
                                     OR (s.category = 'user_annotation' AND s.name LIKE 'ProfilerStep#%'))
        GROUP BY 1 ORDER BY 1""", {"p": _profile(run, path)}).rows()
    return [count for _, count in rows]


@pytest.mark.parametrize(("cupti", "kineto"), [(CUPTI_EAGER, KINETO_EAGER), (CUPTI_GRAPH, KINETO_GRAPH)],
                         ids=["eager", "graph"])
def test_live_cupti_and_kineto_agree_on_kernels_per_step(run: xprosql.Run, cupti: Path, kineto: Path) -> None:
    ours = _kernels_per_step(run, cupti)
    profiler = _kernels_per_step(run, kineto)
    if kineto == KINETO_GRAPH:
        profiler = profiler[1:]  # ProfilerStep#0 holds the capture, whose launches run no kernel
    assert len(ours) == len(profiler) == STEPS and min(ours) > 100
    for a, b in zip(ours, profiler):
        assert abs(a - b) <= 0.05 * b


def test_pm_samples_share_the_activity_clock(run: xprosql.Run) -> None:
    pid = _profile(run, CUPTI_PM)
    metrics = run.sql("SELECT counter, count(*), min(value_double), max(value_double) FROM counters "
                      "WHERE profile_id = $p AND counter_set = 'pm_sampling' GROUP BY 1 ORDER BY 1", {"p": pid}).rows()
    assert [m[0] for m in metrics] == ["dram__throughput.avg.pct_of_peak_sustained_elapsed", "sm__cycles_active.avg"]
    assert metrics[0][1] == metrics[1][1] > 1000 and metrics[0][2] >= 0 and metrics[0][3] <= 100
    (first, last), = run.sql("SELECT min(start_ps), max(start_ps + dur_ps) FROM kernels WHERE profile_id = $p",
                             {"p": pid}).rows()
    busy = run.sql("SELECT start_ps, end_ps FROM counters WHERE profile_id = $p AND counter = 'sm__cycles_active.avg' "
                   "AND value_double > 0", {"p": pid}).rows()
    # On one clock every sample in which the SMs worked overlaps the kernels' span (1 ms samples, 0.65 s of kernels).
    assert len(busy) > 50 and all(start < last and end > first for start, end in busy)
    # ... and the steps' kernels run inside busy samples: the sampled SM activity follows the recorded kernels.
    steps = run.sql("SELECT start_ps, start_ps + dur_ps FROM events WHERE profile_id = $p AND category = 'nvtx'",
                    {"p": pid}).rows()
    in_steps = [(s, e) for s, e in busy if any(s < step_end and e > step_start for step_start, step_end in steps)]
    assert len(in_steps) >= 0.9 * sum((e - s) // 10**9 for s, e in steps)


def _gemm_shapes(path: Path) -> Counter:
    """2 x M x N x K of every aten::mm / aten::addmm in the trace's measured steps, from its Input Dims, and M x N
    more for addmm's bias (TraceLens's GEMM formula)."""
    flops: Counter = Counter()
    for event in json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]:
        dims = event.get("args", {}).get("Input Dims")
        if event.get("cat") == "cpu_op" and event["name"] in ("aten::mm", "aten::addmm") and dims:
            a, b = (dims[1], dims[2]) if event["name"] == "aten::addmm" else (dims[0], dims[1])
            flops[event["name"]] += 2 * a[0] * a[1] * b[1] + (a[0] * b[1] if event["name"] == "aten::addmm" else 0)
    return flops


def test_pytorch_capture_gets_framework_op_flops(run: xprosql.Run) -> None:
    ops = run.framework_ops(profiles=[_profile(run, KINETO_EAGER)], by_shapes=False).pl()
    gemms = ops.filter(pl.col("op").is_in(["aten::mm", "aten::addmm"]))
    assert dict(zip(gemms["op"], gemms["flops"])) == pytest.approx(dict(_gemm_shapes(KINETO_EAGER)))
    assert set(gemms["precision"]) == {"bf16"} and set(gemms["cost_rule"]) == {"gemm"}
    h200 = hardware.chip_for_model("NVIDIA H200", memory_bytes=None)
    assert h200 is not None
    # Large bf16 GEMMs on an H200: most of the data sheet's dense bf16 peak, never above it.
    assert all(0.6 < rate / h200.peak_flops_per_s < 1.0 for rate in gemms["flop_rate"])


def test_cuda_graph_kernels_are_attributed_to_the_ops_that_captured_them(run: xprosql.Run) -> None:
    for capture in (KINETO_GRAPH, CUPTI_GRAPH):
        nodes = run.graph_kernels(profiles=[_profile(run, capture)]).pl()
        # Every node of the three replays matched a captured launch: PyTorch's backward launches from its autograd
        # thread into the captured stream (global capture mode), which the capture region counts.
        assert nodes.height == 3 * 202 and set(nodes["match"]) <= {"order", "position"}, nodes["match"].value_counts()
    graph = run.graph_kernels(profiles=[_profile(run, KINETO_GRAPH)]).pl().filter(
        (pl.col("launch_index") == 0) & (pl.col("kind") == "kernel"))
    attributed = {op: set(names) for op, names in graph.group_by("innermost_op").agg("name").iter_rows()}
    eager = run.sql("""
        SELECT CAST(o.name AS VARCHAR), list_distinct(list(CAST(k.name AS VARCHAR)))
        FROM framework_op_kernels AS f
        JOIN events AS o ON o.profile_id = f.profile_id AND o.event_id = f.innermost_op_id
        JOIN events AS k ON k.profile_id = f.profile_id AND k.event_id = f.event_id
        WHERE f.profile_id = $p AND f.activity = 'kernel' GROUP BY 1""", {"p": _profile(run, KINETO_EAGER)}).rows()
    # Forward and backward ops launch the same kernels eagerly and in the graph (the optimizer differs: the graph's
    # AdamW is capturable); a node matched to the wrong launch would name another op's kernel.
    model_ops = {op: set(names) for op, names in eager if not re.match(r"aten::(_foreach_|div_$|add_$|lerp)", op)}
    assert len(model_ops) >= 15
    assert {op: attributed.get(op) for op in model_ops} == model_ops


def test_diagnose_on_the_pytorch_capture_is_possible(run: xprosql.Run) -> None:
    findings = run.diagnose(profiles=[_profile(run, KINETO_EAGER)]).pl()
    assert findings.height >= 1
    assert findings["expected_saving_share"].is_between(0, 1).all()
    assert all(math.isfinite(v) and v >= 0 for v in findings["expected_saving_ps"].cast(pl.Float64))
