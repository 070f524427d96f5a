"""All-null Arrow columns that share one zeroed buffer: the decoders' tables have many (columns a format never
fills, stats no event carries), and ``pa.nulls`` allocates and zeroes each one's buffers anew."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

__all__ = ["nulls", "zeros"]


def zeros(rows: int) -> pa.Buffer:
    """Zero bytes enough for any column of up to ``rows`` rows that :func:`nulls` builds (8 a row, and 8 more)."""
    return pa.py_buffer(np.zeros(8 * rows + 8, np.uint8))


def nulls(type_: pa.DataType, n: int, zeroed: pa.Buffer) -> pa.Array:
    """``pa.nulls(n, type_)`` over ``zeroed`` (from :func:`zeros`, for ``n`` rows or more), which every call may share.

    Example:
        >>> nulls(pa.int64(), 3, zeros(3)).to_pylist()
        [None, None, None]
    """
    if pa.types.is_dictionary(type_):
        return pa.DictionaryArray.from_arrays(nulls(type_.index_type, n, zeroed), pa.array([], type_.value_type))
    # Fixed-width data, a bitmap or offsets (all zero: empty values) fit in the zero bytes alike.
    buffers = [zeroed, zeroed] + ([zeroed] if pa.types.is_string(type_) or pa.types.is_binary(type_) else [])
    return pa.Array.from_buffers(type_, n, buffers, null_count=n)
