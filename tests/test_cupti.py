"""Live CUPTI capture: the recorder, its trace format, and how it behaves without a GPU."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import ClassVar

import pytest

import xprosql
from xprosql import cupti
from xprosql.cli import main

HAS_CUPTI = importlib.util.find_spec("cupti") is not None

# CUpti_ActivityKind values of the kinds the recorder maps (cupti.ActivityKind in cupti-python 13).
KINDS = {"MEMCPY": 1, "MEMSET": 2, "KERNEL": 3, "DRIVER": 4, "RUNTIME": 5, "MARKER": 12,
         "CONCURRENT_KERNEL": 10, "SYNCHRONIZATION": 38}


def _records() -> list[SimpleNamespace]:
    """Activity records shaped as cupti-python delivers them (field names from the CUPTI docs).

    Hand-built: no GPU here to record real ones; the device check records real ones.
    """
    t0 = 1_790_000_000_000_000_000
    kernel = dict(kind=10, device_id=0, context_id=1, stream_id=7, correlation_id=11, name="_Z6scalePfi",
                  grid_x=80, grid_y=1, grid_z=1, block_x=256, block_y=1, block_z=1, registers_per_thread=16,
                  static_shared_memory=0, dynamic_shared_memory=1024, graph_id=0, graph_node_id=0)
    return [
        SimpleNamespace(kind=5, cbid=211, start=t0, end=t0 + 4_000, process_id=42, thread_id=43, correlation_id=11),
        SimpleNamespace(**kernel, start=t0 + 6_000, end=t0 + 26_000),
        SimpleNamespace(kind=5, cbid=41, start=t0 + 30_000, end=t0 + 31_000, process_id=42, thread_id=43,
                        correlation_id=12),
        SimpleNamespace(kind=1, copy_kind=2, src_kind=3, dst_kind=1, bytes=4096, device_id=0, context_id=1,
                        stream_id=7, correlation_id=12, start=t0 + 32_000, end=t0 + 35_500),
        SimpleNamespace(kind=2, memory_kind=3, bytes=512, value=0, device_id=0, context_id=1, stream_id=7,
                        correlation_id=13, start=t0 + 36_000, end=t0 + 36_700),
        SimpleNamespace(kind=38, type=3, context_id=1, stream_id=7, correlation_id=14, cuda_event_id=0,
                        start=t0 + 37_000, end=t0 + 39_000),
        SimpleNamespace(kind=12, timestamp=t0 + 1_000, name="step 0", id=1),
        SimpleNamespace(kind=99, start=t0, end=t0),  # a kind the recorder does not map
    ]


def test_recording_ingests_into_the_gpu_tables(tmp_path: Path) -> None:
    import gzip
    import json

    trace = cupti.records_to_trace(_records(), kinds=KINDS, host="gpuhost", pid=42)
    path = tmp_path / "gpuhost.42.cupti.json.gz"
    path.write_bytes(gzip.compress(json.dumps(trace).encode()))
    assert trace[cupti.RECORDER_KEY]["skipped_record_kinds"] == {"99": 1}

    assert xprosql.ingest(path, into=tmp_path / "run").ok
    run = xprosql.load(tmp_path / "run")
    assert run.sql("SELECT format, host FROM profiles").rows() == [("cupti", "gpuhost")]
    kernel = run.sql(
        "SELECT k.name, k.dur_ps, stream_id, grid_x, block_x, registers_per_thread, shared_memory_bytes, a.name "
        "FROM kernels k JOIN api_calls a USING (profile_id, correlation_id)").rows()
    assert kernel == [("_Z6scalePfi", 20_000_000, 7, 80, 256, 16, 1024, "runtime_api_cbid_211")]
    copies = run.sql("SELECT kind, bytes, src_kind, dst_kind, dur_ps FROM memcpys ORDER BY start_ps").rows()
    assert copies == [("DtoH", 4096, "Device", "Pageable", 3_500_000), ("memset", 512, None, "Device", 700_000)]
    assert run.sql("SELECT name FROM events WHERE category = 'cuda_sync'").rows() == [("Stream Sync",)]
    assert run.sql("SELECT min(start_ps) FROM events").rows() == [(0,)]


class _FakeDriver:
    """cuda.bindings.driver as the recorder calls it, describing one H200 (hand-built: no GPU here; the device
    check reads a real one, tests/data/h200)."""

    class CUdevice_attribute:
        CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 16, 75
        CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76

    VALUES: ClassVar[dict[int, int]] = {16: 132, 75: 9, 76: 0}

    @staticmethod
    def cuInit(flags: int) -> tuple[int]:
        return (0,)

    @staticmethod
    def cuDeviceGet(index: int) -> tuple[int, int]:
        return (0, index) if index == 0 else (101, None)  # CUDA_ERROR_INVALID_DEVICE beyond GPU 0

    @staticmethod
    def cuDeviceGetName(length: int, device: int) -> tuple[int, bytes]:
        return 0, b"NVIDIA H200".ljust(length, b"\0")

    @staticmethod
    def cuDeviceTotalMem(device: int) -> tuple[int, int]:
        return 0, 150_109_880_320

    @classmethod
    def cuDeviceGetAttribute(cls, attribute: int, device: int) -> tuple[int, int]:
        return 0, cls.VALUES[attribute]


def test_a_recording_describes_its_gpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import gzip
    import json

    bindings = SimpleNamespace(driver=_FakeDriver)
    monkeypatch.setitem(sys.modules, "cuda", SimpleNamespace(bindings=bindings))
    monkeypatch.setitem(sys.modules, "cuda.bindings", bindings)
    monkeypatch.setitem(sys.modules, "cuda.bindings.driver", _FakeDriver)
    properties = cupti._device_properties([0, 1])  # GPU 1: the driver has no such device, left out
    assert properties == [{"id": 0, "name": "NVIDIA H200", "totalGlobalMem": 150_109_880_320, "numSms": 132,
                           "computeMajor": 9, "computeMinor": 0}]
    trace = cupti.records_to_trace(_records(), kinds=KINDS, host="gpuhost", pid=42, device_properties=properties)
    path = tmp_path / "gpuhost.42.cupti.json.gz"
    path.write_bytes(gzip.compress(json.dumps(trace).encode()))
    assert xprosql.ingest(path, into=tmp_path / "run").ok
    run = xprosql.load(tmp_path / "run")
    assert run.sql("SELECT model, core_count, compute_capability, peak_flops_per_s FROM devices WHERE kind = 'gpu'"
                   ).rows() == [("NVIDIA H200", 132, "9.0", 989e12)]


@pytest.mark.skipif(HAS_CUPTI, reason="cupti-python is installed: the no-GPU behaviour is not observable here")
def test_without_cupti_importing_works_and_recording_says_why(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(cupti.CuptiUnavailableError, match="cupti-python is not importable"):
        with cupti.record(tmp_path):
            pass
    assert not any(tmp_path.iterdir())
    script = tmp_path / "train.py"
    script.write_text("print('training')\n")
    assert main(["record", "--into", str(tmp_path / "run"), "--", sys.executable, str(script)]) == 2
    assert "cupti-python is not importable" in capsys.readouterr().err


def _written_trace(recording: cupti.Recording) -> dict:
    import gzip
    import json

    assert recording.path is not None and recording.path.name.endswith(".cupti.json.gz")
    return json.loads(gzip.decompress(recording.path.read_bytes()))


def _ingested_if_the_stack_is_here(recording: cupti.Recording, tmp_path: Path) -> xprosql.Run | None:
    """The recording ingested, where DuckDB and Delta are installed (a GPU machine may have only CUPTI: its
    recordings are then ingested elsewhere, as tests/data/h200's are by tests/test_h200.py)."""
    if not all(importlib.util.find_spec(name) for name in ("duckdb", "deltalake", "polars")):
        return None
    assert xprosql.ingest(recording.path, into=tmp_path / "run").ok
    return xprosql.load(tmp_path / "run")


@pytest.mark.skipif(not HAS_CUPTI, reason="needs cupti-python and an NVIDIA GPU (the device check runs it)")
def test_live_capture_of_a_cuda_program(tmp_path: Path) -> None:
    cp = pytest.importorskip("cupy", reason="the live capture test drives the GPU with CuPy")
    with cupti.record(tmp_path / "raw") as recording:
        x = cp.arange(1 << 20, dtype=cp.float32)
        (x * 2).sum().get()
    trace = _written_trace(recording)
    events = trace["traceEvents"]
    kernels = [e for e in events if e["cat"] == "kernel"]
    assert len(kernels) == recording.counts.get("kernel", 0) >= 1
    # The GPUs described as PyTorch's traces describe them, so ingest knows the model and its roofs.
    (gpu,) = {k["pid"] for k in kernels}
    assert [(p["id"], p["numSms"] > 0, p["totalGlobalMem"] > 0) for p in trace["deviceProperties"]] == [(gpu, True, True)]
    # Every kernel was launched by a runtime or driver call that CUPTI recorded with the same correlation id.
    launches = {e["args"]["correlation"] for e in events if e["cat"] in ("cuda_runtime", "cuda_driver")}
    assert all(k["args"]["correlation"] in launches and k["dur"] > 0 for k in kernels)
    run = _ingested_if_the_stack_is_here(recording, tmp_path)
    if run is not None:
        assert run.sql("SELECT count(*) FROM kernels").rows()[0][0] == len(kernels)


METRICS = ["gr__cycles_elapsed.max", "sm__cycles_active.avg"]


def _pm_samples(t0: int) -> dict[int, cupti.PmSamples]:
    """PM samples shaped like ``cupti.pm_sampling`` decodes them (Sample: start/end ns, metric_values).

    Hand-built: no GPU here to sample real ones. Device 1 ran no kernel: it must still be a GPU.
    """
    def sample(start: int, end: int, *values: float) -> SimpleNamespace:
        return SimpleNamespace(start_timestamp=start, end_timestamp=end, metric_values=list(values))

    return {
        0: cupti.PmSamples(METRICS, [
            sample(0, t0 + 2_345, 1.0, 2.0),  # CUPTI left the first interval's start unset: dropped
            sample(t0 + 2_345, t0 + 12_345, 19_500.0, 0.25),
            sample(t0 + 12_345, t0 + 22_345, 19_498.0, float("nan")),  # NaN has no JSON form: left out
        ]),
        1: cupti.PmSamples(METRICS[:1], [sample(t0 + 5_000, t0 + 15_000, 7.5)]),
    }


@pytest.mark.parametrize("pure_python", [False, True], ids=["fast", "reference"])
def test_pm_samples_land_in_counters(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pure_python: bool) -> None:
    import gzip
    import json

    if pure_python:
        monkeypatch.setenv("XPROSQL_PURE_PYTHON", "1")

    t0 = 1_790_000_000_000_000_000
    trace = cupti.records_to_trace(_records(), kinds=KINDS, host="gpuhost", pid=42, pm_samples=_pm_samples(t0))
    assert trace[cupti.RECORDER_KEY]["pm_sampling"] == {
        "0": {"metrics": METRICS, "samples": 2, "dropped_samples": 1, "non_finite_values": 1},
        "1": {"metrics": METRICS[:1], "samples": 1, "dropped_samples": 0, "non_finite_values": 0},
    }
    path = tmp_path / "gpuhost.42.cupti.json.gz"
    path.write_bytes(gzip.compress(json.dumps(trace).encode()))
    assert xprosql.ingest(path, into=tmp_path / "run").ok
    run = xprosql.load(tmp_path / "run")

    rows = run.sql(
        "SELECT d.name, d.kind, c.sample, c.counter, c.value, c.value_double, c.start_ps, c.end_ps, c.kernel "
        "FROM counters c JOIN devices d USING (profile_id, device_id) "
        "WHERE c.counter_set = 'pm_sampling' ORDER BY d.name, c.sample, c.counter").rows()
    # Times are ps after the profile's first event (the runtime call at t0).
    assert rows == [
        ("/device:GPU:0", "gpu", 1, "gr__cycles_elapsed.max", None, 19_500.0, 2_345_000, 12_345_000, None),
        ("/device:GPU:0", "gpu", 1, "sm__cycles_active.avg", None, 0.25, 2_345_000, 12_345_000, None),
        ("/device:GPU:0", "gpu", 2, "gr__cycles_elapsed.max", None, 19_498.0, 12_345_000, 22_345_000, None),
        ("/device:GPU:1", "gpu", 0, "gr__cycles_elapsed.max", None, 7.5, 5_000_000, 15_000_000, None),
    ]
    assert run.sql("SELECT count(*) FROM counters WHERE counter_set IS DISTINCT FROM 'pm_sampling'").rows() == [(0,)]
    # Each sample is also an event on the GPU's "PM sampling" track.
    assert run.sql("SELECT count(*) FROM events WHERE category = 'pm_sampling'").rows() == [(3,)]


def _fake_cupti(monkeypatch: pytest.MonkeyPatch, calls: list[str], *, enable_error: Exception | None = None) -> None:
    """cupti-python's and cuda-bindings' entry points as the recorder calls them, logging each call.

    Stands in for a GPU to check the recorder drives ``cupti.pm_sampling.Collector`` in the
    documented order (enable, configure, start ... stop, decode, disable) and unwinds on failure.
    """
    import enum
    import types

    t0 = 1_790_000_000_000_000_000

    class Collector:
        def __init__(self, device_index: int = 0) -> None:
            calls.append(f"Collector({device_index})")

        def enable(self) -> None:
            calls.append("enable")
            if enable_error is not None:
                raise enable_error

        def configure(self, *, metrics: list[str], sampling_interval: int, trigger_mode: enum.IntEnum) -> None:
            calls.append(f"configure({metrics}, {sampling_interval}, {trigger_mode.name})")
            self.metrics = metrics

        def start(self) -> None:
            calls.append("start")

        def stop(self) -> None:
            calls.append("stop")

        def decode(self, max_samples: int) -> list:
            calls.append("decode")
            decoded = _PmCounterData(_pm_samples(t0)[0].samples)
            decoded.metrics = self.metrics
            return decoded

        def disable(self) -> None:
            calls.append("disable")

    activity = types.ModuleType("cupti.cupti")
    activity.ActivityKind = enum.IntEnum("ActivityKind", KINDS)
    activity.activity_register_callbacks = lambda requested, completed: calls.append("register")
    activity.activity_enable = lambda kind: calls.append(f"activity_enable({kind.name})")
    activity.activity_disable = lambda kind: calls.append(f"activity_disable({kind.name})")
    activity.activity_flush_all = lambda flag: calls.append("flush")
    activity.finalize = lambda: calls.append("finalize")
    pm_sampling = types.ModuleType("cupti.pm_sampling")
    pm_sampling.Collector = Collector
    pm_sampling.TriggerMode = enum.IntEnum("TriggerMode", {"GPU_SYSCLK_INTERVAL": 0, "GPU_TIME_INTERVAL": 1})
    package = types.ModuleType("cupti")
    package.cupti, package.pm_sampling = activity, pm_sampling
    driver = types.ModuleType("cuda.bindings.driver")
    driver.cuInit = lambda flags: (0,)
    driver.cuDeviceGet = lambda index: (0, f"dev{index}")
    driver.cuDevicePrimaryCtxRetain = lambda device: (calls.append(f"retain({device})"), (0, "ctx"))[1]
    driver.cuDevicePrimaryCtxRelease = lambda device: (calls.append(f"release({device})"), (0,))[1]
    bindings = types.ModuleType("cuda.bindings")
    bindings.driver = driver
    cuda = types.ModuleType("cuda")
    cuda.bindings = bindings
    for name, module in {"cupti": package, "cupti.cupti": activity, "cupti.pm_sampling": pm_sampling,
                         "cuda": cuda, "cuda.bindings": bindings, "cuda.bindings.driver": driver}.items():
        monkeypatch.setitem(sys.modules, name, module)


class _PmCounterData(list):
    """A decoded ``cupti.pm_sampling.CounterData``: iterates its samples, names its metrics."""

    metrics: list[str]


def test_recorder_drives_pm_sampling_in_the_documented_order(tmp_path: Path) -> None:
    calls: list[str] = []
    with pytest.MonkeyPatch.context() as monkeypatch:
        _fake_cupti(monkeypatch, calls)
        with cupti.record(tmp_path, kinds=["KERNEL"], metrics=METRICS, sampling_interval_ns=10_000) as recording:
            calls.append("block")
    assert calls == [
        "retain(dev0)", "Collector(0)", "enable", f"configure({METRICS}, 10000, GPU_TIME_INTERVAL)",
        "start", "register", "activity_enable(KERNEL)", "block",
        "stop", "decode", "disable", "release(dev0)", "flush", "activity_disable(KERNEL)", "finalize",
    ]
    assert recording.counts == {"pm_sampling": 2}
    report = xprosql.ingest(recording.path, into=tmp_path / "run")
    assert report.ok
    counters = xprosql.load(tmp_path / "run").sql("SELECT count(*) FROM counters WHERE counter_set = 'pm_sampling'")
    assert counters.rows() == [(3,)]  # two samples x two metrics, less the NaN


def test_pm_sampling_that_cannot_start_says_why_and_unwinds(tmp_path: Path) -> None:
    calls: list[str] = []
    with pytest.MonkeyPatch.context() as monkeypatch:
        _fake_cupti(monkeypatch, calls, enable_error=PermissionError("Insufficient privileges for PM sampling"))
        with pytest.raises(cupti.CuptiUnavailableError, match="could not start on GPU 0.*Insufficient privileges"), \
                cupti.record(tmp_path, metrics=METRICS):
            pass
    assert calls == ["retain(dev0)", "Collector(0)", "enable", "release(dev0)"]  # no activity was enabled
    assert not any(tmp_path.iterdir())


@pytest.mark.skipif(HAS_CUPTI, reason="cupti-python is installed: the no-GPU behaviour is not observable here")
def test_metrics_without_cupti_say_why(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(cupti.CuptiUnavailableError, match="cupti-python is not importable"), \
            cupti.record(tmp_path, metrics=METRICS):
        pass
    script = tmp_path / "train.py"
    script.write_text("print('training')\n")
    assert main(["record", "--into", str(tmp_path / "run"), "--metrics", ",".join(METRICS), "--",
                 sys.executable, str(script)]) == 2
    assert "cupti-python is not importable" in capsys.readouterr().err


@pytest.mark.skipif(not HAS_CUPTI, reason="needs cupti-python and an NVIDIA GPU (the device check runs it)")
def test_live_pm_sampling_of_a_cuda_program(tmp_path: Path) -> None:
    cp = pytest.importorskip("cupy", reason="the live capture test drives the GPU with CuPy")
    with cupti.record(tmp_path / "raw", metrics=METRICS, sampling_interval_ns=100_000) as recording:
        x = cp.arange(1 << 24, dtype=cp.float32)
        for _ in range(200):
            x = x * 1.0001
        x.sum().get()
    decoded = recording.pm_samples[0]
    assert decoded.metrics == METRICS and len(decoded.samples) >= 1
    events = _written_trace(recording)["traceEvents"]
    samples = [e for e in events if e["cat"] == cupti.PM_SAMPLING_CATEGORY]
    kernels = [e for e in events if e["cat"] == "kernel"]
    assert samples and len(samples) == recording.counts[cupti.PM_SAMPLING_CATEGORY]
    # One clock: the samples in which the SMs were busy overlap the kernels' span.
    first, last = min(k["ts"] for k in kernels), max(k["ts"] + k["dur"] for k in kernels)
    busy = [s for s in samples if s["args"].get("sm__cycles_active.avg", 0) > 0]
    assert busy and all(s["ts"] < last and s["ts"] + s["dur"] > first for s in busy)
    run = _ingested_if_the_stack_is_here(recording, tmp_path)
    if run is not None:
        rows = run.sql("SELECT counter, count(*) FROM counters WHERE counter_set = 'pm_sampling' GROUP BY counter "
                       "ORDER BY counter").rows()
        assert rows == [(m, len(samples)) for m in sorted(METRICS)]


# cbids of the runtime calls below, named as cupti.get_callback_name names them (CUDA 13 runtime API).
_RUNTIME_NAMES = {211: "cudaLaunchKernel_v7000", 311: "cudaGraphLaunch_v10000", 318: "cudaStreamBeginCapture_v10000",
                  319: "cudaStreamEndCapture_v10000"}


def _marker(flags: int, at: int, marker_id: int, name: str | None = None) -> SimpleNamespace:
    """A CUpti_ActivityMarker2 as cupti-python delivers it: ``flags_``, the thread in ``object_id.pt``."""
    return SimpleNamespace(kind=12, flags_=flags, timestamp=at, id=marker_id, name=name, domain=None, object_kind=2,
                           object_id=SimpleNamespace(pt=SimpleNamespace(process_id=42, thread_id=43)))


def _nvtx_graph_records() -> list[SimpleNamespace]:
    """A program that captures a CUDA graph inside an NVTX range, replays it inside another, and launches a kernel
    inside nested ranges; one range never closes, one end has no start.

    Hand-built: no GPU here to record real ones (the device check records real ones), and no real CUPTI recording
    with NVTX ranges or graph launches exists in tests/data.
    """
    t0 = 1_790_000_000_000_000_000

    def call(cbid: int, start: int, end: int, correlation: int) -> SimpleNamespace:
        return SimpleNamespace(kind=5, cbid=cbid, start=t0 + start, end=t0 + end, process_id=42, thread_id=43,
                               correlation_id=correlation)

    def kernel(name: str, start: int, end: int, correlation: int, graph: int = 0, node: int = 0) -> SimpleNamespace:
        return SimpleNamespace(kind=10, device_id=0, context_id=1, stream_id=7, correlation_id=correlation, name=name,
                               grid_x=8, grid_y=1, grid_z=1, block_x=128, block_y=1, block_z=1, registers_per_thread=32,
                               static_shared_memory=0, dynamic_shared_memory=0, graph_id=graph, graph_node_id=node,
                               start=t0 + start, end=t0 + end)

    return [
        _marker(2, t0 + 1_000, 1, "capture"),
        call(318, 2_000, 3_000, 20),
        call(211, 4_000, 5_000, 21),  # captured: CUDA records the call, no kernel runs
        call(211, 6_000, 7_000, 22),
        call(319, 8_000, 9_000, 23),
        _marker(4, t0 + 10_000, 1),
        _marker(2, t0 + 20_000, 2, "replay"),
        call(311, 21_000, 23_000, 30),
        _marker(4, t0 + 24_000, 2),
        kernel("_Z5scalePf", 25_000, 35_000, 30, graph=7, node=101),
        kernel("_Z6offsetPf", 36_000, 41_000, 30, graph=7, node=102),
        _marker(2, t0 + 50_000, 3, "step"),
        _marker(2, t0 + 51_000, 4, "forward"),
        call(211, 52_000, 53_000, 40),
        _marker(4, t0 + 60_000, 4),
        _marker(4, t0 + 70_000, 3),
        kernel("_Z5scalePf", 61_000, 69_000, 40),
        _marker(1, t0 + 71_000, 5, "checkpoint"),  # a mark
        _marker(4, t0 + 72_000, 99),  # an end whose start came before the recording
        _marker(2, t0 + 80_000, 6, "never closed"),
    ]


def test_nvtx_ranges_and_graph_launches_of_a_recording(tmp_path: Path) -> None:
    import gzip
    import json

    records = _nvtx_graph_records()
    trace = cupti.records_to_trace(records, kinds=KINDS, api_name=lambda domain, cbid: _RUNTIME_NAMES[cbid],
                                   host="gpuhost", pid=42)
    assert trace[cupti.RECORDER_KEY]["nvtx"] == {"ranges": 4, "marks": 1, "unclosed": 1, "unopened": 1, "untimed": 0}
    path = tmp_path / "gpuhost.42.cupti.json.gz"
    path.write_bytes(gzip.compress(json.dumps(trace).encode()))
    assert xprosql.ingest(path, into=tmp_path / "run").ok
    run = xprosql.load(tmp_path / "run")

    # The walk: each range from its start and end records; its kernels are those whose launch (same correlation)
    # starts inside it on its thread.
    origin = min(r.timestamp if hasattr(r, "timestamp") else r.start for r in records)
    starts = {r.id: r for r in records if getattr(r, "flags_", 0) == 2}
    ranges = {starts[r.id].name: (starts[r.id].timestamp, r.timestamp) for r in records
              if getattr(r, "flags_", 0) == 4 and r.id in starts}
    launches = {r.correlation_id: r.start for r in records if r.kind == 5}
    kernels = [r for r in records if r.kind == 10]
    paths = {"capture": "capture", "replay": "replay", "step": "step", "forward": "step/forward"}
    tree = {r["path"]: r for r in run.names().pl().iter_rows(named=True)}
    assert set(tree) == set(paths.values())
    for name, (start, end) in ranges.items():
        row = tree[paths[name]]
        assert row["source"] == "nvtx" and row["calls"] == 1
        assert row["cpu_time_ps"] == (end - start) * 1000
        inside = [k for k in kernels if start <= launches[k.correlation_id] < end]
        assert row["gpu_activities"] == len(inside)
        assert row["gpu_time_ps"] == sum(k.end - k.start for k in inside) * 1000
    assert tree["step"]["cpu_self_ps"] == ((ranges["step"][1] - ranges["step"][0])
                                           - (ranges["forward"][1] - ranges["forward"][0])) * 1000

    # The graph's kernels: their launch, the graph ids CUPTI gives, and, matched by position (CUDA's captured
    # launches name no kernel), the NVTX path of their captured launch.
    nodes = run.graph_kernels().pl()
    graph = sorted((k for k in kernels if k.graph_id), key=lambda k: k.start)
    assert nodes["name"].to_list() == [k.name for k in graph]
    assert nodes["graph_id"].to_list() == [7, 7] and nodes["graph_node_id"].to_list() == [101, 102]
    assert set(nodes["launch_name"]) == {"cudaGraphLaunch_v10000"} and set(nodes["match"]) == {"position"}
    assert nodes["path"].to_list() == ["capture", "capture"] and nodes["innermost_op"].null_count() == 2
    # A range still open at the end stays, as a marker at its start (times are ps after the first record).
    unclosed = next(r for r in records if getattr(r, "name", None) == "never closed")
    assert run.sql("SELECT start_ps FROM events WHERE name = 'never closed' AND category = 'marker'").rows() == [
        ((unclosed.timestamp - origin) * 1000,)]


def test_recording_points_nvtx_at_cupti_for_the_block(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    calls: list[str] = []
    monkeypatch.delenv("NVTX_INJECTION64_PATH", raising=False)
    monkeypatch.setattr(cupti, "_cupti_library_path", lambda: "/opt/cupti/lib/libcupti.so")
    _fake_cupti(monkeypatch, calls)
    with cupti.record(tmp_path, kinds=["MARKER"]):
        inside = os.environ.get("NVTX_INJECTION64_PATH")
    assert inside == "/opt/cupti/lib/libcupti.so" and "NVTX_INJECTION64_PATH" not in os.environ
    monkeypatch.setenv("NVTX_INJECTION64_PATH", "/mine/libinject.so")  # the user's own choice stays
    with cupti.record(tmp_path, kinds=["MARKER"]):
        assert os.environ["NVTX_INJECTION64_PATH"] == "/mine/libinject.so"
    assert os.environ["NVTX_INJECTION64_PATH"] == "/mine/libinject.so"
