"""Kineto (PyTorch profiler) traces: every real trace in tests/data/kineto, counted against its raw JSON."""

from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path

import polars as pl
import pytest
from conftest import GPU_SAMPLE, TEST_DATA, tree_digest

import xprosql
from xprosql.ingest import profile_id_of

KINETO = TEST_DATA / "kineto"
TRACES = sorted(KINETO.glob("*.json.gz"))


def _raw(path: Path) -> dict:
    return json.loads(gzip.decompress(path.read_bytes()))


@pytest.fixture(scope="module")
def kineto_run(tmp_path_factory: pytest.TempPathFactory) -> xprosql.Run:
    assert TRACES, f"real Kineto traces missing: {KINETO}"
    root = tmp_path_factory.mktemp("kineto") / "run"
    report = xprosql.ingest(KINETO, into=root)
    assert report.ok and len(report.ingested) == len(TRACES), str(report)
    return xprosql.load(root)


def _count(run: xprosql.Run, table: str, pid: str, where: str = "true") -> int:
    return run.sql(f"SELECT count(*) FROM {table} WHERE profile_id = $p AND {where}", {"p": pid}).rows()[0][0]


@pytest.mark.parametrize("trace", TRACES, ids=[t.name.split(".")[0] for t in TRACES])
def test_gpu_tables_count_what_the_json_has(kineto_run: xprosql.Run, trace: Path) -> None:
    raw = _raw(trace)
    cats = Counter(e.get("cat") for e in raw["traceEvents"] if e.get("ph") == "X")
    phases = Counter(e.get("ph") for e in raw["traceEvents"])
    pid = profile_id_of(trace.read_bytes())
    assert _count(kineto_run, "kernels", pid) == cats["kernel"]
    assert _count(kineto_run, "memcpys", pid, "kind <> 'memset'") == cats["gpu_memcpy"]
    assert _count(kineto_run, "memcpys", pid, "kind = 'memset'") == cats["gpu_memset"]
    assert _count(kineto_run, "api_calls", pid) == cats["cuda_runtime"] + cats["cuda_driver"]
    # Every slice and instant is an event (Kineto's own spans too); every flow point a flow. Nothing is dropped in
    # these files but the metadata of processes that are no device (test_kineto_metadata.py counts it).
    assert _count(kineto_run, "events", pid) == phases["X"] + phases["i"]
    assert _count(kineto_run, "flows", pid) == phases["s"] + phases["f"] + phases["t"]
    reasons = kineto_run.sql("SELECT drop_reasons FROM profiles WHERE profile_id = $p", {"p": pid}).rows()[0][0]
    assert all(reason.split(" ", 1)[1].startswith("M events of processes without events") for reason in reasons)


@pytest.mark.parametrize("trace", TRACES, ids=[t.name.split(".")[0] for t in TRACES])
def test_kernels_join_their_launch_as_far_as_the_file_allows(kineto_run: xprosql.Run, trace: Path) -> None:
    raw = _raw(trace)["traceEvents"]
    launches = {e["args"]["correlation"] for e in raw if e.get("cat") in ("cuda_runtime", "cuda_driver")
                and "correlation" in e.get("args", {})}
    kernels = [e for e in raw if e.get("cat") == "kernel"]
    expected = sum(1 for e in kernels if e.get("args", {}).get("correlation") in launches)
    pid = profile_id_of(trace.read_bytes())
    joined = kineto_run.sql(
        """SELECT count(*) FROM kernels k JOIN api_calls a USING (profile_id, correlation_id)
           WHERE profile_id = $p""", {"p": pid}).rows()[0][0]
    assert joined == expected
    if trace.name.startswith(("a100_nccl", "sampled", "mi250", "triton")):
        assert joined == len(kernels) > 0


def test_times_in_both_conventions(kineto_run: xprosql.Run) -> None:
    # a100_nccl_rank0: ts relative to baseTimeNanoseconds; alexnet: absolute float microseconds.
    for name in ("a100_nccl_rank0.json.gz", "alexnet.json.gz"):
        trace = KINETO / name
        raw = _raw(trace)
        base = raw.get("baseTimeNanoseconds", 0)
        expected = sorted(
            (round(e["ts"] * 1000) + base, round(e.get("dur", 0) * 1_000_000))
            for e in raw["traceEvents"] if e.get("ph") in ("X", "i")
        )
        pid = profile_id_of(trace.read_bytes())
        start_ns = kineto_run.sql("SELECT start_ns FROM profiles WHERE profile_id = $p", {"p": pid}).rows()[0][0]
        got = kineto_run.sql("SELECT start_ps, dur_ps FROM events WHERE profile_id = $p", {"p": pid}).rows()
        assert sorted((start // 1000 + start_ns, dur) for start, dur in got) == expected
        assert start_ns == expected[0][0]
        stored = [start for start, _ in got]
        assert stored == sorted(stored), "events are stored in time order"


def test_devices_ranks_and_metadata(kineto_run: xprosql.Run) -> None:
    pid = profile_id_of((KINETO / "a100_nccl_rank0.json.gz").read_bytes())
    profile = kineto_run.sql("SELECT rank, world_size, trace_metadata FROM profiles WHERE profile_id = $p", {"p": pid}).rows()[0]
    assert profile[:2] == (0, 2)
    assert json.loads(profile[2])["distributedInfo"]["backend"] == "nccl"
    gpu0 = kineto_run.sql(
        "SELECT model, compute_capability, core_count, memory_bytes, peak_flops_per_s, peak_hbm_bytes_per_s, "
        "peak_source FROM devices WHERE profile_id = $p AND name = '/device:GPU:0'", {"p": pid}).rows()
    # A 40 GB A100 board: docs/reference.md's bf16 peak, and the 40 GB board's 1555 GB/s.
    assert gpu0 == [("NVIDIA A100-PG509-200", "8.0", 108, 42297524224, 312e12, 1555e9, "hardware_model")]
    streams = kineto_run.sql(
        "SELECT DISTINCT stream_id FROM tracks JOIN devices USING (profile_id, device_id) "
        "WHERE profile_id = $p AND kind = 'gpu'", {"p": pid}).rows()
    raw_streams = {e["tid"] for e in _raw(KINETO / "a100_nccl_rank0.json.gz")["traceEvents"] if e.get("cat") == "kernel"}
    assert raw_streams <= {s for (s,) in streams}


def test_kernel_launch_configuration_and_copy_kinds(kineto_run: xprosql.Run) -> None:
    trace = KINETO / "a100_nccl_rank0.json.gz"
    raw = _raw(trace)["traceEvents"]
    pid = profile_id_of(trace.read_bytes())
    first = next(e for e in raw if e.get("cat") == "kernel")
    row = kineto_run.sql(
        "SELECT grid_x, grid_y, grid_z, block_x, registers_per_thread, shared_memory_bytes, stream_id, framework_op "
        "FROM kernels WHERE profile_id = $p AND correlation_id = $c", {"p": pid, "c": first["args"]["correlation"]}).rows()
    args = first["args"]
    assert row[0][:7] == (*args["grid"], args["block"][0], args["registers per thread"], args["shared memory"], args["stream"])
    cpu_ops = {e["name"] for e in raw if e.get("cat") == "cpu_op" and e["args"].get("External id") == args["External id"]}
    assert row[0][7] in cpu_ops
    kinds = dict(kineto_run.sql("SELECT kind, sum(bytes)::BIGINT FROM memcpys WHERE profile_id = $p GROUP BY 1", {"p": pid}).rows())
    raw_bytes = Counter()
    for e in raw:
        if e.get("cat") in ("gpu_memcpy", "gpu_memset"):
            raw_bytes["memset" if e["cat"] == "gpu_memset" else e["name"].split()[1]] += e["args"]["bytes"]
    assert kinds == dict(raw_bytes)


def test_profiler_range_counters(kineto_run: xprosql.Run) -> None:
    trace = KINETO / "cupti_counters.json.gz"
    ranges = [e for e in _raw(trace)["traceEvents"] if e.get("cat") == "cuda_profiler_range"]
    assert len(ranges) == 77
    pid = profile_id_of(trace.read_bytes())
    rows = kineto_run.sql("SELECT sample, kernel, counter, value FROM counters WHERE profile_id = $p", {"p": pid}).rows()
    expected = {(i, e["name"], k, v) for i, e in enumerate(ranges) for k, v in e["args"].items()}
    assert set(rows) == expected and len(rows) == len(expected)


def test_same_sql_on_kineto_and_xspace_profiles(kineto_run: xprosql.Run, tmp_path: Path) -> None:
    root = tmp_path / "run"
    assert xprosql.ingest([KINETO / "a100_nccl_rank0.json.gz", GPU_SAMPLE], into=root).ok
    run = xprosql.load(root)
    per_stream = run.sql(
        """SELECT p.format, d.name AS device, k.stream_id, count(*) AS kernels, sum(k.dur_ps) AS kernel_ps
           FROM kernels k JOIN devices d USING (profile_id, device_id) JOIN profiles p USING (profile_id)
           GROUP BY ALL ORDER BY kernel_ps DESC"""
    ).pl()
    assert set(per_stream["format"]) == {"kineto", "xspace"}
    xspace = per_stream.filter(per_stream["format"] == "xspace")
    assert xspace["kernels"].sum() == 1330  # what XProf's kernel_stats counts on this file
    top = run.sql(
        """SELECT profile_id, name, count(*) AS n, sum(dur_ps) AS total_ps FROM kernels
           GROUP BY profile_id, name
           QUALIFY row_number() OVER (PARTITION BY profile_id ORDER BY total_ps DESC) <= 10"""
    ).pl()
    assert top.group_by("profile_id").len()["len"].to_list() == [10, 10]


BAD_TRACES = {
    "truncated_gzip": (lambda raw: raw[: len(raw) // 2], "truncated or corrupt gzip"),
    "invalid_json": (lambda raw: gzip.compress(gzip.decompress(raw)[:5000]), "invalid JSON"),
    "no_trace_events": (lambda raw: gzip.compress(b'{"schemaVersion": 1, "deviceProperties": []}'), "traceEvents"),
    "empty": (lambda raw: b"", "empty file"),
}


@pytest.mark.parametrize("kind", BAD_TRACES)
def test_bad_trace_is_reported_and_warehouse_unchanged(kind: str, tmp_path: Path) -> None:
    """Corrupt copies of a real trace, made here: no real file arrives broken."""
    root = tmp_path / "run"
    assert xprosql.ingest(KINETO / "triton_example.json.gz", into=root).ok
    mutate, words = BAD_TRACES[kind]
    bad = tmp_path / f"{kind}.json.gz"
    bad.write_bytes(mutate((KINETO / "alexnet.json.gz").read_bytes()))
    before = tree_digest(root)
    report = xprosql.ingest(bad, into=root)
    assert report.failed and report.failed[0][0] == str(bad) and words in report.failed[0][1]
    assert tree_digest(root) == before


def test_malformed_events_are_counted_not_lost_silently(tmp_path: Path) -> None:
    """A real trace with some events broken by hand (no real file has them)."""
    raw = _raw(KINETO / "alexnet.json.gz")
    events = raw["traceEvents"]
    broken = [i for i, e in enumerate(events) if e.get("cat") == "cpu_op"][:5]
    for i in broken[:3]:
        del events[i]["ts"]
    for i in broken[3:]:
        events[i]["dur"] = "soon"
    events.append(["not", "an", "event"])
    path = tmp_path / "broken.json"
    path.write_text(json.dumps(raw))
    report = xprosql.ingest(path, into=tmp_path / "run")
    assert report.ok
    profile = xprosql.load(tmp_path / "run").profiles.row(0, named=True)
    assert profile["dropped_events"] == 6
    assert sorted(profile["drop_reasons"]) == sorted([
        "3 X events without a numeric ts",
        "2 X events without a numeric, non-negative dur",
        "1 non-object entries in traceEvents",
    ])
    assert profile["n_events"] == sum(1 for e in _raw(KINETO / "alexnet.json.gz")["traceEvents"] if e.get("ph") in ("X", "i")) - 5


@pytest.mark.slow
def test_launch_coverage_analysis_on_every_gpu_source(tmp_path: Path) -> None:
    root = tmp_path / "run"
    assert xprosql.ingest([*TRACES, GPU_SAMPLE], into=root).ok
    run = xprosql.load(root)
    rows = run.analysis("gpu.launch_coverage").pl()
    with_kernels = rows.filter(rows["kernels"] > 0)
    assert set(with_kernels["format"]) == {"kineto", "xspace"}
    # Counted again from the raw JSON: a kernel or copy is launched when a cuda_runtime / cuda_driver
    # event carries its correlation id. The H100 trace's GPU activity starts before its CPU window, so
    # 30% of its kernels have no call in the file (their ids are all below the first recorded call's).
    paths = dict(run.sql("SELECT profile_id, source_path FROM profiles").rows())
    for row in rows.filter(rows["format"] == "kineto").iter_rows(named=True):
        events = _raw(Path(paths[row["profile_id"]]))["traceEvents"]
        calls = {e["args"].get("correlation") for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver")}
        for kind, cats in (("kernels", ("kernel",)), ("copies", ("gpu_memcpy", "gpu_memset"))):
            activity = [e["args"].get("correlation") for e in events if e.get("cat") in cats]
            launched = sum(c in calls for c in activity)
            assert (row[kind], row[f"{kind}_launched"]) == (len(activity), launched), (paths[row["profile_id"]], kind)
    h100_id = next(pid for pid, path in paths.items() if path.endswith("h100_qwen1.5_0.5b.json.gz"))
    h100 = rows.filter(pl.col("profile_id") == h100_id).row(0, named=True)
    assert 0.6 < h100["kernel_share"] < 0.8
    assert rows.filter(pl.col("profile_id") != h100["profile_id"])["kernel_share"].drop_nulls().min() == 1.0
    xspace = rows.filter(rows["format"] == "xspace").row(0, named=True)
    assert (xspace["kernels"], xspace["copies"]) == (1330, 226)
