"""XSpace wire decoding: the bytes of a ``*.xplane.pb`` as flat columns.

This is the first of the XSpace decoder's two stages. It turns the file into
flat arrays (one row per line, event and event stat) plus the planes' metadata;
:mod:`xprosql.ingest.xspace` turns those into warehouse tables. Two
implementations give identical :class:`RawSpace` values:

- :func:`read_raw_python`: walks protobuf objects (upb). Always available.
- :func:`read_raw_fast`: a numba-compiled walk over the wire format, about an
  order of magnitude faster; used when numba is installed (``xprosql[fast]``).

Example:
    >>> raw = read_raw(open("tpu.xplane.pb", "rb").read(), source="tpu.xplane.pb")   # doctest: +SKIP
    >>> raw.n_events, raw.n_stats                                                    # doctest: +SKIP
    (26723, 37200)
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
from google.protobuf.message import DecodeError

from xprosql.errors import IngestError
from xprosql.protos import xplane_pb2

__all__ = ["RawSpace", "read_raw", "read_raw_python", "read_raw_fast", "fast_available", "STAT_KINDS"]

# XStat value field numbers; 0 = no value set.
STAT_KINDS = {2: "double", 3: "uint64", 4: "int64", 5: "str", 6: "bytes", 7: "ref"}
_ONEOF_FIELD = {"double_value": 2, "uint64_value": 3, "int64_value": 4, "str_value": 5, "bytes_value": 6, "ref_value": 7}


@dataclass
class RawSpace:
    """An XSpace as flat columns. Events are in file order (plane, line, event); stats in event order."""

    hostnames: list[str]
    errors: list[str]
    warnings: list[str]
    planes: list[xplane_pb2.XPlane]  # everything but the lines
    line_plane: np.ndarray  # int32, per line: index into planes
    line_id: np.ndarray  # int64
    line_display_id: np.ndarray  # int64
    line_name: list[str]
    line_display_name: list[str]
    line_timestamp_ns: np.ndarray  # int64
    line_duration_ps: np.ndarray  # int64
    line_n_events: np.ndarray  # int64
    event_metadata_id: np.ndarray  # int64, per event
    event_offset_ps: np.ndarray  # int64 (0 when unset)
    event_num_occurrences: np.ndarray  # int64; >0 marks an aggregated event without a start
    event_is_aggregate: np.ndarray  # bool: the oneof holds num_occurrences
    event_duration_ps: np.ndarray  # int64
    event_n_stats: np.ndarray  # int64
    stat_metadata_id: np.ndarray  # int64, per event stat
    stat_kind: np.ndarray  # int8: XStat value field number (STAT_KINDS), 0 when unset
    stat_int: np.ndarray  # int64: int64/uint64 (bit pattern)/ref values
    stat_double: np.ndarray  # float64
    stat_text: pa.Array  # binary: str and bytes values, null elsewhere

    @property
    def n_events(self) -> int:
        return len(self.event_metadata_id)

    @property
    def n_stats(self) -> int:
        return len(self.stat_metadata_id)


def fast_available() -> bool:
    """True when the numba decoder can run (and XPROSQL_PURE_PYTHON is not set)."""
    return not os.environ.get("XPROSQL_PURE_PYTHON") and importlib.util.find_spec("numba") is not None


def read_raw(data: bytes, *, source: str) -> RawSpace:
    """Decode with the fastest available implementation."""
    return read_raw_fast(data, source=source) if fast_available() else read_raw_python(data, source=source)


# Peak memory of an ingest per event and per event stat, beyond the file's bytes (measured: about 100 and 70
# on TPU profiles; the margin covers profiles with longer strings).
_BYTES_PER_EVENT, _BYTES_PER_STAT = 150, 100


def available_memory() -> int | None:
    """Bytes this process can still get: MemAvailable, within a cgroup v2 limit; None where unknown (not Linux)."""
    try:
        with open("/proc/meminfo") as meminfo:
            available = next(int(line.split()[1]) * 1024 for line in meminfo if line.startswith("MemAvailable:"))
    except (OSError, StopIteration, ValueError):
        return None
    try:
        with open("/sys/fs/cgroup/memory.max") as limit, open("/sys/fs/cgroup/memory.current") as used:
            available = min(available, int(limit.read()) - int(used.read()))
    except (OSError, ValueError):  # no cgroup v2, or "max": no limit
        pass
    return available


def _check_memory(counts: np.ndarray, source: str) -> None:
    """Fail with a clear message, before allocating, when decoding would run out of memory (and be killed)."""
    events, stats = int(counts[3]), int(counts[4])
    need = events * _BYTES_PER_EVENT + stats * _BYTES_PER_STAT
    available = available_memory()
    if available is not None and need > available:
        raise IngestError(source, f"too large for the memory available: its {events:,} events and {stats:,} stats "
                                  f"need about {need / 2**30:.1f} GiB, {max(available, 0) / 2**30:.1f} GiB is free")


def _check_head(data: bytes, source: str) -> None:
    if not data:
        raise IngestError(source, "empty file (0 bytes)")
    head = data[:64].lstrip()
    if head[:1] in (b"{", b"["):
        raise IngestError(source, "this is JSON text, not an XSpace protobuf (Kineto traces are JSON)")
    if data[:2] == b"\x1f\x8b":
        raise IngestError(source, "gzip-compressed data, not a raw XSpace protobuf; decompress it first")


def _check_planes(planes: list[xplane_pb2.XPlane], source: str) -> None:
    if not planes:
        raise IngestError(source, "no XSpace planes found: not an XSpace file, or truncated before the first plane")
    if not any(plane.name for plane in planes):
        raise IngestError(source, "no named XSpace planes: not an XSpace file")


def read_raw_python(data: bytes, *, source: str) -> RawSpace:
    """The reference decoder: parse with protobuf, then walk the objects."""
    _check_head(data, source)
    space = xplane_pb2.XSpace()
    try:
        space.ParseFromString(data)
    except DecodeError as exc:
        raise IngestError(source, f"not a valid XSpace protobuf (truncated or corrupt): {exc}") from None
    _check_planes(list(space.planes), source)
    line_plane, line_scalars, line_names, line_display = [], [], [], []
    events: list[tuple[int, int, int, bool, int, int]] = []
    stat_rows: list[tuple[int, int, int, float]] = []
    texts: list[bytes | None] = []
    planes = []
    for plane_index, plane in enumerate(space.planes):
        for line in plane.lines:
            line_plane.append(plane_index)
            line_scalars.append((line.id, line.display_id, line.timestamp_ns, line.duration_ps, len(line.events)))
            line_names.append(line.name)
            line_display.append(line.display_name)
            for event in line.events:
                aggregate = event.WhichOneof("data") == "num_occurrences"
                events.append((event.metadata_id, event.offset_ps, event.num_occurrences, aggregate,
                               event.duration_ps, len(event.stats)))
                for stat in event.stats:
                    which = stat.WhichOneof("value")
                    kind = _ONEOF_FIELD.get(which, 0)
                    value = getattr(stat, which) if which else None
                    if kind in (3, 4, 7):
                        stat_rows.append((stat.metadata_id, kind, int(np.uint64(value).view(np.int64)) if kind == 3 else value, 0.0))
                    elif kind == 2:
                        stat_rows.append((stat.metadata_id, kind, 0, value))
                    else:
                        stat_rows.append((stat.metadata_id, kind, 0, 0.0))
                    texts.append(value.encode() if kind == 5 else value if kind == 6 else None)
        bare = xplane_pb2.XPlane()
        bare.CopyFrom(plane)
        del bare.lines[:]
        planes.append(bare)
    line_array = np.array(line_scalars, dtype=np.int64).reshape(-1, 5)
    event_array = np.array(events, dtype=np.int64).reshape(-1, 6)
    stat_array = np.array([r[:3] for r in stat_rows], dtype=np.int64).reshape(-1, 3)
    return RawSpace(
        hostnames=list(space.hostnames), errors=list(space.errors), warnings=list(space.warnings), planes=planes,
        line_plane=np.array(line_plane, dtype=np.int32), line_id=line_array[:, 0], line_display_id=line_array[:, 1],
        line_name=line_names, line_display_name=line_display, line_timestamp_ns=line_array[:, 2],
        line_duration_ps=line_array[:, 3], line_n_events=line_array[:, 4],
        event_metadata_id=event_array[:, 0], event_offset_ps=event_array[:, 1],
        event_num_occurrences=event_array[:, 2], event_is_aggregate=event_array[:, 3].astype(bool),
        event_duration_ps=event_array[:, 4], event_n_stats=event_array[:, 5],
        stat_metadata_id=stat_array[:, 0], stat_kind=stat_array[:, 1].astype(np.int8), stat_int=stat_array[:, 2],
        stat_double=np.array([r[3] for r in stat_rows], dtype=np.float64),
        stat_text=pa.array(texts, pa.binary()),
    )


def read_raw_fast(data: bytes, *, source: str) -> RawSpace:
    """The numba decoder: one compiled walk over the wire format (two passes: count, then fill)."""
    from xprosql.ingest import _xspace_numba

    _check_head(data, source)
    buf = np.frombuffer(data, dtype=np.uint8)
    try:
        counts = _xspace_numba.count(buf)
        _check_memory(counts, source)
        out = _xspace_numba.decode(buf, counts)
    except ValueError as exc:
        raise IngestError(source, f"not a valid XSpace protobuf (truncated or corrupt): {exc}") from None
    (plane_ranges, plane_skips, line_plane, line_ints, line_text, event_ints, event_aggregate,
     stat_mid, stat_kind, stat_int, stat_double, space_text) = out

    def text(start: int, end: int) -> str:
        try:
            return data[start:end].decode()
        except UnicodeDecodeError:
            raise IngestError(source, "not a valid XSpace protobuf (truncated or corrupt): invalid UTF-8 in a string") from None

    planes = []
    for index, (start, end) in enumerate(plane_ranges):
        # The plane without its lines: the bytes between the line fields, parsed by protobuf.
        skips = plane_skips[plane_skips[:, 0] == index][:, 1:]
        pieces, cursor = [], start
        for skip_start, skip_end in skips:
            pieces.append(data[cursor:skip_start])
            cursor = skip_end
        pieces.append(data[cursor:end])
        plane = xplane_pb2.XPlane()
        try:
            plane.ParseFromString(b"".join(pieces))
        except DecodeError as exc:
            raise IngestError(source, f"not a valid XSpace protobuf (truncated or corrupt): {exc}") from None
        planes.append(plane)
    _check_planes(planes, source)
    space_strings: dict[int, list[str]] = {2: [], 3: [], 4: []}
    for field, start, end in space_text:
        space_strings[int(field)].append(text(start, end))

    # Arrow binary offsets are int32: more than 2 GiB of stat text needs large_binary (and fails the cast below).
    wide = _xspace_numba.text_size(stat_kind, stat_int, stat_double) >= 2**31
    offsets = np.empty(len(stat_kind) + 1, dtype=np.int64 if wide else np.int32)
    gathered = _xspace_numba.text(buf, stat_kind, stat_int, stat_double, offsets)
    is_text = (stat_kind == 5) | (stat_kind == 6)
    validity = pa.py_buffer(np.packbits(is_text, bitorder="little")) if len(is_text) else None
    stat_text = pa.Array.from_buffers(pa.large_binary() if wide else pa.binary(), len(is_text),
                                      [validity, pa.py_buffer(offsets), pa.py_buffer(gathered)])
    if wide:
        stat_text = stat_text.cast(pa.binary())
    return RawSpace(
        hostnames=space_strings[4], errors=space_strings[2], warnings=space_strings[3], planes=planes,
        line_plane=line_plane, line_id=line_ints[:, 0], line_display_id=line_ints[:, 1],
        line_name=[text(s, e) for s, e in line_text[:, 0:2]],
        line_display_name=[text(s, e) for s, e in line_text[:, 2:4]],
        line_timestamp_ns=line_ints[:, 2], line_duration_ps=line_ints[:, 3], line_n_events=line_ints[:, 4],
        # event_ints holds one row per field: each column is contiguous.
        event_metadata_id=event_ints[0], event_offset_ps=event_ints[1], event_num_occurrences=event_ints[2],
        event_is_aggregate=event_aggregate, event_duration_ps=event_ints[3], event_n_stats=event_ints[4],
        stat_metadata_id=stat_mid, stat_kind=stat_kind, stat_int=stat_int, stat_double=stat_double,
        stat_text=stat_text,
    )
