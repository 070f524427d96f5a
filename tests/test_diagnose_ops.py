"""The op and memory rules of sql/diagnose: memory_bound_ops, low_precision, matmul_shapes, memory_headroom,
memory_near_capacity.

Each rule fires where a computation made here from the raw tables (Polars over run.table(...), the chip table of
xprosql.models.hardware, the step annotations of the trace) says it should, with the same numbers, and stays silent
on a control. The real samples of tests/data carry the cases: the H100 Qwen trace's memory-bound elementwise ops and
its 2.5% peak memory at 0.5% FLOP utilization; the MI250 trace's fp32 GEMMs; the MI300 sglang decode's 74% of its
memory. matmul_shapes has no misaligned GEMM in the samples (every NVIDIA bf16 GEMM there is a multiple of 8), so
JAX on this machine's CPU writes the case: 1000 x 1000 f32 matmuls against 1024 x 1024, checked against a 128-wide
tile ($tile: a CPU has no matrix unit). The saving is not measured by running the aligned program: a CPU's BLAS does
not pad to 128, so the 1024 run only does more work; the saving holds for matrix units that compute whole tiles.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import polars as pl
import pytest

import xprosql
from xprosql.models.hardware import chip_for_model

# Slow (tests/conftest.py): every rule or analysis over every real sample; `--runslow` runs them (CI does).
pytestmark = pytest.mark.slow

H100_QWEN = "h100_qwen1.5_0.5b.json.gz"
MI250 = "mi250_rocm.json.gz"
MI300_SGLANG = "mi300_sglang_decode_bs32.json.gz"
B200 = "b200_eager_nccl_rank0.json.gz"
MI300_COMPILE = "mi300_torch_compile_triton.json.gz"
TPU = "tpu_v6e_inference.xplane.pb"


@pytest.fixture(scope="module")
def run(samples_warehouse: Path) -> xprosql.Run:
    return xprosql.load(samples_warehouse)


def table(run: xprosql.Run, name: str) -> pl.LazyFrame:
    """A table with its dictionary columns as plain strings."""
    return run.table(name).with_columns(pl.col(pl.Categorical).cast(pl.String))


def profile_id(run: xprosql.Run, file_name: str) -> str:
    return run.profiles.filter(pl.col("source_path").str.ends_with("/" + file_name))["profile_id"].item()


def findings(run: xprosql.Run, rule: str, **params) -> dict[str, dict]:
    rows = run.analysis(f"diagnose.{rule}", **params).pl().to_dicts()
    assert all(r["rule"] == rule for r in rows)
    assert len({r["profile_id"] for r in rows}) == len(rows), "one finding per profile"
    return {r["profile_id"]: r for r in rows}


def measures(row: dict) -> dict[str, float]:
    return dict(row["measures"]) if not isinstance(row["measures"], dict) else row["measures"]


def kineto_steps(run: xprosql.Run, pid: str) -> list[tuple[int, int]]:
    """The ProfilerStep#N windows of a Kineto trace's host (at most 5 steps: XProf keeps them all)."""
    steps = (table(run, "events").filter((pl.col("profile_id") == pid) & pl.col("name").str.starts_with("ProfilerStep#")
                                        & (pl.col("category") == "user_annotation"))
             .select("start_ps", "dur_ps").sort("start_ps").collect())
    assert 1 <= steps.height <= 5
    return [(s, s + d) for s, d in steps.iter_rows()]


def clipped_ps(frame: pl.DataFrame, windows: list[tuple[int, int]], start: str = "start_ps", dur: str = "dur_ps") -> float:
    """The part of each interval of ``frame`` inside the windows, summed."""
    total = 0
    for s, e in frame.select(start, dur).iter_rows():
        total += sum(max(min(s + e, w_end) - max(s, w_start), 0) for w_start, w_end in windows)
    return float(total)


def chip_of(run: xprosql.Run, pid: str):
    model, memory = (table(run, "devices").filter((pl.col("profile_id") == pid) & (pl.col("kind") == "gpu"))
                     .select("model", "memory_bytes").collect().row(0))
    return chip_for_model(model, memory_bytes=memory)


# --- memory_bound_ops --------------------------------------------------------------------------------------------

def test_memory_bound_ops_on_h100_qwen_saves_the_top_ops_headroom_over_their_roofline(run: xprosql.Run) -> None:
    pid = profile_id(run, H100_QWEN)
    chip = chip_of(run, pid)
    assert chip.name == "H100"
    stats = (table(run, "op_stats").filter((pl.col("profile_id") == pid) & pl.col("cost_source").is_not_null()
                                          & pl.col("async_window_ps").is_null())
             .group_by("op", "input_shapes", "input_dtypes", "precision")
             .agg(pl.col("self_time_ps", "total_time_ps", "bandwidth_time_ps", "flops", "bytes_accessed").sum())
             .collect())
    rows = []
    for r in stats.iter_rows(named=True):
        peak = {"fp32": chip.peak_fp32_flops_per_s, "fp8": chip.peak_fp8_flops_per_s}.get(r["precision"]) or chip.peak_flops_per_s
        flop_util = r["flops"] / (r["total_time_ps"] * 1e-12) / peak if r["total_time_ps"] else 0
        hbm_util = r["bytes_accessed"] / (r["bandwidth_time_ps"] * 1e-12) / chip.peak_hbm_bytes_per_s if r["bandwidth_time_ps"] else 0
        if hbm_util > flop_util and "nccl" not in r["op"].lower():  # memory-bound: compute wins ties
            roof = 1e12 * max(r["flops"] / peak, r["bytes_accessed"] / chip.peak_hbm_bytes_per_s)
            rows.append({**r, "roof_ps": roof})
    top = sorted(rows, key=lambda r: -r["self_time_ps"])[:5]
    (step,) = kineto_steps(run, pid)
    kernels = table(run, "framework_op_kernels").filter(pl.col("profile_id") == pid).collect()
    saving = time = 0.0
    for r in top:
        mine = kernels.filter((pl.col("op") == r["op"]) & (pl.col("input_shapes") == r["input_shapes"])
                              & (pl.col("input_dtypes") == r["input_dtypes"]))
        share = clipped_ps(mine, [step]) / mine["dur_ps"].sum()
        time += r["self_time_ps"] * share
        saving += (r["self_time_ps"] - min(r["roof_ps"], r["self_time_ps"])) * share
    step_ps = step[1] - step[0]

    found = findings(run, "memory_bound_ops")
    assert pid in found
    row = found[pid]
    assert row["subjects"] == [f"{r['op']} {r['input_shapes']}" for r in top]
    assert row["expected_saving_share"] == pytest.approx(saving / step_ps, rel=1e-6)
    assert row["expected_saving_ps"] == pytest.approx(saving, rel=1e-6, abs=2)
    assert measures(row)["memory_bound_ps"] == pytest.approx(time, rel=1e-6)
    assert 0.05 <= row["expected_saving_share"] < time / step_ps  # bounded by the ops' time
    assert row["severity"] == "medium"  # 13%: xprosql_severity's medium band


def test_memory_bound_ops_is_silent_on_the_tpu_offload_copies_and_compute_bound_profiles(run: xprosql.Run) -> None:
    found = findings(run, "memory_bound_ops")
    tpu, mi300 = profile_id(run, TPU), profile_id(run, MI300_COMPILE)
    assert tpu not in found and mi300 not in found
    # Without a threshold the TPU's memory-bound fusions show, not its host-offload copy-done ops (async pairs),
    # which the roofline calls memory-bound over their windows: they alone hold 99% of its busy time.
    row = findings(run, "memory_bound_ops", min_share=0.0)[tpu]
    assert row["subjects"] and not any(s.startswith("copy-") for s in row["subjects"])
    assert row["expected_saving_share"] < 0.05


# --- low_precision -----------------------------------------------------------------------------------------------

def test_low_precision_finds_the_mi250_fp32_gemms_and_their_bf16_gain(run: xprosql.Run) -> None:
    pid = profile_id(run, MI250)
    chip = chip_of(run, pid)
    gemms = (table(run, "framework_op_kernels")
             .filter((pl.col("profile_id") == pid) & (pl.col("precision") == "fp32")
                     & pl.col("op").is_in(["aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::linear"]))
             .collect())
    assert set(gemms["op"]) == {"aten::mm", "aten::addmm"}
    assert all("float" in json.loads(t)[:3] for t in gemms["input_dtypes"])
    windows = kineto_steps(run, pid)
    fp32_ps = clipped_ps(gemms, windows)
    step_ps = sum(e - s for s, e in windows)
    expected = fp32_ps * (1 - chip.peak_fp32_flops_per_s / chip.peak_flops_per_s) / step_ps

    row = findings(run, "low_precision", min_share=0.0)[pid]
    assert row["device"] == chip.name
    assert row["expected_saving_share"] == pytest.approx(expected, rel=1e-9)
    assert measures(row)["fp32_ps"] == pytest.approx(fp32_ps)
    assert sorted(s.split(" ")[0] for s in row["subjects"]) == ["aten::addmm", "aten::mm"]
    # Under the default 5% threshold (0.3% here): no finding.
    assert pid not in findings(run, "low_precision")


def test_low_precision_is_silent_on_bf16_gemms(run: xprosql.Run) -> None:
    found = findings(run, "low_precision", min_share=0.0)
    for name in (B200, MI300_COMPILE, TPU):
        assert profile_id(run, name) not in found, name


# --- matmul_shapes -----------------------------------------------------------------------------------------------

def test_matmul_shapes_is_silent_on_the_samples_whose_gemms_are_aligned(run: xprosql.Run) -> None:
    # Independently: every bf16 GEMM of the NVIDIA samples has M, N, K multiples of 8 (the tensor-core tile)...
    for name in (H100_QWEN, B200):
        pid = profile_id(run, name)
        shapes = (table(run, "framework_op_kernels")
                  .filter((pl.col("profile_id") == pid) & (pl.col("precision") == "bf16")
                          & pl.col("op").is_in(["aten::mm", "aten::addmm"]))
                  .select("op", "input_shapes").unique().collect())
        assert shapes.height > 0
        for op, text in shapes.iter_rows():
            dims = json.loads(text)
            a, b = (dims[1], dims[2]) if op == "aten::addmm" else (dims[0], dims[1])
            # ...but for the B200's one-row (M = 1) decode GEMM, which the roofline calls memory-bound.
            assert all(d % 8 == 0 for d in (a[0], a[1], b[1]) if d != 1), (name, op, dims)
    assert findings(run, "matmul_shapes", min_share=0.0) == {}


def test_matmul_shapes_pads_the_h100_gemms_to_a_128_tile(run: xprosql.Run) -> None:
    # M = 8944 tokens is a multiple of 8, not of 128: with $tile 128, each GEMM wastes 1 - 8944 / 8960 of its work.
    pid = profile_id(run, H100_QWEN)
    compute_bound = (run.analysis("ops.memory_bound", profiles=[pid]).pl()
                     .filter((pl.col("profile_id") == pid) & (pl.col("row_kind") == "op")
                             & (pl.col("classification") == "compute-bound")
                             & pl.col("op").is_in(["aten::mm", "aten::addmm"])))
    (step,) = kineto_steps(run, pid)
    kernels = table(run, "framework_op_kernels").filter(pl.col("profile_id") == pid).collect()
    saving = 0.0
    for op, shapes, dtypes in compute_bound.select("op", "input_shapes", "input_dtypes").iter_rows():
        dims = json.loads(shapes)
        a, b = (dims[1], dims[2]) if op == "aten::addmm" else (dims[0], dims[1])
        m, k, n = a[0], a[1], b[1]
        useful = m * n * k
        padded = math.prod(math.ceil(d / 128) * 128 for d in (m, n, k))
        mine = kernels.filter((pl.col("op") == op) & (pl.col("input_shapes") == shapes) & (pl.col("input_dtypes") == dtypes))
        saving += clipped_ps(mine, [step]) * (1 - useful / padded)
    assert compute_bound.height == 4 and saving > 0

    row = findings(run, "matmul_shapes", tile=128, min_share=0.0)[pid]
    assert row["expected_saving_share"] == pytest.approx(saving / (step[1] - step[0]), rel=1e-9)
    assert measures(row)["padding_waste_share"] == pytest.approx(1 - 8944 / 8960, rel=1e-9)
    assert all("M=8944" in s for s in row["subjects"])


@pytest.fixture(scope="module")
def matmul_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[int, xprosql.Run]:
    """JAX on the CPU: the 1000 x 1000 f32 matmul chain and its 1024 x 1024 control, ingested."""
    from diagnose_op_profiles import jax_available, make_jax_matmul_profile

    if not jax_available():
        pytest.skip("jax is not installed (test extra)")
    runs = {}
    for size in (1000, 1024):
        folder = tmp_path_factory.mktemp(f"matmul{size}")
        report = xprosql.ingest([make_jax_matmul_profile(folder / "log", size=size)], into=folder / "run")
        assert report.ok, str(report)
        runs[size] = xprosql.load(folder / "run")
    return runs


# The CPU has no roofs of its own: these say the matmuls are compute-bound (2 FLOP per 12 bytes x 1000).
CPU_ROOFS = {"peak_flops_per_s": 1e11, "peak_hbm_bytes_per_s": 1e11}


@pytest.mark.slow
def test_matmul_shapes_finds_1000_wide_jax_matmuls_and_not_1024(matmul_runs: dict[int, xprosql.Run]) -> None:
    from diagnose_op_profiles import MATMUL_STEPS, MATMULS_PER_STEP

    run = matmul_runs[1000]
    events = table(run, "events").collect()
    steps = events.filter((pl.col("name") == "train") & pl.col("step_num").is_not_null()).sort("start_ps")
    assert steps.height == MATMUL_STEPS > 5
    windows = [(s, s + d) for s, d in steps.select("start_ps", "dur_ps").rows()[1:-1]]  # XProf drops first and last
    # The ops that run the dots: a dot itself, or the fusion whose body holds it (XLA:CPU fuses them).
    hlo = table(run, "hlo_ops").collect()
    dots = hlo.filter(pl.col("opcode") == "dot")
    assert dots.height == MATMULS_PER_STEP
    assert all(s.startswith("f32[1000,1000]") for s in dots["operand_shapes"].explode())
    runners = set(dots["hlo_op"]) | set(
        hlo.filter(pl.col("called_computations").list.eval(pl.element().is_in(dots["computation"].to_list())).list.any())
        ["hlo_op"])
    fusions = events.filter(pl.col("hlo_op").is_in(list(runners)))
    assert fusions.height == MATMUL_STEPS * MATMULS_PER_STEP
    waste = 1 - (1000 / 1024) ** 3
    expected = clipped_ps(fusions, windows) * waste / sum(e - s for s, e in windows)

    (row,) = findings(run, "matmul_shapes", tile=128, **CPU_ROOFS).values()
    assert row["expected_saving_share"] == pytest.approx(expected, rel=1e-6)
    assert measures(row)["padding_waste_share"] == pytest.approx(waste, rel=1e-9)
    assert len(row["subjects"]) == MATMULS_PER_STEP and all("M=1000 N=1000 K=1000" in s for s in row["subjects"])
    # No tile known for a CPU: silent without $tile; the aligned control is silent with it.
    assert findings(run, "matmul_shapes", **CPU_ROOFS) == {}
    assert findings(matmul_runs[1024], "matmul_shapes", tile=128, min_share=0.0, **CPU_ROOFS) == {}


# --- memory_headroom ---------------------------------------------------------------------------------------------

def test_memory_headroom_finds_the_h100_qwen_small_batch(run: xprosql.Run) -> None:
    pid = profile_id(run, H100_QWEN)
    memory = table(run, "memory_events").filter((pl.col("profile_id") == pid) & (pl.col("allocator") == "cuda:0")).collect()
    capacity = table(run, "devices").filter((pl.col("profile_id") == pid) & (pl.col("kind") == "gpu")).collect()["memory_bytes"].max()
    peak_share = memory["in_use_bytes"].max() / capacity
    assert peak_share < 0.05
    profile = run.analysis("steps.bottlenecks", profiles=[pid], scope="profile").pl().filter(pl.col("profile_id") == pid).row(0, named=True)
    assert profile["step_flop_utilization"] < 0.01
    (step,) = kineto_steps(run, pid)
    fixed = profile["launch_overhead_ps"] + profile["host_wait_ps"] + profile["idle_ps"]
    k = 0.9 / peak_share
    expected = fixed * (1 - 1 / k) / (step[1] - step[0])

    row = findings(run, "memory_headroom")[pid]
    assert row["expected_saving_share"] == pytest.approx(expected, rel=1e-9)
    m = measures(row)
    assert m["peak_capacity_share"] == pytest.approx(peak_share)
    assert m["batch_multiple_count"] == pytest.approx(k)
    assert row["subjects"] == ["cuda:0"] and row["device"] == "/device:GPU:0"


def test_memory_headroom_is_silent_when_memory_is_full_or_unknown(run: xprosql.Run) -> None:
    found = findings(run, "memory_headroom")
    assert profile_id(run, MI300_SGLANG) not in found   # 74% of its memory in use
    assert profile_id(run, MI300_COMPILE) not in found  # no allocator events
    assert profile_id(run, TPU) not in found            # TPU allocators: no known capacity
    # The H100 trace's peak (2.5%) is above a 2% limit: silent too.
    assert profile_id(run, H100_QWEN) not in findings(run, "memory_headroom", max_peak_share=0.02)


# --- memory_near_capacity ----------------------------------------------------------------------------------------

def test_memory_near_capacity_fires_on_the_mi300_decode_within_its_margin(run: xprosql.Run) -> None:
    pid = profile_id(run, MI300_SGLANG)
    memory = table(run, "memory_events").filter((pl.col("profile_id") == pid) & (pl.col("allocator") == "hip:0")).collect()
    capacity = table(run, "devices").filter((pl.col("profile_id") == pid) & (pl.col("kind") == "gpu")).collect()["memory_bytes"].max()
    peak_share = memory["in_use_bytes"].max() / capacity
    reserved_share = memory["reserved_bytes"].max() / capacity
    assert 0.73 < peak_share < reserved_share < 0.74
    windows = kineto_steps(run, pid)
    calls = table(run, "api_calls").filter((pl.col("profile_id") == pid)
                                          & pl.col("name").is_in(["hipMalloc", "hipFree", "cudaMalloc", "cudaFree"])).collect()
    calls_ps = clipped_ps(calls, windows)
    assert calls.height == 2 and calls_ps > 0

    assert pid not in findings(run, "memory_near_capacity")                  # 10%: 74% is not near 100%
    assert pid not in findings(run, "memory_near_capacity", within=0.25)     # 75% > 73.8%
    row = findings(run, "memory_near_capacity", within=0.27)[pid]            # 73% < 73.6%
    m = measures(row)
    assert m["peak_capacity_share"] == pytest.approx(peak_share)
    assert m["reserved_capacity_share"] == pytest.approx(reserved_share)
    assert m["allocator_calls_count"] == 2
    assert row["expected_saving_share"] == pytest.approx(calls_ps / sum(e - s for s, e in windows), rel=1e-9)
    assert row["subjects"] == ["hip:0"]


def test_memory_near_capacity_is_silent_on_every_sample_at_the_default_margin(run: xprosql.Run) -> None:
    assert findings(run, "memory_near_capacity") == {}
