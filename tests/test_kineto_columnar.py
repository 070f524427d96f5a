"""The columnar Kineto decoder gives exactly the tables of the per-event reference decoder.

Every real trace in tests/data/kineto goes through both; the irregular variants
(values of types Kineto does not write, which the columnar path hands to the
reference path) are made here from a real trace, since no real file has them.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest
from conftest import TEST_DATA

from xprosql.errors import IngestError
from xprosql.ingest import _kineto_columnar, _kineto_reference, _kineto_scan
from xprosql.ingest.kineto import decode_kineto, load_trace

TRACES = sorted((TEST_DATA / "kineto").glob("*.json.gz"))
SAMPLE = TEST_DATA / "kineto" / "a100_nccl_rank0.json.gz"


def _tables(batches) -> dict[str, pa.Table]:
    """Batches by table, in the order they come (dictionaries included: the same values in the same order)."""
    grouped: dict[str, list[pa.RecordBatch]] = {}
    for table, batch in batches:
        grouped.setdefault(table, []).append(batch)
    return {name: pa.Table.from_batches(batches_).combine_chunks() for name, batches_ in grouped.items()}


def _reference(data: bytes) -> dict[str, pa.Table]:
    trace, events = load_trace(data, "trace")
    return _tables(_kineto_reference.decode_events(trace, events, "trace"))


def _assert_same(got: dict[str, pa.Table], want: dict[str, pa.Table]) -> None:
    assert list(got) == list(want)
    for name, table in want.items():
        assert got[name].schema == table.schema, name
        for column in table.column_names:
            assert got[name][column].equals(table[column]), f"{name}.{column}"


@pytest.mark.parametrize("trace", TRACES, ids=[t.name.split(".")[0] for t in TRACES])
def test_columnar_tables_equal_reference_tables(trace: Path) -> None:
    data = trace.read_bytes()
    columnar = _tables(_kineto_columnar.decode(data, str(trace)))  # raises Irregular if it does not take the file
    _assert_same(columnar, _reference(data))
    assert columnar["events"].num_rows > 0


def _edit_trace(path: Path, edit: Callable[[dict], None]) -> bytes:
    raw = json.loads(gzip.decompress(path.read_bytes()))
    edit(raw)
    return json.dumps(raw).encode()


def _edit(edit: Callable[[dict], None]) -> bytes:
    return _edit_trace(SAMPLE, edit)


def _cpu_ops(raw: dict) -> list[dict]:
    return [e for e in raw["traceEvents"] if e.get("cat") == "cpu_op"]


def _kernels(raw: dict) -> list[dict]:
    return [e for e in raw["traceEvents"] if e.get("cat") == "kernel"]


def _set(events: list[dict], key: str, value, *, args: bool = False) -> None:
    for event in events:
        (event["args"] if args else event)[key] = value


# Variants the columnar path takes itself: kinds of values it reads in bulk.
REGULAR = {
    "int_and_float_ts": lambda raw: [e.update(ts=int(e["ts"])) for e in _cpu_ops(raw)[::3]],
    "negative_and_missing_dur": lambda raw: (_set(_cpu_ops(raw)[:4], "dur", -1.5), _cpu_ops(raw)[5].pop("dur")),
    "string_and_float_arg_ints": lambda raw: (_set(_kernels(raw)[:3], "correlation", "17", args=True),
                                              _set(_kernels(raw)[3:6], "External id", 12.0, args=True),
                                              _set(_kernels(raw)[6:9], "stream", 2.5, args=True)),
    "bool_null_nested_and_huge_args": lambda raw: (_set(_kernels(raw)[:2], "flag", True, args=True),
                                                   _set(_kernels(raw)[2:4], "none", None, args=True),
                                                   _set(_kernels(raw)[4:6], "nested", {"a": [1, 2.5, "x"]}, args=True),
                                                   _set(_kernels(raw)[6:8], "big", 2**64 + 3, args=True),
                                                   _set(_kernels(raw)[8:10], "grid", [1, "2", 3], args=True)),
    "unknown_phases_and_flows_without_id": lambda raw: (_set(_cpu_ops(raw)[:3], "ph", "C"),
                                                        [e.pop("id") for e in raw["traceEvents"] if e.get("ph") == "s"][:1]),
    "bare_array": lambda raw: raw.update(bare=True),
    "no_args_anywhere": lambda raw: [e.pop("args", None) for e in raw["traceEvents"]],
    "instants_only": lambda raw: raw.update(traceEvents=[dict(e, ph="i") for e in raw["traceEvents"] if e.get("ph") == "X"]),
}
# Variants it hands to the reference path: it must not decode them itself.
IRREGULAR = {
    "non_object_entry": lambda raw: raw["traceEvents"].append(["not", "an", "event"]),
    "string_ts": lambda raw: _set(_cpu_ops(raw)[:2], "ts", "soon"),
    "escaped_name": lambda raw: _set(_cpu_ops(raw)[:2], "name", 'aten::"quoted"'),
    "huge_ts": lambda raw: _set(_cpu_ops(raw)[:1], "ts", 2**70),
    "bool_pid": lambda raw: _set(_cpu_ops(raw)[:1], "pid", True),
}


def _data(edit: Callable[[dict], None]) -> bytes:
    data = _edit(edit)
    raw = json.loads(data)
    return json.dumps(raw["traceEvents"]).encode() if raw.pop("bare", False) else data


@pytest.mark.parametrize("variant", REGULAR)
@pytest.mark.slow
def test_columnar_path_takes_regular_variants_exactly(variant: str) -> None:
    data = _data(REGULAR[variant])
    _assert_same(_tables(_kineto_columnar.decode(data, variant)), _reference(data))


@pytest.mark.parametrize("variant", IRREGULAR)
@pytest.mark.slow
def test_irregular_variants_go_to_the_reference_path(variant: str) -> None:
    data = _data(IRREGULAR[variant])
    with pytest.raises(_kineto_columnar.Irregular):
        _kineto_columnar.decode(data, variant)
    try:
        want = _reference(data)
    except (OverflowError, pa.ArrowException):  # a value past int64: both paths fail the same way
        with pytest.raises((OverflowError, pa.ArrowException)):
            _tables(decode_kineto(data, source=variant))
        return
    _assert_same(_tables(decode_kineto(data, source=variant)), want)


def test_pure_python_setting_gives_the_same_tables(monkeypatch: pytest.MonkeyPatch) -> None:
    """XPROSQL_PURE_PYTHON (as for XSpace) takes the per-event path; ingest sees no difference."""
    data = SAMPLE.read_bytes()
    fast = _tables(decode_kineto(data, source="trace"))
    monkeypatch.setenv("XPROSQL_PURE_PYTHON", "1")
    _assert_same(_tables(decode_kineto(data, source="trace")), fast)


# The text is scanned a piece at a time: piece ends fall inside events, keys, strings, escapes and numbers.
SMALL = TEST_DATA / "kineto" / "triton_example.json.gz"
PIECE_SIZES = [*range(1, 48), 61, 127, 256, 1000, 4099]


def _with_escapes(raw: dict) -> None:
    """A field the tables ignore on every event, its string full of escapes and JSON's own delimiters,
    and top-level fields after traceEvents with escapes too."""
    for i, event in enumerate(raw["traceEvents"]):
        event["note"] = f'tab\t "quoted" back\\slash }}, {{"ph": "X"}} é {i}'
        event["more"] = [{"a": "]}"}, -1.5e-3, None]
    raw["zTrailer"] = 'a "quoted" \\ value'


@pytest.mark.parametrize("size", PIECE_SIZES)
def test_piece_ends_anywhere_give_the_same_tables(size: int, monkeypatch: pytest.MonkeyPatch) -> None:
    data = gzip.compress(_edit_trace(SMALL, _with_escapes))
    want = _reference(data)
    monkeypatch.setattr(_kineto_columnar, "PIECE", size)
    _assert_same(_tables(_kineto_columnar.decode(data, "trace")), want)


@pytest.mark.parametrize("trace", TRACES, ids=[t.name.split(".")[0] for t in TRACES])
def test_small_pieces_and_stat_slices_on_every_trace(trace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Text pieces of 4 kB, and event_stats yielded in many slices (each with its own dictionaries)."""
    data = trace.read_bytes()
    want = _reference(data)
    monkeypatch.setattr(_kineto_columnar, "PIECE", 4093)
    monkeypatch.setattr(_kineto_columnar, "ROW_GROUP_ROWS", 997)
    _assert_same(_tables(_kineto_columnar.decode(data, str(trace))), want)


def test_arrays_that_fill_up_grow(monkeypatch: pytest.MonkeyPatch) -> None:
    """Room for 16 events and args, one float left to Arrow (ts and dur of one event need two), one string:
    every array of the scan grows, and the tables stay the reference path's."""
    def edit(raw: dict) -> None:
        for event in raw["traceEvents"][:50]:  # 17 significant digits: past Clinger's fast path, Arrow parses them
            if isinstance(event.get("ts"), float):
                event["ts"] += 0.1234567890123
            event["dur"] = 0.30000000000000004

    data = _edit_trace(TEST_DATA / "kineto" / "cupti_counters.json.gz", edit)
    monkeypatch.setattr(_kineto_scan.Scanner, "EVENTS_PER_BYTE", 0)
    monkeypatch.setattr(_kineto_scan.Scanner, "ARGS_PER_BYTE", 0)
    for name in ("FIXES", "STRINGS", "ARENA"):
        monkeypatch.setattr(_kineto_scan.Scanner, name, 1)
    grown: set[int] = set()
    room = _kineto_scan.Scanner._room
    monkeypatch.setattr(_kineto_scan.Scanner, "_room", lambda self, status, buf: (grown.add(status), room(self, status, buf)))
    _assert_same(_tables(_kineto_columnar.decode(data, "trace")), _reference(data))
    assert grown == {_kineto_scan.ROOM_EVENTS, _kineto_scan.ROOM_STATS, _kineto_scan.ROOM_STRINGS, _kineto_scan.ROOM_FIXES}


@pytest.mark.parametrize("size", [1, 5, 17, 300])
def test_escaped_name_is_irregular_wherever_a_piece_ends(size: int, monkeypatch: pytest.MonkeyPatch) -> None:
    data = _edit_trace(SMALL, lambda raw: _set(raw["traceEvents"][-3:], "name", 'aten::"quoted"'))
    monkeypatch.setattr(_kineto_columnar, "PIECE", size)
    with pytest.raises(_kineto_columnar.Irregular):
        _kineto_columnar.decode(data, "trace")


# Broken files: the columnar path hands them over, and the reference path names the file and the problem.
# Made from a real trace by cutting or corrupting it (hand-made damage: no real file has it).
BROKEN = {
    "truncated_gzip": (lambda data: data[: len(data) // 2], "truncated or corrupt gzip"),
    "truncated_gzip_trailer": (lambda data: data[:-3], "truncated or corrupt gzip"),
    "corrupt_gzip": (lambda data: data[:5000] + bytes(b ^ 0x55 for b in data[5000:5100]) + data[5100:],
                     "truncated or corrupt gzip"),
    "truncated_json_inside_an_event": (lambda data: gzip.compress(gzip.decompress(data)[:500_000]), "invalid JSON"),
    "missing_comma_between_events": (
        lambda data: gzip.compress(gzip.decompress(data).replace(b"},\n  {", b"}\n  {", 1)), "invalid JSON"),
    "garbage_after_the_trace": (lambda data: gzip.compress(gzip.decompress(data) + b" x"), "invalid JSON"),
}


@pytest.mark.parametrize("kind", BROKEN)
def test_broken_text_is_an_ingest_error_naming_the_file(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    damage, problem = BROKEN[kind]
    data = damage(SAMPLE.read_bytes())
    monkeypatch.setattr(_kineto_columnar, "PIECE", 65536)  # many pieces before the damage
    with pytest.raises(_kineto_columnar.Irregular):
        _kineto_columnar.decode(data, "rank0.json.gz")
    with pytest.raises(IngestError, match=problem) as error:
        _tables(decode_kineto(data, source="rank0.json.gz"))
    assert "rank0.json.gz" in str(error.value)

