"""The columnar Kineto decoder: whole columns at a time instead of one event at a time.

The text is decompressed and scanned a piece at a time (:class:`._kineto_scan.Scanner`:
integer arrays, a row per event and a row per arg, every string interned), so it is never
held whole; the rest is numpy and Arrow over whole columns: masks for what each event is,
one scatter for the typed stat columns. The big tables come out in slices as they are
built, so that the writer can encode and free one while the next is made.
Python touches single values only where they need Python's own parsing (arg lists
and objects, each distinct one once; the launch configuration of kernels; counters).

Anything the scan or the integer arithmetic here cannot take exactly raises
:class:`Irregular`, and the trace goes to :mod:`._kineto_reference` instead, which
gives the same tables for regular traces and decides everything for the rest.
"""

from __future__ import annotations

import io
import itertools
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from xprosql.ingest import _kineto_common as common
from xprosql.ingest import _kineto_scan as scan
from xprosql.ingest._pm_sampling import PM_SAMPLING_CATEGORY, pm_sampling_rows
from xprosql.models.tables import TABLES
from xprosql.warehouse import ROW_GROUP_ROWS

# Headroom below 2**63 so that sums of two scaled values (start + dur) stay in int64.
_LIMIT = 2**62
_KINDS = ["int64", "double", "str", "uint64", "json"]  # event_stats.value_type, by scan.T_* code
_F = {name: i for i, name in enumerate(scan.FIELDS)}
_RAW = msgspec.json.Decoder(msgspec.Raw)
# Text scanned at a time (the whole text is never held): small enough to stay in the cache while it is
# decompressed, scanned and validated, big enough that the per-piece costs vanish.
PIECE = 1 << 20


class Irregular(Exception):
    """A value this decoder does not take exactly; the per-event decoder takes the trace."""


def decode(data: bytes, source: str) -> Iterator[tuple[str, pa.RecordBatch]]:
    """Warehouse batches of a trace, built as they are taken, or :class:`Irregular`, raised before this returns;
    the batches can then fail only as the reference path would (:meth:`_Decoder.prepare`).

    Anything that is not a well-formed trace (corrupt gzip or JSON, no traceEvents) is
    :class:`Irregular` too: the reference path then raises the :class:`IngestError` that says
    what is wrong, as it does for every file it is given. An XProf trace-viewer JSON raises
    that error here, as both paths do (:func:`common.check_not_xprof`).
    """
    try:
        trace, scanned = _scan(data, source)
    except ValueError:  # a value of a type Kineto does not write, or not a trace
        raise Irregular from None
    kinds, values, arg_count, args, arena, strings = scanned
    if kinds.shape[1] == 0 or scan.has_repeated_args(args[scan.S_OWNER], args[scan.S_KEY]):
        raise Irregular
    view = memoryview(arena)
    try:
        texts = [str(view[lo:hi], "utf-8") for lo, hi in strings.tolist()]
    except UnicodeDecodeError:
        raise Irregular from None
    decoder = _Decoder(trace, (kinds, values, arg_count), args, texts, source)
    del view, arena, kinds, values, arg_count, args, scanned  # the decoder frees them
    try:
        decoder.prepare()
    except OverflowError:  # an integer past int64: the reference path fails or keeps it, as it must
        raise Irregular from None
    return decoder.batches()


_WS = b" \t\r\n"
_WS_BYTES = np.frombuffer(_WS, np.uint8)


def _scan(data: bytes, source: str) -> tuple[dict[str, Any], tuple[Any, ...]]:
    """The trace's top-level fields and its scanned events, the text decompressed and scanned a piece at a time
    into one buffer, each piece after what the last left incomplete.

    Each piece's events are validated by msgspec, as :func:`common.split` validates the
    whole text, the fields around traceEvents too; ValueError for anything else.
    """
    text = common.text_file(data, source)
    buf, n, read = np.empty(PIECE + scan.PAD, np.uint8), 0, -1
    located = None
    while located is None:  # the beginning, up to traceEvents' "["
        buf, read = _read(text, buf, n)
        n += read
        located = _locate(buf[:n].tobytes(), final=read == 0)
    fields, at = located
    scanner = scan.Scanner(common.text_size(data))
    while True:
        buf[:n - at] = buf[at:n]  # what the last piece left: the next one starts with it
        n -= at
        if not scanner.after and n > 1 and not np.isin(buf[1:n], _WS_BYTES, invert=True).any():
            n = 1  # only whitespace after the "[" so far: a file of spaces is not kept whole

        if read:
            buf, read = _read(text, buf, n)
            n += read
        buf[n:n + scan.PAD] = 0
        at, first, last, end = scanner.piece(buf, n)
        if first >= 0:  # the complete events as a JSON array: "[" over the separator before, "]" after
            buf[first - 1], kept = ord("["), buf[last]
            buf[last] = ord("]")
            _check(buf[first - 1:last + 1])
            buf[last] = kept
        if end >= 0:
            return _top_level(fields, buf[end:n].tobytes() + _read_rest(text)), scanner.result()
        if not read:
            raise ValueError("traceEvents does not end")


def _read(text: io.BufferedIOBase, buf: np.ndarray, n: int) -> tuple[np.ndarray, int]:
    """Read a piece into buf after its first n bytes (made larger if they fill it): (buf, bytes read).

    The piece is as long as those n bytes if they are longer (an event bigger than a piece, scanned again
    from its start each time): twice the text each time, so that the scanning stays linear."""
    size = max(PIECE, n)
    if n + size + scan.PAD > len(buf):
        bigger = np.empty(2 * n + size + scan.PAD, np.uint8)
        bigger[:n] = buf[:n]
        buf = bigger
    with _gzip_errors():
        return buf, text.readinto(memoryview(buf)[n:n + size])  # type: ignore[arg-type]


def _read_rest(text: io.BufferedIOBase) -> bytes:
    with _gzip_errors():
        return text.read()


@contextmanager
def _gzip_errors() -> Iterator[None]:
    """A corrupt or truncated gzip stream as ValueError: the reference path says which."""
    try:
        yield
    except common.GZIP_ERRORS as exc:
        raise ValueError(f"truncated or corrupt gzip: {exc}") from None


def _locate(head: bytes, *, final: bool) -> tuple[dict[str, msgspec.Raw] | None, int] | None:
    """(fields before traceEvents (None: the bare array form), where its "[" is) in the text's beginning,
    None if more text is needed to tell."""
    stripped = head.lstrip(_WS)
    if stripped[:1] == b"[":
        return None, len(head) - len(stripped)
    if stripped[:1] not in (b"{", b""):
        raise ValueError("not a JSON object")
    key = head.find(b'"traceEvents"')
    value = head[key + len(b'"traceEvents"'):].lstrip(_WS) if key >= 0 else b""
    if value[:1] == b":":
        value = value[1:].lstrip(_WS)
    if not value[:1]:
        if final:
            raise ValueError("no traceEvents")
        return None
    if value[:1] != b"[":
        raise ValueError("traceEvents is not an array")
    before = head[:key].rstrip(_WS)
    if before.lstrip(_WS) == b"{":
        return {}, len(head) - len(value)
    if not before.endswith(b","):
        raise ValueError("traceEvents is not a top-level key")
    return _check(before[:-1] + b"}", common.TOP_FIELDS), len(head) - len(value)


def _top_level(before: dict[str, msgspec.Raw] | None, tail: bytes) -> dict[str, Any]:
    """The top-level fields (the reference path's ``trace``) from those before traceEvents and the text after it."""
    if before is None:  # the bare array form: nothing may follow
        if tail.strip(_WS):
            raise ValueError("text after the array")
        return {}
    after = _check(b'{"traceEvents":[]' + tail, common.TOP_FIELDS)
    # Keys twice (the last value wins in the reference path's dict): rare enough to leave to it.
    if b'"traceEvents"' in tail or "traceEvents" in before or any(key in before for key in after):
        raise ValueError("a repeated top-level key")
    del after["traceEvents"]
    return {key: msgspec.json.decode(value) for key, value in itertools.chain(before.items(), after.items())}


def _check(text: bytes | np.ndarray, decoder: msgspec.json.Decoder = _RAW) -> Any:
    """``decoder.decode(text)``: msgspec validates the JSON; ValueError if it is not valid."""
    try:
        return decoder.decode(text)  # type: ignore[arg-type]
    except msgspec.DecodeError as exc:
        raise ValueError(str(exc)) from None


def _valid(array: pa.Array) -> np.ndarray:
    return array.is_valid().to_numpy(zero_copy_only=False)


class _Decoder:
    """One trace's scanned arrays in (:meth:`prepare`), its tables out (:meth:`batches`)."""

    def __init__(self, trace: dict[str, Any], events: tuple[np.ndarray, np.ndarray, np.ndarray],
                 args: list[np.ndarray], texts: list[str], source: str) -> None:
        self.trace, self.s, self.source = trace, args, source  # self.s[scan.S_*]: a column of the arg rows
        self.kinds, self.values, self.arg_count = events
        self.floats = self.values.view(np.float64)  # the values of float fields: their bits
        self.stat_floats = args[scan.S_A].view(np.float64)  # likewise
        self.texts = texts
        self.strings = pa.array(texts, pa.string())
        self.dropped: Counter[str] = Counter()
        self._parsed: dict[int, Any] = {}
        self._key_ids = {text: sid for sid, text in reversed(list(enumerate(texts)))}

    # Event fields.
    def kind(self, field: str) -> np.ndarray:
        return self.kinds[_F[field]]

    def ids(self, field: str) -> np.ndarray:
        """String ids of a string field, -1 where absent or null."""
        return np.where(self.kind(field) == scan.K_STR, self.values[_F[field]], -1)

    def is_in(self, ids: np.ndarray, wanted: set[Any] | frozenset[Any]) -> np.ndarray:
        """Mask of the string ids whose string is in ``wanted`` (-1: None)."""
        return np.array([t in wanted for t in self.texts] + [None in wanted], bool)[ids]

    def scaled(self, field: str, factor: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``round(v * factor)`` of a number field exactly as Python computes it (0 if absent), where set, where < 0."""
        kind = self.kind(field)
        out, negative, fits = scan.scaled(kind, self.values[_F[field]], self.floats[_F[field]], factor, _LIMIT)
        if not fits:
            raise Irregular
        return out, kind != scan.K_NONE, negative

    def python_value(self, row: int) -> Any:
        """The Python value of stat row ``row``, as json.loads gives it."""
        kind, a = int(self.s[scan.S_KIND][row]), int(self.s[scan.S_A][row])
        if kind == scan.V_INT:
            return a
        if kind == scan.V_STR:
            return self.texts[a]
        if kind == scan.V_FLOAT:
            return float(self.stat_floats[row])
        if kind in (scan.V_TRUE, scan.V_FALSE, scan.V_NULL):
            return {scan.V_TRUE: True, scan.V_FALSE: False, scan.V_NULL: None}[kind]
        return self.parsed(a)

    def parsed(self, sid: int) -> Any:
        """json.loads of the JSON text ``sid`` (a huge int, a list, an object), each distinct text once."""
        if sid not in self._parsed:
            self._parsed[sid] = msgspec.json.decode(self.texts[sid])
        return self._parsed[sid]

    def prepare(self) -> None:
        """Everything that may still find the trace :class:`Irregular`, then the scan's event arrays are freed:
        :meth:`batches` builds the rest, failing only where the reference path would fail too (an OverflowError
        of a value past int64 in a column both take through the same helpers)."""
        ph = self.ids("ph")
        is_meta, is_flow = self.is_in(ph, {"M"}), self.is_in(ph, {"s", "t", "f"})
        is_timed, is_x = self.is_in(ph, {"X", "i", "I"}), self.is_in(ph, {"X"})
        ts_ns, has_ts, _ = self.scaled("ts", 1000)  # µs to integer ns
        dur_ps, _, negative = self.scaled("dur", 1_000_000)
        timed = is_timed & has_ts
        if not timed.any():
            raise Irregular  # the reference path raises the error that says so
        track_of_row = self._layout(is_meta, timed | is_flow, timed)
        first_ns = int(ts_ns[timed].min())
        self.start_ns = first_ns + (common.to_int(self.trace.get("baseTimeNanoseconds")) or 0)
        rel_ns = ts_ns - first_ns
        if np.any(np.abs(rel_ns[timed | is_flow]) >= _LIMIT // 1000):
            raise Irregular
        start_ps = rel_ns * 1000

        flows = is_flow & has_ts & (self.kind("id") == scan.K_INT)
        self._count_drops(ph, [
            (~(is_meta | is_flow | is_timed), "events of phase {!r} (not X, i, s, t, f or M)"),
            (is_flow & ~flows, "{} flow events without id, ts or a known thread"),
            (is_timed & ~has_ts, "{} events without a numeric ts"),
            (is_timed & has_ts & is_x & negative, "X events without a numeric, non-negative dur"),
        ])
        self._keep(np.flatnonzero(timed & ~(is_x & negative)), track_of_row, start_ps, np.where(is_x, dur_ps, 0))
        self.tables = {"counters": self._counters()}
        self.phases = ph[self.kept]
        self.flow_rows = np.flatnonzero(flows)
        self.flow_tracks, self.flow_ts = track_of_row[self.flow_rows], start_ps[self.flow_rows]
        self.end_ps = int((self.ev_start + self.ev_dur).max(initial=0))
        self.promoted = self.correlation_rows[(self.correlation_rows >= 0) & _valid(self.ev_correlation)]

    def batches(self) -> Iterator[tuple[str, pa.RecordBatch]]:
        """The tables, events first (the writer encodes them while the GPU tables are built), event_stats in slices
        that the writer can write (and free) one by one."""
        yield from (("events", batch) for batch in self._events_table().to_batches())
        # The last reader of the scan's event arrays, then what else is needed of them: they can go.
        self.tables["flows"] = self._flows()
        self.args_first = np.where(self.kind("args")[self.kept] == scan.K_OBJECT, self.values[_F["args"], self.kept], 0)
        self.args_count = self.arg_count[self.kept]
        del self.kinds, self.values, self.arg_count, self.floats, self.flow_rows, self.flow_tracks, self.flow_ts
        # In the order the tail yields them.
        self.tables = {"kernels": self._kernels(), "memcpys": self._memcpys(), "api_calls": self._api_calls(),
                       **self.tables}
        for name in ("ev_device", "ev_track", "ev_start", "ev_dur", "ev_cat", "ev_name", "ev_correlation"):
            delattr(self, name)
        yield from (("event_stats", batch) for batch in self._stats())
        del self.s, self.stat_floats, self.stat_event  # the scan's arg arrays
        yield from common.tail(self.trace, self.layout, self.tables, start_ns=self.start_ns, end_ps=self.end_ps,
                               n_events=len(self.kept), dropped=self.dropped)

    def _layout(self, is_meta: np.ndarray, on_tracks: np.ndarray, timed: np.ndarray) -> np.ndarray:
        """Devices and tracks (``self.layout``) as the reference path orders them; the track of each event row."""
        pair_of, pair_first = scan.intern_pairs(self.kind("pid"), self.values[_F["pid"]],
                                                self.kind("tid"), self.values[_F["tid"]])
        pairs = [(self.value("pid", row), self.value("tid", row)) for row in pair_first.tolist()]
        metadata = common.process_metadata(
            (self.text(row, "name"), *pairs[pair_of[row]], self.args_dict(row)) for row in np.flatnonzero(is_meta).tolist())
        on_gpu = timed & self.is_in(self.ids("cat"), common.GPU_CATEGORIES)
        gpu_pids = {pairs[p][0] for p in np.unique(pair_of[on_gpu]).tolist()}
        unique, first = np.unique(pair_of[on_tracks], return_index=True)  # tracks in order of first event
        track_order = dict.fromkeys(pairs[p] for p in unique[np.argsort(first)].tolist())
        self.layout = common.layout(self.trace, gpu_pids=gpu_pids, metadata=metadata, track_order=track_order,
                                    source=self.source)
        return np.array([self.layout.track_of.get(p, -1) for p in pairs], np.int32)[pair_of]

    def _keep(self, kept: np.ndarray, track_of_row: np.ndarray, start_ps: np.ndarray, dur_ps: np.ndarray) -> None:
        """The columns of the events that become ``events`` rows (event id: position in ``kept``)."""
        self.kept = kept
        self.ev_track = track_of_row[kept]
        self.ev_device = np.array([row[0] for row in self.layout.track_rows], np.int32)[self.ev_track]
        self.ev_start, self.ev_dur = start_ps[kept], dur_ps[kept]
        self.ev_cat = self.ids("cat")[kept]
        self.ev_name = _dictionary(self.ids("name")[kept], self.strings)
        event_of_row = np.full(self.kinds.shape[1], -1, np.int32)
        event_of_row[kept] = np.arange(len(kept))
        self.stat_event = event_of_row[self.s[scan.S_OWNER]]  # -1: the arg of an event not kept
        self.correlation_rows = self.arg_rows("correlation", np.arange(len(kept)))
        self.ev_correlation = self.arg_ints(self.correlation_rows)
        counts = np.bincount(self.ev_track, minlength=len(self.layout.track_rows))
        for track_id, count in enumerate(counts.tolist()):
            self.layout.track_rows[track_id][8] = count

    def _events_table(self) -> pa.Table:
        n_events = len(self.kept)
        category = _dictionary(self.ev_cat, self.strings)
        return common.events_table({
            "event_id": pa.array(np.arange(n_events, dtype=np.int64)), "device_id": pa.array(self.ev_device),
            "track_id": pa.array(self.ev_track), "name": self.ev_name,
            "start_ps": pa.array(self.ev_start), "dur_ps": pa.array(self.ev_dur),
            "correlation_id": self.ev_correlation, "category": category,
        }, n_events)

    def value(self, field: str, row: int) -> Any:
        """Python value of a pid or tid (int, str or None) of event row ``row``."""
        kind, a = int(self.kinds[_F[field], row]), int(self.values[_F[field], row])
        return a if kind == scan.K_INT else self.texts[a] if kind == scan.K_STR else None

    def text(self, row: int, field: str) -> str | None:
        return self.texts[int(self.values[_F[field], row])] if self.kinds[_F[field], row] == scan.K_STR else None

    def args_dict(self, row: int) -> dict[str, Any] | None:
        """The args of event row ``row`` as json.loads gives them (None if it has none)."""
        if self.kind("args")[row] != scan.K_OBJECT:
            return None
        first, count = int(self.values[_F["args"], row]), int(self.arg_count[row])
        return {self.texts[int(self.s[scan.S_KEY][r])]: self.python_value(r) for r in range(first, first + count)}

    def _count_drops(self, ph: np.ndarray, reasons: list[tuple[np.ndarray, str]]) -> None:
        for mask, reason in reasons:
            ids, counts = np.unique(ph[mask], return_counts=True)
            for sid, n in zip(ids.tolist(), counts.tolist()):
                self.dropped[reason.format(self.texts[sid])] += n

    def _where(self, categories: set[str]) -> np.ndarray:
        """Kept events (event ids) of these categories."""
        return np.flatnonzero(self.is_in(self.ev_cat, categories))

    def arg_rows(self, key: str, index: np.ndarray) -> np.ndarray:
        """Stat row of arg ``key`` of each event id in ``index``, -1 where it has none."""
        if key not in self._key_ids:
            return np.full(len(index), -1, np.int64)
        return scan.arg_rows(self.s[scan.S_KEY], self.stat_event, self._key_ids[key], len(self.kept), index)

    def stat_column(self, column: int, rows: np.ndarray, default: int) -> np.ndarray:
        """Row ``column`` (scan.S_*) of the stat rows ``rows``, ``default`` for -1."""
        if len(self.s[column]) == 0:
            return np.full(len(rows), default, np.int64)
        return np.where(rows >= 0, self.s[column][np.maximum(rows, 0)], default).astype(np.int64)

    def arg_ints(self, rows: np.ndarray) -> pa.Array:
        """``to_int`` of the arg in each stat row (None for -1) as int64, plain ints in bulk."""
        kinds = self.stat_column(scan.S_KIND, rows, scan.V_NULL)
        values = self.stat_column(scan.S_A, rows, 0)
        array = pa.array(values, mask=kinds != scan.V_INT)
        odd = np.flatnonzero((kinds == scan.V_STR) | (kinds == scan.V_FLOAT) | (kinds == scan.V_BIGINT))
        if len(odd):  # "7", 7.0, 2**70: to_int decides, one by one
            replaced = [common.to_int(self.python_value(int(rows[i]))) for i in odd.tolist()]
            array = pa.array(np.where(kinds == scan.V_INT, values, 0), mask=kinds != scan.V_INT).to_pylist()
            for i, value in zip(odd.tolist(), replaced):
                array[i] = value
            array = pa.array(array, pa.int64())
        return array

    def arg_floats(self, rows: np.ndarray) -> pa.Array:
        """``to_float`` of the arg in each stat row (None for -1), as float64."""
        kinds, a = self.stat_column(scan.S_KIND, rows, scan.V_NULL), self.stat_column(scan.S_A, rows, 0)
        values = a.astype(np.float64)  # ints: rounded to the nearest double, as float() does
        floats = np.flatnonzero(kinds == scan.V_FLOAT)
        values[floats] = self.stat_floats[rows[floats]]
        for i in np.flatnonzero(kinds == scan.V_BIGINT).tolist():
            values[i] = float(self.parsed(int(a[i])))
        return pa.array(values, mask=(kinds != scan.V_INT) & (kinds != scan.V_FLOAT) & (kinds != scan.V_BIGINT))

    def arg_triples(self, rows: np.ndarray) -> list[pa.Array]:
        """``triple`` of the arg in each stat row (lists such as grid [160, 1, 1]) as three int64 columns, each
        distinct text parsed once; other kinds give no triple."""
        kinds = self.stat_column(scan.S_KIND, rows, scan.V_NULL)
        ids = np.where(kinds == scan.V_JSON, self.stat_column(scan.S_A, rows, 0), -1)
        distinct, inverse = np.unique(ids, return_inverse=True)
        triples = [common.triple(self.parsed(sid)) if sid >= 0 else (None, None, None) for sid in distinct.tolist()]
        take = pa.array(inverse.reshape(-1))
        return [pa.array([t[axis] for t in triples], pa.int64()).take(take) for axis in range(3)]

    def _stream(self, index: np.ndarray) -> pa.Array:
        """The args' stream, else the stream of the event's track."""
        track_stream = pa.array([row[10] for row in self.layout.track_rows], pa.int64())
        return pc.coalesce(self.arg_ints(self.arg_rows("stream", index)), track_stream.take(pa.array(self.ev_track[index])))

    def _event_columns(self, index: np.ndarray) -> dict[str, pa.Array]:
        take = pa.array(index)
        return {"event_id": take, "device_id": pa.array(self.ev_device[index]), "track_id": pa.array(self.ev_track[index]),
                "start_ps": pa.array(self.ev_start[index]), "dur_ps": pa.array(self.ev_dur[index]),
                "correlation_id": self.ev_correlation.take(take), "name": self.ev_name.take(take)}

    def _kernels(self) -> pa.RecordBatch:
        index = self._where({"kernel"})
        columns = self._event_columns(index)
        columns["stream_id"] = self._stream(index)
        for axis in ("grid", "block"):
            for values, suffix in zip(self.arg_triples(self.arg_rows(axis, index)), "xyz"):
                columns[f"{axis}_{suffix}"] = values
        columns["registers_per_thread"] = self.arg_ints(self.arg_rows("registers per thread", index))
        columns["shared_memory_bytes"] = self.arg_ints(self.arg_rows("shared memory", index))
        columns["occupancy_pct"] = self.arg_floats(self.arg_rows("est. achieved occupancy %", index))
        columns["framework_op"] = self._framework_ops(self.arg_ints(self.arg_rows("External id", index)))
        return _record_batch("kernels", columns)

    def _framework_ops(self, externals: pa.Array) -> pa.Array:
        """The cpu_op of each External id: the innermost (shortest, the first of equals) of those sharing it."""
        ops = self._where({"cpu_op"})
        op_names = self.ev_name.take(pa.array(ops))
        op_ext = self.arg_ints(self.arg_rows("External id", ops))
        usable = np.flatnonzero(_valid(op_ext) & _valid(op_names))
        ext = op_ext.to_numpy(zero_copy_only=False)[usable].astype(np.int64)
        order = np.lexsort((usable, self.ev_dur[ops[usable]], ext))  # by External id, then dur, then file order
        ext, first = np.unique(ext[order], return_index=True)
        found = pc.index_in(externals, pa.array(ext, pa.int64()))
        return op_names.take(pa.array(usable[order][first], pa.int64())).take(found)

    def _memcpys(self) -> pa.RecordBatch:
        index = self._where({"gpu_memcpy", "gpu_memset"})
        # copy_kind of each distinct (name, kind arg, memset): a copy's name and kind repeat, copies do not.
        rows = self.arg_rows("kind", index)
        names = self.ev_name.indices.take(pa.array(index)).fill_null(-1).to_numpy()
        key = np.stack([names, self.stat_column(scan.S_KIND, rows, -1), self.stat_column(scan.S_A, rows, 0),
                        self.is_in(self.ev_cat[index], {"gpu_memset"})], axis=1)
        distinct, first, inverse = np.unique(key, axis=0, return_index=True, return_inverse=True)
        kinds = [common.copy_kind(self.ev_name.dictionary[name].as_py() if name >= 0 else "",
                                  {} if rows[i] < 0 else {"kind": self.python_value(int(rows[i]))}, is_memset=bool(memset))
                 for (name, _, _, memset), i in zip(distinct.tolist(), first.tolist())]
        kinds = [kinds[i] for i in inverse.reshape(-1).tolist()]
        columns = self._event_columns(index)
        del columns["name"]
        columns["stream_id"] = self._stream(index)
        columns["bytes"] = self.arg_ints(self.arg_rows("bytes", index))
        for name, values in zip(("kind", "src_kind", "dst_kind"), zip(*kinds) if kinds else [()] * 3):
            columns[name] = pa.array(values, pa.string())
        return _record_batch("memcpys", columns)

    def _api_calls(self) -> pa.RecordBatch:
        index = self._where(set(common.API_CATEGORIES))
        columns = self._event_columns(index)
        thread_names = pa.array([row[4] for row in self.layout.track_rows], pa.string())
        columns["thread"] = thread_names.take(pa.array(self.ev_track[index]))
        api = pa.array([common.API_CATEGORIES.get(t) for t in self.texts] + [None], pa.string())
        columns["api"] = api.take(pa.array(self.ev_cat[index]))
        return _record_batch("api_calls", columns)

    def _counters(self) -> pa.RecordBatch:
        rows = []
        n_range = 0
        for i in self._where({"cuda_profiler_range", PM_SAMPLING_CATEGORY}).tolist():  # in event order
            device, start, dur = int(self.ev_device[i]), int(self.ev_start[i]), int(self.ev_dur[i])
            args = self.args_dict(int(self.kept[i])) or {}
            if self.texts[self.ev_cat[i]] == PM_SAMPLING_CATEGORY:
                rows.extend(pm_sampling_rows(i, device, args, start_ps=start, end_ps=start + dur))
                continue
            rows.extend(common.counter_rows(i, device, self.ev_name[i].as_py(), n_range, start, dur, args))
            n_range += 1
        return common.batch("counters", rows)

    def _flows(self) -> pa.RecordBatch:
        def strings(field: str) -> pa.Array:
            ids = self.ids(field)[self.flow_rows]
            return self.strings.take(pa.array(ids, mask=ids < 0))

        return _record_batch("flows", {
            "flow_id": pa.array(self.values[_F["id"], self.flow_rows]), "category": strings("cat"),
            "phase": strings("ph"), "track_id": pa.array(self.flow_tracks), "ts_ps": pa.array(self.flow_ts),
            "binding_point": strings("bp"),
        })

    def _stats(self) -> Iterator[pa.RecordBatch]:
        """event_stats: every arg of every event in file order, then ``ph`` of non-X events, less promoted
        correlations; in slices of about a row group, so that no column is ever whole."""
        keep = self.stat_event >= 0
        keep[self.promoted] = False
        instant = ~self.is_in(self.phases, {"X"})
        ends = np.cumsum(np.bincount(self.stat_event[keep], minlength=len(self.kept)) + instant)
        cuts = np.searchsorted(ends, np.arange(ROW_GROUP_ROWS, ends[-1] if len(ends) else 0, ROW_GROUP_ROWS), "right")
        bounds = np.unique(np.concatenate([[0], cuts, [len(self.kept)]])).tolist()
        for lo, hi in itertools.pairwise(bounds) if len(bounds) > 1 else [(0, 0)]:
            yield self._stat_slice(lo, hi, keep, instant)

    def _stat_slice(self, lo: int, hi: int, keep: np.ndarray, instant: np.ndarray) -> pa.RecordBatch:
        """event_stats rows of the kept events ``lo`` .. ``hi``."""
        owner, key, value_type, ints, doubles, string, source = scan.stat_rows(
            self.args_first[lo:hi], self.args_count[lo:hi], instant[lo:hi], self.phases[lo:hi], self.s[scan.S_KEY],
            self.s[scan.S_KIND], self.s[scan.S_A], self.stat_floats, keep)
        owner += lo
        # Nulls, huge ints, lists and objects: stat_row types each distinct text once.
        odd = np.flatnonzero(value_type == scan.T_ODD)
        rows = source[odd]
        texts_of = np.where(self.s[scan.S_KIND][rows] == scan.V_NULL, -1, self.s[scan.S_A][rows])
        distinct, inverse = np.unique(texts_of, return_inverse=True)
        typed = [common.stat_row((), "", None if sid < 0 else self.parsed(sid)) for sid in distinct.tolist()]
        value_type[odd] = np.array([_KINDS.index(row[1]) for row in typed], np.int8)[inverse]
        uints = np.zeros(len(owner), np.uint64)
        has_uint = np.zeros(len(owner), bool)
        has_uint[odd] = np.array([row[3] is not None for row in typed], bool)[inverse]
        uints[odd] = np.array([row[3] or 0 for row in typed], np.uint64)[inverse]
        extra = ["ph"] + [row[5] for row in typed]  # texts the strings do not hold, ids after theirs
        string[odd] = np.array([-1 if row[5] is None else len(self.texts) + 1 + i for i, row in enumerate(typed)],
                               np.int64)[inverse]
        texts = pa.concat_arrays([self.strings, pa.array(extra, pa.string())])
        columns = [
            pa.array(owner), _dictionary(np.where(key < 0, len(self.texts), key), texts),
            _dictionary(value_type.astype(np.int64), pa.array(_KINDS)),
            pa.array(ints, mask=value_type != scan.T_INT), pa.array(uints, mask=~has_uint),
            pa.array(doubles, mask=value_type != scan.T_DOUBLE),
            texts.take(pa.array(string, mask=string < 0)), pa.nulls(len(owner), pa.binary()),
        ]
        return pa.RecordBatch.from_arrays(columns, schema=TABLES["event_stats"])


def _dictionary(ids: np.ndarray, texts: pa.Array) -> pa.DictionaryArray:
    """texts[ids] (-1: null) dictionary-encoded, the dictionary in order of first appearance, as
    ``dictionary_encode`` makes it (the reference path's dictionaries, not only its values)."""
    codes, order = scan.first_appearance(ids, len(texts))
    return pa.DictionaryArray.from_arrays(pa.array(codes, mask=codes < 0), texts.take(pa.array(order)))


def _record_batch(table: str, columns: dict[str, pa.Array]) -> pa.RecordBatch:
    """A batch of ``table`` from named columns (all of one length); missing columns are null."""
    schema = TABLES[table]
    n = len(next(iter(columns.values())))
    arrays = []
    for field in schema:
        array = columns.get(field.name, pa.nulls(n, pa.string() if pa.types.is_dictionary(field.type) else field.type))
        if pa.types.is_dictionary(array.type):  # a subset of a column: its own dictionary, as the reference's
            indices = array.indices.fill_null(-1).to_numpy().astype(np.int64)
            arrays.append(_dictionary(indices, array.dictionary))
        elif pa.types.is_dictionary(field.type):
            arrays.append(array.cast(pa.string()).dictionary_encode())
        else:
            arrays.append(array.cast(field.type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)
