"""Compaction: packs of small profiles, identical query results, readers kept working throughout."""

from __future__ import annotations

import importlib
import multiprocessing
import shutil
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq
import pytest
from conftest import TEST_DATA, TPU_SAMPLE, analysis_text
from test_batch import SMALL_KINETO, table_digest

import xprosql
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


def test_compaction_keeps_results_and_packs_files(warehouse: Path) -> None:
    digest, analyses = table_digest(warehouse), _analyses(warehouse)
    files_before = sum(1 for _ in warehouse.rglob("*.parquet"))
    report = xprosql.compact(warehouse)
    assert report is not None and report.generation == 1 and report.packed_profiles == len(KINETO) + 1
    assert report.packs_written == 1 and not report.deferred
    assert table_digest(warehouse) == digest
    assert _analyses(warehouse) == analyses
    # What compaction derives for the profiles it packs: their steps and per-step breakdowns.
    packed = xprosql.load(warehouse)
    steps = packed.sql("SELECT count(*), count(DISTINCT profile_id) FROM stored_steps").rows()[0]
    assert steps[0] > 0 and steps == packed.sql(analysis_text("steps")).pl().select(
        pl.len(), pl.col("profile_id").n_unique()).rows()[0]
    assert packed.sql("SELECT count(*) FROM stored_bottleneck_steps").rows()[0][0] == steps[0]
    files_after = sorted(warehouse.rglob("*.parquet"))
    assert len(files_after) == len(TABLES) < files_before
    events = pq.ParquetFile(next(p for p in files_after if p.parts[-3] == "events"))
    assert events.schema_arrow.names[0] == "profile_id"
    sizes = [events.metadata.row_group(i).num_rows for i in range(events.metadata.num_row_groups)]
    assert sum(sizes) == digest["events"][0] and all(n <= ROW_GROUP_ROWS for n in sizes)
    # Plain Parquet still: DuckDB reads the packs without xprosql, profile_id inside.
    import duckdb

    plain = duckdb.sql(f"SELECT count(*), count(DISTINCT profile_id) FROM read_parquet('{warehouse}/events/_packs/*.parquet')").fetchall()
    assert plain == [(digest["events"][0], len(KINETO) + 1)]
    # Packed profiles are still present by content: ingesting them again changes nothing.
    again = xprosql.ingest([*KINETO, TPU_SAMPLE], into=warehouse)
    assert again.ingested == [] and len(again.skipped) == len(KINETO) + 1
    assert xprosql.compact(warehouse).packs_written == 0  # nothing left to do


def test_a_reader_open_across_compaction_keeps_working(warehouse: Path) -> None:
    digest = table_digest(warehouse)
    old = xprosql.load(warehouse)
    expected = old.sql("SELECT profile_id, count(*), sum(dur_ps) FROM events GROUP BY 1 ORDER BY 1").rows()
    report = xprosql.compact(warehouse)
    assert report.deferred, "the open reader's files must be kept"
    assert old.sql("SELECT profile_id, count(*), sum(dur_ps) FROM events GROUP BY 1 ORDER BY 1").rows() == expected
    assert old.table("events").select("dur_ps").sum().collect().item() == sum(r[2] for r in expected)
    new = xprosql.load(warehouse)
    assert new.engine.snapshot.generation == 1 and not new.engine.snapshot.loose["events"]
    assert new.sql("SELECT profile_id, count(*), sum(dur_ps) FROM events GROUP BY 1 ORDER BY 1").rows() == expected
    # A second compaction while the old reader still holds generation 0: merges nothing, deletes nothing.
    xprosql.compact(warehouse)
    assert old.sql("SELECT count(*) FROM events").rows() == [(sum(r[1] for r in expected),)]
    old.close()
    new.close()
    deleted, deferred = Warehouse(warehouse).collect_garbage()
    assert deleted > 0 and not deferred
    assert not list((warehouse / "events").glob("profile_id=*"))
    assert table_digest(warehouse) == digest


def _compact_in_child(root: str) -> str:
    return str(xprosql.compact(root))


def test_queries_stay_correct_during_compaction(warehouse: Path) -> None:
    """Readers open and query in a loop while another process compacts."""
    expected = table_digest(warehouse)["events"]
    context = multiprocessing.get_context("spawn")
    with context.Pool(1) as pool:
        pending = pool.apply_async(_compact_in_child, (str(warehouse),))
        seen = 0
        while not pending.ready() or seen < 3:
            with xprosql.load(warehouse) as run:
                got = run.sql("SELECT count(*), coalesce(sum(hash(to_json(r))), 0) FROM events AS r").rows()[0]
            assert got == expected
            seen += 1
        assert "generation 1" in pending.get()
    assert table_digest(warehouse)["events"] == expected


def test_underfull_packs_merge_with_new_profiles(tmp_path: Path) -> None:
    root = tmp_path / "run"
    assert xprosql.ingest(KINETO[:4], into=root, compact=False).ok
    first = xprosql.compact(root)
    assert xprosql.ingest(KINETO[4:], into=root, compact=False).ok
    digest = table_digest(root)
    second = xprosql.compact(root)
    assert second.generation == first.generation + 1 and second.packs_replaced == 1
    assert second.packed_profiles == len(KINETO)
    assert table_digest(root) == digest
    manifest = Warehouse(root).manifest()
    assert [len(p["profiles"]) for p in manifest["packs"]] == [len(KINETO)]
    assert len(list((root / "events" / "_packs").iterdir())) == 1


def test_a_compaction_that_dies_changes_nothing(warehouse: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    digest = table_digest(warehouse)
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
    assert Warehouse(warehouse).generation() == 0
    assert table_digest(warehouse) == digest
    assert xprosql.compact(warehouse).packs_written == 1
    assert table_digest(warehouse) == digest
    assert len(list((warehouse / "events" / "_packs").iterdir())) == 1  # the dead one's files went


def test_automatic_compaction_after_ingest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(importlib.import_module("xprosql.ingest"), "AUTO_COMPACT_MIN_PROFILES", 4)
    root = tmp_path / "run"
    report = xprosql.ingest(KINETO[:3], into=root)
    assert report.compaction is None  # 3 small profiles: not yet worth it
    report = xprosql.ingest(KINETO[3:], into=root)
    assert report.compaction is not None and report.compaction.packed_profiles == len(KINETO)
    assert xprosql.load(root).sql("SELECT count(*) FROM profiles").rows() == [(len(KINETO),)]
    assert not list((root / "profiles").glob("profile_id=*"))


def test_cli_compact(warehouse: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from xprosql.cli import main

    assert main(["compact", str(warehouse)]) == 0
    assert "generation 1: packed 9 profiles into 1 packs" in capsys.readouterr().out
    copy = warehouse.parent / "copy"
    shutil.copytree(warehouse, copy)
    assert xprosql.load(copy).sql("SELECT count(*) FROM profiles").rows() == [(len(KINETO) + 1,)]


def test_garbage_collection_spares_the_files_of_a_running_compaction(warehouse: Path) -> None:
    """An ingest's cleanup must not take the packs a compaction is still writing (not yet in a manifest)."""
    import fcntl

    wh = Warehouse(warehouse)
    wh.compact()
    in_progress = warehouse / "events" / "_packs" / "g000002-0000-deadbeef.parquet"
    in_progress.write_bytes(b"being written")
    with open(warehouse / ".compact.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # as a compaction in another process holds it
        wh.collect_garbage()
        assert in_progress.exists()
    wh.collect_garbage()
    assert not in_progress.exists()  # no compaction runs: an orphan of a dead one
