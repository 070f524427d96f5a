"""Hardware performance counters in XSpace planes, as rows of the ``counters`` table.

Three layouts carry counters in an XSpace, and all three land in ``counters``:

* **Counter samples** (TPU v6e / v7x perf counters, read the way XProf's
  ``perf_counters`` and ``utilization_viewer`` tools read them): every event
  with a ``counter_value`` stat. Its line is one sample of one kernel: the
  line name is the kernel, the line id the sample number; the event name,
  lowercased, is the counter. ``performance_counter_id``,
  ``performance_counter_description`` and ``performance_counter_sets`` may
  sit on the event or its metadata (the event wins). Without an id stat the
  event's metadata id is the counter id when the event has no name (XProf's
  utilization tool falls back to it too); without a name the counter is
  named from the xprof wheel's id -> name dictionaries for the plane's chip
  (:func:`counter_names`), when xprof is installed.
* **Time series** on ``_counters_`` lines (GPU PM sampling as XLA writes it:
  one zero-length event per metric and sampling interval, the value in a stat
  named like the event). The sample number is the interval's rank within the
  line.
* **Plane-level utilization stats** (``matrix_unit_utilization_percent`` and
  other ``*_utilization_percent`` plane stats): one row each, without kernel
  or sample.

The all-ones value (``0xFFFFFFFFFFFFFFFF``, or -1 as int64: the same bits)
means the counter could not be read: it is dropped and counted.

Example:
    >>> from xprosql.protos import xplane_pb2
    >>> plane = xplane_pb2.XPlane(name="/device:TPU:0")
    >>> plane.stat_metadata[1].name = "counter_value"
    >>> plane.event_metadata[7].name = "COUNT_CYCLES"
    >>> line = plane.lines.add(id=3, name="fusion.1")
    >>> event = line.events.add(metadata_id=7, duration_ps=5)
    >>> _ = event.stats.add(metadata_id=1, uint64_value=1750)
    >>> rows, unreadable = xspace_counter_rows(plane, device_id=0, first_event_id=0, first_track_id=0, start_ns=0)
    >>> rows[0][2:6], rows[0][8], unreadable
    (('fusion.1', 3, None, 'count_cycles'), 1750, 0)
"""

from __future__ import annotations

import functools
import re
from typing import Any

from xprosql.protos import xplane_pb2

__all__ = [
    "COUNTER_LINE",
    "UNREADABLE",
    "chip_generation",
    "counter_names",
    "has_counters",
    "xspace_counter_rows",
]

UNREADABLE = 0xFFFFFFFFFFFFFFFF
COUNTER_LINE = "_counters_"
_UTILIZATION_STAT = re.compile(r".*_utilization_percent$")
# XProf's utilization tool reads these device types; the dictionaries are named after the chip.
_GENERATIONS = (("v7x", re.compile(r"TPU ?v?7")), ("v6e", re.compile(r"TPU v6")))
_ENUM = re.compile(r"enum\s+\w+\s*:\s*uint64_t\s*\{([^}]*)\}")


def has_counters(plane: xplane_pb2.XPlane) -> bool:
    """Cheap test before the walk: does the plane name a counter stat, a ``_counters_`` line or a utilization stat?

    Example:
        >>> has_counters(xplane_pb2.XPlane(name="/host:CPU"))
        False
    """
    if any(md.name == "counter_value" for md in plane.stat_metadata.values()):
        return True
    if any(line.name == COUNTER_LINE for line in plane.lines):
        return True
    names = {sid: md.name for sid, md in plane.stat_metadata.items()}
    return any(_UTILIZATION_STAT.match(names.get(stat.metadata_id, "")) for stat in plane.stats)


def chip_generation(device_type: str | None) -> str | None:
    """The counter dictionary for a ``device_type_string``: ``'v6e'``, ``'v7x'`` or None.

    Example:
        >>> chip_generation("TPU v6 Lite"), chip_generation("TPU v7x"), chip_generation("Tesla V100")
        ('v6e', 'v7x', None)
    """
    if not device_type:
        return None
    for generation, pattern in _GENERATIONS:
        if pattern.search(device_type):
            return generation
    return None


@functools.cache
def counter_names(generation: str) -> dict[int, str]:
    """Counter id -> lowercased name from the xprof wheel's ``tpu_counter_ids_<generation>.h``; empty without xprof.

    Read at run time from the installed wheel (never copied here), as XProf's
    own ``counter_extractor`` reads it.

    Example:
        >>> names = counter_names("v6e")                            # doctest: +SKIP
        >>> names[3257466888]                                       # doctest: +SKIP
        'vf_chip_tc_tcs_tc_misc_tcs_stats_tcs_stats_counters_unprivileged_count_cycles'
    """
    if not re.fullmatch(r"[a-z0-9]+", generation):
        return {}
    try:
        from importlib import resources

        text = (resources.files("xprof") / "utils" / f"tpu_counter_ids_{generation}.h").read_text(encoding="utf-8")
    except (ImportError, FileNotFoundError, OSError, TypeError):
        return {}
    match = _ENUM.search(re.sub(r"//[^\n]*", "", text))
    if match is None:
        return {}
    names: dict[int, str] = {}
    for entry in match.group(1).split(","):
        name, sep, value = entry.partition("=")
        if sep:
            try:
                names[int(value.strip(), 0)] = name.strip().lower()
            except ValueError:
                continue
    return names


def _value(stat: xplane_pb2.XStat, names: dict[int, str]) -> Any:
    which = stat.WhichOneof("value")
    if which is None:
        return None
    value = getattr(stat, which)
    return names.get(value) if which == "ref_value" else value


def _text(value: Any) -> str | None:
    if value is None or value == "":
        return None
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _number(value: Any) -> tuple[int | None, float | None, bool]:
    """(value as uint64, value as double, unreadable) of a counter stat value."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None, None, False
    if isinstance(value, int):
        if value == UNREADABLE or value == -1:  # -1 as int64 is the same all-ones word
            return None, None, True
        return (value if 0 <= value < 2**64 else None), float(value), False
    return None, value, False


def xspace_counter_rows(
    plane: xplane_pb2.XPlane, *, device_id: int, first_event_id: int, first_track_id: int, start_ns: int
) -> tuple[list[tuple], int]:
    """Counter rows of one plane, in ``counters`` column order, and how many unreadable values were dropped.

    ``first_event_id`` is the id the decoder gave the plane's first event, so
    rows join ``events`` on ``event_id``; ``first_track_id`` is accepted for
    the decoder's convenience (counters carry no track). ``start_ns`` is the
    profile's time origin.
    """
    names = {sid: md.name for sid, md in plane.stat_metadata.items()}
    plane_stats = {names.get(s.metadata_id): _value(s, names) for s in plane.stats}
    dictionary = counter_names(chip_generation(_text(plane_stats.get("device_type_string"))) or "")
    metadata_stats: dict[int, dict[str | None, Any]] = {
        mid: {names.get(s.metadata_id): _value(s, names) for s in md.stats} for mid, md in plane.event_metadata.items()
    }
    rows: list[tuple] = []
    unreadable = 0

    for stat_name, value in plane_stats.items():
        if stat_name and _UTILIZATION_STAT.match(stat_name):
            unsigned, double, bad = _number(value)
            if bad:
                unreadable += 1
            elif double is not None:
                rows.append((None, device_id, None, None, None, stat_name, None, "plane", unsigned, double,
                             None, None))

    event_id = first_event_id
    for line in plane.lines:
        base_ps = (line.timestamp_ns - start_ns) * 1000
        if line.name == COUNTER_LINE:
            offsets = sorted({e.offset_ps for e in line.events})
            rank = {offset: i for i, offset in enumerate(offsets)}
        for event in line.events:
            md = plane.event_metadata.get(event.metadata_id)
            own = {names.get(s.metadata_id): _value(s, names) for s in event.stats}
            stats = metadata_stats.get(event.metadata_id, {})
            name = md.name if md is not None else ""
            if "counter_value" in own or "counter_value" in stats:
                value = own["counter_value"] if "counter_value" in own else stats["counter_value"]
                counter_id = own.get("performance_counter_id", stats.get("performance_counter_id"))
                if not isinstance(counter_id, int) and not name:
                    counter_id = event.metadata_id  # XProf's utilization tool keys such events by metadata id
                counter_id = counter_id if isinstance(counter_id, int) else None
                counter = name.lower() if name else dictionary.get(counter_id) if counter_id is not None else None
                description = own.get("performance_counter_description", stats.get("performance_counter_description"))
                counter_set = own.get("performance_counter_sets", stats.get("performance_counter_sets"))
                kernel, sample = line.name, line.id
            elif line.name == COUNTER_LINE:
                # PM sampling: the value sits in a stat named like the metric; else the one numeric stat.
                merged = {**stats, **own}
                numeric = [v for v in merged.values() if isinstance(v, (int, float)) and not isinstance(v, bool)]
                value = merged[name] if name in merged else numeric[0] if len(numeric) == 1 else None
                counter_id, counter, description, counter_set = None, name or None, None, None
                kernel, sample = line.name, rank[event.offset_ps]
            else:
                event_id += 1
                continue
            unsigned, double, bad = _number(value)
            if bad:
                unreadable += 1
            else:
                start = base_ps + event.offset_ps
                rows.append((
                    event_id, device_id, kernel, sample, counter_id, counter, _text(description), _text(counter_set),
                    unsigned, double, start, start + event.duration_ps,
                ))
            event_id += 1
    return rows, unreadable
