"""Bad input gets a clear error naming the file, and the warehouse stays byte-for-byte as it was.

The corrupt inputs are made here from the real TPU sample (truncated, bit-flipped),
since no real profile arrives broken on purpose.
"""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import pytest
from conftest import GPU_SAMPLE, TPU_SAMPLE, tree_digest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import xprosql
from xprosql.errors import IngestError
from xprosql.protos import xplane_pb2

SAMPLE_BYTES = TPU_SAMPLE.read_bytes() if TPU_SAMPLE.exists() else b""


@pytest.fixture(scope="module")
def warehouse_with_gpu(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("bad") / "run"
    assert xprosql.ingest(GPU_SAMPLE, into=root).ok
    return root


BAD_INPUTS = {
    "truncated": (SAMPLE_BYTES[: len(SAMPLE_BYTES) // 2], "truncated or corrupt"),
    "random_bytes": (bytes(range(256)) * 64, "XSpace"),
    "empty": (b"", "empty file"),
    "json": (b'{"traceEvents": [{"ph": "X", "name": "k", "ts": 1, "dur": 2}]}', "JSON"),
    "gzip": (gzip.compress(SAMPLE_BYTES[:1000]), "gzip"),
}


@pytest.mark.parametrize("kind", BAD_INPUTS)
def test_bad_file_is_reported_and_warehouse_unchanged(kind: str, warehouse_with_gpu: Path, tmp_path: Path) -> None:
    data, words = BAD_INPUTS[kind]
    bad = tmp_path / f"{kind}.xplane.pb"
    bad.write_bytes(data)
    before = tree_digest(warehouse_with_gpu)
    report = xprosql.ingest(bad, into=warehouse_with_gpu)
    assert report.ingested == [] and len(report.failed) == 1
    path, reason = report.failed[0]
    assert path == str(bad)
    assert words in reason
    assert tree_digest(warehouse_with_gpu) == before


def test_bad_file_does_not_create_a_warehouse(tmp_path: Path) -> None:
    bad = tmp_path / "empty.xplane.pb"
    bad.write_bytes(b"")
    report = xprosql.ingest(bad, into=tmp_path / "new_run")
    assert not report.ok
    assert not (tmp_path / "new_run").exists()


def test_directory_without_profiles(tmp_path: Path) -> None:
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "notes.txt").write_text("nothing here")
    report = xprosql.ingest(tmp_path / "logs", into=tmp_path / "run")
    assert report.failed == [
        (str(tmp_path / "logs"), "no profiles found (no *.xplane.pb, *.json or *.json.gz files below this directory)")
    ]
    assert not (tmp_path / "run").exists()


def test_batch_with_one_bad_file_ingests_the_good_ones(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    (logs / "a").mkdir(parents=True)
    shutil.copy(TPU_SAMPLE, logs / "a" / "good.xplane.pb")
    (logs / "bad.xplane.pb").write_bytes(SAMPLE_BYTES[:5000])
    report = xprosql.ingest(logs, into=tmp_path / "run")
    assert len(report.ingested) == 1 and report.ingested[0].path.endswith("good.xplane.pb")
    assert [path for path, _ in report.failed] == [str(logs / "bad.xplane.pb")]
    assert xprosql.load(tmp_path / "run").sql("SELECT count(*) FROM profiles").rows() == [(1,)]


def test_ingest_error_names_the_file() -> None:
    from xprosql.ingest.xspace import decode_xspace

    with pytest.raises(IngestError, match=r"^some/file.xplane.pb: empty file"):
        list(decode_xspace(b"", source="some/file.xplane.pb"))


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    cut=st.integers(min_value=0, max_value=len(SAMPLE_BYTES)),
    flips=st.lists(st.tuples(st.integers(0, max(len(SAMPLE_BYTES) - 1, 0)), st.integers(1, 255)), max_size=4),
)
def test_truncated_or_flipped_file_fails_cleanly_or_ingests_consistently(
    cut: int, flips: list[tuple[int, int]], warehouse_with_gpu: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    data = bytearray(SAMPLE_BYTES[:cut])
    for position, mask in flips:
        if position < len(data):
            data[position] ^= mask
    path = tmp_path_factory.mktemp("mutant") / "mutant.xplane.pb"
    path.write_bytes(bytes(data))
    before = tree_digest(warehouse_with_gpu)
    report = xprosql.ingest(path, into=warehouse_with_gpu)
    if report.failed:
        assert report.failed[0][0] == str(path) and report.failed[0][1]
        assert tree_digest(warehouse_with_gpu) == before
        return
    # Some mutants are still valid protobuf (a cut between planes, a flipped byte inside a
    # string): then the warehouse must hold exactly what that file says.
    space = xplane_pb2.XSpace()
    space.ParseFromString(bytes(data))
    profile_id = (report.ingested or report.skipped)[0].profile_id
    run = xprosql.load(warehouse_with_gpu)
    n_events = sum(len(line.events) for plane in space.planes for line in plane.lines)
    assert run.sql("SELECT count(*) FROM events WHERE profile_id = $p", {"p": profile_id}).rows() == [(n_events,)]
