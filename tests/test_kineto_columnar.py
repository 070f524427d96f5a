"""The columnar Kineto decoder gives exactly the tables of the per-event reference decoder.

Every real trace in ../shared/data/kineto goes through both; the irregular variants
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
from conftest import SHARED_DATA

from xprosql.ingest import _kineto_columnar, _kineto_reference
from xprosql.ingest.kineto import decode_kineto, load_trace

TRACES = sorted((SHARED_DATA / "kineto").glob("*.json.gz"))
SAMPLE = SHARED_DATA / "kineto" / "a100_nccl_rank0.json.gz"


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


def _edit(edit: Callable[[dict], None]) -> bytes:
    raw = json.loads(gzip.decompress(SAMPLE.read_bytes()))
    edit(raw)
    return json.dumps(raw).encode()


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
def test_columnar_path_takes_regular_variants_exactly(variant: str) -> None:
    data = _data(REGULAR[variant])
    _assert_same(_tables(_kineto_columnar.decode(data, variant)), _reference(data))


@pytest.mark.parametrize("variant", IRREGULAR)
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
