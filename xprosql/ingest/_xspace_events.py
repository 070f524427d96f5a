"""Event-scale columns of an XSpace as numpy arrays, for :mod:`xprosql.ingest.xspace`.

Events and event stats are millions of rows; metadata, stat names and lines are
thousands. So every per-event value is a gather from a small per-id table, looked
up once per plane by id (no joins), and strings stay dictionary codes until
Arrow.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from xprosql.ingest._nulls import nulls

__all__ = ["STAT_KIND_CODES", "Column", "Promoted", "codes_of", "last_per_owner", "plane_lookup", "sort_order",
           "stat_strings", "unify"]

# value_type's dictionary; a stat's code is its XStat value field number minus 2 (STAT_KINDS).
STAT_KIND_CODES = pa.array(["double", "uint64", "int64", "str", "bytes", "ref"], pa.string())


@dataclass
class Column:
    """One table column: values, validity (None: all valid), and for strings the dictionary the codes index."""

    values: np.ndarray
    valid: np.ndarray | None = None
    dictionary: pa.Array | None = None

    def take(self, rows: np.ndarray) -> Column:
        return Column(np.take(self.values, rows), None if self.valid is None else np.take(self.valid, rows), self.dictionary)

    def to_arrow(self, type_: pa.DataType, *, zeroed: pa.Buffer | None = None) -> pa.Array:
        """As an Arrow array of ``type_`` (a dictionary type for strings), sharing the values' memory where it can;
        all null over ``zeroed`` (:func:`xprosql.ingest._nulls.zeros`, for this many rows) where given."""
        if self.valid is not None and not self.valid.any():  # promoted columns are often empty
            return pa.nulls(len(self.valid), type_) if zeroed is None else nulls(type_, len(self.valid), zeroed)
        bitmap = None if self.valid is None or self.valid.all() else pa.py_buffer(np.packbits(self.valid, bitorder="little"))
        if self.dictionary is not None:
            codes = pa.Array.from_buffers(pa.int32(), len(self.values), [bitmap, pa.py_buffer(_as(self.values, np.int32))])
            return pa.DictionaryArray.from_arrays(codes, self.dictionary).cast(type_)
        if pa.types.is_boolean(type_):
            data = np.packbits(self.values, bitorder="little")
        else:
            data = _as(self.values, type_.to_pandas_dtype())
        return pa.Array.from_buffers(type_, len(self.values), [bitmap, pa.py_buffer(data)])


def _as(values: np.ndarray, dtype: type) -> np.ndarray:
    """``values`` as a contiguous array of ``dtype`` (a copy only when needed)."""
    return np.ascontiguousarray(values, dtype=dtype)


def plane_lookup(keys: Sequence[np.ndarray], rows: Sequence[np.ndarray], query: np.ndarray,
                 bounds: np.ndarray) -> np.ndarray:
    """``rows[p][i]`` where ``keys[p][i] == query[j]``, plane p owning ``query[bounds[p]:bounds[p + 1]]``; -1 if none.

    Ids are unique within a plane (protobuf map keys). Small ids (the usual case) index a table; others are searched.
    """
    out = np.full(len(query), -1, dtype=np.int32)  # rows of small tables (names, metadata)
    for plane, (plane_keys, plane_rows) in enumerate(zip(keys, rows)):
        lo, hi = int(bounds[plane]), int(bounds[plane + 1])
        if lo == hi or len(plane_keys) == 0:
            continue
        wanted = query[lo:hi]
        if plane_keys.min() >= 0 and plane_keys.max() < 4 * len(plane_keys) + 1024:
            table = np.full(int(plane_keys.max()) + 2, -1, dtype=np.int32)  # the last entry: ids out of range
            table[plane_keys] = plane_rows
            out[lo:hi] = table[np.where((wanted >= 0) & (wanted < len(table)), wanted, -1)]
            continue
        order = np.argsort(plane_keys)
        sorted_keys = plane_keys[order]
        at = np.minimum(np.searchsorted(sorted_keys, wanted), len(sorted_keys) - 1)
        out[lo:hi] = np.where(sorted_keys[at] == wanted, plane_rows[order][at], -1)
    return out


def codes_of(strings: pa.Array) -> Column:
    """A small string array as codes into its unique values, with one extra null row at the end.

    The extra row is what code -1 gathers: a missing metadata row reads as null.
    """
    encoded = strings.cast(pa.string()).dictionary_encode()
    codes = encoded.indices.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int32)
    valid = np.append(encoded.indices.is_valid().to_numpy(zero_copy_only=False), False)
    return Column(np.append(codes, 0), valid, encoded.dictionary)


def last_per_owner(owner: np.ndarray) -> np.ndarray:
    """For rows grouped by a non-decreasing owner: True at each owner's last row (the last occurrence wins)."""
    last = np.ones(len(owner), dtype=bool)
    if len(owner) > 1:
        last[:-1] = owner[:-1] != owner[1:]
    return last


def stat_strings(kind: np.ndarray, text: pa.Array, refs: np.ndarray, ref_name: np.ndarray, names: pa.Array) -> pa.Array:
    """Each stat's string: its str value (UTF-8 checked), or for a ref (rows ``refs``) the name ``ref_name``
    points at (-1: none); else null."""
    strings = pc.if_else(pa.array(kind == 5), text, pa.scalar(None, pa.binary())).cast(pa.string())
    named = ref_name >= 0
    if not named.any():
        return strings
    is_ref = np.zeros(len(kind), dtype=bool)
    is_ref[refs[named]] = True
    codes = np.zeros(len(kind), dtype=np.int32)
    codes[refs[named]] = ref_name[named]
    by_name = pa.DictionaryArray.from_arrays(pa.array(codes, mask=~is_ref), names).cast(pa.string())
    return pc.if_else(pa.array(is_ref), by_name, strings)


def sort_order(start: np.ndarray, timed: np.ndarray | None) -> np.ndarray:
    """Row order by start time then row number, rows without a start (not ``timed``) last, in row order."""
    if timed is None:
        return np.argsort(start, kind="stable")
    rows = np.flatnonzero(timed)
    return np.concatenate([rows[np.argsort(start[rows], kind="stable")], np.flatnonzero(~timed)])


def unify(pieces: Sequence[pa.Array]) -> tuple[list[np.ndarray], pa.Array]:
    """For dictionaries ``pieces``: each one's codes into their distinct values, and those values."""
    combined = pa.concat_arrays([p.cast(pa.string()) for p in pieces]).dictionary_encode()
    remap = combined.indices.to_numpy(zero_copy_only=False).astype(np.int32)
    bounds = np.cumsum([0] + [len(p) for p in pieces])
    return [remap[lo:hi] for lo, hi in itertools.pairwise(bounds)], combined.dictionary


@dataclass
class Promoted:
    """An events column: each event's metadata default, unless the event has a value of its own.

    Events are many and defaults few, so only the events' own values are stored
    (``rows`` ascending, in file order until :meth:`ranked`); columns are built
    for a batch of rows at a time.
    """

    default: Column  # per metadata row, then one null row (what md_row -1 reads); valid is never None
    rows: np.ndarray
    values: Column  # the own values, codes into default.dictionary for strings; valid is never None

    @classmethod
    def of(cls, default: Column) -> Promoted:
        return cls(default, np.zeros(0, np.int64), Column(default.values[:0].copy(), np.zeros(0, bool)))

    def at(self, rows: np.ndarray, md_row: np.ndarray) -> Column:
        """Values at ``rows`` (ascending), whose metadata rows are ``md_row``."""
        out = self.default.take(md_row)
        assert out.valid is not None and self.values.valid is not None  # a Promoted's valid is never None
        if len(self.rows) and len(rows):
            at = np.minimum(np.searchsorted(self.rows, rows), len(self.rows) - 1)
            hit = np.flatnonzero(self.rows[at] == rows)
            out.values[hit] = self.values.values[at[hit]]
            out.valid[hit] = self.values.valid[at[hit]]
        return out

    def batch(self, first: int, md_row: np.ndarray) -> Column:
        """Values at rows ``first .. first + len(md_row)`` (after :meth:`ranked`: output positions)."""
        assert self.default.valid is not None and self.values.valid is not None  # never None in a Promoted
        if not self.default.valid.any():  # no metadata has this stat: no defaults to gather
            out = Column(np.zeros(len(md_row), dtype=self.default.values.dtype), np.zeros(len(md_row), dtype=bool),
                         self.default.dictionary)
        else:
            out = self.default.take(md_row)
        assert out.valid is not None
        lo, hi = np.searchsorted(self.rows, [first, first + len(md_row)])
        out.values[self.rows[lo:hi] - first] = self.values.values[lo:hi]
        out.valid[self.rows[lo:hi] - first] = self.values.valid[lo:hi]
        return out

    def set(self, rows: np.ndarray, values: Column | pa.Array) -> None:
        """Give ``rows`` (none set before) values of their own: an Arrow array without nulls, or a Column (for a
        string column, codes into its own dictionary)."""
        if isinstance(values, pa.Array):
            values = self._column(values)
        if values.dictionary is not None:
            values = self._recode(values)
        rows = np.concatenate([self.rows, rows])
        order = np.argsort(rows, kind="stable")
        self.rows = rows[order]
        self.values = Column(np.concatenate([self.values.values, values.values])[order],
                             np.concatenate([self.values.valid, values.valid])[order])

    def _column(self, values: pa.Array) -> Column:
        valid = np.ones(len(values), dtype=bool)
        if self.default.dictionary is None:
            return Column(values.to_numpy(zero_copy_only=False).astype(self.default.values.dtype, copy=False), valid)
        encoded = values.cast(pa.string()).dictionary_encode()
        return Column(encoded.indices.to_numpy(zero_copy_only=False), valid, encoded.dictionary)

    def _recode(self, values: Column) -> Column:
        """``values`` as codes into this column's dictionary, which takes in their strings."""
        (old, new), dictionary = unify([self.default.dictionary, values.dictionary])
        self.default = Column(_remap(old, self.default.values), self.default.valid, dictionary)
        self.values = Column(_remap(old, self.values.values), self.values.valid)
        return Column(_remap(new, values.values), values.valid)

    def valid(self, md_row: np.ndarray) -> np.ndarray:
        """Whether each event (``md_row``: all events' metadata rows) has a value."""
        assert self.default.valid is not None  # never None in a Promoted
        valid = self.default.valid[md_row]
        valid[self.rows] = self.values.valid
        return valid

    def ranked(self, rank: np.ndarray) -> Promoted:
        """This column with each event's row replaced by ``rank[row]`` (its output position)."""
        rows = rank[self.rows]
        order = np.argsort(rows)
        return Promoted(self.default, rows[order], self.values.take(order))


def _remap(table: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """``table[codes]``; an empty dictionary has only null rows, whose codes stay 0."""
    return table[codes] if len(table) else np.zeros_like(codes, dtype=np.int32)
