"""PyTorch profiler (Kineto) trace JSON decoder: one trace in, warehouse record batches out.

Kineto traces hold CUPTI (or ROCm) activity records as Chrome trace events:
``ph`` X slices (``cat`` cpu_op, cuda_runtime, kernel, gpu_memcpy, ...), ``i``
instants, ``s``/``f`` flows and ``M`` metadata naming processes and threads.
Processes become ``devices`` (a GPU's pid is its device index), (pid, tid)
pairs ``tracks``, slices and instants ``events``; the GPU activity also fills
``kernels``, ``memcpys``, ``api_calls`` and ``counters``.

Example:
    >>> for table, batch in decode_kineto(open("rank0.json.gz", "rb").read(), source="rank0.json.gz"):  # doctest: +SKIP
    ...     print(table, batch.num_rows)
"""

from __future__ import annotations

import gc
import gzip
import json
import re
import zlib
from collections import Counter
from itertools import compress
from collections.abc import Iterator
from typing import Any

import msgspec
import pyarrow as pa

from xprosql.errors import IngestError
from xprosql.cupti import RECORDER_KEY
from xprosql.models import hardware
from xprosql.models.tables import TABLES

__all__ = ["decode_kineto", "load_trace", "GPU_CATEGORIES"]

# Categories whose pid is a GPU (Kineto writes device activity with pid = device index).
GPU_CATEGORIES = frozenset({"kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation", "cuda_sync"})
_API_CATEGORIES = {"cuda_runtime": "runtime", "cuda_driver": "driver"}
_COPY_NAME = re.compile(r"^Mem(cpy|set)\s*(\w+)?\s*(?:\((\w+)(?:\s*->\s*(\w+))?\))?")
_INT64_MAX = 2**63 - 1


class _Event(msgspec.Struct, gc=False):
    """One trace event: the Chrome trace fields Kineto writes (others are ignored)."""

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
_TOP = msgspec.json.Decoder(dict[str, msgspec.Raw])
_EVENTS = msgspec.json.Decoder(list[_Event])


def load_trace(data: bytes, source: str) -> tuple[dict[str, Any], list[_Event | None]]:
    """Decompress (if gzipped) and parse a trace: its top-level fields and its events.

    Entries of traceEvents that are not objects come back as None. Raises
    :class:`IngestError` saying what is wrong when the file is not a trace.
    """
    if not data:
        raise IngestError(source, "empty file (0 bytes)")
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (EOFError, OSError, zlib.error) as exc:
            raise IngestError(source, f"truncated or corrupt gzip: {exc}") from None
    try:
        if data.lstrip()[:1] == b"[":  # the Chrome trace array form
            top, raw_events = {}, msgspec.Raw(data)
        else:
            fields = _TOP.decode(data)
            if "traceEvents" not in fields:
                raise IngestError(source, "JSON without a traceEvents list: not a PyTorch/Kineto trace")
            raw_events = fields.pop("traceEvents")
            top = {key: msgspec.json.decode(value) for key, value in fields.items()}
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
    return top, events


def _batch(table: str, rows: list[tuple]) -> pa.RecordBatch:
    schema = TABLES[table]
    columns = list(zip(*rows)) if rows else [()] * len(schema)
    arrays = []
    for field, values in zip(schema, columns):
        if pa.types.is_dictionary(field.type):
            arrays.append(pa.array(values, pa.string()).dictionary_encode())
        else:
            arrays.append(pa.array(values, field.type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _stat_row(prefix: tuple, name: str, value: Any) -> tuple:
    """A long-form stat row: (*prefix, stat, value_type, int, uint, double, str, bytes)."""
    if isinstance(value, bool):
        return (*prefix, name, "int64", int(value), None, None, None, None)
    if isinstance(value, int):
        if value > _INT64_MAX:
            return (*prefix, name, "uint64", None, value if value < 2**64 else None, None,
                    None if value < 2**64 else str(value), None)
        if value < -(2**63):
            return (*prefix, name, "str", None, None, None, str(value), None)
        return (*prefix, name, "int64", value, None, None, None, None)
    if isinstance(value, float):
        return (*prefix, name, "double", None, None, value, None, None)
    if isinstance(value, str):
        return (*prefix, name, "str", None, None, None, value, None)
    return (*prefix, name, "json", None, None, None, json.dumps(value), None)


def _int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.lstrip("-").isdigit():
        return int(value)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def _triple(value: Any) -> tuple[int | None, int | None, int | None]:
    if isinstance(value, list) and len(value) == 3 and all(_int(v) is not None for v in value):
        return _int(value[0]), _int(value[1]), _int(value[2])
    return None, None, None


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


def _decode(data: bytes, source: str) -> Iterator[tuple[str, pa.RecordBatch]]:
    trace, events = load_trace(data, source)
    base = _int(trace.get("baseTimeNanoseconds")) or 0
    dropped: Counter[str] = Counter()

    # Pass 1: what each pid and (pid, tid) is, and the time origin.
    gpu_pids: set[Any] = set()
    process_meta: dict[Any, list[tuple[str, Any]]] = {}
    thread_names: dict[tuple[Any, Any], str] = {}
    thread_sort: dict[tuple[Any, Any], int] = {}
    track_order: dict[tuple[Any, Any], None] = {}
    start_ns: int | None = None
    for event in events:
        if event is None:
            continue
        ph, pid, tid = event.ph, event.pid, event.tid
        if ph == "M":
            args = event.args if isinstance(event.args, dict) else {}
            name = event.name
            if name == "thread_name" and "name" in args:
                thread_names[(pid, tid)] = str(args["name"])
            elif name == "thread_sort_index" and _int(args.get("sort_index")) is not None:
                thread_sort[(pid, tid)] = _int(args["sort_index"])
            else:
                process_meta.setdefault(pid, []).extend((str(name), value) for value in args.values())
            continue
        if ph in ("s", "t", "f"):
            track_order.setdefault((pid, tid), None)
        if ph not in ("X", "i", "I") or not isinstance(event.ts, (int, float)):
            continue
        if event.cat in GPU_CATEGORIES:
            gpu_pids.add(pid)
        track_order.setdefault((pid, tid), None)
        ts_ns = round(event.ts * 1000) + base  # µs floats to integer ns
        start_ns = ts_ns if start_ns is None else min(start_ns, ts_ns)
    if start_ns is None:
        raise IngestError(source, "trace has no timed events (no X or i event with a numeric ts)")

    # Devices: every GPU the trace mentions, then host processes, then other pids ("Spans", ...).
    properties = {p.get("id"): p for p in trace.get("deviceProperties") or [] if isinstance(p, dict)}
    gpu_ids = sorted({p for p in gpu_pids if isinstance(p, int)} | {i for i in properties if isinstance(i, int)})
    pids: list[Any] = list(gpu_ids)
    for pid in [key[0] for key in track_order] + list(process_meta):
        if pid not in pids:
            pids.append(pid)
    device_of = {pid: device_id for device_id, pid in enumerate(pids)}
    device_rows, device_stat_rows = [], []
    for device_id, pid in enumerate(pids):
        device_rows.append(_device_row(device_id, pid, is_gpu=pid in gpu_ids, props=properties.get(pid)))
        for name, value in process_meta.get(pid, []):
            device_stat_rows.append(_stat_row((device_id,), name, value))
        for name, value in (properties.get(pid) or {}).items():
            device_stat_rows.append(_stat_row((device_id,), f"deviceProperties.{name}", value))

    track_of: dict[tuple[Any, Any], int] = {}
    track_rows: list[tuple] = []
    for key in list(track_order) + [k for k in thread_names if k not in track_order]:
        pid, tid = key
        track_id = len(track_rows)
        track_of[key] = track_id
        is_gpu = pid in gpu_ids
        stream_id = _int(tid) if is_gpu else None
        name = thread_names.get(key) or (f"Stream #{tid}" if stream_id is not None else str(tid))
        track_rows.append([device_of[pid], track_id, _int(tid), None, name, None, None, None, 0,
                           thread_sort.get(key), stream_id])

    # Pass 2: events and what derives from them. Event columns are built as lists, one per column.
    ev_device, ev_track, ev_name, ev_start, ev_dur, ev_correlation, ev_category = [], [], [], [], [], [], []
    st_event, st_name, st_value = [], [], []
    flow_rows: list[tuple] = []
    kernel_rows, memcpy_rows, api_rows, counter_rows = [], [], [], []
    framework_ops: dict[int, tuple[int, str]] = {}  # External id -> (dur, cpu_op name): the innermost wins
    pending_kernels: list[tuple[int, list]] = []
    n_ranges = 0
    base_ns = base - start_ns
    for event in events:
        if event is None:
            dropped["non-object entries in traceEvents"] += 1
            continue
        ph = event.ph
        if ph == "M":
            continue  # folded into devices, device_stats and tracks above
        ts = event.ts
        if ph in ("s", "t", "f"):
            flow = _int(event.id)
            key = (event.pid, event.tid)
            if flow is None or not isinstance(ts, (int, float)) or key not in track_of:
                dropped[f"{ph} flow events without id, ts or a known thread"] += 1
                continue
            flow_rows.append((flow, event.cat, ph, track_of[key], (round(ts * 1000) + base_ns) * 1000, event.bp))
            continue
        if ph not in ("X", "i", "I"):
            dropped[f"events of phase {ph!r} (not X, i, s, t, f or M)"] += 1
            continue
        if not isinstance(ts, (int, float)):
            dropped[f"{ph} events without a numeric ts"] += 1
            continue
        dur = (0 if event.dur is None else event.dur) if ph == "X" else 0
        if not isinstance(dur, (int, float)) or dur < 0:
            dropped["X events without a numeric, non-negative dur"] += 1
            continue
        event_id = len(ev_start)
        key = (event.pid, event.tid)
        device_id, track_id = device_of[key[0]], track_of[key]
        start = (round(ts * 1000) + base_ns) * 1000
        dur_ps = round(dur * 1_000_000)
        category, name = event.cat, event.name
        name = None if name is None else str(name)
        args = event.args if isinstance(event.args, dict) else {}
        correlation = args.get("correlation")
        if type(correlation) is not int:
            correlation = _int(correlation)
        ev_device.append(device_id)
        ev_track.append(track_id)
        ev_name.append(name)
        ev_start.append(start)
        ev_dur.append(dur_ps)
        ev_correlation.append(correlation)
        ev_category.append(category)
        if args:  # all args, in bulk; the promoted correlation is taken out after the loop
            st_event.extend([event_id] * len(args))
            st_name.extend(args)
            st_value.extend(args.values())
        if ph != "X":
            st_event.append(event_id)
            st_name.append("ph")
            st_value.append(ph)
        if category is None:
            continue

        external = _int(args.get("External id"))
        if category == "cpu_op":
            if external is not None and name is not None:
                if external not in framework_ops or dur_ps < framework_ops[external][0]:
                    framework_ops[external] = (dur_ps, name)
            continue
        stream = _int(args.get("stream"))
        if stream is None:
            stream = track_rows[track_id][10]
        if category == "kernel":
            row = [event_id, device_id, track_id, stream, name, start, dur_ps, correlation,
                   *_triple(args.get("grid")), *_triple(args.get("block")),
                   _int(args.get("registers per thread")), _int(args.get("shared memory")),
                   _float(args.get("est. achieved occupancy %")), None, None, None]
            kernel_rows.append(row)
            if external is not None:
                pending_kernels.append((external, row))
        elif category in ("gpu_memcpy", "gpu_memset"):
            kind, src, dst = _copy_kind(name or "", args, is_memset=category == "gpu_memset")
            memcpy_rows.append((event_id, device_id, track_id, stream, kind, _int(args.get("bytes")),
                                start, dur_ps, correlation, src, dst))
        elif category in _API_CATEGORIES:
            api_rows.append((event_id, device_id, track_id, track_rows[track_id][4], _API_CATEGORIES[category],
                             name, start, dur_ps, correlation))
        elif category == "cuda_profiler_range":
            for counter, value in args.items():
                unsigned = value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**64 else None
                counter_rows.append((event_id, device_id, name, n_ranges, None, counter, None, None,
                                     unsigned, _float(value), start, start + dur_ps))
            n_ranges += 1

    for external, row in pending_kernels:
        if external in framework_ops:
            row[-1] = framework_ops[external][1]
    for track_id, count in Counter(ev_track).items():
        track_rows[track_id][8] = count
    end_ps = max(map(sum, zip(ev_start, ev_dur)), default=0)
    promoted = [name == "correlation" and _int(value) is not None for name, value in zip(st_name, st_value)]
    if any(promoted):
        st_event, st_name, st_value = (list(compress(column, (not p for p in promoted)))
                                       for column in (st_event, st_name, st_value))

    n_events = len(ev_start)
    nulls = pa.nulls(n_events)
    event_columns = {
        "event_id": pa.array(range(n_events), pa.int64()), "device_id": pa.array(ev_device, pa.int32()),
        "track_id": pa.array(ev_track, pa.int32()), "name": pa.array(ev_name, pa.string()),
        "start_ps": pa.array(ev_start, pa.int64()), "dur_ps": pa.array(ev_dur, pa.int64()),
        "correlation_id": pa.array(ev_correlation, pa.int64()), "category": pa.array(ev_category, pa.string()),
    }
    events = pa.Table.from_arrays(
        [event_columns[f.name].cast(f.type) if f.name in event_columns else nulls.cast(f.type) for f in TABLES["events"]],
        schema=TABLES["events"])
    # Stored sorted by time, as every decoder yields them, so range filters skip row groups.
    yield from (("events", batch) for batch in events.sort_by([("start_ps", "ascending"), ("event_id", "ascending")]).to_batches())
    yield "event_stats", _stat_batch(st_event, st_name, st_value)
    for row in device_rows:  # n_tracks, n_events
        row[13] = sum(1 for track in track_rows if track[0] == row[0])
        row[14] = sum(track[8] for track in track_rows if track[0] == row[0])
    yield "devices", _batch("devices", [tuple(row) for row in device_rows])
    yield "device_stats", _batch("device_stats", device_stat_rows)
    yield "tracks", _batch("tracks", [tuple(row) for row in track_rows])
    yield "kernels", _batch("kernels", [tuple(row) for row in kernel_rows])
    yield "memcpys", _batch("memcpys", memcpy_rows)
    yield "api_calls", _batch("api_calls", api_rows)
    yield "counters", _batch("counters", counter_rows)
    yield "flows", _batch("flows", flow_rows)

    distributed = trace.get("distributedInfo") if isinstance(trace.get("distributedInfo"), dict) else {}
    recorder = trace.get(RECORDER_KEY) if isinstance(trace.get(RECORDER_KEY), dict) else None
    profile = {name: None for name in TABLES["profiles"].names}
    profile.update(
        format="cupti" if recorder else "kineto",
        host=recorder.get("host") if recorder else None,
        start_ns=start_ns,
        duration_ps=end_ps,
        n_events=n_events,
        n_devices=len(device_rows),
        rank=_int(distributed.get("rank")),
        world_size=_int(distributed.get("world_size")),
        trace_metadata=json.dumps(trace),
        dropped_events=sum(dropped.values()),
        drop_reasons=[f"{n} {reason}" for reason, n in sorted(dropped.items())],
        errors=[],
        warnings=[],
    )
    yield "profiles", pa.RecordBatch.from_pylist([profile], schema=TABLES["profiles"])


def _stat_batch(owners: list[int], names: list[str], values: list[Any]) -> pa.RecordBatch:
    """event_stats from parallel lists: each value goes to the column of its type."""
    types = [type(v) for v in values]
    simple = {int: "int64", float: "double", str: "str"}
    kinds = [simple.get(t) for t in types]
    ints = [v if t is int and -(2**63) <= v < 2**63 else None for v, t in zip(values, types)]
    doubles = [v if t is float else None for v, t in zip(values, types)]
    texts = [v if t is str else None for v, t in zip(values, types)]
    uints: list[int | None] = [None] * len(values)
    for i, (value, kind, integer) in enumerate(zip(values, kinds, ints)):
        if kind is None or (kind == "int64" and integer is None):  # bool, big ints, lists, objects
            row = _stat_row((), "", value)
            kinds[i], ints[i], uints[i], doubles[i], texts[i] = row[1:6]
    columns = [
        pa.array(owners, pa.int64()), pa.array(names, pa.string()).dictionary_encode(),
        pa.array(kinds, pa.string()).dictionary_encode(), pa.array(ints, pa.int64()), pa.array(uints, pa.uint64()),
        pa.array(doubles, pa.float64()), pa.array(texts, pa.string()), pa.nulls(len(owners), pa.binary()),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=TABLES["event_stats"])


def _float(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    return None


def _copy_kind(name: str, args: dict[str, Any], *, is_memset: bool) -> tuple[str | None, str | None, str | None]:
    """``Memcpy HtoD (Pageable -> Device)`` -> (HtoD, Pageable, Device); ``Memset (Device)`` -> (memset, None, Device)."""
    match = _COPY_NAME.match(name)
    if is_memset:
        return "memset", None, match.group(3) if match else None
    if match is None:
        return (str(args["kind"]) if isinstance(args.get("kind"), str) else None), None, None
    return match.group(2), match.group(3), match.group(4)


def _device_row(device_id: int, pid: Any, *, is_gpu: bool, props: dict[str, Any] | None) -> list:
    props = props or {}
    if is_gpu:
        major, minor = _int(props.get("computeMajor")), _int(props.get("computeMinor"))
        sms, memory = _int(props.get("numSms")), _int(props.get("totalGlobalMem"))
        capability = f"{major}.{minor}" if major is not None and minor is not None else None
        model = props.get("name") if isinstance(props.get("name"), str) else None
        if model is None and capability:
            model = hardware.gpu_model(compute_capability=(major, minor), sm_count=sms, memory_bytes=memory)
        # Kineto records no peaks: the chip table's, when it knows the board.
        chip = hardware.chip_for_model(model, memory_bytes=memory)
        peaks = (chip.peak_flops_per_s, chip.peak_hbm_bytes_per_s, "hardware_model") if chip else (None, None, None)
        return [device_id, pid, f"/device:GPU:{pid}", "gpu", pid, model, *peaks, sms, None, memory, capability, 0, 0]
    kind = "host" if isinstance(pid, int) else "other"
    name = "/host:CPU" if kind == "host" else str(pid)
    return [device_id, pid if isinstance(pid, int) else None, name, kind, None, None, None, None, None,
            None, None, None, None, 0, 0]


