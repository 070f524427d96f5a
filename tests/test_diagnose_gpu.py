"""The GPU-timeline findings (Nsight Systems' expert-system rules): diagnose.sync_calls (cuda_api_sync,
cuda_memcpy_sync, cuda_memset_sync), pageable_memcpy (cuda_memcpy_async), gpu_gaps (gpu_gaps) and low_utilization
(gpu_time_util), with their building block diagnose._gpu_idle.

Every number is checked against an interval sweep written here in Python over the raw tables (kernels, memcpys,
api_calls, events), not against the analyses the rules build on; only the step boundaries come from steps.steps (the
project's step definition, which the rules must share). The rules need CUDA/HIP activity: a CPU-only PyTorch profile
has no kernels, copies or CUDA calls, so no generated profile can show them and every test here reads the real GPU
samples of tests/data/kineto (tests/data/README.md). Which sample shows what (found by the sweeps below):

  sync_calls       h100_qwen1.5_0.5b (a 14 ms cudaDeviceSynchronize, then 1 ms of idle: fires), mi250_rocm (two
                   synchronous hipMemcpyWithStream: fires); mi300_torch_compile_triton is the control: 11.9 ms of
                   hipDeviceSynchronize while its GPU stays busy, so nothing to save and no finding.
  pageable_memcpy  alexnet (16 pageable host-to-device copies, 244 MB), sampled_rank0 (pageable copies both ways, the
                   .item() reads); h100 (no pageable copy) is the control. The copies are far below 1% of these
                   profiles' step time, so the numbers are checked with min_share=0 and the default threshold by rule.
  gpu_gaps         a100_nccl_rank0 (15 ms gaps while the host unflattens DDP buckets), sampled_rank0/1, mi250;
                   h100 and mi300_torch_compile_triton (no gap reaches 1 ms) are the controls.
  low_utilization  a100_nccl_rank0, sampled_rank0/1, mi250 (short scattered gaps in
                   windows under 50% busy); h100 (92% busy, one low window) is the control.

The fixed programs cannot be run here (they need a GPU), so the savings are checked as the sweeps define them, not
against a measured rerun.
"""

from __future__ import annotations

import re
from pathlib import Path

import polars as pl
import pytest

import xprosql

# Slow (tests/conftest.py): every rule or analysis over every real sample; `--runslow` runs them (CI does).
pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::xprosql.errors.NotApplicableWarning")]

GPU_RULES = ["sync_calls", "pageable_memcpy", "gpu_gaps", "low_utilization"]
MS = 1_000_000_000  # ps


# --- helpers: the raw tables of one profile, and interval arithmetic -----------------------------------------------

def _union(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[list[int]] = []
    for start, end in sorted(i for i in intervals if i[1] > i[0]):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(s, e) for s, e in merged]


def _overlap(intervals: list[tuple[int, int]], lo: int, hi: int) -> int:
    return sum(max(0, min(e, hi) - max(s, lo)) for s, e in intervals)


class Raw:
    """One profile's GPU ops, API calls and complete GPU steps, read from the warehouse tables with Polars."""

    def __init__(self, run: xprosql.Run, pid: str) -> None:
        def table(name: str) -> pl.DataFrame:
            frame = run.table(name).filter(pl.col("profile_id") == pid).collect()
            return frame.with_columns(pl.col(pl.Categorical, pl.Enum).cast(pl.String))

        kernels = table("kernels").select("device_id", "start_ps", "dur_ps", "correlation_id", "event_id", "name")
        self.memcpys = table("memcpys")
        ops = pl.concat([
            kernels.select("device_id", "start_ps", "dur_ps", "correlation_id", "event_id"),
            self.memcpys.select("device_id", "start_ps", "dur_ps", "correlation_id", "event_id"),
        ]).filter(pl.col("start_ps").is_not_null())
        self.ops = ops.with_columns(end_ps=pl.col("start_ps") + pl.col("dur_ps"))
        self.calls = table("api_calls")
        self.events = table("events")
        steps = run.analysis("steps.steps", profiles=[pid]).pl()
        self.steps = steps.filter((pl.col("complete") != False) & (pl.col("device_kind") == "gpu")  # noqa: E712
                                  & (pl.col("wall_ps") > 0))
        self.device_step_ps = int(self.steps["wall_ps"].sum())
        self.devices = self.steps["device_id"].n_unique()

    def busy(self, device_id: int, ops: pl.DataFrame | None = None) -> list[tuple[int, int]]:
        frame = (self.ops if ops is None else ops).filter((pl.col("device_id") == device_id) & (pl.col("dur_ps") > 0))
        return _union(list(zip(frame["start_ps"], frame["end_ps"])))

    def gaps(self) -> list[dict]:
        """Every idle stretch of every complete GPU step: the step less the union of the GPU's ops."""
        out = []
        for step in self.steps.iter_rows(named=True):
            lo, hi = step["start_ps"], step["end_ps"]
            cursor = lo
            for s, e in self.busy(step["device_id"]):
                s, e = max(s, lo), min(e, hi)
                if e <= s:
                    continue
                if s > cursor:
                    out.append({**step, "gap_start": cursor, "gap_end": s})
                cursor = max(cursor, e)
            if hi > cursor:
                out.append({**step, "gap_start": cursor, "gap_end": hi})
        for gap in out:
            gap["gap_ps"] = gap["gap_end"] - gap["gap_start"]
        return out


@pytest.fixture(scope="module")
def samples(samples_warehouse: Path) -> dict:
    run = xprosql.load(samples_warehouse)
    ids = {Path(path).name.removesuffix(".json.gz"): pid for pid, path in run.sql("SELECT profile_id, source_path FROM profiles").rows()}
    return {"run": run, "ids": ids, "raw": {}, "findings": {}}


def _raw(samples: dict, name: str) -> Raw:
    if name not in samples["raw"]:
        samples["raw"][name] = Raw(samples["run"], samples["ids"][name])
    return samples["raw"][name]


def _findings(samples: dict, rule: str, **params) -> dict[str, dict]:
    """The rule's findings by profile id, run once per parameters for the module."""
    key = (rule, tuple(sorted(params.items())))
    if key not in samples["findings"]:
        samples["findings"][key] = _run_rule(samples["run"], rule, **params)
    return samples["findings"][key]


def _run_rule(run: xprosql.Run, rule: str, **params) -> dict[str, dict]:
    rows = run.analysis(f"diagnose.{rule}", **params).arrow().to_pylist()
    for row in rows:
        row["measures"] = dict(row["measures"])
        assert row["rule"] == rule and row["severity"] in ("high", "medium", "low")
        assert 0 <= row["expected_saving_share"] <= 1 and row["expected_saving_ps"] >= 0
    assert len({r["profile_id"] for r in rows}) == len(rows), "one finding per profile"
    return {r["profile_id"]: r for r in rows}


# --- diagnose._gpu_idle: the gaps are steps.steps' idle time, cut up ---------------------------------------------

def test_gpu_idle_gaps_are_the_steps_idle_time(samples: dict) -> None:
    from conftest import analysis_text, bound_parameters

    run = samples["run"]
    gaps = run.sql(analysis_text("diagnose._gpu_idle"), bound_parameters("diagnose._gpu_idle")).pl()
    per_step = gaps.group_by("profile_id", "device_id", "step_index").agg(pl.col("gap_ps").sum())
    steps = run.analysis("steps.steps").pl().filter((pl.col("complete") != False) & (pl.col("device_kind") == "gpu"))  # noqa: E712
    joined = steps.join(per_step, on=["profile_id", "device_id", "step_index"], how="left").with_columns(
        pl.col("gap_ps").fill_null(0))
    assert len(joined) >= 12
    assert (joined["gap_ps"] == joined["idle_ps"]).all(), joined.filter(pl.col("gap_ps") != pl.col("idle_ps"))
    # and the gaps themselves, against the sweep, on the sample with the most of them
    raw = _raw(samples, "a100_nccl_rank0")
    mine = sorted((g["gap_start"], g["gap_end"]) for g in raw.gaps())
    theirs = gaps.filter(pl.col("profile_id") == samples["ids"]["a100_nccl_rank0"]).sort("start_ps")
    assert len(mine) > 3000 and mine == list(zip(theirs["start_ps"], theirs["end_ps"]))


# --- gpu_gaps ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["a100_nccl_rank0", "sampled_rank0", "mi250_rocm",
                                  "h100_qwen1.5_0.5b", "mi300_torch_compile_triton"])
def test_gpu_gaps_are_the_long_idle_stretches(samples: dict, name: str) -> None:
    raw = _raw(samples, name)
    long = [g for g in raw.gaps() if g["gap_ps"] >= MS]
    share = sum(g["gap_ps"] for g in long) / raw.device_step_ps
    found = _findings(samples, "gpu_gaps").get(samples["ids"][name])
    assert (found is not None) == (share >= 0.1), (name, share)
    if name in ("h100_qwen1.5_0.5b", "mi300_torch_compile_triton"):
        assert not long and found is None  # the controls: no gap of 1 ms
        return
    found = _findings(samples, "gpu_gaps", min_share=0)[samples["ids"][name]]
    m = found["measures"]
    assert m["gap_ps"] == sum(g["gap_ps"] for g in long)
    assert m["gaps_count"] == len(long) and m["longest_gap_ps"] == max(g["gap_ps"] for g in long)
    assert m["idle_ps"] == sum(raw.steps["idle_ps"])
    assert found["expected_saving_share"] == pytest.approx(share)
    assert found["expected_saving_ps"] == pytest.approx(share * raw.device_step_ps / raw.devices, abs=1)
    assert found["step"] == max(long, key=lambda g: g["gap_ps"])["step"]


def test_gpu_gaps_names_the_host_work_in_the_gaps(samples: dict) -> None:
    """a100: the 15 ms gaps of each step's forward pass are DDP's aten::unflatten_dense_tensors on the host; the
    outermost cpu_ops overlapping the long gaps, by overlap, computed here from the raw events."""
    raw = _raw(samples, "a100_nccl_rank0")
    long = [(g["gap_start"], g["gap_end"]) for g in raw.gaps() if g["gap_ps"] >= MS]
    ops = raw.events.filter((pl.col("category") == "cpu_op") & pl.col("start_ps").is_not_null()).with_columns(
        end_ps=pl.col("start_ps") + pl.col("dur_ps"))
    lo, hi = min(s for s, _ in long), max(e for _, e in long)
    ops = ops.filter((pl.col("start_ps") < hi) & (pl.col("end_ps") > lo))
    overlaps = {}
    for op in ops.iter_rows(named=True):
        inside = _overlap(long, op["start_ps"], op["end_ps"])
        if inside == 0:
            continue
        enclosed = ops.filter((pl.col("track_id") == op["track_id"]) & (pl.col("event_id") != op["event_id"])
                              & (pl.col("start_ps") <= op["start_ps"]) & (pl.col("end_ps") >= op["end_ps"])
                              & ((pl.col("dur_ps") > op["dur_ps"]) | (pl.col("event_id") < op["event_id"])))
        if enclosed.is_empty():
            overlaps[op["name"]] = overlaps.get(op["name"], 0) + inside
    top = sorted(overlaps, key=lambda n: -overlaps[n])
    found = _findings(samples, "gpu_gaps")[samples["ids"]["a100_nccl_rank0"]]
    assert top[0] == "aten::unflatten_dense_tensors" and found["subjects"][:3] == top[:3]
    assert re.search(r"aten::unflatten_dense_tensors \((\d+\.\d+) ms\)", found["evidence"]).group(1) == f"{overlaps[top[0]] / MS:.3f}"


# --- low_utilization --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("rule", ["gpu_gaps", "low_utilization"])
def test_idle_rules_leave_out_profiles_without_step_markers(samples: dict, rule: str) -> None:
    """b200 and alexnet have no ProfilerStep: their one "step" is the whole capture (b200: 73% idle in short gaps,
    alexnet: 99.8% in long ones, start-up included), which no fix inside a step saves."""
    found = _findings(samples, rule, min_share=0)
    for name in ("b200_eager_nccl_rank0", "alexnet"):
        assert samples["ids"][name] not in found, name
        assert _raw(samples, name).steps["source"].unique().to_list() == ["profile"]


@pytest.mark.parametrize("name", ["a100_nccl_rank0", "sampled_rank1", "mi250_rocm",
                                  "h100_qwen1.5_0.5b"])
def test_low_utilization_counts_short_gaps_in_low_windows(samples: dict, name: str) -> None:
    raw = _raw(samples, name)
    gaps = raw.gaps()
    short_idle = low_ps = low_windows = windows = 0
    for step in raw.steps.iter_rows(named=True):
        lo, wall = step["start_ps"], step["wall_ps"]
        mine = [g for g in gaps if g["device_id"] == step["device_id"] and g["step_index"] == step["step_index"]]
        for k in range(30):
            a, b = lo + wall * k // 30, lo + wall * (k + 1) // 30
            idle = _overlap([(g["gap_start"], g["gap_end"]) for g in mine], a, b)
            windows += 1
            if 1 - idle / (b - a) < 0.5:
                low_windows += 1
                low_ps += b - a
                short_idle += _overlap([(g["gap_start"], g["gap_end"]) for g in mine if g["gap_ps"] < MS], a, b)
    share = short_idle / raw.device_step_ps
    found = _findings(samples, "low_utilization").get(samples["ids"][name])
    assert (found is not None) == (share >= 0.03), (name, share)
    if name == "h100_qwen1.5_0.5b":
        assert found is None and low_windows == 1  # the control: 92% busy, one low window
        return
    m = found["measures"]
    assert m["short_gap_idle_ps"] == short_idle and m["low_windows_count"] == low_windows and m["windows_count"] == windows
    assert m["low_window_share"] == pytest.approx(low_ps / raw.device_step_ps)
    assert found["expected_saving_share"] == pytest.approx(share)


def test_gpu_gaps_and_low_utilization_never_count_the_same_idle_time(samples: dict) -> None:
    run = samples["run"]
    gaps, low = _findings(samples, "gpu_gaps", min_share=0), _findings(samples, "low_utilization", min_share=0)
    steps = run.analysis("steps.steps").pl().filter((pl.col("complete") != False) & (pl.col("device_kind") == "gpu"))  # noqa: E712
    idle = dict(steps.group_by("profile_id").agg(pl.col("idle_ps").sum()).rows())
    assert len(set(gaps) | set(low)) >= 8
    for pid in set(gaps) | set(low):
        together = (gaps.get(pid, {}).get("measures", {}).get("gap_ps", 0)
                    + low.get(pid, {}).get("measures", {}).get("short_gap_idle_ps", 0))
        assert together <= idle[pid], pid


# --- sync_calls -------------------------------------------------------------------------------------------------

SYNC = re.compile(r"^(cuda|hip)(Device|Stream|Event|Ctx|Thread)Synchronize|^cu(Ctx|Stream|Event)Synchronize")


def _sync_savings(raw: Raw) -> list[dict]:
    """Each sync call in a complete step with its window's GPU idle time and its saving, from the raw tables."""
    calls = raw.calls.filter(pl.col("start_ps").is_not_null())
    launches = (calls.filter(pl.col("correlation_id").is_not_null()).sort("start_ps", "event_id")
                .unique("correlation_id", keep="first")
                .join(raw.ops, on="correlation_id").select("device_id", "start_ps", pl.col("start_ps_right").alias("op_start")))
    dtoh = raw.memcpys.filter(pl.col("kind").is_in(["DtoH", "HtoH"]) & (pl.col("dst_kind") == "Pageable"))["correlation_id"]
    picked = calls.filter(
        pl.col("name").str.contains(SYNC.pattern)
        | (pl.col("name").str.contains("^(cuda|hip|cu)Mem(cpy|set)") & ~pl.col("name").str.contains("Async"))
        | (pl.col("name").str.contains("^(cuda|hip|cu)Memcpy") & pl.col("correlation_id").is_in(dtoh.implode()))
    ).sort("start_ps", "event_id")
    gaps = raw.gaps()
    out = []
    assert raw.devices == 1  # the samples here drive one GPU
    step_rows = list(raw.steps.iter_rows(named=True))
    rows = list(picked.iter_rows(named=True))
    for i, call in enumerate(rows):
        step = next((s for s in step_rows if s["start_ps"] <= call["start_ps"] < s["end_ps"]), None)
        if step is None:
            continue
        end = call["start_ps"] + call["dur_ps"]
        later = launches.filter(pl.col("start_ps") >= end)["op_start"]
        nxt = later.min() if len(later) else None
        w_end = min(end, step["end_ps"]) if nxt is None or nxt >= step["end_ps"] else max(nxt, end)
        following = [r["start_ps"] for r in rows[i + 1:] if r["start_ps"] >= call["start_ps"]]
        w_end = min(w_end, following[0] if following else step["end_ps"])
        idle = _overlap([(g["gap_start"], g["gap_end"]) for g in gaps if g["step_index"] == step["step_index"]],
                        call["start_ps"], w_end)
        out.append({"name": call["name"], "dur_ps": call["dur_ps"], "idle_ps": idle, "saving_ps": min(idle, call["dur_ps"])})
    return out


@pytest.mark.parametrize("name", ["h100_qwen1.5_0.5b", "mi250_rocm", "mi300_torch_compile_triton", "a100_nccl_rank0",
                                  "sampled_rank0", "alexnet"])
def test_sync_calls_save_the_idle_they_cause(samples: dict, name: str) -> None:
    raw = _raw(samples, name)
    calls = _sync_savings(raw)
    saving = sum(c["saving_ps"] for c in calls)
    share = saving / raw.device_step_ps
    found = _findings(samples, "sync_calls").get(samples["ids"][name])
    assert (found is not None) == (share >= 0.01), (name, share)
    assert (found is not None) == (name in ("h100_qwen1.5_0.5b", "mi250_rocm"))
    if name == "mi300_torch_compile_triton":
        # the control: the host waits 11.9 ms in hipDeviceSynchronize, but the GPU is busy all along
        assert sum(c["dur_ps"] for c in calls) > 11 * MS and saving < 0.01 * MS
    found = _findings(samples, "sync_calls", min_share=0)[samples["ids"][name]]
    m = found["measures"]
    assert m["sync_calls_count"] == len(calls) > 0
    assert m["sync_call_ps"] == sum(c["dur_ps"] for c in calls)
    assert m["window_idle_ps"] == sum(c["idle_ps"] for c in calls)
    assert m["sync_saving_ps"] == saving
    assert found["expected_saving_share"] == pytest.approx(share)
    assert m["synchronize_count"] == sum(1 for c in calls if SYNC.search(c["name"]))


def test_sync_calls_name_the_ops_that_sync(samples: dict) -> None:
    """The .item() of the sampled traces is a cudaMemcpyAsync into pageable memory under aten::item (its
    cudaStreamSynchronize was sampled out); h100's is aten::is_nonzero's cudaStreamSynchronize."""
    found = _findings(samples, "sync_calls", min_share=0)
    sampled = found[samples["ids"]["sampled_rank0"]]
    assert set(sampled["subjects"]) == {"aten::to", "aten::item"} and sampled["measures"]["pageable_dtoh_count"] == 8
    assert "aten::item > aten::_local_scalar_dense: cudaMemcpyAsync (3 calls" in sampled["evidence"]
    h100 = found[samples["ids"]["h100_qwen1.5_0.5b"]]
    assert h100["subjects"] == ["cudaDeviceSynchronize", "aten::is_nonzero"]
    assert "aten::is_nonzero > aten::_local_scalar_dense: cudaStreamSynchronize" in h100["evidence"]


# --- pageable_memcpy --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["alexnet", "sampled_rank0", "b200_eager_nccl_rank0", "h100_qwen1.5_0.5b"])
def test_pageable_memcpy_counts_the_exposed_copy_time(samples: dict, name: str) -> None:
    raw = _raw(samples, name)
    first_call = (raw.calls.filter(pl.col("correlation_id").is_not_null()).sort("start_ps", "event_id")
                  .unique("correlation_id", keep="first").select("correlation_id", pl.col("name").alias("api")))
    copies = raw.memcpys.join(first_call, on="correlation_id", how="left").filter(
        ((pl.col("src_kind") == "Pageable") | (pl.col("dst_kind") == "Pageable"))
        & pl.col("api").fill_null("Async").str.contains("Async") & (pl.col("dur_ps") > 0))
    pageable_ids = copies["event_id"].implode()
    exposed, in_steps = 0, []
    for step in raw.steps.iter_rows(named=True):
        lo, hi = step["start_ps"], step["end_ps"]
        every = raw.busy(step["device_id"])
        others = raw.busy(step["device_id"], raw.ops.filter(~pl.col("event_id").is_in(pageable_ids)))
        exposed += _overlap(every, lo, hi) - _overlap(others, lo, hi)
        in_steps += [c for c in copies.iter_rows(named=True) if lo <= c["start_ps"] < hi and c["device_id"] == step["device_id"]]
    found = _findings(samples, "pageable_memcpy", min_share=0).get(samples["ids"][name])
    if name == "h100_qwen1.5_0.5b":
        assert copies.is_empty() and found is None  # the control: no pageable copy
        return
    m = found["measures"]
    assert m["copies_count"] == len(in_steps) > 0 and m["copy_ps"] == sum(c["dur_ps"] for c in in_steps)
    assert m["copy_bytes"] == sum(c["bytes"] for c in in_steps)
    assert m["exposed_copy_ps"] == exposed and 0 < exposed <= m["copy_ps"]
    assert found["expected_saving_share"] == pytest.approx(exposed / raw.device_step_ps)
    assert found["subjects"][0] == "aten::to"
    default = _findings(samples, "pageable_memcpy").get(samples["ids"][name])
    assert (default is not None) == (exposed / raw.device_step_ps >= 0.01)


def test_rules_are_silent_without_gpu_activity(samples: dict) -> None:
    """cpu_only (a Kineto trace of a rank without GPU events) and the TPU sample have no GPU steps: no finding."""
    quiet = {samples["ids"]["cpu_only"], samples["ids"]["tpu_v6e_inference.xplane.pb"]}
    for rule in GPU_RULES:
        assert not quiet & set(_findings(samples, rule, min_share=0)), rule
