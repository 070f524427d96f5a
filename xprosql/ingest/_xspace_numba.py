"""The compiled XSpace wire walk behind :func:`xprosql.ingest.xspace_wire.read_raw_fast`.

Field numbers are those of ``xprosql/protos/xplane.proto``. The walk runs twice
over the bytes: once to count planes, lines, events and stats, once to fill
arrays of exactly that size. Malformed input raises ValueError.
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["decode", "gather"]


@njit(cache=True, inline="always")
def _varint(buf, pos, end):
    if pos < end and buf[pos] < 0x80:  # most varints here are tags and small ids: one byte
        return np.uint64(buf[pos]), pos + 1
    result = np.uint64(0)
    shift = 0
    while True:
        if pos >= end:
            raise ValueError("truncated varint")
        byte = buf[pos]
        pos += 1
        if shift < 64:
            result |= np.uint64(byte & 0x7F) << np.uint64(shift)
        if byte < 0x80:
            return result, pos
        shift += 7
        if shift >= 70:
            raise ValueError("varint longer than 10 bytes")


@njit(cache=True, inline="always")
def _length(buf, pos, end):
    """A length-delimited field's payload range."""
    size, pos = _varint(buf, pos, end)
    stop = pos + np.int64(size)
    if size > np.uint64(end - pos):
        raise ValueError("length-delimited field runs past the end of its message")
    return pos, stop


@njit(cache=True, inline="always")
def _skip(buf, pos, end, wire):
    if wire == 0:
        _, pos = _varint(buf, pos, end)
        return pos
    if wire == 1:
        pos += 8
    elif wire == 5:
        pos += 4
    elif wire == 2:
        _, pos = _length(buf, pos, end)
    else:
        raise ValueError("unsupported wire type (groups or corrupt data)")
    if pos > end:
        raise ValueError("fixed-width field runs past the end of its message")
    return pos


@njit(cache=True)
def _walk(buf, fill, plane_ranges, plane_skips, line_plane, line_ints, line_text, event_ints, event_aggregate,
          stat_mid, stat_kind, stat_int, stat_double, stat_span, space_text):
    counts = np.zeros(6, dtype=np.int64)  # planes, skips, lines, events, stats, space strings
    scratch = np.zeros(1, dtype=np.uint64)
    as_double = scratch.view(np.float64)
    end = len(buf)
    pos = 0
    while pos < end:
        key, pos = _varint(buf, pos, end)
        field = np.int64(key >> np.uint64(3))
        wire = np.int64(key & np.uint64(7))
        if field == 1 and wire == 2:
            p_start, p_end = _length(buf, pos, end)
            plane = counts[0]
            if fill:
                plane_ranges[plane, 0] = p_start
                plane_ranges[plane, 1] = p_end
            p = p_start
            while p < p_end:
                f_start = p
                key, p = _varint(buf, p, p_end)
                field = np.int64(key >> np.uint64(3))
                wire = np.int64(key & np.uint64(7))
                if not (field == 3 and wire == 2):
                    p = _skip(buf, p, p_end, wire)
                    continue
                l_start, l_end = _length(buf, p, p_end)
                if fill:
                    plane_skips[counts[1], 0] = plane
                    plane_skips[counts[1], 1] = f_start
                    plane_skips[counts[1], 2] = l_end
                    line_plane[counts[2]] = plane
                counts[1] += 1
                line = counts[2]
                n_line_events = 0
                q = l_start
                while q < l_end:
                    key, q = _varint(buf, q, l_end)
                    field = np.int64(key >> np.uint64(3))
                    wire = np.int64(key & np.uint64(7))
                    if wire == 0 and field in (1, 10, 3, 9):
                        value, q = _varint(buf, q, l_end)
                        if fill:
                            column = 0 if field == 1 else 1 if field == 10 else 2 if field == 3 else 3
                            line_ints[line, column] = np.int64(value)
                    elif wire == 2 and (field == 2 or field == 11):
                        s, q = _length(buf, q, l_end)
                        if fill:
                            column = 0 if field == 2 else 2
                            line_text[line, column] = s
                            line_text[line, column + 1] = q
                    elif wire == 2 and field == 4:
                        e_start, e_end = _length(buf, q, l_end)
                        event = counts[3]
                        n_event_stats = 0
                        r = e_start
                        while r < e_end:
                            key, r = _varint(buf, r, e_end)
                            field = np.int64(key >> np.uint64(3))
                            wire = np.int64(key & np.uint64(7))
                            if wire == 0 and field in (1, 2, 3, 5):
                                value, r = _varint(buf, r, e_end)
                                if fill:
                                    if field == 1:
                                        event_ints[event, 0] = np.int64(value)
                                    elif field == 2:  # offset_ps: the oneof now holds a start
                                        event_ints[event, 1] = np.int64(value)
                                        event_ints[event, 2] = 0
                                        event_aggregate[event] = False
                                    elif field == 5:  # num_occurrences: an aggregated event
                                        event_ints[event, 2] = np.int64(value)
                                        event_ints[event, 1] = 0
                                        event_aggregate[event] = True
                                    else:
                                        event_ints[event, 3] = np.int64(value)
                            elif wire == 2 and field == 4:
                                s_start, s_end = _length(buf, r, e_end)
                                stat = counts[4]
                                if not fill:  # counting: a stat's fields are read only when filling
                                    counts[4] += 1
                                    n_event_stats += 1
                                    r = s_end
                                    continue
                                t = s_start
                                while t < s_end:
                                    key, t = _varint(buf, t, s_end)
                                    field = np.int64(key >> np.uint64(3))
                                    wire = np.int64(key & np.uint64(7))
                                    if wire == 0 and field in (1, 3, 4, 7):
                                        value, t = _varint(buf, t, s_end)
                                        if fill:
                                            if field == 1:
                                                stat_mid[stat] = np.int64(value)
                                            else:
                                                stat_kind[stat] = field
                                                stat_int[stat] = np.int64(value)
                                                stat_double[stat] = 0.0
                                    elif wire == 1 and field == 2:
                                        if t + 8 > s_end:
                                            raise ValueError("truncated double")
                                        bits = np.uint64(0)
                                        for i in range(8):
                                            bits |= np.uint64(buf[t + i]) << np.uint64(8 * i)
                                        t += 8
                                        if fill:
                                            scratch[0] = bits
                                            stat_kind[stat] = 2
                                            stat_double[stat] = as_double[0]
                                            stat_int[stat] = 0
                                    elif wire == 2 and (field == 5 or field == 6):
                                        v_start, t = _length(buf, t, s_end)
                                        if fill:
                                            stat_kind[stat] = field
                                            stat_span[stat, 0] = v_start
                                            stat_span[stat, 1] = t
                                            stat_int[stat] = 0
                                            stat_double[stat] = 0.0
                                    else:
                                        t = _skip(buf, t, s_end, wire)
                                counts[4] += 1
                                n_event_stats += 1
                                r = s_end
                            else:
                                r = _skip(buf, r, e_end, wire)
                        if fill:
                            event_ints[event, 4] = n_event_stats
                        counts[3] += 1
                        n_line_events += 1
                        q = e_end
                    else:
                        q = _skip(buf, q, l_end, wire)
                if fill:
                    line_ints[line, 4] = n_line_events
                counts[2] += 1
                p = l_end
            counts[0] += 1
            pos = p_end
        elif wire == 2 and field in (2, 3, 4):  # errors, warnings, hostnames
            s, pos = _length(buf, pos, end)
            if fill:
                space_text[counts[5], 0] = field
                space_text[counts[5], 1] = s
                space_text[counts[5], 2] = pos
            counts[5] += 1
        else:
            pos = _skip(buf, pos, end, wire)
    return counts


@njit(cache=True)
def _allocate(counts):
    n_planes, n_skips, n_lines, n_events, n_stats, n_text = counts
    return (
        np.zeros((n_planes, 2), np.int64), np.zeros((n_skips, 3), np.int64), np.zeros(n_lines, np.int32),
        np.zeros((n_lines, 5), np.int64), np.zeros((n_lines, 4), np.int64), np.zeros((n_events, 5), np.int64),
        np.zeros(n_events, np.bool_), np.zeros(n_stats, np.int64), np.zeros(n_stats, np.int8),
        np.zeros(n_stats, np.int64), np.zeros(n_stats, np.float64), np.zeros((n_stats, 2), np.int64),
        np.zeros((n_text, 3), np.int64),
    )


def decode(buf: np.ndarray) -> tuple:
    """Count, allocate, fill. Returns the arrays :func:`read_raw_fast` names."""
    empty = _allocate(np.zeros(6, np.int64))
    counts = _walk(buf, False, *empty)
    arrays = _allocate(counts)
    _walk(buf, True, *arrays)
    return arrays


@njit(cache=True)
def gather(buf, spans, keep, offsets):
    """Concatenate the byte ranges ``spans[i]`` where ``keep[i]`` into one buffer (for Arrow binary arrays)."""
    out = np.empty(offsets[-1], dtype=np.uint8)
    for i in range(len(keep)):
        if keep[i]:
            start = offsets[i]
            length = spans[i, 1] - spans[i, 0]
            out[start : start + length] = buf[spans[i, 0] : spans[i, 1]]
    return out
