"""Memory: allocator events of every source in one table, their timeline and peaks, against XProf's
memory_profile tool (MI300 XSpace) and an independent walk over the raw Kineto JSON (MI300 sglang);
the compiler's buffer assignment (memory_buffers, hlo_memory) against XProf's memory_viewer tool."""

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
from jax_profiles import _run_jax_program, jax_available

import xprosql
from xprosql.ingest import profile_id_of
from xprosql.protos import hlo_pb2, xplane_pb2

MI300_XSPACE = TEST_DATA / "xspace" / "mi300_jax_conv.xplane.pb"
SGLANG = TEST_DATA / "kineto" / "mi300_sglang_decode_bs32.json.gz"
TPU_XSPACE = TEST_DATA / "xspace" / "tpu_v6e_inference.xplane.pb"
MI355_XSPACE = TEST_DATA / "xspace" / "mi355_jax_te_fused_attn.xplane.pb"
MIB = 1 << 20


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
    peak, peak_ts, live_at_peak = -1, None, {}
    for e in events:
        args = e["args"]
        if args["Bytes"] > 0:
            live[args["Addr"]] = args["Bytes"]
        else:
            live.pop(args["Addr"], None)
        if args["Total Allocated"] > peak:
            peak, peak_ts, live_at_peak = args["Total Allocated"], e["ts"], dict(live)
    origin = min(e["ts"] for e in trace["traceEvents"] if e.get("ph") in ("X", "i") and isinstance(e.get("ts"), float))
    [(allocator, row)] = _peaks(run, SGLANG).items()
    assert allocator == "hip:0"  # c10 device type 6
    assert row["peak_in_use_bytes"] == peak
    assert row["peak_ps"] == pytest.approx((peak_ts - origin) * 1e6, abs=1e3)
    assert row["allocations"] + row["frees"] == len(events)
    assert (row["unfreed"], row["unfreed_bytes"]) == (len(live), sum(live.values()))
    assert row["capacity_bytes"] == trace["deviceProperties"][0]["totalGlobalMem"]
    [every] = run.memory_peaks(profiles=[profile_id_of(SGLANG.read_bytes())], top=None).pl()["live_at_peak"].to_list()
    assert sum(g["blocks"] for g in every) == len(live_at_peak) > 0
    assert sum(g["bytes"] for g in every) == sum(live_at_peak.values())
    assert row["unattributed_at_peak_bytes"] == peak - sum(live_at_peak.values())
    assert all(g["op"] is not None for g in every)  # every [memory] event of this trace is inside an op


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
        # XProf keeps every snapshot in its timeline below 1,000 events an allocator.
        activities = [s["activityMetadata"]["memoryActivity"] for s in profile["sampledTimelineSnapshots"]]
        assert (ours[allocator]["allocations"], ours[allocator]["frees"]) == (
            activities.count("ALLOCATION"), activities.count("DEALLOCATION")), allocator
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


@pytest.mark.slow
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
    # Per step: the rows partition the profile's events, and each step's peak holds one more kept tensor.
    with xprosql.load(tmp_path / "run") as run:
        whole = run.memory_peaks().pl()
        steps = run.memory_peaks(by_step=True).pl().filter(pl.col("step_index").is_not_null()).sort("step_index")
        every_step = run.memory_peaks(by_step=True).pl()
    assert every_step["allocations"].sum() == whole["allocations"].sum()
    assert every_step["frees"].sum() == whole["frees"].sum() and every_step["unfreed"].sum() == whole["unfreed"].sum()
    assert every_step["peak_in_use_bytes"].max() == whole["peak_in_use_bytes"].max()
    assert steps.height >= 3
    growth = steps["peak_in_use_bytes"].diff().drop_nulls()
    assert growth.to_list() == pytest.approx([mib] * growth.len(), rel=0.05)
    kept_at_peak = [g for g in whole["live_at_peak"].item() if g["shape"] is None and g["bytes"] >= 3 * mib]
    assert kept_at_peak and kept_at_peak[0]["op"] in ("aten::empty", "aten::ones")


# XProf's memory viewer per module: it reads the <module>(<program id>).hlo_proto.pb files that listing the
# XSpace's tools extracts beside it, and takes the module's name with its program id.
MEMORY_VIEWER = """
import json, sys
from pathlib import Path
from xprof.convert.raw_to_tool_data import xspace_to_tool_data, xspace_to_tool_names
space = sys.argv[1]
xspace_to_tool_names([space])
out = {}
for proto in sorted(Path(space).parent.glob("*.hlo_proto.pb")):
    name = proto.name.removesuffix(".hlo_proto.pb")
    data, _ = xspace_to_tool_data([space], "memory_viewer", {"module_name": name})
    out[name] = json.loads(data)
print(json.dumps(out))
"""


def _memory_viewer(xspace: Path, folder: Path) -> dict[str, dict]:
    folder.mkdir()
    copy = folder / xspace.name
    shutil.copy(xspace, copy)
    done = subprocess.run([sys.executable, "-c", MEMORY_VIEWER, str(copy)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


def _assert_hlo_memory_equals_memory_viewer(run: xprosql.Run, xspace: Path, tmp_path: Path) -> int:
    """Every module's peak, its position, the whole list of buffers at the peak and the totals; returns the modules."""
    xprof = _memory_viewer(xspace, tmp_path / "xprof")
    ours = run.analysis("hlo_memory", profiles=[profile_id_of(xspace.read_bytes())], top=None).pl()
    assert ours.height == len(xprof) > 0
    for name, viewer in xprof.items():
        module, program_id = name[:-1].rsplit("(", 1)
        [row] = ours.filter((pl.col("module") == module) & (pl.col("program_id") == int(program_id))).iter_rows(named=True)
        # proto3 JSON leaves out zeros.
        for column, field in [("peak_heap_bytes", "peakHeapMib"), ("peak_unpadded_heap_bytes", "peakUnpaddedHeapMib"),
                              ("entry_parameters_bytes", "entryComputationParametersMib"),
                              ("maybe_live_out_bytes", "maybeLiveOutMib"), ("non_reusable_bytes", "nonReusableMib"),
                              ("total_allocation_bytes", "totalBufferAllocationMib"),
                              ("indefinite_allocation_bytes", "indefiniteBufferAllocationMib")]:
            assert row[column] / MIB == pytest.approx(viewer.get(field, 0.0), rel=1e-12, abs=1e-12), (name, column)
        assert row["peak_position"] == viewer.get("peakHeapSizePosition", 0), name
        listed = [h for h in viewer.get("maxHeapBySize", []) if h.get("logicalBufferId", 0) != -1]
        small = sum(h.get("logicalBufferSizeMib", 0.0) for h in viewer.get("maxHeapBySize", []) if h.get("logicalBufferId") == -1)
        assert row["small_buffers_bytes"] / MIB == pytest.approx(small, abs=1e-12), name
        groups = {"Parameter": "parameter", "Output": "output", "Temporary": "temp", "Constant": "constant"}
        # XProf's sort by size is not stable: ties compare in id order on both sides.
        theirs = sorted(((round(h.get("logicalBufferSizeMib", 0.0) * MIB), h.get("logicalBufferId", 0), h["instructionName"],
                          h["shapeString"], groups[h["groupName"]]) for h in listed), key=lambda t: (-t[0], t[1]))
        assert [(b["size_bytes"], b["logical_buffer_id"], b["instruction"], b["shape"], b["kind"])
                for b in row["top_buffers"]] == theirs, name
    return len(xprof)


@pytest.mark.parametrize("xspace", [TPU_XSPACE, MI355_XSPACE, MI300_XSPACE], ids=lambda p: p.name.split(".")[0])
def test_hlo_memory_equals_xprofs_memory_viewer(run: xprosql.Run, xspace: Path, tmp_path: Path) -> None:
    pytest.importorskip("xprof")
    assert _assert_hlo_memory_equals_memory_viewer(run, xspace, tmp_path) >= 4


# A loop body whose output reuses its input's memory: the heap simulator records a SHARE_WITH.
SHARING_PROGRAM = """
import sys
import jax, jax.numpy as jnp

@jax.jit
def f(x, w):
    y = jax.lax.fori_loop(0, 3, lambda i, c: jnp.tanh(c @ w) + c, x)
    return jnp.sort(y, axis=0).at[0].set(1.0).sum(), jnp.cumsum(y, axis=1)

x, w = jnp.ones((256, 256)), jnp.full((256, 256), 0.01)
f(x, w)[0].block_until_ready()
with jax.profiler.trace(sys.argv[1]):
    f(x, w)[0].block_until_ready()
"""


def test_a_shared_buffer_counts_once_as_xprof_counts_it(tmp_path: Path) -> None:
    if not jax_available():
        pytest.skip("jax is not installed")
    pytest.importorskip("xprof")
    profile = _run_jax_program(tmp_path / "log", SHARING_PROGRAM, [], label="sharing", timeout_s=300)
    assert xprosql.ingest([profile], into=tmp_path / "run").ok
    with xprosql.load(tmp_path / "run") as generated:
        [(shared,)] = generated.sql("SELECT count(*) FROM memory_buffers WHERE shares_with IS NOT NULL").rows()
        assert shared >= 1  # the case this test is about
        _assert_hlo_memory_equals_memory_viewer(generated, profile, tmp_path)


def test_memory_buffers_hold_every_logical_buffer_and_allocation(run: xprosql.Run) -> None:
    space = xplane_pb2.XSpace.FromString(TPU_XSPACE.read_bytes())
    [metadata] = [p for p in space.planes if p.name == "/host:metadata"]
    hlo_stat = next(k for k, v in metadata.stat_metadata.items() if v.name == "Hlo Proto")
    expected = {}
    for md in metadata.event_metadata.values():
        for stat in md.stats:
            if stat.metadata_id == hlo_stat:
                proto = hlo_pb2.HloProto.FromString(stat.bytes_value)
                assignment = proto.buffer_assignment
                expected[proto.hlo_module.name] = (
                    sorted(b.id for b in assignment.logical_buffers),
                    sum(1 for a in assignment.buffer_allocations if not a.assigned))
    rows = run.sql("SELECT module, list(logical_buffer_id ORDER BY logical_buffer_id) FILTER (WHERE logical_buffer_id IS NOT NULL),"
                   " count(*) FILTER (WHERE logical_buffer_id IS NULL) FROM memory_buffers WHERE profile_id = ? GROUP BY 1",
                   [profile_id_of(TPU_XSPACE.read_bytes())]).rows()
    assert {module: (ids, empty) for module, ids, empty in rows} == expected


def test_the_fleet_view_finds_each_jobs_peak_and_who_came_near_capacity(tmp_path: Path) -> None:
    assert xprosql.ingest([SGLANG, MI300_XSPACE], into=tmp_path / "run", tags={"job": "pair"}).ok
    with xprosql.load(tmp_path / "run") as run:
        peaks = run.memory_peaks().pl()
        shares = peaks.group_by("profile_id").agg(pl.col("peak_capacity_share").max()).sort("peak_capacity_share")
        low, high = shares["peak_capacity_share"].to_list()
        assert 0 < low < high < 1
        # Near capacity between the two: only the closer profile.
        within = 1 - (low + high) / 2
        [row] = run.fleet_memory(within=within).pl().iter_rows(named=True)
        stepped = run.fleet_memory(within=within, by_step=True).pl()
    assert (row["job"], row["profiles"]) == ("tag:pair", 2)
    top = peaks.sort("peak_in_use_bytes", descending=True).row(0, named=True)
    assert (row["peak_in_use_bytes"], row["peak_profile_id"], row["peak_allocator"]) == (
        top["peak_in_use_bytes"], top["profile_id"], top["allocator"])
    assert row["near_capacity_profile_ids"] == [shares["profile_id"][1]] and row["near_capacity_profiles"] == 1
    assert stepped["step_index"].null_count() < stepped.height
    assert stepped["peak_in_use_bytes"].max() == row["peak_in_use_bytes"]
