"""Hardware performance counters in XSpace planes, as rows of the ``counters`` table.

Counter values are events carrying a ``counter_value`` stat (TPU perf-counter
samples: one line per sample, one event per counter, REFERENCE.md section 5) or
events on ``_counters_`` lines (time series). The all-ones value means the
counter could not be read: it is dropped and counted.

Example:
    >>> rows, unreadable = xspace_counter_rows(plane, device_id=0, first_event_id=0,   # doctest: +SKIP
    ...                                        first_track_id=0, start_ns=0)
"""

from __future__ import annotations

from typing import Any

from xprosql.protos import xplane_pb2

__all__ = ["xspace_counter_rows", "has_counters", "UNREADABLE"]

UNREADABLE = 0xFFFFFFFFFFFFFFFF
COUNTER_LINE = "_counters_"


def has_counters(plane: xplane_pb2.XPlane) -> bool:
    """Cheap test before a second pass: does the plane name a counter stat or line at all?"""
    return any(md.name == "counter_value" for md in plane.stat_metadata.values()) or any(
        line.name == COUNTER_LINE for line in plane.lines
    )


def _value(stat: xplane_pb2.XStat, names: dict[int, str]) -> Any:
    which = stat.WhichOneof("value")
    if which is None:
        return None
    value = getattr(stat, which)
    return names.get(value) if which == "ref_value" else value


def xspace_counter_rows(
    plane: xplane_pb2.XPlane, *, device_id: int, first_event_id: int, first_track_id: int, start_ns: int
) -> tuple[list[tuple], int]:
    """Counter rows of one plane, in ``counters`` column order, and how many unreadable values were dropped.

    ``first_event_id`` and ``first_track_id`` are the ids the decoder gave the
    plane's first event and line, so rows join ``events`` and ``tracks``.
    """
    names = {sid: md.name for sid, md in plane.stat_metadata.items()}
    metadata_stats: dict[int, dict[str, Any]] = {
        mid: {names.get(s.metadata_id): _value(s, names) for s in md.stats} for mid, md in plane.event_metadata.items()
    }
    rows: list[tuple] = []
    unreadable = 0
    event_id = first_event_id
    for line_index, line in enumerate(plane.lines):
        base_ps = (line.timestamp_ns - start_ns) * 1000
        on_counter_line = line.name == COUNTER_LINE
        for event in line.events:
            stats = dict(metadata_stats.get(event.metadata_id, {}))
            stats.update({names.get(s.metadata_id): _value(s, names) for s in event.stats})
            if "counter_value" in stats or on_counter_line:
                value = stats.get("counter_value")
                if value == UNREADABLE:
                    unreadable += 1
                else:
                    md = plane.event_metadata.get(event.metadata_id)
                    start = base_ps + event.offset_ps
                    counter_id = stats.get("performance_counter_id")
                    rows.append((
                        event_id, device_id, line.name, line.id,
                        counter_id if isinstance(counter_id, int) else None,
                        md.name.lower() if md is not None else None,
                        stats.get("performance_counter_description"),
                        _text(stats.get("performance_counter_sets")),
                        value if isinstance(value, int) and value >= 0 else None,
                        float(value) if isinstance(value, (int, float)) else None,
                        start, start + event.duration_ps,
                    ))
            event_id += 1
    return rows, unreadable


def _text(value: Any) -> str | None:
    if value is None:
        return None
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)
