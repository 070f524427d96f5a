"""The step-breakdown findings (XProf's smart suggestions): diagnose.input_bound, launch_bound, exposed_communication,
exposed_copies and host_bound.

Each rule fires on a real sample of tests/data that has the problem and stays silent on samples without it; the
savings are checked against an interval sweep written here in Python over the raw kernels, copies and launch calls
(not against the analyses the rules build on). input_bound also runs on a generated CPU PyTorch training loop whose
DataLoader sleeps, against the same loop without the sleep: its saving is the step time the fix measurably saves.

launch_bound is tested on GPU samples only: a CPU profile launches no kernels (its launch_overhead_ps is 0 by
definition), so the rule cannot fire there, and the test says so on the generated CPU profile.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

import xprosql

# Slow (tests/conftest.py): every rule or analysis over every real sample; `--runslow` runs them (CI does).
pytestmark = pytest.mark.slow

STEP_RULES = ["input_bound", "launch_bound", "exposed_communication", "exposed_copies", "host_bound"]


# --- helpers: interval arithmetic over the raw tables -------------------------------------------------------------

def _union(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[list[int]] = []
    for start, end in sorted(i for i in intervals if i[1] > i[0]):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(s, e) for s, e in merged]


def _length(intervals: list[tuple[int, int]], lo: int, hi: int) -> int:
    """Time of the union of ``intervals`` inside [lo, hi)."""
    return sum(max(0, min(e, hi) - max(s, lo)) for s, e in _union(intervals))


def _minus(a: list[tuple[int, int]], b: list[tuple[int, int]], lo: int, hi: int) -> int:
    """Time inside [lo, hi) covered by ``a`` and not by ``b``."""
    return _length(a + b, lo, hi) - _length(b, lo, hi)


@pytest.fixture(scope="module")
def samples(samples_warehouse: Path) -> dict:
    run = xprosql.load(samples_warehouse)
    ids = {Path(path).name: pid for pid, path in run.sql("SELECT profile_id, source_path FROM profiles").rows()}
    return {"run": run, "ids": ids, "found": {}}


def _sample_findings(samples: dict, rule: str, **params) -> dict[str, dict]:
    """_findings on the samples, each rule and parameters run once for the module."""
    key = (rule, tuple(sorted(params.items())))
    if key not in samples["found"]:
        samples["found"][key] = _findings(samples["run"], rule, **params)
    return samples["found"][key]


def _findings(run: xprosql.Run, rule: str, **params) -> dict[str, dict]:
    rows = run.analysis(f"diagnose.{rule}", **params).arrow().to_pylist()
    for row in rows:
        row["measures"] = dict(row["measures"])
    assert len({r["profile_id"] for r in rows}) == len(rows), "one finding per profile"
    return {r["profile_id"]: r for r in rows}


def _complete_steps(run: xprosql.Run, profile_id: str) -> pl.DataFrame:
    steps = run.analysis("steps.steps", profiles=[profile_id]).pl()
    return steps.filter( pl.col("complete").fill_null(True) & (pl.col("wall_ps") > 0))


def _intervals(run: xprosql.Run, query: str, profile_id: str) -> dict[int, list[tuple[int, int]]]:
    """``query`` (selecting device_id, start_ps, end_ps, with $p the profile) as intervals by device."""
    out: dict[int, list[tuple[int, int]]] = {}
    for device_id, start, end in run.sql(query, {"p": profile_id}).rows():
        out.setdefault(device_id, []).append((start, end))
    return out


KERNELS = "SELECT device_id, start_ps, start_ps + dur_ps FROM kernels WHERE profile_id = $p AND start_ps IS NOT NULL"
COPIES = "SELECT device_id, start_ps, start_ps + dur_ps FROM memcpys WHERE profile_id = $p AND start_ps IS NOT NULL"
LAUNCHES = """SELECT g.device_id, a.start_ps, g.start_ps
FROM (SELECT profile_id, device_id, correlation_id, start_ps FROM kernels
      UNION ALL SELECT profile_id, device_id, correlation_id, start_ps FROM memcpys) AS g
JOIN api_calls AS a USING (profile_id, correlation_id) WHERE g.profile_id = $p AND a.start_ps < g.start_ps"""


def _gpu_breakdown(run: xprosql.Run, profile_id: str) -> dict[str, float]:
    """A GPU profile's exposed collective, exposed copy, launch and host wait time, and the overlappable collective
    time (per step least(exposed collective, compute)), summed over its complete steps and devices, by a sweep over
    the raw kernels, copies and launch calls (no TPU windows, input events or host collectives: the GPU samples used
    have none)."""
    kernels = run.sql("SELECT device_id, start_ps, start_ps + dur_ps, xprosql_collective(name, 'kernel') IS NOT NULL "
                      "FROM kernels WHERE profile_id = $p AND start_ps IS NOT NULL", {"p": profile_id}).rows()
    compute: dict[int, list] = {}
    comm: dict[int, list] = {}
    for device_id, start, end, is_comm in kernels:
        (comm if is_comm else compute).setdefault(device_id, []).append((start, end))
    copies = _intervals(run, COPIES, profile_id)
    launches = _intervals(run, LAUNCHES, profile_id)
    out = dict.fromkeys(["collective", "overlappable", "copies", "launch", "host_wait", "step"], 0.0)
    for step in _complete_steps(run, profile_id).iter_rows(named=True):
        d, lo, hi = step["device_id"], step["start_ps"], step["end_ps"]
        cmp, com, cpy, lau = compute.get(d, []), comm.get(d, []), copies.get(d, []), launches.get(d, [])
        collective = _minus(com, cmp, lo, hi)
        compute_ps = _length(cmp, lo, hi)
        out["collective"] += collective
        out["overlappable"] += min(collective, compute_ps)
        out["copies"] += _minus(cpy, cmp + com, lo, hi)
        out["launch"] += _minus(lau, cmp + com + cpy, lo, hi)
        # the device idle, nothing launched, with device work later in the step
        ends = [min(e, hi) for s, e in cmp + com + cpy if lo <= s < hi] + [s for s, e in cmp + com + cpy if lo <= s < hi]
        last = max(ends, default=lo)
        out["host_wait"] += (last - lo) - _length(cmp + com + cpy + lau, lo, last)
        out["step"] += hi - lo
    return out


# --- every rule: the findings columns, one row per profile, possible numbers ---------------------------------------

@pytest.mark.parametrize("rule", STEP_RULES)
def test_rule_shares_are_its_saving_over_step_time(rule: str, samples: dict) -> None:
    run = samples["run"]
    for pid, row in _sample_findings(samples, rule).items():
        assert row["rule"] == rule and row["job"] is None and row["rank"] is None
        assert 0 <= row["expected_saving_share"] <= 1 and row["expected_saving_ps"] >= 0
        assert row["severity"] == ("high" if row["expected_saving_share"] >= 0.2 else
                                   "medium" if row["expected_saving_share"] >= 0.05 else "low")
        complete = _complete_steps(run, pid)
        step_ps = complete["wall_ps"].sum() / complete["device_id"].n_unique()
        assert row["expected_saving_ps"] == pytest.approx(row["expected_saving_share"] * step_ps, rel=1e-6, abs=2), pid


# --- launch_bound ----------------------------------------------------------------------------------------------

def test_launch_bound_fires_on_eager_gpu_samples_and_not_on_graphs_or_hosts(samples: dict) -> None:
    ids = samples["ids"]
    found = _sample_findings(samples, "launch_bound")
    for name in ("mi250_rocm.json.gz", "sampled_rank0.json.gz", "sampled_rank1.json.gz", "gpu_v100_tf_bert.xplane.pb",
                 "b200_eager_nccl_rank0.json.gz"):
        assert ids[name] in found, name
    assert found[ids["mi250_rocm.json.gz"]]["severity"] == "high"
    # no GPU (TPU, a CPU-only rank): nothing is launched; sglang decode replays CUDA graphs; one Triton kernel;
    # torch.compile's few long kernels
    for name in ("tpu_v6e_inference.xplane.pb", "cpu_only.json.gz", "mi300_sglang_decode_bs32.json.gz",
                 "triton_example.json.gz", "mi300_torch_compile_triton.json.gz"):
        assert ids[name] not in found, name


@pytest.mark.parametrize("name", ["mi250_rocm.json.gz", "sampled_rank0.json.gz", "gpu_v100_tf_bert.xplane.pb"])
def test_launch_bound_saving_is_the_device_idle_time_with_launches_pending(name: str, samples: dict) -> None:
    run, pid = samples["run"], samples["ids"][name]
    row = _sample_findings(samples, "launch_bound")[pid]
    sweep = _gpu_breakdown(run, pid)
    assert row["expected_saving_share"] == pytest.approx(sweep["launch"] / sweep["step"], rel=0.01)
    assert row["measures"]["launch_overhead_ps"] == pytest.approx(sweep["launch"], rel=0.01)
    # the short kernels of the complete steps, counted from the raw kernels
    complete = _complete_steps(run, pid)
    kernels = run.sql("SELECT device_id, name, start_ps, dur_ps FROM kernels WHERE profile_id = $p AND start_ps IS NOT NULL",
                      {"p": pid}).pl()
    in_steps = kernels.join(complete.select("device_id", "start_ps", "end_ps"), on="device_id", suffix="_step").filter(
        (pl.col("start_ps") >= pl.col("start_ps_step")) & (pl.col("start_ps") < pl.col("end_ps")))
    short = in_steps.filter(pl.col("dur_ps") < 10e6)
    measures = row["measures"]
    assert measures["kernels_count"] == in_steps.height
    assert measures["short_kernels_count"] == short.height > 0
    assert measures["short_kernel_median_ps"] == pytest.approx(short["dur_ps"].median())
    most = short.group_by("name").len().sort(["len", "name"], descending=[True, False])
    assert row["subjects"][0] == most["name"][0]
    assert "CUDA graph" in row["fix"] and "reduce-overhead" in row["fix"]


# --- exposed_communication ----------------------------------------------------------------------------------------

def test_exposed_communication_fires_on_the_nccl_ranks_and_not_on_single_devices(samples: dict) -> None:
    ids = samples["ids"]
    found = _sample_findings(samples, "exposed_communication")
    for name in ("a100_nccl_rank0.json.gz", "sampled_rank0.json.gz", "sampled_rank1.json.gz", "cpu_only.json.gz"):
        assert ids[name] in found, name
    # one GPU, no collectives; the TPU sample's all-reduce is exposed 0.4% of its steps (under 3%); b200's one
    # all-gather 0.03%
    for name in ("h100_qwen1.5_0.5b.json.gz", "mi250_rocm.json.gz", "alexnet.json.gz", "tpu_v6e_inference.xplane.pb",
                 "b200_eager_nccl_rank0.json.gz", "gpu_v100_tf_bert.xplane.pb"):
        assert ids[name] not in found, name
    # the gloo-only rank has no compute to overlap its collectives with: exposed, but nothing to save by overlap
    gloo = found[ids["cpu_only.json.gz"]]
    assert gloo["measures"]["exposed_collective_share"] > 0.5
    assert gloo["expected_saving_ps"] == 0 and gloo["subjects"] == ["gloo:all_reduce"]


@pytest.mark.parametrize("name", ["a100_nccl_rank0.json.gz", "sampled_rank0.json.gz"])
def test_exposed_communication_saving_is_bounded_by_the_compute_to_overlap(name: str, samples: dict) -> None:
    run, pid = samples["run"], samples["ids"][name]
    row = _sample_findings(samples, "exposed_communication")[pid]
    sweep = _gpu_breakdown(run, pid)
    measures = row["measures"]
    assert measures["exposed_collective_ps"] == pytest.approx(sweep["collective"], rel=0.01)
    assert row["expected_saving_share"] == pytest.approx(sweep["overlappable"] / sweep["step"], rel=0.01)
    assert row["expected_saving_share"] <= measures["exposed_collective_share"] + 1e-12
    # the collective kernel with the most time outside compute, from the raw kernels
    assert "ncclKernel" in row["subjects"][0]
    assert "bucket_cap_mb" in row["fix"] and "xla_gpu_enable_latency_hiding_scheduler" in row["fix"]


def test_exposed_communication_names_the_most_exposed_collective_first(samples: dict) -> None:
    run, pid = samples["run"], samples["ids"]["a100_nccl_rank0.json.gz"]
    row = _sample_findings(samples, "exposed_communication")[pid]
    complete = _complete_steps(run, pid)
    kernels = run.sql("SELECT device_id, name, start_ps, start_ps + dur_ps AS end_ps, "
                      "xprosql_collective(name, 'kernel') IS NOT NULL AS comm FROM kernels WHERE profile_id = $p",
                      {"p": pid}).pl()
    compute = [(s, e) for s, e in kernels.filter(~pl.col("comm")).select("start_ps", "end_ps").rows()]
    in_steps = kernels.filter(pl.col("comm")).join(complete.select("device_id", "start_ps", "end_ps"), on="device_id",
                                                   suffix="_step").filter(
        (pl.col("start_ps") >= pl.col("start_ps_step")) & (pl.col("start_ps") < pl.col("end_ps_step")))
    exposed: dict[str, int] = {}
    for kname, s, e in in_steps.select("name", "start_ps", "end_ps").rows():
        exposed[kname] = exposed.get(kname, 0) + (e - s) - _length(compute, s, e)
    assert len(exposed) == 2  # the all-reduce and the broadcast kernels
    ranked = sorted(exposed, key=lambda k: -exposed[k])
    assert row["subjects"] == ranked[: len(row["subjects"])]


# --- exposed_copies ----------------------------------------------------------------------------------------------

def test_exposed_copies_fires_on_the_tpu_host_offload_only(samples: dict) -> None:
    ids = samples["ids"]
    found = _sample_findings(samples, "exposed_copies")
    assert set(found) == {ids["tpu_v6e_inference.xplane.pb"]}
    row = found[ids["tpu_v6e_inference.xplane.pb"]]
    measures = row["measures"]
    assert row["severity"] == "high" and row["title"].startswith("data-transfer-bound")
    assert measures["exposed_host_offload_ps"] > 0 and measures["exposed_dma_ps"] == 0
    assert row["subjects"] and all("host_offload" in s for s in row["subjects"])
    # XProf's own level (30%) keeps it; a share above it drops it
    assert ids["tpu_v6e_inference.xplane.pb"] in _sample_findings(samples, "exposed_copies", min_share=0.3)
    assert not _sample_findings(samples, "exposed_copies", min_share=0.8)


def test_exposed_copies_counts_pageable_gpu_copies(samples: dict) -> None:
    """AlexNet's input copies come from pageable memory: 0.1% of its long step, found with a low threshold."""
    run, pid = samples["run"], samples["ids"]["alexnet.json.gz"]
    row = _sample_findings(samples, "exposed_copies", min_share=0.001)[pid]
    sweep = _gpu_breakdown(run, pid)
    measures = row["measures"]
    assert measures["exposed_dma_ps"] == pytest.approx(sweep["copies"], rel=0.01)
    assert row["expected_saving_share"] == pytest.approx(sweep["copies"] / sweep["step"], rel=0.01)
    complete = _complete_steps(run, pid)
    copies = run.sql("SELECT device_id, start_ps, src_kind, dst_kind FROM memcpys WHERE profile_id = $p", {"p": pid}).pl()
    pageable = copies.join(complete.select("device_id", "start_ps", "end_ps"), on="device_id", suffix="_step").filter(
        (pl.col("start_ps") >= pl.col("start_ps_step")) & (pl.col("start_ps") < pl.col("end_ps"))
        & ((pl.col("src_kind") == "Pageable") | (pl.col("dst_kind") == "Pageable")))
    assert measures["pageable_copies_count"] == pageable.height > 0
    assert row["subjects"][0] == "Memcpy HtoD (Pageable -> Device)"
    assert "pageable" in row["evidence"] and "pin_memory" in row["fix"] and "non_blocking=True" in row["fix"]


# --- host_bound --------------------------------------------------------------------------------------------------

def test_host_bound_fires_where_the_gpu_waits_for_the_host(samples: dict) -> None:
    ids = samples["ids"]
    found = _sample_findings(samples, "host_bound")
    for name in ("a100_nccl_rank0.json.gz", "mi250_rocm.json.gz"):
        assert ids[name] in found, name
    # no step markers: the one "step" is the whole capture, start-up and compilation included (81% "host wait" on the
    # MI300 JAX sample), not a host falling behind its device
    for name in ("b200_eager_nccl_rank0.json.gz", "alexnet.json.gz", "mi300_jax_conv.xplane.pb", "tpu_v6e_inference.xplane.pb",
                 "mi355_jax_te_fused_attn.xplane.pb"):
        assert ids[name] not in found, name
    everything = _sample_findings(samples, "host_bound", min_share=0.0)
    assert ids["mi300_jax_conv.xplane.pb"] not in everything
    assert found[ids["a100_nccl_rank0.json.gz"]]["title"].startswith("host-bound")  # above XProf's 50%
    # busy GPUs (host wait 3-4%), a device that idles at the end of the step instead, the gloo-only rank
    for name in ("h100_qwen1.5_0.5b.json.gz", "mi300_torch_compile_triton.json.gz", "gpu_v100_tf_bert.xplane.pb",
                 "mi300_sglang_decode_bs32.json.gz", "triton_example.json.gz", "cpu_only.json.gz"):
        assert ids[name] not in found, name


@pytest.mark.parametrize("name", ["mi250_rocm.json.gz", "a100_nccl_rank0.json.gz"])
def test_host_bound_saving_is_the_device_idle_time_before_more_work(name: str, samples: dict) -> None:
    run, pid = samples["run"], samples["ids"][name]
    row = _sample_findings(samples, "host_bound")[pid]
    sweep = _gpu_breakdown(run, pid)
    assert row["expected_saving_share"] == pytest.approx(sweep["host_wait"] / sweep["step"], rel=0.01)
    # the subjects are host ops and calls, not annotations or the step
    assert row["subjects"] and not any(s.startswith(("ProfilerStep#", "## ")) for s in row["subjects"])
    assert "synchronize" in row["fix"]


# --- input_bound on a generated DataLoader training loop --------------------------------------------------------------

@pytest.fixture(scope="module")
def loader_profiles(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The DataLoader training loop profiled twice: its loader sleeping LOADER_SLEEP_S per batch, and not (the fix)."""
    from diagnose_profiles import make_dataloader_training_profile
    from wild_profiles import ProfileToolMissing

    base = tmp_path_factory.mktemp("loader")
    try:
        slow = make_dataloader_training_profile(base / "slow")
        fast = make_dataloader_training_profile(base / "fast", sleep_s=0)
    except ProfileToolMissing as exc:
        pytest.skip(str(exc))
    report = xprosql.ingest([slow, fast], into=base / "run", compact=False)
    assert report.ok, str(report)
    run = xprosql.load(base / "run")
    ids = {Path(p).resolve(): pid for pid, p in run.sql("SELECT profile_id, source_path FROM profiles").rows()}
    return {"run": run, "slow": ids[slow.resolve()], "fast": ids[fast.resolve()]}


def _mean_step_ps(run: xprosql.Run, profile_id: str) -> tuple[float, int]:
    """Mean ProfilerStep#N duration over the steps XProf keeps (first and last of more than 5 left out), from the raw
    events; and how many."""
    steps = (run.sql("SELECT name, dur_ps FROM events WHERE profile_id = $p AND name LIKE 'ProfilerStep#%'",
                     {"p": profile_id}).pl()
             .group_by("name").agg(pl.col("dur_ps").max())
             .with_columns(pl.col("name").str.extract(r"#(\d+)").cast(pl.Int64).alias("n")).sort("n"))
    kept = steps.slice(1, steps.height - 2) if steps.height > 5 else steps
    return float(kept["dur_ps"].sum()) / kept.height, kept.height


@pytest.mark.slow
def test_input_bound_saving_matches_the_step_time_a_fast_loader_saves(loader_profiles: dict) -> None:
    from diagnose_profiles import LOADER_SLEEP_S

    run = loader_profiles["run"]
    found = _findings(run, "input_bound")
    assert loader_profiles["fast"] not in found, "the loop without the slow loader is not input-bound"
    row = found[loader_profiles["slow"]]
    slow_ps, steps = _mean_step_ps(run, loader_profiles["slow"])
    fast_ps, _ = _mean_step_ps(run, loader_profiles["fast"])
    measured = (slow_ps - fast_ps) * steps
    assert measured > 0.8 * LOADER_SLEEP_S * 1e12 * steps  # the sleep did slow each step down
    assert row["expected_saving_ps"] == pytest.approx(measured, rel=0.25), (slow_ps, fast_ps, steps)
    assert row["measures"]["steps_count"] == steps
    assert row["severity"] == "high" and row["device"] == "/host:CPU"
    # the loader's iteration events are $input_events' default match
    assert row["subjects"] and row["subjects"][0].startswith("enumerate(DataLoader)#")


@pytest.mark.slow
def test_launch_bound_cannot_fire_on_a_cpu_profile(loader_profiles: dict) -> None:
    """No kernel launches on a CPU: launch_overhead_ps is 0, whatever the loop does."""
    run = loader_profiles["run"]
    assert not run.sql("SELECT 1 FROM api_calls").rows()
    assert not _findings(run, "launch_bound", min_share=1e-9)
