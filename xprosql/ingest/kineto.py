"""PyTorch profiler (Kineto) trace JSON decoder: one trace in, warehouse record batches out.

Kineto traces hold CUPTI (or ROCm) activity records as Chrome trace events:
``ph`` X slices (``cat`` cpu_op, cuda_runtime, kernel, gpu_memcpy, ...), ``i``
instants, ``s``/``f`` flows and ``M`` metadata naming processes and threads.
Processes become ``devices`` (a GPU's pid is its device index), (pid, tid)
pairs ``tracks``, slices and instants ``events``; the GPU activity also fills
``kernels``, ``memcpys``, ``api_calls`` and ``counters``.

Two decoders give identical tables: a columnar one (:mod:`._kineto_columnar`,
compiled with numba, about ten times faster) for traces whose fields have the
types Kineto writes, and a per-event one (:mod:`._kineto_reference`) for the
rest, for traces too small to repay loading the compiled scan in a process
(:mod:`._compiled`), and for all traces without numba or with ``XPROSQL_PURE_PYTHON`` set.

Example:
    >>> for table, batch in decode_kineto(open("rank0.json.gz", "rb").read(), source="rank0.json.gz"):  # doctest: +SKIP
    ...     print(table, batch.num_rows)
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import Any

import msgspec
import pyarrow as pa

from xprosql.errors import IngestError
from xprosql.ingest import _kineto_reference
from xprosql.ingest._compiled import use_compiled
from xprosql.ingest._kineto_common import GPU_CATEGORIES, split

__all__ = ["GPU_CATEGORIES", "decode_kineto", "load_trace"]


class _Event(msgspec.Struct, gc=False):
    """One trace event: the Chrome trace fields Kineto writes (others are ignored), any value types."""

    ph: Any = None
    cat: Any = None
    name: Any = None
    pid: Any = None
    tid: Any = None
    ts: Any = None
    dur: Any = None
    args: Any = None
    id: Any = None
    bp: Any = None


_FIELDS = _Event.__struct_fields__
_EVENTS = msgspec.json.Decoder(list[_Event])


def _events(raw_events: msgspec.Raw, source: str) -> list[_Event | None]:
    """Events of any value types; entries of traceEvents that are not objects come back as None."""
    try:
        try:
            events: list[_Event | None] = list(_EVENTS.decode(raw_events))
        except msgspec.ValidationError:  # some entries are not event objects: convert one by one
            generic = msgspec.json.decode(raw_events)
            if not isinstance(generic, list):
                raise IngestError(source, "JSON without a traceEvents list: not a PyTorch/Kineto trace") from None
            events = [_Event(**{k: v for k, v in e.items() if k in _FIELDS}) if isinstance(e, dict) else None
                      for e in generic]
    except msgspec.DecodeError as exc:
        raise IngestError(source, f"invalid JSON (truncated or corrupt): {exc}") from None
    if not events:
        raise IngestError(source, "trace has no events (empty traceEvents)")
    return events


def load_trace(data: bytes, source: str) -> tuple[dict[str, Any], list[_Event | None]]:
    """Decompress (if gzipped) and parse a trace: its top-level fields and its events.

    Entries of traceEvents that are not objects come back as None. Raises
    :class:`IngestError` saying what is wrong when the file is not a trace.
    """
    trace, raw_events = split(data, source)
    return trace, _events(raw_events, source)


def decode_kineto(data: bytes, *, source: str) -> Iterator[tuple[str, pa.RecordBatch]]:
    """Decode one Kineto trace into warehouse record batches; the ``profiles`` row comes last.

    Single malformed events are skipped and counted in ``profiles.drop_reasons``;
    a file that is not a trace raises :class:`IngestError` naming ``source``.
    """
    # Millions of short-lived dicts and lists, none cyclic: the cycle collector's full
    # passes over them cost almost as much as the decoding itself.
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield from _decode(data, source)
    finally:
        if collecting:
            gc.enable()


def _decode(data: bytes, source: str) -> list[tuple[str, pa.RecordBatch]] | Iterator[tuple[str, pa.RecordBatch]]:
    """The columnar path when numba is there (as for XSpace) and the trace is regular, else the per-event one."""
    if use_compiled("kineto", len(data), source=source):
        from xprosql.ingest import _kineto_columnar

        try:
            return _kineto_columnar.decode(data, source)
        except _kineto_columnar.Irregular:  # a value of an unexpected type: the per-event path takes anything
            pass
    trace, events = load_trace(data, source)
    return _kineto_reference.decode_events(trace, events, source)
