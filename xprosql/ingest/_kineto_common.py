"""What both Kineto decoders share: value coercions, the device and track layout, and the tables' tail.

The columnar decoder (:mod:`._kineto_columnar`) and the per-event one
(:mod:`._kineto_reference`) must give identical tables; everything here is
written once so that they cannot drift apart.
"""

from __future__ import annotations

import io
import json
import re
import zlib
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, cast

import msgspec
import numpy as np
import pyarrow as pa
from isal import igzip, isal_zlib

from xprosql.errors import IngestError
from xprosql.models import hardware
from xprosql.models.recording import PM_SAMPLING_CATEGORY, RECORDER_KEY
from xprosql.models.tables import TABLES

# Categories whose pid is a GPU (Kineto writes device activity with pid = device index).
# pm_sampling: CUPTI PM samples as xprosql.cupti.record(metrics=...) writes them, on the GPU sampled.
GPU_CATEGORIES = frozenset({"kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation", "cuda_sync", PM_SAMPLING_CATEGORY})
API_CATEGORIES = {"cuda_runtime": "runtime", "cuda_driver": "driver"}
_COPY_NAME = re.compile(r"^Mem(cpy|set)\s*(\w+)?\s*(?:\((\w+)(?:\s*->\s*(\w+))?\))?")
_INT64_MAX = 2**63 - 1
TOP_FIELDS = msgspec.json.Decoder(dict[str, msgspec.Raw])
_GZIP_MAGIC = b"\x1f\x8b"
# of a truncated or corrupt gzip stream; isal's stub types its error as an instance, not a class
GZIP_ERRORS = (EOFError, OSError, zlib.error, cast("type[Exception]", isal_zlib.error))


def split(data: bytes, source: str) -> tuple[dict[str, Any], msgspec.Raw]:
    """Decompress (if gzipped) and split a trace into its top-level fields and its raw traceEvents."""
    if not data:
        raise IngestError(source, "empty file (0 bytes)")
    if data[:2] == _GZIP_MAGIC:
        try:
            data = igzip.decompress(data)  # ISA-L: the same as gzip.decompress, twice as fast
        except GZIP_ERRORS as exc:
            raise IngestError(source, f"truncated or corrupt gzip: {exc}") from None
    try:
        if data.lstrip()[:1] == b"[":  # the Chrome trace array form
            return {}, msgspec.Raw(data)
        fields = TOP_FIELDS.decode(data)
        if "traceEvents" not in fields:
            raise IngestError(source, "JSON without a traceEvents list: not a PyTorch/Kineto trace")
        raw_events = fields.pop("traceEvents")
        return {key: msgspec.json.decode(value) for key, value in fields.items()}, raw_events
    except msgspec.DecodeError as exc:
        raise IngestError(source, f"invalid JSON (truncated or corrupt): {exc}") from None


def text_file(data: bytes) -> io.BufferedIOBase:
    """The trace's text (decompressed if gzipped) as a file to read in pieces: never whole.

    ISA-L's gzip file is what ``split`` decompresses with, so it takes the same streams;
    reading raises what it raises for a corrupt or truncated one (see :data:`GZIP_ERRORS`).
    """
    return igzip.GzipFile(fileobj=io.BytesIO(data)) if data[:2] == _GZIP_MAGIC else io.BytesIO(data)


def text_size(data: bytes) -> int:
    """The size of the trace's text: a gzip stream's trailer holds it (mod 2**32, a guess then)."""
    return int.from_bytes(data[-4:], "little") if data[:2] == _GZIP_MAGIC and len(data) >= 18 else len(data)


def batch(table: str, rows: list[tuple]) -> pa.RecordBatch:
    """A record batch of ``table`` from row tuples in schema order."""
    schema = TABLES[table]
    columns = list(zip(*rows)) if rows else [()] * len(schema)
    arrays = []
    for field, values in zip(schema, columns):
        if pa.types.is_dictionary(field.type):
            arrays.append(pa.array(values, pa.string()).dictionary_encode())
        else:
            arrays.append(pa.array(values, field.type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def stat_row(prefix: tuple, name: str, value: Any) -> tuple:
    """A long-form stat row: (*prefix, stat, value_type, int, uint, double, str, bytes)."""
    if isinstance(value, bool):
        return (*prefix, name, "int64", int(value), None, None, None, None)
    if isinstance(value, int):
        if value > _INT64_MAX:
            return (*prefix, name, "uint64", None, value if value < 2**64 else None, None,
                    None if value < 2**64 else str(value), None)
        if value < -(2**63):
            return (*prefix, name, "str", None, None, None, str(value), None)
        return (*prefix, name, "int64", value, None, None, None, None)
    if isinstance(value, float):
        return (*prefix, name, "double", None, None, value, None, None)
    if isinstance(value, str):
        return (*prefix, name, "str", None, None, None, value, None)
    return (*prefix, name, "json", None, None, None, json.dumps(value), None)


def to_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.lstrip("-").isdigit():
        return int(value)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def to_float(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    return None


def triple(value: Any) -> tuple[int | None, int | None, int | None]:
    if isinstance(value, list) and len(value) == 3 and all(to_int(v) is not None for v in value):
        return to_int(value[0]), to_int(value[1]), to_int(value[2])
    return None, None, None


def kernel_launch(args: dict[str, Any]) -> tuple:
    """(grid x y z, block x y z, registers, shared memory, occupancy) of a kernel's args."""
    return (*triple(args.get("grid")), *triple(args.get("block")), to_int(args.get("registers per thread")),
            to_int(args.get("shared memory")), to_float(args.get("est. achieved occupancy %")))


def copy_kind(name: str, args: dict[str, Any], *, is_memset: bool) -> tuple[str | None, str | None, str | None]:
    """``Memcpy HtoD (Pageable -> Device)`` -> (HtoD, Pageable, Device); ``Memset (Device)`` -> (memset, None, Device)."""
    match = _COPY_NAME.match(name)
    if is_memset:
        return "memset", None, match.group(3) if match else None
    if match is None:
        return (str(args["kind"]) if isinstance(args.get("kind"), str) else None), None, None
    return match.group(2), match.group(3), match.group(4)


def counter_rows(event_id: int, device_id: int, name: str | None, n_range: int, start: int, dur_ps: int,
                 args: dict[str, Any]) -> list[tuple]:
    """One counters row per value of a cuda_profiler_range event."""
    rows = []
    for counter, value in args.items():
        unsigned = value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**64 else None
        rows.append((event_id, device_id, name, n_range, None, counter, None, None,
                     unsigned, to_float(value), start, start + dur_ps))
    return rows


@dataclass
class Layout:
    """Devices (processes) and tracks (threads, GPU streams) of a trace, in the order the tables keep."""

    device_of: dict[Any, int]
    track_of: dict[tuple[Any, Any], int]
    device_rows: list[list]
    device_stat_rows: list[tuple]
    track_rows: list[list]


def process_metadata(events: Iterator[tuple[Any, Any, Any, Any]]) -> tuple[dict, dict, dict]:
    """Process metadata, thread names and thread sort indices from (name, pid, tid, args) of M events."""
    process_meta: dict[Any, list[tuple[str, Any]]] = {}
    thread_names: dict[tuple[Any, Any], str] = {}
    thread_sort: dict[tuple[Any, Any], int] = {}
    for name, pid, tid, args in events:
        args = args if isinstance(args, dict) else {}
        if name == "thread_name" and "name" in args:
            thread_names[(pid, tid)] = str(args["name"])
        elif name == "thread_sort_index" and (sort_index := to_int(args.get("sort_index"))) is not None:
            thread_sort[(pid, tid)] = sort_index
        else:
            process_meta.setdefault(pid, []).extend((str(name), value) for value in args.values())
    return process_meta, thread_names, thread_sort


def layout(trace: Mapping[str, Any], *, gpu_pids: set[Any], metadata: tuple[dict, dict, dict],
           track_order: dict[tuple[Any, Any], None]) -> Layout:
    """Devices: every GPU the trace mentions, then host processes, then other pids ("Spans", ...); then tracks."""
    process_meta, thread_names, thread_sort = metadata
    properties = {p.get("id"): p for p in trace.get("deviceProperties") or [] if isinstance(p, dict)}
    gpu_ids = sorted({p for p in gpu_pids if isinstance(p, int)} | {i for i in properties if isinstance(i, int)})
    pids: list[Any] = list(gpu_ids)
    for pid in [key[0] for key in track_order] + list(process_meta):
        if pid not in pids:
            pids.append(pid)
    device_of = {pid: device_id for device_id, pid in enumerate(pids)}
    device_rows, device_stat_rows = [], []
    for device_id, pid in enumerate(pids):
        device_rows.append(_device_row(device_id, pid, is_gpu=pid in gpu_ids, props=properties.get(pid)))
        for name, value in process_meta.get(pid, []):
            device_stat_rows.append(stat_row((device_id,), name, value))
        for name, value in (properties.get(pid) or {}).items():
            device_stat_rows.append(stat_row((device_id,), f"deviceProperties.{name}", value))

    track_of: dict[tuple[Any, Any], int] = {}
    track_rows: list[list] = []
    for key in list(track_order) + [k for k in thread_names if k not in track_order]:
        pid, tid = key
        track_id = len(track_rows)
        track_of[key] = track_id
        stream_id = to_int(tid) if pid in gpu_ids else None
        name = thread_names.get(key) or (f"Stream #{tid}" if stream_id is not None else str(tid))
        track_rows.append([device_of[pid], track_id, to_int(tid), None, name, None, None, None, 0,
                           thread_sort.get(key), stream_id])
    return Layout(device_of, track_of, device_rows, device_stat_rows, track_rows)


def events_table(columns: dict[str, pa.Array], n_events: int) -> pa.Table:
    """The events table from the Kineto columns (others null), stored sorted by time as every decoder yields it."""
    # Sorted so that range filters skip row groups; only the set columns need reordering.
    order = pa.table({"start_ps": columns["start_ps"], "event_id": columns["event_id"]}).sort_by(
        [("start_ps", "ascending"), ("event_id", "ascending")])["event_id"]
    zeros = pa.py_buffer(np.zeros(8 * n_events + 8, np.uint8))  # every all-null column's buffers: 13 of 21 here
    return pa.Table.from_arrays(
        [columns[f.name].cast(f.type).take(order) if f.name in columns else nulls(f.type, n_events, zeros)
         for f in TABLES["events"]], schema=TABLES["events"])


def nulls(type_: pa.DataType, n: int, zeros: pa.Buffer) -> pa.Array:
    """``pa.nulls(n, type_)`` over ``zeros`` (zero bytes, at least 8 per row and 8 more), which every call may share:
    pa.nulls allocates each column's buffers anew."""
    if pa.types.is_dictionary(type_):
        return pa.DictionaryArray.from_arrays(nulls(type_.index_type, n, zeros), pa.array([], type_.value_type))
    # Fixed-width data, a bitmap or offsets (all zero: empty values) fit in the zero bytes alike.
    buffers = [zeros, zeros] + ([zeros] if pa.types.is_string(type_) or pa.types.is_binary(type_) else [])
    return pa.Array.from_buffers(type_, n, buffers, null_count=n)


def tail(trace: Mapping[str, Any], layout_: Layout, tables: dict[str, pa.RecordBatch], *, start_ns: int,
         end_ps: int, n_events: int, dropped: Counter[str]) -> Iterator[tuple[str, pa.RecordBatch]]:
    """devices, device_stats, tracks, then ``tables`` (kernels ... flows), then the ``profiles`` row."""
    for row in layout_.device_rows:  # n_tracks, n_events
        row[13] = sum(1 for track in layout_.track_rows if track[0] == row[0])
        row[14] = sum(track[8] for track in layout_.track_rows if track[0] == row[0])
    yield "devices", batch("devices", [tuple(row) for row in layout_.device_rows])
    yield "device_stats", batch("device_stats", layout_.device_stat_rows)
    yield "tracks", batch("tracks", [tuple(row) for row in layout_.track_rows])
    yield from tables.items()

    distributed_info = trace.get("distributedInfo")
    distributed = distributed_info if isinstance(distributed_info, dict) else {}
    recorder = trace.get(RECORDER_KEY) if isinstance(trace.get(RECORDER_KEY), dict) else None
    profile: dict[str, Any] = {name: None for name in TABLES["profiles"].names}
    profile.update(
        format="cupti" if recorder else "kineto",
        host=recorder.get("host") if recorder else None,
        start_ns=start_ns,
        duration_ps=end_ps,
        n_events=n_events,
        n_devices=len(layout_.device_rows),
        rank=to_int(distributed.get("rank")),
        world_size=to_int(distributed.get("world_size")),
        trace_metadata=json.dumps(trace),
        dropped_events=sum(dropped.values()),
        drop_reasons=[f"{n} {reason}" for reason, n in sorted(dropped.items())],
        errors=[],
        warnings=[],
    )
    yield "profiles", pa.RecordBatch.from_pylist([profile], schema=TABLES["profiles"])


def _device_row(device_id: int, pid: Any, *, is_gpu: bool, props: dict[str, Any] | None) -> list:
    props = props or {}
    if is_gpu:
        major, minor = to_int(props.get("computeMajor")), to_int(props.get("computeMinor"))
        sms, memory = to_int(props.get("numSms")), to_int(props.get("totalGlobalMem"))
        capability = f"{major}.{minor}" if major is not None and minor is not None else None
        model = props.get("name") if isinstance(props.get("name"), str) else None
        if model is None and capability:
            assert major is not None and minor is not None  # capability is set only when both are
            model = hardware.gpu_model(compute_capability=(major, minor), sm_count=sms, memory_bytes=memory)
        # Kineto records no peaks: the chip table's, when it knows the board.
        chip = hardware.chip_for_model(model, memory_bytes=memory)
        peaks = (chip.peak_flops_per_s, chip.peak_hbm_bytes_per_s, "hardware_model") if chip else (None, None, None)
        return [device_id, pid, f"/device:GPU:{pid}", "gpu", pid, model, *peaks, sms, None, memory, capability, 0, 0]
    kind = "host" if isinstance(pid, int) else "other"
    name = "/host:CPU" if kind == "host" else str(pid)
    return [device_id, pid if isinstance(pid, int) else None, name, kind, None, None, None, None, None,
            None, None, None, None, 0, 0]
