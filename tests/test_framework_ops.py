"""PyTorch op statistics, costs and rooflines on real Kineto traces (GPU: NVIDIA and AMD; CPU: generated)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import polars as pl
import pytest
from conftest import TEST_DATA

import xprosql
from xprosql.ingest import profile_id_of

H100 = TEST_DATA / "kineto" / "h100_qwen1.5_0.5b.json.gz"
WITH_SHAPES = ["h100_qwen1.5_0.5b", "mi300_torch_compile_triton", "b200_eager_nccl_rank0", "mi300_sglang_decode_bs32"]
CPU_PEAKS = {"peak_flops_per_s": 1e11, "peak_hbm_bytes_per_s": 2e10, "peak_source": "user"}


@pytest.fixture(scope="module")
def run(samples_warehouse: Path) -> xprosql.Run:
    return xprosql.load(samples_warehouse)


def _pid(name: str) -> str:
    return profile_id_of((TEST_DATA / "kineto" / f"{name}.json.gz").read_bytes())


def _kineto_gpu_profiles(run: xprosql.Run) -> list[str]:
    return [p for (p,) in run.sql("SELECT DISTINCT profile_id FROM kernels JOIN profiles USING (profile_id) "
                                  "WHERE format = 'kineto'").rows()]


def test_the_readme_gemm_has_2mnk_flops_per_call_and_a_rate_below_the_roof(run: xprosql.Run) -> None:
    rows = run.framework_ops(profiles=[profile_id_of(H100.read_bytes())]).pl().filter(
        (pl.col("op") == "aten::mm") & (pl.col("input_shapes") == "[[8944, 1024], [1024, 2816], [], []]")
        | (pl.col("op") == "aten::mm") & (pl.col("input_shapes") == "[[8944, 1024], [1024, 2816]]"))
    assert rows.height == 1
    row = rows.row(0, named=True)
    assert row["flops_per_call"] == 2 * 8944 * 2816 * 1024
    assert row["cost_source"] == "shapes" and row["precision"] == "bf16"
    assert 0 < row["flop_rate"] < 989e12  # the H100's bf16 dense roof
    roof = run.roofline(profiles=[profile_id_of(H100.read_bytes())]).pl().filter(
        (pl.col("op") == "aten::mm") & (pl.col("input_shapes") == row["input_shapes"]))
    assert roof.row(0, named=True)["bound_by"] == "compute"
    assert roof.row(0, named=True)["flop_rate"] == pytest.approx(row["flop_rate"], rel=0.01)


def test_every_kineto_gpu_sample_has_roofline_rows_and_those_with_shapes_have_costs(run: xprosql.Run) -> None:
    roof = run.roofline().pl().filter(pl.col("row_kind") == "op", pl.col("device_kind") == "gpu")
    for pid in _kineto_gpu_profiles(run):
        assert roof.filter(profile_id=pid).height > 0, pid
    for name in WITH_SHAPES:
        ops = roof.filter(profile_id=_pid(name))
        costed = ops.filter(pl.col("cost_source").is_in(["shapes", "trace"]) & (pl.col("bytes_accessed") > 0))
        assert costed.height > 0, name
        assert costed.filter(pl.col("bound_by").is_in(["compute", "HBM"])).height == costed.height, name


def test_each_gpu_activity_counts_once_so_shares_stay_within_the_device(run: xprosql.Run) -> None:
    for pid in _kineto_gpu_profiles(run):
        ops = run.framework_ops(profiles=[pid]).pl().filter(device_kind="gpu")
        for share in ops.group_by("device_id").agg(pl.col("gpu_time_share").sum())["gpu_time_share"]:
            assert share <= 1 + 1e-9, pid
        attributed = run.sql("SELECT coalesce(sum(dur_ps), 0) FROM framework_op_kernels WHERE profile_id = $p",
                             {"p": pid}).rows()[0][0]
        assert ops["self_kernel_time_ps"].sum() == attributed, pid
        # The roofline's GPU op rows hold every stream activity once, attributed or not (self time is less
        # where kernels overlap on their stream's line).
        on_streams = run.sql(
            "SELECT sum(dur_ps) FROM (SELECT profile_id, dur_ps FROM kernels UNION ALL SELECT profile_id, dur_ps "
            "FROM memcpys) WHERE profile_id = $p", {"p": pid}).rows()[0][0]
        roof = run.roofline(profiles=[pid]).pl().filter(row_kind="op", device_kind="gpu")
        assert roof["total_time_ps"].sum() == on_streams, pid
        assert roof["self_time_share"].sum() <= 1 + 1e-9, pid


def test_an_op_above_costed_ops_carries_their_costs(run: xprosql.Run) -> None:
    # aten::linear (bias) calls aten::addmm; costs count once, at addmm, and linear shows its subtree's.
    ops = run.framework_ops(profiles=[profile_id_of(H100.read_bytes())], by_shapes=False).pl()
    linear, addmm = (ops.filter(op=name).row(0, named=True) for name in ("aten::linear", "aten::addmm"))
    assert linear["cost_source"] == "nested" and addmm["cost_source"] == "shapes"
    mm = ops.filter(op="aten::mm").row(0, named=True)
    # Every linear of the trace runs an addmm (with bias) or an mm (without).
    assert linear["flops"] == pytest.approx(addmm["flops"] + mm["flops"], rel=1e-12)
    assert linear["kernel_time_ps"] >= addmm["kernel_time_ps"]
    assert linear["self_kernel_time_ps"] == 0


def test_kernel_time_follows_the_launches_through_the_op_tree(run: xprosql.Run) -> None:
    # In the raw trace each SDPA call's kernels are launched by its child, aten::_flash_attention_forward.
    events = json.loads(gzip.decompress(H100.read_bytes()))["traceEvents"]
    sdpa = [e for e in events if e.get("name") == "aten::_scaled_dot_product_flash_attention"]
    child = [e for e in events if e.get("name") == "aten::_flash_attention_forward"]
    assert len(sdpa) == len(child) == 24
    assert all(any(s["ts"] <= c["ts"] and c["ts"] + c["dur"] <= s["ts"] + s["dur"] for s in sdpa) for c in child)
    # So the parent's kernel time is its child's, counted once, at the child; the roofline puts them at the parent.
    pid = profile_id_of(H100.read_bytes())
    ops = run.framework_ops(profiles=[pid], by_shapes=False).pl()
    parent, launcher = (ops.filter(op=name).row(0, named=True)
                        for name in ("aten::_scaled_dot_product_flash_attention", "aten::_flash_attention_forward"))
    assert parent["kernel_time_ps"] == launcher["kernel_time_ps"] == launcher["self_kernel_time_ps"] > 0
    assert parent["self_kernel_time_ps"] == 0 and parent["kernels"] == launcher["kernels"] == 24
    roof = run.roofline(profiles=[pid]).pl().filter(row_kind="op", device_kind="gpu")
    assert roof.filter(op="aten::_scaled_dot_product_flash_attention")["total_time_ps"].sum() == parent["kernel_time_ps"]
    assert roof.filter(op="aten::_flash_attention_forward").height == 0


def test_bottlenecks_split_kernel_time_by_the_roofline(run: xprosql.Run) -> None:
    rows = run.bottlenecks(profiles=[_pid("h100_qwen1.5_0.5b")]).pl()
    assert rows.height > 0
    total = rows.filter(pl.col("scope") == "profile").row(0, named=True)
    assert total["compute_bound_ps"] > 0 and total["memory_bound_ps"] >= 0
    assert total["other_compute_ps"] > 0  # kernels of ops without a rule, and those no op in the trace launched


def test_cpu_pytorch_ops_get_costs_and_a_roofline_with_given_peaks(torch_training_warehouse: Path) -> None:
    run = xprosql.load(torch_training_warehouse)
    ops = run.framework_ops().pl()
    addmm = ops.filter(op="aten::addmm")
    assert addmm.height > 0 and (addmm["device_kind"] == "host").all()
    # nn.Linear(128, 256) on a batch of 64: M=64, K=128, N=256, with bias.
    first = addmm.filter(pl.col("input_shapes").str.contains(r"\[64, 128\], \[128, 256\]")).row(0, named=True)
    assert first["flops_per_call"] == 2 * 64 * 256 * 128 + 64 * 256
    assert first["flop_rate"] > 0
    roof = run.roofline(**CPU_PEAKS).pl().filter(row_kind="op", device_kind="cpu")
    costed = roof.filter(pl.col("cost_source") == "shapes")
    assert costed.height > 0 and set(costed["bound_by"]) <= {"compute", "HBM"}
    assert (costed["peak_flops_per_s"] == CPU_PEAKS["peak_flops_per_s"]).all()


def test_ops_without_a_rule_are_counted_not_guessed(run: xprosql.Run) -> None:
    ops = run.framework_ops(profiles=[profile_id_of(H100.read_bytes())], by_shapes=False).pl()
    for name in ("aten::cat", "aten::view", "aten::empty"):
        row = ops.filter(op=name).row(0, named=True)
        assert row["cost_source"] is None and row["flops"] is None and row["flop_rate"] is None, name


def test_an_fp32_op_has_the_chips_fp32_roof(run: xprosql.Run) -> None:
    # The H100 trace's aten::bmm computes in float: H100's 67 TFLOP/s fp32 roof, not the 989 bf16 one.
    roof = run.roofline(profiles=[profile_id_of(H100.read_bytes())]).pl().filter(row_kind="op")
    bmm, mm = (roof.filter(op=name).row(0, named=True) for name in ("aten::bmm", "aten::mm"))
    assert (bmm["precision"], bmm["peak_flops_per_s"]) == ("fp32", 67e12)
    assert (mm["precision"], mm["peak_flops_per_s"]) == ("bf16", 989e12)


def test_the_traces_own_flops_win_over_the_shapes(tmp_path: Path) -> None:
    # A real trace of torch.mm on the CPU, with a `flops` arg added by hand: Kineto writes one on the ops it
    # counts when profiling with_flops=True, which PyTorch 2.13's CPU export here does not.
    torch = pytest.importorskip("torch")
    a, b = torch.randn(64, 96), torch.randn(96, 48)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True) as prof:
        torch.mm(a, b)
    trace = tmp_path / "flops.pt.trace.json"
    prof.export_chrome_trace(str(trace))
    data = json.loads(trace.read_text())
    mm = [e for e in data["traceEvents"] if e.get("name") == "aten::mm"]
    assert len(mm) == 1
    mm[0]["args"]["flops"] = 123456789
    trace.write_text(json.dumps(data))
    assert xprosql.ingest(trace, into=tmp_path / "run").ok
    row = xprosql.load(tmp_path / "run").framework_ops().pl().filter(op="aten::mm").row(0, named=True)
    assert (row["cost_source"], row["flops"]) == ("trace", 123456789.0)
    assert row["bytes_accessed"] == (64 * 96 + 96 * 48 + 64 * 48) * 4  # bytes still from the shapes
