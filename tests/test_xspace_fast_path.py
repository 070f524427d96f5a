"""The compiled XSpace decoder gives exactly what the protobuf-object decoder gives, on every real file."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from conftest import XSPACE_SAMPLES

from xprosql.ingest import xspace
from xprosql.ingest.xspace_wire import RawSpace, fast_available, read_raw_fast, read_raw_python

pytestmark = pytest.mark.skipif(not fast_available(), reason="numba is not installed: only the reference path runs")


def _sources(jax_cpu_profile: Path) -> list[Path]:
    return [*XSPACE_SAMPLES.values(), jax_cpu_profile]


def _same_raw(a: RawSpace, b: RawSpace) -> None:
    for name in RawSpace.__dataclass_fields__:
        x, y = getattr(a, name), getattr(b, name)
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


def test_raw_columns_identical(jax_cpu_profile: Path) -> None:
    for path in _sources(jax_cpu_profile):
        data = path.read_bytes()
        fast, reference = read_raw_fast(data, source=str(path)), read_raw_python(data, source=str(path))
        assert fast.n_events > 0 and fast.n_stats > 0
        _same_raw(fast, reference)


def _tables(data: bytes, source: str) -> dict[str, pa.Table]:
    batches: dict[str, list[pa.RecordBatch]] = {}
    for table, batch in xspace.decode_xspace(data, source=source):
        batches.setdefault(table, []).append(batch)
    return {table: pa.Table.from_batches(b) for table, b in batches.items()}


def test_warehouse_tables_identical(jax_cpu_profile: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for path in _sources(jax_cpu_profile):
        data = path.read_bytes()
        fast = _tables(data, str(path))
        monkeypatch.setenv("XPROSQL_PURE_PYTHON", "1")
        reference = _tables(data, str(path))
        monkeypatch.delenv("XPROSQL_PURE_PYTHON")
        assert fast.keys() == reference.keys()
        for table in fast:
            assert fast[table].equals(reference[table]), f"{path.name}: {table} differs"


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
