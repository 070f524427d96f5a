"""XSpace (``*.xplane.pb``) decoder: one file in, Arrow record batches per table out.

The decoder knows nothing of the warehouse: :func:`decode_xspace` yields
``(table, batch)`` pairs and a writer stores them. A faster decoder can
replace this one as long as it yields the same tables (``xprosql.models``).

Example:
    >>> data = open("tpu.xplane.pb", "rb").read()            # doctest: +SKIP
    >>> for table, batch in decode_xspace(data, source="tpu.xplane.pb"):  # doctest: +SKIP
    ...     print(table, batch.num_rows)
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
from google.protobuf.message import DecodeError

from xprosql.errors import IngestError
from xprosql.ingest import counters, hlo
from xprosql.models import hardware
from xprosql.models.tables import TABLES
from xprosql.protos import xplane_pb2

__all__ = ["decode_xspace", "check_xspace_bytes", "parse_kernel_details", "PROMOTED_STATS"]

_NOT_CONVERTIBLE = object()


def _to_str(kind: str, value: Any) -> Any:
    return value if isinstance(value, str) else _NOT_CONVERTIBLE


def _to_int64(kind: str, value: Any) -> Any:
    if isinstance(value, bool):
        return _NOT_CONVERTIBLE
    if isinstance(value, str):
        if not value.lstrip("-").isdigit():
            return _NOT_CONVERTIBLE
        value = int(value)
    if isinstance(value, float):
        if not value.is_integer():
            return _NOT_CONVERTIBLE
        value = int(value)
    if isinstance(value, int) and -(2**63) <= value < 2**63:
        return value
    return _NOT_CONVERTIBLE


def _to_uint64(kind: str, value: Any) -> Any:
    if isinstance(value, str) and value.isdigit():
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool):
        # int64 stats holding ids are reinterpreted bit for bit, as XLA does.
        return value & 0xFFFFFFFFFFFFFFFF if value >= -(2**63) else _NOT_CONVERTIBLE
    return _NOT_CONVERTIBLE


def _to_bool(kind: str, value: Any) -> Any:
    if isinstance(value, int):
        return value != 0
    return _NOT_CONVERTIBLE


# stat name -> (events column, converter). A value the converter refuses stays
# in event_stats, so nothing is lost.
PROMOTED_STATS: dict[str, tuple[str, Callable[[str, Any], Any]]] = {
    "hlo_module": ("hlo_module", _to_str),
    "hlo_op": ("hlo_op", _to_str),
    "program_id": ("program_id", _to_uint64),
    "group_id": ("group_id", _to_int64),
    "step_num": ("step_num", _to_int64),
    "correlation_id": ("correlation_id", _to_int64),
    "hlo_category": ("category", _to_str),
    "flops": ("flops", _to_int64),
    "bytes_accessed": ("bytes_accessed", _to_int64),
    "_a": ("is_async", _to_bool),
    "device_offset_ps": ("device_offset_ps", _to_int64),
    "device_duration_ps": ("device_duration_ps", _to_int64),
}
_PROMOTED_COLUMNS = [
    "hlo_module", "hlo_op", "program_id", "group_id", "step_num", "correlation_id",
    "category", "flops", "bytes_accessed", "is_async", "device_offset_ps", "device_duration_ps",
]
_PROMOTED_INDEX = {column: i for i, column in enumerate(_PROMOTED_COLUMNS)}
_HLO_MODULE, _PROGRAM_ID = _PROMOTED_INDEX["hlo_module"], _PROMOTED_INDEX["program_id"]
_CORRELATION_ID = _PROMOTED_INDEX["correlation_id"]
_LAUNCH_COLUMNS = (
    "grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z",
    "registers_per_thread", "shared_memory_bytes", "occupancy_pct",
)
_MEMCPY_SIZE = re.compile(r"(?:^|\s)size:(\d+)")
_NO_PROMOTED = (None,) * len(_PROMOTED_COLUMNS)

_HLO_TEXT_NAME = re.compile(r"%?([^\s=%]+) = ")
_MODULE_WITH_PROGRAM_ID = re.compile(r"^(.*)\((\d+)\)$")
_DEVICE_NAME = re.compile(r"^/device:([A-Za-z_]+):(\d+)")

_STREAM_LINE = re.compile(r"^Stream #(\d+)")
# XSpace names a copy by its line ("Stream #135(MemcpyH2D)") and event ("MemcpyH2D").
_COPY_KINDS = {"MemcpyH2D": "HtoD", "MemcpyD2H": "DtoH", "MemcpyD2D": "DtoD", "MemcpyP2P": "PtoP", "Memset": "memset"}
# Event stats the GPU tables read; they stay in event_stats as well.
_GPU_DETAIL_STATS = frozenset({"kernel_details", "memcpy_details", "tf_op", "annotation"})
_ROW_SLOT = {"int64": 0, "uint64": 1, "double": 2, "str": 3, "ref": 3, "bytes": 4}
_ONEOF_TO_TYPE = {
    "double_value": "double", "uint64_value": "uint64", "int64_value": "int64",
    "str_value": "str", "bytes_value": "bytes", "ref_value": "ref",
}


def check_xspace_bytes(data: bytes, source: str) -> xplane_pb2.XSpace:
    """Parse ``data`` as an XSpace, or raise :class:`IngestError` saying what it is instead."""
    if not data:
        raise IngestError(source, "empty file (0 bytes)")
    head = data[:64].lstrip()
    if head[:1] in (b"{", b"["):
        raise IngestError(source, "this is JSON text, not an XSpace protobuf (Kineto traces are JSON)")
    if data[:2] == b"\x1f\x8b":
        raise IngestError(source, "gzip-compressed data, not a raw XSpace protobuf; decompress it first")
    space = xplane_pb2.XSpace()
    try:
        space.ParseFromString(data)
    except DecodeError as exc:
        raise IngestError(source, f"not a valid XSpace protobuf (truncated or corrupt): {exc}") from None
    if not space.planes:
        raise IngestError(source, "no XSpace planes found: not an XSpace file, or truncated before the first plane")
    if not any(plane.name for plane in space.planes):
        raise IngestError(source, "no named XSpace planes: not an XSpace file")
    return space


def _device_kind(name: str) -> tuple[str, int | None]:
    match = _DEVICE_NAME.match(name)
    if match:
        kind = match.group(1).lower()
        return (kind if kind in ("tpu", "gpu", "cpu") else "custom"), int(match.group(2))
    if name == "/host:metadata":
        return "metadata", None
    if name.startswith("/host:"):
        return "host", None
    if name.startswith("/device:CUSTOM"):
        return "custom", None
    if name.startswith("#Chip"):
        return "chip", None
    if name == "Task Environment":
        return "task", None
    return "other", None


class _StatReader:
    """Turns a plane's XStats into (name, type, value), resolving names and refs."""

    def __init__(self, plane: xplane_pb2.XPlane) -> None:
        self.names = {sid: md.name for sid, md in plane.stat_metadata.items()}
        self.unknown_stat_ids = 0

    def read(self, stat: xplane_pb2.XStat) -> tuple[str | None, str | None, Any]:
        name = self.names.get(stat.metadata_id)
        if name is None:
            self.unknown_stat_ids += 1
        which = stat.WhichOneof("value")
        if which is None:
            return name, None, None
        value = getattr(stat, which)
        if which == "ref_value":
            value = self.names.get(value)
        return name, _ONEOF_TO_TYPE[which], value

    @staticmethod
    def row(prefix: tuple, name: str | None, value_type: str | None, value: Any) -> tuple:
        values: list[Any] = [None] * 5
        if value_type is not None:
            values[_ROW_SLOT[value_type]] = value
        return (*prefix, name, value_type, *values)


def _batch(table: str, rows: list[tuple]) -> pa.RecordBatch:
    schema = TABLES[table]
    columns = list(zip(*rows)) if rows else [()] * len(schema)
    arrays = []
    for field, values in zip(schema, columns):
        if pa.types.is_dictionary(field.type):
            arrays.append(pa.array(values, pa.string()).dictionary_encode())
        else:
            arrays.append(pa.array(values, field.type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def parse_kernel_details(text: str) -> dict[str, Any]:
    """``regs:38 shm:0 grid:160,1,1 block:1024,1,1`` (and newer static_shm/dynamic_shm/occ_pct) as columns."""
    fields: dict[str, str] = {}
    for token in text.split():
        key, sep, value = token.partition(":")
        if sep:
            fields[key] = value
    out: dict[str, Any] = {}
    for key in ("grid", "block"):
        parts = fields.get(key, "").split(",")
        if len(parts) == 3 and all(p.isdigit() for p in parts):
            out[f"{key}_x"], out[f"{key}_y"], out[f"{key}_z"] = (int(p) for p in parts)
    if fields.get("regs", "").isdigit():
        out["registers_per_thread"] = int(fields["regs"])
    shared = [fields[k] for k in ("shm", "static_shm", "dynamic_shm") if fields.get(k, "").isdigit()]
    if shared:
        out["shared_memory_bytes"] = sum(int(v) for v in shared)
    try:
        out["occupancy_pct"] = float(fields["occ_pct"])
    except (KeyError, ValueError):
        pass
    return out


def _copy_kind(event_name: str | None, line_name: str) -> str | None:
    for text in (event_name or "", line_name[line_name.find("(") + 1 : -1]):
        for prefix, kind in _COPY_KINDS.items():
            if text.startswith(prefix):
                return kind
    return None


def _start_ns(space: xplane_pb2.XSpace) -> tuple[int, bool]:
    """Earliest event start in ns (as recorded), and whether any event has a start."""
    earliest: int | None = None
    for plane in space.planes:
        for line in plane.lines:
            offsets = [ev.offset_ps for ev in line.events if ev.WhichOneof("data") != "num_occurrences"]
            if offsets:
                start = line.timestamp_ns * 1000 + min(offsets)
                earliest = start if earliest is None else min(earliest, start)
    if earliest is None:
        return 0, False
    return earliest // 1000, True


def _hlo_tables(space: xplane_pb2.XSpace, source: str) -> tuple[list[dict], list[dict]]:
    modules: list[dict] = []
    ops: list[dict] = []
    for plane in space.planes:
        if plane.name != "/host:metadata":
            continue
        stats = _StatReader(plane)
        for metadata_id, md in sorted(plane.event_metadata.items()):
            proto_bytes = None
            program_id = metadata_id
            for stat in md.stats:
                name, _, value = stats.read(stat)
                if name == "Hlo Proto" and isinstance(value, bytes):
                    proto_bytes = value
                elif name == "program_id" and isinstance(value, int):
                    program_id = value
            if proto_bytes is None:
                continue
            try:
                module, module_ops = hlo.parse_hlo_proto(proto_bytes, program_id=program_id)
            except ValueError as exc:
                raise IngestError(source, f"HLO proto of {md.name!r} does not parse: {exc}") from None
            modules.append(module)
            ops.extend(module_ops)
    return modules, ops


def decode_xspace(data: bytes, *, source: str, batch_rows: int = 250_000) -> Iterator[tuple[str, pa.RecordBatch]]:
    """Decode one XSpace file into warehouse record batches.

    Yields ``(table, batch)``; the single ``profiles`` row comes last, with the
    columns only the caller knows (path, hash, time of ingest) left null.
    Raises :class:`IngestError` naming ``source`` when the bytes are not an XSpace.
    """
    space = check_xspace_bytes(data, source)
    start_ns, has_timed_events = _start_ns(space)
    module_rows, op_rows = _hlo_tables(space, source)
    module_by_program = {row["program_id"]: row["module"] for row in module_rows}
    if module_rows:
        yield "hlo_modules", pa.RecordBatch.from_pylist(module_rows, schema=TABLES["hlo_modules"])
    for i in range(0, len(op_rows), batch_rows):
        yield "hlo_ops", pa.RecordBatch.from_pylist(op_rows[i : i + batch_rows], schema=TABLES["hlo_ops"])

    device_rows: list[tuple] = []
    device_stat_rows: list[tuple] = []
    track_rows: list[tuple] = []
    metadata_rows: list[tuple] = []
    metadata_stat_rows: list[tuple] = []
    event_rows: list[tuple] = []
    event_stat_rows: list[tuple] = []
    kernel_rows: list[tuple] = []
    memcpy_rows: list[tuple] = []
    api_rows: list[tuple] = []
    counter_rows: list[tuple] = []
    unreadable_counters = 0
    event_id = 0
    track_id = 0
    end_ps = 0
    profile_times: dict[str, int] = {}
    producer: str | None = None

    for device_id, plane in enumerate(space.planes):
        stats = _StatReader(plane)
        plane_stats: dict[str, Any] = {}
        for stat in plane.stats:
            name, value_type, value = stats.read(stat)
            device_stat_rows.append(stats.row((device_id,), name, value_type, value))
            if name is not None:
                plane_stats[name] = value
        if isinstance(plane_stats.get("jax_version"), str):  # /host:metadata of JAX profiles
            producer = f"jax {plane_stats['jax_version']}"
        if plane.name == "Task Environment":
            for key in ("profile_start_time", "profile_stop_time"):
                value = _to_int64("", plane_stats.get(key))
                if value is not _NOT_CONVERTIBLE:
                    profile_times[key] = value

        # Constant per-op stats sit on the metadata; events start from these defaults.
        defaults: dict[int, tuple[str, str, tuple]] = {}
        metadata_uses: dict[int, int] = {}
        for metadata_id, md in plane.event_metadata.items():
            promoted: list[Any] = list(_NO_PROMOTED)
            for stat in md.stats:
                name, value_type, value = stats.read(stat)
                metadata_stat_rows.append(stats.row((device_id, metadata_id), name, value_type, value))
                target = PROMOTED_STATS.get(name) if name else None
                if target is not None:
                    converted = target[1](value_type, value)
                    if converted is not _NOT_CONVERTIBLE:
                        promoted[_PROMOTED_INDEX[target[0]]] = converted
            if promoted[_PROMOTED_INDEX["hlo_op"]] is None and md.name.startswith("%"):
                match = _HLO_TEXT_NAME.match(md.name)
                if match:
                    promoted[_PROMOTED_INDEX["hlo_op"]] = match.group(1)
            defaults[metadata_id] = (md.name, md.display_name, tuple(promoted))

        plane_events = 0
        device_kind = _device_kind(plane.name)[0]
        if counters.has_counters(plane):
            rows, unreadable = counters.xspace_counter_rows(
                plane, device_id=device_id, first_event_id=event_id, first_track_id=track_id, start_ns=start_ns
            )
            counter_rows.extend(rows)
            unreadable_counters += unreadable
        for line in plane.lines:
            base_ps = (line.timestamp_ns - start_ns) * 1000
            is_module_line = line.name == "XLA Modules"
            stream = _STREAM_LINE.match(line.name) if device_kind == "gpu" else None
            stream_id = int(stream.group(1)) if stream else None
            for event in line.events:
                details: dict[str, Any] = {}
                metadata_id = event.metadata_id
                name, display_name, promoted = defaults.get(metadata_id, (None, None, _NO_PROMOTED))
                metadata_uses[metadata_id] = metadata_uses.get(metadata_id, 0) + 1
                if event.stats:
                    promoted_list = list(promoted)
                    for stat in event.stats:
                        stat_name, value_type, value = stats.read(stat)
                        if stat_name in _GPU_DETAIL_STATS:
                            details[stat_name] = value
                        target = PROMOTED_STATS.get(stat_name) if stat_name else None
                        if target is not None:
                            converted = target[1](value_type, value)
                            if converted is not _NOT_CONVERTIBLE:
                                promoted_list[_PROMOTED_INDEX[target[0]]] = converted
                                continue
                        event_stat_rows.append(stats.row((event_id,), stat_name, value_type, value))
                    promoted = tuple(promoted_list)
                promoted = _with_module(promoted, name, module_line=is_module_line, modules=module_by_program)
                if event.WhichOneof("data") == "num_occurrences":
                    start, occurrences = None, event.num_occurrences
                else:
                    start, occurrences = base_ps + event.offset_ps, None
                    end_ps = max(end_ps, start + event.duration_ps)
                event_rows.append(
                    (event_id, device_id, track_id, metadata_id, name, display_name,
                     start, event.duration_ps, occurrences, *promoted)
                )
                correlation_id = promoted[_CORRELATION_ID]
                if stream_id is not None:
                    copy_kind = _copy_kind(name, line.name)
                    if copy_kind is not None or "memcpy_details" in details:
                        size = _MEMCPY_SIZE.search(str(details.get("memcpy_details", "")))
                        memcpy_rows.append(
                            (event_id, device_id, track_id, stream_id, copy_kind, int(size.group(1)) if size else None,
                             start, event.duration_ps, correlation_id, None, None)
                        )
                    else:
                        launch = parse_kernel_details(str(details.get("kernel_details", "")))
                        kernel_rows.append(
                            (event_id, device_id, track_id, stream_id, name, start, event.duration_ps, correlation_id,
                             *(launch.get(column) for column in _LAUNCH_COLUMNS),
                             promoted[_HLO_MODULE], promoted[_PROMOTED_INDEX["hlo_op"]],
                             details.get("tf_op") or details.get("annotation"))
                        )
                elif device_kind == "host" and correlation_id is not None:
                    api_rows.append(
                        (event_id, device_id, track_id, line.name, "launch", name, start, event.duration_ps,
                         correlation_id)
                    )
                event_id += 1
                if len(event_rows) >= batch_rows:
                    yield "events", _batch("events", event_rows)
                    event_rows = []
                if len(event_stat_rows) >= batch_rows:
                    yield "event_stats", _batch("event_stats", event_stat_rows)
                    event_stat_rows = []
            track_rows.append(
                (device_id, track_id, line.id, line.display_id, line.name, line.display_name,
                 line.timestamp_ns, line.duration_ps, len(line.events), None, stream_id)
            )
            plane_events += len(line.events)
            track_id += 1

        for metadata_id, md in plane.event_metadata.items():
            metadata_rows.append(
                (device_id, metadata_id, md.name, md.display_name, md.metadata,
                 list(md.child_id), metadata_uses.get(metadata_id, 0))
            )
        device_rows.append(_device_row(device_id, plane, plane_stats, len(plane.lines), plane_events))

    if event_rows:
        yield "events", _batch("events", event_rows)
    if event_stat_rows:
        yield "event_stats", _batch("event_stats", event_stat_rows)
    yield "devices", _batch("devices", device_rows)
    yield "device_stats", _batch("device_stats", device_stat_rows)
    yield "tracks", _batch("tracks", track_rows)
    yield "kernels", _batch("kernels", kernel_rows)
    yield "memcpys", _batch("memcpys", memcpy_rows)
    yield "api_calls", _batch("api_calls", api_rows)
    yield "counters", _batch("counters", counter_rows)
    yield "event_metadata", _batch("event_metadata", metadata_rows)
    yield "metadata_stats", _batch("metadata_stats", metadata_stat_rows)

    profile = {name: None for name in TABLES["profiles"].names}
    profile.update(
        host=space.hostnames[0] if space.hostnames else None,
        format="xspace",
        start_ns=start_ns,
        duration_ps=end_ps if has_timed_events else 0,
        n_events=event_id,
        n_devices=len(space.planes),
        dropped_events=0,
        drop_reasons=[f"{unreadable_counters} counter values 0xFFFFFFFFFFFFFFFF (could not be read)"]
        if unreadable_counters else [],
        producer=producer,
        errors=list(space.errors),
        warnings=list(space.warnings),
        profile_start_time_ns=profile_times.get("profile_start_time"),
        profile_stop_time_ns=profile_times.get("profile_stop_time"),
    )
    yield "profiles", pa.RecordBatch.from_pylist([profile], schema=TABLES["profiles"])


def _with_module(promoted: tuple, name: str | None, *, module_line: bool, modules: dict[int, str]) -> tuple:
    """Fill hlo_module and program_id where the stats leave them out but the profile says them elsewhere."""
    module, program = promoted[_HLO_MODULE], promoted[_PROGRAM_ID]
    if module_line and program is None and name:
        match = _MODULE_WITH_PROGRAM_ID.match(name)  # `XLA Modules` events are named like jit_f(1234)
        if match:
            module, program = module or match.group(1), int(match.group(2)) & 0xFFFFFFFFFFFFFFFF
    if module is None and program is not None:
        module = modules.get(program)  # TPU op events carry program_id only
    if module is promoted[_HLO_MODULE] and program is promoted[_PROGRAM_ID]:
        return promoted
    values = list(promoted)
    values[_HLO_MODULE], values[_PROGRAM_ID] = module, program
    return tuple(values)


def _device_row(device_id: int, plane: xplane_pb2.XPlane, stats: dict[str, Any], n_tracks: int, n_events: int) -> tuple:
    kind, ordinal = _device_kind(plane.name)
    model = stats.get("device_type_string") if isinstance(stats.get("device_type_string"), str) else None
    peak_flops = peak_bw = None
    source = None
    if isinstance(stats.get("peak_teraflops_per_second"), float):
        peak_flops = stats["peak_teraflops_per_second"] * 1e12
    if isinstance(stats.get("peak_hbm_bw_gigabytes_per_second"), float):
        peak_bw = stats["peak_hbm_bw_gigabytes_per_second"] * 1e9
    elif isinstance(stats.get("memory_bandwidth"), int):
        peak_bw = float(stats["memory_bandwidth"])
    if peak_flops is not None or peak_bw is not None:
        source = "profile"
    cores = _int_stat(stats, "core_count")
    clock = _int_stat(stats, "clock_rate")
    memory = _int_stat(stats, "memory_size")
    major, minor = _int_stat(stats, "compute_cap_major"), _int_stat(stats, "compute_cap_minor")
    capability = None
    if major is not None and minor is not None:
        capability = f"{major}.{minor}"
        model = model or hardware.gpu_model(compute_capability=(major, minor), sm_count=cores, memory_bytes=memory)
        if peak_flops is None and cores and clock:
            peak_flops = hardware.gpu_peak_flops_per_s(compute_capability=(major, minor), sm_count=cores, clock_khz=clock)
            if peak_flops is not None:
                source = "hardware_model" if source is None else "profile+hardware_model"
    return (device_id, plane.id, plane.name, kind, ordinal, model, peak_flops, peak_bw, source,
            cores, clock, memory, capability, n_tracks, n_events)


def _int_stat(stats: dict[str, Any], name: str) -> int | None:
    value = stats.get(name)
    return value if isinstance(value, int) and not isinstance(value, bool) else None
