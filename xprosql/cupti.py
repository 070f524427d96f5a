"""Live CUDA activity capture through CUPTI (``cupti-python``), written as a trace xprosql ingests.

The recorder enables CUPTI activity kinds (kernels, memcpy, memset, runtime and
driver calls, synchronization, markers) while user code runs, then writes what
CUPTI delivered as a Kineto-format trace (``*.cupti.json.gz``): the same JSON
shape PyTorch's profiler writes, so one ingester and one set of tables serve both.
Kernels, copies and memsets keep the ``graph id`` and ``graph node id`` of a CUDA
graph launch (``names.graph_kernels`` reads them).

NVTX: CUPTI delivers NVTX ranges and marks as MARKER records once NVTX loads CUPTI
as its injection library, which ``record`` arranges (``NVTX_INJECTION64_PATH``, set
for the block when unset; NVTX reads it at its first call in the process, so a
program that used NVTX before the block records no ranges). A range's start and end
records become one ``nvtx`` event on the thread that opened it, which ``names.tree``
nests with the thread's API calls, as it does PyTorch's ``record_function``.
Recording needs an NVIDIA GPU and ``pip install 'xprosql[cupti]'``; ingesting a
recording works anywhere.

With ``metrics=[...]`` the recorder also runs CUPTI PM sampling
(``cupti.pm_sampling``, cupti-python >= 13.3) on one GPU while the block runs:
the GPU samples the metrics every ``sampling_interval_ns``, and each decoded
sample is written as one ``pm_sampling`` event whose args hold the metric
values; ingest turns them into ``counters`` rows (``counter_set = 'pm_sampling'``).

Example:
    >>> import xprosql.cupti
    >>> with xprosql.cupti.record("recordings/") as recording:     # doctest: +SKIP
    ...     train_step()
    >>> xprosql.ingest(recording.path, into="run/")              # doctest: +SKIP
    >>> with xprosql.cupti.record("recordings/", metrics=["sm__cycles_active.avg"]):  # doctest: +SKIP
    ...     train_step()
"""

from __future__ import annotations

import gzip
import json
import math
import os
import socket
import time
import warnings
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from xprosql.errors import XprosqlError
from xprosql.models.recording import PM_SAMPLE_ARG, PM_SAMPLING_CATEGORY, RECORDER_KEY

__all__ = [
    "DEFAULT_KINDS",
    "NVTX_CATEGORY",
    "PM_SAMPLE_ARG",
    "PM_SAMPLING_CATEGORY",
    "RECORDER_KEY",
    "CuptiUnavailableError",
    "PmSamples",
    "Recording",
    "record",
    "records_to_trace",
]

DEFAULT_KINDS = ("CONCURRENT_KERNEL", "MEMCPY", "MEMSET", "RUNTIME", "DRIVER", "SYNCHRONIZATION", "MARKER")
_BUFFER_BYTES = 8 * 1024 * 1024
_NVTX_INJECTION = "NVTX_INJECTION64_PATH"
DEFAULT_SAMPLING_INTERVAL_NS = 1_000_000
# decode() allocates its counter data image for max_samples up front (kilobytes per sample):
# size it to the block's length, but bound the host memory a long block can take.
_PM_MAX_SAMPLES = 100_000

# CUpti_ActivityMemcpyKind and CUpti_ActivityMemoryKind, named as PyTorch's traces name them.
_COPY_KINDS = {1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD", 7: "DtoA", 8: "DtoD", 9: "HtoH", 10: "PtoP"}
_MEMORY_KINDS = {0: "Unknown", 1: "Pageable", 2: "Pinned", 3: "Device", 4: "Array", 5: "Managed",
                 6: "Device Static", 7: "Managed Static"}
_SYNC_KINDS = {0: "Unknown", 1: "Event Sync", 2: "Stream Wait Event", 3: "Stream Sync", 4: "Context Sync"}
# CUpti_ActivityFlag bits of a MARKER record (cupti_activity.h).
_MARKER_INSTANTANEOUS, _MARKER_START, _MARKER_END = 1 << 0, 1 << 1, 1 << 2
# CUpti_ActivityObjectKind values whose id is a process / thread (the ``pt`` member of the id union).
_OBJECT_PROCESS, _OBJECT_THREAD = 1, 2
NVTX_CATEGORY = "nvtx"


class CuptiUnavailableError(XprosqlError):
    """CUPTI cannot record here: cupti-python is missing, or there is no NVIDIA GPU and driver."""


@dataclass
class Recording:
    """What a :func:`record` block captured; ``path`` is set when the block ends."""

    directory: Path
    records: list[Any] = field(default_factory=list)
    path: Path | None = None
    counts: dict[str, int] = field(default_factory=dict)
    pm_samples: dict[int, PmSamples] = field(default_factory=dict)


class PmSamples(NamedTuple):
    """Decoded PM samples of one GPU, as ``cupti.pm_sampling.Collector.decode()`` returns them.

    ``metrics`` are the metric names in value order (``CounterData.metrics``); each of
    ``samples`` is a ``cupti.pm_sampling.Sample``: ``start_timestamp`` and ``end_timestamp``
    (ns, CUPTI's clock) and ``metric_values`` (one float per metric).
    """

    metrics: list[str]
    samples: list[Any]


def _load_cupti() -> Any:
    try:
        from cupti import cupti
    except ImportError as exc:
        raise CuptiUnavailableError(
            f"cupti-python is not importable ({exc}); install it with pip install 'xprosql[cupti]' "
            "on a machine with an NVIDIA GPU and driver"
        ) from None
    return cupti


def _get(record: Any, *names: str, default: Any = None) -> Any:
    """First present field: record classes are renamed between CUPTI releases, fields keep their names."""
    for name in names:
        value = getattr(record, name, None)
        if value is not None:
            return value
    return default


def _api_name(cupti: Any, domain: str, cbid: int) -> str:
    try:
        return str(cupti.get_callback_name(getattr(cupti.CallbackDomain, domain), cbid))
    except Exception:  # older bindings have no name lookup; the id still identifies the call
        return f"{domain.lower()}_cbid_{cbid}"


def records_to_trace(records: Iterable[Any], *, kinds: dict[str, int], api_name: Any = None,
                     host: str | None = None, pid: int | None = None,
                     pm_samples: Mapping[int, PmSamples] | None = None,
                     device_properties: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any]:
    """CUPTI activity records as a Kineto-format trace dict (pid = GPU for device work, like PyTorch).

    ``kinds`` maps ``cupti.ActivityKind`` member names to their int values; ``api_name(domain, cbid)``
    names runtime and driver calls. ``pm_samples`` maps a GPU index to its decoded PM samples.
    ``device_properties``: the GPUs as PyTorch's traces describe them (``deviceProperties``: id,
    name, totalGlobalMem, computeMajor, computeMinor, numSms), which give ingest their model and roofs.
    """
    by_value = {value: name for name, value in kinds.items()}
    api_name = api_name or (lambda domain, cbid: f"{domain.lower()}_cbid_{cbid}")
    records = list(records)
    pm_samples = pm_samples or {}
    starts = [_get(r, "start", "timestamp") for r in records]
    starts += [s.start_timestamp for decoded in pm_samples.values() for s in decoded.samples]
    base = min((s for s in starts if s), default=0)  # 0: a PM sample whose start was never set
    context_device: dict[int, int] = {}
    for r in records:
        if _get(r, "device_id") is not None and _get(r, "context_id") is not None:
            context_device[r.context_id] = r.device_id
    events: list[dict[str, Any]] = []
    skipped: dict[str, int] = {}
    markers: list[Any] = []

    def us(ns: int) -> float:
        return (ns - base) / 1000.0

    for r in records:
        kind = by_value.get(r.kind, str(r.kind))
        start, end = _get(r, "start"), _get(r, "end")
        if kind in ("KERNEL", "CONCURRENT_KERNEL"):
            stream = _get(r, "stream_id")
            events.append({
                "ph": "X", "cat": "kernel", "name": r.name, "pid": r.device_id, "tid": stream,
                "ts": us(start), "dur": (end - start) / 1000.0,
                "args": {
                    "device": r.device_id, "context": _get(r, "context_id"), "stream": stream,
                    "correlation": r.correlation_id,
                    "grid": [r.grid_x, r.grid_y, r.grid_z], "block": [r.block_x, r.block_y, r.block_z],
                    "registers per thread": _get(r, "registers_per_thread"),
                    "shared memory": (_get(r, "static_shared_memory", default=0)
                                      + _get(r, "dynamic_shared_memory", default=0)),
                    "graph id": _get(r, "graph_id"), "graph node id": _get(r, "graph_node_id"),
                },
            })
        elif kind in ("MEMCPY", "MEMCPY2"):
            copy = _COPY_KINDS.get(r.copy_kind, str(r.copy_kind))
            src = _MEMORY_KINDS.get(_get(r, "src_kind"), "Unknown")
            dst = _MEMORY_KINDS.get(_get(r, "dst_kind"), "Unknown")
            events.append({
                "ph": "X", "cat": "gpu_memcpy", "name": f"Memcpy {copy} ({src} -> {dst})",
                "pid": r.device_id, "tid": _get(r, "stream_id"), "ts": us(start), "dur": (end - start) / 1000.0,
                "args": {"device": r.device_id, "context": _get(r, "context_id"), "stream": _get(r, "stream_id"),
                         "correlation": r.correlation_id, "bytes": r.bytes,
                         "src device": _get(r, "src_device_id"), "dst device": _get(r, "dst_device_id"),
                         "graph id": _get(r, "graph_id"), "graph node id": _get(r, "graph_node_id")},
            })
        elif kind == "MEMSET":
            memory = _MEMORY_KINDS.get(_get(r, "memory_kind"), "Unknown")
            events.append({
                "ph": "X", "cat": "gpu_memset", "name": f"Memset ({memory})",
                "pid": r.device_id, "tid": _get(r, "stream_id"), "ts": us(start), "dur": (end - start) / 1000.0,
                "args": {"device": r.device_id, "context": _get(r, "context_id"), "stream": _get(r, "stream_id"),
                         "correlation": r.correlation_id, "bytes": r.bytes, "value": _get(r, "value"),
                         "graph id": _get(r, "graph_id"), "graph node id": _get(r, "graph_node_id")},
            })
        elif kind in ("RUNTIME", "DRIVER"):
            domain = "RUNTIME_API" if kind == "RUNTIME" else "DRIVER_API"
            events.append({
                "ph": "X", "cat": "cuda_runtime" if kind == "RUNTIME" else "cuda_driver",
                "name": api_name(domain, r.cbid), "pid": _get(r, "process_id", default=pid),
                "tid": _get(r, "thread_id"), "ts": us(start), "dur": (end - start) / 1000.0,
                "args": {"cbid": r.cbid, "correlation": r.correlation_id},
            })
        elif kind == "SYNCHRONIZATION":
            sync = _SYNC_KINDS.get(_get(r, "type"), str(_get(r, "type")))
            events.append({
                "ph": "X", "cat": "cuda_sync", "name": sync,
                "pid": context_device.get(_get(r, "context_id"), 0), "tid": _get(r, "stream_id"),
                "ts": us(start), "dur": (end - start) / 1000.0,
                "args": {"cuda_sync_kind": sync, "stream": _get(r, "stream_id"), "correlation": r.correlation_id,
                         "context": _get(r, "context_id"), "cuda event id": _get(r, "cuda_event_id")},
            })
        elif kind == "MARKER":
            markers.append(r)
        else:
            skipped[kind] = skipped.get(kind, 0) + 1
    nvtx = _marker_events(markers, us, pid, events)
    for event in events:  # JSON has no None: drop fields the record lacked
        event["args"] = {k: v for k, v in event["args"].items() if v is not None}
    recorder: dict[str, Any] = {"host": host, "pid": pid, "skipped_record_kinds": skipped}
    if markers:
        recorder["nvtx"] = nvtx
    if pm_samples:
        recorder["pm_sampling"] = {str(device): _pm_events(decoded, device, us, events)
                                   for device, decoded in sorted(pm_samples.items())}
    trace = {"schemaVersion": 1, "baseTimeNanoseconds": base, "traceEvents": events, RECORDER_KEY: recorder}
    if device_properties:
        trace["deviceProperties"] = [dict(p) for p in device_properties]
    return trace


def _marker_thread(record: Any, pid: int | None) -> tuple[int | None, int]:
    """(process, thread) of a MARKER record: its object id's ``pt`` member when the object is a thread or process."""
    kind = _get(record, "object_kind")
    ids = getattr(_get(record, "object_id"), "pt", None)
    if ids is None or kind not in (_OBJECT_PROCESS, _OBJECT_THREAD):
        return pid, 0
    process = _get(ids, "process_id", default=pid)
    return process, (_get(ids, "thread_id", default=0) if kind == _OBJECT_THREAD else 0)


def _marker_events(markers: Sequence[Any], us: Any, pid: int | None, events: list[dict[str, Any]]) -> dict[str, int]:
    """MARKER records as events: an NVTX range's start and end records (same id) as one ``nvtx`` complete event on
    the thread that opened it, a mark as an instant ``marker`` event. Returns the counts: ``ranges``, ``marks``, and
    what could not be paired: ``unclosed`` ranges (still open when the recording ended: kept as a ``marker`` instant
    at their start, args ``unclosed``), ``unopened`` ends (their start came before the recording) and records
    without a timestamp (``untimed``), which CUPTI could not time."""
    counts = {"ranges": 0, "marks": 0, "unclosed": 0, "unopened": 0, "untimed": 0}
    opened: dict[int, tuple[Any, int | None, int]] = {}
    for r in sorted(markers, key=lambda m: (_get(m, "timestamp", default=0), _get(m, "id", default=0))):
        flags = int(_get(r, "flags_", "flags", default=0))
        if not _get(r, "timestamp"):
            counts["untimed"] += 1
            continue
        process, thread = _marker_thread(r, pid)
        if flags & _MARKER_START:
            opened[r.id] = (r, process, thread)
        elif flags & _MARKER_END:
            start = opened.pop(r.id, None)
            if start is None:
                counts["unopened"] += 1
                continue
            first, process, thread = start
            counts["ranges"] += 1
            events.append({"ph": "X", "cat": NVTX_CATEGORY, "name": _get(first, "name", default="") or "",
                           "pid": process, "tid": thread, "ts": us(first.timestamp),
                           "dur": (r.timestamp - first.timestamp) / 1000.0,
                           "args": {"id": first.id, "domain": _get(first, "domain")}})
        else:  # a mark (instantaneous), or a synchronization marker
            counts["marks"] += 1
            events.append({"ph": "i", "s": "t", "cat": "marker", "name": _get(r, "name", default="") or "",
                           "pid": process, "tid": thread, "ts": us(r.timestamp),
                           "args": {"id": _get(r, "id"), "domain": _get(r, "domain"), "flags": flags}})
    for first, process, thread in opened.values():
        counts["unclosed"] += 1
        events.append({"ph": "i", "s": "t", "cat": "marker", "name": _get(first, "name", default="") or "",
                       "pid": process, "tid": thread, "ts": us(first.timestamp),
                       "args": {"id": first.id, "domain": _get(first, "domain"), "unclosed": True}})
    return counts


def _cupti_library_path() -> str | None:
    """The CUPTI library cupti-python uses (found by cuda-pathfinder, as cupti-python finds it)."""
    try:
        from cuda.pathfinder import load_nvidia_dynamic_lib
        return load_nvidia_dynamic_lib("cupti").abs_path
    except Exception:  # no cuda-pathfinder, or no CUPTI library where it looks
        return None


def _pm_events(decoded: PmSamples, device: int, us: Any, events: list[dict[str, Any]]) -> dict[str, Any]:
    """Append one pm_sampling event per sample of ``device``; return what was written and left out."""
    dropped = non_finite = 0
    for index, sample in enumerate(decoded.samples):
        start, end = sample.start_timestamp, sample.end_timestamp
        if not start or end < start:  # an interval CUPTI never opened has no place on the timeline
            dropped += 1
            continue
        args: dict[str, Any] = {PM_SAMPLE_ARG: index}
        for metric, value in zip(decoded.metrics, sample.metric_values):
            if math.isfinite(value):  # JSON has no NaN or inf
                args[metric] = float(value)
            else:
                non_finite += 1
        events.append({"ph": "X", "cat": PM_SAMPLING_CATEGORY, "name": "PM sample", "pid": device,
                       "tid": "PM sampling", "ts": us(start), "dur": (end - start) / 1000.0, "args": args})
    return {"metrics": list(decoded.metrics), "samples": len(decoded.samples) - dropped,
            "dropped_samples": dropped, "non_finite_values": non_finite}


def _device_properties(devices: Iterable[int]) -> list[dict[str, Any]]:
    """``deviceProperties`` of the GPUs the recording saw, read through the CUDA driver (cuda-bindings, a
    cupti-python dependency); a GPU the driver cannot describe is left out (ingest then has no model for it)."""
    try:
        from cuda.bindings import driver
        attribute = driver.CUdevice_attribute
    except (ImportError, AttributeError):
        return []
    wanted = {"numSms": attribute.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
              "computeMajor": attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
              "computeMinor": attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR}
    described: list[dict[str, Any]] = []
    if int(driver.cuInit(0)[0]):
        return described
    for index in sorted(set(devices)):
        try:
            err, device = driver.cuDeviceGet(index)
            if int(err):
                continue
            err, name = driver.cuDeviceGetName(256, device)
            err_memory, memory = driver.cuDeviceTotalMem(device)
            if int(err) or int(err_memory):
                continue
            properties: dict[str, Any] = {"id": index, "name": bytes(name).split(b"\0", 1)[0].decode(),
                                          "totalGlobalMem": int(memory)}
            for key, which in wanted.items():
                err, value = driver.cuDeviceGetAttribute(which, device)
                if not int(err):
                    properties[key] = int(value)
        except Exception:  # an older cuda-bindings without one of these calls: the GPU stays undescribed
            continue
        described.append(properties)
    return described


def _load_pm_sampling() -> tuple[Any, Any]:
    """``cupti.pm_sampling`` and the CUDA driver bindings (``cuda-bindings``, a cupti-python dependency)."""
    try:
        from cuda.bindings import driver
        from cupti import pm_sampling
    except ImportError as exc:
        raise CuptiUnavailableError(
            f"cupti-python has no PM sampling ({exc}); metrics= needs cupti-python >= 13.3"
        ) from None
    return pm_sampling, driver


class _PmSampler:
    """One ``cupti.pm_sampling.Collector``, driven in the order NVIDIA's PM sampling sample uses.

    enable -> configure -> start, then at the end stop -> decode -> disable. The device's
    CUDA primary context is retained first: PM sampling targets an initialized device (every
    NVIDIA example runs cuInit and makes a context before enable), and ``xprosql record``
    starts before the program has touched CUDA.
    """

    def __init__(self, metrics: list[str], *, device: int, interval_ns: int) -> None:
        pm_sampling, driver = _load_pm_sampling()
        self.device, self.metrics, self.interval_ns = device, metrics, interval_ns
        self._driver = driver
        self._cu_device: Any = None
        self._collector: Any = None
        try:
            self._retain_context()
            collector = pm_sampling.Collector(device_index=device)
            collector.enable()
            self._collector = collector
            collector.configure(metrics=metrics, sampling_interval=interval_ns,
                                trigger_mode=pm_sampling.TriggerMode.GPU_TIME_INTERVAL)
            collector.start()
        except Exception as exc:
            self._release()
            raise CuptiUnavailableError(
                f"CUPTI PM sampling of {metrics} could not start on GPU {device} (no NVIDIA GPU or driver, "
                f"no permission to read counters, or metrics this GPU cannot sample in one pass?): {exc}"
            ) from None
        self._started_ns = time.monotonic_ns()

    def _retain_context(self) -> None:
        driver = self._driver
        err = driver.cuInit(0)[0]
        if int(err):
            raise RuntimeError(f"cuInit failed: {err}")
        err, cu_device = driver.cuDeviceGet(self.device)
        if int(err):
            raise RuntimeError(f"cuDeviceGet({self.device}) failed: {err}")
        err, _ = driver.cuDevicePrimaryCtxRetain(cu_device)
        if int(err):
            raise RuntimeError(f"cuDevicePrimaryCtxRetain failed: {err}")
        self._cu_device = cu_device

    def _release(self) -> None:
        if self._collector is not None:
            self._collector.disable()
            self._collector = None
        if self._cu_device is not None:
            self._driver.cuDevicePrimaryCtxRelease(self._cu_device)
            self._cu_device = None

    def finish(self) -> tuple[PmSamples | None, str | None]:
        """Stop, decode and evaluate every sample, disable: (samples, None) or (None, why not)."""
        collector = self._collector
        # One sample per interval the block lasted, with room to spare: filling the image means lost samples.
        max_samples = min(_PM_MAX_SAMPLES, (time.monotonic_ns() - self._started_ns) // self.interval_ns + 16)
        try:
            collector.stop()
            counter_data = collector.decode(max_samples=max_samples)
            # Evaluate every sample now, before disable() (as NVIDIA's sample does): CounterData
            # evaluates metrics on the host lazily, and disable() deinitializes the profiler.
            decoded = PmSamples(list(counter_data.metrics), list(counter_data))
        except Exception as exc:  # e.g. MemoryError: the hardware buffer overflowed
            return None, f"{type(exc).__name__}: {exc}"
        finally:
            self._release()
        if len(decoded.samples) >= max_samples:
            return decoded, f"decoded the maximum of {max_samples} samples; later ones were dropped"
        return decoded, None


@contextmanager
def record(directory: str | os.PathLike[str], *, kinds: Iterable[str] = DEFAULT_KINDS,
           metrics: Sequence[str] = (), metrics_device: int = 0,
           sampling_interval_ns: int = DEFAULT_SAMPLING_INTERVAL_NS) -> Iterator[Recording]:
    """Record CUDA activity while the block runs; write ``<host>.<pid>.<time>.cupti.json.gz`` into ``directory``.

    ``metrics``: CUPTI PM sampling metric names (e.g. ``sm__cycles_active.avg``) to sample on GPU
    ``metrics_device`` every ``sampling_interval_ns``; they must fit one pass (CUPTI's rule).
    Raises :class:`CuptiUnavailableError` at entry when CUPTI cannot record here, or cannot
    PM-sample the metrics.
    """
    cupti = _load_cupti()
    recording = Recording(Path(directory))
    kind_values = {name: int(member) for name, member in cupti.ActivityKind.__members__.items()}
    wanted = [name for name in kinds if name in kind_values]
    # PM sampling first: if it cannot start, there is no activity state to unwind.
    sampler = _PmSampler(list(metrics), device=metrics_device, interval_ns=sampling_interval_ns) if metrics else None

    def buffer_requested() -> tuple[int, int]:
        return _BUFFER_BYTES, 0

    def buffer_completed(activities: list[Any]) -> None:
        recording.records.extend(activities)

    enabled: list[str] = []
    # NVTX reports ranges to CUPTI only as its injection library (read at NVTX's first call in the process).
    injection = os.environ.get(_NVTX_INJECTION)
    if "MARKER" in wanted and injection is None:
        found = _cupti_library_path()
        if found:
            os.environ[_NVTX_INJECTION] = found
        else:
            warnings.warn("xprosql.cupti: CUPTI's library was not found for NVTX (cuda-pathfinder): NVTX ranges will "
                          f"not be recorded unless {_NVTX_INJECTION} names it", stacklevel=3)
    try:
        cupti.activity_register_callbacks(buffer_requested, buffer_completed)
        for name in wanted:
            cupti.activity_enable(getattr(cupti.ActivityKind, name))
            enabled.append(name)
    except Exception as exc:
        for name in enabled:
            cupti.activity_disable(getattr(cupti.ActivityKind, name))
        if sampler is not None:
            sampler.finish()
        if injection is None:
            os.environ.pop(_NVTX_INJECTION, None)
        raise CuptiUnavailableError(f"CUPTI could not start recording (no NVIDIA GPU or driver?): {exc}") from None
    try:
        yield recording
    finally:
        pm_problem = None
        if sampler is not None:
            decoded, pm_problem = sampler.finish()
            if decoded is not None:
                recording.pm_samples[sampler.device] = decoded
            if pm_problem:
                warnings.warn(f"xprosql.cupti: PM sampling on GPU {sampler.device}: {pm_problem}", stacklevel=3)
        cupti.activity_flush_all(1)
        for name in enabled:
            cupti.activity_disable(getattr(cupti.ActivityKind, name))
        cupti.finalize()
        if injection is None:
            os.environ.pop(_NVTX_INJECTION, None)
        devices = {r.device_id for r in recording.records if isinstance(getattr(r, "device_id", None), int)}
        trace = records_to_trace(recording.records, kinds=kind_values,
                                 api_name=lambda domain, cbid: _api_name(cupti, domain, cbid),
                                 host=socket.gethostname(), pid=os.getpid(), pm_samples=recording.pm_samples,
                                 device_properties=_device_properties(devices | set(recording.pm_samples)))
        if sampler is not None:
            pm_info = trace[RECORDER_KEY].setdefault("pm_sampling", {}).setdefault(str(sampler.device), {})
            pm_info.update(metrics=sampler.metrics, sampling_interval_ns=sampler.interval_ns)
            if pm_problem:
                pm_info["problem"] = pm_problem
        recording.counts = {}
        for event in trace["traceEvents"]:
            recording.counts[event["cat"]] = recording.counts.get(event["cat"], 0) + 1
        recording.directory.mkdir(parents=True, exist_ok=True)
        name = f"{socket.gethostname()}.{os.getpid()}.{time.strftime('%Y%m%d_%H%M%S')}.cupti.json.gz"
        recording.path = recording.directory / name
        tmp = recording.path.with_suffix(".tmp")
        tmp.write_bytes(gzip.compress(json.dumps(trace).encode()))
        tmp.rename(recording.path)
