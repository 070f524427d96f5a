"""Memory: allocator events of every source in one table, their timeline and peaks, against XProf's
memory_profile tool (MI300 XSpace) and an independent walk over the raw Kineto JSON (MI300 sglang)."""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
from conftest import TEST_DATA

import xprosql
from xprosql.ingest import profile_id_of

MI300_XSPACE = TEST_DATA / "xspace" / "mi300_jax_conv.xplane.pb"
SGLANG = TEST_DATA / "kineto" / "mi300_sglang_decode_bs32.json.gz"


@pytest.fixture(scope="module")
def run(samples_warehouse: Path) -> xprosql.Run:
    return xprosql.load(samples_warehouse)


def _peaks(run: xprosql.Run, path: Path) -> dict[str, dict]:
    rows = run.analysis("memory_peaks", profiles=[profile_id_of(path.read_bytes())]).pl()
    return {r["allocator"]: r for r in rows.iter_rows(named=True)}


def test_kineto_peaks_and_unfreed_blocks_equal_a_walk_over_the_raw_json(run: xprosql.Run) -> None:
    trace = json.loads(gzip.decompress(SGLANG.read_bytes()))
    events = sorted((e for e in trace["traceEvents"] if e.get("name") == "[memory]"), key=lambda e: e["ts"])
    assert len(events) == 1014
    live: dict[int, int] = {}
    peak, peak_ts = -1, None
    for e in events:
        args = e["args"]
        if args["Total Allocated"] > peak:
            peak, peak_ts = args["Total Allocated"], e["ts"]
        if args["Bytes"] > 0:
            live[args["Addr"]] = args["Bytes"]
        else:
            live.pop(args["Addr"], None)
    origin = min(e["ts"] for e in trace["traceEvents"] if e.get("ph") in ("X", "i") and isinstance(e.get("ts"), float))
    [(allocator, row)] = _peaks(run, SGLANG).items()
    assert allocator == "hip:0"  # c10 device type 6
    assert row["peak_in_use_bytes"] == peak
    assert row["peak_ps"] == pytest.approx((peak_ts - origin) * 1e6, abs=1e3)
    assert row["allocations"] + row["frees"] == len(events)
    assert (row["unfreed"], row["unfreed_bytes"]) == (len(live), sum(live.values()))
    assert row["capacity_bytes"] == trace["deviceProperties"][0]["totalGlobalMem"]


def test_xspace_peaks_equal_xprofs_memory_profile(run: xprosql.Run, tmp_path: Path) -> None:
    pytest.importorskip("xprof")
    copy = tmp_path / MI300_XSPACE.name  # the tool writes caches beside its input
    shutil.copy(MI300_XSPACE, copy)
    script = ("import json, sys\nfrom xprof.convert.raw_to_tool_data import xspace_to_tool_data\n"
              "data, _ = xspace_to_tool_data([sys.argv[1]], 'memory_profile', {'use_saved_result': False})\n"
              "print(data if isinstance(data, str) else data.decode())\n")
    done = subprocess.run([sys.executable, "-c", script, str(copy)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    xprof = json.loads(done.stdout)["memoryProfilePerAllocator"]
    ours = _peaks(run, MI300_XSPACE)
    assert set(ours) == set(xprof) and len(ours) == 8
    for allocator, profile in xprof.items():
        summary = profile["profileSummary"]
        assert ours[allocator]["peak_in_use_bytes"] == int(summary["peakStats"]["peakBytesInUse"]), allocator
        assert ours[allocator]["allocator_peak_bytes"] == int(summary["peakBytesUsageLifetime"]), allocator
        assert ours[allocator]["fragmentation_at_peak"] == pytest.approx(summary["peakStats"]["fragmentation"], abs=1e-6)
        assert ours[allocator]["xprof_peak_offset_ps"] == int(summary["peakStatsTimePs"]), allocator
        assert ours[allocator]["peak_ps"] <= ours[allocator]["xprof_peak_offset_ps"]  # ours: the first time


def test_the_timeline_holds_every_event_or_the_highest_of_each_span(run: xprosql.Run) -> None:
    pid = profile_id_of(SGLANG.read_bytes())
    every = run.analysis("memory_timeline", profiles=[pid]).pl()
    assert every.height == 1014 and every["bucket"].null_count() == every.height
    spans = run.analysis("memory_timeline", profiles=[pid], buckets=50).pl()
    assert spans["events"].sum() == every.height and spans["bucket"].max() <= 49
    assert spans["in_use_bytes"].max() == every["in_use_bytes"].max()
    assert spans.filter(pl.col("bucket") == spans["bucket"].min())["start_ps"].item() <= every["start_ps"].min()


LEAKY_PROGRAM = """
import sys
import torch

kept = []
schedule = torch.profiler.schedule(wait=0, warmup=0, active=4, repeat=1)
with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True,
                            record_shapes=True, schedule=schedule,
                            on_trace_ready=torch.profiler.tensorboard_trace_handler(sys.argv[1], worker_name="leaky")) as prof:
    for _ in range(4):
        x = torch.randn(64, 64)
        y = (x @ x).sum()          # freed within the step
        kept.append(torch.ones(1024, 256))   # 1 MiB kept: a leak of one tensor per step
        prof.step()
"""


def test_a_tensor_kept_every_step_is_named_with_its_growth(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    done = subprocess.run([sys.executable, "-c", LEAKY_PROGRAM, str(tmp_path / "log")], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    traces = list((tmp_path / "log").glob("leaky*.pt.trace.json"))
    assert len(traces) == 1
    assert xprosql.ingest(traces, into=tmp_path / "run").ok
    leaks = xprosql.load(tmp_path / "run").memory_leaks().pl()
    mib = 1024 * 256 * 4
    kept = leaks.filter(pl.col("unfreed_bytes") >= 3 * mib)
    assert kept.height == 1, leaks
    row = kept.row(0, named=True)
    assert row["allocator"] == "cpu" and row["unfreed"] in (3, 4) and row["unfreed_bytes"] == row["unfreed"] * mib
    assert row["top_op"] == "aten::ones" and row["op"] in ("aten::empty", "aten::ones")
    assert row["steps"] >= 3 and row["growth_per_step_bytes"] == pytest.approx(mib, rel=0.05)
