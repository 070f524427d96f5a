"""The compiled XSpace wire walk behind :func:`xprosql.ingest.xspace_wire.read_raw_fast`.

Field numbers are those of ``xprosql/protos/xplane.proto``. The walk runs twice
over the bytes: once to count planes, lines, events and stats (:func:`count`),
once to fill arrays of exactly that size (:func:`decode`). Malformed input
raises ValueError.

Speed: fields are matched on their whole key (field number << 3 | wire type),
and the readers below never raise: a malformed varint or length returns the
position ``_BAD``, which the walk's one bounds check per field then reports.
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["count", "decode", "text", "text_size"]

_BAD = np.int64(1) << np.int64(62)  # past any message end: where a malformed read leaves the position


@njit(cache=True, inline="always")
def _varint(buf, pos, end):
    """The varint at ``pos`` (at most 10 bytes, ending before ``end``) and the position after it, else _BAD."""
    if pos < end and buf[pos] < 0x80:  # most varints here are tags and small ids: one byte
        return np.uint64(buf[pos]), pos + 1
    result = np.uint64(0)
    shift = 0
    while pos < end and shift < 70:
        byte = buf[pos]
        pos += 1
        result |= np.uint64(byte & 0x7F) << np.uint64(shift)
        if byte < 0x80:
            return result, pos
        shift += 7
    return result, _BAD


@njit(cache=True, inline="always")
def _after(buf, pos, end, wire):
    """The position after a field's value of this wire type, or _BAD (groups, bad wire types, past ``end``)."""
    if wire == 0:
        _, pos = _varint(buf, pos, end)
    elif wire == 2:
        size, pos = _varint(buf, pos, end)
        if pos <= end:
            pos = pos + np.int64(size) if size <= np.uint64(end - pos) else _BAD
    elif wire == 1:
        pos += 8
    elif wire == 5:
        pos += 4
    else:
        pos = _BAD
    return pos if pos <= end else _BAD


@njit(cache=True)
def _fail(pos, end):
    raise ValueError("malformed field: truncated, longer than its message, or of an unsupported wire type")


@njit(cache=True)
def _walk(buf, fill, plane_ranges, plane_skips, line_plane, line_ints, line_text, event_ints, event_aggregate,
          stat_mid, stat_kind, stat_int, stat_double, space_text):
    n_planes = n_skips = n_lines = n_events = n_stats = n_text = 0
    scratch = np.zeros(1, dtype=np.uint64)
    as_double = scratch.view(np.float64)
    as_int = stat_double.view(np.int64)
    end = len(buf)
    pos = 0
    while pos < end:
        key, pos = _varint(buf, pos, end)
        if pos > end:
            _fail(pos, end)
        wire = key & np.uint64(7)
        if key == 10:  # XSpace.planes
            size, p = _varint(buf, pos, end)
            if p > end or size > np.uint64(end - p):
                _fail(p, end)
            p_end = p + np.int64(size)
            if fill:
                plane_ranges[n_planes, 0] = p
                plane_ranges[n_planes, 1] = p_end
            while p < p_end:
                f_start = p
                key, p = _varint(buf, p, p_end)
                if p > p_end:
                    _fail(p, p_end)
                if key != 26:  # not XPlane.lines: parsed later by protobuf
                    p = _after(buf, p, p_end, key & np.uint64(7))
                    if p > p_end:
                        _fail(p, p_end)
                    continue
                size, q = _varint(buf, p, p_end)
                if q > p_end or size > np.uint64(p_end - q):
                    _fail(q, p_end)
                l_end = q + np.int64(size)
                if fill:
                    plane_skips[n_skips, 0] = n_planes
                    plane_skips[n_skips, 1] = f_start
                    plane_skips[n_skips, 2] = l_end
                    line_plane[n_lines] = n_planes
                n_skips += 1
                first_event = n_events
                while q < l_end:
                    key, q = _varint(buf, q, l_end)
                    if q > l_end:
                        _fail(q, l_end)
                    if key == 34:  # XLine.events
                        size, r = _varint(buf, q, l_end)
                        if r > l_end or size > np.uint64(l_end - r):
                            _fail(r, l_end)
                        e_end = r + np.int64(size)
                        first_stat = n_stats
                        if fill:  # the arrays are uninitialised: unset fields read 0
                            event_ints[0:4, n_events] = 0
                            event_aggregate[n_events] = False
                        while r < e_end:
                            key, r = _varint(buf, r, e_end)
                            if r > e_end:
                                _fail(r, e_end)
                            if key == 34:  # XEvent.stats
                                size, t = _varint(buf, r, e_end)
                                if t > e_end or size > np.uint64(e_end - t):
                                    _fail(t, e_end)
                                s_end = t + np.int64(size)
                                if not fill:  # counting: a stat's fields are read only when filling
                                    n_stats += 1
                                    r = s_end
                                    continue
                                stat_mid[n_stats] = 0
                                stat_kind[n_stats] = 0
                                stat_int[n_stats] = 0
                                stat_double[n_stats] = 0.0
                                while t < s_end:
                                    key, t = _varint(buf, t, s_end)
                                    if t > s_end:
                                        _fail(t, s_end)
                                    wire = key & np.uint64(7)
                                    field = np.int64(key >> np.uint64(3))
                                    if wire == 0 and (field == 1 or field == 3 or field == 4 or field == 7):
                                        value, t = _varint(buf, t, s_end)
                                        if field == 1:
                                            stat_mid[n_stats] = np.int64(value)
                                        else:
                                            stat_kind[n_stats] = field
                                            stat_int[n_stats] = np.int64(value)
                                            stat_double[n_stats] = 0.0
                                    elif key == 17:  # double_value
                                        if t + 8 > s_end:
                                            _fail(t, s_end)
                                        bits = np.uint64(0)
                                        for i in range(8):
                                            bits |= np.uint64(buf[t + i]) << np.uint64(8 * i)
                                        t += 8
                                        scratch[0] = bits
                                        stat_kind[n_stats] = 2
                                        stat_double[n_stats] = as_double[0]
                                        stat_int[n_stats] = 0
                                    elif key == 42 or key == 50:  # str_value, bytes_value
                                        size, v = _varint(buf, t, s_end)
                                        if v > s_end or size > np.uint64(s_end - v):
                                            _fail(v, s_end)
                                        t = v + np.int64(size)
                                        stat_kind[n_stats] = field
                                        stat_int[n_stats] = v  # the value's bytes, until text() gathers them
                                        as_int[n_stats] = t
                                    else:
                                        t = _after(buf, t, s_end, wire)
                                    if t > s_end:
                                        _fail(t, s_end)
                                n_stats += 1
                                r = s_end
                            elif fill and key == 8:  # metadata_id
                                value, r = _varint(buf, r, e_end)
                                event_ints[0, n_events] = np.int64(value)
                            elif fill and key == 16:  # offset_ps: the oneof now holds a start
                                value, r = _varint(buf, r, e_end)
                                event_ints[1, n_events] = np.int64(value)
                                event_ints[2, n_events] = 0
                                event_aggregate[n_events] = False
                            elif fill and key == 40:  # num_occurrences: an aggregated event
                                value, r = _varint(buf, r, e_end)
                                event_ints[2, n_events] = np.int64(value)
                                event_ints[1, n_events] = 0
                                event_aggregate[n_events] = True
                            elif fill and key == 24:  # duration_ps
                                value, r = _varint(buf, r, e_end)
                                event_ints[3, n_events] = np.int64(value)
                            else:
                                r = _after(buf, r, e_end, key & np.uint64(7))
                            if r > e_end:
                                _fail(r, e_end)
                        if fill:
                            event_ints[4, n_events] = n_stats - first_stat
                        n_events += 1
                        q = e_end
                    elif fill and (key == 8 or key == 80 or key == 24 or key == 72):  # id, display_id, timestamp, duration
                        value, q = _varint(buf, q, l_end)
                        column = 0 if key == 8 else 1 if key == 80 else 2 if key == 24 else 3
                        line_ints[n_lines, column] = np.int64(value)
                    elif fill and (key == 18 or key == 90):  # name, display_name
                        size, s = _varint(buf, q, l_end)
                        if s > l_end or size > np.uint64(l_end - s):
                            _fail(s, l_end)
                        q = s + np.int64(size)
                        column = 0 if key == 18 else 2
                        line_text[n_lines, column] = s
                        line_text[n_lines, column + 1] = q
                    else:
                        q = _after(buf, q, l_end, key & np.uint64(7))
                    if q > l_end:
                        _fail(q, l_end)
                if fill:
                    line_ints[n_lines, 4] = n_events - first_event
                n_lines += 1
                p = l_end
            n_planes += 1
            pos = p_end
        elif key == 18 or key == 26 or key == 34:  # errors, warnings, hostnames
            size, s = _varint(buf, pos, end)
            if s > end or size > np.uint64(end - s):
                _fail(s, end)
            pos = s + np.int64(size)
            if fill:
                space_text[n_text, 0] = np.int64(key >> np.uint64(3))
                space_text[n_text, 1] = s
                space_text[n_text, 2] = pos
            n_text += 1
        else:
            pos = _after(buf, pos, end, wire)
            if pos > end:
                _fail(pos, end)
    return np.array([n_planes, n_skips, n_lines, n_events, n_stats, n_text], dtype=np.int64)


@njit(cache=True)
def _allocate(counts):
    """Arrays for the fill walk. The per-event and per-stat ones are left uninitialised: the walk sets every entry."""
    n_planes, n_skips, n_lines, n_events, n_stats, n_text = counts
    return (
        np.zeros((n_planes, 2), np.int64), np.zeros((n_skips, 3), np.int64), np.zeros(n_lines, np.int32),
        np.zeros((n_lines, 5), np.int64), np.zeros((n_lines, 4), np.int64), np.empty((5, n_events), np.int64),
        np.empty(n_events, np.bool_), np.empty(n_stats, np.int64), np.empty(n_stats, np.int8),
        np.empty(n_stats, np.int64), np.empty(n_stats, np.float64), np.zeros((n_text, 3), np.int64),
    )


def count(buf: np.ndarray) -> np.ndarray:
    """Planes, line fields, lines, events, stats and space strings in the file (the first, cheap walk)."""
    return _walk(buf, False, *_allocate(np.zeros(6, np.int64)))


def decode(buf: np.ndarray, counts: np.ndarray) -> tuple:
    """Allocate and fill what :func:`count` counted. Returns the arrays :func:`read_raw_fast` names.

    A str or bytes stat's value is left as its byte range in its int (start) and double (end) slots: see :func:`text`.
    """
    arrays = _allocate(counts)
    _walk(buf, True, *arrays)
    return arrays


@njit(cache=True)
def text_size(kind, starts, ends_bits):
    """Bytes of all str and bytes stat values (their ranges as :func:`decode` leaves them)."""
    ends = ends_bits.view(np.int64)
    total = 0
    for i in range(len(kind)):
        if kind[i] == 5 or kind[i] == 6:
            total += ends[i] - starts[i]
    return total


@njit(cache=True)
def text(buf, kind, starts, ends_bits, offsets):
    """The str and bytes stat values as an Arrow binary array's offsets (filled in) and data (returned).

    Their int and double slots, which held the byte ranges, are set back to 0.
    """
    ends = ends_bits.view(np.int64)
    out = np.empty(text_size(kind, starts, ends_bits), dtype=np.uint8)
    at = 0
    offsets[0] = 0
    for i in range(len(kind)):
        if kind[i] == 5 or kind[i] == 6:
            length = ends[i] - starts[i]
            out[at : at + length] = buf[starts[i] : ends[i]]
            at += length
            starts[i] = 0
            ends[i] = 0
        offsets[i + 1] = at
    return out
