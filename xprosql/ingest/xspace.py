"""XSpace (``*.xplane.pb``) decoder: one file in, Arrow record batches per table out.

Two stages. :mod:`xprosql.ingest.xspace_wire` turns the bytes into flat columns
(compiled with numba when installed, else through protobuf objects; both give
the same columns). This module turns those columns into the warehouse tables:
stat names and interned strings resolved, promoted stats as columns, HLO ops,
GPU kernels, copies and launches. Per-event work is numpy gathers from small
per-id tables (:mod:`xprosql.ingest._xspace_events`), and the events table is
built one sorted batch at a time; the small tables (metadata, planes, lines)
use Polars. It knows nothing of the warehouse: :func:`decode_xspace` yields
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
from typing import Any, cast

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from xprosql.errors import IngestError
from xprosql.ingest import _xspace_events as _events
from xprosql.ingest import counters, hlo
from xprosql.ingest._nulls import zeros
from xprosql.ingest._xspace_events import Column
from xprosql.ingest.xspace_wire import STAT_KINDS, RawEvents, RawSpace, read_raw
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
    "registers_per_thread": r"(?:^|\s)regs:(\d+)(?:\s|$)",
    "shm": r"(?:^|\s)shm:(\d+)(?:\s|$)",
    "static_shm": r"(?:^|\s)static_shm:(\d+)(?:\s|$)",
    "dynamic_shm": r"(?:^|\s)dynamic_shm:(\d+)(?:\s|$)",
    "occupancy_pct": r"(?:^|\s)occ_pct:([0-9.]+)(?:\s|$)",
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


def _to_arrow(table: str, frame: pl.DataFrame) -> pa.Table:
    """A frame with the table's columns (any order, any compatible types) as the table's Arrow schema."""
    schema = TABLES[table]
    arrow = frame.select(schema.names).to_arrow()
    columns = []
    for field, column in zip(schema, arrow.columns):
        column = column.cast(pa.string()) if pa.types.is_large_string(column.type) else column
        column = column.cast(pa.binary()) if pa.types.is_large_binary(column.type) else column
        if pa.types.is_large_list(column.type):
            column = column.cast(pa.list_(column.type.value_type))
        columns.append(column.cast(field.type))
    return pa.Table.from_arrays(columns, schema=schema)


def _batches(table: str, frame: pl.DataFrame, batch_rows: int) -> Iterator[tuple[str, pa.RecordBatch]]:
    for batch in _to_arrow(table, frame).to_batches(max_chunksize=batch_rows):
        yield table, batch
    if frame.height == 0:
        yield table, pa.RecordBatch.from_pylist([], schema=TABLES[table])


# --- stats -------------------------------------------------------------------------------------------


def _stat_frame(owner: dict[str, Any], plane: Any, raw_ids: Any, kinds: Any, ints: Any, doubles: Any, texts: Any) -> pl.DataFrame:
    kinds = np.asarray(kinds, dtype=np.int8)
    texts = texts if isinstance(texts, pa.Array) else pa.array(texts, pa.binary())
    # Decode only the str values: bytes values need not be UTF-8.
    is_str = kinds == 5
    strings = pl.Series("str_text", [None] * len(kinds), dtype=pl.String)
    if is_str.any():
        strings = strings.scatter(np.flatnonzero(is_str), pl.Series(texts.filter(pa.array(is_str)).cast(pa.string())))
    return pl.DataFrame({
        **owner,
        "plane": plane,
        "stat_id": raw_ids,
        "kind": pl.Series(kinds, dtype=pl.Int8),
        "int": pl.Series(ints, dtype=pl.Int64),
        "double": pl.Series(doubles, dtype=pl.Float64),
        "text": pl.Series(texts, dtype=pl.Binary),
        "str_text": strings,
    })


def _metadata_stats(planes: list[xplane_pb2.XPlane]) -> pl.DataFrame:
    """Stats of planes (metadata_id null) and of event metadata, in file order, as raw columns."""
    rows: dict[str, list] = {k: [] for k in ("metadata_id", "plane", "stat_id", "kind", "int", "double", "text")}

    def add(plane_index: int, metadata_id: int | None, stat: xplane_pb2.XStat) -> None:
        which = stat.WhichOneof("value")
        value: Any = getattr(stat, which) if which else None  # float, int, str or bytes; None: unset
        kind = {"double_value": 2, "uint64_value": 3, "int64_value": 4, "str_value": 5,
                "bytes_value": 6, "ref_value": 7}.get(which, 0)
        rows["metadata_id"].append(metadata_id)
        rows["plane"].append(plane_index)
        rows["stat_id"].append(stat.metadata_id)
        rows["kind"].append(kind)
        rows["int"].append(int(np.uint64(value).astype(np.int64)) if kind == 3 else value if kind in (4, 7) else None)
        rows["double"].append(value if kind == 2 else None)
        rows["text"].append(value.encode() if kind == 5 else value if kind == 6 else None)

    for plane_index, plane in enumerate(planes):
        for stat in plane.stats:
            add(plane_index, None, stat)
        for metadata_id, md in plane.event_metadata.items():
            for stat in md.stats:
                add(plane_index, metadata_id, stat)
    return _stat_frame({"metadata_id": pl.Series(rows["metadata_id"], dtype=pl.Int64)},
                       pl.Series(rows["plane"], dtype=pl.Int32), pl.Series(rows["stat_id"], dtype=pl.Int64),
                       rows["kind"], rows["int"], rows["double"], rows["text"])


def _resolve(stats: pl.DataFrame, stat_names: pl.DataFrame) -> pl.DataFrame:
    """Name each stat and type its value (the warehouse's stat value columns); refs become their string."""
    kind = pl.col("kind")
    resolved = stats.join(stat_names, on=["plane", "stat_id"], how="left", maintain_order="left")
    refs = resolved.select(pl.arg_where(kind == 7)).to_series()
    ref_names = pl.Series("ref_name", [None] * resolved.height, dtype=pl.String)
    if len(refs):  # interned strings are rare: look up only those
        names = resolved[refs].select("plane", pl.col("int").alias("stat_id")).join(
            stat_names, on=["plane", "stat_id"], how="left", maintain_order="left")["stat"]
        ref_names = ref_names.scatter(refs, names)
    return resolved.with_columns(
        value_type=kind.replace_strict(STAT_KINDS, default=None, return_dtype=pl.String),
        int_value=pl.when(kind == 4).then(pl.col("int")),
        uint_value=pl.when(kind == 3).then(pl.col("int").cast(pl.UInt64, wrap_numerical=True)),
        double_value=pl.when(kind == 2).then(pl.col("double")),
        str_value=pl.when(kind == 5).then(pl.col("str_text")).otherwise(ref_names),
        bytes_value=pl.when(kind == 6).then(pl.col("text")),
    )


def _converted(target: str) -> pl.Expr:
    """A promoted stat's value as its column's type; null where it does not convert."""
    kind, ints, text = pl.col("kind"), pl.col("int"), pl.col("str_value")
    if target == "str":
        return pl.when(kind.is_in([5, 7])).then(text)
    if target == "bool":
        return pl.when(kind.is_in([3, 4])).then(ints != 0)
    if target == "uint64":
        return (
            pl.when(kind.is_in([3, 4])).then(ints.cast(pl.UInt64, wrap_numerical=True))
            .when(kind.is_in([5, 7]) & text.str.contains(r"^\d+$")).then(text.cast(pl.UInt64, strict=False))
        )
    double = pl.col("double")
    integral = double.is_finite() & (double.floor() == double) & (double.abs() < 2.0**63)
    return (
        pl.when(kind == 4).then(ints)
        .when((kind == 3) & (ints >= 0)).then(ints)
        .when((kind == 2) & integral).then(double.cast(pl.Int64, strict=False))
        .when(kind.is_in([5, 7]) & text.str.contains(r"^-?\d+$")).then(text.cast(pl.Int64, strict=False))
    )


def _promote(resolved: pl.DataFrame, owner: list[str]) -> dict[str, pl.DataFrame]:
    """The promoted values of the stats present (column -> owner and value; the last occurrence wins)."""
    candidates = resolved.filter(pl.col("stat").is_in(list(PROMOTED_STATS)))
    present = set(candidates["stat"].unique().to_list())
    promoted: dict[str, pl.DataFrame] = {}
    for stat, (column, target) in PROMOTED_STATS.items():
        if stat in present:  # each stat costs a few Polars calls: a file's metadata holds a handful of the twelve
            promoted[column] = (
                candidates.filter(pl.col("stat") == stat)
                .with_columns(_converted(target).alias(column))
                .filter(pl.col(column).is_not_null())
                .unique(subset=owner, keep="last", maintain_order=True)
                .select(*owner, column)
            )
    return promoted


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
    except (pl.exceptions.PolarsError, pa.ArrowInvalid) as exc:  # e.g. a string field that is not UTF-8
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
    stat_names = pl.DataFrame(
        [(i, sid, md.name) for i, plane in enumerate(planes) for sid, md in plane.stat_metadata.items()],
        schema={"plane": pl.Int32, "stat_id": pl.Int64, "stat": pl.String}, orient="row",
    )
    metadata = pl.DataFrame(
        [(i, mid, md.name, md.display_name, md.metadata, list(md.child_id))
         for i, plane in enumerate(planes) for mid, md in plane.event_metadata.items()],
        schema={"plane": pl.Int32, "metadata_id": pl.Int64, "name": pl.String, "display_name": pl.String,
                "metadata": pl.Binary, "child_ids": pl.List(pl.Int64)}, orient="row",
    )

    # Plane and metadata stats: all of them stored; the metadata ones are defaults for promoted columns.
    small = _resolve(_metadata_stats(planes), stat_names)
    plane_stats = small.filter(pl.col("metadata_id").is_null())
    md_stats = small.filter(pl.col("metadata_id").is_not_null())
    md_values = _promote(md_stats, ["plane", "metadata_id"])
    md_defaults = metadata.select("plane", "metadata_id", "name")
    for values in md_values.values():
        md_defaults = md_defaults.join(values, on=["plane", "metadata_id"], how="left", maintain_order="left")
    md_defaults = md_defaults.with_columns(
        *(pl.lit(None, _PROMOTED_DTYPES[target]).alias(column) for column, target in PROMOTED_STATS.values()
          if column not in md_values),
    ).with_columns(
        # TPU op metadata is named "%op.1 = shape opcode(...)": the op's name is there when no stat says it.
        pl.col("hlo_op").fill_null(pl.col("name").str.extract(r"^%([^\s=%]+) = ", 1)),
        # `XLA Modules` events are named like jit_f(1234) and carry no program_id stat.
        name_module=pl.col("name").str.extract(r"^(.*)\((\d+)\)$", 1),
        name_program=pl.col("name").str.extract(r"^(.*)\((\d+)\)$", 2).cast(pl.UInt64, strict=False),
        display_name=metadata["display_name"],
    )

    # Lines (few): their names and GPU streams.
    n_lines = len(raw.line_plane)
    plane_kind = np.array([kind for kind, _ in kinds] or ["other"])
    lines = pl.DataFrame({
        "device_id": pl.Series(raw.line_plane, dtype=pl.Int32),
        "line_name": pl.Series(raw.line_name, dtype=pl.Categorical),
        "is_gpu": pl.Series(plane_kind[raw.line_plane] == "gpu") if n_lines else pl.Series([], dtype=pl.Boolean),
    }).with_columns(
        stream_id=pl.when("is_gpu").then(
            pl.col("line_name").cast(pl.String).str.extract(r"^Stream #(\d+)", 1).cast(pl.Int64))
    ).with_row_index("track_id").with_columns(pl.col("track_id").cast(pl.Int32))

    # Events and their stats, a chunk at a time: the tables of one chunk are written before the next is read.
    lookups = _Lookups.of(planes, metadata, md_defaults, module_rows, lines)
    uses = np.zeros(metadata.height, dtype=np.int64)
    end_ps = 0
    unnamed = negative = 0  # damage kept, but said: events without metadata, events ending before they start
    gpu_events, gpu_details = [], []
    for chunk in raw.chunks():
        space = _Space.of(raw, chunk, lookups)
        events = _Events.of(raw, space, lookups, line_base_ps)
        uses += np.bincount(events.md_row[events.md_row >= 0], minlength=metadata.height)
        unnamed += int((events.md_row < 0).sum())
        negative += int((chunk.event_duration_ps < 0).sum())
        end_ps = max(end_ps, events.end_ps)
        gpu_events.append(events.gpu_rows(kinds, lines))
        gpu_details.append(_detail_stats(space))
        yield from events.batches(batch_rows)
        del events  # the largest arrays: gone before the stats are built
        yield from _column_batches("event_stats", *_rest_stats(space), batch_rows)
        del space, chunk
    yield from _gpu_tables(pl.concat(gpu_events), pl.concat(gpu_details), kinds, batch_rows)

    counter_rows, unreadable = _counter_rows(raw, start_ns)
    yield "counters", pa.RecordBatch.from_pylist(
        [dict(zip(TABLES["counters"].names, row)) for row in counter_rows], schema=TABLES["counters"])

    yield from _batches("event_metadata", metadata.rename({"plane": "device_id"}).with_columns(
        n_events=pl.Series(uses, dtype=pl.Int64)), batch_rows)
    yield from _batches("metadata_stats", md_stats.rename({"plane": "device_id"}), batch_rows)
    yield from _batches("device_stats", plane_stats.rename({"plane": "device_id"}), batch_rows)

    track_frame = lines.with_columns(
        line_id=pl.Series(raw.line_id), display_id=pl.Series(raw.line_display_id),
        display_name=pl.Series(raw.line_display_name, dtype=pl.String),
        timestamp_ns=pl.Series(raw.line_timestamp_ns), duration_ps=pl.Series(raw.line_duration_ps),
        n_events=pl.Series(raw.line_n_events), sort_index=pl.lit(None, dtype=pl.Int64),
    ).rename({"line_name": "name"})
    yield from _batches("tracks", track_frame, batch_rows)

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

_PROMOTED_DTYPES = {"str": pl.String, "bool": pl.Boolean, "uint64": pl.UInt64, "int64": pl.Int64}
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
    md_defaults: pl.DataFrame  # per metadata row: name, promoted columns' defaults, names parsed
    defaults: dict[str, Column]  # per promoted column: each metadata row's default, then a null row
    name: Column  # per metadata row (and a null row)
    display_name: Column
    lines: pl.DataFrame
    modules: pl.DataFrame  # program_id -> module, from the embedded HLO

    @classmethod
    def of(cls, planes: list[xplane_pb2.XPlane], metadata: pl.DataFrame, md_defaults: pl.DataFrame,
           module_rows: list[dict], lines: pl.DataFrame) -> _Lookups:
        name_code: dict[str, int] = {}
        stat_keys, stat_codes = [], []
        for plane in planes:
            ids = list(plane.stat_metadata)
            stat_keys.append(np.array(ids, dtype=np.int64))
            stat_codes.append(np.array([name_code.setdefault(plane.stat_metadata[i].name, len(name_code)) for i in ids],
                                       dtype=np.int64))
        md_plane, md_id = metadata["plane"].to_numpy(), metadata["metadata_id"].to_numpy()
        md_rows = [np.flatnonzero(md_plane == plane_index) for plane_index in range(len(planes))]
        defaults = {}
        for column, target in PROMOTED_STATS.values():
            default = md_defaults[column].cast(_PROMOTED_DTYPES[target])
            defaults[column] = _events.codes_of(default) if target == "str" else _numbers_of(default)
        modules = pl.DataFrame({"program_id": pl.Series([m["program_id"] for m in module_rows], dtype=pl.UInt64),
                                "module": pl.Series([m["module"] for m in module_rows], dtype=pl.String)},
                               ).unique("program_id", keep="first").drop_nulls().sort("program_id")
        return cls(stat_keys, stat_codes, pa.array(list(name_code), pa.string()), name_code,
                   [md_id[rows] for rows in md_rows], md_rows, md_defaults, defaults,
                   _events.codes_of(md_defaults["name"]), _events.codes_of(md_defaults["display_name"]), lines, modules)


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


def _numbers_of(series: pl.Series) -> Column:
    """A small numeric series with one extra null row at the end (what md_row -1 gathers)."""
    values = series.fill_null(False if series.dtype == pl.Boolean else 0).to_numpy()
    return Column(np.append(values, values[:0].dtype.type(0)), np.append(series.is_not_null().to_numpy(), False))


def _with_null_row(series: pl.Series, md_row: np.ndarray) -> pl.Series:
    """``series`` gathered at ``md_row``, null where md_row is -1."""
    return pl.concat([series, pl.Series([None], dtype=series.dtype)]).gather(np.where(md_row < 0, len(series), md_row))


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
        md_defaults, modules = lookups.md_defaults, lookups.modules
        on_module_line = np.append((lookups.lines["line_name"] == "XLA Modules").fill_null(False).to_numpy(), False)
        rows = np.flatnonzero(on_module_line[self.line_of_event])
        has_program = program.at(rows, self.md_row[rows]).valid
        assert has_program is not None  # a Promoted's valid is never None
        rows = rows[~has_program]  # events named like jit_f(1234), no program_id stat
        name_module = _with_null_row(md_defaults["name_module"].cast(pl.String), self.md_row[rows])
        has_module = module.at(rows, self.md_row[rows]).valid
        assert has_module is not None
        fill = ~has_module & name_module.is_not_null().to_numpy()
        module.set(rows[fill], name_module.filter(pl.Series(fill)))
        program.set(rows, _numbers_of(md_defaults["name_program"].cast(pl.UInt64)).take(self.md_row[rows]))
        if not modules.height:  # TPU op events carry program_id only: name the module from the embedded HLO.
            return
        need = np.flatnonzero(program.valid(self.md_row) & ~module.valid(self.md_row))
        ids = modules["program_id"].to_numpy()
        wanted = program.at(need, self.md_row[need]).values
        at = np.minimum(np.searchsorted(ids, wanted), len(ids) - 1)
        hit = ids[at] == wanted
        names = modules["module"].to_arrow().cast(pa.string())
        module.set(need[hit], Column(at[hit].astype(np.int32), np.ones(int(hit.sum()), dtype=bool), names))

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

    def gpu_rows(self, kinds: list[tuple[str, int | None]], lines: pl.DataFrame) -> pl.DataFrame:
        """The events the GPU tables read (on a stream, or a host event with a correlation id), with line and stream."""
        stream = lines["stream_id"]
        on_stream = np.append(stream.is_not_null().to_numpy(), False)[self.line_of_event]
        is_host = np.array([kind == "host" for kind, _ in kinds] + [False])
        host = np.flatnonzero(is_host[self.raw.line_plane[self.line_of_event]])
        correlated = host[self.promoted["correlation_id"].at(host, self.md_row[host]).valid]
        rows = np.union1d(np.flatnonzero(on_stream), correlated)
        md_row = self.md_row[rows]
        own = {column: self.promoted[column].at(rows, md_row) for column in ("correlation_id", "hlo_module", "hlo_op")}
        frame = cast(pl.DataFrame, pl.from_arrow(pa.table(self.arrays(rows, md_row, own, _GPU_EVENT_COLUMNS))))  # a table gives a frame
        track = self.line_of_event[rows]
        return frame.with_columns(line_name=lines["line_name"].gather(track), stream_id=stream.gather(track))


def _promote_event_stats(space: _Space, promoted: dict[str, _events.Promoted]) -> None:
    """Move each event's promoted stats into its columns (the last value that converts wins; defaults stay else)."""
    column_of_name = np.full(len(space.names) + 1, -1, dtype=np.int8)  # the extra entry: what code -1 reads
    for index, stat in enumerate(PROMOTED_STATS):
        if stat in space.name_code:
            column_of_name[space.name_code[stat]] = index
    candidates = np.flatnonzero(column_of_name[space.stat_name] >= 0)
    candidate_column = column_of_name[space.stat_name[candidates]]
    for index, (column, target) in enumerate(PROMOTED_STATS.values()):
        stats = candidates[candidate_column == index]
        converts, values = _convert_stats(space, stats, target)
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


def _convert_stats(space: _Space, stats: np.ndarray, target: str) -> tuple[np.ndarray, np.ndarray | pa.Array]:
    """Whether each of ``stats`` converts to a promoted column's type, and the values (meaningful where it does).

    Numbers convert in numpy; text (str values, refs) goes through :func:`_converted`, which defines the rules.
    """
    chunk = space.chunk
    kind, ints = chunk.stat_kind[stats], chunk.stat_int[stats]
    is_text = (kind == 5) | (kind == 7)
    if target == "str":
        strings = space.strings.take(pa.array(stats))
        return is_text & strings.is_valid().to_numpy(zero_copy_only=False), strings
    if target == "bool":
        return (kind == 3) | (kind == 4), ints != 0
    if target == "uint64":
        converts, values = (kind == 3) | (kind == 4), ints.view(np.uint64).copy()
    else:
        doubles = chunk.stat_double[stats]
        integral = (kind == 2) & np.isfinite(doubles) & (np.floor(doubles) == doubles) & (np.abs(doubles) < 2.0**63)
        converts = (kind == 4) | ((kind == 3) & (ints >= 0)) | integral
        values = np.where(integral, doubles.astype(np.int64, copy=False) if integral.any() else 0, ints)
    text = np.flatnonzero(is_text)
    if len(text):  # rare: promoted stats given as text
        frame = pl.DataFrame({"kind": pl.Series(kind[text], dtype=pl.Int8), "int": ints[text],
                              "double": chunk.stat_double[stats[text]],
                              "str_value": pl.Series(space.strings.take(pa.array(stats[text])), dtype=pl.String)})
        parsed = frame.select(_converted(target)).to_series()
        ok = parsed.is_not_null().to_numpy()
        converts[text] = ok
        values[text[ok]] = parsed.drop_nulls().to_numpy()
    return converts, values


def _detail_stats(space: _Space) -> pl.DataFrame:
    """Event stats the GPU tables read (kernel and copy details, framework ops) as event_id, stat, str_value."""
    codes = [space.name_code[name] for name in _GPU_DETAIL_STATS if name in space.name_code]
    rows = np.flatnonzero(np.isin(space.stat_name, codes))
    return pl.DataFrame({
        "event_id": space.stat_event[rows] + space.chunk.first_event,
        "stat": pl.Series(space.names.take(pa.array(space.stat_name[rows])), dtype=pl.String),
        "str_value": pl.Series(space.strings.take(pa.array(rows)), dtype=pl.String),
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


def _gpu_tables(events: pl.DataFrame, event_stats: pl.DataFrame, kinds: list[tuple[str, int | None]],
                batch_rows: int) -> Iterator[tuple[str, pa.RecordBatch]]:
    on_stream = events.filter(pl.col("stream_id").is_not_null())
    host_devices = [i for i, (kind, _) in enumerate(kinds) if kind == "host"]
    calls = events.filter(pl.col("device_id").is_in(host_devices) & pl.col("correlation_id").is_not_null()).with_columns(
        thread=pl.col("line_name"), api=pl.lit("launch"))
    yield from _batches("api_calls", calls, batch_rows)
    if on_stream.height == 0:
        for table in ("memcpys", "kernels"):
            yield table, pa.RecordBatch.from_pylist([], schema=TABLES[table])
        return
    details = (
        event_stats.filter(pl.col("stat").is_in(_GPU_DETAIL_STATS) & pl.col("str_value").is_not_null())
        .unique(subset=["event_id", "stat"], keep="last", maintain_order=True)
        .pivot(on="stat", index="event_id", values="str_value")
        if on_stream.height else pl.DataFrame({"event_id": pl.Series([], dtype=pl.Int64)})
    )
    for name in _GPU_DETAIL_STATS:
        if name not in details.columns:
            details = details.with_columns(pl.lit(None, dtype=pl.String).alias(name))
    on_stream = on_stream.join(details, on="event_id", how="left", maintain_order="left")
    # The first prefix that matches, the event's name before its line's. A line names its kind only when it holds
    # one: "Stream #14(Memset,Compute)" (XLA's command buffers on an H200) runs kernels beside its memsets.
    line_kinds = pl.col("line_name").cast(pl.String).str.extract(r"\(([^),]*)\)", 1)
    sources = (pl.col("name").cast(pl.String), line_kinds)
    on_stream = on_stream.with_columns(copy_kind=pl.coalesce(
        pl.when(source.str.starts_with(prefix)).then(pl.lit(kind)) for source in sources for prefix, kind in _COPY_KINDS.items()
    ))
    is_copy = (pl.col("copy_kind").is_not_null() | pl.col("memcpy_details").is_not_null()) & pl.col("kernel_details").is_null()

    copies = on_stream.filter(is_copy).with_columns(
        kind=pl.col("copy_kind"),
        bytes=pl.col("memcpy_details").str.extract(r"(?:^|\s)size:(\d+)", 1).cast(pl.Int64, strict=False),
        src_kind=pl.lit(None, dtype=pl.String), dst_kind=pl.lit(None, dtype=pl.String),
    )
    yield from _batches("memcpys", copies, batch_rows)

    launch = pl.col("kernel_details")
    shared = [launch.str.extract(_LAUNCH_FIELDS[k], 1).cast(pl.Int64, strict=False) for k in ("shm", "static_shm", "dynamic_shm")]
    grid = launch.str.extract_groups(r"(?:^|\s)grid:(\d+),(\d+),(\d+)(?:\s|$)")
    block = launch.str.extract_groups(r"(?:^|\s)block:(\d+),(\d+),(\d+)(?:\s|$)")
    kernels = on_stream.filter(~is_copy).with_columns(
        *(grid.struct.field(str(i + 1)).cast(pl.Int64).alias(f"grid_{axis}") for i, axis in enumerate("xyz")),
        *(block.struct.field(str(i + 1)).cast(pl.Int64).alias(f"block_{axis}") for i, axis in enumerate("xyz")),
        registers_per_thread=launch.str.extract(_LAUNCH_FIELDS["registers_per_thread"], 1).cast(pl.Int64, strict=False),
        shared_memory_bytes=pl.when(pl.any_horizontal(s.is_not_null() for s in shared))
        .then(pl.sum_horizontal(shared)),
        occupancy_pct=launch.str.extract(_LAUNCH_FIELDS["occupancy_pct"], 1).cast(pl.Float64, strict=False),
        framework_op=pl.coalesce("tf_op", "annotation"),
    )
    yield from _batches("kernels", kernels, batch_rows)


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
