"""rocprofv3 (rocprofiler-sdk) JSON decoder: one ``--output-format json`` file in, warehouse record batches out.

rocprofv3 writes ``{"rocprofiler-sdk-tool": [ {process}, ... ]}``, one object per profiled process
(rocprofiler-sdk's ``lib/output/generateJSON.cpp`` and ``source/docs/rocprofv3-schema.json``), with
its sections in this order: ``metadata`` (pid, ``init_time`` / ``fini_time`` in ns: the run's window,
node, command, config), ``agents`` (CPU type 1, GPU type 2), ``counters`` (the counters a run
collects, by agent), ``strings`` (the names of every buffer-record kind and operation, marker
messages by correlation id, kernel renames), ``code_objects``, ``kernel_symbols``,
``host_functions``, ``summary``, ``callback_records`` (``counter_collection``) and
``buffer_records`` by kind. A record's ``kind`` and ``operation`` index ``strings.buffer_records``.

What lands where (the shape of a Kineto GPU trace, so the GPU analyses read it alike):

* ``devices``: one per GPU agent (``/device:GPU:N``, N its ``logical_node_type_id``), model as the
  agent reports it (``product_name``; a generic one is resolved from the gfx target and CUs by
  :func:`xprosql.models.hardware.device_model`), peaks from the chip table
  (:data:`~xprosql.models.hardware.CHIPS`), ``compute_capability`` the gfx target as ROCm shows it
  (gfx950: 9.5); every agent field in ``device_stats`` (``agent.<field>``). The process is the
  ``/host:CPU`` device (its CPU agents' fields as ``cpu_agent.<i>.<field>``), made when it has events.
* ``tracks``: a GPU's queues are its streams (``Queue #<handle>``, ``stream_id`` the queue handle);
  its memory copies, which run on DMA engines and no queue, one track ``Memory copies`` with
  ``stream_id`` -1; host threads one track each.
* ``kernel_dispatch`` -> ``events`` (category ``kernel``, ``metadata_id`` the kernel id) and
  ``kernels``: the name is the symbol's ``formatted_kernel_name`` (the name rocprofv3's CSV shows;
  a ``--kernel-rename`` name by external correlation id wins), ``grid_*`` and ``block_*`` the
  HSA grid (in work-items, as HSA records it, not in workgroups as CUDA's) and workgroup sizes,
  ``shared_memory_bytes`` the dispatch's group segment (LDS), ``registers_per_thread`` the
  kernel's arch + accumulation VGPRs. ``event_stats`` keep ``grid_size`` and ``workgroup_size``
  (JSON ``[x, y, z]``), ``dispatch_id``, ``private_segment_size`` (scratch), ``thread_id``, the HIP
  ``stream_id`` and a non-zero ``external_correlation_id`` (the kernel id is ``events.metadata_id``,
  the group segment ``kernels.shared_memory_bytes``). ``kernel_symbols`` -> ``event_metadata`` (per
  kernel id, on the GPU of its code object) and ``metadata_stats`` (registers, segment sizes,
  mangled and demangled names).
* ``memory_copy`` -> ``events`` (category ``gpu_memcpy``, named ``Memcpy HtoD`` ... as HTA's kinds
  expect) and ``memcpys`` (``PtoP`` between two GPUs; ``Device`` memory kinds on GPU agents).
* ``hip_api`` (category ``cuda_runtime``, as Kineto names HIP calls on ROCm; ``api`` runtime or
  compiler), ``hsa_api``, ``rccl_api``, ``rocdecode_api``, ``rocjpeg_api`` -> host ``events`` and
  ``api_calls``; the internal correlation id joins a call to the kernels and copies it launched.
* ``marker_api`` (roctx) -> host ``events``: ranges and marks with a message are
  ``user_annotation`` events named by it (marks: ``ph`` ``i``), other marker calls ``marker_api``.
* ``memory_allocation`` and ``scratch_memory`` -> host ``events`` named ``MemoryAllocation`` /
  ``MemoryDeallocation`` with the stats ``memory._memory_events`` reads (``allocator_name`` ``hip:N``,
  ``hip:N vmem``, ``scratch:N`` or ``cpu``; ``allocation_bytes``; ``addr``; ``bytes_allocated``, the
  allocator's bytes in use after the event, counted from the file's own allocations and frees; not
  for scratch, whose frees are not sized). A free of a block allocated before the run has no size.
* ``callback_records.counter_collection`` -> ``counters``: one row per dispatch and counter
  (``sample`` the dispatch id, ``kernel`` its name, ``counter_set`` the counter's block), the
  values of the counter's dimension instances summed as rocprofv3's CSV sums them. No ``event_id``:
  the records precede the dispatches in the file; join on the ``dispatch_id`` stat.
* ``profiles``: format ``rocprof``, ``start_ns`` the first process's ``init_time`` (rocprofiler's
  clock, as recorded: not the epoch), ``duration_ps`` to ``fini_time`` (or the last record's end),
  host the node's hostname; ``trace_metadata`` holds each process's ``metadata``, ``code_objects``,
  ``counters``, ``host_functions``, ``summary`` and any other section, the record count of every
  kind, and the kinds the file lacks (``absent``: not an error). Records that cannot be stored
  (end before start, before ``init_time``, on an agent the file does not list, of a kind xprosql
  does not read such as PC samples) are counted in ``drop_reasons``.

What the GPU analyses can and cannot read in such a profile: kernels, copies and queues feed HTA's
temporal breakdown, idle time and overlap, the kernel tables (``ops.top_ops``), steps (the whole run
is one step: rocprofv3 marks none), the bottleneck breakdown and the findings; with ``--hip-trace``
the launches feed launch coverage, HTA's launch and queue statistics; roctx ranges feed
``names.tree``; allocations the memory analyses. rocprofv3 records no PyTorch ops (``cpu_op``) and
no FLOP or byte counts, so the framework-op tables, the roofline's costs (its rows have times and the
chip's peaks, no FLOPs) and the critical path have nothing to read: those analyses name the profile
and what it lacks (:class:`xprosql.NotApplicableWarning`).

The parse streams: the text (gunzipped as it is read) is taken a few MB at a time; each window of
an array of records is cut at an element boundary (a candidate checked by decoding it with
msgspec, else found by a bracket-depth scan with numpy) and decoded at once, and its rows are
yielded before the next window is read. Memory grows with the metadata (agents, kernel symbols,
marker messages, live allocations), not with the number of records. The sections that name
records (metadata, agents, strings) must precede them, as rocprofv3 writes them.

Not read: rocprofv3's other outputs. The ``rocpd`` SQLite database's schema is not in the
documentation (only in rocprofiler-sdk's source, ``share/rocprofiler-sdk-rocpd/*.sql``, which
changes between releases), the CSV output is a directory of per-domain files whose columns the
documentation gives only by example, and no real sample of either is at hand to test against;
the Perfetto (``.pftrace``) and OTF2 outputs are binary trace formats of their own. Record with
``--output-format json`` (rocprofv3 writes several formats in one run).

Example:
    >>> for table, batch in decode_rocprof(open("908_results.json", "rb").read(), source="908_results.json"):  # doctest: +SKIP
    ...     print(table, batch.num_rows)
"""

from __future__ import annotations

import gc
import io
import json
import mmap
import re
import zlib
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from isal import igzip

from xprosql.errors import IngestError
from xprosql.ingest import _kineto_common as common
from xprosql.models import hardware
from xprosql.models.tables import TABLES

__all__ = ["FORMAT", "decode_rocprof", "looks_like_rocprof"]

FORMAT = "rocprof"
_ROOT = "rocprofiler-sdk-tool"
_HEAD = re.compile(rb'\s*\{\s*"rocprofiler-sdk-tool"\s*:')
_GZIP_MAGIC = b"\x1f\x8b"
# Text read at a time, and the window of an array decoded at once.
_CHUNK = 8 << 20
# Mapped file pages read this far are handed back to the kernel (a GB file never sits in memory).
_DROP_EVERY = 64 << 20
# Headroom below 2**63: (ns - origin) * 1000 and start + dur stay in int64.
_MAX_PS = 2**62
_GPU, _CPU = 2, 1  # agents[].type

_WS = re.compile(rb"[ \t\r\n]*")
_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.S)
_STRUCTURAL = re.compile(rb'[{}\[\]"]')
_SCALAR_END = re.compile(rb"[,}\]\s]")
_FIRST_KEY = re.compile(rb'\{\s*"((?:[^"\\]|\\.)*)"', re.S)

ApiDomain = Literal["runtime", "compiler", "hsa", "rccl", "rocdecode", "rocjpeg"]


# The records, as rocprofiler-sdk serialises them (include/rocprofiler-sdk/cxx/serialization/save.hpp and the
# tool's ext records, lib/output/stream_info.hpp). Fields the conversion needs are required: a record without
# one is dropped and counted; fields it can do without default to None.
class _Handle(msgspec.Struct, gc=False):
    handle: int = 0


class _Correlation(msgspec.Struct, gc=False):
    internal: int = 0
    external: int = 0


class _Dim3(msgspec.Struct, gc=False):
    x: int = 0
    y: int = 0
    z: int = 0


class _DispatchInfo(msgspec.Struct, gc=False):
    agent_id: _Handle
    queue_id: _Handle
    kernel_id: int
    dispatch_id: int = 0
    private_segment_size: int | None = None
    group_segment_size: int | None = None
    workgroup_size: _Dim3 | None = None
    grid_size: _Dim3 | None = None


class _KernelDispatch(msgspec.Struct, gc=False):
    start_timestamp: int
    end_timestamp: int
    dispatch_info: _DispatchInfo
    correlation_id: _Correlation = msgspec.field(default_factory=_Correlation)
    thread_id: int | None = None
    stream_id: _Handle | None = None


class _ApiCall(msgspec.Struct, gc=False):
    kind: int
    operation: int
    start_timestamp: int
    end_timestamp: int
    correlation_id: _Correlation = msgspec.field(default_factory=_Correlation)
    thread_id: int = 0
    args: Any = None
    retval: Any = None
    stream_id: _Handle | None = None


class _MemoryCopy(msgspec.Struct, gc=False):
    kind: int
    operation: int
    start_timestamp: int
    end_timestamp: int
    dst_agent_id: _Handle
    src_agent_id: _Handle
    correlation_id: _Correlation = msgspec.field(default_factory=_Correlation)
    thread_id: int = 0
    bytes: int | None = None
    stream_id: _Handle | None = None


class _MemoryAllocation(msgspec.Struct, gc=False):
    kind: int
    operation: int
    start_timestamp: int
    end_timestamp: int
    agent_id: _Handle
    correlation_id: _Correlation = msgspec.field(default_factory=_Correlation)
    thread_id: int = 0
    address: str | int | None = None
    allocation_size: int | None = None
    stream_id: _Handle | None = None


class _ScratchMemory(msgspec.Struct, gc=False):
    kind: int
    operation: int
    start_timestamp: int
    end_timestamp: int
    agent_id: _Handle
    queue_id: _Handle | None = None
    correlation_id: _Correlation = msgspec.field(default_factory=_Correlation)
    thread_id: int = 0
    flags: Any = None
    allocation_size: int | None = None


class _CounterValue(msgspec.Struct, gc=False):
    counter_id: _Handle
    value: float


class _DispatchData(msgspec.Struct, gc=False):
    dispatch_info: _DispatchInfo
    correlation_id: _Correlation = msgspec.field(default_factory=_Correlation)
    start_timestamp: int | None = None
    end_timestamp: int | None = None


class _CounterRecord(msgspec.Struct, gc=False):
    dispatch_data: _DispatchData
    records: list[_CounterValue] = []
    thread_id: int | None = None
    stream_id: _Handle | None = None


class _KernelSymbol(msgspec.Struct, gc=False):
    kernel_id: int
    code_object_id: int = 0
    kernel_name: str | None = None
    formatted_kernel_name: str | None = None
    demangled_kernel_name: str | None = None
    truncated_kernel_name: str | None = None
    kernel_object: int | None = None
    kernarg_segment_size: int | None = None
    kernarg_segment_alignment: int | None = None
    group_segment_size: int | None = None
    private_segment_size: int | None = None
    sgpr_count: int | None = None
    arch_vgpr_count: int | None = None
    accum_vgpr_count: int | None = None
    kernel_code_entry_byte_offset: int | None = None


# metadata_stats of a kernel symbol: every field but its id and the names event_metadata holds.
_SYMBOL_STATS = ("kernel_name", "demangled_kernel_name", "code_object_id", "kernel_object", "kernarg_segment_size",
                 "kernarg_segment_alignment", "group_segment_size", "private_segment_size", "sgpr_count",
                 "arch_vgpr_count", "accum_vgpr_count", "kernel_code_entry_byte_offset")


_GENERIC = msgspec.json.Decoder()
_RAWS = msgspec.json.Decoder(list[msgspec.Raw])


def looks_like_rocprof(head: bytes) -> bool:
    """Whether a file's first bytes (gzipped or not) open a rocprofv3 JSON: ``{"rocprofiler-sdk-tool":``."""
    if head[:2] == _GZIP_MAGIC:
        try:
            head = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(head, 4096)
        except zlib.error:
            return False
    return _HEAD.match(head) is not None


def decode_rocprof(data: bytes | mmap.mmap, *, source: str) -> Iterator[tuple[str, pa.RecordBatch]]:
    """Decode one rocprofv3 JSON file (plain or gzipped, bytes or a mapped file) into warehouse record batches;
    the ``profiles`` row comes last.

    Records that cannot be stored are counted in ``profiles.drop_reasons``; a file that is not a
    rocprofv3 JSON, or is truncated or corrupt, raises :class:`IngestError` naming ``source``.
    """
    if not len(data):
        raise IngestError(source, "empty file (0 bytes)")
    # Many short-lived objects, none cyclic: the cycle collector's passes would cost more than they find.
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield from _Decoder(data, source).run()
    finally:
        if collecting:
            gc.enable()


class _MappedReader(io.RawIOBase):
    """The file's bytes read forward; the pages of a mapped file already read go back to the kernel."""

    def __init__(self, data: bytes | mmap.mmap) -> None:
        self.data, self.offset, self.dropped = data, 0, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        n = min(len(buffer), len(self.data) - self.offset)
        with memoryview(self.data) as view:
            buffer[:n] = view[self.offset:self.offset + n]
        self.offset += n
        if isinstance(self.data, mmap.mmap) and self.offset - self.dropped >= _DROP_EVERY and hasattr(mmap, "MADV_DONTNEED"):
            self.dropped = self.offset - self.offset % mmap.PAGESIZE
            self.data.madvise(mmap.MADV_DONTNEED, 0, self.dropped)
        return n


class _Text:
    """The file's JSON text, read forward a chunk at a time: ``buf[pos:]`` is what is read and not yet used."""

    def __init__(self, data: bytes | mmap.mmap, source: str) -> None:
        raw = _MappedReader(data)
        self.stream: Any = igzip.GzipFile(fileobj=raw) if data[:2] == _GZIP_MAGIC else raw
        self.source = source
        self.buf = b""
        self.pos = 0
        self.offset = 0  # text before buf[0]
        self.eof = False

    def read_more(self, at_least: int = 1) -> bool:
        """Append at least ``at_least`` bytes of text (fewer at its end); False once there is no more."""
        if self.eof:
            return False
        try:
            chunk = self.stream.read(max(at_least, _CHUNK))
        except common.GZIP_ERRORS as exc:
            raise IngestError(self.source, f"truncated or corrupt gzip: {exc}") from None
        if not chunk:
            self.eof = True
            return False
        self.offset += self.pos
        self.buf = self.buf[self.pos:] + chunk
        self.pos = 0
        return True

    def fill(self, n: int) -> None:
        """At least ``n`` bytes after the cursor, unless the text ends first."""
        while len(self.buf) - self.pos < n and self.read_more(n - (len(self.buf) - self.pos)):
            pass

    def truncated(self) -> IngestError:
        return IngestError(self.source, f"invalid JSON (truncated or corrupt): the text ends at byte "
                                        f"{self.offset + len(self.buf):,} inside a value")

    def malformed(self, what: str) -> IngestError:
        return IngestError(self.source, f"invalid JSON (truncated or corrupt): {what} at byte {self.offset + self.pos:,}")

    def peek(self) -> int:
        """The next byte that is not white space (not consumed)."""
        while True:
            match = _WS.match(self.buf, self.pos)
            self.pos = match.end() if match else self.pos
            if self.pos < len(self.buf):
                return self.buf[self.pos]
            if not self.read_more():
                raise self.truncated()

    def at_end(self) -> bool:
        """Only white space is left."""
        while True:
            match = _WS.match(self.buf, self.pos)
            self.pos = match.end() if match else self.pos
            if self.pos < len(self.buf):
                return False
            if not self.read_more():
                return True

    def expect(self, char: bytes) -> None:
        if self.peek() != char[0]:
            raise self.malformed(f"expected {char.decode()!r}")
        self.pos += 1

    def string(self) -> str:
        if self.peek() != ord('"'):
            raise self.malformed("expected a string")
        while True:
            match = _STRING.match(self.buf, self.pos)
            if match is not None:
                self.pos = match.end()
                return str(msgspec.json.decode(match.group()))
            if not self.read_more():
                raise self.truncated()

    def object_keys(self) -> Iterator[str]:
        """The keys of the object at the cursor; the caller takes each one's value before the next."""
        for _ in self._members(b"{", b"}"):
            key = self.string()
            self.expect(b":")
            yield key

    def items(self) -> Iterator[None]:
        """Steps over the elements of the array at the cursor; the caller takes each element."""
        return self._members(b"[", b"]")

    def _members(self, opening: bytes, closing: bytes) -> Iterator[None]:
        """Steps over the comma-separated members between ``opening`` and ``closing``."""
        self.expect(opening)
        first = True
        while True:
            char = self.peek()
            if char == closing[0]:
                self.pos += 1
                return
            if not first:
                if char != ord(","):
                    raise self.malformed(f"expected ',' or '{closing.decode()}'")
                self.pos += 1
            first = False
            yield None

    def value(self) -> bytes:
        """The text of the value at the cursor, whole (for the small sections; records are read by :meth:`windows`)."""
        char = self.peek()
        start = self.pos
        if char == ord('"'):
            self.string()
            return self.buf[start:self.pos]
        if char not in b"{[":
            while True:
                match = _SCALAR_END.search(self.buf, start)
                if match is not None or self.eof:
                    end = match.start() if match is not None else len(self.buf)
                    self.pos = end
                    return self.buf[start:end]
                self.read_more()
                start = self.pos
        depth, scanned = 0, 0  # scanned: text after the value's start already walked
        while True:
            match = _STRUCTURAL.search(self.buf, self.pos + scanned)
            if match is None:
                scanned = len(self.buf) - self.pos
                if not self.read_more():
                    raise self.truncated()
                continue
            at = match.start()
            if self.buf[at] == ord('"'):
                string = _STRING.match(self.buf, at)
                if string is None:
                    scanned = at - self.pos
                    if not self.read_more():
                        raise self.truncated()
                    continue
                scanned = string.end() - self.pos
                continue
            depth += 1 if self.buf[at] in b"{[" else -1
            scanned = at + 1 - self.pos
            if depth == 0:
                text = self.buf[self.pos:at + 1]
                self.pos = at + 1
                return text

    def windows(self, typed: msgspec.json.Decoder) -> Iterator[tuple[list[Any], bool]]:
        """The elements of the array at the cursor, a window of text at a time: (elements, typed), where typed is
        False when some element did not fit the type and the window came back as plain JSON values."""
        self.expect(b"[")
        size = _CHUNK
        candidates: re.Pattern[bytes] | None = None
        while True:
            self.fill(size)
            char = self.peek()
            if char == ord("]"):
                self.pos += 1
                return
            if char != ord("{"):  # not an array of objects: a value at a time
                yield _decode_window(typed, b"[" + self.value() + b"]") or ([], False)
                self._after_element()
                continue
            if candidates is None:
                first = _FIRST_KEY.match(self.buf, self.pos)
                key = first.group(1) if first else b""
                # Where an element may end: a '}' before the next element's first key, or before the array's end.
                candidates = re.compile(rb'\}(?=\s*(?:,\s*\{\s*"' + re.escape(key) + rb'"|\]))')
            end = min(len(self.buf), self.pos + size)
            decoded = None
            tail = max(self.pos, end - (256 << 10))
            found = [m.start() for m in candidates.finditer(self.buf, tail, end)] or \
                [m.start() for m in candidates.finditer(self.buf, self.pos, tail)][-2:]
            for cut in found[::-1][:2]:  # a checked cut: the decode fails unless it ends an element
                decoded = _decode_window(typed, b"[" + self.buf[self.pos:cut + 1] + b"]")
                if decoded is not None:
                    break
            if decoded is None:
                scanned = _last_element_end(self.buf[self.pos:end])
                if scanned is None:
                    if end < len(self.buf) or not self.eof:
                        size *= 2  # an element longer than the window
                        continue
                    raise self.truncated()
                cut = scanned + self.pos
                decoded = _decode_window(typed, b"[" + self.buf[self.pos:cut + 1] + b"]")
                if decoded is None:
                    try:
                        msgspec.json.decode(b"[" + self.buf[self.pos:cut + 1] + b"]")
                    except msgspec.DecodeError as exc:
                        raise self.malformed(str(exc)) from None
                    raise self.malformed("an unreadable record")
            self.pos = cut + 1
            size = _CHUNK
            yield decoded
            self._after_element()

    def _after_element(self) -> None:
        char = self.peek()
        if char == ord(","):
            self.pos += 1
        elif char != ord("]"):
            raise self.malformed("expected ',' or ']' after a record")


def _decode_window(typed: msgspec.json.Decoder, text: bytes) -> tuple[list[Any], bool] | None:
    """The elements of ``text`` (a JSON array) typed, else as plain values; None when it is not valid JSON."""
    try:
        return typed.decode(text), True
    except msgspec.ValidationError:
        try:
            values = _GENERIC.decode(text)
        except msgspec.DecodeError:
            return None
        return (values, False) if isinstance(values, list) else None
    except msgspec.DecodeError:
        return None


def _last_element_end(window: bytes) -> int | None:
    """Where the last whole element of an array ends in ``window`` (which starts at an element, at depth 0 of the
    array): the index of its closing bracket, before the array's own end if the window holds it; None if no element
    ends in it. Brackets inside strings do not count; a quote after an odd run of backslashes is inside its string."""
    a = np.frombuffer(window, np.uint8)
    quotes = a == 34
    if len(a) > 1 and quotes.any():
        for q in np.flatnonzero(quotes[1:] & (a[:-1] == 92)) + 1:
            k = q - 1
            while k >= 0 and a[k] == 92:
                k -= 1
            if (q - 1 - k) % 2:
                quotes[q] = False
    outside = np.bitwise_xor.accumulate(quotes.view(np.uint8)) == 0
    opens = ((a == 123) | (a == 91)) & outside
    closes = ((a == 125) | (a == 93)) & outside
    depth = np.cumsum(opens.view(np.int8) - closes.view(np.int8), dtype=np.int32)
    array_end = np.flatnonzero(closes & (depth < 0))
    ends = np.flatnonzero(closes & (depth == 0))
    if len(array_end):
        ends = ends[ends < array_end[0]]
    return int(ends[-1]) if len(ends) else None


# ---------------------------------------------------------------------------------------------------------------
# From records to rows


def _dim3(value: _Dim3 | None) -> tuple[int | None, int | None, int | None]:
    return (value.x, value.y, value.z) if value is not None else (None, None, None)


def _gfx_capability(agent: dict[str, Any]) -> tuple[int, int] | None:
    """ROCm's compute capability of a GPU agent: the gfx target's major and minor (gfx950 -> (9, 5), gfx90a -> (9, 0))."""
    version = common.to_int(agent.get("gfx_target_version"))
    if version:
        return version // 10000, version // 100 % 100
    match = re.fullmatch(r"gfx(\d+?)([0-9a-f])([0-9a-f])", str(agent.get("name") or ""))
    return (int(match.group(1)), int(match.group(2), 16)) if match else None


def _int_array(values: Sequence[int | None]) -> tuple[pa.Array, str]:
    """Integers as int64, else (past it) uint64, else text."""
    try:
        return pa.array(values, pa.int64()), "int64"
    except (OverflowError, pa.ArrowInvalid):
        try:
            return pa.array(values, pa.uint64()), "uint64"
        except (OverflowError, pa.ArrowInvalid):
            return pa.array([None if v is None else str(v) for v in values], pa.string()), "str"


_StatBlock = tuple[str, str, Sequence[Any]]  # (stat, value type: int64, double, str or json, values; None: absent)


def _stat_columns(owners: pa.Array, blocks: list[_StatBlock]) -> list[pa.Array]:
    """Long-form stat columns (stat, value_type, int, uint, double, str, bytes) with their owner first, from blocks of
    values aligned with ``owners``; a None value is no stat."""
    owner_parts, names, kinds, name_idx, kind_idx = [], [], [], [], []
    ints: list[pa.Array] = []
    uints: list[pa.Array] = []
    doubles: list[pa.Array] = []
    texts: list[pa.Array] = []
    for stat, kind, values in blocks:
        if kind == "int64":
            array, kind = _int_array(values)
        elif kind == "double":
            array = pa.array(values, pa.float64())
        else:
            array = pa.array(values, pa.string())
        valid = array.is_valid()
        array = array.filter(valid)
        n = len(array)
        if not n:
            continue
        owner_parts.append(owners.filter(valid))
        if stat not in names:
            names.append(stat)
        if kind not in kinds:
            kinds.append(kind)
        name_idx.append(np.full(n, names.index(stat), np.int32))
        kind_idx.append(np.full(n, kinds.index(kind), np.int32))
        for target, wanted, type_ in ((ints, "int64", pa.int64()), (uints, "uint64", pa.uint64()),
                                      (doubles, "double", pa.float64())):
            target.append(array if kind == wanted else pa.nulls(n, type_))
        texts.append(array if kind in ("str", "json") else pa.nulls(n, pa.string()))
    if not owner_parts:
        return [pa.array([], owners.type), *(pa.array([], f.type) for f in TABLES["event_stats"] if f.name != "event_id")]
    total = sum(len(p) for p in owner_parts)
    return [
        pa.concat_arrays(owner_parts),
        pa.DictionaryArray.from_arrays(pa.array(np.concatenate(name_idx)), pa.array(names, pa.string())),
        pa.DictionaryArray.from_arrays(pa.array(np.concatenate(kind_idx)), pa.array(kinds, pa.string())),
        pa.concat_arrays(ints), pa.concat_arrays(uints), pa.concat_arrays(doubles), pa.concat_arrays(texts),
        pa.nulls(total, pa.binary()),
    ]


def _event_stats(owners: Sequence[int], blocks: list[_StatBlock]) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays(_stat_columns(pa.array(owners, pa.int64()), blocks), schema=TABLES["event_stats"])


def _table_batch(table: str, columns: dict[str, Any], n: int) -> pa.RecordBatch:
    """A batch of ``table`` from its set columns (lists or arrays); the others null."""
    schema = TABLES[table]
    arrays = []
    for f in schema:
        values = columns.get(f.name)
        if values is None:
            arrays.append(pa.nulls(n, f.type))
        elif isinstance(values, pa.Array):
            arrays.append(values if values.type == f.type else values.cast(f.type))
        elif pa.types.is_dictionary(f.type):
            arrays.append(pa.array(values, pa.string()).dictionary_encode())
        else:
            arrays.append(pa.array(values, f.type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


@dataclass
class _Events:
    """Rows of ``events`` (and their stats) being gathered for one window of records."""

    device: list[int] = field(default_factory=list)
    track: list[int] = field(default_factory=list)
    metadata: list[int | None] = field(default_factory=list)
    name: list[str | None] = field(default_factory=list)
    start: list[int] = field(default_factory=list)
    dur: list[int] = field(default_factory=list)
    correlation: list[int | None] = field(default_factory=list)
    category: list[str] = field(default_factory=list)

    def add(self, device: int, track: int, name: str | None, start: int, dur: int, correlation: int | None,
            category: str, metadata: int | None = None) -> None:
        self.device.append(device)
        self.track.append(track)
        self.metadata.append(metadata)
        self.name.append(name)
        self.start.append(start)
        self.dur.append(dur)
        self.correlation.append(correlation)
        self.category.append(category)

    def table(self, first_id: int) -> pa.Table:
        """The rows as the events table, ids from ``first_id`` in record order, stored sorted by start (range
        filters then skip row groups)."""
        n = len(self.start)
        columns = {
            "event_id": pa.array(range(first_id, first_id + n), pa.int64()),
            "device_id": pa.array(self.device, pa.int32()), "track_id": pa.array(self.track, pa.int32()),
            "metadata_id": pa.array(self.metadata, pa.int64()), "name": pa.array(self.name, pa.string()),
            "start_ps": pa.array(self.start, pa.int64()), "dur_ps": pa.array(self.dur, pa.int64()),
            "correlation_id": pa.array(self.correlation, pa.int64()), "category": pa.array(self.category, pa.string()),
        }
        order = pc.sort_indices(columns["start_ps"])  # stable: equal starts stay in record order
        return pa.Table.from_arrays(
            [columns[f.name].take(order).cast(f.type) if f.name in columns else pa.nulls(n, f.type)
             for f in TABLES["events"]], schema=TABLES["events"])


@dataclass
class _Process:
    """What one process's sections say, needed to read its records."""

    index: int
    metadata: dict[str, Any] | None = None
    sections: dict[str, Any] = field(default_factory=dict)  # kept whole in profiles.trace_metadata
    gpu_of: dict[int, int] = field(default_factory=dict)  # agent handle -> device_id of a GPU
    ordinal_of: dict[int, int] = field(default_factory=dict)  # agent handle -> GPU ordinal
    agent_type: dict[int, int] = field(default_factory=dict)  # agent handle -> type (1 CPU, 2 GPU)
    operations: list[tuple[str, list[str]]] = field(default_factory=list)  # buffer-record kind -> (name, operations)
    messages: dict[int, str] = field(default_factory=dict)  # marker messages by internal correlation id
    renames: dict[int, str] = field(default_factory=dict)  # kernel renames by external correlation id
    counters: dict[int, tuple[str | None, str | None, str | None]] = field(default_factory=dict)  # id -> name, text, block
    code_object_agent: dict[int, int] = field(default_factory=dict)
    symbols: dict[int, _KernelSymbol] = field(default_factory=dict)
    symbol_stats: dict[int, list[tuple[str, Any]]] = field(default_factory=dict)
    host_device: int | None = None
    cpu_agents: list[dict[str, Any]] = field(default_factory=list)

    def operation(self, kind: int, operation: int) -> str:
        if 0 <= kind < len(self.operations):
            kind_name, names = self.operations[kind]
            return names[operation] if 0 <= operation < len(names) else f"{kind_name} operation {operation}"
        return f"kind {kind} operation {operation}"

    def kind_name(self, kind: int) -> str:
        return self.operations[kind][0] if 0 <= kind < len(self.operations) else f"kind {kind}"


_API_KINDS: dict[str, tuple[str, ApiDomain]] = {  # buffer_records key -> (events.category, api_calls.api)
    "hip_api": ("cuda_runtime", "runtime"), "hsa_api": ("hsa_api", "hsa"), "rccl_api": ("rccl_api", "rccl"),
    "rocdecode_api": ("rocdecode_api", "rocdecode"), "rocjpeg_api": ("rocjpeg_api", "rocjpeg"),
}
_COPY_KINDS = {"HOST_TO_HOST": "HtoH", "HOST_TO_DEVICE": "HtoD", "DEVICE_TO_HOST": "DtoH", "DEVICE_TO_DEVICE": "DtoD"}
_RECORD_TYPES: dict[str, type] = {"kernel_dispatch": _KernelDispatch, "memory_copy": _MemoryCopy,
                                  "marker_api": _ApiCall, "memory_allocation": _MemoryAllocation,
                                  "scratch_memory": _ScratchMemory, "counter_collection": _CounterRecord,
                                  **dict.fromkeys(_API_KINDS, _ApiCall)}
_DECODERS = {key: msgspec.json.Decoder(list[kind]) for key, kind in _RECORD_TYPES.items()}  # type: ignore[valid-type]
_SYMBOLS = msgspec.json.Decoder(list[_KernelSymbol])
# The sections a record needs read first (rocprofv3 writes them first).
_NEEDED = ("metadata", "agents")


class _Decoder:
    """The state of one file's decode: devices, tracks and names so far, and what was dropped."""

    def __init__(self, data: bytes | mmap.mmap, source: str) -> None:
        self.text = _Text(data, source)
        self.source = source
        self.origin: int | None = None  # profiles.start_ns: the first process's init_time
        self.last_ns: int | None = None  # the run's end: fini_time, or a later record's end
        self.dropped: Counter[str] = Counter()
        self.counts: Counter[str] = Counter()  # records of each kind, read
        self.notes: Counter[str] = Counter()
        self.device_rows: list[list[Any]] = []
        self.device_stats: list[tuple] = []
        self.track_of: dict[tuple[int, str, int], int] = {}
        self.track_rows: list[list[Any]] = []
        self.next_event = 0
        self.kernel_events: Counter[tuple[int, int]] = Counter()  # (process, kernel id) -> dispatches
        self.processes: list[_Process] = []
        self.extra: dict[str, Any] = {}
        self.in_use: dict[str, int] = {}  # allocator -> bytes in use
        self.live: dict[tuple[str, int], int] = {}  # (allocator, address) -> bytes of a live allocation
        self.host: str | None = None

    # -- the document ----------------------------------------------------------------------------------------------
    def run(self) -> Iterator[tuple[str, pa.RecordBatch]]:
        text = self.text
        try:
            opening = text.peek()
        except IngestError:
            raise IngestError(self.source, "no JSON text (empty or white space only)") from None
        if opening != ord("{"):
            raise IngestError(self.source, "not a rocprofv3 JSON: the text is not a JSON object with a rocprofiler-sdk-tool list")
        found = False
        for key in text.object_keys():
            if key != _ROOT:
                self.extra[key] = self._small(text.value())
                continue
            found = True
            if text.peek() != ord("["):
                raise IngestError(self.source, f"not a rocprofv3 JSON: {_ROOT} is not a list of processes")
            for _ in text.items():
                process = _Process(len(self.processes))
                self.processes.append(process)
                yield from self._process(process)
        if not found:
            raise IngestError(self.source, f"JSON without a {_ROOT} list: not a rocprofv3 JSON")
        if not text.at_end():
            raise text.malformed("trailing characters after the JSON object")
        if self.origin is None:
            raise IngestError(self.source, "rocprofv3 JSON without a process's metadata (init_time): nothing to ingest")
        yield from self._tail()

    def _small(self, raw: bytes) -> Any:
        try:
            return _GENERIC.decode(raw)
        except msgspec.DecodeError as exc:
            raise IngestError(self.source, f"invalid JSON (truncated or corrupt): {exc}") from None

    def _process(self, process: _Process) -> Iterator[tuple[str, pa.RecordBatch]]:
        text = self.text
        if text.peek() != ord("{"):
            raise IngestError(self.source, f"not a rocprofv3 JSON: an element of {_ROOT} is not an object")
        for key in text.object_keys():
            if key in ("buffer_records", "callback_records"):
                missing = [name for name in _NEEDED if name not in process.sections]
                if missing:
                    raise IngestError(self.source, f"rocprofv3 JSON whose {key} come before its {' and '.join(missing)}: "
                                                   "not the layout rocprofv3 writes (those sections first)")
                if text.peek() != ord("{"):
                    raise text.malformed(f"{key} is not an object")
                for kind in text.object_keys():
                    yield from self._records(process, f"{key}.{kind}", kind)
            elif key == "kernel_symbols" and text.peek() == ord("["):
                for symbols, typed in text.windows(_SYMBOLS):
                    self._symbols(process, symbols, typed)
                process.sections.setdefault("kernel_symbols", None)
            else:
                value = self._small(text.value())
                process.sections[key] = value
                self._section(process, key, value)

    def _section(self, process: _Process, key: str, value: Any) -> None:
        """Take in one of the small sections."""
        if key == "metadata":
            if not isinstance(value, dict) or common.to_int(value.get("init_time")) is None:
                raise IngestError(self.source, "rocprofv3 JSON whose metadata has no init_time (ns)")
            process.metadata = value
            init, fini = common.to_int(value.get("init_time")), common.to_int(value.get("fini_time"))
            if self.origin is None:
                self.origin = init
            ends = [t for t in (fini, init, self.last_ns) if t is not None]
            self.last_ns = max(ends)
            node: dict[str, Any] = value["node"] if isinstance(value.get("node"), dict) else {}
            if self.host is None and isinstance(node.get("hostname"), str) and node["hostname"].strip():
                self.host = node["hostname"].strip()
        elif key == "agents":
            self._agents(process, value if isinstance(value, list) else [])
        elif key == "strings" and isinstance(value, dict):
            for entry in value.get("buffer_records") or []:
                if isinstance(entry, dict):
                    process.operations.append((str(entry.get("kind")), [str(o) for o in entry.get("operations") or []]))
            for entry in value.get("marker_api") or []:
                if isinstance(entry, dict) and common.to_int(entry.get("key")) is not None:
                    process.messages[common.to_int(entry["key"])] = str(entry.get("value"))  # type: ignore[index]
            correlation: dict[str, Any] = value["correlation_id"] if isinstance(value.get("correlation_id"), dict) else {}
            for entry in correlation.get("external") or []:
                if isinstance(entry, dict) and common.to_int(entry.get("key")) is not None:
                    process.renames[common.to_int(entry["key"])] = str(entry.get("value"))  # type: ignore[index]
            # Only what names records is used; the tables of names themselves are rocprofiler's enums, not data.
            process.sections[key] = {"correlation_id": correlation, "counters": value.get("counters")}
        elif key == "counters" and isinstance(value, list):
            for counter in value:
                if isinstance(counter, dict) and isinstance(counter.get("id"), dict):
                    handle = common.to_int(counter["id"].get("handle"))
                    if handle is not None:
                        process.counters[handle] = (counter.get("name"), counter.get("description"), counter.get("block"))
        elif key == "code_objects" and isinstance(value, list):
            for code_object in value:
                if isinstance(code_object, dict):
                    agent = code_object.get("agent_id") or code_object.get("rocp_agent")
                    handle = common.to_int(agent.get("handle")) if isinstance(agent, dict) else None
                    identifier = common.to_int(code_object.get("code_object_id"))
                    if handle is not None and identifier is not None:
                        process.code_object_agent[identifier] = handle

    def _agents(self, process: _Process, agents: list[Any]) -> None:
        gpus = [a for a in agents if isinstance(a, dict) and a.get("type") == _GPU and isinstance(a.get("id"), dict)]
        for agent in agents:
            if isinstance(agent, dict) and isinstance(agent.get("id"), dict):
                handle = common.to_int(agent["id"].get("handle"))
                if handle is not None:
                    process.agent_type[handle] = common.to_int(agent.get("type")) or 0
                if agent.get("type") == _CPU:
                    process.cpu_agents.append(agent)
        gpus.sort(key=lambda a: (common.to_int(a.get("logical_node_type_id")) or 0, common.to_int(a.get("node_id")) or 0))
        for position, agent in enumerate(gpus):
            handle = common.to_int(agent["id"].get("handle"))
            if handle is None:
                continue
            ordinal = common.to_int(agent.get("logical_node_type_id"))
            ordinal = position if ordinal is None else ordinal
            # The same GPU seen by another process of the file (its KFD node): one device.
            node = common.to_int(agent.get("node_id"))
            existing = next((row[0] for row in self.device_rows if row[3] == "gpu" and row[-1] == node and node is not None), None)
            process.ordinal_of[handle] = ordinal
            if existing is not None:
                process.gpu_of[handle] = existing
                continue
            device_id = len(self.device_rows)
            process.gpu_of[handle] = device_id
            capability = _gfx_capability(agent)
            banks: list[Any] = agent["mem_banks"] if isinstance(agent.get("mem_banks"), list) else []
            memory = sum(common.to_int(b.get("size_in_bytes")) or 0 for b in banks if isinstance(b, dict)) or None
            cus = common.to_int(agent.get("cu_count"))
            reported = agent.get("product_name") if isinstance(agent.get("product_name"), str) else None
            model = hardware.device_model(reported, compute_capability=capability, sm_count=cus, memory_bytes=memory,
                                          vendor="AMD")
            chip = hardware.chip_for_model(model, memory_bytes=memory)
            peaks = (chip.peak_flops_per_s, chip.peak_hbm_bytes_per_s, "hardware_model") if chip else (None, None, None)
            clock = common.to_int(agent.get("max_engine_clk_fcompute"))
            self.device_rows.append([device_id, handle, f"/device:GPU:{ordinal}", "gpu", ordinal, model, *peaks, cus,
                                     clock * 1000 if clock else None, memory,
                                     f"{capability[0]}.{capability[1]}" if capability else None, 0, 0, node])
            for name, value in agent.items():
                self.device_stats.append(common.stat_row((device_id,), f"agent.{name}", value))

    def _host(self, process: _Process) -> int:
        """The device of the process (its host threads), made with its first host event."""
        if process.host_device is None:
            device_id = len(self.device_rows)
            pid = common.to_int((process.metadata or {}).get("pid"))
            self.device_rows.append([device_id, pid, "/host:CPU", "host", None, None, None, None, None, None, None,
                                     None, None, 0, 0, None])
            process.host_device = device_id
            for index, agent in enumerate(process.cpu_agents):
                for name, value in agent.items():
                    self.device_stats.append(common.stat_row((device_id,), f"cpu_agent.{index}.{name}", value))
        return process.host_device

    def _track(self, device: int, kind: str, line: int, name: str, stream: int | None) -> int:
        key = (device, kind, line)
        track = self.track_of.get(key)
        if track is None:
            track = self.track_of[key] = len(self.track_rows)
            self.track_rows.append([device, track, line, None, name, None, None, None, 0, None, stream])
        return track

    def _thread(self, process: _Process, thread: int | None) -> int:
        device = self._host(process)
        return self._track(device, "thread", thread or 0, str(thread or 0), None)

    # -- records ---------------------------------------------------------------------------------------------------
    def _records(self, process: _Process, label: str, kind: str) -> Iterator[tuple[str, pa.RecordBatch]]:
        text = self.text
        if text.peek() != ord("["):
            self.extra.setdefault("unread", {})[label] = self._small(text.value())
            return
        record_type = _RECORD_TYPES.get(kind)
        if record_type is None:  # a kind xprosql does not read: counted, not decoded
            n = 0
            for items, _ in text.windows(_RAWS):
                n += len(items)
            self.counts[label] += n
            if n:
                self.dropped[f"{label} records: a kind xprosql does not read"] += n
            return
        self.counts[label] += 0
        for records, typed in text.windows(_DECODERS[kind]):
            if not typed:
                records = self._convert(records, record_type, label)
            self.counts[label] += len(records)
            if records:
                yield from self._convert_window(process, kind, label, records)

    def _convert(self, values: list[Any], record_type: type, label: str) -> list[Any]:
        """Records of a window that did not all decode as their type, one at a time: those that fit are kept, the
        others dropped and counted with what was wrong."""
        kept: list[Any] = []
        for value in values:
            try:
                kept.append(msgspec.convert(value, record_type))
            except msgspec.ValidationError as exc:
                self.counts[label] += 1
                self.dropped[f"{label} records not read: {str(exc)[:160]}"] += 1
        return kept

    def _convert_window(self, process: _Process, kind: str, label: str, records: list[Any]) -> Iterator[tuple[str, pa.RecordBatch]]:
        if kind == "kernel_dispatch":
            yield from self._kernels(process, label, records)
        elif kind == "memory_copy":
            yield from self._copies(process, label, records)
        elif kind in _API_KINDS:
            yield from self._api_calls(process, label, kind, records)
        elif kind == "marker_api":
            yield from self._markers(process, label, records)
        elif kind in ("memory_allocation", "scratch_memory"):
            yield from self._allocations(process, label, kind, records)
        elif kind == "counter_collection":
            yield from self._counters(process, label, records)

    def _time(self, label: str, start: int, end: int) -> tuple[int, int] | None:
        """(start_ps, dur_ps) of a record, or None (dropped and counted)."""
        origin = self.origin
        assert origin is not None
        if end < start:
            self.dropped[f"{label} records ending before they start"] += 1
            return None
        if start < origin:
            self.dropped[f"{label} records starting before the run's init_time"] += 1
            return None
        if (end - origin) * 1000 >= _MAX_PS:
            self.dropped[f"{label} records with a timestamp out of range"] += 1
            return None
        if self.last_ns is None or end > self.last_ns:
            self.last_ns = end
        return (start - origin) * 1000, (end - start) * 1000

    def _emit(self, events: _Events, stats: list[_StatBlock]) -> Iterator[tuple[str, pa.RecordBatch]]:
        first = self.next_event
        n = len(events.start)
        self.next_event += n
        for track, count in Counter(events.track).items():
            self.track_rows[track][8] += count
        yield from (("events", b) for b in events.table(first).to_batches())
        yield "event_stats", _event_stats(range(first, first + n), stats)

    def _kernels(self, process: _Process, label: str, records: list[_KernelDispatch]) -> Iterator[tuple[str, pa.RecordBatch]]:
        origin = self.origin
        assert origin is not None
        tracks: dict[tuple[int, int], int] = {}
        kernels: dict[int, tuple[str, int | None]] = {}  # kernel id -> (name, registers per work-item)
        renames = process.renames
        rows = []
        last = 0
        for record in records:
            info = record.dispatch_info
            start, end = record.start_timestamp, record.end_timestamp
            device = process.gpu_of.get(info.agent_id.handle)
            queue = info.queue_id.handle
            if device is None or not origin <= start <= end or (end - origin) * 1000 >= _MAX_PS or queue >= 2**63:
                self._drop_record(label, device, start, end, queue)
                continue
            last = max(last, end)
            track = tracks.get((device, queue))
            if track is None:
                track = tracks[(device, queue)] = self._track(device, "queue", queue, f"Queue #{queue}", queue)
            kernel_id = info.kernel_id
            known = kernels.get(kernel_id)
            if known is None:
                known = kernels[kernel_id] = self._kernel(process, label, kernel_id)
            correlation = record.correlation_id
            name = known[0]
            if renames and correlation.external in renames:
                name = renames[correlation.external]
            grid, block = info.grid_size, info.workgroup_size
            rows.append((
                device, track, name, (start - origin) * 1000, (end - start) * 1000, correlation.internal, kernel_id,
                queue, *(_dim3(grid)), *(_dim3(block)), known[1], info.group_segment_size, info.dispatch_id,
                info.private_segment_size, record.thread_id, record.stream_id.handle if record.stream_id else None,
                correlation.external or None,
                None if grid is None else f"[{grid.x}, {grid.y}, {grid.z}]",
                None if block is None else f"[{block.x}, {block.y}, {block.z}]",
            ))
        if not rows:
            return
        self.last_ns = max(self.last_ns or last, last)
        columns: list[list[Any]] = [list(c) for c in zip(*rows, strict=True)]
        (devices, tracks_, names, start_ps, dur_ps, correlations, kernel_ids, queues, gx, gy, gz, bx, by, bz, registers,
         lds, dispatch_ids, private, threads, hip_streams, external, grid_text, block_text) = columns
        n = len(rows)
        self.kernel_events.update((process.index, k) for k in kernel_ids)
        first = self.next_event
        events = _Events(device=devices, track=tracks_, metadata=kernel_ids, name=names, start=start_ps, dur=dur_ps,
                         correlation=correlations, category=["kernel"] * n)
        # Not repeated as stats: the kernel id (events.metadata_id) and the group segment (kernels.shared_memory_bytes).
        yield from self._emit(events, [
            ("dispatch_id", "int64", dispatch_ids), ("grid_size", "json", grid_text),
            ("workgroup_size", "json", block_text), ("private_segment_size", "int64", private),
            ("thread_id", "int64", threads), ("stream_id", "int64", hip_streams),
            ("external_correlation_id", "int64", external),
        ])
        yield "kernels", _table_batch("kernels", {
            "event_id": pa.array(range(first, first + n), pa.int64()), "device_id": devices, "track_id": tracks_,
            "stream_id": queues, "name": names, "start_ps": start_ps, "dur_ps": dur_ps, "correlation_id": correlations,
            "grid_x": gx, "grid_y": gy, "grid_z": gz, "block_x": bx, "block_y": by, "block_z": bz,
            "registers_per_thread": registers, "shared_memory_bytes": lds,
        }, n)

    def _kernel(self, process: _Process, label: str, kernel_id: int) -> tuple[str, int | None]:
        """A kernel's name (its symbol's formatted name, as rocprofv3's CSV shows it) and VGPRs per work-item."""
        symbol = process.symbols.get(kernel_id)
        name = (symbol.formatted_kernel_name or symbol.kernel_name) if symbol is not None else None
        if name is None:
            self.notes[f"{label} kernel ids without a kernel symbol (their dispatches are named 'kernel <id>')"] += 1
            name = f"kernel {kernel_id}"
        registers = None
        if symbol is not None and symbol.arch_vgpr_count is not None:
            registers = symbol.arch_vgpr_count + (symbol.accum_vgpr_count or 0)
        return name, registers

    def _drop_record(self, label: str, device: int | None, start: int, end: int, queue: int) -> None:
        if device is None:
            self.dropped[f"{label} records on an agent that is no GPU of the file's agents"] += 1
        elif self._time(label, start, end) is not None:
            self.dropped[f"{label} records with a queue handle past 64-bit signed"] += 1

    def _copies(self, process: _Process, label: str, records: list[_MemoryCopy]) -> Iterator[tuple[str, pa.RecordBatch]]:
        events = _Events()
        kinds, sizes, src_kinds, dst_kinds = [], [], [], []
        src_ordinals, dst_ordinals, threads, hip_streams, external = [], [], [], [], []
        for record in records:
            src, dst = record.src_agent_id.handle, record.dst_agent_id.handle
            device = process.gpu_of.get(dst, process.gpu_of.get(src))
            if device is None and not (src in process.agent_type and dst in process.agent_type):
                self.dropped[f"{label} records between agents the file does not list"] += 1
                continue
            timed = self._time(label, record.start_timestamp, record.end_timestamp)
            if timed is None:
                continue
            if device is None:  # host to host: the process's copy
                device = self._host(process)
            operation = process.operation(record.kind, record.operation)
            kind = _COPY_KINDS.get(operation.removeprefix("MEMORY_COPY_"), operation)
            if kind == "DtoD" and src != dst and src in process.gpu_of and dst in process.gpu_of:
                kind = "PtoP"
            track = self._track(device, "copies", -1, "Memory copies", -1)
            events.add(device, track, f"Memcpy {kind}", timed[0], timed[1], record.correlation_id.internal, "gpu_memcpy")
            kinds.append(kind)
            sizes.append(record.bytes)
            src_kinds.append("Device" if src in process.gpu_of else None)
            dst_kinds.append("Device" if dst in process.gpu_of else None)
            src_ordinals.append(process.ordinal_of.get(src))
            dst_ordinals.append(process.ordinal_of.get(dst))
            threads.append(record.thread_id)
            hip_streams.append(record.stream_id.handle if record.stream_id is not None else None)
            external.append(record.correlation_id.external or None)
        n = len(events.start)
        if not n:
            return
        first = self.next_event
        yield from self._emit(events, [
            ("bytes", "int64", sizes), ("src_gpu", "int64", src_ordinals), ("dst_gpu", "int64", dst_ordinals),
            ("thread_id", "int64", threads), ("stream_id", "int64", hip_streams),
            ("external_correlation_id", "int64", external),
        ])
        yield "memcpys", _table_batch("memcpys", {
            "event_id": pa.array(range(first, first + n), pa.int64()), "device_id": events.device,
            "track_id": events.track, "stream_id": [-1] * n, "kind": kinds, "bytes": sizes, "start_ps": events.start,
            "dur_ps": events.dur, "correlation_id": events.correlation, "src_kind": src_kinds, "dst_kind": dst_kinds,
        }, n)

    def _api_calls(self, process: _Process, label: str, kind: str, records: list[_ApiCall]) -> Iterator[tuple[str, pa.RecordBatch]]:
        events = _Events()
        category, domain = _API_KINDS[kind]
        apis, threads, args, retvals, hip_streams, external = [], [], [], [], [], []
        encode = msgspec.json.encode
        for record in records:
            timed = self._time(label, record.start_timestamp, record.end_timestamp)
            if timed is None:
                continue
            track = self._thread(process, record.thread_id)
            events.add(self._host(process), track, process.operation(record.kind, record.operation), timed[0], timed[1],
                       record.correlation_id.internal, category)
            apis.append("compiler" if kind == "hip_api" and "COMPILER" in process.kind_name(record.kind) else domain)
            threads.append(self.track_rows[track][4])
            args.append(None if record.args is None else encode(record.args).decode())
            retvals.append(None if record.retval is None else encode(record.retval).decode())
            hip_streams.append(record.stream_id.handle if record.stream_id is not None else None)
            external.append(record.correlation_id.external or None)
        n = len(events.start)
        if not n:
            return
        first = self.next_event
        yield from self._emit(events, [("args", "json", args), ("retval", "json", retvals),
                                       ("stream_id", "int64", hip_streams), ("external_correlation_id", "int64", external)])
        yield "api_calls", _table_batch("api_calls", {
            "event_id": pa.array(range(first, first + n), pa.int64()), "device_id": events.device,
            "track_id": events.track, "thread": threads, "api": apis, "name": events.name, "start_ps": events.start,
            "dur_ps": events.dur, "correlation_id": events.correlation,
        }, n)

    def _markers(self, process: _Process, label: str, records: list[_ApiCall]) -> Iterator[tuple[str, pa.RecordBatch]]:
        events = _Events()
        operations, phases, external = [], [], []
        for record in records:
            timed = self._time(label, record.start_timestamp, record.end_timestamp)
            if timed is None:
                continue
            operation = process.operation(record.kind, record.operation)
            message = process.messages.get(record.correlation_id.internal)
            category = "marker_api" if message is None else "user_annotation"
            events.add(self._host(process), self._thread(process, record.thread_id), message or operation, timed[0],
                       timed[1], record.correlation_id.internal, category)
            operations.append(operation)
            phases.append("i" if operation.startswith("roctxMark") else None)
            external.append(record.correlation_id.external or None)
        if events.start:
            yield from self._emit(events, [("operation", "str", operations), ("ph", "str", phases),
                                           ("external_correlation_id", "int64", external)])

    def _allocations(self, process: _Process, label: str, kind: str, records: list[Any]) -> Iterator[tuple[str, pa.RecordBatch]]:
        events = _Events()
        operations, allocators, sizes, addresses, in_use, queues, flags = [], [], [], [], [], [], []
        scratch = kind == "scratch_memory"
        for record in records:
            agent = record.agent_id.handle
            if agent not in process.agent_type:
                self.dropped[f"{label} records on an agent the file does not list"] += 1
                continue
            timed = self._time(label, record.start_timestamp, record.end_timestamp)
            if timed is None:
                continue
            operation = process.operation(record.kind, record.operation)
            verb = operation.rsplit("_", 1)[-1]  # MEMORY_ALLOCATION_(VMEM_)ALLOCATE / FREE, SCRATCH_MEMORY_ALLOC ...
            freeing = verb == "FREE"
            allocating = verb in ("ALLOCATE", "ALLOC")
            ordinal = process.ordinal_of.get(agent)
            allocator = ("cpu" if ordinal is None else f"hip:{ordinal}") if not scratch else f"scratch:{ordinal}"
            if not scratch and "VMEM" in operation:
                allocator += " vmem"
            size = record.allocation_size or None
            address = _address(getattr(record, "address", None))
            used: int | None = None
            if not scratch and (allocating or freeing):
                key = (allocator, address if address is not None else -1)
                if allocating:
                    self.live[key] = size or 0
                    self.in_use[allocator] = self.in_use.get(allocator, 0) + (size or 0)
                else:
                    known = self.live.pop(key, None)
                    if known is None:
                        self.notes[f"{label}: frees of a block allocated before the run (size unknown)"] += 1
                    size = size or known
                    self.in_use[allocator] = max(self.in_use.get(allocator, 0) - (known or 0), 0)
                used = self.in_use[allocator]
            name = "MemoryAllocation" if allocating else "MemoryDeallocation" if freeing else operation
            events.add(self._host(process), self._thread(process, record.thread_id), name, timed[0], timed[1],
                       record.correlation_id.internal, kind)
            operations.append(operation)
            allocators.append(allocator)
            sizes.append(size)
            addresses.append(address)
            in_use.append(used)
            queues.append(record.queue_id.handle if scratch and record.queue_id is not None else None)
            flags.append(None if not scratch or record.flags is None else msgspec.json.encode(record.flags).decode())
        if events.start:
            yield from self._emit(events, [
                ("operation", "str", operations), ("allocator_name", "str", allocators),
                ("allocation_bytes", "int64", sizes), ("addr", "int64", addresses), ("bytes_allocated", "int64", in_use),
                ("queue_id", "int64", queues), ("flags", "json", flags),
            ])

    def _counters(self, process: _Process, label: str, records: list[_CounterRecord]) -> Iterator[tuple[str, pa.RecordBatch]]:
        rows = []
        for record in records:
            data = record.dispatch_data
            info = data.dispatch_info
            device = process.gpu_of.get(info.agent_id.handle)
            if device is None:
                self.dropped[f"{label} records on an agent that is no GPU of the file's agents"] += 1
                continue
            start = end = None
            if data.start_timestamp is not None and data.end_timestamp is not None:
                timed = self._time(label, data.start_timestamp, data.end_timestamp)
                if timed is None:
                    continue
                start, end = timed[0], timed[0] + timed[1]
            symbol = process.symbols.get(info.kernel_id)
            kernel = process.renames.get(data.correlation_id.external) if data.correlation_id.external else None
            if kernel is None and symbol is not None:
                kernel = symbol.formatted_kernel_name or symbol.kernel_name
            kernel = kernel or f"kernel {info.kernel_id}"
            summed: dict[int, float] = {}
            for value in record.records:  # one value per dimension instance: summed per counter, as the CSV does
                summed[value.counter_id.handle] = summed.get(value.counter_id.handle, 0.0) + value.value
            for counter, total in summed.items():
                name, description, block = process.counters.get(counter, (None, None, None))
                unsigned = int(total) if total.is_integer() and 0 <= total < 2**64 else None
                rows.append((None, device, kernel, info.dispatch_id, counter, name or f"counter {counter}", description,
                             block, unsigned, total, start, end))
        if rows:
            yield "counters", common.batch("counters", rows)

    def _symbols(self, process: _Process, symbols: list[Any], typed: bool) -> None:
        if not typed:
            symbols = self._convert(symbols, _KernelSymbol, "kernel_symbols")
        for symbol in symbols:
            process.symbols[symbol.kernel_id] = symbol

    # -- the end ---------------------------------------------------------------------------------------------------
    def _tail(self) -> Iterator[tuple[str, pa.RecordBatch]]:
        metadata_rows, metadata_stats = [], []
        for process in self.processes:
            for kernel_id, symbol in process.symbols.items():
                device = process.gpu_of.get(process.code_object_agent.get(symbol.code_object_id, -1))
                if device is None:
                    if symbol.code_object_id or kernel_id:
                        self.notes["kernel_symbols of a code object on no GPU agent of the file (not in event_metadata)"] += 1
                    continue
                metadata_rows.append((device, kernel_id, symbol.formatted_kernel_name or symbol.kernel_name,
                                      symbol.truncated_kernel_name, None, None,
                                      self.kernel_events.get((process.index, kernel_id), 0)))
                for name in _SYMBOL_STATS:
                    value = getattr(symbol, name)
                    if value is not None:
                        metadata_stats.append(common.stat_row((device, kernel_id), name, value))
        if metadata_rows:
            yield "event_metadata", common.batch("event_metadata", metadata_rows)
        if metadata_stats:
            yield "metadata_stats", common.batch("metadata_stats", metadata_stats)
        for row in self.device_rows:
            row[13] = sum(1 for track in self.track_rows if track[0] == row[0])
            row[14] = sum(track[8] for track in self.track_rows if track[0] == row[0])
        yield "devices", common.batch("devices", [tuple(row[:15]) for row in self.device_rows])
        yield "device_stats", common.batch("device_stats", self.device_stats)
        yield "tracks", common.batch("tracks", [tuple(row) for row in self.track_rows])
        assert self.origin is not None and self.last_ns is not None
        records = dict(sorted(self.counts.items()))
        trace: dict[str, Any] = {
            "producer": "rocprofv3",
            "processes": [{"metadata": p.metadata, **{k: v for k, v in p.sections.items() if k not in
                                                       ("metadata", "agents", "kernel_symbols")}}
                          for p in self.processes],
            "records": records,
            "absent": [label for label, n in records.items() if n == 0],
            "notes": [f"{n} {note}" for note, n in sorted(self.notes.items())],
            **self.extra,
        }
        profile: dict[str, Any] = dict.fromkeys(TABLES["profiles"].names)
        profile.update(
            format=FORMAT,
            host=self.host,
            producer="rocprofv3 (rocprofiler-sdk)",
            start_ns=self.origin,
            duration_ps=(self.last_ns - self.origin) * 1000,
            n_events=self.next_event,
            n_devices=len(self.device_rows),
            trace_metadata=json.dumps(trace),
            dropped_events=sum(self.dropped.values()),
            drop_reasons=[f"{n} {reason}" for reason, n in sorted(self.dropped.items())],
            errors=[],
            warnings=[],
        )
        yield "profiles", pa.RecordBatch.from_pylist([profile], schema=TABLES["profiles"])


def _address(value: Any) -> int | None:
    """An address as rocprofv3 writes it (``0x...`` text, or a number), as a signed 64-bit integer."""
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, str):
        try:
            number = int(value, 0)
        except ValueError:
            return None
    else:
        return None
    return number - 2**64 if 2**63 <= number < 2**64 else number if -(2**63) <= number < 2**63 else None
