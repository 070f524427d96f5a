"""XSpace wire decoding: the bytes of a ``*.xplane.pb`` as flat columns.

This is the first of the XSpace decoder's two stages. It turns the file into
the planes' metadata and one row per line (:class:`RawSpace`), then the events
and their stats as flat arrays, a chunk of events at a time
(:meth:`RawSpace.chunks`), so memory holds one chunk's events however large the
file; :mod:`xprosql.ingest.xspace` turns those into warehouse tables. Two
implementations give identical values, chunks included:

- :func:`read_raw_python`: walks protobuf objects (upb). Always available; holds
  the whole file's objects at once.
- :func:`read_raw_fast`: a numba-compiled walk over the wire format, about an
  order of magnitude faster; used when numba is installed, for files large enough
  to repay loading it (:mod:`xprosql.ingest._compiled`).

Example:
    >>> raw = read_raw(open("tpu.xplane.pb", "rb").read(), source="tpu.xplane.pb")   # doctest: +SKIP
    >>> raw.n_events, raw.n_stats, [chunk.n_events for chunk in raw.chunks()]        # doctest: +SKIP
    (26723, 37200, [26723])
"""

from __future__ import annotations

import mmap
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
import pyarrow as pa
from google.protobuf.message import DecodeError

from xprosql.errors import IngestError
from xprosql.ingest import _compiled
from xprosql.protos import xplane_pb2

__all__ = [
    "CHUNK_BYTES",
    "STAT_KINDS",
    "STAT_KIND_OF_FIELD",
    "RawEvents",
    "RawSpace",
    "fast_available",
    "read_raw",
    "read_raw_fast",
    "read_raw_python",
]

# XStat value field numbers; 0 = no value set.
STAT_KINDS = {2: "double", 3: "uint64", 4: "int64", 5: "str", 6: "bytes", 7: "ref"}
# XStat's value fields (`WhichOneof("value")`) -> their numbers.
STAT_KIND_OF_FIELD = {f"{name}_value": kind for kind, name in STAT_KINDS.items()}

# Peak memory of decoding per event and per event stat (measured: about 100 and 70 on TPU profiles; the margin
# covers profiles with longer strings). A chunk holds events and stats costing about CHUNK_BYTES: about 140,000
# events of a TPU profile, fewer where events carry more stats. Smaller chunks than the 256 MB of before decode faster too (the 32 MB TPU file: 1.37 -> 1.00 s in one
# process, the 162 MB one 4.2 -> 3.3 s; each chunk's arrays reuse the memory the last one freed) and hold less
# (peaks 638 -> 442 MB and 791 -> 554 MB decoding alone); 16 or 8 MB chunks hold a little less again but take longer.
_BYTES_PER_EVENT, _BYTES_PER_STAT = 150, 100
CHUNK_BYTES = 32 * 2**20


@dataclass
class RawEvents:
    """A chunk of events in file order (plane, line, event), with their stats in event order."""

    first_event: int  # the file-wide index of the first event
    first_stat: int
    event_line: np.ndarray  # int32 per event: its line's index in the file
    event_metadata_id: np.ndarray  # int64
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


@dataclass
class RawSpace:
    """An XSpace's planes (without lines) and lines; its events come chunk by chunk from :meth:`chunks`."""

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
    # int64 (lines, 5): timed events, their least offset_ps, then over all events and 0: least offset, greatest
    # offset, longest duration. What the profile's start and the int64 check need, before any chunk is read.
    line_extent: np.ndarray
    n_events: int
    n_stats: int
    chunk_starts: np.ndarray  # int64 (chunks, 2): each chunk's first event and first stat
    read_chunk: Callable[[int], RawEvents] = field(repr=False, compare=False)
    plane_with_lines: Callable[[int], xplane_pb2.XPlane] = field(repr=False, compare=False)

    def chunks(self) -> Iterator[RawEvents]:
        """The events, chunk by chunk, in file order; one empty chunk when there are none."""
        if not len(self.chunk_starts):
            yield _no_events()
        for index in range(len(self.chunk_starts)):
            yield self.read_chunk(index)


def _no_events() -> RawEvents:
    return RawEvents(
        first_event=0, first_stat=0, event_line=np.zeros(0, np.int32), event_metadata_id=np.zeros(0, np.int64),
        event_offset_ps=np.zeros(0, np.int64), event_num_occurrences=np.zeros(0, np.int64),
        event_is_aggregate=np.zeros(0, np.bool_), event_duration_ps=np.zeros(0, np.int64),
        event_n_stats=np.zeros(0, np.int64), stat_metadata_id=np.zeros(0, np.int64), stat_kind=np.zeros(0, np.int8),
        stat_int=np.zeros(0, np.int64), stat_double=np.zeros(0, np.float64), stat_text=pa.array([], pa.binary()),
    )


def fast_available() -> bool:
    """True when the numba decoder can run (numba installed, XPROSQL_PURE_PYTHON not set)."""
    return _compiled.available()


def read_raw(data: bytes, *, source: str, chunk_bytes: int | None = None) -> RawSpace:
    """Decode with the faster implementation for this file in this process (:mod:`xprosql.ingest._compiled`);
    chunks of about ``chunk_bytes`` (default CHUNK_BYTES)."""
    # A mapped file is larger than half the free memory: only the compiled walk streams it.
    mapped = isinstance(data, mmap.mmap)
    read = read_raw_fast if _compiled.use_compiled("xspace", len(data), needed=mapped, source=source) else read_raw_python
    return read(data, source=source, chunk_bytes=chunk_bytes)


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


def drop_pages(data: object) -> None:
    """Let the kernel take back the pages of a mapped file (``mmap``) read so far: they are in the page cache, and
    are read again from there if touched. Keeps a large file out of the process's memory. No-op for bytes."""
    advise = getattr(data, "madvise", None)
    # what has madvise is an mmap
    if advise is not None and hasattr(mmap, "MADV_DONTNEED") and not cast(mmap.mmap, data).closed:
        advise(mmap.MADV_DONTNEED)


def _check_memory(events: int, stats: int, source: str) -> None:
    """Fail with a clear message, before allocating, when decoding would run out of memory (and be killed)."""
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


def _chunk_starts(event_n_stats: np.ndarray, chunk_bytes: int) -> np.ndarray:
    """Where chunks start (first event, first stat): the rule :func:`_xspace_numba.layout` applies as it walks."""
    starts, cost, stat, new_chunk = [], 0, 0, True
    for event, n_stats in enumerate(event_n_stats.tolist()):
        if new_chunk:
            starts.append((event, stat))
            new_chunk = False
        stat += n_stats
        cost += _BYTES_PER_EVENT + n_stats * _BYTES_PER_STAT
        if cost >= chunk_bytes:
            new_chunk, cost = True, 0
    return np.array(starts, dtype=np.int64).reshape(-1, 2)


def _line_extent(line_n_events: np.ndarray, offset: np.ndarray, aggregate: np.ndarray, duration: np.ndarray) -> np.ndarray:
    extent = np.zeros((len(line_n_events), 5), dtype=np.int64)
    for line, last in enumerate(np.cumsum(line_n_events)):
        first = last - line_n_events[line]
        offsets, timed = offset[first:last], ~aggregate[first:last]
        extent[line] = (timed.sum(), offsets[timed].min(initial=2**63 - 1), offsets.min(initial=0),
                        offsets.max(initial=0), duration[first:last].max(initial=0))
    return extent


def read_raw_python(data: bytes, *, source: str, chunk_bytes: int | None = None) -> RawSpace:
    """The reference decoder: parse with protobuf, then walk the objects."""
    _check_head(data, source)
    space = xplane_pb2.XSpace()
    try:
        space.ParseFromString(bytes(data))
    except DecodeError as exc:
        raise IngestError(source, f"not a valid XSpace protobuf (truncated or corrupt): {exc}") from None
    _check_planes(list(space.planes), source)
    # Column by column over flat lists of the objects: list comprehensions, not appends row by row (40% less time).
    lines = [(plane_index, line) for plane_index, plane in enumerate(space.planes) for line in plane.lines]
    events = [event for _, line in lines for event in line.events]
    event_n_stats = np.array([len(event.stats) for event in events], dtype=np.int64)
    _check_memory(len(events), int(event_n_stats.sum()), source)
    stats = [stat for event in events for stat in event.stats]
    which = [stat.WhichOneof("value") for stat in stats]
    values: list[Any] = [getattr(stat, field) if field else None for stat, field in zip(stats, which, strict=True)]
    kinds = np.array([STAT_KIND_OF_FIELD.get(field, 0) for field in which], dtype=np.int8)
    stat_int = np.zeros(len(stats), dtype=np.int64)
    stat_double = np.zeros(len(stats), dtype=np.float64)
    for kind, dtype in ((3, np.uint64), (4, np.int64), (7, np.int64)):
        where = np.flatnonzero(kinds == kind)
        # uint64 values keep their bit pattern in the int64 column
        stat_int[where] = np.array([values[i] for i in where.tolist()], dtype=dtype).view(np.int64)
    where = np.flatnonzero(kinds == 2)
    stat_double[where] = np.array([values[i] for i in where.tolist()], dtype=np.float64)
    texts = [value.encode() if kind == 5 else value if kind == 6 else None
             for kind, value in zip(kinds.tolist(), values, strict=True)]
    line_n_events = np.array([len(line.events) for _, line in lines], dtype=np.int64)

    everything = RawEvents(
        first_event=0, first_stat=0,
        event_line=np.repeat(np.arange(len(line_n_events), dtype=np.int32), line_n_events),
        event_metadata_id=np.array([event.metadata_id for event in events], dtype=np.int64),
        event_offset_ps=np.array([event.offset_ps for event in events], dtype=np.int64),
        event_num_occurrences=np.array([event.num_occurrences for event in events], dtype=np.int64),
        event_is_aggregate=np.array([event.WhichOneof("data") == "num_occurrences" for event in events], dtype=np.bool_),
        event_duration_ps=np.array([event.duration_ps for event in events], dtype=np.int64), event_n_stats=event_n_stats,
        stat_metadata_id=np.array([stat.metadata_id for stat in stats], dtype=np.int64), stat_kind=kinds,
        stat_int=stat_int, stat_double=stat_double, stat_text=pa.array(texts, pa.binary()),
    )
    planes = []
    for plane in space.planes:
        bare = xplane_pb2.XPlane()
        bare.CopyFrom(plane)
        del bare.lines[:]
        planes.append(bare)
    chunk_starts = _chunk_starts(everything.event_n_stats, chunk_bytes or CHUNK_BYTES)
    bounds = np.vstack([chunk_starts, [[everything.n_events, everything.n_stats]]])

    def read_chunk(index: int) -> RawEvents:
        (e0, s0), (e1, s1) = bounds[index], bounds[index + 1]
        per_event = {name: getattr(everything, name)[e0:e1] for name in RawEvents.__dataclass_fields__
                     if name.startswith("event_")}
        per_stat = {name: getattr(everything, name)[s0:s1] for name in RawEvents.__dataclass_fields__
                    if name.startswith("stat_")}
        return RawEvents(first_event=int(e0), first_stat=int(s0), **per_event, **per_stat)

    full_planes = list(space.planes)
    return RawSpace(
        hostnames=list(space.hostnames), errors=list(space.errors), warnings=list(space.warnings), planes=planes,
        line_plane=np.array([plane_index for plane_index, _ in lines], dtype=np.int32),
        line_id=np.array([line.id for _, line in lines], dtype=np.int64),
        line_display_id=np.array([line.display_id for _, line in lines], dtype=np.int64),
        line_name=[line.name for _, line in lines], line_display_name=[line.display_name for _, line in lines],
        line_timestamp_ns=np.array([line.timestamp_ns for _, line in lines], dtype=np.int64),
        line_duration_ps=np.array([line.duration_ps for _, line in lines], dtype=np.int64), line_n_events=line_n_events,
        line_extent=_line_extent(line_n_events, everything.event_offset_ps, everything.event_is_aggregate,
                                 everything.event_duration_ps),
        n_events=everything.n_events, n_stats=everything.n_stats, chunk_starts=chunk_starts,
        read_chunk=read_chunk, plane_with_lines=full_planes.__getitem__,
    )


def read_raw_fast(data: bytes, *, source: str, chunk_bytes: int | None = None) -> RawSpace:
    """The numba decoder: one walk over the file for its layout, then one per chunk of events."""
    from xprosql.ingest import _xspace_numba

    _check_head(data, source)
    buf = np.frombuffer(data, dtype=np.uint8)
    try:
        found = dict(zip(_xspace_numba.LAYOUT_FIELDS,
                         _xspace_numba.layout(buf, _BYTES_PER_EVENT, _BYTES_PER_STAT, chunk_bytes or CHUNK_BYTES)))
    except ValueError as exc:
        raise IngestError(source, f"not a valid XSpace protobuf (truncated or corrupt): {exc}") from None
    drop_pages(data)
    n_events, n_stats = (int(n) for n in found["counts"])
    line_ints, line_text, line_range, chunks = found["line_ints"], found["line_text"], found["line_range"], found["chunks"]

    def text(start: int, end: int) -> str:
        try:
            return bytes(data[start:end]).decode()
        except UnicodeDecodeError:
            raise IngestError(source, "not a valid XSpace protobuf (truncated or corrupt): invalid UTF-8 in a string") from None

    def parse_plane(index: int, *, with_lines: bool) -> xplane_pb2.XPlane:
        start, end = (int(i) for i in found["plane_ranges"][index])
        if with_lines:
            pieces = [data[start:end]]
        else:  # the bytes between the line fields
            skips = found["plane_skips"][found["plane_skips"][:, 0] == index][:, 1:]
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
        return plane

    planes = [parse_plane(i, with_lines=False) for i in range(len(found["plane_ranges"]))]
    _check_planes(planes, source)
    space_strings: dict[int, list[str]] = {2: [], 3: [], 4: []}
    for field_number, start, end in found["space_text"]:
        space_strings[int(field_number)].append(text(start, end))
    bounds = np.vstack([chunks[:, 2:], [[n_events, n_stats]]])

    def read_chunk(index: int) -> RawEvents:
        (e0, s0), (e1, s1) = (int(i) for i in bounds[index]), (int(i) for i in bounds[index + 1])
        events, stats = e1 - e0, s1 - s0
        event_line, event_aggregate = np.empty(events, np.int32), np.empty(events, np.bool_)
        event_ints = np.empty((5, events), np.int64)
        stat_mid, stat_kind, stat_int, stat_double = (np.empty(stats, np.int64), np.empty(stats, np.int8),
                                                      np.empty(stats, np.int64), np.empty(stats, np.float64))
        try:
            _xspace_numba.fill(buf, line_range, int(chunks[index, 0]), int(chunks[index, 1]), event_line, event_ints,
                               event_aggregate, stat_mid, stat_kind, stat_int, stat_double)
        except ValueError as exc:
            raise IngestError(source, f"not a valid XSpace protobuf (truncated or corrupt): {exc}") from None
        stat_text = _stat_text(buf, stat_kind, stat_int, stat_double)
        drop_pages(data)
        return RawEvents(
            first_event=e0, first_stat=s0, event_line=event_line,
            # event_ints holds one row per field: each column is contiguous.
            event_metadata_id=event_ints[0], event_offset_ps=event_ints[1], event_num_occurrences=event_ints[2],
            event_is_aggregate=event_aggregate, event_duration_ps=event_ints[3], event_n_stats=event_ints[4],
            stat_metadata_id=stat_mid, stat_kind=stat_kind, stat_int=stat_int, stat_double=stat_double,
            stat_text=stat_text,
        )

    return RawSpace(
        hostnames=space_strings[4], errors=space_strings[2], warnings=space_strings[3], planes=planes,
        line_plane=found["line_plane"], line_id=line_ints[:, 0], line_display_id=line_ints[:, 1],
        line_name=[text(s, e) for s, e in line_text[:, 0:2]],
        line_display_name=[text(s, e) for s, e in line_text[:, 2:4]],
        line_timestamp_ns=line_ints[:, 2], line_duration_ps=line_ints[:, 3], line_n_events=line_ints[:, 4],
        line_extent=found["line_extent"], n_events=n_events, n_stats=n_stats, chunk_starts=chunks[:, 2:],
        read_chunk=read_chunk, plane_with_lines=lambda index: parse_plane(index, with_lines=True),
    )


def _stat_text(buf: np.ndarray, stat_kind: np.ndarray, stat_int: np.ndarray, stat_double: np.ndarray) -> pa.Array:
    """The str and bytes stat values as an Arrow binary array (their byte ranges, left by fill(), set back to 0)."""
    from xprosql.ingest import _xspace_numba

    # Arrow binary offsets are int32: more than 2 GiB of stat text needs large_binary (and fails the cast below).
    wide = _xspace_numba.text_size(stat_kind, stat_int, stat_double) >= 2**31
    offsets = np.empty(len(stat_kind) + 1, dtype=np.int64 if wide else np.int32)
    gathered = _xspace_numba.text(buf, stat_kind, stat_int, stat_double, offsets)
    is_text = (stat_kind == 5) | (stat_kind == 6)
    validity = pa.py_buffer(np.packbits(is_text, bitorder="little")) if len(is_text) else None
    stat_text = pa.Array.from_buffers(pa.large_binary() if wide else pa.binary(), len(is_text),
                                      [validity, pa.py_buffer(offsets), pa.py_buffer(gathered)])
    return stat_text.cast(pa.binary()) if wide else stat_text
