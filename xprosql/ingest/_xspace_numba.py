"""The compiled XSpace wire walk behind :func:`xprosql.ingest.xspace_wire.read_raw_fast`.

Field numbers are those of ``xprosql/protos/xplane.proto``. :func:`layout` walks
the whole file once without reading stats: planes, lines, each line's time extent
and where each chunk of events starts. :func:`fill` then decodes one chunk's
events and stats, so a file's events are never all in memory at once. Malformed
input raises ValueError.

Speed: fields are matched on their whole key (field number << 3 | wire type),
and the readers below never raise: a malformed varint or length returns the
position ``_BAD``, which the walk's one bounds check per field then reports.
"""

from __future__ import annotations

import numpy as np

from xprosql._numba import njit

__all__ = ["LAYOUT_FIELDS", "fill", "layout", "text", "text_size"]
_BAD = np.int64(1) << np.int64(62)  # past any message end: where a malformed read leaves the position


@njit(cache=True)
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


@njit(cache=True)
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
def _length_delimited(buf, pos, end):
    """Where the length-delimited value at ``pos`` starts and stops; stop is _BAD when it would pass ``end``."""
    size, start = _varint(buf, pos, end)
    if start > end or size > np.uint64(end - start):
        return start, _BAD
    return start, start + np.int64(size)


@njit(cache=True)
def _fail(pos, end):
    raise ValueError("malformed field: truncated, longer than its message, or of an unsupported wire type")


@njit(cache=True)
def _grown(array, used):
    """``array`` with room for one more row than ``used`` (doubling): the layout's tables are few rows."""
    if used < len(array):
        return array
    bigger = np.zeros((2 * len(array),) + array.shape[1:], array.dtype)
    bigger[: len(array)] = array
    return bigger


# What :func:`layout` returns, in order.
LAYOUT_FIELDS = ("counts", "plane_ranges", "plane_skips", "line_plane", "line_ints", "line_text", "line_range",
                 "line_extent", "space_text", "chunks")
# line_extent columns: timed events, earliest timed offset, then over all events (and 0): least offset, greatest
# offset, longest duration.
_NO_OFFSET = np.int64(2**63 - 1)


@njit(cache=True)
def layout(buf, event_cost, stat_cost, chunk_cost):
    """Planes, lines and chunks of the file: one walk that skips over stats.

    A chunk closes after the event that brings its cost (``event_cost`` per event, ``stat_cost`` per stat) to
    ``chunk_cost``; ``chunks`` rows are (line, position of the first event's field, first event, first stat).
    """
    n_planes = n_skips = n_lines = n_events = n_stats = n_text = n_chunks = 0
    plane_ranges = np.zeros((4, 2), np.int64)
    plane_skips = np.zeros((16, 3), np.int64)
    line_plane = np.zeros(16, np.int32)
    line_ints = np.zeros((16, 5), np.int64)  # id, display_id, timestamp_ns, duration_ps, events
    line_text = np.zeros((16, 4), np.int64)  # name and display_name byte ranges
    line_range = np.zeros((16, 2), np.int64)  # the line message's bytes
    line_extent = np.zeros((16, 5), np.int64)
    space_text = np.zeros((4, 3), np.int64)
    chunks = np.zeros((4, 4), np.int64)
    cost = 0
    new_chunk = True
    end = len(buf)
    pos = 0
    while pos < end:
        key, pos = _varint(buf, pos, end)
        if pos > end:
            _fail(pos, end)
        wire = key & np.uint64(7)
        if key == 10:  # XSpace.planes
            p, p_end = _length_delimited(buf, pos, end)
            if p_end > end:
                _fail(p, end)
            plane_ranges = _grown(plane_ranges, n_planes)
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
                q, l_end = _length_delimited(buf, p, p_end)
                if l_end > p_end:
                    _fail(q, p_end)
                plane_skips = _grown(plane_skips, n_skips)
                plane_skips[n_skips, 0] = n_planes
                plane_skips[n_skips, 1] = f_start
                plane_skips[n_skips, 2] = l_end
                n_skips += 1
                line_plane = _grown(line_plane, n_lines)
                line_ints = _grown(line_ints, n_lines)
                line_text = _grown(line_text, n_lines)
                line_range = _grown(line_range, n_lines)
                line_extent = _grown(line_extent, n_lines)
                line_plane[n_lines] = n_planes
                line_range[n_lines, 0] = q
                line_range[n_lines, 1] = l_end
                timed = 0
                first_timed = _NO_OFFSET
                least = greatest = longest = 0
                first_event = n_events
                while q < l_end:
                    e_key = q
                    key, q = _varint(buf, q, l_end)
                    if q > l_end:
                        _fail(q, l_end)
                    if key == 34:  # XLine.events
                        r, e_end = _length_delimited(buf, q, l_end)
                        if e_end > l_end:
                            _fail(r, l_end)
                        if new_chunk:
                            chunks = _grown(chunks, n_chunks)
                            chunks[n_chunks, 0] = n_lines
                            chunks[n_chunks, 1] = e_key
                            chunks[n_chunks, 2] = n_events
                            chunks[n_chunks, 3] = n_stats
                            n_chunks += 1
                            new_chunk = False
                        offset = duration = 0
                        aggregate = False
                        stats = 0
                        while r < e_end:
                            key, r = _varint(buf, r, e_end)
                            if r > e_end:
                                _fail(r, e_end)
                            if key == 16:  # offset_ps: the oneof now holds a start
                                value, r = _varint(buf, r, e_end)
                                offset = np.int64(value)
                                aggregate = False
                            elif key == 40:  # num_occurrences: an aggregated event
                                _, r = _varint(buf, r, e_end)
                                offset = 0
                                aggregate = True
                            elif key == 24:  # duration_ps
                                value, r = _varint(buf, r, e_end)
                                duration = np.int64(value)
                            else:
                                if key == 34:  # XEvent.stats
                                    stats += 1
                                r = _after(buf, r, e_end, key & np.uint64(7))
                            if r > e_end:
                                _fail(r, e_end)
                        if not aggregate:
                            timed += 1
                            first_timed = min(first_timed, offset)
                        least = min(least, offset)
                        greatest = max(greatest, offset)
                        longest = max(longest, duration)
                        n_events += 1
                        n_stats += stats
                        cost += event_cost + stats * stat_cost
                        if cost >= chunk_cost:
                            new_chunk = True
                            cost = 0
                        q = e_end
                    elif key == 8 or key == 80 or key == 24 or key == 72:  # id, display_id, timestamp, duration
                        value, q = _varint(buf, q, l_end)
                        column = 0 if key == 8 else 1 if key == 80 else 2 if key == 24 else 3
                        line_ints[n_lines, column] = np.int64(value)
                    elif key == 18 or key == 90:  # name, display_name
                        s, q = _length_delimited(buf, q, l_end)
                        if q > l_end:
                            _fail(s, l_end)
                        column = 0 if key == 18 else 2
                        line_text[n_lines, column] = s
                        line_text[n_lines, column + 1] = q
                    else:
                        q = _after(buf, q, l_end, key & np.uint64(7))
                    if q > l_end:
                        _fail(q, l_end)
                line_ints[n_lines, 4] = n_events - first_event
                line_extent[n_lines, 0] = timed
                line_extent[n_lines, 1] = first_timed
                line_extent[n_lines, 2] = least
                line_extent[n_lines, 3] = greatest
                line_extent[n_lines, 4] = longest
                n_lines += 1
                p = l_end
            n_planes += 1
            pos = p_end
        elif key == 18 or key == 26 or key == 34:  # errors, warnings, hostnames
            s, pos = _length_delimited(buf, pos, end)
            if pos > end:
                _fail(s, end)
            space_text = _grown(space_text, n_text)
            space_text[n_text, 0] = np.int64(key >> np.uint64(3))
            space_text[n_text, 1] = s
            space_text[n_text, 2] = pos
            n_text += 1
        else:
            pos = _after(buf, pos, end, wire)
            if pos > end:
                _fail(pos, end)
    counts = np.array([n_events, n_stats], dtype=np.int64)
    return (counts, plane_ranges[:n_planes], plane_skips[:n_skips], line_plane[:n_lines], line_ints[:n_lines],
            line_text[:n_lines], line_range[:n_lines], line_extent[:n_lines], space_text[:n_text], chunks[:n_chunks])


@njit(cache=True)
def fill(buf, line_range, line, pos, event_line, event_ints, event_aggregate, stat_mid, stat_kind, stat_int,
         stat_double):
    """Decode the events from the event field at ``pos`` in ``line`` on, as many as ``event_line`` holds.

    The arrays are uninitialised: every entry is set. A str or bytes stat's value is left as its byte range in its
    int (start) and double (end) slots: see :func:`text`.
    """
    n_events = n_stats = 0
    scratch = np.zeros(1, dtype=np.uint64)
    as_double = scratch.view(np.float64)
    as_int = stat_double.view(np.int64)
    want_events, want_stats = len(event_line), len(stat_mid)
    q = pos
    while n_events < want_events:
        if line >= len(line_range):
            _fail(q, q)
        l_end = line_range[line, 1]
        while q < l_end and n_events < want_events:
            key, q = _varint(buf, q, l_end)
            if q > l_end:
                _fail(q, l_end)
            if key != 34:  # the line's own fields: read by layout()
                q = _after(buf, q, l_end, key & np.uint64(7))
                if q > l_end:
                    _fail(q, l_end)
                continue
            r, e_end = _length_delimited(buf, q, l_end)
            if e_end > l_end:
                _fail(r, l_end)
            first_stat = n_stats
            event_ints[0:4, n_events] = 0
            event_aggregate[n_events] = False
            event_line[n_events] = line
            while r < e_end:
                key, r = _varint(buf, r, e_end)
                if r > e_end:
                    _fail(r, e_end)
                if key == 34:  # XEvent.stats
                    t, s_end = _length_delimited(buf, r, e_end)
                    if s_end > e_end or n_stats >= want_stats:
                        _fail(t, e_end)
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
                            v, t = _length_delimited(buf, t, s_end)
                            if t > s_end:
                                _fail(v, s_end)
                            stat_kind[n_stats] = field
                            stat_int[n_stats] = v  # the value's bytes, until text() gathers them
                            as_int[n_stats] = t
                        else:
                            t = _after(buf, t, s_end, wire)
                        if t > s_end:
                            _fail(t, s_end)
                    n_stats += 1
                    r = s_end
                elif key == 8:  # metadata_id
                    value, r = _varint(buf, r, e_end)
                    event_ints[0, n_events] = np.int64(value)
                elif key == 16:  # offset_ps: the oneof now holds a start
                    value, r = _varint(buf, r, e_end)
                    event_ints[1, n_events] = np.int64(value)
                    event_ints[2, n_events] = 0
                    event_aggregate[n_events] = False
                elif key == 40:  # num_occurrences: an aggregated event
                    value, r = _varint(buf, r, e_end)
                    event_ints[2, n_events] = np.int64(value)
                    event_ints[1, n_events] = 0
                    event_aggregate[n_events] = True
                elif key == 24:  # duration_ps
                    value, r = _varint(buf, r, e_end)
                    event_ints[3, n_events] = np.int64(value)
                else:
                    r = _after(buf, r, e_end, key & np.uint64(7))
                if r > e_end:
                    _fail(r, e_end)
            event_ints[4, n_events] = n_stats - first_stat
            n_events += 1
            q = e_end
        line += 1
        if line < len(line_range):
            q = line_range[line, 0]
    if n_stats != want_stats:
        _fail(q, q)
    return n_events


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
