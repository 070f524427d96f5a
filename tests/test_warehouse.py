"""Warehouse promises: idempotent, atomic, safe under concurrent ingest, plain Parquet, cheap snapshots."""

from __future__ import annotations

import multiprocessing
import os
import shutil
from pathlib import Path

import polars as pl
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from conftest import GPU_SAMPLE, TPU_SAMPLE, tree_digest

import xprosql
from xprosql.errors import WarehouseError
from xprosql.ingest import profile_id_of
from xprosql.models import TABLES


def test_ingesting_twice_changes_nothing(tmp_path: Path) -> None:
    root = tmp_path / "run"
    first = xprosql.ingest(TPU_SAMPLE, into=root)
    assert len(first.ingested) == 1
    before = tree_digest(root)
    second = xprosql.ingest(TPU_SAMPLE, into=root)
    assert second.ingested == [] and [s.profile_id for s in second.skipped] == [first.ingested[0].profile_id]
    # The same content under another name is the same profile.
    copy = tmp_path / "copy.xplane.pb"
    shutil.copy(TPU_SAMPLE, copy)
    assert len(xprosql.ingest(copy, into=root).skipped) == 1
    assert tree_digest(root) == before


def _ingest_in_child(args: tuple[str, str]) -> int:
    source, root = args
    return len(xprosql.ingest(source, into=root).ingested)


def test_concurrent_ingests_into_one_warehouse(tmp_path: Path) -> None:
    root = tmp_path / "run"
    jobs = [(str(TPU_SAMPLE), str(root)), (str(TPU_SAMPLE), str(root)), (str(GPU_SAMPLE), str(root))]
    with multiprocessing.get_context("spawn").Pool(3) as pool:
        ingested = pool.map(_ingest_in_child, jobs)
    assert sorted(ingested) == [0, 1, 1]
    run = xprosql.load(root)
    assert sorted(run.profile_ids) == sorted(profile_id_of(p.read_bytes()) for p in (TPU_SAMPLE, GPU_SAMPLE))
    counts = dict(run.sql("SELECT profile_id, count(*) FROM events GROUP BY 1").rows())
    assert counts[profile_id_of(TPU_SAMPLE.read_bytes())] == 26723
    assert not [p for p in root.iterdir() if p.name.startswith(".staging-")]


def test_a_commit_that_dies_midway_is_invisible_and_retried(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "run"
    assert xprosql.ingest(GPU_SAMPLE, into=root).ok
    real_rename = os.rename
    calls = {"n": 0}

    def rename_then_die(src: str, dst: str) -> None:
        calls["n"] += 1
        if calls["n"] == 4:  # some tables moved, profiles not yet
            raise OSError(28, "No space left on device")
        real_rename(src, dst)

    monkeypatch.setattr(os, "rename", rename_then_die)
    report = xprosql.ingest(TPU_SAMPLE, into=root)  # a full disk stops the batch, reported, not raised
    assert report.stopped and report.failed[0][0] == str(TPU_SAMPLE) and "no space left" in report.failed[0][1]
    monkeypatch.setattr(os, "rename", real_rename)

    tpu_id = profile_id_of(TPU_SAMPLE.read_bytes())
    assert (root / "devices" / f"profile_id={tpu_id}").exists(), "the crash left a partial partition behind"
    run = xprosql.load(root)
    assert tpu_id not in run.profile_ids
    assert run.sql("SELECT count(*) FROM events WHERE profile_id = $p", {"p": tpu_id}).rows() == [(0,)]
    assert not [p for p in root.iterdir() if p.name.startswith(".staging-")]

    assert len(xprosql.ingest(TPU_SAMPLE, into=root).ingested) == 1
    assert xprosql.load(root).sql("SELECT count(*) FROM events WHERE profile_id = $p", {"p": tpu_id}).rows() == [(26723,)]


def test_load_is_a_snapshot(tmp_path: Path) -> None:
    root = tmp_path / "run"
    xprosql.ingest(GPU_SAMPLE, into=root)
    run = xprosql.load(root)
    xprosql.ingest(TPU_SAMPLE, into=root)
    assert run.sql("SELECT count(*) FROM profiles").rows() == [(1,)]
    assert xprosql.load(root).sql("SELECT count(*) FROM profiles").rows() == [(2,)]


def test_plain_parquet_readable_without_xprosql(xspace_warehouse: Path) -> None:
    events = ds.dataset(xspace_warehouse / "events", format="parquet", partitioning="hive")
    assert events.count_rows() == 26723 + 23128
    lazy = pl.scan_parquet(xspace_warehouse / "events" / "**" / "*.parquet", hive_partitioning=True)
    assert lazy.select(pl.len()).collect().item() == 26723 + 23128
    for table in TABLES:
        for path in (xspace_warehouse / table).rglob("*.parquet"):
            meta = pq.ParquetFile(path).metadata
            if meta.num_rows:
                assert meta.row_group(0).column(0).compression == "ZSTD"
                assert all(meta.row_group(i).num_rows <= 1_000_000 for i in range(meta.num_row_groups))


def test_run_api(xspace_warehouse: Path) -> None:
    run = xprosql.load(xspace_warehouse)
    assert run.tables == list(TABLES)
    assert run.profiles.height == 2
    result = run.sql("SELECT name, sum(dur_ps) AS total FROM events GROUP BY 1 ORDER BY 2 DESC LIMIT 10")
    assert len(result) == 10 and result.columns == ["name", "total"]
    frame = result.pl()
    assert frame["total"].is_sorted(descending=True)
    assert result.arrow().num_rows == 10
    assert list(result.df()["name"]) == frame["name"].to_list()
    by_name = run.sql("SELECT count(*) FROM events WHERE dur_ps > $min", {"min": 10**9}).rows()[0][0]
    by_position = run.sql("SELECT count(*) FROM events WHERE dur_ps > ?", [10**9]).rows()[0][0]
    assert by_name == by_position > 0
    lazy = run.table("events")
    assert isinstance(lazy, pl.LazyFrame)
    assert lazy.filter(pl.col("dur_ps") > 10**9).select(pl.len()).collect().item() == by_name
    assert "profile_id" in lazy.collect_schema().names()
    only_tpu = xprosql.load(xspace_warehouse, profiles=[profile_id_of(TPU_SAMPLE.read_bytes())])
    assert only_tpu.sql("SELECT count(*) FROM events").rows() == [(26723,)]


def test_empty_warehouse_has_every_table(tmp_path: Path) -> None:
    (tmp_path / "run" / "profiles").mkdir(parents=True)
    run = xprosql.load(tmp_path / "run")
    for table in TABLES:
        result = run.sql(f"SELECT * FROM {table}")
        assert len(result) == 0 and result.columns == ["profile_id", *TABLES[table].names]
        assert run.table(table).collect().height == 0


def test_load_errors(tmp_path: Path) -> None:
    with pytest.raises(WarehouseError, match="no such warehouse"):
        xprosql.load(tmp_path / "missing")
    (tmp_path / "notwh").mkdir()
    with pytest.raises(WarehouseError, match="not an xprosql warehouse"):
        xprosql.load(tmp_path / "notwh")


def test_a_warehouse_written_before_a_column_existed_still_reads(tmp_path: Path) -> None:
    """Files without a column the schema has now (hand-made by dropping it): the column reads as NULL."""
    root = tmp_path / "run"
    assert xprosql.ingest(TPU_SAMPLE, into=root).ok
    for path in (root / "hlo_ops").rglob("*.parquet"):
        table = pq.read_table(path)
        pq.write_table(table.drop_columns(["source_line"]), path)
    run = xprosql.load(root)
    rows = run.sql("SELECT count(*), count(source_line), count(hlo_op) FROM hlo_ops").rows()[0]
    assert rows[0] == rows[2] > 0 and rows[1] == 0


def test_a_profile_without_the_op_stats_its_analyses_read_is_refused(tmp_path: Path) -> None:
    """A warehouse from before op_stats existed (hand-made by deleting one profile's op_stats): load says so."""
    root = tmp_path / "run"
    assert xprosql.ingest([TPU_SAMPLE, GPU_SAMPLE], into=root).ok
    shutil.rmtree(root / "op_stats" / f"profile_id={profile_id_of(GPU_SAMPLE.read_bytes())}")
    with pytest.raises(WarehouseError, match="1 profiles .* without the op_stats table"):
        xprosql.load(root)
