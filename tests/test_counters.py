"""The counters table: XSpace counter events, time series and plane stats; Kineto profiler ranges; GPU FLOPs.

The XSpace planes here are built in the test (no public profile has TPU
counters): small planes laid out as XProf's perf_counters tool reads them
(xprof/convert/xplane_to_perf_counters.cc), and the PM-sampling `_counters_`
line as XLA's CUPTI collector writes it (one zero-length event per metric and
interval, the value in a stat named like the metric).
"""

from __future__ import annotations

import gzip
import importlib.util
import json
from pathlib import Path

import polars as pl
import pytest
from conftest import TEST_DATA

import xprosql
from xprosql.ingest import counters
from xprosql.models.tables import TABLES
from xprosql.protos import xplane_pb2
from xprosql.queries.utilization import gpu_flops

CUPTI_COUNTERS = TEST_DATA / "kineto" / "cupti_counters.json.gz"
ALL_ONES = 0xFFFFFFFFFFFFFFFF
TC = "VF_CHIP_TC_TCS_TC_MISC_TCS_STATS_TCS_STATS_COUNTERS_UNPRIVILEGED_COUNT_"
needs_xprof = pytest.mark.skipif(importlib.util.find_spec("xprof") is None,
                                 reason="the xprof wheel (test extra) is not installed")


def _stat(plane: xplane_pb2.XPlane, name: str) -> int:
    for sid, md in plane.stat_metadata.items():
        if md.name == name:
            return sid
    sid = len(plane.stat_metadata) + 1
    plane.stat_metadata[sid].id = sid
    plane.stat_metadata[sid].name = name
    return sid


def _counter_plane(samples: list[dict[str, int]], *, model: str = "TPU v6 Lite") -> xplane_pb2.XPlane:
    """A TPU plane with one line per sample (kernel 'fusion.1', line ids 10, 11, ...) and one event per counter."""
    plane = xplane_pb2.XPlane(id=1, name="/device:TPU:0")
    plane.stats.add(metadata_id=_stat(plane, "device_type_string"), str_value=model)
    plane.stats.add(metadata_id=_stat(plane, "device_id"), int64_value=0)
    names = sorted({name for sample in samples for name in sample})
    for mid, name in enumerate(names, start=1):
        plane.event_metadata[mid].id = mid
        plane.event_metadata[mid].name = name
    ids = {name: mid for mid, name in enumerate(names, start=1)}
    for i, sample in enumerate(samples):
        line = plane.lines.add(id=10 + i, name="fusion.1", timestamp_ns=1_000 + i * 1_000)
        for name, value in sample.items():
            event = line.events.add(metadata_id=ids[name], offset_ps=0, duration_ps=1_000_000)
            event.stats.add(metadata_id=_stat(plane, "counter_value"), uint64_value=value)
    return plane


def _warehouse(tmp_path: Path, *planes: xplane_pb2.XPlane) -> xprosql.Run:
    space = xplane_pb2.XSpace(hostnames=["host0"])
    space.planes.extend(planes)
    path = tmp_path / "counters.xplane.pb"
    path.write_bytes(space.SerializeToString())
    report = xprosql.ingest(path, into=tmp_path / "run")
    assert report.ok, str(report)
    return xprosql.load(tmp_path / "run")


def test_counter_events_unreadable_values_and_names() -> None:
    plane = _counter_plane([{TC + "CYCLES": 1750, TC + "MXU_BUSY_1": ALL_ONES}])
    line = plane.lines[0]
    # id and description on the metadata, the set as an interned string on the event.
    md = plane.event_metadata[1]
    md.stats.add(metadata_id=_stat(plane, "performance_counter_id"), uint64_value=3257466888)
    md.stats.add(metadata_id=_stat(plane, "performance_counter_description"), str_value="cycles")
    line.events[0].stats.add(metadata_id=_stat(plane, "performance_counter_sets"), ref_value=_stat(plane, "basic"))
    # An int64 -1 is the same all-ones word: unreadable too.
    extra = line.events.add(metadata_id=1)
    extra.stats.add(metadata_id=_stat(plane, "counter_value"), int64_value=-1)

    rows, unreadable = counters.xspace_counter_rows(plane, device_id=3, first_event_id=100, first_track_id=0,
                                                    start_ns=0)
    assert unreadable == 2
    assert rows == [(100, 3, "fusion.1", 10, 3257466888, (TC + "CYCLES").lower(), "cycles", "basic", 1750, 1750.0,
                     1_000_000, 2_000_000)]


def test_counter_line_time_series_and_plane_stats() -> None:
    plane = xplane_pb2.XPlane(id=2, name="/device:GPU:0")
    plane.stats.add(metadata_id=_stat(plane, "matrix_unit_utilization_percent"), double_value=37.5)
    plane.stats.add(metadata_id=_stat(plane, "clock_rate"), uint64_value=1_410_000)
    line = plane.lines.add(id=7, name="_counters_", timestamp_ns=10)
    for mid, metric in enumerate(("sm__throughput.avg.pct_of_peak_sustained_elapsed", "dram__bytes.sum"), start=1):
        plane.event_metadata[mid].name = metric
        for interval in range(3):
            event = line.events.add(metadata_id=mid, offset_ps=interval * 500)
            event.stats.add(metadata_id=_stat(plane, metric), double_value=10.0 * interval + mid)
    assert counters.has_counters(plane)

    rows, unreadable = counters.xspace_counter_rows(plane, device_id=0, first_event_id=0, first_track_id=0,
                                                    start_ns=0)
    assert unreadable == 0
    frame = pl.DataFrame(rows, schema=list(TABLES["counters"].names), orient="row")
    plane_rows = frame.filter(pl.col("event_id").is_null())
    assert plane_rows.select("counter", "value_double", "counter_set").rows() == [
        ("matrix_unit_utilization_percent", 37.5, "plane")]
    series = frame.filter(pl.col("kernel") == "_counters_").sort("event_id")
    assert series.height == 6
    assert series["sample"].to_list() == [0, 1, 2, 0, 1, 2]  # the interval's rank within the line
    assert series["value_double"].to_list() == [1.0, 11.0, 21.0, 2.0, 12.0, 22.0]
    assert series["start_ps"].to_list() == [10_000 + 500 * i for i in (0, 1, 2, 0, 1, 2)]


def test_plain_planes_have_no_counters() -> None:
    plane = xplane_pb2.XPlane(name="/host:CPU")
    plane.stats.add(metadata_id=_stat(plane, "clock_rate"), uint64_value=1)
    assert not counters.has_counters(plane)


@needs_xprof
def test_counter_names_come_from_the_xprof_wheel() -> None:
    from xprof.convert import counter_extractor  # XProf's own reader of the same headers: the oracle

    for generation in ("v6e", "v7x"):
        theirs = {c["val"]: c["name"] for c in counter_extractor.get_all_counters(generation)}
        assert counters.counter_names(generation) == theirs
    assert counters.counter_names("v5p") == {}


@needs_xprof
def test_unnamed_counter_events_are_named_from_the_dictionary() -> None:
    plane = _counter_plane([{"": 5}], model="TPU v7x")
    event = plane.lines[0].events[0]
    from xprof.convert import counter_extractor

    suffix = "die1_tc_tcs_tc_misc_tcs_stats_tcs_stats_counters_unprivileged_count_cycles"
    cycles = next(c for c in counter_extractor.get_all_counters("v7x") if c["name"].endswith(suffix))
    event.stats.add(metadata_id=_stat(plane, "performance_counter_id"), uint64_value=cycles["val"])
    rows, _ = counters.xspace_counter_rows(plane, device_id=0, first_event_id=0, first_track_id=0, start_ns=0)
    assert [(r[4], r[5]) for r in rows] == [(cycles["val"], cycles["name"])]


def test_utilization_is_cycle_weighted_with_the_busiest_sample(tmp_path: Path) -> None:
    # Two samples of one kernel: a long one at 10% MXU, a short one at 90%.
    long, short = 1_000_000, 10_000
    plane = _counter_plane([
        {TC + "CYCLES": long, TC + "MXU_BUSY_2": long // 10},
        {TC + "CYCLES": short, TC + "MXU_BUSY_2": short * 9 // 10, TC + "MXU_BUSY_1": 0},
        # Cycles unreadable: the sample has no TensorCore metrics at all.
        {TC + "CYCLES": ALL_ONES, TC + "MXU_BUSY_2": 5},
    ])
    run = _warehouse(tmp_path, plane)
    assert run.profiles["drop_reasons"][0].to_list() == ["1 counter values 0xFFFFFFFFFFFFFFFF (could not be read)"]
    summary = run.utilization().pl()
    chip = summary.filter(pl.col("kernel").is_null() & pl.col("device_id").is_not_null()).row(0, named=True)
    weighted = (long // 10 + short * 9 // 10) / (long + short)
    assert chip["mxu_utilization"] == pytest.approx(weighted)
    assert chip["mxu_utilization"] != pytest.approx((0.1 + 0.9) / 2)  # not the mean of the samples' ratios
    assert chip["mxu_busiest_utilization"] == pytest.approx(0.9)
    assert chip["mxu_busiest_sample"] == 11
    assert chip["samples"] == 2 and chip["chip"] == 0 and chip["generation"] == "v6e"
    per_sample = run.utilization(level="samples").pl().filter(pl.col("metric") == "Avg MXU Busy")
    assert sorted(per_sample["sample"].to_list()) == [10, 11]  # sample 12 lost its cycle counter
    # No vector counters in the file: XProf's rule, an absent counter counts 0.
    assert chip["vector_utilization"] == 0.0
    assert chip["hbm_utilization"] == 0.0  # the row exists (cycles known); no HBM counter read
    profile = summary.filter(pl.col("device_id").is_null()).row(0, named=True)  # one chip: the same numbers
    assert profile["mxu_utilization"] == pytest.approx(weighted) and profile["kernel"] is None


def test_cupti_counters_ranges_and_flops(tmp_path: Path) -> None:
    trace = json.loads(gzip.decompress(CUPTI_COUNTERS.read_bytes()))
    ranges = [e for e in trace["traceEvents"] if e.get("cat") == "cuda_profiler_range"]
    assert len(ranges) == 77
    report = xprosql.ingest(CUPTI_COUNTERS, into=tmp_path / "run")
    assert report.ok, str(report)
    run = xprosql.load(tmp_path / "run")

    ours = run.sql("SELECT sample, counter, value FROM counters ORDER BY sample, counter").rows()
    expected = sorted((i, k, v) for i, e in enumerate(sorted(ranges, key=lambda e: e["ts"])) for k, v in e["args"].items())
    assert sorted(ours) == expected  # all 77 ranges, every metric, exact values
    assert len(ours) == 77 * 9

    flops = gpu_flops(run.engine).pl().sort("sample")
    assert flops.height == 77
    for (i, event), row in zip(enumerate(sorted(ranges, key=lambda e: e["ts"])), flops.iter_rows(named=True)):
        args = event["args"]
        by_precision = {
            p: sum(args[f"smsp__sass_thread_inst_executed_op_{p}{op}_pred_on.sum"] * (2 if op == "fma" else 1)
                   for op in ("add", "mul", "fma"))
            for p in "dfh"
        }
        assert row["sample"] == i and row["kernel"] == event["name"]
        assert (row["fp64_flops"], row["fp32_flops"], row["fp16_flops"]) == (by_precision["d"], by_precision["f"],
                                                                           by_precision["h"])
        assert row["flops"] == sum(by_precision.values())
        assert row["flop_rate"] == pytest.approx(row["flops"] / (event["dur"] * 1e-6))
    assert flops["flops"].sum() > 10**10
