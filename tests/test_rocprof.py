"""rocprofv3 JSON (``--output-format json``) into the warehouse, checked against the raw file.

The real sample (tests/data/rocprof: 8 gfx950 GPUs, 43,915 kernel dispatches, from AMD's TraceLens tests)
is walked here with the json module, independently of the decoder: kernels, their time and busy time per GPU,
the run's window and the devices come from that walk and from AMD's data sheet, never from our own output.
The sample has kernel dispatches only (no HIP, marker, copy, allocation or counter records: that run did not
enable them), so those kinds are checked on a file built here from the sample's own sections with records
laid out as rocprofiler-sdk serialises them (include/rocprofiler-sdk/cxx/serialization/save.hpp,
lib/output/stream_info.hpp, lib/output/counter_info.hpp): hand-built input only for what no real file shows.
"""

from __future__ import annotations

import copy
import functools
import gzip
import json
import resource
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest
from conftest import TEST_DATA, tree_digest

import xprosql
from xprosql.ingest import profile_id_of
from xprosql.ingest import rocprof as rocprof_module
from xprosql.models import hardware

SAMPLE = TEST_DATA / "rocprof" / "mi355_rocprofv3_kernels.json.gz"
T, G = 1e12, 1e9
# AMD's data sheets (whole product): fp16/bf16 dense matrix FLOP/s, HBM bytes/s. MI350X: 2.3 PFLOP/s (256 CUs
# x 4,096 FLOP per clock x 2.2 GHz), 8 TB/s; MI355X: 2.5 PFLOP/s, 8 TB/s.
DATA_SHEET = {"AMD Instinct MI350X": (2306.9 * T, 8000 * G), "AMD Instinct MI355X": (2500 * T, 8000 * G)}


@functools.cache
def _text(path: Path) -> bytes:
    data = path.read_bytes()
    return gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data


def _raw(path: Path = SAMPLE) -> dict[str, Any]:
    return json.loads(_text(path))


def _union_ns(intervals: list[tuple[int, int]]) -> int:
    total, reach = 0, None
    for start, end in sorted(intervals):
        if reach is None or start > reach:
            total += end - start
            reach = end
        elif end > reach:
            total += end - reach
            reach = end
    return total


@pytest.fixture(scope="module")
def raw() -> dict[str, Any]:
    return _raw()["rocprofiler-sdk-tool"][0]


@pytest.fixture(scope="module")
def walk(raw: dict[str, Any]) -> dict[int, dict[str, Any]]:
    """Per GPU ordinal (the agent's logical_node_type_id): kernel count, summed and union time (ns), span."""
    ordinal = {a["id"]["handle"]: a["logical_node_type_id"] for a in raw["agents"] if a["type"] == 2}
    out: dict[int, dict[str, Any]] = {}
    for record in raw["buffer_records"]["kernel_dispatch"]:
        gpu = ordinal[record["dispatch_info"]["agent_id"]["handle"]]
        entry = out.setdefault(gpu, {"n": 0, "sum": 0, "intervals": []})
        entry["n"] += 1
        entry["sum"] += record["end_timestamp"] - record["start_timestamp"]
        entry["intervals"].append((record["start_timestamp"], record["end_timestamp"]))
    for entry in out.values():
        entry["busy"] = _union_ns(entry["intervals"])
        entry["first"] = min(s for s, _ in entry["intervals"])
        entry["last"] = max(e for _, e in entry["intervals"])
    return out


@pytest.fixture(scope="module")
def run_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("rocprof") / "run"
    report = xprosql.ingest(SAMPLE, into=root)
    assert report.ok, str(report)
    return root


@pytest.fixture(scope="module")
def run(run_root: Path) -> xprosql.Run:
    return xprosql.load(run_root)


def test_kernels_per_gpu_equal_the_raw_walk(run: xprosql.Run, walk: dict[int, dict[str, Any]]) -> None:
    rows = run.sql("""SELECT d.ordinal, count(*) AS n, sum(k.dur_ps) AS total
                      FROM kernels AS k JOIN devices AS d USING (profile_id, device_id) GROUP BY 1""").rows()
    assert {r[0]: (r[1], r[2]) for r in rows} == {gpu: (w["n"], w["sum"] * 1000) for gpu, w in walk.items()}
    assert sum(w["n"] for w in walk.values()) == 43915


def test_busy_time_and_temporal_breakdown_over_the_run(run: xprosql.Run, raw: dict[str, Any],
                                                       walk: dict[int, dict[str, Any]]) -> None:
    breakdown = run.analysis("hta.temporal_breakdown").pl()
    ordinals = dict(run.sql("SELECT device_id, ordinal FROM devices WHERE kind = 'gpu'").rows())
    assert {ordinals[d] for d in breakdown["device_id"]} == set(walk)
    init, fini = raw["metadata"]["init_time"], raw["metadata"]["fini_time"]
    for row in breakdown.iter_rows(named=True):
        w = walk[ordinals[row["device_id"]]]
        assert row["kernel_time_ps"] == (w["last"] - w["first"]) * 1000  # HTA's span: first kernel to last
        assert row["idle_ps"] == (w["last"] - w["first"] - w["busy"]) * 1000
        assert row["compute_ps"] + row["non_compute_ps"] == w["busy"] * 1000
        assert 0 <= row["idle_pct"] <= 100
    # The run's window is init_time..fini_time: the profile, and its one step (rocprofv3 marks none).
    profile = run.sql("SELECT start_ns, duration_ps, format, host FROM profiles").rows()[0]
    assert profile == (init, (fini - init) * 1000, "rocprof", raw["metadata"]["node"]["hostname"])
    steps = run.analysis("steps.steps").pl()
    for row in steps.iter_rows(named=True):
        w = walk[ordinals[row["device_id"]]]
        assert (row["source"], row["start_ps"], row["wall_ps"]) == ("profile", 0, (fini - init) * 1000)
        assert (row["busy_ps"], row["idle_ps"]) == (w["busy"] * 1000, (fini - init - w["busy"]) * 1000)


def test_devices_are_the_gpu_agents_with_their_chip_peaks(run: xprosql.Run, raw: dict[str, Any]) -> None:
    gpus = sorted((a for a in raw["agents"] if a["type"] == 2), key=lambda a: a["logical_node_type_id"])
    rows = run.sql("SELECT * FROM devices WHERE kind = 'gpu' ORDER BY ordinal").pl().to_dicts()
    assert len(rows) == len(gpus) == 8
    for row, agent in zip(rows, gpus, strict=True):
        # The file's own board name wins (this sample's agents say MI350X: gfx950 at 2.2 GHz, device 0x75a0).
        assert row["model"] == agent["product_name"]
        assert row["name"] == f"/device:GPU:{agent['logical_node_type_id']}"
        assert row["compute_capability"] == "9.5" and agent["name"] == "gfx950"
        assert row["core_count"] == agent["cu_count"]
        assert row["memory_bytes"] == sum(bank["size_in_bytes"] for bank in agent["mem_banks"])
        assert row["clock_rate_khz"] == agent["max_engine_clk_fcompute"] * 1000
        assert (row["peak_flops_per_s"], row["peak_hbm_bytes_per_s"]) == pytest.approx(DATA_SHEET[agent["product_name"]])
        assert row["peak_source"] == "hardware_model"
    # Without a board name, the gfx target and CUs give the chip (gfx950 with 256 CUs: the MI355X row).
    generic = hardware.device_model("", compute_capability=(9, 5), sm_count=256, memory_bytes=309220868096, vendor="AMD")
    assert hardware.chip_for_model(generic) is not None and generic in DATA_SHEET


def test_kernel_names_queues_and_launch_sizes_are_the_records(run: xprosql.Run, raw: dict[str, Any]) -> None:
    names = {s["kernel_id"]: s["formatted_kernel_name"] for s in raw["kernel_symbols"]}
    expected: dict[tuple[str, int], int] = {}
    for record in raw["buffer_records"]["kernel_dispatch"]:
        info = record["dispatch_info"]
        key = (names[info["kernel_id"]], info["queue_id"]["handle"])
        expected[key] = expected.get(key, 0) + 1
    got = run.sql("SELECT CAST(name AS VARCHAR), stream_id, count(*) FROM kernels GROUP BY 1, 2").rows()
    assert {(n, s): c for n, s, c in got} == expected
    record = raw["buffer_records"]["kernel_dispatch"][100]
    info = record["dispatch_info"]
    row = run.sql("SELECT k.*, t.name AS track FROM kernels AS k JOIN tracks AS t USING (profile_id, track_id) "
                  "WHERE correlation_id = $c", {"c": record["correlation_id"]["internal"]}).pl().to_dicts()[0]
    assert (row["grid_x"], row["grid_y"], row["grid_z"]) == tuple(info["grid_size"][a] for a in "xyz")
    assert (row["block_x"], row["block_y"], row["block_z"]) == tuple(info["workgroup_size"][a] for a in "xyz")
    assert row["track"] == f"Queue #{info['queue_id']['handle']}"
    stats = dict(run.sql("SELECT CAST(stat AS VARCHAR), coalesce(CAST(int_value AS VARCHAR), str_value) FROM event_stats "
                         "WHERE event_id = $e", {"e": row["event_id"]}).rows())
    assert json.loads(stats["grid_size"]) == [info["grid_size"][a] for a in "xyz"]
    assert json.loads(stats["workgroup_size"]) == [info["workgroup_size"][a] for a in "xyz"]
    assert int(stats["dispatch_id"]) == info["dispatch_id"] and int(stats["private_segment_size"]) == info["private_segment_size"]
    assert run.sql("SELECT metadata_id FROM events WHERE event_id = $e", {"e": row["event_id"]}).rows() == [(info["kernel_id"],)]
    assert row["shared_memory_bytes"] == info["group_segment_size"]
    # Every dispatch's kernel is in event_metadata, on its GPU, with the registers of its symbol.
    symbol = next(s for s in raw["kernel_symbols"] if s["kernel_id"] == info["kernel_id"])
    assert row["registers_per_thread"] == symbol["arch_vgpr_count"] + symbol["accum_vgpr_count"]
    assert run.sql("SELECT count(*) FROM events AS e ANTI JOIN event_metadata AS m USING (profile_id, device_id, metadata_id) "
                   "WHERE e.category = 'kernel'").rows() == [(0,)]


def test_absent_record_kinds_are_noted_not_errors(run: xprosql.Run, raw: dict[str, Any]) -> None:
    metadata, dropped = run.sql("SELECT trace_metadata, dropped_events FROM profiles").rows()[0]
    notes = json.loads(metadata)
    empty = {f"{section}.{kind}" for section in ("buffer_records", "callback_records")
             for kind, records in raw[section].items() if not records}
    assert set(notes["absent"]) == empty and "buffer_records.hip_api" in empty
    assert notes["records"]["buffer_records.kernel_dispatch"] == 43915
    assert dropped == 0
    assert notes["processes"][0]["metadata"]["init_time"] == raw["metadata"]["init_time"]


def test_analyses_that_cannot_apply_say_why(run: xprosql.Run) -> None:
    for analysis, needs in (("torch.framework_ops", "cpu_op"), ("hta.launch_stats", "runtime call"),
                            ("memory.memory_timeline", "allocator events")):
        with pytest.warns(xprosql.NotApplicableWarning, match=needs):
            assert run.analysis(analysis).arrow().num_rows == 0
    with warnings.catch_warnings():
        warnings.simplefilter("error", xprosql.NotApplicableWarning)
        for analysis in ("hta.idle_time", "hta.comm_comp_overlap", "ops.top_ops"):
            assert run.analysis(analysis).arrow().num_rows > 0, analysis


@pytest.mark.slow
def test_roofline_and_bottlenecks_apply(run: xprosql.Run) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", xprosql.NotApplicableWarning)
        roofline = run.analysis("ops.roofline").pl()
        assert roofline.height > 0 and roofline["peak_flops_per_s"].is_not_null().all()
        assert run.analysis("steps.bottlenecks").arrow().num_rows > 0


# ---------------------------------------------------------------------------------------------------------------
# Every record kind, on a file built from the sample's sections (the sample has kernel dispatches only).


def _operation(process: dict[str, Any], kind: str, operation: str) -> tuple[int, int]:
    kinds = [entry["kind"] for entry in process["strings"]["buffer_records"]]
    index = kinds.index(kind)
    return index, process["strings"]["buffer_records"][index]["operations"].index(operation)


def _api(process: dict[str, Any], kind: str, operation: str, correlation: int, start: int, end: int,
         thread: int = 908, **extra: Any) -> dict[str, Any]:
    k, o = _operation(process, kind, operation)
    return {"size": 64, "kind": k, "operation": o, "correlation_id": {"internal": correlation, "external": 0},
            "start_timestamp": start, "end_timestamp": end, "thread_id": thread, **extra}


def _every_kind() -> dict[str, Any]:
    """The sample with a few records of every kind, laid out as rocprofiler-sdk serialises them."""
    document = _raw()
    process = document["rocprofiler-sdk-tool"][0]
    gpus = sorted((a for a in process["agents"] if a["type"] == 2), key=lambda a: a["logical_node_type_id"])
    cpu = next(a for a in process["agents"] if a["type"] == 1)["id"]["handle"]
    gpu0, gpu1 = gpus[0]["id"]["handle"], gpus[1]["id"]["handle"]
    dispatches = copy.deepcopy(process["buffer_records"]["kernel_dispatch"][:3])
    # The kernel symbols of these dispatches and a few more: the file stays small.
    used = {r["dispatch_info"]["kernel_id"] for r in dispatches}
    process["kernel_symbols"] = [s for i, s in enumerate(process["kernel_symbols"]) if i < 50 or s["kernel_id"] in used]
    for i, record in enumerate(dispatches):  # launched by the HIP calls below
        record["correlation_id"]["internal"] = 1000 + i
    bad = copy.deepcopy(dispatches[0])
    bad["correlation_id"]["internal"] = 1999
    bad["end_timestamp"] = bad["start_timestamp"] - 1  # ends before it starts: dropped and counted
    launches = [_api(process, "HIP_RUNTIME_API_EXT", "hipLaunchKernel", 1000 + i, r["start_timestamp"] - 5000,
                     r["start_timestamp"] - 1000, args=[{"type": "dim3", "name": "numBlocks", "value": "{1, 1, 1}"}],
                     retval={"hipError_t_retval": 0}, stream_id={"handle": 5}) for i, r in enumerate(dispatches)]
    t = dispatches[0]["start_timestamp"]
    copies = [
        {**_api(process, "MEMORY_COPY", "MEMORY_COPY_HOST_TO_DEVICE", 2000, t + 10_000, t + 30_000),
         "src_agent_id": {"handle": cpu}, "dst_agent_id": {"handle": gpu0}, "bytes": 1 << 20, "stream_id": {"handle": 5}},
        {**_api(process, "MEMORY_COPY", "MEMORY_COPY_DEVICE_TO_DEVICE", 2001, t + 40_000, t + 45_000),
         "src_agent_id": {"handle": gpu0}, "dst_agent_id": {"handle": gpu1}, "bytes": 4096},
    ]
    copy_calls = [_api(process, "HIP_RUNTIME_API_EXT", "hipMemcpyAsync", 2000, t + 2_000, t + 9_000),
                  _api(process, "HIP_RUNTIME_API_EXT", "hipMemcpyPeerAsync", 2001, t + 31_000, t + 39_000)]
    # A message with brackets and an escaped quote: a string the window cutter must step over.
    process["strings"]["marker_api"] = [{"key": 3000, "value": 'step 1 },{"size": [ "quoted\\" ]'},
                                        {"key": 3001, "value": "checkpoint"}]
    markers = [_api(process, "MARKER_CORE_RANGE_API", "roctxThreadRangeA", 3000, t - 100_000, t + 500_000),
               _api(process, "MARKER_CORE_RANGE_API", "roctxMarkA", 3001, t + 50_000, t + 50_000),
               _api(process, "MARKER_NAME_API", "roctxNameOsThread", 3002, t + 60_000, t + 60_100)]
    allocations = [
        {**_api(process, "MEMORY_ALLOCATION", "MEMORY_ALLOCATION_ALLOCATE", 4000, t + 1_000, t + 2_000),
         "agent_id": {"handle": gpu0}, "address": "0x00007f0000000000", "allocation_size": 1 << 20},
        {**_api(process, "MEMORY_ALLOCATION", "MEMORY_ALLOCATION_ALLOCATE", 4001, t + 3_000, t + 4_000),
         "agent_id": {"handle": gpu0}, "address": "0x00007f0000100000", "allocation_size": 1 << 10},
        {**_api(process, "MEMORY_ALLOCATION", "MEMORY_ALLOCATION_FREE", 4002, t + 90_000, t + 91_000),
         "agent_id": {"handle": gpu0}, "address": "0x00007f0000000000", "allocation_size": 0},
    ]
    scratch = [{**_api(process, "SCRATCH_MEMORY", "SCRATCH_MEMORY_ALLOC", 5000, t + 5_000, t + 8_000),
                "agent_id": {"handle": gpu0}, "queue_id": {"handle": 18}, "flags": 1, "allocation_size": 65536}]
    rccl = [_api(process, "RCCL_API", "ncclAllReduce", 6000, t + 70_000, t + 80_000)]
    hsa = [_api(process, "HSA_CORE_API", "hsa_signal_wait_scacquire", 7000, t + 81_000, t + 82_000)]
    process["counters"] = [
        {"agent_id": {"handle": gpu0}, "id": {"handle": 11}, "is_constant": 0, "is_derived": 0, "name": "SQ_WAVES",
         "description": "Count number of waves sent to SQs.", "block": "SQ", "expression": "", "dimension_ids": [0]},
        {"agent_id": {"handle": gpu0}, "id": {"handle": 12}, "is_constant": 0, "is_derived": 1, "name": "GPU_UTIL",
         "description": "Utilization.", "block": "", "expression": "GRBM_GUI_ACTIVE/GRBM_COUNT", "dimension_ids": []},
    ]
    counted = dispatches[0]
    process["callback_records"]["counter_collection"] = [{
        "thread_id": 908,
        "dispatch_data": {"size": 96, "correlation_id": {"internal": 1000, "external": 0},
                          "start_timestamp": counted["start_timestamp"], "end_timestamp": counted["end_timestamp"],
                          "dispatch_info": counted["dispatch_info"]},
        "records": [{"counter_id": {"handle": 11}, "value": 10.0}, {"counter_id": {"handle": 11}, "value": 6.0},
                    {"counter_id": {"handle": 12}, "value": 0.25}],  # SQ_WAVES in two dimension instances
        "stream_id": {"handle": 5},
    }]
    records = process["buffer_records"]
    records.update(kernel_dispatch=[*dispatches, bad], hip_api=launches + copy_calls, hsa_api=hsa, marker_api=markers,
                   rccl_api=rccl, memory_copy=copies, memory_allocation=allocations, scratch_memory=scratch,
                   pc_sample_host_trap=[{"size": 1, "timestamp": t}])
    return document


@pytest.fixture(scope="module")
def every_kind(tmp_path_factory: pytest.TempPathFactory) -> tuple[xprosql.Run, dict[str, Any]]:
    directory = tmp_path_factory.mktemp("every_kind")
    document = _every_kind()
    path = directory / "908_results.json"
    path.write_text(json.dumps(document, indent=1))  # rocprofv3 writes compact JSON; white space must not matter
    report = xprosql.ingest(path, into=directory / "run")
    assert report.ok, str(report)
    return xprosql.load(directory / "run"), document["rocprofiler-sdk-tool"][0]


def test_launches_join_their_kernels_and_copies(every_kind: tuple[xprosql.Run, dict[str, Any]]) -> None:
    run, process = every_kind
    assert run.analysis("gpu.launch_coverage").rows()[0][1:] == ("rocprof", 3, 3, 1.0, 2, 2, 1.0)
    stats = run.analysis("hta.launch_stats").pl()
    records = {r["correlation_id"]["internal"]: r for r in process["buffer_records"]["hip_api"]}
    dispatches = {r["correlation_id"]["internal"]: r for r in process["buffer_records"]["kernel_dispatch"]}
    kernels = stats.filter(stats["launch_name"] == "hipLaunchKernel")
    assert sorted(kernels["correlation_id"]) == [1000, 1001, 1002]
    for row in kernels.iter_rows(named=True):
        call, kernel = records[row["correlation_id"]], dispatches[row["correlation_id"]]
        assert row["launch_delay_ps"] == (kernel["start_timestamp"] - call["end_timestamp"]) * 1000
    apis = dict(run.sql("SELECT CAST(name AS VARCHAR), CAST(api AS VARCHAR) FROM api_calls").rows())
    assert apis == {"hipLaunchKernel": "runtime", "hipMemcpyAsync": "runtime", "hipMemcpyPeerAsync": "runtime",
                    "ncclAllReduce": "rccl", "hsa_signal_wait_scacquire": "hsa"}
    copies = run.sql("SELECT CAST(kind AS VARCHAR), bytes, stream_id, CAST(dst_kind AS VARCHAR) FROM memcpys ORDER BY start_ps").rows()
    assert copies == [("HtoD", 1 << 20, -1, "Device"), ("PtoP", 4096, -1, "Device")]


def test_markers_allocations_and_counters(every_kind: tuple[xprosql.Run, dict[str, Any]]) -> None:
    run, process = every_kind
    marks = run.sql("SELECT CAST(name AS VARCHAR), CAST(category AS VARCHAR), dur_ps FROM events "
                    "WHERE category IN ('user_annotation', 'marker_api') ORDER BY start_ps").rows()
    message = process["strings"]["marker_api"][0]["value"]
    assert marks == [(message, "user_annotation", 600_000_000), ("checkpoint", "user_annotation", 0),
                     ("roctxNameOsThread", "marker_api", 100_000)]
    memory = run.sql("SELECT allocator, kind, bytes, in_use_bytes, address FROM memory_events ORDER BY start_ps").rows()
    assert memory == [("hip:0", "allocation", 1 << 20, 1 << 20, 0x7F0000000000),
                      ("hip:0", "allocation", 1 << 10, (1 << 20) + (1 << 10), 0x7F0000100000),
                      ("scratch:0", "allocation", 65536, None, None),
                      ("hip:0", "free", 1 << 20, 1 << 10, 0x7F0000000000)]
    with warnings.catch_warnings():
        warnings.simplefilter("error", xprosql.NotApplicableWarning)
        assert run.analysis("memory.memory_timeline").arrow().num_rows > 0
    counters = run.sql("SELECT counter, value_double, value, sample, counter_set, start_ps FROM counters ORDER BY counter_id").rows()
    dispatch = process["callback_records"]["counter_collection"][0]["dispatch_data"]
    start = (dispatch["start_timestamp"] - process["metadata"]["init_time"]) * 1000
    assert counters == [("SQ_WAVES", 16.0, 16, dispatch["dispatch_info"]["dispatch_id"], "SQ", start),
                        ("GPU_UTIL", 0.25, None, dispatch["dispatch_info"]["dispatch_id"], "", start)]


def test_dropped_and_unread_records_are_counted(every_kind: tuple[xprosql.Run, dict[str, Any]]) -> None:
    run, _ = every_kind
    dropped, reasons, metadata = run.sql("SELECT dropped_events, drop_reasons, trace_metadata FROM profiles").rows()[0]
    assert dropped == 2
    assert sorted(reasons) == ["1 buffer_records.kernel_dispatch records ending before they start",
                               "1 buffer_records.pc_sample_host_trap records: a kind xprosql does not read"]
    assert "buffer_records.memory_copy" not in json.loads(metadata)["absent"]


def test_processes_of_one_file_share_their_gpus() -> None:
    """A file of two processes (rocprofv3 writes one per file; its schema allows a list): one host device each,
    the GPUs once (the same KFD nodes), every record kept."""
    document = _every_kind()
    first = document["rocprofiler-sdk-tool"][0]
    second = copy.deepcopy(first)
    second["metadata"]["pid"] = 909
    document["rocprofiler-sdk-tool"].append(second)
    rows: dict[str, list[dict[str, Any]]] = {}
    for table, batch in rocprof_module.decode_rocprof(json.dumps(document).encode(), source="two.json"):
        rows.setdefault(table, []).extend(batch.to_pylist())
    hosts = [d["plane_id"] for d in rows["devices"] if d["kind"] == "host"]
    assert hosts == [908, 909] and sum(d["kind"] == "gpu" for d in rows["devices"]) == 8
    assert len(rows["kernels"]) == 2 * 3 and len(rows["api_calls"]) == 2 * 7
    assert rows["profiles"][0]["dropped_events"] == 2 * 2


# ---------------------------------------------------------------------------------------------------------------
# The streaming parse


def _tables(data: bytes) -> dict[str, list[str]]:
    """Every table's rows (as text, in order), but the profiles row (its metadata counts what was read)."""
    rows: dict[str, list[str]] = {}
    for table, batch in rocprof_module.decode_rocprof(data, source="x.json"):
        if table != "profiles":
            rows.setdefault(table, []).extend(map(repr, batch.to_pylist()))
    return {table: sorted(values) for table, values in rows.items()}


def test_small_windows_give_the_same_tables(monkeypatch: pytest.MonkeyPatch) -> None:
    """Windows of a few KB: every array is cut many times, often inside a record (the depth scan's case)."""
    text = json.dumps(_every_kind()).encode()
    whole = _tables(text)
    monkeypatch.setattr(rocprof_module, "_CHUNK", 3000)
    assert _tables(text) == whole
    assert _tables(gzip.compress(text)) == whole


BAD = {
    "truncated_gzip": (lambda d: d[: len(d) // 2], "truncated or corrupt gzip"),
    "truncated_text": (lambda d: gzip.decompress(d)[:5_000_000], "invalid JSON (truncated or corrupt)"),
    "truncated_records": (lambda d: gzip.decompress(d)[:30_000_000], "invalid JSON (truncated or corrupt)"),
    "not_a_list": (lambda d: b'{"rocprofiler-sdk-tool": 5}', "not a list of processes"),
    "records_first": (lambda d: b'{"rocprofiler-sdk-tool": [{"buffer_records": {"kernel_dispatch": []}}]}',
                      "not the layout rocprofv3 writes"),
    "garbage_record": (lambda d: gzip.decompress(d).replace(b'"kernel_dispatch":[{', b'"kernel_dispatch":[{]', 1),
                       "invalid JSON"),
}


@pytest.mark.parametrize("kind", BAD)
def test_bad_files_fail_naming_the_file(kind: str, tmp_path: Path, run_root: Path) -> None:
    mutate, words = BAD[kind]
    bad = tmp_path / "908_results.json"
    bad.write_bytes(mutate(SAMPLE.read_bytes()))
    before = tree_digest(run_root)
    report = xprosql.ingest(bad, into=run_root)
    assert report.ingested == [] and len(report.failed) == 1
    path, reason = report.failed[0]
    assert path == str(bad) and words in reason and "\n" not in reason, reason
    assert tree_digest(run_root) == before


def test_the_profile_id_is_the_file_hash(run: xprosql.Run) -> None:
    assert run.sql("SELECT profile_id FROM profiles").rows() == [(profile_id_of(SAMPLE.read_bytes()),)]


_MEASURE = """
import mmap, resource, sys
from xprosql.ingest.rocprof import decode_rocprof
with open(sys.argv[1], "rb") as f:
    data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    n = sum(b.num_rows for t, b in decode_rocprof(data, source=sys.argv[1]) if t == "kernels")
print(n, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


@pytest.mark.slow
def test_decode_memory_does_not_grow_with_the_file(tmp_path: Path) -> None:
    """Peak memory of the decode of a mapped file, 2 and 12 copies of the sample's dispatches (85 and 510 MB)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from make_large_rocprof import write_large

    peaks = {}
    for copies in (2, 12):
        path = tmp_path / f"x{copies}.json"
        with path.open("wb") as out:
            write_large(SAMPLE, out, copies=copies)
        done = subprocess.run([sys.executable, "-c", _MEASURE, str(path)], capture_output=True, text=True, check=True)
        kernels, peak_kb = map(int, done.stdout.split())
        assert kernels > 43915 * (copies - 1)
        peaks[copies] = peak_kb
        path.unlink()
    assert peaks[12] < peaks[2] * 1.25, peaks
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss > 0
