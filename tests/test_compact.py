"""Compaction (Delta optimize, ordered by profile, then vacuum): identical query results, readers kept working."""

from __future__ import annotations

import importlib
import multiprocessing
import shutil
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq
import pytest
from conftest import TEST_DATA, TPU_SAMPLE, analysis_text
from deltalake import DeltaTable
from test_batch import SMALL_KINETO, table_digest

import xprosql
from xprosql.ingest import profile_id_of
from xprosql.models import TABLES
from xprosql.warehouse import ROW_GROUP_ROWS, Warehouse

KINETO = [TEST_DATA / "kineto" / f"{name}.json.gz" for name in SMALL_KINETO]


def _analyses(root: Path) -> dict[str, list[tuple]]:
    with xprosql.load(root) as run:
        return {
            # Every op (a top-N cut may fall between ties, which either run may keep), in a set order,
            # without category: top_ops takes any_value() of an op's categories.
            # As text: a share of an all-zero track is NaN, and NaN != NaN.
            "top_ops": sorted(repr(r[:4] + r[5:]) for r in run.analysis("top_ops", top=10**6).rows()),
            "coverage": [repr(r) for r in run.analysis("gpu.launch_coverage").rows()],
            "polars": sorted(run.table("kernels").select("profile_id", "name", "dur_ps").collect().rows()),
        }


@pytest.fixture
def warehouse(tmp_path: Path) -> Path:
    root = tmp_path / "run"
    assert xprosql.ingest([*KINETO, TPU_SAMPLE], into=root, compact=False).ok
    return root


def _files(root: Path, table: str) -> list[str]:
    return sorted(DeltaTable(root / table).file_uris())


@pytest.mark.slow
def test_compaction_keeps_results_and_packs_files(warehouse: Path) -> None:
    digest, analyses = table_digest(warehouse), _analyses(warehouse)
    files_before = sum(len(_files(warehouse, t)) for t in TABLES)
    report = xprosql.compact(warehouse)
    assert report is not None and report.profiles == len(KINETO) + 1 and report.files_written > 0
    assert table_digest(warehouse) == digest
    assert _analyses(warehouse) == analyses
    # What compaction derives for the profiles it sees the first time: their steps and per-step breakdowns.
    packed = xprosql.load(warehouse)
    assert set(packed.engine.snapshot.stored) == set(packed.profile_ids)
    steps = packed.sql("SELECT count(*), count(DISTINCT profile_id) FROM stored_steps").rows()[0]
    assert steps[0] > 0 and steps == packed.sql(analysis_text("steps")).pl().select(
        pl.len(), pl.col("profile_id").n_unique()).rows()[0]
    assert packed.sql("SELECT count(*) FROM stored_bottleneck_steps").rows()[0][0] == steps[0]
    files_after = {t: _files(warehouse, t) for t in TABLES}
    assert all(len(f) <= 1 for f in files_after.values()) and sum(map(len, files_after.values())) < files_before
    events = pq.ParquetFile(files_after["events"][0])
    assert events.schema_arrow.names[0] == "profile_id"
    sizes = [events.metadata.row_group(i).num_rows for i in range(events.metadata.num_row_groups)]
    assert sum(sizes) == digest["events"][0] and all(n <= ROW_GROUP_ROWS for n in sizes)
    ids = pq.read_table(files_after["events"][0], columns=["profile_id"]).column(0).to_pylist()
    assert ids == sorted(ids), "rows are ordered by profile"
    # The vacuum after it deleted the files the packs replaced once unreferenced (retention 0 here).
    xprosql.compact(warehouse, retention_hours=0)
    assert sorted(str(p) for p in warehouse.glob("events/*.parquet")) == files_after["events"]
    # Packed profiles are still present by content: ingesting them again changes nothing.
    again = xprosql.ingest([*KINETO, TPU_SAMPLE], into=warehouse)
    assert again.ingested == [] and len(again.skipped) == len(KINETO) + 1
    assert xprosql.compact(warehouse).files_written == 0  # nothing left to do


def _compact_in_child(root: str) -> str:
    return str(xprosql.compact(root, retention_hours=0))


@pytest.mark.slow
def test_queries_stay_correct_during_compaction(warehouse: Path) -> None:
    """Readers open and query in a loop while another process compacts, and vacuums with no retention: a load
    that raced the vacuum's deletions may find a file gone (a retention of 0 is for this test only), never
    other rows."""
    expected = table_digest(warehouse)["events"]
    context = multiprocessing.get_context("spawn")
    with context.Pool(1) as pool:
        pending = pool.apply_async(_compact_in_child, (str(warehouse),))
        seen = 0
        while not pending.ready() or seen < 3:
            try:
                with xprosql.load(warehouse) as run:
                    got = run.sql("SELECT count(*), coalesce(sum(hash(to_json(r))), 0) FROM events AS r").rows()[0]
            except xprosql.QueryError as exc:
                assert "No files found" in str(exc) or "No such file" in str(exc)
                continue
            assert got == expected
            seen += 1
        assert "packed into" in pending.get()
    assert table_digest(warehouse)["events"] == expected


@pytest.mark.slow
def test_small_packs_merge_with_new_profiles(tmp_path: Path) -> None:
    root = tmp_path / "run"
    assert xprosql.ingest(KINETO[:4], into=root, compact=False).ok
    first = xprosql.compact(root)
    assert first is not None and len(_files(root, "events")) == 1
    assert xprosql.ingest(KINETO[4:], into=root, compact=False).ok
    digest = table_digest(root)
    second = xprosql.compact(root)
    assert second is not None and second.version > first.version
    assert second.profiles == len(KINETO) and second.files_replaced >= len(KINETO) - 4 + 1
    assert table_digest(root) == digest
    assert len(_files(root, "events")) == 1
    with xprosql.load(root) as run:
        assert set(run.engine.snapshot.stored) == set(run.profile_ids)


@pytest.mark.slow
def test_a_compaction_that_dies_changes_nothing(warehouse: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    digest = table_digest(warehouse)
    version = xprosql.load(warehouse).version
    files = {t: _files(warehouse, t) for t in TABLES}
    real = Warehouse._write_pack_file
    calls = {"n": 0}

    def die_on_third(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        calls["n"] += 1
        if calls["n"] == 3:
            raise OSError(28, "No space left on device")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Warehouse, "_write_pack_file", die_on_third)
    with pytest.raises(OSError):
        xprosql.compact(warehouse)
    monkeypatch.undo()
    assert xprosql.load(warehouse).version == version
    assert {t: _files(warehouse, t) for t in TABLES} == files
    on_disk = {str(p) for p in warehouse.glob("*/*.parquet")}
    assert on_disk == {f for fs in files.values() for f in fs}, "the dead one's files went"
    assert table_digest(warehouse) == digest
    assert xprosql.compact(warehouse).files_written > 0
    assert table_digest(warehouse) == digest


@pytest.mark.slow
def test_automatic_compaction_after_ingest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(importlib.import_module("xprosql.ingest.batch"), "AUTO_COMPACT_MIN_PROFILES", 4)
    root = tmp_path / "run"
    report = xprosql.ingest(KINETO[:3], into=root)
    assert report.compaction is None  # 3 new profiles: not yet worth it
    report = xprosql.ingest(KINETO[3:], into=root)
    assert report.compaction is not None and report.compaction.profiles == len(KINETO)
    assert xprosql.load(root).sql("SELECT count(*) FROM profiles").rows() == [(len(KINETO),)]
    assert Warehouse(root).uncompacted_profiles() == 0


@pytest.mark.slow
def test_cli_compact(warehouse: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from xprosql.cli import main

    assert main(["compact", str(warehouse)]) == 0
    assert f"files of {len(KINETO) + 1} profiles packed into" in capsys.readouterr().out
    copy = warehouse.parent / "copy"
    shutil.copytree(warehouse, copy)
    assert xprosql.load(copy).sql("SELECT count(*) FROM profiles").rows() == [(len(KINETO) + 1,)]


@pytest.mark.slow
def test_cleanup_spares_a_live_writer_and_takes_a_dead_ones_staging(warehouse: Path) -> None:
    """An ingest's cleanup removes staging folders whose owner is gone, never one being written."""
    wh = Warehouse(warehouse)
    with wh.stage("0123456789abcdef") as live:
        (live.directory / "events.parquet").write_bytes(b"being written")
        wh.collect_garbage()
        assert live.directory.exists()
        dead = warehouse / "_xprosql" / "staging-dead"
        dead.mkdir()
        (dead / ".owner").write_text("")  # its process is gone: nobody holds the lock
        wh.collect_garbage()
        assert not dead.exists() and live.directory.exists()
        live.discard()


def _events_in_file_order(root: Path) -> dict[str, list[int]]:
    """Each profile's event ids in the order of the files' rows (the order a scan without ORDER BY gives)."""
    order: dict[str, list[int]] = {}
    for uri in _files(root, "events"):
        rows = pq.read_table(uri.removeprefix("file://"), columns=["profile_id", "event_id"])
        for profile, event in zip(*(rows.column(c).to_pylist() for c in ("profile_id", "event_id")), strict=True):
            order.setdefault(profile, []).append(event)
    return order


@pytest.mark.slow
def test_packs_keep_profile_order_and_each_profiles_row_order(tmp_path: Path) -> None:
    """A first compaction packs single-profile files of disjoint ranges as they are (no sort); a later one packs that
    pack with a profile whose id falls inside its range (sorted): both keep rows ordered by profile, and each profile's
    rows in their ingested order."""
    ids = {path: profile_id_of(path.read_bytes()) for path in KINETO}
    by_id = sorted(KINETO, key=ids.__getitem__)
    inside, first = by_id[len(by_id) // 2], [p for p in by_id if p != by_id[len(by_id) // 2]]
    root = tmp_path / "run"
    assert xprosql.ingest(first, into=root, compact=False).ok
    ingested = _events_in_file_order(root)
    assert xprosql.compact(root).files_written > 0
    assert xprosql.ingest([inside], into=root, compact=False).ok
    ingested.update({p: e for p, e in _events_in_file_order(root).items() if p == ids[inside]})
    assert xprosql.compact(root).files_written > 0
    files = _files(root, "events")
    assert len(files) == 1
    ids_in_file = pq.read_table(files[0].removeprefix("file://"), columns=["profile_id"]).column(0).to_pylist()
    assert ids_in_file == sorted(ids_in_file) and ids[inside] in ids_in_file
    assert min(ids[p] for p in first) < ids[inside] < max(ids[p] for p in first)
    assert _events_in_file_order(root) == ingested
