"""Timeline export: any selection of a warehouse as a Perfetto trace (``*.perfetto-trace``) for ui.perfetto.dev.

The format is Perfetto's TracePacket protobuf (``perfetto/trace/trace.proto``), written with the
protobuf wire format by hand (a few messages, below) so the export needs no Perfetto package and
streams: packets are written as the events arrive. The protobuf, not the Chrome JSON trace format,
because it can say everything needed here: times in integer nanoseconds (JSON has microseconds as
floats), one process per device with named tracks of any name (JSON tracks are thread ids), typed
counter tracks with units, and flows between any two slices. Nothing is written as JSON.

What is written:

* one process per (profile, device): ``/device:TPU:0 (host, profile id)``; one track per
  ``tracks`` row, named as the warehouse names it (empty lines included), ordered by
  ``sort_index`` then line order;
* every event with a start as a slice (BEGIN / END packets) on its track: name interned,
  the event's category, its promoted stats and its ``event_stats`` as debug annotations
  (args). A slice that overlaps another on its line without nesting in it (XSpace lines
  have a few) goes to a child track of the line named ``<line> (overlap N)``, since a
  Perfetto track holds only properly nested slices. Aggregated events (no start) are
  counted in :class:`ExportSummary` and left out;
* flows as arrows: a launch (``api_calls``) to the kernels and copies of its correlation id,
  and the ``flows`` table's other categories (Kineto ``fwdbwd``), bound to the slice that
  starts last at or before the flow point on its track (``ac2g`` flows are the launches again);
* counter tracks: ``counters`` samples with a start (per device, counter and kernel) and
  the memory timeline (``sql/memory/memory_timeline.sql``: bytes in use and reserved per
  allocator after every allocation and free, in bytes).

Times are absolute nanoseconds: ``profiles.start_ns`` plus the event's picoseconds, floored (a
slice's end is the floor of its end, so nesting survives the rounding). Several profiles land
side by side on their recorded clocks, or with ``job_clock`` the ranks of a job on the job's clock
(``sql/jobs/clock_offsets.sql``: each member's wall clock corrected by what its collectives say). Memory stays bounded: events come from DuckDB in record batches, in start order, with
its sort spilling to disk, and only the open slices of each track are held.

Example:
    >>> from xprosql.queries.export_trace import export_trace
    >>> export_trace(run.engine, "tpu.perfetto-trace", profiles=["e312ef8bd5a5104a"])   # doctest: +SKIP
"""

from __future__ import annotations

import heapq
import os
import shutil
import struct
import tempfile
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import duckdb

from xprosql.engine import Engine
from xprosql.engine.connection import query, snapshot_connection
from xprosql.errors import ParameterError, QueryError, UnknownAnalysisError
from xprosql.queries._params import Profiles

__all__ = ["PROMOTED_ARGS", "ExportSummary", "export_trace"]

# events columns written as args when set (the rest of an event's stats come from event_stats).
PROMOTED_ARGS = ("display_name", "hlo_module", "hlo_op", "program_id", "group_id", "step_num", "correlation_id",
                 "flops", "bytes_accessed", "is_async", "device_offset_ps", "device_duration_ps", "num_occurrences")
_SEQUENCE = 1  # every packet is on one trusted sequence: the interned names are its incremental state
_BATCH_ROWS = 50_000


@dataclass
class ExportSummary:
    """What an export wrote: counts, so nothing is left out silently."""

    path: Path
    profiles: int = 0
    processes: int = 0
    tracks: int = 0
    overlap_tracks: int = 0
    slices: int = 0
    flows: int = 0
    counter_tracks: int = 0
    counter_samples: int = 0
    bytes: int = 0
    notes: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        text = (f"{self.path}: {self.slices} slices on {self.tracks} tracks ({self.overlap_tracks} overlap tracks) of "
                f"{self.processes} devices in {self.profiles} profiles, {self.flows} flows, {self.counter_samples} counter "
                f"samples on {self.counter_tracks} counter tracks, {self.bytes / 1e6:.1f} MB")
        return "\n".join([text, *self.notes])


# -- the protobuf wire format: varints, tags, length-delimited fields -----------------------------------

_SMALL = [bytes((i,)) for i in range(0x80)]


def _varint(value: int) -> bytes:
    if value < 0:
        value &= (1 << 64) - 1  # int64 fields: two's complement in ten bytes
    if value < 0x80:
        return _SMALL[value]
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _key(number: int, wire: int) -> bytes:
    return _varint(number << 3 | wire)


def _int(number: int, value: int) -> bytes:
    return _key(number, 0) + _varint(value)


def _bytes(number: int, payload: bytes) -> bytes:
    return _key(number, 2) + _varint(len(payload)) + payload


def _str(number: int, text: str) -> bytes:
    return _bytes(number, text.encode("utf-8", "replace"))


def _double(number: int, value: float) -> bytes:
    return _key(number, 1) + struct.pack("<d", value)


# Field numbers of perfetto/trace/trace_packet.proto and track_event/*.proto (checked in tests/test_export.py
# against the descriptors of the perfetto wheel).
_TRACE_PACKET = 1  # Trace.packet
_P_TIMESTAMP, _P_SEQ, _P_TRACK_EVENT, _P_INTERNED, _P_FLAGS, _P_TRACK_DESCRIPTOR = 8, 10, 11, 12, 13, 60
_FLAG_CLEARED, _FLAG_NEEDS = 1, 2
_TD_UUID, _TD_NAME, _TD_PROCESS, _TD_PARENT, _TD_COUNTER, _TD_CHILD_ORDERING, _TD_RANK = 1, 2, 3, 5, 8, 11, 12
_ORDER_EXPLICIT = 3
_PD_PID, _PD_NAME = 1, 6
_CD_UNIT, _CD_UNIT_NAME = 3, 6
_UNIT_COUNT, _UNIT_BYTES = 2, 3
_TE_ANNOTATIONS, _TE_TYPE, _TE_NAME_IID, _TE_TRACK, _TE_CATEGORIES, _TE_INT_VALUE, _TE_DOUBLE_VALUE = 4, 9, 10, 11, 22, 30, 44
_TE_FLOW_IDS, _TE_TERMINATING_FLOW_IDS = 47, 48
_BEGIN, _END, _COUNTER = 1, 2, 4
_DA_BOOL, _DA_UINT, _DA_INT, _DA_DOUBLE, _DA_STRING, _DA_NAME = 2, 3, 4, 5, 6, 10
_ID_EVENT_NAMES, _EN_IID, _EN_NAME = 2, 1, 2


_ANNOTATION_NAMES: dict[str, bytes] = {}
_K_ANNOTATIONS, _K_BOOL, _K_UINT, _K_INT = _key(_TE_ANNOTATIONS, 2), _key(_DA_BOOL, 0), _key(_DA_UINT, 0), _key(_DA_INT, 0)
_K_DOUBLE, _K_STRING = _key(_DA_DOUBLE, 1), _key(_DA_STRING, 2)
_K_PACKET, _K_TIMESTAMP, _K_TRACK_EVENT, _K_TRACK = _key(_TRACE_PACKET, 2), _key(_P_TIMESTAMP, 0), _key(_P_TRACK_EVENT, 2), _key(_TE_TRACK, 0)
_K_NAME_IID, _K_CATEGORY, _K_FLOW, _K_TERMINATING = _key(_TE_NAME_IID, 0), _key(_TE_CATEGORIES, 2), _key(_TE_FLOW_IDS, 1), _key(_TE_TERMINATING_FLOW_IDS, 1)
_PACK_DOUBLE, _PACK_U64 = struct.Struct("<d").pack, struct.Struct("<Q").pack


def _annotation(name: str, value: Any) -> bytes:
    """A DebugAnnotation (an arg): its name, then the value in its type's field."""
    head = _ANNOTATION_NAMES.get(name)
    if head is None:
        head = _ANNOTATION_NAMES[name] = _str(_DA_NAME, name)
    if isinstance(value, bool):
        body = head + _K_BOOL + _SMALL[int(value)]
    elif isinstance(value, int):
        body = head + (_K_UINT if value >= 1 << 63 else _K_INT) + _varint(value)
    elif isinstance(value, float):
        body = head + _K_DOUBLE + _PACK_DOUBLE(value)
    else:
        text = (value.hex() if isinstance(value, bytes) else str(value)).encode("utf-8", "replace")
        body = head + _K_STRING + _varint(len(text)) + text
    return _K_ANNOTATIONS + _varint(len(body)) + body


class _Writer:
    """Packets out, as they come; the names interned on the one sequence; each track's bytes made once."""

    def __init__(self, out: BinaryIO) -> None:
        self.out = out
        self.names: dict[str, bytes] = {}  # name -> its name_iid field
        self.written = 0
        self._first = True
        self._seq = _int(_P_SEQ, _SEQUENCE)
        self._needs = self._seq + _int(_P_FLAGS, _FLAG_NEEDS)
        self._begin: dict[int, bytes] = {}  # track uuid -> TrackEvent type BEGIN and track_uuid fields
        self._end: dict[int, bytes] = {}    # track uuid -> the whole TrackEvent field of its END
        self._counter: dict[int, bytes] = {}

    def packet(self, body: bytes) -> None:
        data = _K_PACKET + _varint(len(body)) + body
        self.out.write(data)
        self.written += len(data)

    def descriptor(self, uuid: int, *, name: str | None = None, parent: int | None = None, pid: int | None = None,
                   process_name: str | None = None, counter_unit: int | None = None, unit_name: str | None = None,
                   rank: int | None = None, explicit_order: bool = False) -> None:
        body = _int(_TD_UUID, uuid)
        if name is not None:
            body += _str(_TD_NAME, name)
        if pid is not None:
            body += _bytes(_TD_PROCESS, _int(_PD_PID, pid) + _str(_PD_NAME, process_name or ""))
        if parent is not None:
            body += _int(_TD_PARENT, parent)
        if counter_unit is not None:
            body += _bytes(_TD_COUNTER, _int(_CD_UNIT, counter_unit) + (_str(_CD_UNIT_NAME, unit_name) if unit_name else b""))
        if explicit_order:
            body += _int(_TD_CHILD_ORDERING, _ORDER_EXPLICIT)
        if rank is not None:
            body += _int(_TD_RANK, rank)
        flags = b""
        if self._first:  # the sequence's first packet says its incremental state (the interned names) starts empty
            flags, self._first = _int(_P_FLAGS, _FLAG_CLEARED), False
        self.packet(self._seq + flags + _bytes(_P_TRACK_DESCRIPTOR, body))
        track = _K_TRACK + _varint(uuid)
        self._begin[uuid] = _int(_TE_TYPE, _BEGIN) + track
        self._end[uuid] = _bytes(_P_TRACK_EVENT, _int(_TE_TYPE, _END) + track)
        self._counter[uuid] = _int(_TE_TYPE, _COUNTER) + track

    def begin(self, ts: int, track: int, name: str, extra: bytes) -> None:
        iid = self.names.get(name)
        interned = b""
        if iid is None:
            number = len(self.names) + 1
            iid = self.names[name] = _K_NAME_IID + _varint(number)
            interned = _bytes(_P_INTERNED, _bytes(_ID_EVENT_NAMES, _int(_EN_IID, number) + _str(_EN_NAME, name)))
        event = self._begin[track] + iid + extra
        self.packet(_K_TIMESTAMP + _varint(ts) + self._needs + interned + _K_TRACK_EVENT + _varint(len(event)) + event)

    def end(self, ts: int, track: int) -> None:
        self.packet(_K_TIMESTAMP + _varint(ts) + self._seq + self._end[track])

    def counter(self, ts: int, track: int, value: float | int) -> None:
        number = _int(_TE_INT_VALUE, value) if isinstance(value, int) else _double(_TE_DOUBLE_VALUE, float(value))
        self.packet(_K_TIMESTAMP + _varint(ts) + self._seq + _bytes(_P_TRACK_EVENT, self._counter[track] + number))


# -- the selection -------------------------------------------------------------------------------------------

_EVENTS_SQL = """
WITH ev AS (
    SELECT * FROM events
    WHERE start_ps IS NOT NULL
      AND ($from_ps IS NULL OR start_ps + coalesce(dur_ps, 0) >= $from_ps)
      AND ($to_ps IS NULL OR start_ps <= $to_ps)
      AND ({where})
),
launches AS (  -- correlation ids with both a launch and an activity: one arrow each
    SELECT DISTINCT a.correlation_id FROM api_calls AS a
    WHERE a.correlation_id IS NOT NULL AND (
        EXISTS (SELECT 1 FROM kernels AS k WHERE k.correlation_id = a.correlation_id)
        OR EXISTS (SELECT 1 FROM memcpys AS m WHERE m.correlation_id = a.correlation_id))
),
flow_out AS (
    SELECT a.event_id, hash('launch', a.correlation_id) AS fid FROM api_calls AS a JOIN launches USING (correlation_id)
),
flow_in AS (
    SELECT x.event_id, hash('launch', x.correlation_id) AS fid
    FROM (SELECT event_id, correlation_id FROM kernels UNION ALL SELECT event_id, correlation_id FROM memcpys) AS x
    JOIN launches USING (correlation_id)
),
points AS (  -- the flows table's other flows, on the slice that starts last at or before the point
    SELECT e.event_id, f.phase, hash(f.category, f.flow_id) AS fid
    FROM (SELECT * FROM flows WHERE category IS DISTINCT FROM 'ac2g') AS f
    ASOF JOIN (SELECT event_id, track_id, start_ps FROM events WHERE start_ps IS NOT NULL) AS e
      ON f.track_id = e.track_id AND f.ts_ps >= e.start_ps
),
arrows AS (
    SELECT event_id, list(fid) FILTER (WHERE out) AS flow_ids, list(fid) FILTER (WHERE NOT out) AS terminating_flow_ids
    FROM (SELECT event_id, fid, true AS out FROM flow_out
          UNION ALL SELECT event_id, fid, false FROM flow_in
          UNION ALL SELECT event_id, fid, phase <> 'f' FROM points)
    GROUP BY event_id
),
stats AS (  -- one row per stat: joined, not aggregated, so the sort below can spill them to disk
    SELECT event_id, stat, value_type, CASE value_type
        WHEN 'int64' THEN CAST(int_value AS VARCHAR) WHEN 'uint64' THEN CAST(uint_value AS VARCHAR)
        WHEN 'double' THEN CAST(double_value AS VARCHAR) WHEN 'bytes' THEN hex(bytes_value)
        ELSE str_value END AS value
    FROM event_stats WHERE {with_args}
)
SELECT ev.event_id, ev.device_id, ev.track_id, ev.name, ev.category, ev.start_ps, coalesce(ev.dur_ps, 0) AS dur_ps,
       {promoted}, stats.stat, stats.value, stats.value_type, arrows.flow_ids, arrows.terminating_flow_ids
FROM ev
LEFT JOIN stats USING (event_id)
LEFT JOIN arrows USING (event_id)
ORDER BY ev.start_ps, dur_ps DESC, ev.event_id, stats.stat
"""


def _typed(value: str | None, type_: str) -> Any:
    """An event_stats value back in its type (the query sends them as text, one column for every type)."""
    if value is None:
        return None
    if type_ in ("int64", "uint64"):
        return int(value)
    if type_ == "double":
        return float(value)
    return value


def _batches(con: duckdb.DuckDBPyConnection, sql: str, params: dict[str, Any]) -> Iterator[dict[str, list[Any]]]:
    try:
        reader = query(con, sql, params).to_arrow_reader(_BATCH_ROWS)
    except duckdb.Error as exc:
        raise QueryError(f"export query failed: {exc}") from None
    for batch in reader:
        yield {name: batch.column(i).to_pylist() for i, name in enumerate(batch.schema.names)}


def _events(batches: Iterator[dict[str, list[Any]]], args: bool) -> Iterator[tuple[Any, ...]]:
    """The query's rows (one per event and stat, in order) as one tuple per event: track, name, category, start,
    duration, its args and its flow ids."""
    current: list[Any] | None = None
    for batch in batches:
        promoted = list(zip(*(batch[c] for c in PROMOTED_ARGS))) if args else None
        for i, event_id in enumerate(batch["event_id"]):
            if current is None or event_id != current[0]:
                if current is not None:
                    yield tuple(current[1:])
                values = [(c, v) for c, v in zip(PROMOTED_ARGS, promoted[i]) if v is not None] if promoted else []
                current = [event_id, batch["track_id"][i], batch["name"][i], batch["category"][i], batch["start_ps"][i],
                           batch["dur_ps"][i], values, batch["flow_ids"][i], batch["terminating_flow_ids"][i]]
            stat = batch["stat"][i]
            if stat is not None:
                current[6].append((stat, _typed(batch["value"][i], batch["value_type"][i])))
    if current is not None:
        yield tuple(current[1:])


def export_trace(
    engine: Engine,
    out: str | os.PathLike[str],
    *,
    profiles: Profiles = None,
    where: str | None = None,
    start_ps: int | None = None,
    end_ps: int | None = None,
    args: bool = True,
    flows: bool = True,
    counters: bool = True,
    memory: bool = True,
    job_clock: bool = False,
    memory_limit: str = "512MB",
) -> ExportSummary:
    """Write the selection to ``out`` as a Perfetto trace (TracePacket protobuf); returns what it wrote.

    ``profiles``: ids (default: all); ``where``: a SQL predicate on ``events`` columns (``name LIKE
    'fusion%'``, ``device_id = 2``); ``start_ps`` / ``end_ps``: keep events that overlap this window of
    each profile (ps from its start; counters inside it); ``args``: stats as slice args; ``flows``:
    launch and ``flows`` arrows; ``counters``: the ``counters`` table; ``memory``: the memory timeline;
    ``job_clock``: the ranks of a job side by side on the job's clock (``sql/jobs/clock_offsets.sql``:
    each member moved by what the collectives say its wall clock is off by; other profiles keep theirs);
    ``memory_limit``: DuckDB's memory for the sort (it spills beyond it).
    """
    wanted = engine.profile_ids if profiles is None else [profiles] if isinstance(profiles, str) else list(profiles)
    if not wanted:
        raise ParameterError("nothing to export: the selection has no profiles")
    if start_ps is not None and end_ps is not None and end_ps < start_ps:
        raise ParameterError(f"the window ends ({end_ps} ps) before it starts ({start_ps} ps)")
    path = Path(out)
    summary = ExportSummary(path=path)
    partial = path.with_name(f".{path.name}.partial")
    clocks = _job_clocks(engine, wanted, summary) if job_clock else {}
    spill = tempfile.mkdtemp(prefix="xprosql-export-")
    try:
        with open(partial, "wb", buffering=1 << 20) as handle:
            writer = _Writer(handle)
            next_uuid = iter(range(1, 1 << 62))
            pid = 0
            for profile_id in wanted:
                con = snapshot_connection(engine.restricted([profile_id]))
                try:
                    con.execute(f"SET memory_limit = '{memory_limit}'; SET temp_directory = '{spill}'; SET preserve_insertion_order = false")
                    pid = _export_profile(con, engine, profile_id, writer, summary, next_uuid, pid, where=where,
                                          start_ps=start_ps, end_ps=end_ps, args=args, flows=flows,
                                          counters=counters, memory=memory, clock=clocks.get(profile_id))
                finally:
                    con.close()
            summary.profiles = len(wanted)
            summary.bytes = writer.written
        partial.replace(path)
    finally:
        partial.unlink(missing_ok=True)
        shutil.rmtree(spill, ignore_errors=True)
    return summary


def _export_profile(con: duckdb.DuckDBPyConnection, engine: Engine, profile_id: str, writer: _Writer,
                    summary: ExportSummary, next_uuid: Iterator[int], pid: int, *, where: str | None,
                    start_ps: int | None, end_ps: int | None, args: bool, flows: bool, counters: bool,
                    memory: bool, clock: tuple[int, str] | None = None) -> int:
    (start_ns, host, source), = con.execute("SELECT start_ns, host, source_path FROM profiles").fetchall()
    label = host or Path(source or profile_id).name
    if clock is not None:
        label = f"{clock[1]}, {label}"
    devices = con.execute("SELECT device_id, name FROM devices ORDER BY device_id").fetchall()
    tracks = con.execute("SELECT device_id, track_id, name FROM tracks "
                         "ORDER BY device_id, coalesce(sort_index, track_id), track_id").fetchall()
    process: dict[int, int] = {}
    for rank, (device_id, name) in enumerate(devices):
        pid += 1
        process[device_id] = uuid = next(next_uuid)
        writer.descriptor(uuid, pid=pid, process_name=f"{name} ({label}, profile {profile_id})", rank=rank,
                          explicit_order=True)
        summary.processes += 1
    track_uuid: dict[int, int] = {}
    track_name: dict[int, str] = {}
    for rank, (device_id, track_id, name) in enumerate(tracks):
        track_uuid[track_id] = uuid = next(next_uuid)
        track_name[track_id] = name or f"line {track_id}"
        writer.descriptor(uuid, name=track_name[track_id], parent=process.get(device_id), rank=rank)
        summary.tracks += 1
    aggregated, = con.execute("SELECT count(*) FROM events WHERE start_ps IS NULL").fetchall()[0]
    if aggregated:
        summary.notes.append(f"profile {profile_id}: {aggregated} aggregated events (no start time) left out")

    promoted = ", ".join(f"ev.{c}" for c in PROMOTED_ARGS) if args else "NULL AS no_args"
    sql = _EVENTS_SQL.format(where=where or "true", with_args="true" if args else "false", promoted=promoted)
    if not flows:
        sql = sql.replace("LEFT JOIN arrows USING (event_id)", "LEFT JOIN (SELECT * FROM arrows WHERE false) AS arrows USING (event_id)")
    base_ps = start_ns * 1000 + (clock[0] if clock is not None else 0)
    # Per line, lanes of open slices (each a stack of (end ps, uuid)); one heap of every open slice's end, so
    # ends go out in time order before the next begin.
    lanes: dict[int, list[list[int]]] = {}
    lane_uuid: dict[tuple[int, int], int] = {}
    pending: list[tuple[int, int, int, int]] = []  # (end ps, -depth, track, lane)
    end_packet, begin_packet = writer.end, writer.begin
    for track, name, category, start, dur, event_args, out_ids, in_ids in _events(
            _batches(con, sql, {"from_ps": start_ps, "to_ps": end_ps}), args):
        while pending and pending[0][0] <= start:
            end, _, t, lane = heapq.heappop(pending)
            lanes[t][lane].pop()
            end_packet((base_ps + end) // 1000, lane_uuid[(t, lane)] if lane else track_uuid[t])
        end = start + dur
        stacks = lanes.setdefault(track, [[]])
        lane = next((k for k, stack in enumerate(stacks) if not stack or stack[-1] >= end), len(stacks))
        if lane == len(stacks):
            stacks.append([])
        if lane and (track, lane) not in lane_uuid:
            lane_uuid[(track, lane)] = uuid = next(next_uuid)
            writer.descriptor(uuid, name=f"{track_name.get(track, track)} (overlap {lane})", parent=track_uuid.get(track))
            summary.overlap_tracks += 1
        stacks[lane].append(end)
        heapq.heappush(pending, (end, -len(stacks[lane]), track, lane))
        extra = b""
        if category is not None:
            encoded = category.encode("utf-8", "replace")
            extra += _K_CATEGORY + _varint(len(encoded)) + encoded
        for key, value in event_args:
            extra += _annotation(key, value)
        for fid in out_ids or ():
            extra += _K_FLOW + _PACK_U64(fid)
            summary.flows += 1
        for fid in in_ids or ():
            extra += _K_TERMINATING + _PACK_U64(fid)
        begin_packet((base_ps + start) // 1000, lane_uuid[(track, lane)] if lane else track_uuid[track], name or "", extra)
        summary.slices += 1
    while pending:
        end, _, t, lane = heapq.heappop(pending)
        end_packet((base_ps + end) // 1000, lane_uuid[(t, lane)] if lane else track_uuid[t])

    if counters:
        _export_counters(con, writer, summary, next_uuid, process, base_ps, start_ps, end_ps)
    if memory:
        _export_memory(engine, profile_id, writer, summary, next_uuid, process, base_ps, start_ps, end_ps)
    return pid


def _job_clocks(engine: Engine, wanted: list[str], summary: ExportSummary) -> dict[str, tuple[int, str]]:
    """Per profile of a job: the picoseconds that move its wall clock onto the job's clock, and its member name."""
    try:
        engine.library.module("jobs.clock_offsets")
    except UnknownAnalysisError:
        raise ParameterError("the job clock needs the jobs.clock_offsets analysis, which this xprosql lacks") from None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # profiles of no job: said below
        rows = engine.analysis("jobs.clock_offsets", profiles=wanted).pl()
    clocks = {pid: (int(offset) - int(wall), f"{job} {member}")
              for pid, job, member, offset, wall in rows.select("profile_id", "job_id", "member", "offset_ps", "wall_offset_ps").iter_rows()
              if offset is not None and wall is not None}
    alone = [pid for pid in wanted if pid not in clocks]
    if alone:
        summary.notes.append(f"{len(alone)} profiles in no job keep their own clock (e.g. {alone[0]})")
    return clocks


def _inside(ts: int, start_ps: int | None, end_ps: int | None) -> bool:
    return (start_ps is None or ts >= start_ps) and (end_ps is None or ts <= end_ps)


def _export_counters(con: duckdb.DuckDBPyConnection, writer: _Writer, summary: ExportSummary, next_uuid: Iterator[int],
                     process: dict[int, int], base_ps: int, start_ps: int | None, end_ps: int | None) -> None:
    rows = con.execute(
        "SELECT device_id, counter, kernel, start_ps, value_double FROM counters "
        "WHERE start_ps IS NOT NULL AND value_double IS NOT NULL ORDER BY device_id, counter, kernel, start_ps").fetchall()
    skipped, = con.execute("SELECT count(*) FROM counters WHERE start_ps IS NULL").fetchall()[0]
    if skipped:
        summary.notes.append(f"{skipped} counter values without a time (plane-level stats) left out")
    uuids: dict[tuple[Any, ...], int] = {}
    for device_id, counter, kernel, ts, value in rows:
        if not _inside(ts, start_ps, end_ps):
            continue
        key = (device_id, counter, kernel)
        if key not in uuids:
            uuids[key] = uuid = next(next_uuid)
            writer.descriptor(uuid, name=f"{counter} ({kernel})" if kernel else str(counter), parent=process.get(device_id),
                              counter_unit=_UNIT_COUNT)
            summary.counter_tracks += 1
        writer.counter((base_ps + ts) // 1000, uuids[key], value)
        summary.counter_samples += 1


def _export_memory(engine: Engine, profile_id: str, writer: _Writer, summary: ExportSummary, next_uuid: Iterator[int],
                   process: dict[int, int], base_ps: int, start_ps: int | None, end_ps: int | None) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a profile without allocator events: nothing to draw, not a problem here
        rows = engine.analysis("memory.memory_timeline", profiles=[profile_id]).rows()
    uuids: dict[tuple[Any, ...], int] = {}
    for _, device_id, allocator, _, ts, _, in_use, reserved, *_ in rows:
        if not _inside(ts, start_ps, end_ps):
            continue
        for what, value in (("in use", in_use), ("reserved", reserved)):
            if value is None:
                continue
            key = (device_id, allocator, what)
            if key not in uuids:
                uuids[key] = uuid = next(next_uuid)
                writer.descriptor(uuid, name=f"memory {what}: {allocator}", parent=process.get(device_id), counter_unit=_UNIT_BYTES)
                summary.counter_tracks += 1
            writer.counter((base_ps + ts) // 1000, uuids[key], int(value))
            summary.counter_samples += 1
