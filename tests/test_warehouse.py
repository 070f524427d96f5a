"""Warehouse promises: Delta tables any engine reads, one transaction per profile, concurrent ingests, time travel."""

from __future__ import annotations

import datetime as dt
import itertools
import json
import multiprocessing
import pickle
import re
import shutil
import subprocess
import sys
import textwrap
import time
from collections.abc import Sequence
from pathlib import Path

import duckdb
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from conftest import GPU_SAMPLE, TEST_DATA, TPU_SAMPLE, tree_digest
from deltalake import DeltaTable
from test_batch import SMALL_KINETO, table_digest

import xprosql
from xprosql.engine.connection import tables_named
from xprosql.engine.library import library
from xprosql.errors import WarehouseError
from xprosql.ingest import profile_id_of
from xprosql.models import TABLES
from xprosql.warehouse import _CHECKPOINT_INTERVAL, UNSIGNED_COLUMNS, StagedProfile, Warehouse, file_schema

KINETO = [TEST_DATA / "kineto" / f"{name}.json.gz" for name in SMALL_KINETO]


def _digest(table: pa.Table) -> tuple[int, int]:
    """Rows and an order-free hash of every row, as :func:`test_batch.table_digest` takes it from ``run.sql``."""
    with duckdb.connect() as con:
        con.register("t", table)
        drop = " EXCLUDE (ingested_at)" if "ingested_at" in table.column_names else ""
        return con.sql(f"SELECT count(*), coalesce(sum(hash(to_json(r))), 0) FROM (SELECT *{drop} FROM t) AS r").fetchall()[0]


def _as_unsigned(table: str, rows: pa.Table) -> pa.Table:
    """What the README tells a reader without xprosql: the uint64 columns are stored as int64 of the same bits."""
    for name in UNSIGNED_COLUMNS[table]:
        index = rows.column_names.index(name)
        rows = rows.set_column(index, name, pc.cast(rows.column(index), pa.uint64(), safe=False))
    return rows


def _run_digests(root: Path) -> dict[str, tuple[int, int]]:
    with xprosql.load(root) as run:
        return {t: _digest(run.sql(f"SELECT * FROM {t}").arrow()) for t in TABLES}


def _assert_engines_agree(root: Path) -> None:
    expected = _run_digests(root)
    for table in TABLES:
        path = root / table
        through_deltalake = _digest(_as_unsigned(table, pa.table(DeltaTable(path).to_pyarrow_table())))
        through_polars = _digest(_as_unsigned(table, pl.scan_delta(str(path)).collect().to_arrow()))
        assert through_deltalake == expected[table] == through_polars, table
    assert sum(n for n, _ in expected.values()) > 0


@pytest.fixture
def warehouse(tmp_path: Path) -> Path:
    root = tmp_path / "run"
    assert xprosql.ingest([*KINETO[:4], TPU_SAMPLE, GPU_SAMPLE], into=root, compact=False).ok
    return root


@pytest.mark.slow
def test_every_table_reads_the_same_through_deltalake_and_polars_before_and_after_compact(warehouse: Path) -> None:
    _assert_engines_agree(warehouse)
    files = {t: len(DeltaTable(warehouse / t).file_uris()) for t in TABLES}
    report = xprosql.compact(warehouse)
    assert report is not None and report.files_written > 0 and report.profiles == 6
    assert sum(len(DeltaTable(warehouse / t).file_uris()) for t in TABLES) < sum(files.values())
    _assert_engines_agree(warehouse)
    # Not partitioned: profile_id is a column of every file, and the log's statistics give each file's range.
    actions = pa.table(DeltaTable(warehouse / "events").get_add_actions(flatten=True)).to_pylist()
    assert all(a["min.profile_id"] <= a["max.profile_id"] for a in actions)
    assert not list(warehouse.glob("*/profile_id=*"))


@pytest.mark.slow
def test_a_log_without_a_checkpoint_replayed_here_lists_the_files_delta_rs_lists(warehouse: Path) -> None:
    # A table's log without a checkpoint is replayed from its JSON entries (Warehouse._replayed), not opened in
    # delta-rs: every version of every table, before and after a compaction (whose removes the replay applies),
    # lists the same files either way. A checkpoint sends the table back to delta-rs.
    assert xprosql.compact(warehouse) is not None
    store = Warehouse(warehouse)
    compared, shrank, latest = 0, set(), {}
    for table in TABLES:
        listed = []
        for version in range(store._latest(table) + 1):
            replayed = store._replayed(table, version)
            assert replayed == store._data_files(DeltaTable(warehouse / table, version=version)), (table, version)
            listed.append(replayed)
        compared += len(listed)
        shrank |= {table for before, after in itertools.pairwise(listed) if len(after) < len(before)}
        latest[table] = listed[-1]
    assert compared > 2 * len(TABLES) and {"events", "profiles"} <= shrank
    DeltaTable(warehouse / "events").create_checkpoint()
    assert store._replayed("events", store._latest("events")) is None
    assert store._data_files(DeltaTable(warehouse / "events")) == latest["events"]


def _counted(run: xprosql.Run) -> dict[str, int]:
    return {t: run.sql(f"SELECT count(*) FROM {t}").rows()[0][0] for t in TABLES}


@pytest.mark.slow
def test_row_counts_from_the_log_equal_a_scan_for_whole_and_packed_files(warehouse: Path) -> None:
    assert xprosql.load(warehouse).row_counts() == _counted(xprosql.load(warehouse))
    assert xprosql.compact(warehouse) is not None
    run = xprosql.load(warehouse)
    assert run.row_counts() == _counted(run) and run.row_counts()["events"] > 0
    # Two of the six profiles: the packed files also hold the other four, so those files are read, not summed.
    part = xprosql.load(warehouse, profiles=run.profile_ids[1:3])
    assert not all(f.exact for f in part.engine.snapshot.files["events"])
    assert part.row_counts() == _counted(part) and 0 < part.row_counts()["events"] < run.row_counts()["events"]


@pytest.mark.slow
def test_a_reader_opened_before_a_compact_and_a_vacuum_keeps_reading(warehouse: Path) -> None:
    old = xprosql.load(warehouse)
    before = old.sql("SELECT profile_id, count(*), sum(dur_ps) FROM events GROUP BY 1 ORDER BY 1").rows()
    version = old.version
    report = xprosql.compact(warehouse)  # optimize, then vacuum with the default retention
    assert report is not None and report.files_written
    new = xprosql.load(warehouse)
    assert new.version > version and len(new.engine.snapshot.table_files("events")) < len(old.engine.snapshot.table_files("events"))
    # The old reader's files were replaced in the latest version, and are still there for it.
    assert not set(old.engine.snapshot.table_files("events")) & set(new.engine.snapshot.table_files("events"))
    assert old.sql("SELECT profile_id, count(*), sum(dur_ps) FROM events GROUP BY 1 ORDER BY 1").rows() == before
    assert new.sql("SELECT profile_id, count(*), sum(dur_ps) FROM events GROUP BY 1 ORDER BY 1").rows() == before
    assert old.roofline().pl().sort(pl.all()).equals(new.roofline().pl().sort(pl.all()))
    # With no retention, vacuum deletes what no latest version references: the old reader's files.
    Warehouse(warehouse)._vacuum(0)
    assert not any(Path(f).exists() for f in old.engine.snapshot.table_files("events"))
    assert xprosql.load(warehouse).sql("SELECT count(*) FROM events").rows()[0][0] == sum(r[1] for r in before)


def _ingest_in_child(args: tuple[list[str], str]) -> tuple[int, int]:
    sources, root = args
    report = xprosql.ingest(sources, into=root, compact=False)
    assert report.ok, str(report)
    return len(report.ingested), len(report.skipped)


@pytest.mark.slow
def test_four_concurrent_ingests_over_overlapping_files_keep_each_profile_once(tmp_path: Path) -> None:
    files = [str(p) for p in (*KINETO, TPU_SAMPLE)]
    serial = tmp_path / "serial"
    assert xprosql.ingest(files, into=serial, compact=False).ok
    root = tmp_path / "run"
    # Every file in two or more sets.
    sets = [sorted(set(files[i::2] + files[:3])) for i in range(2)] + [files[::-1], files[2:7]]
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        counts = pool.map(_ingest_in_child, [(s, str(root)) for s in sets])
    assert sum(ingested for ingested, _ in counts) == len(files)  # each content committed by one process only
    assert sum(ingested + skipped for ingested, skipped in counts) == sum(len(s) for s in sets)
    run = xprosql.load(root)
    assert sorted(run.profile_ids) == sorted(profile_id_of(Path(p).read_bytes()) for p in files)
    assert run.sql("SELECT count(*) = count(DISTINCT profile_id) FROM profiles").rows() == [(True,)]
    assert table_digest(root) == table_digest(serial)
    assert not list((root / "_xprosql").glob("staging-*"))


_KILLED_MIDWAY = """
import os, signal, sys
from xprosql.warehouse import _CHECKPOINT_INTERVAL, UNSIGNED_COLUMNS, Warehouse, file_schema
real = Warehouse._append
def append(self, table, *args, **kwargs):
    if table == "op_stats":  # devices, events, ... committed; op_stats and profiles not
        os.kill(os.getpid(), signal.SIGKILL)
    return real(self, table, *args, **kwargs)
Warehouse._append = append
import xprosql
xprosql.ingest(sys.argv[1], into=sys.argv[2], compact=False)
"""


@pytest.mark.slow
def test_a_process_killed_mid_commit_leaves_no_partial_profile_and_the_next_ingest_completes_it(tmp_path: Path) -> None:
    root = tmp_path / "run"
    assert xprosql.ingest(GPU_SAMPLE, into=root).ok
    before = xprosql.load(root).version
    child = subprocess.run([sys.executable, "-c", _KILLED_MIDWAY, str(TPU_SAMPLE), str(root)], check=False)
    assert child.returncode == -9
    tpu = profile_id_of(TPU_SAMPLE.read_bytes())
    # Its events were committed to the events table, past the version the profiles table pins.
    latest_events = pa.table(DeltaTable(root / "events").to_pyarrow_table(columns=["profile_id"]))
    assert tpu in latest_events.column("profile_id").to_pylist(), "the kill came before any data commit"
    run = xprosql.load(root)
    assert run.version == before and tpu not in run.profile_ids
    assert run.sql("SELECT count(*) FROM events WHERE profile_id = $p", {"p": tpu}).rows() == [(0,)]
    report = xprosql.ingest(TPU_SAMPLE, into=root)
    assert [i.profile_id for i in report.ingested] == [tpu]
    with xprosql.load(root) as run:
        assert run.sql("SELECT count(*) FROM events WHERE profile_id = $p", {"p": tpu}).rows() == [(26723,)]
    _assert_engines_agree(root)  # the dead commit's rows are gone from the latest versions too


def test_an_empty_new_folder_is_removed_only_while_no_ingest_is_staging_into_it(tmp_path: Path) -> None:
    # What four ingests into one new folder do (the concurrent test above once lost a file to it): one that
    # committed nothing removes the folder while another is about to stage a profile there.
    import fcntl
    import threading

    root = tmp_path / "run"
    warehouse = Warehouse(root)
    lock_path = root / "_xprosql" / "stage.lock"
    lock_path.parent.mkdir(parents=True)
    with open(lock_path, "a") as making:  # another ingest making its staging folder: the folder stays
        fcntl.flock(making, fcntl.LOCK_SH)
        warehouse.remove_if_empty()
        assert lock_path.parent.is_dir()
    made: list[Path] = []

    def stage() -> None:
        with warehouse.stage("0" * 16) as staged:
            made.append(staged.directory)
            assert staged.directory.is_dir()
            staged.discard()  # as an ingest does when its file is present already

    with open(lock_path, "a") as removing:  # a removal under way: a staging ingest waits, then makes it again
        fcntl.flock(removing, fcntl.LOCK_EX)
        staging = threading.Thread(target=stage)
        staging.start()
        time.sleep(0.2)
        assert not made
        shutil.rmtree(root)
    staging.join(timeout=30)
    assert len(made) == 1 and made[0].parent == root / "_xprosql"
    warehouse.remove_if_empty()  # nothing staged any more: removed
    assert not root.exists()


def test_a_staged_profile_writes_files_only_for_the_tables_with_rows(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """An empty file would never be committed: the real TPU sample leaves about half of the tables empty, and each
    file costs the writer."""
    staged_files: list[tuple[set[str], set[str]]] = []  # per staged profile: its files, its tables with rows
    commit = Warehouse.commit

    def observed_commit(self: Warehouse, staged: Sequence[StagedProfile]) -> list[bool]:
        for item in staged:
            item.finish()
            staged_files.append(({path.stem for path in item.directory.glob("*.parquet")},
                                 {table for table, rows in item.rows.items() if rows}))
        return commit(self, staged)

    monkeypatch.setattr(Warehouse, "commit", observed_commit)
    assert xprosql.ingest(TPU_SAMPLE, into=tmp_path / "run").ok
    [(files, tables_with_rows)] = staged_files
    assert files == tables_with_rows and "events" in files
    assert len(files) < len(TABLES)

    # Hand-made, as no real profile shows it: a batch of no rows, beside one with rows.
    warehouse = Warehouse(tmp_path / "other")
    with warehouse.stage("0" * 16) as staged:
        devices = TABLES["devices"]
        staged.write("devices", pa.RecordBatch.from_arrays([pa.nulls(2, field.type) for field in devices], schema=devices))
        staged.write("tracks", pa.RecordBatch.from_pylist([], schema=TABLES["tracks"]))
        staged.finish()
        assert sorted(path.name for path in staged.directory.glob("*.parquet")) == ["devices.parquet"]
        assert pq.read_table(staged.file("devices")).num_rows == 2
        assert staged.rows["devices"] == 2 and sum(staged.rows.values()) == 2
        staged.discard()


def test_rows_staged_in_many_row_groups_are_those_staged_in_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every row group's profile_id is a slice of one array per staged profile, made again when a row group is
    larger: with row groups of 997 rows (sizes varying by table and batch, the events of two real profiles in many),
    every table holds the rows, profile ids included, of an ingest in whole tables."""
    samples = [TPU_SAMPLE, GPU_SAMPLE]
    assert xprosql.ingest(samples, into=tmp_path / "whole").ok
    monkeypatch.setattr("xprosql.warehouse.ROW_GROUP_ROWS", 997)
    assert xprosql.ingest(samples, into=tmp_path / "groups").ok
    groups = pq.ParquetFile(next((tmp_path / "groups" / "events").rglob("*.parquet"))).metadata.num_row_groups
    assert groups > 2
    assert table_digest(tmp_path / "groups") == table_digest(tmp_path / "whole")


def test_a_staged_profiles_id_is_on_every_row_whatever_its_length(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Hand-made: the ids a real file gets are 16 hex digits; a caller of Warehouse.stage may give any, the empty one
    too, and rows staged in two flushes of different sizes (2 rows, then 5) carry it on each."""
    monkeypatch.setattr("xprosql.warehouse.ROW_GROUP_ROWS", 2)  # each batch below flushed alone: 2 rows, then 5
    warehouse = Warehouse(tmp_path / "run")
    devices = TABLES["devices"]
    for profile_id in ("", "x", "é" * 40):
        with warehouse.stage(profile_id) as staged:
            for rows in (2, 5):
                staged.write("devices", pa.RecordBatch.from_arrays([pa.nulls(rows, f.type) for f in devices], schema=devices))
            staged.finish()
            assert pq.ParquetFile(staged.file("devices")).metadata.num_row_groups > 1
            assert pq.read_table(staged.file("devices")).column("profile_id").to_pylist() == [profile_id] * 7
            staged.discard()


@pytest.mark.slow
def test_time_travel_returns_the_earlier_snapshot(tmp_path: Path) -> None:
    root = tmp_path / "run"
    assert xprosql.ingest(GPU_SAMPLE, into=root).ok
    first = xprosql.load(root)
    rows = first.sql("SELECT count(*) FROM events").rows()
    time.sleep(0.05)
    between = dt.datetime.now(dt.timezone.utc)
    time.sleep(0.05)
    assert xprosql.ingest(TPU_SAMPLE, into=root).ok
    xprosql.compact(root)
    latest = xprosql.load(root)
    assert len(latest.profile_ids) == 2 and latest.version > first.version
    for earlier in (xprosql.load(root, version=first.version), xprosql.load(root, as_of=between),
                    xprosql.load(root, as_of=between.isoformat())):
        assert earlier.profile_ids == first.profile_ids and earlier.version == first.version
        assert earlier.sql("SELECT count(*) FROM events").rows() == rows
    with pytest.raises(WarehouseError, match="no version"):
        xprosql.load(root, version=latest.version + 5)


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
    assert {k: v for k, v in tree_digest(root).items() if not k.startswith("_xprosql")} == \
        {k: v for k, v in before.items() if not k.startswith("_xprosql")}


def test_load_is_a_snapshot(tmp_path: Path) -> None:
    root = tmp_path / "run"
    xprosql.ingest(GPU_SAMPLE, into=root)
    run = xprosql.load(root)
    xprosql.ingest(TPU_SAMPLE, into=root)
    assert run.sql("SELECT count(*) FROM profiles").rows() == [(1,)]
    assert run.sql("SELECT count(DISTINCT profile_id) FROM events").rows() == [(1,)]
    assert xprosql.load(root).sql("SELECT count(*) FROM profiles").rows() == [(2,)]


def test_data_files_are_zstd_parquet_with_bounded_row_groups(xspace_warehouse: Path) -> None:
    for table in TABLES:
        for uri in DeltaTable(xspace_warehouse / table).file_uris():
            meta = pq.ParquetFile(uri.removeprefix("file://")).metadata
            assert pq.read_schema(uri.removeprefix("file://")).names[0] == "profile_id"
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


def test_an_engine_makes_the_views_its_queries_name_and_answers_alike(xspace_warehouse: Path) -> None:
    assert tables_named("SELECT * FROM Events JOIN decoded_events USING (x) -- op_stats") == ["events", "op_stats"]
    fresh = xprosql.load(xspace_warehouse)
    narrowed = fresh.roofline().arrow()  # the first query: a connection with the views the roofline names
    views = {r[0] for r in fresh.connection.execute("SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall()}
    assert set(TABLES) <= views  # the public connection: every table
    assert fresh.sql("SELECT count(*) FROM events").rows() == [(fresh.profiles["n_events"].sum(),)]
    opened = xprosql.load(xspace_warehouse)
    opened.connection  # noqa: B018 (every view made first)
    assert opened.roofline().arrow().equals(narrowed)


def test_a_snapshot_reads_the_log_of_a_table_when_a_query_first_names_it(xspace_warehouse: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    read: list[str] = []
    files_at = Warehouse._files_at
    monkeypatch.setattr(Warehouse, "_files_at", lambda self, table, version: read.append(table) or files_at(self, table, version))
    named = {"profiles", *tables_named(library().runnable("ops.roofline")[0])}
    run = xprosql.load(xspace_warehouse)
    assert run.roofline().arrow().num_rows > 0
    assert "op_stats" in read and set(read) <= named and len(named) < len(TABLES) / 2
    one = xprosql.load(xspace_warehouse, profiles=[profile_id_of(TPU_SAMPLE.read_bytes())])
    assert 0 < one.roofline().arrow().num_rows < run.roofline().arrow().num_rows
    assert set(read) <= named
    assert run.sql("SELECT count(*) FROM events").rows()[0][0] > 0  # the public connection: every table
    assert set(read) == {t for t in TABLES if Warehouse(xspace_warehouse)._has_table(t)}
    # A Dask task gets a snapshot as plain data: every table's files, those of the tables with rows not empty.
    for snapshot in (run.engine.snapshot, one.engine.snapshot):
        copied = pickle.loads(pickle.dumps(snapshot))
        assert type(copied.files) is dict and copied == snapshot
        counts = xprosql.load(xspace_warehouse, profiles=snapshot.profile_ids).row_counts()
        assert {t for t, files in copied.files.items() if files} == {t for t in TABLES if counts[t]}


def test_empty_warehouse_has_every_table(tmp_path: Path) -> None:
    Warehouse(tmp_path / "run").create()
    run = xprosql.load(tmp_path / "run")
    for table in TABLES:
        result = run.sql(f"SELECT * FROM {table}")
        assert len(result) == 0 and result.columns == ["profile_id", *TABLES[table].names]
        assert run.table(table).collect().height == 0
        assert DeltaTable(tmp_path / "run" / table).to_pyarrow_table().num_rows == 0


def test_load_errors(tmp_path: Path) -> None:
    with pytest.raises(WarehouseError, match="no such warehouse"):
        xprosql.load(tmp_path / "missing")
    (tmp_path / "notwh").mkdir()
    with pytest.raises(WarehouseError, match="not an xprosql warehouse"):
        xprosql.load(tmp_path / "notwh")
    (tmp_path / "older" / "profiles" / "profile_id=0123456789abcdef").mkdir(parents=True)
    with pytest.raises(WarehouseError, match="xprosql upgrade"):
        xprosql.load(tmp_path / "older")


def test_a_warehouse_written_before_a_column_existed_still_reads(tmp_path: Path) -> None:
    """Files without a column the schema has now (hand-made by dropping it): the column reads as NULL."""
    root = tmp_path / "run"
    assert xprosql.ingest(TPU_SAMPLE, into=root).ok
    for path in Warehouse(root).snapshot().table_files("hlo_ops"):
        table = pq.read_table(path)
        pq.write_table(table.drop_columns(["source_line"]), path)
    run = xprosql.load(root)
    rows = run.sql("SELECT count(*), count(source_line), count(hlo_op) FROM hlo_ops").rows()[0]
    assert rows[0] == rows[2] > 0 and rows[1] == 0


@pytest.mark.slow
def test_readme_recipes_read_the_warehouse_without_xprosql(warehouse: Path) -> None:
    """The README's "read it without xprosql" snippets, run as a user runs them (a fresh process)."""
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    section = readme[readme.index("### Reading it without xprosql"):]
    section = section[:section.index("\n## ")]
    # One block per reader, each standing alone (its own imports) after the pip install its first line names.
    snippets = [textwrap.dedent(block) for block in re.findall(r"```python\n(.*?)```", section, re.DOTALL)]
    readers = [snippet.split(":")[0].lstrip("# ") for snippet in snippets]
    assert readers == ["deltalake, with its own SQL engine", "Polars", "DuckDB over the files the Delta log lists",
                       "pandas", "Dask"], readers
    assert all(re.match(r"# [^\n]*: pip install ", snippet) for snippet in snippets), snippets
    events = xprosql.load(warehouse).sql("SELECT count(*) FROM events").rows()[0][0]
    for compacted in (False, True):
        if compacted:
            xprosql.compact(warehouse)
        for reader, snippet in zip(readers, snippets):
            script = snippet.replace('"run/', f'"{warehouse}/')
            done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
            # Arrow's scan threads can outlive the interpreter and abort it after the result (apache/arrow#34314,
            # said in the README): that exit alone is not the recipe's failure.
            arrow_exit = done.returncode == -6 and "terminate called without an active exception" in done.stderr
            assert done.returncode == 0 or arrow_exit, (reader, done.stderr[-2000:])
            assert done.stdout.split() == [str(events)], (reader, done.stdout)


def _log_actions(table_path: Path) -> dict[str, dict]:
    lines = (table_path / "_delta_log" / f"{0:020d}.json").read_text().splitlines()
    return {key: value for line in lines for key, value in json.loads(line).items()}


def _metadata(actions: dict[str, dict]) -> dict:
    """The metadata action without what differs per table (its id, its time), the schema parsed (key order aside)."""
    metadata = {k: v for k, v in actions["metaData"].items() if k not in ("id", "createdTime")}
    return {**metadata, "schemaString": json.loads(metadata["schemaString"])}


def test_a_new_warehouse_creates_its_tables_as_delta_rs_does(tmp_path: Path) -> None:
    # The first log entries are written by xprosql, not delta-rs: every table's must say what delta-rs's would.
    Warehouse(tmp_path / "ours").create()
    for table in TABLES:
        DeltaTable.create(tmp_path / "delta_rs" / table, schema=file_schema(table), mode="ignore",
                          configuration={"delta.checkpointInterval": _CHECKPOINT_INTERVAL})
        ours, theirs = _log_actions(tmp_path / "ours" / table), _log_actions(tmp_path / "delta_rs" / table)
        assert ours["protocol"] == theirs["protocol"], table
        assert _metadata(ours) == _metadata(theirs), table
        assert ours["commitInfo"]["operation"] == theirs["commitInfo"]["operation"] == "CREATE TABLE"
        opened, reference = DeltaTable(tmp_path / "ours" / table), DeltaTable(tmp_path / "delta_rs" / table)
        assert (opened.version(), opened.schema(), opened.protocol()) == (0, reference.schema(), reference.protocol())
    # Nothing of the creation is left beside the tables, and creating again changes nothing.
    before = tree_digest(tmp_path / "ours")
    Warehouse(tmp_path / "ours").create()
    assert tree_digest(tmp_path / "ours") == before
    assert not list((tmp_path / "ours" / "_xprosql").iterdir())


def test_unsigned_columns_stored_as_the_same_bits_read_back_as_written() -> None:
    """Data files store uint64 columns as int64 of the same bits (Delta has no unsigned type); the views read them
    back as UBIGINT. Hand-built values at the edges no real profile shows together (0, 2**63, the largest, null),
    in two chunks, the second sliced."""
    from xprosql.warehouse import file_schema, to_file_types, unsigned_sql

    values = [0, 2**63 - 1, 2**63, 2**64 - 1, None]
    column = pa.chunked_array([pa.array(values[:2], pa.uint64()), pa.array([7, *values[2:]], pa.uint64()).slice(1)])
    rows = pa.table({"program_id": column, "n": pa.array(range(len(values)), pa.int64())})
    stored = to_file_types("events", rows)
    assert stored.schema.field("program_id").type == file_schema("events").field("program_id").type == pa.int64()
    assert stored.column("program_id").to_pylist() == [0, 2**63 - 1, -(2**63), -1, None]
    con = duckdb.connect()
    con.register("stored", stored)
    back = con.sql(f"SELECT *{unsigned_sql('events')} FROM stored ORDER BY n").fetchall()
    assert [program_id for program_id, _ in back] == values
