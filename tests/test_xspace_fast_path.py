"""The compiled XSpace decoder gives exactly what the protobuf-object decoder gives, on every real file and on
hand-built edge cases."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from conftest import TEST_DATA, XSPACE_SAMPLES

import xprosql
from xprosql.errors import IngestError
from xprosql.ingest import xspace, xspace_wire
from xprosql.ingest.xspace_wire import (
    RawEvents,
    RawSpace,
    fast_available,
    read_raw_fast,
    read_raw_python,
)

pytestmark = pytest.mark.skipif(not fast_available(), reason="numba is not installed: only the reference path runs")


def _sources(jax_cpu_profile: Path) -> list[Path]:
    return [*XSPACE_SAMPLES.values(), jax_cpu_profile]


_STAT_NAMES = ["hlo_op", "hlo_module", "program_id", "group_id", "step_num", "correlation_id", "hlo_category", "flops",
               "bytes_accessed", "_a", "device_offset_ps", "kernel_details", "memcpy_details", "tf_op", "interned", "raw"]
# What events' stats carry, in turn: promoted stats as numbers, strings, refs and doubles (some that do not
# convert), repeated ones, unknown stat ids and bytes.
_EVENT_STATS = [
    [("program_id", "str_value", "42"), ("group_id", "double_value", 3.0), ("step_num", "double_value", 2.5),
     ("correlation_id", "int64_value", 555), ("kernel_details", "str_value", "regs:38 grid:160,1,1 block:1024,1,1")],
    [("program_id", "uint64_value", 2**64 - 1), ("flops", "uint64_value", 2**63 + 5), ("_a", "int64_value", 2),
     ("bytes_accessed", "str_value", "-12"), ("memcpy_details", "str_value", "kind:x size:4096")],
    [("hlo_op", "ref_value", "interned"), ("hlo_module", "str_value", "a"), ("hlo_module", "str_value", "b"),
     ("group_id", "str_value", "\u0661\u0662"), ("step_num", "str_value", "0012"), ("correlation_id", "int64_value", 7)],
    [("hlo_op", "ref_value", 999), ("device_offset_ps", "double_value", float("inf")), (None, "int64_value", 1),
     ("raw", "bytes_value", b"\xff\xfe"), ("tf_op", "str_value", "op")],
    [("program_id", "str_value", "99999999999999999999999"), ("group_id", "uint64_value", 7),
     ("group_id", "int64_value", 8), ("hlo_category", "str_value", "cat"), ("raw", None, None)],
    [("program_id", "int64_value", -1), ("flops", "double_value", 1e30), ("interned", "ref_value", "tf_op")],
]


def _edge_case_space() -> bytes:
    """Host, GPU and TPU planes whose events cover what the real samples lack: aggregated events, refs,
    promoted stats given as strings or doubles, unknown metadata and stat ids, `XLA Modules` lines."""
    from xprosql.protos import xplane_pb2

    space = xplane_pb2.XSpace(hostnames=["h"], errors=["e"], warnings=["w"])
    for plane_id, plane_name in enumerate(["/host:CPU", "/device:GPU:0", "/device:TPU:0"]):
        plane = space.planes.add(id=plane_id, name=plane_name)
        ids = {name: i + 1 for i, name in enumerate(_STAT_NAMES)}
        for name, stat_id in ids.items():
            plane.stat_metadata[stat_id].CopyFrom(xplane_pb2.XStatMetadata(id=stat_id, name=name))
        for metadata_id, name in enumerate(["%fusion.1 = f32[2] fusion(x)", "jit_f(1234)", "MemcpyH2D", "k"], 1):
            metadata = plane.event_metadata[metadata_id]
            metadata.id, metadata.name, metadata.display_name = metadata_id, name, name[:3]
            metadata.stats.add(metadata_id=ids["flops"], int64_value=100 * metadata_id)
            metadata.stats.add(metadata_id=ids["hlo_category"], ref_value=ids["interned"])
        for line_id, line_name in enumerate(["XLA Modules", "Stream #7(MemcpyH2D)", "XLA Ops", "Stream #8"]):
            line = plane.lines.add(id=line_id, name=line_name, timestamp_ns=1000 + 7 * line_id + plane_id)
            for k in range(12):
                event = line.events.add(metadata_id=k % 5 + 1, duration_ps=10 + k)  # metadata 5: unknown
                if k == 5 and line_id == 2:
                    event.num_occurrences = 3
                else:
                    event.offset_ps = (k * 37 + line_id * 1000) % 500 + k
                for name, field, value in _EVENT_STATS[(k + line_id + plane_id) % len(_EVENT_STATS)]:
                    stat = event.stats.add(metadata_id=ids.get(name, 99))
                    if field is not None:
                        setattr(stat, field, ids.get(value, value) if field == "ref_value" else value)
    return space.SerializeToString()


@pytest.mark.parametrize("chunk_bytes", [None, 2_000, 1])
def test_edge_cases_identical(chunk_bytes: int | None) -> None:
    data = _edge_case_space()
    fast = read_raw_fast(data, source="edge", chunk_bytes=chunk_bytes)
    _same_raw(fast, read_raw_python(data, source="edge", chunk_bytes=chunk_bytes))
    starts = fast.chunk_starts[:, 0]
    if chunk_bytes is None:
        assert starts.tolist() == [0]
    elif chunk_bytes == 1:  # a chunk per event
        assert starts.tolist() == list(range(fast.n_events))
    else:  # chunks of a few events, most starting inside a line
        line_starts = np.cumsum(fast.line_n_events) - fast.line_n_events
        assert 10 < len(starts) < fast.n_events / 2 and len(np.setdiff1d(starts, line_starts)) > len(starts) / 2


def _same_raw(a: RawSpace, b: RawSpace) -> None:
    for name, kind in RawSpace.__dataclass_fields__.items():
        if kind.compare:
            _same_value(name, getattr(a, name), getattr(b, name))
    chunks = list(zip(a.chunks(), b.chunks(), strict=True))
    assert sum(x.n_events for x, _ in chunks) == a.n_events and sum(x.n_stats for x, _ in chunks) == a.n_stats
    for x, y in chunks:
        for name in RawEvents.__dataclass_fields__:
            _same_value(name, getattr(x, name), getattr(y, name))


def _same_value(name: str, x: object, y: object) -> None:
    if isinstance(x, np.ndarray):
        assert x.dtype == y.dtype and np.array_equal(x, y), name
    elif name == "planes":
        assert [p.SerializeToString(deterministic=True) for p in x] == [
            p.SerializeToString(deterministic=True) for p in y
        ]
    elif isinstance(x, pa.Array):
        assert x.equals(y), name
    else:
        assert x == y, name


@pytest.mark.parametrize("chunk_bytes", [None, 1_000_000])
def test_raw_columns_identical(jax_cpu_profile: Path, chunk_bytes: int | None) -> None:
    for path in _sources(jax_cpu_profile):
        data = path.read_bytes()
        fast = read_raw_fast(data, source=str(path), chunk_bytes=chunk_bytes)
        reference = read_raw_python(data, source=str(path), chunk_bytes=chunk_bytes)
        assert fast.n_events > 0 and fast.n_stats > 0
        _same_raw(fast, reference)
        for plane in range(len(fast.planes)):
            assert fast.plane_with_lines(plane) == reference.plane_with_lines(plane)


def _tables(data: bytes, source: str) -> dict[str, pa.Table]:
    batches: dict[str, list[pa.RecordBatch]] = {}
    for table, batch in xspace.decode_xspace(data, source=source):
        batches.setdefault(table, []).append(batch)
    return {table: pa.Table.from_batches(b) for table, b in batches.items()}


@pytest.mark.parametrize("chunk_bytes", [xspace_wire.CHUNK_BYTES, 300_000])
def test_warehouse_tables_identical(jax_cpu_profile: Path, monkeypatch: pytest.MonkeyPatch, chunk_bytes: int) -> None:
    monkeypatch.setattr(xspace_wire, "CHUNK_BYTES", chunk_bytes)
    sources = [(path.name, path.read_bytes()) for path in _sources(jax_cpu_profile)] + [("edge", _edge_case_space())]
    for name, data in sources:
        fast = _tables(data, name)
        monkeypatch.setenv("XPROSQL_PURE_PYTHON", "1")
        reference = _tables(data, name)
        monkeypatch.delenv("XPROSQL_PURE_PYTHON")
        assert fast.keys() == reference.keys()
        for table in fast:
            assert fast[table].equals(reference[table]), f"{name}: {table} differs"


def test_space_without_events_identical(monkeypatch: pytest.MonkeyPatch) -> None:
    """Hand-built (no real file lacks events): a plane with a line that has none."""
    from xprosql.protos import xplane_pb2

    space = xplane_pb2.XSpace(hostnames=["h"])
    space.planes.add(id=1, name="/device:TPU:0").lines.add(id=1, name="XLA Ops", timestamp_ns=5)
    data = space.SerializeToString()
    fast = _tables(data, "empty")
    monkeypatch.setenv("XPROSQL_PURE_PYTHON", "1")
    reference = _tables(data, "empty")
    assert fast.keys() == reference.keys() and all(fast[t].equals(reference[t]) for t in fast)
    assert fast["events"].num_rows == 0 and fast["event_stats"].num_rows == 0 and fast["tracks"].num_rows == 1


def test_chunks_change_only_the_order_of_events(monkeypatch: pytest.MonkeyPatch) -> None:
    """Decoded a chunk at a time, each chunk's events are sorted by time on their own; every value is the same."""
    data = XSPACE_SAMPLES["gpu"].read_bytes()
    whole = _tables(data, "gpu")
    monkeypatch.setattr(xspace_wire, "CHUNK_BYTES", 200_000)
    assert len(read_raw_fast(data, source="gpu").chunk_starts) > 10
    chunked = _tables(data, "gpu")
    assert whole.keys() == chunked.keys()
    for table in whole:
        a, b = whole[table], chunked[table]
        if table == "events":
            assert not a.equals(b), "chunks sort their events apart"
            a, b = a.sort_by("event_id"), b.sort_by("event_id")
        assert a.combine_chunks().equals(b.combine_chunks()), table


@pytest.mark.parametrize("cut", [1, 7, 1000, 400_000])
def test_truncated_files_fail_the_same_way(cut: int) -> None:
    data = XSPACE_SAMPLES["tpu"].read_bytes()[:cut]
    errors = []
    for reader in (read_raw_fast, read_raw_python):
        with pytest.raises(Exception) as info:
            reader(data, source="cut.xplane.pb")
        errors.append(type(info.value).__name__)
        assert str(info.value).startswith("cut.xplane.pb: ")
    assert errors == ["IngestError", "IngestError"]


def test_reference_decoder_too_large_for_memory_fails_clearly(monkeypatch: pytest.MonkeyPatch) -> None:
    """The reference decoder holds every event at once: it checks first."""
    monkeypatch.setattr(xspace_wire, "available_memory", lambda: 1_000_000)  # 1 MB free
    with pytest.raises(IngestError, match=r"^big.xplane.pb: too large for the memory available: its 26,723 events"):
        read_raw_python(XSPACE_SAMPLES["tpu"].read_bytes(), source="big.xplane.pb")


def test_xspace_larger_than_free_memory_streams(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An XSpace is mapped and decoded a chunk at a time, so it need not fit in memory."""
    monkeypatch.setattr(xspace_wire, "available_memory", lambda: 100_000)  # less than the 0.9 MB sample
    monkeypatch.setattr(xspace_wire, "CHUNK_BYTES", 100_000)
    report = xprosql.ingest(XSPACE_SAMPLES["tpu"], into=tmp_path / "run")
    assert report.ok, str(report)
    assert report.ingested[0].rows["events"] == 26_723


def test_json_larger_than_free_memory_is_refused_before_reading(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(xspace_wire, "available_memory", lambda: 100_000)  # less than the 0.7 MB sample
    report = xprosql.ingest(TEST_DATA / "kineto" / "a100_nccl_rank0.json.gz", into=tmp_path / "run")
    assert not report.ok and "too large to read: 0.0 GiB, 0.0 GiB of memory is free" in str(report)
    assert not (tmp_path / "run").exists()
