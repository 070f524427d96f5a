"""The compiled scan of a Kineto ``traceEvents`` array: JSON bytes in, integer arrays out.

One pass over the bytes fills two tables, each stored a column per array row so
that a field's values lie together: one entry per event (each field's kind and
value) and one per arg (``S_*`` rows). Every string is interned on its bytes: a
field holds the id of its string, and ``strings`` holds each distinct string's
byte range, in order of first appearance. Floats are kept as their text range,
so that Arrow parses them as exactly as Python does; huge ints, lists and objects
as the id of their text, which Python parses once per distinct text.

Speed: about 150 MB of JSON a second on one core. msgspec alone decodes into
Python objects faster, but then every field and every arg still needs a Python
pass (seconds for a million events); here the columns come out ready.

The JSON is valid (msgspec has checked it); the scan raises ValueError at
anything the columnar decoder does not take: an entry that is not an object, a
field of an unexpected type, a repeated key, a string with escapes.
"""

from __future__ import annotations

import numpy as np
from numba import njit

# Event fields and the kinds of their values: absent or null, int (the value), float (text start; the end in
# ``ends``), str (its id), object (args: the first arg row; the count in ``ends``).
FIELDS = ("ph", "cat", "name", "pid", "tid", "ts", "dur", "args", "id", "bp")
N_FIELDS = len(FIELDS)
# Arg value kinds; ints hold their value, floats a text range, strings, huge ints, lists and objects the id
# of their (string or JSON) text.
V_NULL, V_TRUE, V_FALSE, V_INT, V_FLOAT, V_STR, V_JSON, V_BIGINT = range(8)
K_NONE, K_INT, K_FLOAT, K_STR, K_OBJECT = range(5)
# Which kinds each field may have (bit per kind); anything else is irregular.
_ALLOWED = np.array([
    1 << K_STR,  # ph (an event without one is irregular too)
    1 << K_NONE | 1 << K_STR,  # cat
    1 << K_NONE | 1 << K_STR,  # name
    1 << K_NONE | 1 << K_INT | 1 << K_STR,  # pid
    1 << K_NONE | 1 << K_INT | 1 << K_STR,  # tid
    1 << K_NONE | 1 << K_INT | 1 << K_FLOAT,  # ts
    1 << K_NONE | 1 << K_INT | 1 << K_FLOAT,  # dur
    1 << K_NONE | 1 << K_OBJECT,  # args
    1 << K_NONE | 1 << K_INT,  # id
    1 << K_NONE | 1 << K_STR,  # bp
], np.int64)
ARGS = FIELDS.index("args")
# Row in ``ends`` of the fields with a second value: the text end of a float ts or dur, the arg count.
_END_ROW = np.array([{"ts": 0, "dur": 1, "args": 2}.get(f, -1) for f in FIELDS], np.int64)
S_OWNER, S_KEY, S_KIND, S_A, S_B = range(5)
S_WIDTH = 5
_INT64_CUT = np.int64(922337203685477580)  # (2**63 - 1) // 10
_MANTISSA_CUT = np.int64(10**17)  # more float digits than this cannot be exact anyway
_MAX_EXACT = np.int64(2**53)
_POW10 = np.array([10.0**k for k in range(23)])  # each exact in a double


@njit(cache=True, inline="always")
def _ws(buf, pos):
    while buf[pos] == 32 or buf[pos] == 10 or buf[pos] == 13 or buf[pos] == 9:
        pos += 1
    return pos


@njit(cache=True, inline="always")
def _string_end(buf, pos):
    """Position of the closing quote of the string whose content starts at ``pos``, and whether it has escapes."""
    escaped = False
    while buf[pos] != 34:
        if buf[pos] == 92:
            escaped = True
            pos += 2
        else:
            pos += 1
    return pos, escaped


@njit(cache=True, inline="always")
def _skip(buf, pos):
    """Position after the JSON value at ``pos``."""
    c = buf[pos]
    if c == 34:
        end, _ = _string_end(buf, pos + 1)
        return end + 1
    if c == 91 or c == 123:
        depth = 0
        while True:
            c = buf[pos]
            if c == 34:
                end, _ = _string_end(buf, pos + 1)
                pos = end + 1
                continue
            if c == 91 or c == 123:
                depth += 1
            elif c == 93 or c == 125:
                depth -= 1
                if depth == 0:
                    return pos + 1
            pos += 1
    while pos < len(buf):  # numbers, true, false, null: up to the next delimiter
        c = buf[pos]
        if c == 44 or c == 93 or c == 125 or c == 32 or c == 10 or c == 13 or c == 9:
            break
        pos += 1
    return pos


@njit(cache=True, inline="always")
def _number(buf, pos):
    """(is int64, value, is int, end, float value, whether the float value is exact) of the number at ``pos``.

    A float is read exactly when its digits fit in 53 bits and its power of ten is at most 22
    (Clinger's fast path: one correctly rounded multiplication or division, as float() rounds);
    other floats are left to Arrow's parser.
    """
    negative = buf[pos] == 45
    if negative:
        pos += 1
    value = 0
    fits = True
    c = buf[pos]
    while c >= 48 and c <= 57:
        digit = c - 48
        if value > _INT64_CUT or (value == _INT64_CUT and digit > 7):
            fits = False
        else:
            value = value * 10 + digit
        pos += 1
        c = buf[pos]
    if c != 46 and c != 101 and c != 69:
        return fits, -value if negative else value, True, pos, 0.0, False
    mantissa, places = value, 0
    if c == 46:
        pos += 1
        c = buf[pos]
        while c >= 48 and c <= 57:
            if mantissa < _MANTISSA_CUT:
                mantissa = mantissa * 10 + (c - 48)
                places += 1
            else:
                fits = False
            pos += 1
            c = buf[pos]
    exponent = 0
    if c == 101 or c == 69:
        pos += 1
        c = buf[pos]
        sign = 1
        if c == 43 or c == 45:
            sign = -1 if c == 45 else 1
            pos += 1
            c = buf[pos]
        while c >= 48 and c <= 57:
            if exponent < 10000:
                exponent = exponent * 10 + (c - 48)
            pos += 1
            c = buf[pos]
        exponent *= sign
    power = exponent - places
    exact = fits and mantissa <= _MAX_EXACT and -22 <= power <= 22
    x = 0.0
    if exact:
        x = float(mantissa) * _POW10[power] if power >= 0 else float(mantissa) / _POW10[-power]
        if negative:
            x = -x
    return False, 0, False, pos, x, exact


@njit(cache=True, inline="always")
def _hash(buf, lo, hi):
    """FNV-1a over the length, the first and the last 16 bytes: long kernel names share prefixes, not both ends."""
    h = (np.uint64(14695981039346656037) ^ np.uint64(hi - lo)) * np.uint64(1099511628211)
    head = min(hi, lo + 16)
    for i in range(lo, head):
        h = (h ^ np.uint64(buf[i])) * np.uint64(1099511628211)
    for i in range(max(head, hi - 16), hi):
        h = (h ^ np.uint64(buf[i])) * np.uint64(1099511628211)
    return h


@njit(cache=True, inline="always")
def _intern(buf, lo, hi, table, strings, n):
    """(id of the string buf[lo:hi], n): new ids in order of appearance. The caller keeps room (_room)."""
    mask = np.uint64(len(table) - 1)
    slot = _hash(buf, lo, hi) & mask
    length = hi - lo
    while True:
        sid = table[slot]
        if sid < 0:
            break
        s_lo = strings[sid, 0]
        if strings[sid, 1] - s_lo == length:
            i = 0
            while i < length and buf[s_lo + i] == buf[lo + i]:
                i += 1
            if i == length:
                return sid, n
        slot = (slot + np.uint64(1)) & mask
    strings[n, 0], strings[n, 1] = lo, hi
    table[slot] = n
    return n, n + 1


@njit(cache=True)
def _room(buf, table, strings, n, more):
    """Table and strings with room for ``more`` new strings (the table at most half full)."""
    if n + more > len(strings):
        strings = _grow(strings)
    if 2 * (n + more) > len(table):
        table = np.full(2 * len(table), -1, np.int64)
        mask = np.uint64(len(table) - 1)
        for sid in range(n):
            slot = _hash(buf, strings[sid, 0], strings[sid, 1]) & mask
            while table[slot] >= 0:
                slot = (slot + np.uint64(1)) & mask
            table[slot] = sid
    return table, strings


@njit(cache=True)
def _grow(rows):
    bigger = np.empty((2 * len(rows), rows.shape[1]), rows.dtype)
    bigger[: len(rows)] = rows
    return bigger


@njit(cache=True, inline="always")
def _field(buf, lo, hi):
    """Index in FIELDS of the key buf[lo:hi], else -1 (by length and first byte, then the rest)."""
    n = hi - lo
    if n < 2 or n > 4:
        return -1
    c0, c1 = buf[lo], buf[lo + 1]
    if n == 2:
        if c0 == 112 and c1 == 104:  # ph
            return 0
        if c0 == 116 and c1 == 115:  # ts
            return 5
        if c0 == 105 and c1 == 100:  # id
            return 8
        if c0 == 98 and c1 == 112:  # bp
            return 9
        return -1
    c2 = buf[lo + 2]
    if n == 3:
        if c1 == 105 and c2 == 100:  # pid, tid
            if c0 == 112:
                return 3
            if c0 == 116:
                return 4
            return -1
        if c0 == 99 and c1 == 97 and c2 == 116:  # cat
            return 1
        if c0 == 100 and c1 == 117 and c2 == 114:  # dur
            return 6
        return -1
    c3 = buf[lo + 3]
    if c0 == 110 and c1 == 97 and c2 == 109 and c3 == 101:  # name
        return 2
    if c0 == 97 and c1 == 114 and c2 == 103 and c3 == 115:  # args
        return 7
    return -1


def scan(buf: np.ndarray) -> tuple:
    """Scan the traceEvents array ``buf``: (kinds, values, ends, numbers, stats, stat_numbers, strings).

    ``kinds`` and ``values`` have a row per field (FIELDS), ``ends`` the text ends of ts
    and dur floats (-1: read into ``numbers``) and the arg count (END_ROW); a column per
    event. Float args are read into ``stat_numbers`` (their S_B -1) when exact, else left
    as text. ``strings`` holds the byte range of each string id. Raises ValueError at
    anything irregular.
    """
    # Room for as many events as there are "{" and args as ":" (counted in one quick pass): zeroed
    # pages cost no memory until written, and nothing is copied to grow.
    n_objects, n_colons = _bounds(buf)
    kinds = np.zeros((N_FIELDS, n_objects), np.int8)
    values = np.zeros((N_FIELDS, n_objects), np.int64)
    ends = np.zeros((3, n_objects), np.int64)
    numbers = np.zeros((2, n_objects))
    stats = np.zeros((S_WIDTH, n_colons), np.int64)
    stat_numbers = np.zeros(n_colons)
    n_events, n_stats, strings, n_strings = _scan(buf, kinds, values, ends, numbers, stats, stat_numbers)
    return (kinds[:, :n_events], values[:, :n_events], ends[:, :n_events], numbers[:, :n_events],
            stats[:, :n_stats], stat_numbers[:n_stats], strings[:n_strings])


@njit(cache=True)
def _bounds(buf):
    """Counts of "{" and ":" bytes: at least the events and the args."""
    braces = colons = 0
    for c in buf:
        braces += c == 123
        colons += c == 58
    return braces, colons


@njit(cache=True)
def _scan(buf, kinds, values, ends, numbers, stats, stat_numbers):
    """Fill the arrays of :func:`scan`: (n_events, n_stats, strings, n_strings)."""
    pos = 0
    strings = np.zeros((1024, 2), np.int64)
    table = np.full(2048, -1, np.int64)
    n_events = n_stats = n_strings = 0
    pos = _ws(buf, pos)
    if buf[pos] != 91:
        raise ValueError("traceEvents is not an array")
    pos = _ws(buf, pos + 1)
    if buf[pos] == 93:
        return 0, 0, strings, 0
    while True:
        if buf[pos] != 123:
            raise ValueError("an entry is not an object")
        row = n_events
        if 2 * (n_strings + 8) > len(table) or n_strings + 8 > len(strings):
            table, strings = _room(buf, table, strings, n_strings, 8)
        seen = 0
        pos = _ws(buf, pos + 1)
        while buf[pos] != 125:
            key_end, escaped = _string_end(buf, pos + 1)
            if escaped:
                raise ValueError("escaped key")
            f = _field(buf, pos + 1, key_end)
            pos = _ws(buf, _ws(buf, key_end + 1) + 1)  # past the colon
            if f < 0:
                pos = _skip(buf, pos)
            else:
                if seen & (1 << f):  # a repeated field: the last would win
                    raise ValueError("repeated field")
                seen |= 1 << f
                c = buf[pos]
                kind, a, b = K_NONE, np.int64(0), np.int64(0)
                if c == 34:
                    end, escaped = _string_end(buf, pos + 1)
                    if escaped:
                        raise ValueError("escaped string")
                    kind = K_STR
                    a, n_strings = _intern(buf, pos + 1, end, table, strings, n_strings)
                    pos = end + 1
                elif c == 45 or 48 <= c <= 57:
                    fits, value, is_int, end, x, exact = _number(buf, pos)
                    if is_int and not fits:
                        raise ValueError("integer past int64")
                    kind, a, b = (K_INT, value, np.int64(0)) if is_int else (K_FLOAT, pos, end)
                    if exact and _END_ROW[f] >= 0 and _END_ROW[f] < 2:  # ts, dur: read now, no text range
                        numbers[_END_ROW[f], row] = x
                        b = -1
                    pos = end
                elif c == 110:  # null
                    pos += 4
                elif c == 123 and f == ARGS:
                    kind = K_OBJECT
                    a = n_stats
                    end, n_stats = _args(buf, pos, stats, stat_numbers, n_stats)
                    if end < 0:
                        raise ValueError("irregular args")
                    pos = end
                    b = n_stats - a
                    table, strings = _room(buf, table, strings, n_strings, 2 * b)
                    for s in range(a, n_stats):  # keys and texts: interned
                        k = stats[S_KIND, s]
                        if k == V_STR or k == V_JSON or k == V_BIGINT:
                            stats[S_A, s], n_strings = _intern(buf, stats[S_A, s], stats[S_B, s], table, strings, n_strings)
                        stats[S_KEY, s], n_strings = _intern(buf, stats[S_KEY, s], stats[S_OWNER, s], table, strings, n_strings)
                        stats[S_OWNER, s] = row
                else:
                    raise ValueError("unexpected value")
                if not (_ALLOWED[f] >> kind) & 1:
                    raise ValueError("unexpected type")
                kinds[f, row] = kind
                values[f, row] = a
                if _END_ROW[f] >= 0:
                    ends[_END_ROW[f], row] = b
            pos = _ws(buf, pos)
            if buf[pos] == 44:
                pos = _ws(buf, pos + 1)
        if not seen & 1:
            raise ValueError("no ph")
        n_events += 1
        pos = _ws(buf, pos + 1)
        if buf[pos] == 93:
            return n_events, n_stats, strings, n_strings
        pos = _ws(buf, pos + 1)  # past the comma


@njit(cache=True)
def _args(buf, pos, stats, stat_numbers, n_stats):
    """Rows of the args object at ``pos``: (position after it, n_stats); position -1 if irregular.

    While scanning, a row's S_KEY and S_OWNER hold the key's byte range; ``scan`` interns it.
    """
    first = n_stats
    pos = _ws(buf, pos + 1)
    while buf[pos] != 125:
        key_end, escaped = _string_end(buf, pos + 1)
        if escaped:
            return -1, first
        for s in range(first, n_stats):  # a repeated key: the dict would keep the last value
            lo = stats[S_KEY, s]
            if stats[S_OWNER, s] - lo == key_end - pos - 1:
                same = True
                for i in range(key_end - pos - 1):
                    if buf[lo + i] != buf[pos + 1 + i]:
                        same = False
                        break
                if same:
                    return -1, first
        stats[S_KEY, n_stats] = pos + 1
        stats[S_OWNER, n_stats] = key_end
        pos = _ws(buf, _ws(buf, key_end + 1) + 1)
        c = buf[pos]
        kind, a, b = V_NULL, np.int64(0), np.int64(0)
        if c == 34:
            end, escaped = _string_end(buf, pos + 1)
            if escaped:
                return -1, first
            kind, a, b = V_STR, pos + 1, end
            pos = end + 1
        elif c == 45 or 48 <= c <= 57:
            fits, value, is_int, end, x, exact = _number(buf, pos)
            if is_int and fits:
                kind, a = V_INT, value
            else:
                kind, a, b = (V_BIGINT if is_int else V_FLOAT), pos, end
                if exact:
                    stat_numbers[n_stats] = x
                    b = -1
            pos = end
        elif c == 116:
            kind = V_TRUE
            pos += 4
        elif c == 102:
            kind = V_FALSE
            pos += 5
        elif c == 110:
            pos += 4
        else:
            end = _skip(buf, pos)
            kind, a, b = V_JSON, pos, end
            pos = end
        stats[S_KIND, n_stats] = kind
        stats[S_A, n_stats] = a
        stats[S_B, n_stats] = b
        n_stats += 1
        pos = _ws(buf, pos)
        if buf[pos] == 44:
            pos = _ws(buf, pos + 1)
    return pos + 1, n_stats


@njit(cache=True)
def intern_pairs(kind_a, a, kind_b, b):
    """Id of each (kind_a, a, kind_b, b), new ids in order of appearance, and the first row of each id."""
    n = len(a)
    size = 1024
    while size < 2 * n:
        size *= 2
    table = np.full(size, -1, np.int64)
    mask = np.uint64(size - 1)
    ids = np.empty(n, np.int64)
    first = np.empty(n, np.int64)
    n_ids = 0
    for row in range(n):
        h = np.uint64(14695981039346656037)
        for v in (np.int64(kind_a[row]), a[row], np.int64(kind_b[row]), b[row]):
            h = (h ^ np.uint64(v)) * np.uint64(1099511628211)
        slot = h & mask
        while True:
            sid = table[slot]
            if sid < 0:
                table[slot] = n_ids
                first[n_ids] = row
                ids[row] = n_ids
                n_ids += 1
                break
            other = first[sid]
            if kind_a[other] == kind_a[row] and a[other] == a[row] and kind_b[other] == kind_b[row] and b[other] == b[row]:
                ids[row] = sid
                break
            slot = (slot + np.uint64(1)) & mask
    return ids, first[:n_ids].copy()


@njit(cache=True)
def gather(buf, lo, hi):
    """The byte ranges buf[lo[i]:hi[i]] one after another, and their int64 offsets (an Arrow large_string)."""
    offsets = np.empty(len(lo) + 1, np.int64)
    offsets[0] = 0
    for i in range(len(lo)):
        offsets[i + 1] = offsets[i] + hi[i] - lo[i]
    data = np.empty(offsets[-1], np.uint8)
    for i in range(len(lo)):
        data[offsets[i]:offsets[i + 1]] = buf[lo[i]:hi[i]]
    return offsets, data


@njit(cache=True)
def first_appearance(ids, size):
    """Codes of ``ids`` (each in [0, size), or -1: none, code -1) numbered in order of first appearance,
    and the ids in that order: a dictionary encoding as Arrow's dictionary_encode orders it."""
    code_of = np.full(size, -1, np.int64)
    order = np.empty(size, np.int64)
    codes = np.empty(len(ids), np.int32)
    n = 0
    for i in range(len(ids)):
        sid = ids[i]
        if sid < 0:
            codes[i] = -1
            continue
        if code_of[sid] < 0:
            code_of[sid] = n
            order[n] = sid
            n += 1
        codes[i] = code_of[sid]
    return codes, order[:n].copy()


# event_stats value types (columnar decoder's order); ODD: null, huge int, list or object, typed in Python.
T_INT, T_DOUBLE, T_STR, T_ODD = 0, 1, 2, -1


@njit(cache=True)
def stat_rows(first, count, instant, ph, stats, keep, numbers):
    """event_stats rows of events (arg rows ``first[e]`` .. + ``count[e]``, those in ``keep``), each instant's
    ph row after its args: (owner, key id (-1: "ph"), value type, int, double, string id, stat row of ODD ones)."""
    n = 0
    for e in range(len(first)):
        for r in range(first[e], first[e] + count[e]):
            n += keep[r]
        n += instant[e]
    owner = np.empty(n, np.int64)
    key = np.full(n, -1, np.int64)
    value_type = np.full(n, T_STR, np.int8)
    ints = np.zeros(n, np.int64)
    doubles = np.zeros(n)
    string = np.full(n, -1, np.int64)
    source = np.full(n, -1, np.int64)
    j = 0
    for e in range(len(first)):
        for r in range(first[e], first[e] + count[e]):
            if not keep[r]:
                continue
            owner[j] = e
            key[j] = stats[S_KEY, r]
            kind = stats[S_KIND, r]
            if kind == V_INT or kind == V_TRUE or kind == V_FALSE:
                value_type[j] = T_INT
                ints[j] = stats[S_A, r] if kind == V_INT else (1 if kind == V_TRUE else 0)
            elif kind == V_FLOAT:
                value_type[j] = T_DOUBLE
                doubles[j] = numbers[r]
            elif kind == V_STR:
                string[j] = stats[S_A, r]
            else:
                value_type[j] = T_ODD
                source[j] = r
            j += 1
        if instant[e]:
            owner[j] = e
            string[j] = ph[e]
            j += 1
    return owner, key, value_type, ints, doubles, string, source
