"""XSpace (``*.xplane.pb``) decoder: one file in, Arrow record batches per table out.

Two stages. :mod:`xprosql.ingest.xspace_wire` turns the bytes into flat columns
(compiled with numba when installed, else through protobuf objects; both give
the same columns). This module turns those columns into the warehouse tables
with vectorized Polars expressions: stat names and interned strings resolved,
promoted stats as columns, HLO ops, GPU kernels, copies and launches. It knows
nothing of the warehouse: :func:`decode_xspace` yields ``(table, batch)``.

Example:
    >>> data = open("tpu.xplane.pb", "rb").read()            # doctest: +SKIP
    >>> for table, batch in decode_xspace(data, source="tpu.xplane.pb"):  # doctest: +SKIP
    ...     print(table, batch.num_rows)
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa

from xprosql.errors import IngestError
from xprosql.ingest import counters, hlo
from xprosql.ingest.xspace_wire import STAT_KINDS, RawSpace, read_raw
from xprosql.models import hardware
from xprosql.models.tables import TABLES
from xprosql.protos import xplane_pb2

__all__ = ["decode_xspace", "PROMOTED_STATS"]

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
_PROMOTED_COLUMNS = [column for column, _ in PROMOTED_STATS.values()]
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
        value = getattr(stat, which) if which else None
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


def _promote(resolved: pl.DataFrame, owner: list[str]) -> tuple[dict[str, pl.DataFrame], pl.DataFrame]:
    """Split stats into promoted values (column -> owner and value; the last occurrence wins) and the rest."""
    resolved = resolved.with_row_index("_row")
    candidates = resolved.filter(pl.col("stat").is_in(list(PROMOTED_STATS)))
    promoted: dict[str, pl.DataFrame] = {}
    is_promoted = np.zeros(resolved.height, dtype=bool)
    for stat, (column, target) in PROMOTED_STATS.items():
        values = (
            candidates.filter(pl.col("stat") == stat)
            .with_columns(_converted(target).alias(column))
            .filter(pl.col(column).is_not_null())
            .unique(subset=owner, keep="last", maintain_order=True)
        )
        is_promoted[values["_row"].to_numpy()] = True
        promoted[column] = values.select(*owner, column)
    return promoted, resolved.filter(pl.Series(~is_promoted)).drop("_row")


# --- the decoder -------------------------------------------------------------------------------------


def _start_ns(raw: RawSpace) -> tuple[int, bool, np.ndarray]:
    """Earliest event start (ns, as recorded), whether any event has a start, and each line's base in ps."""
    timed = ~raw.event_is_aggregate
    ends = np.cumsum(raw.line_n_events)
    starts = ends - raw.line_n_events
    earliest: int | None = None
    for line, (first, last) in enumerate(zip(starts, ends)):
        offsets = raw.event_offset_ps[first:last][timed[first:last]]
        if len(offsets):
            start = int(raw.line_timestamp_ns[line]) * 1000 + int(offsets.min())
            earliest = start if earliest is None else min(earliest, start)
    if earliest is None:
        return 0, False, np.zeros(len(ends), dtype=np.int64)
    start_ns = earliest // 1000
    bases = []
    for line, (first, last) in enumerate(zip(starts, ends)):
        base = (int(raw.line_timestamp_ns[line]) - start_ns) * 1000
        lo = base + int(raw.event_offset_ps[first:last].min(initial=0))
        hi = base + int(raw.event_offset_ps[first:last].max(initial=0)) + int(raw.event_duration_ps[first:last].max(initial=0))
        if not (_INT64[0] <= lo and hi <= _INT64[1]):
            raise ValueError(f"line {raw.line_name[line]!r}: event times do not fit int64 picoseconds")
        bases.append(base)
    return start_ns, True, np.array(bases, dtype=np.int64)


def _hlo_tables(planes: list[xplane_pb2.XPlane], source: str) -> tuple[list[dict], list[dict]]:
    modules: list[dict] = []
    ops: list[dict] = []
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
            except ValueError as exc:
                raise IngestError(source, f"HLO proto of {md.name!r} does not parse: {exc}") from None
            modules.append(module)
            ops.extend(module_ops)
    return modules, ops


def decode_xspace(data: bytes, *, source: str, batch_rows: int = 500_000) -> Iterator[tuple[str, pa.RecordBatch]]:
    """Decode one XSpace file into warehouse record batches.

    Yields ``(table, batch)``; the single ``profiles`` row comes last, with the
    columns only the caller knows (path, hash, time of ingest) left null.
    Raises :class:`IngestError` naming ``source`` when the bytes are not an XSpace.
    """
    raw = read_raw(data, source=source)
    try:
        yield from _decode(raw, data, source=source, batch_rows=batch_rows)
    except (pl.exceptions.PolarsError, pa.ArrowInvalid) as exc:  # e.g. a string field that is not UTF-8
        raise ValueError(f"corrupt XSpace content: {exc}") from None


def _decode(raw: RawSpace, data: bytes, *, source: str, batch_rows: int) -> Iterator[tuple[str, pa.RecordBatch]]:
    planes = raw.planes
    start_ns, has_timed_events, line_base_ps = _start_ns(raw)
    module_rows, op_rows = _hlo_tables(planes, source)
    if module_rows:
        yield "hlo_modules", pa.RecordBatch.from_pylist(module_rows, schema=TABLES["hlo_modules"])
    for i in range(0, len(op_rows), batch_rows):
        yield "hlo_ops", pa.RecordBatch.from_pylist(op_rows[i : i + batch_rows], schema=TABLES["hlo_ops"])

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
    md_values, _ = _promote(md_stats, ["plane", "metadata_id"])
    md_defaults = metadata.select("plane", "metadata_id", "name")
    for values in md_values.values():
        md_defaults = md_defaults.join(values, on=["plane", "metadata_id"], how="left", maintain_order="left")
    md_defaults = md_defaults.with_columns(
        # TPU op metadata is named "%op.1 = shape opcode(...)": the op's name is there when no stat says it.
        pl.col("hlo_op").fill_null(pl.col("name").str.extract(r"^%([^\s=%]+) = ", 1)),
        # `XLA Modules` events are named like jit_f(1234) and carry no program_id stat.
        name_module=pl.col("name").str.extract(r"^(.*)\((\d+)\)$", 1),
        name_program=pl.col("name").str.extract(r"^(.*)\((\d+)\)$", 2).cast(pl.UInt64, strict=False),
        display_name=metadata["display_name"],
    ).with_columns(  # categorical: events repeat these strings; gathers and sorts then move codes only
        pl.col("name", "display_name", "hlo_op", "category", "hlo_module", "name_module").cast(pl.Categorical))

    # Events, with their line and plane.
    n_lines = len(raw.line_plane)
    line_of_event = np.repeat(np.arange(n_lines, dtype=np.int32), raw.line_n_events)
    plane_kind = np.array([kind for kind, _ in kinds] or ["other"])
    lines = pl.DataFrame({
        "device_id": pl.Series(raw.line_plane, dtype=pl.Int32),
        "line_name": pl.Series(raw.line_name, dtype=pl.Categorical),
        "is_gpu": pl.Series(plane_kind[raw.line_plane] == "gpu") if n_lines else pl.Series([], dtype=pl.Boolean),
    }).with_columns(
        stream_id=pl.when("is_gpu").then(
            pl.col("line_name").cast(pl.String).str.extract(r"^Stream #(\d+)", 1).cast(pl.Int64))
    ).with_row_index("track_id").with_columns(pl.col("track_id").cast(pl.Int32))
    events = pl.DataFrame({
        "event_id": pl.Series(np.arange(raw.n_events, dtype=np.int64)),
        "track_id": pl.Series(line_of_event),
        "device_id": pl.Series(raw.line_plane[line_of_event], dtype=pl.Int32),
        "metadata_id": pl.Series(raw.event_metadata_id),
        "start_ps": pl.Series(line_base_ps[line_of_event] + raw.event_offset_ps),
        "is_aggregate": pl.Series(raw.event_is_aggregate),
        "dur_ps": pl.Series(raw.event_duration_ps),
        "num_occurrences": pl.Series(raw.event_num_occurrences),
    }).with_columns(
        start_ps=pl.when(~pl.col("is_aggregate")).then(pl.col("start_ps")),
        num_occurrences=pl.when(pl.col("is_aggregate")).then(pl.col("num_occurrences")),
    )
    end_ps = events.select((pl.col("start_ps") + pl.col("dur_ps")).max()).item() if has_timed_events else 0

    event_stats = _resolve(
        _stat_frame(
            {"event_id": pl.Series(np.repeat(np.arange(raw.n_events, dtype=np.int64), raw.event_n_stats))},
            pl.Series(raw.line_plane[np.repeat(line_of_event, raw.event_n_stats)], dtype=pl.Int32),
            raw.stat_metadata_id, raw.stat_kind, raw.stat_int, raw.stat_double, raw.stat_text,
        ),
        stat_names,
    )
    ev_values, rest = _promote(event_stats, ["event_id"])

    # Each event's metadata row and line: gathers, not joins (events are many, metadata and lines few).
    md_row = events.select("device_id", "metadata_id").rename({"device_id": "plane"}).join(
        md_defaults.select("plane", "metadata_id").with_row_index("md_row"),
        on=["plane", "metadata_id"], how="left", maintain_order="left",
    )["md_row"]
    columns = {}
    for column in _PROMOTED_COLUMNS:
        default = md_defaults[column].gather(md_row)
        values = ev_values[column][column]
        if values.height if isinstance(values, pl.DataFrame) else len(values):
            columns[column] = default.scatter(ev_values[column]["event_id"], values.cast(default.dtype))
        else:
            columns[column] = default
    track = events["track_id"]
    on_module_line = (lines["line_name"] == "XLA Modules").gather(track)
    events = events.with_columns(
        name=md_defaults["name"].gather(md_row),
        display_name=md_defaults["display_name"].gather(md_row),
        line_name=lines["line_name"].gather(track),
        stream_id=lines["stream_id"].gather(track),
        **columns,
    )
    module_line = pl.lit(on_module_line) & pl.col("program_id").is_null()
    events = events.with_columns(
        hlo_module=pl.when(module_line).then(pl.coalesce("hlo_module", md_defaults["name_module"].gather(md_row)))
        .otherwise("hlo_module"),
        program_id=pl.when(module_line).then(md_defaults["name_program"].gather(md_row)).otherwise("program_id"),
    )
    if module_rows:  # TPU op events carry program_id only: name the module from the embedded HLO
        modules = pl.DataFrame({"program_id": pl.Series([m["program_id"] for m in module_rows], dtype=pl.UInt64),
                                "_module": pl.Series([m["module"] for m in module_rows], dtype=pl.Categorical)},
                               ).unique("program_id", keep="first")
        events = events.join(modules, on="program_id", how="left", maintain_order="left").with_columns(
            hlo_module=pl.coalesce("hlo_module", "_module")).drop("_module")

    yield from _gpu_tables(events, event_stats, kinds, batch_rows)
    yield from _batches("events", events.sort("start_ps", "event_id", nulls_last=True), batch_rows)
    yield from _batches("event_stats", rest, batch_rows)

    counter_rows, unreadable = _counter_rows(raw, data, start_ns)
    yield "counters", pa.RecordBatch.from_pylist(
        [dict(zip(TABLES["counters"].names, row)) for row in counter_rows], schema=TABLES["counters"])

    uses = np.bincount(md_row.drop_nulls().to_numpy(), minlength=metadata.height)
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
    profile = {name: None for name in TABLES["profiles"].names}
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
        warnings=raw.warnings,
        profile_start_time_ns=_int_or_none(task.get("profile_start_time")),
        profile_stop_time_ns=_int_or_none(task.get("profile_stop_time")),
    )
    yield "profiles", pa.RecordBatch.from_pylist([profile], schema=TABLES["profiles"])


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
    copy_kind = pl.lit(None, dtype=pl.String)
    for source in (pl.col("name").cast(pl.String), pl.col("line_name").cast(pl.String).str.extract(r"\(([^)]*)\)", 1)):
        for prefix, kind in _COPY_KINDS.items():
            copy_kind = pl.when(copy_kind.is_null() & source.str.starts_with(prefix)).then(pl.lit(kind)).otherwise(copy_kind)
    on_stream = on_stream.with_columns(copy_kind=copy_kind)
    is_copy = pl.col("copy_kind").is_not_null() | pl.col("memcpy_details").is_not_null()

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


def _counter_rows(raw: RawSpace, data: bytes, start_ns: int) -> tuple[list[tuple], int]:
    """Counter values of the planes that have any (rare); planes with counter events are walked as protobuf."""
    counter_lines = {int(raw.line_plane[i]) for i, name in enumerate(raw.line_name) if name == counters.COUNTER_LINE}
    has_events = {i for i, plane in enumerate(raw.planes)
                  if i in counter_lines or any(md.name == "counter_value" for md in plane.stat_metadata.values())}
    wanted = [i for i, plane in enumerate(raw.planes) if i in has_events or counters.has_counters(plane)]
    if not wanted:
        return [], 0
    planes = list(raw.planes)
    if has_events:
        space = xplane_pb2.XSpace()
        space.ParseFromString(data)
        planes = list(space.planes)
    first_event = np.concatenate([[0], np.cumsum(raw.line_n_events)])
    first_line_of_plane = np.searchsorted(raw.line_plane, np.arange(len(raw.planes)))
    rows: list[tuple] = []
    unreadable = 0
    for i in wanted:
        track = int(first_line_of_plane[i])
        plane_rows, plane_unreadable = counters.xspace_counter_rows(
            planes[i], device_id=i, first_event_id=int(first_event[track]), first_track_id=track, start_ns=start_ns
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
