"""XSpace (``*.xplane.pb``) decoder: one file in, Arrow record batches per table out.

Two stages. :mod:`xprosql.ingest.xspace_wire` turns the bytes into flat columns
(compiled with numba when installed, else through protobuf objects; both give
the same columns). This module turns those columns into the warehouse tables:
stat names and interned strings resolved, promoted stats as columns, HLO ops,
GPU kernels, copies and launches. Per-event work is numpy gathers from small
per-id tables (:mod:`xprosql.ingest._xspace_events`), and the events table is
built one sorted batch at a time; the small tables (metadata, planes, lines)
are Arrow arrays. It knows nothing of the warehouse: :func:`decode_xspace` yields
``(table, batch)``.

Example:
    >>> data = open("tpu.xplane.pb", "rb").read()            # doctest: +SKIP
    >>> for table, batch in decode_xspace(data, source="tpu.xplane.pb"):  # doctest: +SKIP
    ...     print(table, batch.num_rows)
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from xprosql.errors import IngestError
from xprosql.ingest import _xspace_events as _events
from xprosql.ingest import counters, hlo
from xprosql.ingest._nulls import zeros
from xprosql.ingest._xspace_events import Column
from xprosql.ingest.xspace_wire import STAT_KIND_OF_FIELD, STAT_KINDS, RawEvents, RawSpace, read_raw
from xprosql.models import hardware
from xprosql.models.tables import TABLES
from xprosql.protos import xplane_pb2

__all__ = ["PROMOTED_STATS", "decode_xspace"]

# stat name -> (events column, target type). A value that does not convert to
# the target stays in event_stats, so nothing is lost.
PROMOTED_STATS: dict[str, tuple[str, str]] = {
    "hlo_module": ("hlo_module", "str"),
    "hlo_op": ("hlo_op", "str"),
    "program_id": ("program_id", "uint64"),
    "group_id": ("group_id", "int64"),
    "step_num": ("step_num", "int64"),
    "correlation_id": ("correlation_id", "int64"),
    "hlo_category": ("category", "str"),
    "flops": ("flops", "int64"),
    "bytes_accessed": ("bytes_accessed", "int64"),
    "_a": ("is_async", "bool"),
    "device_offset_ps": ("device_offset_ps", "int64"),
    "device_duration_ps": ("device_duration_ps", "int64"),
}
# Event stats the GPU tables read; they stay in event_stats as well.
_GPU_DETAIL_STATS = ("kernel_details", "memcpy_details", "tf_op", "annotation")
_LAUNCH_FIELDS = {  # kernels column -> pattern in kernel_details ("regs:38 shm:0 grid:160,1,1 block:1024,1,1")
    "registers_per_thread": r"(?:^|\s)regs:(?P<value>\d+)(?:\s|$)",
    "shm": r"(?:^|\s)shm:(?P<value>\d+)(?:\s|$)",
    "static_shm": r"(?:^|\s)static_shm:(?P<value>\d+)(?:\s|$)",
    "dynamic_shm": r"(?:^|\s)dynamic_shm:(?P<value>\d+)(?:\s|$)",
    "occupancy_pct": r"(?:^|\s)occ_pct:(?P<value>[0-9.]+)(?:\s|$)",
}
# XSpace names a copy by its event ("MemcpyH2D") and its line ("Stream #135(MemcpyH2D)").
_COPY_KINDS = {"MemcpyH2D": "HtoD", "MemcpyD2H": "DtoH", "MemcpyD2D": "DtoD", "MemcpyP2P": "PtoP", "Memset": "memset"}
_DEVICE_NAME = re.compile(r"^/device:([A-Za-z_]+):(\d+)")
_INT64 = (-(2**63), 2**63 - 1)


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


def _to_arrow(table: str, columns: dict[str, Any]) -> pa.Table:
    """Columns holding at least the table's (any compatible types) as the table's Arrow schema."""
    schema = TABLES[table]
    return pa.Table.from_arrays([columns[field.name].cast(field.type) for field in schema], schema=schema)


def _batches(table: str, columns: dict[str, Any], batch_rows: int) -> Iterator[tuple[str, pa.RecordBatch]]:
    arrow = _to_arrow(table, columns)
    for batch in arrow.to_batches(max_chunksize=batch_rows):
        yield table, batch
    if arrow.num_rows == 0:
        yield table, pa.RecordBatch.from_pylist([], schema=TABLES[table])


def _rows(columns: dict[str, Any], mask: Any) -> dict[str, Any]:
    """The rows of ``columns`` (arrays or chunked arrays) where ``mask`` (a numpy or Arrow boolean) is true."""
    mask = pa.array(mask) if isinstance(mask, np.ndarray) else mask
    return {name: column.filter(mask) for name, column in columns.items()}


def _extract(strings: pa.Array | pa.ChunkedArray, pattern: str, type_: pa.DataType | None = None, *,
             strict: bool = False, groups: int = 1) -> Any:
    """The first match of ``pattern``'s named group in each string (RE2: ``\\d`` and ``\\s`` are ASCII, as the
    machine-written names and details it reads are), as ``type_``; null where it does not match, or (not ``strict``)
    where the text does not parse as ``type_`` (None: strings), e.g. a number beyond int64. With ``groups`` above 1,
    a list of those, one per group."""
    found = pc.extract_regex(strings.cast(pa.string()), pattern=pattern)
    values = [pc.struct_field(found, [i]) for i in range(groups)]
    if type_ is not None:
        values = [_parsed(value, type_, strict=strict) for value in values]
    return values[0] if groups == 1 else values


def _parsed(strings: pa.Array | pa.ChunkedArray, type_: pa.DataType, *, strict: bool) -> Any:
    """Numbers that patterns matched (digits, and dots for a float) as ``type_``, by Arrow; where one does not fit or
    parse, it raises (``strict``) or the text is parsed one by one and that one is null."""
    try:
        return pc.cast(strings, type_)
    except pa.ArrowInvalid:
        if strict:
            raise
    if pa.types.is_floating(type_):
        return pa.array([_number(float, text) for text in strings.to_pylist()], type_)
    return _in_range([_number(int, text) for text in strings.to_pylist()], type_)


def _number(parse: Callable[[str], Any], text: str | None) -> Any:
    try:
        return None if text is None else parse(text)
    except ValueError:
        return None


def _in_range(values: list[int | None], type_: pa.DataType) -> pa.Array:
    low, high = (0, 2**64 - 1) if type_ == pa.uint64() else _INT64  # the integer types parsed here
    return pa.array([v if v is not None and low <= v <= high else None for v in values], type_)


# --- stats -------------------------------------------------------------------------------------------

_TEXT_NUMBER = {"uint64": r"^[0-9]+$", "int64": r"^-?[0-9]+$"}  # what a promoted number given as text may be


@dataclass
class _SmallStats:
    """The stats of planes and of event metadata (thousands, walked as protobuf), in file order: their table
    columns, and what promotion reads."""

    columns: dict[str, pa.Array]  # device_id, metadata_id (null: a plane's own), stat and the typed values
    metadata_row: np.ndarray  # int64 per stat: its row in the metadata table; -1 for a plane's own stats
    kind: np.ndarray  # int8: XStat value field number (STAT_KINDS), 0 when unset
    ints: np.ndarray  # int64: int64/uint64 (bit pattern)/ref values, 0 elsewhere
    doubles: np.ndarray  # float64

    @classmethod
    def of(cls, planes: list[xplane_pb2.XPlane]) -> _SmallStats:
        rows: dict[str, list] = {k: [] for k in ("plane", "metadata_id", "metadata_row", "stat", "kind", "int",
                                                 "double", "str", "bytes")}

        def add(plane: int, names: dict[int, str], metadata_id: int | None, row: int, stat: xplane_pb2.XStat) -> None:
            which = stat.WhichOneof("value")
            value: Any = getattr(stat, which) if which else None  # float, int, str or bytes; None: unset
            kind = STAT_KIND_OF_FIELD.get(which, 0)
            rows["plane"].append(plane)
            rows["metadata_id"].append(metadata_id)
            rows["metadata_row"].append(row)
            rows["stat"].append(names.get(stat.metadata_id))
            rows["kind"].append(kind)
            rows["int"].append(int(np.uint64(value).astype(np.int64)) if kind == 3 else value if kind in (4, 7) else 0)
            rows["double"].append(value if kind == 2 else 0.0)
            # A ref's string is the name of the stat metadata it points at.
            rows["str"].append(value if kind == 5 else names.get(value) if kind == 7 else None)
            rows["bytes"].append(value if kind == 6 else None)

        row = 0
        for plane_index, plane in enumerate(planes):
            names = {sid: md.name for sid, md in plane.stat_metadata.items()}
            for stat in plane.stats:
                add(plane_index, names, None, -1, stat)
            for metadata_id, md in plane.event_metadata.items():
                for stat in md.stats:
                    add(plane_index, names, metadata_id, row, stat)
                row += 1
        kind = np.array(rows["kind"], dtype=np.int8)
        ints = np.array(rows["int"], dtype=np.int64)
        doubles = np.array(rows["double"], dtype=np.float64)
        columns = {
            "device_id": pa.array(rows["plane"], pa.int32()),
            "metadata_id": pa.array(rows["metadata_id"], pa.int64()),
            "stat": pa.array(rows["stat"], pa.string()),
            "value_type": pa.array([STAT_KINDS.get(k) for k in rows["kind"]], pa.string()),
            "int_value": pa.array(ints, mask=kind != 4),
            "uint_value": pa.array(ints.view(np.uint64), mask=kind != 3),
            "double_value": pa.array(doubles, mask=kind != 2),
            "str_value": pa.array(rows["str"], pa.string()),
            "bytes_value": pa.array(rows["bytes"], pa.binary()),
        }
        return cls(columns, np.array(rows["metadata_row"], dtype=np.int64), kind, ints, doubles)

    def of_planes(self) -> dict[str, pa.Array]:
        return _rows(self.columns, self.metadata_row < 0)

    def of_metadata(self) -> dict[str, pa.Array]:
        return _rows(self.columns, self.metadata_row >= 0)

    def defaults(self, n_metadata: int) -> dict[str, pa.Array]:
        """Per promoted column, each metadata row's value from its stats (the last that converts), else null."""
        stat = self.columns["stat"]
        defaults = {}
        for name, (column, target) in PROMOTED_STATS.items():
            named = pc.fill_null(pc.equal(stat, name), False).to_numpy(zero_copy_only=False)
            stats = np.flatnonzero(named & (self.metadata_row >= 0))
            converts, values = _converted(self.kind, self.ints, self.doubles, self.columns["str_value"], stats, target)
            owners = self.metadata_row[stats[converts]]
            last = _events.last_per_owner(owners)
            kept = np.flatnonzero(converts)[last]
            at = np.full(n_metadata, -1, dtype=np.int64)
            at[owners[last]] = kept
            if isinstance(values, pa.Array):
                defaults[column] = values.take(pa.array(at, mask=at < 0))
            else:
                taken = values[np.maximum(at, 0)] if len(values) else np.zeros(n_metadata, values.dtype)
                defaults[column] = pa.array(taken, _PROMOTED_TYPES[target], mask=at < 0)
        return defaults


def _converted(kind_of: np.ndarray, ints_of: np.ndarray, doubles_of: np.ndarray, strings_of: pa.Array,
               stats: np.ndarray, target: str) -> tuple[np.ndarray, np.ndarray | pa.Array]:
    """Whether each of ``stats`` (rows of the stat columns given) converts to a promoted column's type, and the
    values (meaningful where it does).

    The rules: a number converts when it fits (a double when it is integral); text (a str value, or a ref's name)
    to a string, and to a number when it is decimal digits (ASCII) that fit; a bool from an integer, true when not 0.
    """
    kind, ints = kind_of[stats], ints_of[stats]
    is_text = (kind == 5) | (kind == 7)
    if target == "str":
        strings = strings_of.take(pa.array(stats))
        return is_text & strings.is_valid().to_numpy(zero_copy_only=False), strings
    if target == "bool":
        return (kind == 3) | (kind == 4), ints != 0
    values: np.ndarray
    if target == "uint64":
        converts, values = (kind == 3) | (kind == 4), ints.view(np.uint64).copy()
    else:
        doubles = doubles_of[stats]
        integral = (kind == 2) & np.isfinite(doubles) & (np.floor(doubles) == doubles) & (np.abs(doubles) < 2.0**63)
        converts = (kind == 4) | ((kind == 3) & (ints >= 0)) | integral
        values = np.where(integral, doubles.astype(np.int64, copy=False) if integral.any() else 0, ints)
    text = np.flatnonzero(is_text)
    if len(text):  # promoted stats given as text
        strings = strings_of.take(pa.array(stats[text]))
        digits = pc.fill_null(pc.match_substring_regex(strings, _TEXT_NUMBER[target]), False)
        parsed = _parsed(strings.filter(digits), _PROMOTED_TYPES[target], strict=False)
        ok = text[digits.to_numpy(zero_copy_only=False)][parsed.is_valid().to_numpy(zero_copy_only=False)]
        converts[ok], values[ok] = True, parsed.drop_null().to_numpy(zero_copy_only=False)
    return converts, values


# --- the decoder -------------------------------------------------------------------------------------


def _start_ns(raw: RawSpace) -> tuple[int, bool, np.ndarray]:
    """Earliest event start (ns, as recorded), whether any event has a start, and each line's base in ps."""
    timed, first_timed, least, greatest, longest = (raw.line_extent[:, i].tolist() for i in range(5))
    starts = [ts * 1000 + first for ts, n, first in zip(raw.line_timestamp_ns.tolist(), timed, first_timed) if n]
    if not starts:
        return 0, False, np.zeros(len(raw.line_plane), dtype=np.int64)
    start_ns = min(starts) // 1000
    bases = []
    for line, timestamp_ns in enumerate(raw.line_timestamp_ns.tolist()):
        base = (timestamp_ns - start_ns) * 1000
        if not (_INT64[0] <= base + least[line] and base + greatest[line] + longest[line] <= _INT64[1]):
            raise ValueError(f"line {raw.line_name[line]!r}: event times do not fit int64 picoseconds")
        bases.append(base)
    return start_ns, True, np.array(bases, dtype=np.int64)


def _hlo_tables(planes: list[xplane_pb2.XPlane], source: str) -> tuple[list[dict], list[dict], list[dict]]:
    modules: list[dict] = []
    ops: list[dict] = []
    buffers: list[dict] = []
    for plane in planes:
        if plane.name != "/host:metadata":
            continue
        names = {sid: md.name for sid, md in plane.stat_metadata.items()}
        for metadata_id, md in sorted(plane.event_metadata.items()):
            proto_bytes = None
            program_id = metadata_id
            for stat in md.stats:
                name = names.get(stat.metadata_id)
                which = stat.WhichOneof("value")
                if name == "Hlo Proto" and which == "bytes_value":
                    proto_bytes = stat.bytes_value
                elif name == "program_id" and which in ("uint64_value", "int64_value"):
                    program_id = getattr(stat, which)
            if proto_bytes is None:
                continue
            try:
                module, module_ops = hlo.parse_hlo_proto(proto_bytes, program_id=program_id)
                module_buffers = hlo.buffer_assignment_rows(proto_bytes, program_id=program_id)
            except ValueError as exc:
                raise IngestError(source, f"HLO proto of {md.name!r} does not parse: {exc}") from None
            modules.append(module)
            ops.extend(module_ops)
            buffers.extend(module_buffers)
    return modules, ops, buffers


def decode_xspace(data: bytes, *, source: str, batch_rows: int = 500_000) -> Iterator[tuple[str, pa.RecordBatch]]:
    """Decode one XSpace file into warehouse record batches.

    Yields ``(table, batch)``; the single ``profiles`` row comes last, with the
    columns only the caller knows (path, hash, time of ingest) left null.
    Raises :class:`IngestError` naming ``source`` when the bytes are not an XSpace.
    """
    raw = read_raw(data, source=source)
    try:
        yield from _decode(raw, source=source, batch_rows=batch_rows)
    except pa.ArrowInvalid as exc:  # e.g. a string field that is not UTF-8
        raise ValueError(f"corrupt XSpace content: {exc}") from None


def _decode(raw: RawSpace, *, source: str, batch_rows: int) -> Iterator[tuple[str, pa.RecordBatch]]:
    planes = raw.planes
    start_ns, has_timed_events, line_base_ps = _start_ns(raw)
    module_rows, op_rows, buffer_rows = _hlo_tables(planes, source)
    if module_rows:
        yield "hlo_modules", pa.RecordBatch.from_pylist(module_rows, schema=TABLES["hlo_modules"])
    for i in range(0, len(op_rows), batch_rows):
        yield "hlo_ops", pa.RecordBatch.from_pylist(op_rows[i : i + batch_rows], schema=TABLES["hlo_ops"])
    for i in range(0, len(buffer_rows), batch_rows):
        yield "memory_buffers", pa.RecordBatch.from_pylist(buffer_rows[i : i + batch_rows], schema=TABLES["memory_buffers"])

    kinds = [_device_kind(plane.name) for plane in planes]
    listed = [(i, mid, md) for i, plane in enumerate(planes) for mid, md in plane.event_metadata.items()]
    metadata = {
        "device_id": pa.array([i for i, _, _ in listed], pa.int32()),
        "metadata_id": pa.array([mid for _, mid, _ in listed], pa.int64()),
        "name": pa.array([md.name for *_, md in listed], pa.string()),
        "display_name": pa.array([md.display_name for *_, md in listed], pa.string()),
        "metadata": pa.array([md.metadata for *_, md in listed], pa.binary()),
        "child_ids": pa.array([list(md.child_id) for *_, md in listed], pa.list_(pa.int64())),
    }
    # Plane and metadata stats: all of them stored; the metadata ones are defaults for promoted columns.
    small = _SmallStats.of(planes)

    # Lines (few): their names and GPU streams.
    plane_kind = np.array([kind for kind, _ in kinds] or ["other"])
    line_names = pa.array(raw.line_name, pa.string())
    on_gpu = pa.array(plane_kind[raw.line_plane] == "gpu", pa.bool_())
    lines = {
        "device_id": pa.array(raw.line_plane, pa.int32()),
        "track_id": pa.array(np.arange(len(line_names), dtype=np.int32)),
        "name": line_names,
        "stream_id": pc.if_else(on_gpu, _extract(line_names, r"^Stream #(?P<stream>\d+)", pa.int64(), strict=True),
                                pa.scalar(None, pa.int64())),
    }

    # Events and their stats, a chunk at a time: the tables of one chunk are written before the next is read.
    lookups = _Lookups.of(planes, metadata, small.defaults(len(listed)), module_rows, line_names)
    uses = np.zeros(len(listed), dtype=np.int64)
    end_ps = 0
    unnamed = negative = 0  # damage kept, but said: events without metadata, events ending before they start
    gpu_events, gpu_details = [], []
    for chunk in raw.chunks():
        space = _Space.of(raw, chunk, lookups)
        events = _Events.of(raw, space, lookups, line_base_ps)
        uses += np.bincount(events.md_row[events.md_row >= 0], minlength=len(listed))
        unnamed += int((events.md_row < 0).sum())
        negative += int((chunk.event_duration_ps < 0).sum())
        end_ps = max(end_ps, events.end_ps)
        gpu_events.append(events.gpu_rows(kinds, lines))
        gpu_details.append(_detail_stats(space))
        yield from events.batches(batch_rows)
        del events  # the largest arrays: gone before the stats are built
        yield from _column_batches("event_stats", *_rest_stats(space), batch_rows)
        del space, chunk
    yield from _gpu_tables(pa.concat_tables(gpu_events), pa.concat_tables(gpu_details), kinds, batch_rows)

    counter_rows, unreadable = _counter_rows(raw, start_ns)
    yield "counters", pa.RecordBatch.from_pylist(
        [dict(zip(TABLES["counters"].names, row)) for row in counter_rows], schema=TABLES["counters"])

    yield from _batches("event_metadata", {**metadata, "n_events": pa.array(uses)}, batch_rows)
    yield from _batches("metadata_stats", small.of_metadata(), batch_rows)
    yield from _batches("device_stats", small.of_planes(), batch_rows)
    yield from _batches("tracks", {
        **lines, "line_id": pa.array(raw.line_id, pa.int64()), "display_id": pa.array(raw.line_display_id, pa.int64()),
        "display_name": pa.array(raw.line_display_name, pa.string()),
        "timestamp_ns": pa.array(raw.line_timestamp_ns, pa.int64()), "duration_ps": pa.array(raw.line_duration_ps, pa.int64()),
        "n_events": pa.array(raw.line_n_events, pa.int64()), "sort_index": pa.nulls(len(line_names), pa.int64()),
    }, batch_rows)

    per_plane_lines = np.bincount(raw.line_plane, minlength=len(planes))
    per_plane_events = np.bincount(raw.line_plane, weights=raw.line_n_events, minlength=len(planes)).astype(np.int64)
    device_rows = [
        _device_row(i, plane, _plane_stat_values(plane), int(per_plane_lines[i]), int(per_plane_events[i]))
        for i, plane in enumerate(planes)
    ]
    yield "devices", pa.RecordBatch.from_pylist([dict(zip(TABLES["devices"].names, r)) for r in device_rows],
                                                 schema=TABLES["devices"])

    producer = next((f"jax {values['jax_version']}" for values in map(_plane_stat_values, planes)
                     if isinstance(values.get("jax_version"), str)), None)
    task = next((_plane_stat_values(p) for p in planes if p.name == "Task Environment"), {})
    profile: dict[str, Any] = {name: None for name in TABLES["profiles"].names}
    profile.update(
        host=raw.hostnames[0] if raw.hostnames else None,
        format="xspace",
        start_ns=start_ns,
        duration_ps=end_ps if has_timed_events else 0,
        n_events=raw.n_events,
        n_devices=len(planes),
        producer=producer,
        dropped_events=0,
        drop_reasons=[f"{unreadable} counter values 0xFFFFFFFFFFFFFFFF (could not be read)"] if unreadable else [],
        errors=raw.errors,
        warnings=[*raw.warnings,
                  *([f"{unnamed} events whose metadata_id has no event metadata: kept without a name"] if unnamed else []),
                  *([f"{negative} events with a negative duration: kept as recorded"] if negative else [])],
        profile_start_time_ns=_int_or_none(task.get("profile_start_time")),
        profile_stop_time_ns=_int_or_none(task.get("profile_stop_time")),
    )
    yield "profiles", pa.RecordBatch.from_pylist([profile], schema=TABLES["profiles"])


# --- events and event stats: numpy columns (see _xspace_events) ----------------------------------------

_PROMOTED_TYPES = {"str": pa.string(), "bool": pa.bool_(), "uint64": pa.uint64(), "int64": pa.int64()}
# Columns the GPU tables read from the events on streams and the host's launches.
_GPU_EVENT_COLUMNS = ("event_id", "device_id", "track_id", "name", "start_ps", "dur_ps", "correlation_id",
                      "hlo_module", "hlo_op")


@dataclass
class _Lookups:
    """What every chunk's events look up: per-plane id tables, stat names, metadata defaults. Built once per file."""

    stat_keys: list[np.ndarray]  # per plane: stat metadata ids
    stat_codes: list[np.ndarray]  # ... and their names' codes into names
    names: pa.Array  # distinct stat names
    name_code: dict[str, int]
    md_keys: list[np.ndarray]  # per plane: event metadata ids
    md_rows: list[np.ndarray]  # ... and their rows in the metadata table
    defaults: dict[str, Column]  # per promoted column: each metadata row's default, then a null row
    name: Column  # per metadata row (and a null row)
    display_name: Column
    name_module: pa.Array  # per metadata row: the module of a name like jit_f(1234)
    name_program: Column  # ... and its program (and a null row)
    line_names: pa.Array
    module_ids: np.ndarray  # uint64, ascending: the programs of the embedded HLO modules
    module_names: pa.Array  # ... and their modules

    @classmethod
    def of(cls, planes: list[xplane_pb2.XPlane], metadata: dict[str, pa.Array], defaults: dict[str, pa.Array],
           module_rows: list[dict], line_names: pa.Array) -> _Lookups:
        name_code: dict[str, int] = {}
        stat_keys, stat_codes = [], []
        for plane in planes:
            ids = list(plane.stat_metadata)
            stat_keys.append(np.array(ids, dtype=np.int64))
            stat_codes.append(np.array([name_code.setdefault(plane.stat_metadata[i].name, len(name_code)) for i in ids],
                                       dtype=np.int64))
        md_plane = metadata["device_id"].to_numpy(zero_copy_only=False)
        md_id = metadata["metadata_id"].to_numpy(zero_copy_only=False)
        md_rows = [np.flatnonzero(md_plane == plane_index) for plane_index in range(len(planes))]
        names = metadata["name"]
        # TPU op metadata is named "%op.1 = shape opcode(...)": the op's name is there when no stat says it.
        defaults = {**defaults, "hlo_op": pc.coalesce(defaults["hlo_op"], _extract(names, r"^%(?P<op>[^\s=%]+) = "))}
        columns = {column: _events.codes_of(defaults[column]) if target == "str" else _numbers_of(defaults[column])
                   for column, target in PROMOTED_STATS.values()}
        # `XLA Modules` events are named like jit_f(1234) and carry no program_id stat. Only names ending in ")" are
        # searched: RE2's groups over every long op name took longer than the rest of the lookups.
        named = np.flatnonzero(pc.fill_null(pc.ends_with(names, ")"), False).to_numpy(zero_copy_only=False))
        module, program = _extract(names.take(pa.array(named)), r"^(?P<module>.*)\((?P<program>\d+)\)$", groups=2)
        at = np.full(len(names), -1, dtype=np.int64)
        at[named] = np.arange(len(named))
        of_name = pa.array(at, mask=at < 0)
        first: dict[int | None, str | None] = {}  # a program's first module
        for row in module_rows:
            first.setdefault(row["program_id"], row["module"])
        modules = sorted((program, module) for program, module in first.items() if program is not None and module is not None)
        return cls(stat_keys, stat_codes, pa.array(list(name_code), pa.string()), name_code,
                   [md_id[rows] for rows in md_rows], md_rows, columns,
                   _events.codes_of(names), _events.codes_of(metadata["display_name"]),
                   module.take(of_name), _numbers_of(_parsed(program, pa.uint64(), strict=False).take(of_name)),
                   line_names, np.array([program for program, _ in modules], dtype=np.uint64),
                   pa.array([module for _, module in modules], pa.string()))


@dataclass
class _Space:
    """Per-stat lookups of one chunk, shared by its events and event_stats columns; stats are grouped by event,
    events by plane."""

    chunk: RawEvents
    event_bounds: np.ndarray  # first event (of the chunk) of each plane, then the number of events
    stat_event: np.ndarray  # per stat: its event's row in the chunk
    stat_name: np.ndarray  # int32 per stat: code into names; -1 when its plane has no such stat
    names: pa.Array  # distinct stat names
    name_code: dict[str, int]
    strings: pa.Array  # per stat: the str value, or the name a ref points at
    promoted: np.ndarray  # bool per stat: moved to an events column

    @classmethod
    def of(cls, raw: RawSpace, chunk: RawEvents, lookups: _Lookups) -> _Space:
        # Events come plane by plane.
        event_bounds = np.searchsorted(raw.line_plane[chunk.event_line], np.arange(len(raw.planes) + 1))
        stat_bounds = np.concatenate([[0], np.cumsum(chunk.event_n_stats)])[event_bounds]
        stat_name = _events.plane_lookup(lookups.stat_keys, lookups.stat_codes, chunk.stat_metadata_id, stat_bounds)
        refs = np.flatnonzero(chunk.stat_kind == 7)
        ref_name = _events.plane_lookup(lookups.stat_keys, lookups.stat_codes, chunk.stat_int[refs],
                                        np.searchsorted(refs, stat_bounds))
        rows = np.arange(chunk.n_events, dtype=np.int32 if chunk.n_events < 2**31 else np.int64)
        return cls(
            chunk=chunk, event_bounds=event_bounds, stat_event=np.repeat(rows, chunk.event_n_stats),
            stat_name=stat_name, names=lookups.names, name_code=lookups.name_code,
            strings=_events.stat_strings(chunk.stat_kind, chunk.stat_text, refs, ref_name, lookups.names),
            promoted=np.zeros(chunk.n_stats, dtype=bool),
        )


def _numbers_of(values: pa.Array) -> Column:
    """A small numeric array with one extra null row at the end (what md_row -1 gathers)."""
    filled = values.fill_null(False if pa.types.is_boolean(values.type) else 0).to_numpy(zero_copy_only=False)
    return Column(np.append(filled, filled.dtype.type(0)), np.append(values.is_valid().to_numpy(zero_copy_only=False), False))


@dataclass
class _Events:
    """The events table of one chunk, built a batch of rows at a time from the raw columns, metadata defaults and
    own values."""

    raw: RawSpace
    chunk: RawEvents
    md_row: np.ndarray  # int32 per event: its metadata row, -1 when none
    start: Column  # per event: start relative to the profile's start, ps; null for aggregated events
    name: Column  # per metadata row (and a null row)
    display_name: Column
    promoted: dict[str, _events.Promoted]
    order: np.ndarray | None = None  # the table's row order: by start time, then event id; no start last
    end_ps: int = 0  # the latest event end

    @property
    def line_of_event(self) -> np.ndarray:
        return self.chunk.event_line

    @classmethod
    def of(cls, raw: RawSpace, space: _Space, lookups: _Lookups, line_base_ps: np.ndarray) -> _Events:
        chunk = space.chunk
        md_row = _events.plane_lookup(lookups.md_keys, lookups.md_rows, chunk.event_metadata_id, space.event_bounds)
        promoted = {column: _events.Promoted.of(default) for column, default in lookups.defaults.items()}
        aggregate = chunk.event_is_aggregate
        start = Column(line_base_ps[chunk.event_line] + chunk.event_offset_ps, ~aggregate if aggregate.any() else None)
        events = cls(raw, chunk, md_row, start, lookups.name, lookups.display_name, promoted)
        _promote_event_stats(space, promoted)
        events._name_modules(lookups)
        ends = start.values + chunk.event_duration_ps
        timed_ends = ends if start.valid is None else ends[start.valid]
        events.end_ps = int(timed_ends.max()) if len(timed_ends) else 0
        events.order = _events.sort_order(start.values, start.valid)
        return events

    def _name_modules(self, lookups: _Lookups) -> None:
        """Modules and programs the events' stats do not give: from `XLA Modules` names, then from program ids."""
        program, module = self.promoted["program_id"], self.promoted["hlo_module"]
        on_module_line = np.append(
            pc.fill_null(pc.equal(lookups.line_names, "XLA Modules"), False).to_numpy(zero_copy_only=False), False)
        rows = np.flatnonzero(on_module_line[self.line_of_event])
        has_program = program.at(rows, self.md_row[rows]).valid
        assert has_program is not None  # a Promoted's valid is never None
        rows = rows[~has_program]  # events named like jit_f(1234), no program_id stat
        md_row = self.md_row[rows]
        name_module = lookups.name_module.take(pa.array(md_row, mask=md_row < 0))
        has_module = module.at(rows, md_row).valid
        assert has_module is not None
        fill = ~has_module & name_module.is_valid().to_numpy(zero_copy_only=False)
        module.set(rows[fill], name_module.filter(pa.array(fill)))
        program.set(rows, lookups.name_program.take(md_row))
        ids = lookups.module_ids
        if not len(ids):  # TPU op events carry program_id only: name the module from the embedded HLO.
            return
        need = np.flatnonzero(program.valid(self.md_row) & ~module.valid(self.md_row))
        wanted = program.at(need, self.md_row[need]).values
        at = np.minimum(np.searchsorted(ids, wanted), len(ids) - 1)
        hit = ids[at] == wanted
        module.set(need[hit], Column(at[hit].astype(np.int32), np.ones(int(hit.sum()), dtype=bool), lookups.module_names))

    def arrays(self, rows: np.ndarray, md_row: np.ndarray, promoted: dict[str, Column],
               names: Sequence[str], *, zeroed: pa.Buffer | None = None) -> dict[str, pa.Array]:
        """The columns ``names`` at ``rows`` (of the chunk), whose metadata rows are ``md_row`` and promoted values
        ``promoted``; all-null ones over ``zeroed`` where given (:meth:`Column.to_arrow`)."""
        chunk, schema = self.chunk, TABLES["events"]
        line = np.take(chunk.event_line, rows)
        build: dict[str, Callable[[], Column]] = {
            "event_id": lambda: Column(rows + chunk.first_event),
            "device_id": lambda: Column(self.raw.line_plane[line]),
            "track_id": lambda: Column(line),
            "metadata_id": lambda: Column(np.take(chunk.event_metadata_id, rows)),
            "name": lambda: self.name.take(md_row),
            "display_name": lambda: self.display_name.take(md_row),
            "start_ps": lambda: self.start.take(rows),
            "dur_ps": lambda: Column(np.take(chunk.event_duration_ps, rows)),
            "num_occurrences": lambda: Column(np.take(chunk.event_num_occurrences, rows),
                                              np.take(chunk.event_is_aggregate, rows)),
            **{column: partial(promoted.__getitem__, column) for column in promoted},  # mypy types no lambda with a default
        }
        return {name: build[name]().to_arrow(schema.field(name).type, zeroed=zeroed) for name in names}

    def batches(self, batch_rows: int) -> Iterator[tuple[str, pa.RecordBatch]]:
        """The events table sorted by start time (then event id; aggregated events last), batch by batch."""
        schema, order = TABLES["events"], self.order
        assert order is not None  # of() sets it
        rank = np.empty_like(order)
        rank[order] = np.arange(len(order))
        promoted = {column: values.ranked(rank) for column, values in self.promoted.items()}
        del rank
        shared = zeros(min(batch_rows, len(order)))  # about twelve all-null columns a batch
        for first in range(0, len(order), batch_rows):
            rows = order[first : first + batch_rows]
            md_row = self.md_row[rows]
            own = {column: values.batch(first, md_row) for column, values in promoted.items()}
            arrays = self.arrays(rows, md_row, own, schema.names, zeroed=shared)
            yield "events", pa.RecordBatch.from_arrays(list(arrays.values()), schema=schema)
        if not len(order):
            yield "events", pa.RecordBatch.from_pylist([], schema=schema)

    def gpu_rows(self, kinds: list[tuple[str, int | None]], lines: dict[str, pa.Array]) -> pa.Table:
        """The events the GPU tables read (on a stream, or a host event with a correlation id), with line and stream."""
        stream = lines["stream_id"]
        on_stream = np.append(stream.is_valid().to_numpy(zero_copy_only=False), False)[self.line_of_event]
        is_host = np.array([kind == "host" for kind, _ in kinds] + [False])
        host = np.flatnonzero(is_host[self.raw.line_plane[self.line_of_event]])
        correlated = host[self.promoted["correlation_id"].at(host, self.md_row[host]).valid]
        rows = np.union1d(np.flatnonzero(on_stream), correlated)
        md_row = self.md_row[rows]
        own = {column: self.promoted[column].at(rows, md_row) for column in ("correlation_id", "hlo_module", "hlo_op")}
        track = pa.array(self.line_of_event[rows])
        return pa.table({**self.arrays(rows, md_row, own, _GPU_EVENT_COLUMNS),
                         "line_name": lines["name"].take(track), "stream_id": stream.take(track)})


def _promote_event_stats(space: _Space, promoted: dict[str, _events.Promoted]) -> None:
    """Move each event's promoted stats into its columns (the last value that converts wins; defaults stay else)."""
    column_of_name = np.full(len(space.names) + 1, -1, dtype=np.int8)  # the extra entry: what code -1 reads
    for index, stat in enumerate(PROMOTED_STATS):
        if stat in space.name_code:
            column_of_name[space.name_code[stat]] = index
    candidates = np.flatnonzero(column_of_name[space.stat_name] >= 0)
    candidate_column = column_of_name[space.stat_name[candidates]]
    chunk = space.chunk
    for index, (column, target) in enumerate(PROMOTED_STATS.values()):
        stats = candidates[candidate_column == index]
        converts, values = _converted(chunk.stat_kind, chunk.stat_int, chunk.stat_double, space.strings, stats, target)
        rows = stats[converts]
        owners = space.stat_event[rows]
        last = _events.last_per_owner(owners)
        space.promoted[rows[last]] = True
        kept = np.flatnonzero(converts)[last]
        valid = np.ones(len(kept), dtype=bool)
        if isinstance(values, pa.Array):  # strings: as codes into their distinct values
            encoded = values.take(pa.array(kept)).dictionary_encode()
            own = Column(encoded.indices.to_numpy(zero_copy_only=False), valid, encoded.dictionary)
        else:
            own = Column(values[kept], valid)
        promoted[column].set(owners[last], own)


def _detail_stats(space: _Space) -> pa.Table:
    """Event stats the GPU tables read (kernel and copy details, framework ops) as event_id, stat, str_value."""
    codes = [space.name_code[name] for name in _GPU_DETAIL_STATS if name in space.name_code]
    rows = np.flatnonzero(np.isin(space.stat_name, codes))
    return pa.table({
        "event_id": space.stat_event[rows] + space.chunk.first_event,
        "stat": space.names.take(pa.array(space.stat_name[rows])),
        "str_value": space.strings.take(pa.array(rows)),
    })


def _rest_stats(space: _Space) -> tuple[dict[str, Column | pa.Array], np.ndarray]:
    """The event_stats columns over all stats, and the rows to write: those not promoted, in file order."""
    chunk, kind = space.chunk, space.chunk.stat_kind
    is_bytes = pa.array(kind == 6)
    columns: dict[str, Column | pa.Array] = {
        "event_id": Column(space.stat_event + chunk.first_event),
        "stat": Column(space.stat_name, space.stat_name >= 0, space.names),
        "value_type": Column(kind.astype(np.int32) - 2, kind >= 2, _events.STAT_KIND_CODES),
        "int_value": Column(chunk.stat_int, kind == 4),
        "uint_value": Column(chunk.stat_int.view(np.uint64), kind == 3),
        "double_value": Column(chunk.stat_double, kind == 2),
        "str_value": space.strings,
        "bytes_value": pc.if_else(is_bytes, chunk.stat_text, pa.scalar(None, pa.binary())),
    }
    return columns, np.flatnonzero(~space.promoted)


def _column_batches(table: str, columns: dict[str, Column | pa.Array], rows: np.ndarray,
                    batch_rows: int) -> Iterator[tuple[str, pa.RecordBatch]]:
    """``rows`` of ``columns`` as the table's record batches, gathered one batch at a time."""
    schema, shared = TABLES[table], zeros(min(batch_rows, len(rows)))
    for first in range(0, len(rows), batch_rows):
        chunk = rows[first : first + batch_rows]
        arrays = [column.take(pa.array(chunk)) if isinstance(column, pa.Array)
                  else column.take(chunk).to_arrow(field.type, zeroed=shared)
                  for field, column in zip(schema, (columns[name] for name in schema.names))]
        yield table, pa.RecordBatch.from_arrays(arrays, schema=schema)
    if not len(rows):
        yield table, pa.RecordBatch.from_pylist([], schema=schema)


def _gpu_tables(events: pa.Table, event_stats: pa.Table, kinds: list[tuple[str, int | None]],
                batch_rows: int) -> Iterator[tuple[str, pa.RecordBatch]]:
    host_devices = pa.array([i for i, (kind, _) in enumerate(kinds) if kind == "host"], pa.int32())
    calls = events.filter(pc.and_(pc.is_in(events["device_id"], value_set=host_devices),
                                  pc.is_valid(events["correlation_id"])))
    yield from _batches("api_calls", {**_columns(calls), "thread": calls["line_name"],
                                      "api": pa.repeat("launch", calls.num_rows)}, batch_rows)
    on_stream = events.filter(pc.is_valid(events["stream_id"]))
    if on_stream.num_rows == 0:
        for table in ("memcpys", "kernels"):
            yield table, pa.RecordBatch.from_pylist([], schema=TABLES[table])
        return
    ids = on_stream["event_id"].to_numpy()
    columns = {**_columns(on_stream), **{name: _last_detail(event_stats, name, ids) for name in _GPU_DETAIL_STATS}}
    # The first prefix that matches, the event's name before its line's. A line names its kind only when it holds
    # one: "Stream #14(Memset,Compute)" (XLA's command buffers on an H200) runs kernels beside its memsets.
    sources = (columns["name"].cast(pa.string()), _extract(columns["line_name"], r"\((?P<kind>[^),]*)\)"))
    copy_kind = pa.nulls(on_stream.num_rows, pa.string())
    for source, (prefix, kind) in reversed([(s, p) for s in sources for p in _COPY_KINDS.items()]):
        copy_kind = pc.if_else(pc.fill_null(pc.starts_with(source, prefix), False), kind, copy_kind)
    columns["kind"] = copy_kind
    is_copy = pc.and_(pc.or_(pc.is_valid(copy_kind), pc.is_valid(columns["memcpy_details"])),
                      pc.is_null(columns["kernel_details"]))

    copies = _rows(columns, is_copy)
    copies["bytes"] = _extract(copies["memcpy_details"], r"(?:^|\s)size:(?P<bytes>\d+)", pa.int64())
    copies["src_kind"] = copies["dst_kind"] = pa.nulls(len(copies["event_id"]), pa.string())
    yield from _batches("memcpys", copies, batch_rows)

    kernels = _rows(columns, pc.invert(is_copy))
    launch = kernels["kernel_details"]
    for shape in ("grid", "block"):
        sizes = _extract(launch, rf"(?:^|\s){shape}:(?P<x>\d+),(?P<y>\d+),(?P<z>\d+)(?:\s|$)", pa.int64(),
                         strict=True, groups=3)
        kernels.update({f"{shape}_{axis}": size for axis, size in zip("xyz", sizes)})
    shared = [_extract(launch, _LAUNCH_FIELDS[k], pa.int64()) for k in ("shm", "static_shm", "dynamic_shm")]
    filled = [pc.fill_null(part, 0) for part in shared]
    try:
        total = pc.add_checked(pc.add_checked(filled[0], filled[1]), filled[2])
    except pa.ArrowInvalid:  # parts that fit int64 alone but not together: no total, rather than a wrapped negative one
        total = _in_range([sum(parts) for parts in zip(*(part.to_pylist() for part in filled))], pa.int64())
    any_shared = pc.or_(pc.or_(pc.is_valid(shared[0]), pc.is_valid(shared[1])), pc.is_valid(shared[2]))
    kernels.update(
        registers_per_thread=_extract(launch, _LAUNCH_FIELDS["registers_per_thread"], pa.int64()),
        shared_memory_bytes=pc.if_else(any_shared, total, pa.scalar(None, pa.int64())),
        occupancy_pct=_extract(launch, _LAUNCH_FIELDS["occupancy_pct"], pa.float64()),
        framework_op=pc.coalesce(kernels["tf_op"], kernels["annotation"]),
    )
    yield from _batches("kernels", kernels, batch_rows)


def _columns(table: pa.Table) -> dict[str, pa.ChunkedArray]:
    return dict(zip(table.column_names, table.columns))


def _last_detail(stats: pa.Table, name: str, ids: np.ndarray) -> pa.ChunkedArray:
    """For each event of ``ids``, the str_value of its last stat ``name`` that has one; null where none."""
    rows = stats.filter(pc.and_(pc.equal(stats["stat"], name), pc.is_valid(stats["str_value"])))
    owners = rows["event_id"].to_numpy()
    order = np.argsort(owners, kind="stable")
    last = _events.last_per_owner(owners[order])
    keys, value_rows = owners[order][last], order[last]
    if not len(keys):
        return pa.chunked_array([pa.nulls(len(ids), pa.string())])
    at = np.minimum(np.searchsorted(keys, ids), len(keys) - 1)
    hit = keys[at] == ids
    return rows["str_value"].take(pa.array(np.where(hit, value_rows[at], -1), mask=~hit))


def _counter_rows(raw: RawSpace, start_ns: int) -> tuple[list[tuple], int]:
    """Counter values of the planes that have any (rare); planes with counter events are walked as protobuf."""
    counter_lines = {int(raw.line_plane[i]) for i, name in enumerate(raw.line_name) if name == counters.COUNTER_LINE}
    has_events = {i for i, plane in enumerate(raw.planes)
                  if i in counter_lines or any(md.name == "counter_value" for md in plane.stat_metadata.values())}
    wanted = [i for i, plane in enumerate(raw.planes) if i in has_events or counters.has_counters(plane)]
    first_event = np.concatenate([[0], np.cumsum(raw.line_n_events)])
    first_line_of_plane = np.searchsorted(raw.line_plane, np.arange(len(raw.planes)))
    rows: list[tuple] = []
    unreadable = 0
    for i in wanted:
        track = int(first_line_of_plane[i])
        plane = raw.plane_with_lines(i) if i in has_events else raw.planes[i]
        plane_rows, plane_unreadable = counters.xspace_counter_rows(
            plane, device_id=i, first_event_id=int(first_event[track]), first_track_id=track, start_ns=start_ns
        )
        rows.extend(plane_rows)
        unreadable += plane_unreadable
    return rows, unreadable


def _plane_stat_values(plane: xplane_pb2.XPlane) -> dict[str, Any]:
    names = {sid: md.name for sid, md in plane.stat_metadata.items()}
    values: dict[str, Any] = {}
    for stat in plane.stats:
        which = stat.WhichOneof("value")
        if which and stat.metadata_id in names:
            value = getattr(stat, which)
            values[names[stat.metadata_id]] = names.get(value) if which == "ref_value" else value
    return values


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and _INT64[0] <= value <= _INT64[1] else None


def _device_row(device_id: int, plane: xplane_pb2.XPlane, stats: dict[str, Any], n_tracks: int, n_events: int) -> tuple:
    kind, ordinal = _device_kind(plane.name)
    # A GPU plane names its board in gpu_device_name ("NVIDIA H200"), as PyTorch's traces do.
    model = next((stats[k] for k in ("device_type_string", "gpu_device_name") if isinstance(stats.get(k), str)), None)
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
    vendor = stats.get("device_vendor") if isinstance(stats.get("device_vendor"), str) else None
    capability = None
    if major is not None and minor is not None:
        capability = f"{major}.{minor}"
        model = hardware.device_model(model, compute_capability=(major, minor), sm_count=cores, memory_bytes=memory,
                                      vendor=vendor)
        modelled = None
        if peak_flops is None and cores and clock:
            modelled = hardware.gpu_peak_flops_per_s(compute_capability=(major, minor), sm_count=cores,
                                                     clock_khz=clock, vendor=vendor)
        # XProf's per-SM model knows NVIDIA's GPUs only: others (AMD) take their chip's published peaks.
        chip = hardware.chip_for_model(model, memory_bytes=memory) if peak_flops is None and modelled is None else None
        if chip is not None:
            modelled = chip.peak_flops_per_s
            peak_bw = chip.peak_hbm_bytes_per_s if peak_bw is None else peak_bw
        if modelled is not None:
            peak_flops = modelled
            source = "hardware_model" if source is None else "profile+hardware_model"
    return (device_id, plane.id, plane.name, kind, ordinal, model, peak_flops, peak_bw, source,
            cores, clock, memory, capability, n_tracks, n_events)


def _int_stat(stats: dict[str, Any], name: str) -> int | None:
    value = stats.get(name)
    return value if isinstance(value, int) and not isinstance(value, bool) else None
