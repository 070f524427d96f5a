"""Live CUDA activity capture through CUPTI (``cupti-python``), written as a trace xprosql ingests.

The recorder enables CUPTI activity kinds (kernels, memcpy, memset, runtime and
driver calls, synchronization, markers) while user code runs, then writes what
CUPTI delivered as a Kineto-format trace (``*.cupti.json.gz``): the same JSON
shape PyTorch's profiler writes, so one ingester and one set of tables serve both.
Recording needs an NVIDIA GPU and ``pip install 'xprosql[cupti]'``; ingesting a
recording works anywhere.

Example:
    >>> import xprosql.cupti
    >>> with xprosql.cupti.record("recordings/") as recording:     # doctest: +SKIP
    ...     train_step()
    >>> xprosql.ingest(recording.path, into="run/")              # doctest: +SKIP
"""

from __future__ import annotations

import gzip
import json
import os
import socket
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from xprosql.errors import XprosqlError

__all__ = ["record", "Recording", "CuptiUnavailableError", "records_to_trace", "RECORDER_KEY", "DEFAULT_KINDS"]

RECORDER_KEY = "xprosqlRecorder"
DEFAULT_KINDS = ("CONCURRENT_KERNEL", "MEMCPY", "MEMSET", "RUNTIME", "DRIVER", "SYNCHRONIZATION", "MARKER")
_BUFFER_BYTES = 8 * 1024 * 1024

# CUpti_ActivityMemcpyKind and CUpti_ActivityMemoryKind, named as PyTorch's traces name them.
_COPY_KINDS = {1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD", 7: "DtoA", 8: "DtoD", 9: "HtoH", 10: "PtoP"}
_MEMORY_KINDS = {0: "Unknown", 1: "Pageable", 2: "Pinned", 3: "Device", 4: "Array", 5: "Managed",
                 6: "Device Static", 7: "Managed Static"}
_SYNC_KINDS = {0: "Unknown", 1: "Event Sync", 2: "Stream Wait Event", 3: "Stream Sync", 4: "Context Sync"}


class CuptiUnavailableError(XprosqlError):
    """CUPTI cannot record here: cupti-python is missing, or there is no NVIDIA GPU and driver."""


@dataclass
class Recording:
    """What a :func:`record` block captured; ``path`` is set when the block ends."""

    directory: Path
    records: list[Any] = field(default_factory=list)
    path: Path | None = None
    counts: dict[str, int] = field(default_factory=dict)


def _load_cupti() -> Any:
    try:
        from cupti import cupti  # type: ignore[import-not-found]
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
                     host: str | None = None, pid: int | None = None) -> dict[str, Any]:
    """CUPTI activity records as a Kineto-format trace dict (pid = GPU for device work, like PyTorch).

    ``kinds`` maps ``cupti.ActivityKind`` member names to their int values; ``api_name(domain, cbid)``
    names runtime and driver calls.
    """
    by_value = {value: name for name, value in kinds.items()}
    api_name = api_name or (lambda domain, cbid: f"{domain.lower()}_cbid_{cbid}")
    records = list(records)
    starts = [_get(r, "start", "timestamp") for r in records]
    base = min((s for s in starts if s is not None), default=0)
    context_device: dict[int, int] = {}
    for r in records:
        if _get(r, "device_id") is not None and _get(r, "context_id") is not None:
            context_device[r.context_id] = r.device_id
    events: list[dict[str, Any]] = []
    skipped: dict[str, int] = {}

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
                         "src device": _get(r, "src_device_id"), "dst device": _get(r, "dst_device_id")},
            })
        elif kind == "MEMSET":
            memory = _MEMORY_KINDS.get(_get(r, "memory_kind"), "Unknown")
            events.append({
                "ph": "X", "cat": "gpu_memset", "name": f"Memset ({memory})",
                "pid": r.device_id, "tid": _get(r, "stream_id"), "ts": us(start), "dur": (end - start) / 1000.0,
                "args": {"device": r.device_id, "context": _get(r, "context_id"), "stream": _get(r, "stream_id"),
                         "correlation": r.correlation_id, "bytes": r.bytes, "value": _get(r, "value")},
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
            events.append({"ph": "i", "s": "t", "cat": "marker", "name": _get(r, "name", default=""),
                           "pid": pid, "tid": 0, "ts": us(r.timestamp), "args": {"id": _get(r, "id")}})
        else:
            skipped[kind] = skipped.get(kind, 0) + 1
    for event in events:  # JSON has no None: drop fields the record lacked
        event["args"] = {k: v for k, v in event["args"].items() if v is not None}
    return {
        "schemaVersion": 1,
        "baseTimeNanoseconds": base,
        "traceEvents": events,
        RECORDER_KEY: {"host": host, "pid": pid, "skipped_record_kinds": skipped},
    }


@contextmanager
def record(directory: str | os.PathLike[str], *, kinds: Iterable[str] = DEFAULT_KINDS) -> Iterator[Recording]:
    """Record CUDA activity while the block runs; write ``<host>.<pid>.<time>.cupti.json.gz`` into ``directory``.

    Raises :class:`CuptiUnavailableError` at entry when CUPTI cannot record here.
    """
    cupti = _load_cupti()
    recording = Recording(Path(directory))
    kind_values = {name: int(member) for name, member in cupti.ActivityKind.__members__.items()}
    wanted = [name for name in kinds if name in kind_values]

    def buffer_requested() -> tuple[int, int]:
        return _BUFFER_BYTES, 0

    def buffer_completed(activities: list[Any]) -> None:
        recording.records.extend(activities)

    enabled: list[str] = []
    try:
        cupti.activity_register_callbacks(buffer_requested, buffer_completed)
        for name in wanted:
            cupti.activity_enable(getattr(cupti.ActivityKind, name))
            enabled.append(name)
    except Exception as exc:
        for name in enabled:
            cupti.activity_disable(getattr(cupti.ActivityKind, name))
        raise CuptiUnavailableError(f"CUPTI could not start recording (no NVIDIA GPU or driver?): {exc}") from None
    try:
        yield recording
    finally:
        cupti.activity_flush_all(1)
        for name in enabled:
            cupti.activity_disable(getattr(cupti.ActivityKind, name))
        cupti.finalize()
        trace = records_to_trace(recording.records, kinds=kind_values,
                                 api_name=lambda domain, cbid: _api_name(cupti, domain, cbid),
                                 host=socket.gethostname(), pid=os.getpid())
        recording.counts = {}
        for event in trace["traceEvents"]:
            recording.counts[event["cat"]] = recording.counts.get(event["cat"], 0) + 1
        recording.directory.mkdir(parents=True, exist_ok=True)
        name = f"{socket.gethostname()}.{os.getpid()}.{time.strftime('%Y%m%d_%H%M%S')}.cupti.json.gz"
        recording.path = recording.directory / name
        tmp = recording.path.with_suffix(".tmp")
        tmp.write_bytes(gzip.compress(json.dumps(trace).encode()))
        tmp.rename(recording.path)
