"""What both Kineto decoders share: value coercions, the device and track layout, and the tables' tail.

The columnar decoder (:mod:`._kineto_columnar`) and the per-event one
(:mod:`._kineto_reference`) must give identical tables; everything here is
written once so that they cannot drift apart.
"""

from __future__ import annotations

import io
import json
import os
import re
import zlib
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import PurePath
from typing import Any, TypeGuard, cast

import msgspec
import pyarrow as pa
from isal import igzip, isal_zlib

from xprosql.errors import IngestError
from xprosql.ingest import xspace_wire
from xprosql.ingest._nulls import nulls, zeros
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


MAX_TEXT_ENV = "XPROSQL_MAX_TRACE_BYTES"


def max_text_bytes() -> int:
    """The most a trace's text may expand to: ``$XPROSQL_MAX_TRACE_BYTES``, else half the memory free (the
    decoded tables need the rest), else 64 GiB where the free memory is unknown. A gzip bomb stops there."""
    setting = os.environ.get(MAX_TEXT_ENV)
    if setting:
        return int(float(setting))
    available = xspace_wire.available_memory()  # looked up here, not bound at import: a patch of it reaches here
    return available // 2 if available is not None else 64 << 30


def too_large(source: str, limit: int) -> IngestError:
    return IngestError(source, f"its text expands to more than {limit:,} bytes, this ingest's limit: refused "
                               f"(set {MAX_TEXT_ENV} to a larger number of bytes to ingest it)")


class _BoundedText(io.RawIOBase):
    """A trace's text that raises :func:`too_large` once more than ``limit`` bytes were read from it."""

    def __init__(self, text: io.BufferedIOBase, limit: int, source: str) -> None:
        self.text, self.limit, self.source, self.total = text, limit, source, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        n = self.text.readinto(buffer)
        self.total += n
        if self.total > self.limit:
            raise too_large(self.source, self.limit)
        return n


def split(data: bytes, source: str) -> tuple[dict[str, Any], msgspec.Raw]:
    """Decompress (if gzipped) and split a trace into its top-level fields and its raw traceEvents."""
    if not data:
        raise IngestError(source, "empty file (0 bytes)")
    limit = max_text_bytes()
    if data[:2] == _GZIP_MAGIC:
        try:
            with igzip.GzipFile(fileobj=io.BytesIO(data)) as stream:  # ISA-L: gzip's streams, twice as fast
                data = stream.read(limit + 1)
        except GZIP_ERRORS as exc:
            raise IngestError(source, f"truncated or corrupt gzip: {exc}") from None
    if len(data) > limit:
        raise too_large(source, limit)
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


def text_file(data: bytes, source: str) -> io.BufferedIOBase:
    """The trace's text (decompressed if gzipped) as a file to read in pieces: never whole, and never more
    than :func:`max_text_bytes` (:func:`too_large`).

    ISA-L's gzip file is what ``split`` decompresses with, so it takes the same streams;
    reading raises what it raises for a corrupt or truncated one (see :data:`GZIP_ERRORS`).
    """
    limit = max_text_bytes()
    if data[:2] != _GZIP_MAGIC:
        if len(data) > limit:
            raise too_large(source, limit)
        return io.BytesIO(data)
    return io.BufferedReader(_BoundedText(igzip.GzipFile(fileobj=io.BytesIO(data)), limit, source))


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
    #: metadata (M) events of processes that are no device, by reason (counted in profiles.drop_reasons)
    dropped: Counter[str]


@dataclass
class Metadata:
    """What the M events of a trace say: per process (its M events' args), per thread, and how many there are."""

    process_meta: dict[Any, list[tuple[str, Any]]]
    thread_names: dict[tuple[Any, Any], str]
    thread_sort: dict[tuple[Any, Any], int]
    events_of: Counter[Any]  # M events per pid, thread ones included
    process_events: Counter[tuple[Any, str]]  # process M events (not thread_name, thread_sort_index) per pid and name


def process_metadata(events: Iterator[tuple[Any, Any, Any, Any]]) -> Metadata:
    """Process metadata, thread names and thread sort indices from (name, pid, tid, args) of M events."""
    metadata = Metadata({}, {}, {}, Counter(), Counter())
    for name, pid, tid, args in events:
        args = args if isinstance(args, dict) else {}
        metadata.events_of[pid] += 1
        if name == "thread_name" and "name" in args:
            metadata.thread_names[(pid, tid)] = str(args["name"])
        elif name == "thread_sort_index" and (sort_index := to_int(args.get("sort_index"))) is not None:
            metadata.thread_sort[(pid, tid)] = sort_index
        else:
            metadata.process_meta.setdefault(pid, []).extend((str(name), value) for value in args.values())
            metadata.process_events[(pid, str(name))] += 1
    return metadata


class _Host:
    """The pid of the host device made for Kineto's own spans when the trace has no host process."""

    def __repr__(self) -> str:
        return "<host>"


_HOST = _Host()


def layout(trace: Mapping[str, Any], *, gpu_pids: set[Any], metadata: Metadata,
           track_order: dict[tuple[Any, Any], None], source: str) -> Layout:
    """Devices: every GPU the trace mentions, then the host processes; then tracks.

    A device is a process with events (or a GPU of deviceProperties). Kineto's own spans
    and markers ("PyTorch Profiler (0)", "Iteration Start: ...", "Record Window End") have
    string pids ("Spans", "Traces", ""): no device, their tracks go on the host (the process
    labelled CPU, else the first host process; a /host:CPU made for them when there is
    none), their process's sort index to the tracks' ``sort_index``. A process with metadata
    only (Kineto names and labels every GPU slot, "GPU 0" ... "GPU 15") is no device: its M
    events are counted in the drop reasons, as are string pids' other process metadata.
    Raises :class:`IngestError` for an XProf trace-viewer JSON (:func:`check_not_xprof`).
    """
    check_not_xprof(trace, metadata, source)
    process_meta, thread_names, thread_sort = metadata.process_meta, metadata.thread_names, metadata.thread_sort
    properties = {p.get("id"): p for p in trace.get("deviceProperties") or [] if isinstance(p, dict)}
    gpu_ids = sorted({p for p in gpu_pids if _is_pid(p)} | {i for i in properties if _is_pid(i)})
    keys = list(track_order) + [k for k in thread_names if k not in track_order]
    pids: list[Any] = list(gpu_ids)
    kineto_pids: list[Any] = []  # string pids with tracks, in order
    for pid, _ in keys:
        seen = pids if _is_pid(pid) else kineto_pids
        if pid not in seen:
            seen.append(pid)
    hosts = [pid for pid in pids if pid not in gpu_ids]
    labelled = [pid for pid in hosts if ("process_labels", "CPU") in process_meta.get(pid, [])]
    host = (labelled or hosts or [None])[0]
    if host is None and kineto_pids:
        host = _HOST
        pids.append(host)
    device_of = {pid: device_id for device_id, pid in enumerate(pids)}
    dropped: Counter[str] = Counter()
    device_rows, device_stat_rows = [], []
    # ROCm traces list the visible GPUs in deviceProperties but name their streams' processes after the physical
    # ones (kernels on pid 9, properties for id 0): a GPU without properties is the board the others all describe.
    boards = {(p.get("name"), p.get("numSms"), p.get("totalGlobalMem")) for p in properties.values()}
    shared = next(iter(properties.values())) if len(boards) == 1 else None
    for device_id, pid in enumerate(pids):
        own = properties.get(pid)
        is_gpu = pid in gpu_ids
        device_rows.append(_device_row(device_id, pid, is_gpu=is_gpu, props=own or (shared if is_gpu else None)))
        if is_gpu and own is None and shared is not None:
            device_stat_rows.append(stat_row((device_id,), "model_source",
                                             "deviceProperties of the trace's other GPUs, which all describe one board"))
        for name, value in process_meta.get(pid, []):
            device_stat_rows.append(stat_row((device_id,), name, value))
        for name, value in (properties.get(pid) or {}).items():
            device_stat_rows.append(stat_row((device_id,), f"deviceProperties.{name}", value))
    process_sort: dict[Any, int | None] = {}
    for pid in kineto_pids:
        device_of[pid] = device_of[host]
        process_sort[pid] = next((to_int(value) for name, value in process_meta.get(pid, [])
                                  if name == "process_sort_index" and to_int(value) is not None), None)
        other = sum(n for (p, name), n in metadata.process_events.items() if p == pid and name != "process_sort_index")
        if other:
            dropped["M events of Kineto's own pids (strings such as 'Spans') other than names and sort indices"] += other
    no_device = sum(n for pid, n in metadata.events_of.items() if pid not in device_of)
    if no_device:
        dropped["M events of processes without events or deviceProperties: no device "
                "(such as Kineto's labels of GPU slots)"] += no_device

    track_of: dict[tuple[Any, Any], int] = {}
    track_rows: list[list] = []
    for key in keys:
        pid, tid = key
        track_id = len(track_rows)
        track_of[key] = track_id
        stream_id = to_int(tid) if pid in gpu_ids else None
        if pid in process_sort:  # Kineto's own: on the host, named after its thread, else its pid
            name = thread_names.get(key) or str(tid if tid is not None else "") or str(pid) or "Kineto"
            track_rows.append([device_of[pid], track_id, to_int(tid), None, name, str(pid), None, None, 0,
                               thread_sort.get(key, process_sort.get(pid)), None])
            continue
        name = thread_names.get(key) or (f"Stream #{tid}" if stream_id is not None else str(tid))
        track_rows.append([device_of[pid], track_id, to_int(tid), None, name, None, None, None, 0,
                           thread_sort.get(key), stream_id])
    return Layout(device_of, track_of, device_rows, device_stat_rows, track_rows, dropped)


def _is_pid(pid: Any) -> TypeGuard[int]:
    """A process id of a device: an integer (Kineto's own spans have string pids)."""
    return isinstance(pid, int) and not isinstance(pid, bool)


def events_table(columns: dict[str, pa.Array], n_events: int) -> pa.Table:
    """The events table from the Kineto columns (others null), stored sorted by time as every decoder yields it."""
    # Sorted so that range filters skip row groups; only the set columns need reordering.
    order = pa.table({"start_ps": columns["start_ps"], "event_id": columns["event_id"]}).sort_by(
        [("start_ps", "ascending"), ("event_id", "ascending")])["event_id"]
    shared = zeros(n_events)  # every all-null column's buffers: 13 of 21 here
    return pa.Table.from_arrays(
        [columns[f.name].cast(f.type).take(order) if f.name in columns else nulls(f.type, n_events, shared)
         for f in TABLES["events"]], schema=TABLES["events"])


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
    dropped = dropped + layout_.dropped
    profile: dict[str, Any] = {name: None for name in TABLES["profiles"].names}
    profile.update(
        format="cupti" if recorder else "kineto",
        host=host_name(trace),
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


def host_name(trace: Mapping[str, Any]) -> str | None:
    """The host the trace says it was taken on: Kineto's top-level ``host_name`` (PyTorch 2.x writes it), an
    xprosql.cupti recording's ``host``; None when it says none (ingest then names the host after the file)."""
    recorder = trace.get(RECORDER_KEY)
    for value in (recorder.get("host") if isinstance(recorder, dict) else None, trace.get("host_name")):
        if isinstance(value, str) and value.strip():
            return value.strip()
    return None


_XPROF_PROCESS = re.compile(r"^/(host|device):")


def check_not_xprof(trace: Mapping[str, Any], metadata: Metadata, source: str) -> None:
    """Raise :class:`IngestError` if the trace is XProf's trace-viewer JSON, not a Kineto trace.

    ``jax.profiler.trace`` (and TensorFlow) write ``<host>.trace.json.gz`` and, asked to,
    ``perfetto_trace.json.gz`` beside ``<host>.xplane.pb``: Chrome-trace JSON like Kineto's,
    but a lossy view of the XSpace, without the categories the analyses read. XProf writes
    ``"displayTimeUnit": "ns"`` and processes named after planes (``/host:CPU``,
    ``/device:TPU:0``), its trace viewer ``"metadata": {"highres-ticks": true}`` too; Kineto
    always writes ``schemaVersion``.
    """
    if "schemaVersion" in trace or trace.get("displayTimeUnit") != "ns":
        return
    header = trace.get("metadata")
    planes = any(name == "process_name" and isinstance(value, str) and _XPROF_PROCESS.match(value)
                 for values in metadata.process_meta.values() for name, value in values)
    if planes or (isinstance(header, dict) and header.get("highres-ticks") is True):
        name = PurePath(source).name
        xplane = f"{name[: -len('.trace.json.gz')]}.xplane.pb" if name.endswith(".trace.json.gz") else "*.xplane.pb"
        raise IngestError(source, f"an XProf trace-viewer JSON (written beside the .xplane.pb by jax.profiler or "
                                  f"TensorFlow), not a PyTorch/Kineto trace: ingest the {xplane} file of its "
                                  f"directory instead, which holds the whole profile")


def _device_row(device_id: int, pid: Any, *, is_gpu: bool, props: dict[str, Any] | None) -> list:
    props = props or {}
    if is_gpu:
        major, minor = to_int(props.get("computeMajor")), to_int(props.get("computeMinor"))
        sms, memory = to_int(props.get("numSms")), to_int(props.get("totalGlobalMem"))
        pair = (major, minor) if major is not None and minor is not None else None
        capability = f"{major}.{minor}" if pair else None
        name = props.get("name") if isinstance(props.get("name"), str) else None
        model = hardware.device_model(name, compute_capability=pair, sm_count=sms, memory_bytes=memory)
        # Kineto records no peaks: the chip table's, when it knows the board.
        chip = hardware.chip_for_model(model, memory_bytes=memory)
        peaks = (chip.peak_flops_per_s, chip.peak_hbm_bytes_per_s, "hardware_model") if chip else (None, None, None)
        return [device_id, pid, f"/device:GPU:{pid}", "gpu", pid, model, *peaks, sms, None, memory, capability, 0, 0]
    return [device_id, pid if _is_pid(pid) else None, "/host:CPU", "host", None, None, None, None, None,
            None, None, None, None, 0, 0]
