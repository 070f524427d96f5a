"""The per-event Kineto decoder: any trace, however irregular its values.

Each event goes through Python one at a time (about 10 µs an event), so
:mod:`._kineto_columnar` takes every trace whose fields have the types Kineto
writes; this path takes the rest (non-object entries, string timestamps,
escaped strings, ...) and every trace when numba is missing. It is the
reference the columnar path is tested against (tests/test_kineto_columnar.py).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from itertools import compress
from typing import Any

import pyarrow as pa

from xprosql.errors import IngestError
from xprosql.ingest import _kineto_common as common
from xprosql.ingest._pm_sampling import PM_SAMPLING_CATEGORY, pm_sampling_rows
from xprosql.models.tables import TABLES

_INT64 = 1 << 63
# |ts| beyond this many µs (the year 2255) would not fit int64 nanoseconds since the epoch (profiles.start_ns).
_MAX_TS_US = 9e15
_OUT_OF_RANGE = "events with a value out of range (ts, dur, pid, tid, id or correlation past 64 bits)"


def _fits(value: Any) -> bool:
    """An id (pid, tid, flow id, correlation) that fits int64, or one that is no integer (names are ids too)."""
    return not isinstance(value, int) or -_INT64 <= value < _INT64


def _timed(ts: Any, dur: Any) -> bool:
    return abs(ts) < _MAX_TS_US and (not isinstance(dur, (int, float)) or abs(dur) < _MAX_TS_US)


def decode_events(trace: dict[str, Any], events: list[Any], source: str) -> Iterator[tuple[str, pa.RecordBatch]]:
    """Warehouse batches of a trace whose events are objects with ph, cat, ... attributes (None: not an object)."""
    base = common.to_int(trace.get("baseTimeNanoseconds")) or 0
    dropped: Counter[str] = Counter()

    # Pass 1: what each pid and (pid, tid) is, and the time origin.
    metadata = common.process_metadata((e.name, e.pid, e.tid, e.args) for e in events if e is not None and e.ph == "M")
    gpu_pids: set[Any] = set()
    track_order: dict[tuple[Any, Any], None] = {}
    start_ns: int | None = None
    for event in events:
        if event is None or event.ph == "M":
            continue
        ph, pid, tid = event.ph, event.pid, event.tid
        if ph in ("s", "t", "f"):
            track_order.setdefault((pid, tid), None)
        if ph not in ("X", "i", "I") or not isinstance(event.ts, (int, float)):
            continue
        if not (_fits(pid) and _fits(tid) and _timed(event.ts, event.dur)):
            continue  # dropped and counted below
        if event.cat in common.GPU_CATEGORIES:
            gpu_pids.add(pid)
        track_order.setdefault((pid, tid), None)
        ts_ns = round(event.ts * 1000) + base  # µs floats to integer ns
        start_ns = ts_ns if start_ns is None else min(start_ns, ts_ns)
    if start_ns is None:
        raise IngestError(source, "trace has no timed events (no X or i event with a numeric ts)")
    layout = common.layout(trace, gpu_pids=gpu_pids, metadata=metadata, track_order=track_order, source=source)
    device_of, track_of, track_rows = layout.device_of, layout.track_of, layout.track_rows

    # Pass 2: events and what derives from them. Event columns are built as lists, one per column.
    ev_start: list[int]
    st_name: list[str]
    st_value: list[Any]
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
            flow = common.to_int(event.id)
            key = (event.pid, event.tid)
            if flow is not None and not (_fits(flow) and isinstance(ts, (int, float)) and _timed(ts, None)):
                dropped[_OUT_OF_RANGE] += 1
                continue
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
        args = event.args if isinstance(event.args, dict) else {}
        correlation = args.get("correlation")
        if type(correlation) is not int:
            correlation = common.to_int(correlation)
        if not (_fits(event.pid) and _fits(event.tid) and _fits(correlation) and _timed(ts, dur)):
            dropped[_OUT_OF_RANGE] += 1
            continue
        start = (round(ts * 1000) + base_ns) * 1000
        dur_ps = round(dur * 1_000_000)
        if not (start >= -_INT64 and start + dur_ps < _INT64):  # more than 106 days from the trace's start
            dropped[_OUT_OF_RANGE] += 1
            continue
        event_id = len(ev_start)
        key = (event.pid, event.tid)
        device_id, track_id = device_of[key[0]], track_of[key]
        category, name = event.cat, event.name
        name = None if name is None else str(name)
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

        external = common.to_int(args.get("External id"))
        if category == "cpu_op":
            if external is not None and name is not None:  # noqa: SIM102 - every cpu_op continues below
                if external not in framework_ops or dur_ps < framework_ops[external][0]:
                    framework_ops[external] = (dur_ps, name)
            continue
        stream = common.to_int(args.get("stream"))
        if stream is None:
            stream = track_rows[track_id][10]
        if category == "kernel":
            row = [event_id, device_id, track_id, stream, name, start, dur_ps, correlation,
                   *common.kernel_launch(args), None, None, None]
            kernel_rows.append(row)
            if external is not None:
                pending_kernels.append((external, row))
        elif category in ("gpu_memcpy", "gpu_memset"):
            kind, src, dst = common.copy_kind(name or "", args, is_memset=category == "gpu_memset")
            memcpy_rows.append((event_id, device_id, track_id, stream, kind, common.to_int(args.get("bytes")),
                                start, dur_ps, correlation, src, dst))
        elif category in common.API_CATEGORIES:
            api_rows.append((event_id, device_id, track_id, track_rows[track_id][4], common.API_CATEGORIES[category],
                             name, start, dur_ps, correlation))
        elif category == "cuda_profiler_range":
            counter_rows.extend(common.counter_rows(event_id, device_id, name, n_ranges, start, dur_ps, args))
            n_ranges += 1
        elif category == PM_SAMPLING_CATEGORY:
            counter_rows.extend(pm_sampling_rows(event_id, device_id, args, start_ps=start, end_ps=start + dur_ps))

    for external, row in pending_kernels:
        if external in framework_ops:
            row[-1] = framework_ops[external][1]
    for track_id, count in Counter(ev_track).items():
        track_rows[track_id][8] = count
    end_ps = max(map(sum, zip(ev_start, ev_dur)), default=0)
    promoted = [name == "correlation" and common.to_int(value) is not None for name, value in zip(st_name, st_value)]
    if any(promoted):
        st_event, st_name, st_value = (list(compress(column, (not p for p in promoted)))
                                       for column in (st_event, st_name, st_value))

    n_events = len(ev_start)
    events_table = common.events_table({
        "event_id": pa.array(range(n_events), pa.int64()), "device_id": pa.array(ev_device, pa.int32()),
        "track_id": pa.array(ev_track, pa.int32()), "name": pa.array(ev_name, pa.string()),
        "start_ps": pa.array(ev_start, pa.int64()), "dur_ps": pa.array(ev_dur, pa.int64()),
        "correlation_id": pa.array(ev_correlation, pa.int64()), "category": pa.array(ev_category, pa.string()),
    }, n_events)
    yield from (("events", b) for b in events_table.to_batches())
    yield "event_stats", _stat_batch(st_event, st_name, st_value)
    tables = {
        "kernels": common.batch("kernels", [tuple(row) for row in kernel_rows]),
        "memcpys": common.batch("memcpys", memcpy_rows),
        "api_calls": common.batch("api_calls", api_rows),
        "counters": common.batch("counters", counter_rows),
        "flows": common.batch("flows", flow_rows),
    }
    yield from common.tail(trace, layout, tables, start_ns=start_ns, end_ps=end_ps, n_events=n_events, dropped=dropped)


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
            row = common.stat_row((), "", value)
            kinds[i], ints[i], uints[i], doubles[i], texts[i] = row[1:6]
    columns = [
        pa.array(owners, pa.int64()), pa.array(names, pa.string()).dictionary_encode(),
        pa.array(kinds, pa.string()).dictionary_encode(), pa.array(ints, pa.int64()), pa.array(uints, pa.uint64()),
        pa.array(doubles, pa.float64()), pa.array(texts, pa.string()), pa.nulls(len(owners), pa.binary()),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=TABLES["event_stats"])
