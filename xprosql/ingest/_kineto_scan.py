"""The compiled scan of a Kineto ``traceEvents`` array: JSON text in pieces in, integer arrays out.

The text comes a piece at a time (a gzip stream is never decompressed whole); each
call of :meth:`Scanner.piece` takes the complete events of a piece and tells where
the first incomplete one starts, which the next piece begins with. Two tables are
filled, each stored a column per array row so that a field's values lie together:
one entry per event (each field's kind and value) and one per arg (``S_*`` rows).
Every string is interned on its bytes, copied once into an arena: a field holds the
id of its string, ``strings`` each distinct string's range in the arena, in order of
first appearance. Floats are read exactly where Clinger's fast path allows and
otherwise parsed from their text by Arrow while the piece is there; huge ints,
lists and objects are kept as the id of their text, which Python parses once per
distinct text.

The scan never reads past a piece (its end is checked wherever a value or a
string may run into it), but it does not validate JSON: the caller validates each
piece's events with msgspec. It raises ValueError at anything the columnar
decoder does not take: an entry that is not an object, a field of an unexpected
type, a repeated key, a string with escapes, a separator that is not JSON's.

Speed: the hot loop keeps its arrays fixed (growing them is the caller's, between
calls) and hands them to its helpers without reference counts (:func:`_borrowed`):
numba otherwise counts a reference, an atomic operation, for every array handed to a
helper, millions of times. The helpers are not inlined by numba (``inline="always"``):
that tripled the first compilation (46 s of CPU and 1.7 GB more memory for this module,
against 14 s) for no measurable speed, as LLVM inlines what pays.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from numba.core import cgutils
from numba.extending import intrinsic

from xprosql._numba import njit

# Event fields and the kinds of their values: absent or null, int (the value), float (the value's bits: read
# ``values`` as float64), str (its id), object (args: the first arg row; the count in ``arg_count``).
FIELDS = ("ph", "cat", "name", "pid", "tid", "ts", "dur", "args", "id", "bp")
N_FIELDS = len(FIELDS)
# Arg value kinds; ints hold their value, floats its bits (read as float64), strings, huge ints, lists and
# objects the id of their (string or JSON) text.
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
# The arg rows' columns (Scanner.args): the event row, the key's string id, the kind (V_*), the value.
S_OWNER, S_KEY, S_KIND, S_A = range(4)
S_TYPES = (np.int32, np.int32, np.int8, np.int64)
_INT64_CUT = np.int64(922337203685477580)  # (2**63 - 1) // 10
_MANTISSA_CUT = np.int64(10**17)  # more float digits than this cannot be exact anyway
_MAX_EXACT = np.int64(2**53)
_POW10 = np.array([10.0**k for k in range(23)])  # each exact in a double
PAD = 16  # zero bytes after a piece's text: the furthest a check-free read goes past its end

# What a call of _scan ended with: the piece's last complete event, the array's end, an array full (which one).
MORE, END, ROOM_EVENTS, ROOM_STATS, ROOM_STRINGS, ROOM_FIXES = range(6)
_OK, _INCOMPLETE = -1, -2  # of one event or args object (else a ROOM_* code)
# Slots of ``counts``: the fill of each array (kept across calls), then where the call ended.
C_EVENTS, C_STATS, C_STRINGS, C_ARENA, C_FIXES, C_RESUME, C_AFTER, C_FIRST, C_LAST, C_END = range(10)
# Floats left to Arrow (``fixes`` rows): where the value goes (a field of FIELDS, -1: an arg), its index, its text.
F_TARGET, F_INDEX, F_LO, F_HI = range(4)


@intrinsic
def _borrowed(typingctx, array):
    """``array`` without its reference count (a null meminfo), for the time of a call that holds the array.

    Numba counts a reference (an atomic increment and decrement) for every array passed to a
    function; the scan's helpers take several, millions of times: that was a third of its time.
    """

    def codegen(context, builder, signature, args):
        source = context.make_array(array)(context, builder, value=args[0])
        view = context.make_array(array)(context, builder)
        for field in ("nitems", "itemsize", "data", "shape", "strides"):
            setattr(view, field, getattr(source, field))
        view.meminfo = cgutils.get_null_value(view.meminfo.type)
        view.parent = cgutils.get_null_value(view.parent.type)
        return view._getvalue()

    return array(array), codegen


@njit(cache=True)
def _ws(buf, pos):
    while buf[pos] == 32 or buf[pos] == 10 or buf[pos] == 13 or buf[pos] == 9:
        pos += 1
    return pos


@njit(cache=True)
def _string_end(buf, n, pos):
    """Position of the closing quote of the string whose content starts at ``pos`` (>= n: not in the piece),
    and whether it has escapes."""
    escaped = False
    while pos < n:
        c = buf[pos]
        if c == 34:
            return pos, escaped
        if c == 92:
            escaped = True
            pos += 2
        else:
            pos += 1
    return n, escaped


@njit(cache=True)
def _skip(buf, n, pos):
    """Position after the JSON value at ``pos`` (>= n: it does not end in the piece)."""
    c = buf[pos]
    if c == 34:
        end, _ = _string_end(buf, n, pos + 1)
        return end + 1
    if c == 91 or c == 123:
        depth = 0
        while pos < n:
            c = buf[pos]
            if c == 34:
                end, _ = _string_end(buf, n, pos + 1)
                pos = end + 1
                continue
            if c == 91 or c == 123:
                depth += 1
            elif c == 93 or c == 125:
                depth -= 1
                if depth == 0:
                    return pos + 1
            pos += 1
        return n
    while pos < n:  # numbers, true, false, null: up to the next delimiter
        c = buf[pos]
        if c == 44 or c == 93 or c == 125 or c == 32 or c == 10 or c == 13 or c == 9:
            break
        pos += 1
    return pos


@njit(cache=True)
def _number(buf, pos):
    """(is int64, value, is int, end, float value, whether the float value is exact) of the number at ``pos``.

    A float is read exactly when its digits fit in 53 bits and its power of ten is at most 22
    (Clinger's fast path: one correctly rounded multiplication or division, as float() rounds);
    other floats are left to Arrow's parser. The piece's zero padding ends any number.
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


@njit(cache=True)
def _word(buf, at):
    """The 8 bytes at ``at`` as one number (little-endian)."""
    w = np.uint64(0)
    for i in range(8):
        w |= np.uint64(buf[at + i]) << np.uint64(8 * i)
    return w


@njit(cache=True)
def _hash(buf, lo, hi):
    """A hash of buf[lo:hi] from its length and its first and last 16 bytes (long kernel names share prefixes,
    not both ends), a word at a time: independent multiplications, not a chain of one per byte."""
    n = hi - lo
    h = np.uint64(n) * np.uint64(0x9E3779B97F4A7C15)
    if n >= 8:
        h ^= _word(buf, lo) * np.uint64(0xC2B2AE3D27D4EB4F)
        h ^= _word(buf, hi - 8) * np.uint64(0x165667B19E3779F9)
        if n > 16:
            h ^= _word(buf, lo + 8) * np.uint64(0x27D4EB2F165667C5)
            h ^= _word(buf, hi - 16) * np.uint64(0x94D049BB133111EB)
    else:
        for i in range(lo, hi):
            h = (h ^ np.uint64(buf[i])) * np.uint64(0x100000001B3)
    return (h ^ (h >> np.uint64(29))) * np.uint64(0xBF58476D1CE4E5B9)


@njit(cache=True)
def _intern(buf, lo, hi, arena, strings, table, counts):
    """Id of the string buf[lo:hi] (new ids in order of appearance, the bytes copied into the arena); -1 if the
    arena, ``strings`` or the table (kept at most half full) has no room for a new one."""
    length = hi - lo
    mask = np.uint64(len(table) - 1)
    slot = _hash(buf, lo, hi) & mask
    while True:
        sid = table[slot]
        if sid < 0:
            break
        s_lo = strings[sid, 0]
        if strings[sid, 1] - s_lo == length:
            i = 0
            while i < length and arena[s_lo + i] == buf[lo + i]:
                i += 1
            if i == length:
                return sid
        slot = (slot + np.uint64(1)) & mask
    n, used = counts[C_STRINGS], counts[C_ARENA]
    if n >= len(strings) or used + length > len(arena) or 2 * (n + 1) > len(table):
        return -1
    for i in range(length):
        arena[used + i] = buf[lo + i]
    strings[n, 0], strings[n, 1] = used, used + length
    table[slot] = n
    counts[C_STRINGS], counts[C_ARENA] = n + 1, used + length
    return n


@njit(cache=True)
def _table(arena, strings, n, size):
    """A hash table of size ``size`` holding the strings 0 .. n-1."""
    table = np.full(size, -1, np.int64)
    mask = np.uint64(size - 1)
    for sid in range(n):
        slot = _hash(arena, strings[sid, 0], strings[sid, 1]) & mask
        while table[slot] >= 0:
            slot = (slot + np.uint64(1)) & mask
        table[slot] = sid
    return table


@njit(cache=True)
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


@njit(cache=True)
def _colon(buf, n, key_end):
    """Position of the value after the key ending at ``key_end`` (>= n: not in the piece)."""
    pos = _ws(buf, key_end + 1)
    if pos >= n:
        return n
    if buf[pos] != 58:
        raise ValueError("expected a colon")
    return _ws(buf, pos + 1)


@njit(cache=True)
def _next(buf, n, pos):
    """Position after the comma that follows a member, or at the closing brace (>= n: not in the piece)."""
    pos = _ws(buf, pos)
    if pos >= n:
        return n
    c = buf[pos]
    if c == 44:
        return _ws(buf, pos + 1)
    if c != 125:
        raise ValueError("expected a comma or a closing brace")
    return pos


@njit(cache=True)
def _quoted(buf, n, pos, arena, strings, table, counts):
    """The string value whose opening quote is at ``pos``: (its id, -1 when the string store is full; the position
    after its closing quote, past ``n`` when it does not close in the piece). An escaped one is irregular."""
    end, escaped = _string_end(buf, n, pos + 1)
    if end >= n:
        return -1, n + 1
    if escaped:
        raise ValueError("escaped string")
    return _intern(buf, pos + 1, end, arena, strings, table, counts), end + 1


@njit(cache=True)
def _args(buf, n, pos, row, s_owner, s_key, s_kind, s_a, s_float, fixes, n_stats, n_fixes, arena, strings, table,
          counts):
    """Rows of the args object at ``pos``: (_OK, position after it, n_stats, n_fixes), or (_INCOMPLETE | ROOM_*, ...).
    A repeated key is found after the scan (:func:`has_repeated_args`): looking back here is quadratic."""
    pos = _ws(buf, pos + 1)
    while True:
        if pos >= n:
            return _INCOMPLETE, pos, n_stats, n_fixes
        if buf[pos] == 125:
            return _OK, pos + 1, n_stats, n_fixes
        if buf[pos] != 34:
            raise ValueError("expected a key")
        key_end, escaped = _string_end(buf, n, pos + 1)
        if key_end >= n:
            return _INCOMPLETE, pos, n_stats, n_fixes
        if escaped:
            raise ValueError("escaped key")
        if n_stats >= len(s_a):
            return ROOM_STATS, pos, n_stats, n_fixes
        key = _intern(buf, pos + 1, key_end, arena, strings, table, counts)
        if key < 0:
            return ROOM_STRINGS, pos, n_stats, n_fixes
        pos = _colon(buf, n, key_end)
        if pos >= n:
            return _INCOMPLETE, pos, n_stats, n_fixes
        c = buf[pos]
        kind, a, x, exact = V_NULL, np.int64(0), 0.0, False
        if c == 34:
            a, after = _quoted(buf, n, pos, arena, strings, table, counts)
            if after > n:
                return _INCOMPLETE, pos, n_stats, n_fixes
            kind, pos = V_STR, after
        elif c == 45 or 48 <= c <= 57:
            fits, value, is_int, end, x, exact = _number(buf, pos)
            if end >= n:
                return _INCOMPLETE, pos, n_stats, n_fixes
            if is_int and fits:
                kind, a = V_INT, value
            elif is_int:
                kind, a = V_BIGINT, _intern(buf, pos, end, arena, strings, table, counts)
            else:
                kind = V_FLOAT
                if not exact:
                    if n_fixes >= fixes.shape[1]:
                        return ROOM_FIXES, pos, n_stats, n_fixes
                    fixes[F_TARGET, n_fixes], fixes[F_INDEX, n_fixes] = -1, n_stats
                    fixes[F_LO, n_fixes], fixes[F_HI, n_fixes] = pos, end
                    n_fixes += 1
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
            end = _skip(buf, n, pos)
            if end >= n:
                return _INCOMPLETE, pos, n_stats, n_fixes
            kind, a = V_JSON, _intern(buf, pos, end, arena, strings, table, counts)
            pos = end
        if a < 0 and (kind == V_STR or kind == V_JSON or kind == V_BIGINT):
            return ROOM_STRINGS, pos, n_stats, n_fixes
        s_owner[n_stats], s_key[n_stats], s_kind[n_stats], s_a[n_stats] = row, key, kind, a
        if kind == V_FLOAT and exact:
            s_float[n_stats] = x
        n_stats += 1
        pos = _next(buf, n, pos)


@njit(cache=True)
def _event(buf, n, pos, row, kinds, values, floats, arg_count, s_owner, s_key, s_kind, s_a, s_float, fixes, n_stats,
           n_fixes, arena, strings, table, counts):
    """The event object at ``pos`` into row ``row``: (_OK, position after it, n_stats, n_fixes), or
    (_INCOMPLETE | ROOM_*, ...)."""
    for f in range(N_FIELDS):
        kinds[f, row] = K_NONE
        values[f, row] = 0
    arg_count[row] = 0
    seen = 0
    pos = _ws(buf, pos + 1)
    while True:
        if pos >= n:
            return _INCOMPLETE, pos, n_stats, n_fixes
        if buf[pos] == 125:
            break
        if buf[pos] != 34:
            raise ValueError("expected a key")
        key_end, escaped = _string_end(buf, n, pos + 1)
        if key_end >= n:
            return _INCOMPLETE, pos, n_stats, n_fixes
        if escaped:
            raise ValueError("escaped key")
        f = _field(buf, pos + 1, key_end)
        pos = _colon(buf, n, key_end)
        if pos >= n:
            return _INCOMPLETE, pos, n_stats, n_fixes
        if f < 0:
            pos = _skip(buf, n, pos)
            if pos >= n:
                return _INCOMPLETE, pos, n_stats, n_fixes
        else:
            if seen & (1 << f):  # a repeated field: the last would win
                raise ValueError("repeated field")
            seen |= 1 << f
            c = buf[pos]
            kind, a, x, exact = K_NONE, np.int64(0), 0.0, False
            if c == 34:
                a, after = _quoted(buf, n, pos, arena, strings, table, counts)
                if after > n:
                    return _INCOMPLETE, pos, n_stats, n_fixes
                if a < 0:
                    return ROOM_STRINGS, pos, n_stats, n_fixes
                kind, pos = K_STR, after
            elif c == 45 or 48 <= c <= 57:
                fits, value, is_int, end, x, exact = _number(buf, pos)
                if end >= n:
                    return _INCOMPLETE, pos, n_stats, n_fixes
                if is_int:
                    if not fits:
                        raise ValueError("integer past int64")
                    kind, a = K_INT, value
                else:
                    kind = K_FLOAT
                    if not exact:
                        if n_fixes >= fixes.shape[1]:
                            return ROOM_FIXES, pos, n_stats, n_fixes
                        fixes[F_TARGET, n_fixes], fixes[F_INDEX, n_fixes] = f, row
                        fixes[F_LO, n_fixes], fixes[F_HI, n_fixes] = pos, end
                        n_fixes += 1
                pos = end
            elif c == 110:  # null
                pos += 4
            elif c == 123 and f == ARGS:
                status, pos, last, n_fixes = _args(buf, n, pos, row, s_owner, s_key, s_kind, s_a, s_float, fixes,
                                                   n_stats, n_fixes, arena, strings, table, counts)
                if status != _OK:
                    return status, pos, n_stats, n_fixes
                kind, a = K_OBJECT, n_stats
                arg_count[row] = last - n_stats
                n_stats = last
            else:
                raise ValueError("unexpected value")
            if not (_ALLOWED[f] >> kind) & 1:
                raise ValueError("unexpected type")
            kinds[f, row] = kind
            values[f, row] = a
            if kind == K_FLOAT and exact:
                floats[f, row] = x  # over the value's bits
        pos = _next(buf, n, pos)
    if not seen & 1:
        raise ValueError("no ph")
    return _OK, pos + 1, n_stats, n_fixes


@njit(cache=True, nogil=True)
def _scan(buf, n, pos, after, kinds, values, floats, arg_count, s_owner, s_key, s_kind, s_a, s_float, fixes, arena,
          strings, table, counts):
    """Scan the events of buf[:n] from ``pos``: after an event (``after``) or at the array's "[".

    Returns a status (MORE, END, ROOM_*); ``counts`` holds the fill of each array and where to
    resume (C_RESUME, C_AFTER), the first and the end of the complete events (C_FIRST, C_LAST;
    -1: none) and, at END, the position after the array (C_END).
    """
    buf, kinds, values, floats, arg_count = _borrowed(buf), _borrowed(kinds), _borrowed(values), _borrowed(floats), \
        _borrowed(arg_count)
    s_owner, s_key, s_kind, s_a, s_float = _borrowed(s_owner), _borrowed(s_key), _borrowed(s_kind), _borrowed(s_a), \
        _borrowed(s_float)
    fixes = _borrowed(fixes)
    arena, strings, table, counts = _borrowed(arena), _borrowed(strings), _borrowed(table), _borrowed(counts)
    n_events, n_stats, n_fixes = counts[C_EVENTS], counts[C_STATS], counts[C_FIXES]
    counts[C_FIRST] = counts[C_LAST] = -1
    status = MORE
    while True:
        counts[C_EVENTS], counts[C_STATS], counts[C_FIXES] = n_events, n_stats, n_fixes
        counts[C_RESUME], counts[C_AFTER] = pos, after
        pos = _ws(buf, pos)
        if pos >= n:
            counts[C_RESUME] = n  # whitespace carries nothing to the next piece (a file of spaces stays small)
            break
        if after:
            if buf[pos] == 93:
                counts[C_END] = pos + 1
                status = END
                break
            if buf[pos] != 44:
                raise ValueError("expected a comma or the end of traceEvents")
        elif buf[pos] != 91:
            raise ValueError("traceEvents is not an array")
        pos = _ws(buf, pos + 1)
        if pos >= n:
            break
        if not after and buf[pos] == 93:  # []
            counts[C_END] = pos + 1
            status = END
            break
        if buf[pos] != 123:
            raise ValueError("an entry is not an object")
        if n_events >= kinds.shape[1]:
            status = ROOM_EVENTS
            break
        start = pos
        result, pos, n_stats_after, n_fixes_after = _event(
            buf, n, pos, n_events, kinds, values, floats, arg_count, s_owner, s_key, s_kind, s_a, s_float, fixes,
            n_stats, n_fixes, arena, strings, table, counts)
        if result != _OK:
            if result != _INCOMPLETE:
                status = result
            break
        n_events, n_stats, n_fixes, after = n_events + 1, n_stats_after, n_fixes_after, True
        if counts[C_FIRST] < 0:
            counts[C_FIRST] = start
        counts[C_LAST] = pos
    return status


@njit(cache=True)
def _repeats(owner, key):
    i, n = 0, len(owner)
    while i < n:
        j = i
        while j < n and owner[j] == owner[i]:  # an event's args are contiguous
            j += 1
        if j - i <= 32:  # most events: a few args, compared pairwise
            for a in range(i, j):
                for b in range(a + 1, j):
                    if key[a] == key[b]:
                        return True
        else:
            run = np.sort(key[i:j])
            for a in range(1, j - i):
                if run[a] == run[a - 1]:
                    return True
        i = j
    return False


def has_repeated_args(owner: np.ndarray, key: np.ndarray) -> bool:
    """Whether some event has an arg key twice (the dict of the reference path keeps the last): pairwise within
    small events, by sorting within large ones, so linear in the events and n log n in one event's args."""
    return bool(_repeats(owner, key))


class Scanner:
    """The arrays of one trace's events, filled a piece of text at a time (:meth:`piece`), read by :meth:`result`."""

    # Room at first (each array doubles when full): events and args per byte of text, floats left to Arrow
    # per piece, distinct strings and their bytes.
    EVENTS_PER_BYTE, ARGS_PER_BYTE, FIXES, STRINGS, ARENA = 1 / 128, 1 / 32, 1024, 1024, 1 << 16

    def __init__(self, size_hint: int) -> None:
        # Pages are touched only when written: room guessed generously from the text's size costs no memory.
        events = max(int(size_hint * self.EVENTS_PER_BYTE), 16)
        stats = max(int(size_hint * self.ARGS_PER_BYTE), 16)
        self.kinds = np.empty((N_FIELDS, events), np.int8)
        self.values = np.empty((N_FIELDS, events), np.int64)
        self.arg_count = np.empty(events, np.int32)
        self.args = [np.empty(stats, dtype) for dtype in S_TYPES]
        self.fixes = np.empty((4, self.FIXES), np.int64)
        self.arena = np.empty(self.ARENA, np.uint8)
        self.strings = np.empty((self.STRINGS, 2), np.int64)
        self.table = np.full(4 * self.STRINGS, -1, np.int64)
        self.counts = np.zeros(10, np.int64)
        self.after = False  # at the array's "[" until the first event

    def piece(self, buf: np.ndarray, n: int) -> tuple[int, int, int, int]:
        """Scan the events of buf[:n] (zero padding of PAD bytes after it) that are complete, starting where the
        last piece left off: (resume, first, last, end). The next piece starts with buf[resume:n]; buf[first:last]
        holds this piece's complete events (first -1: none); end is the position after the array, or -1.
        """
        pos, first, counts = 0, -1, self.counts
        while True:
            # mypy spreads *self.args over every parameter after it
            status = _scan(buf, n, pos, self.after, self.kinds, self.values, self.values.view(np.float64),  # type: ignore[call-arg]
                           self.arg_count, *self.args, self.args[S_A].view(np.float64), self.fixes, self.arena,
                           self.strings, self.table, counts)
            pos, self.after = int(counts[C_RESUME]), bool(counts[C_AFTER])
            if first < 0:
                first = int(counts[C_FIRST])
            if status in (MORE, END):
                break
            self._room(status, buf)
        self._fix(buf)
        return pos, first, pos if first >= 0 else -1, int(counts[C_END]) if status == END else -1

    def _room(self, status: int, buf: np.ndarray) -> None:
        """Double the array that is full (copying what it holds: only that much memory is touched)."""
        c = self.counts
        if status == ROOM_EVENTS:
            self.kinds, self.values = _doubled(self.kinds, c[C_EVENTS]), _doubled(self.values, c[C_EVENTS])
            self.arg_count = _doubled(self.arg_count[None], c[C_EVENTS])[0]
        elif status == ROOM_STATS:
            self.args = [_doubled(column[None], c[C_STATS])[0] for column in self.args]
        elif status == ROOM_FIXES:
            if c[C_FIXES] == 0:  # one event has more than there is room for
                self.fixes = _doubled(self.fixes, 0)
            self._fix(buf)
        else:  # ROOM_STRINGS: any of the three
            if c[C_STRINGS] + 1 > len(self.strings) // 2:
                strings = np.empty((2 * len(self.strings), 2), np.int64)
                strings[: c[C_STRINGS]] = self.strings[: c[C_STRINGS]]
                self.strings = strings
            if 4 * (c[C_STRINGS] + 1) > len(self.table):
                self.table = _table(self.arena, self.strings, c[C_STRINGS], 2 * len(self.table))
            # Room for the longest string the piece could hold.
            needed = c[C_ARENA] + len(buf)
            if needed > len(self.arena):
                grown = np.empty(max(2 * len(self.arena), needed), np.uint8)
                grown[: c[C_ARENA]] = self.arena[: c[C_ARENA]]
                self.arena = grown

    def _fix(self, buf: np.ndarray) -> None:
        """Floats the scan could not read exactly: parsed from their text by Arrow, which rounds as float() does."""
        n = int(self.counts[C_FIXES])
        if n == 0:
            return
        target, index, lo, hi = self.fixes[:, :n]
        offsets, data = gather(buf, lo, hi)
        text = pa.LargeStringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(data))
        parsed = pc.cast(text, pa.float64()).to_numpy(zero_copy_only=False)
        if not np.all(np.isfinite(parsed)):  # 1e400: msgspec refuses it, so does the reference path
            raise ValueError("float out of range")
        fields = target >= 0
        self.values.view(np.float64)[target[fields], index[fields]] = parsed[fields]
        self.args[S_A].view(np.float64)[index[~fields]] = parsed[~fields]
        self.counts[C_FIXES] = 0

    def result(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[np.ndarray], np.ndarray, np.ndarray]:
        """(kinds, values, arg_count, args (the S_* columns), arena, strings): views of the filled part."""
        c = self.counts
        e, s = c[C_EVENTS], c[C_STATS]
        return (self.kinds[:, :e], self.values[:, :e], self.arg_count[:e], [column[:s] for column in self.args],
                self.arena[: c[C_ARENA]], self.strings[: c[C_STRINGS]])


def _doubled(rows: np.ndarray, filled: int) -> np.ndarray:
    """``rows`` (a 2-d array) with twice the columns, the first ``filled`` copied."""
    bigger = np.empty((rows.shape[0], 2 * rows.shape[1]), rows.dtype)
    bigger[:, :filled] = rows[:, :filled]
    return bigger


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
def scaled(kinds, values, floats, factor, limit):
    """(round(v * factor) (0 if absent), whether v < 0, whether every |result| < limit) of a number field:
    ints exactly, floats rounded half to even as round() does."""
    out = np.zeros(len(kinds), np.int64)
    negative = np.zeros(len(kinds), np.bool_)
    for i in range(len(kinds)):
        if kinds[i] == K_INT:
            if abs(values[i]) >= limit // factor:
                return out, negative, False
            out[i] = values[i] * factor
            negative[i] = values[i] < 0
        elif kinds[i] == K_FLOAT:
            rounded = np.rint(floats[i] * factor)
            if not abs(rounded) < limit:
                return out, negative, False
            out[i] = np.int64(rounded)
            negative[i] = floats[i] < 0
    return out, negative, True


@njit(cache=True)
def arg_rows(s_key, stat_event, key, n_events, index):
    """The arg row with key id ``key`` of each event in ``index`` (stat_event: the event of each arg row, -1:
    none), -1 where it has none; of repeated keys the last, as a dict keeps."""
    at = np.full(n_events, -1, np.int32)
    for r in range(len(s_key)):
        if s_key[r] == key and stat_event[r] >= 0:
            at[stat_event[r]] = r
    rows = np.empty(len(index), np.int64)
    for i in range(len(index)):
        rows[i] = at[index[i]]
    return rows


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
def stat_rows(first, count, instant, ph, s_key, s_kind, s_a, s_float, keep):
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
            key[j] = s_key[r]
            kind = s_kind[r]
            if kind == V_INT or kind == V_TRUE or kind == V_FALSE:
                value_type[j] = T_INT
                ints[j] = s_a[r] if kind == V_INT else (1 if kind == V_TRUE else 0)
            elif kind == V_FLOAT:
                value_type[j] = T_DOUBLE
                doubles[j] = s_float[r]
            elif kind == V_STR:
                string[j] = s_a[r]
            else:
                value_type[j] = T_ODD
                source[j] = r
            j += 1
        if instant[e]:
            owner[j] = e
            string[j] = ph[e]
            j += 1
    return owner, key, value_type, ints, doubles, string, source
