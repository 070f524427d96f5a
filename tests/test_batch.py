"""Batch ingest: parallel processes, failures listed, skip by content, interrupt and resume, tags."""

from __future__ import annotations

import importlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import TEST_DATA, TPU_SAMPLE

import xprosql
from xprosql.cli import main
from xprosql.ingest import IngestInterrupted, read_metadata_file, tags_for
from xprosql.models import TABLES
from xprosql.models.tables import JOB_DERIVED_TABLES, PACK_DERIVED_TABLES
from xprosql.warehouse import Warehouse

# Real files, smallest first; the TPU sample last so that a killed ingest has work left.
SMALL_KINETO = ["triton_example", "cpu_only", "event_sync_multi_stream", "mi250_rocm", "alexnet", "cupti_counters",
                "sampled_rank0", "sampled_rank1"]


def table_digest(root: Path) -> dict[str, tuple[int, int]]:
    """Per table: rows and an order-free hash of every row (ingested_at left out: it is the wall clock).

    The tables compaction derives are left out: they fill when profiles are packed (test_compact and
    test_stored_jobs check them).
    """
    run = xprosql.load(root)
    digest = {}
    for table in (t for t in TABLES if t not in PACK_DERIVED_TABLES and t not in JOB_DERIVED_TABLES):
        drop = " EXCLUDE (ingested_at)" if table == "profiles" else ""
        digest[table] = run.sql(
            f"SELECT count(*), coalesce(sum(hash(to_json(r))), 0) FROM (SELECT *{drop} FROM {table}) AS r"
        ).rows()[0]
    run.close()
    return digest


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A log tree of real profiles in two jobs, with xprosql.json metadata files."""
    root = tmp_path_factory.mktemp("logs")
    for index, name in enumerate(SMALL_KINETO):
        job = "a" if index % 2 else "b"
        target = root / job / f"run{index % 3}"
        target.mkdir(parents=True, exist_ok=True)
        shutil.copy(TEST_DATA / "kineto" / f"{name}.json.gz", target / f"{name}.json.gz")
    shutil.copy(TPU_SAMPLE, root / "b" / "run2" / "tpu.xplane.pb")
    (root / "xprosql.json").write_text(json.dumps({"tags": {"team": "ml", "job": "unset"}}))
    (root / "a" / "xprosql.json").write_text(json.dumps({"tags": {"job": "alpha", "gpus": 8}}))
    (root / "b" / "xprosql.json").write_text(json.dumps({"tags": {"job": "beta"}}))
    (root / "b" / "run2" / "xprosql.json").write_text(json.dumps({"tags": {"commit": "c2"}}))
    return root


@pytest.fixture(scope="module")
def serial_warehouse(logs: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("serial") / "run"
    report = xprosql.ingest(logs, into=root, compact=False)
    assert report.ok and len(report.ingested) == len(SMALL_KINETO) + 1, str(report)
    return root


@pytest.mark.slow
def test_profiles_derived_together_equal_each_derived_alone(serial_warehouse: Path, tmp_path: Path) -> None:
    # The serial ingest derives each commit chunk's small profiles together, one query per derived table over all of
    # them: none may see another's rows.
    from xprosql.models.tables import INGEST_DERIVED_TABLES

    together = xprosql.load(serial_warehouse)
    paths = dict(together.sql("SELECT profile_id, source_path FROM profiles").rows())
    assert len(paths) == len(SMALL_KINETO) + 1
    for profile_id, path in paths.items():
        alone = tmp_path / profile_id
        assert xprosql.ingest(path, into=alone, compact=False).ok
        for table in INGEST_DERIVED_TABLES:
            query = f"SELECT * FROM {table} WHERE profile_id = '{profile_id}' ORDER BY ALL"
            assert together.sql(query).rows() == xprosql.load(alone).sql(query).rows(), (table, path)
    assert together.sql("SELECT count(*) FROM op_stats").rows()[0][0] > 0


def test_xspace_profiles_derived_together_equal_each_derived_alone(tmp_path: Path) -> None:
    # The XSpace samples (TPU, V100, and the MI300 / MI355 ones with memory events) in one commit chunk, derived
    # together, against each ingested alone: every derived table equal, row for row.
    from xprosql.models.tables import INGEST_DERIVED_TABLES

    samples = sorted((TEST_DATA / "xspace").glob("*.xplane.pb"))
    assert len(samples) >= 4
    report = xprosql.ingest(samples, into=tmp_path / "together", compact=False)
    assert report.ok and len(report.ingested) == len(samples), str(report)
    together = xprosql.load(tmp_path / "together")
    for item in report.ingested:
        alone = tmp_path / item.profile_id
        assert xprosql.ingest(item.path, into=alone, compact=False).ok
        for table in INGEST_DERIVED_TABLES:
            query = f"SELECT * EXCLUDE (profile_id) FROM {table} WHERE profile_id = '{item.profile_id}' ORDER BY ALL"
            assert together.sql(query).rows() == xprosql.load(alone).sql(query).rows(), (table, item.path)
    counts = dict(together.sql("SELECT 'op_stats', count(*) FROM op_stats UNION ALL "
                               "SELECT 'memory_events', count(*) FROM memory_events").rows())
    assert counts["op_stats"] > 0 and counts["memory_events"] > 0, counts


def test_a_profile_failing_to_derive_fails_alone_in_its_chunk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Fault injection (no real file makes the summary SQL fail): deriving any group that holds the profile of
    # bad.json.gz raises as DuckDB does on a sum past int64. The chunk's other profiles ingest, derived as alone.
    import duckdb

    from xprosql.ingest.derived import Deriver

    names = ["cpu_only", "triton_example", "alexnet"]
    logs = tmp_path / "logs"
    logs.mkdir()
    for name in names:
        shutil.copy(TEST_DATA / "kineto" / f"{name}.json.gz", logs / f"{name}.json.gz")
    shutil.copy(TEST_DATA / "kineto" / "event_sync_multi_stream.json.gz", logs / "bad.json.gz")
    real = Deriver.derive_together
    groups: list[int] = []

    def failing(self: Deriver, profiles: list[dict]) -> list[dict]:
        groups.append(len(profiles))
        paths = [p["profiles"].column("source_path")[0].as_py() for p in profiles]
        if any(path.endswith("bad.json.gz") for path in paths):
            raise duckdb.OutOfRangeException("Overflow in SUM of INT64")
        return real(self, profiles)

    monkeypatch.setattr(Deriver, "derive_together", failing)
    report = xprosql.ingest(logs, into=tmp_path / "run", compact=False)
    assert [path for path, _ in report.failed] == [str(logs / "bad.json.gz")], str(report)
    assert "cannot derive its summary tables" in report.failed[0][1] and "Overflow" in report.failed[0][1]
    assert sorted(Path(item.path).name for item in report.ingested) == sorted(f"{name}.json.gz" for name in names)
    assert groups[0] == len(names) + 1 and sorted(groups[1:]) == [1] * (len(names) + 1)  # together, then each alone
    monkeypatch.undo()
    run = xprosql.load(tmp_path / "run")
    assert run.sql("SELECT count(DISTINCT profile_id) FROM profiles").rows()[0][0] == len(names)
    for item in report.ingested:
        alone = tmp_path / item.profile_id
        assert xprosql.ingest(item.path, into=alone, compact=False).ok
        query = f"SELECT * EXCLUDE (profile_id) FROM framework_op_stats WHERE profile_id = '{item.profile_id}' ORDER BY ALL"
        assert run.sql(query).rows() == xprosql.load(alone).sql(query).rows(), item.path
    assert not list((tmp_path / "run" / "_xprosql").glob("staging-*")), "the failed profile's staged files are gone"


def test_the_derive_connection_is_closed_before_the_commit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # What DuckDB holds after deriving (tens of MB after a large profile) must not add to the commit's memory.
    from xprosql.ingest.derived import Deriver

    open_at_commit: list[bool] = []
    real_commit, real_init = Warehouse.commit, Deriver.__init__
    derivers: list[Deriver] = []

    def init(self: Deriver) -> None:
        real_init(self)
        derivers.append(self)

    def commit(self: Warehouse, *args: object, **kwargs: object) -> object:
        open_at_commit.extend(deriver._con is not None for deriver in derivers)
        return real_commit(self, *args, **kwargs)

    monkeypatch.setattr(Deriver, "__init__", init)
    monkeypatch.setattr(Warehouse, "commit", commit)
    assert xprosql.ingest([TPU_SAMPLE, TEST_DATA / "kineto" / "cpu_only.json.gz"], into=tmp_path / "run", compact=False).ok
    assert derivers and open_at_commit == [False] * len(derivers)


@pytest.mark.slow
def test_parallel_equals_serial_and_skips_by_content(logs: Path, serial_warehouse: Path, tmp_path: Path) -> None:
    bad = tmp_path / "extra"
    bad.mkdir()
    (bad / "truncated.xplane.pb").write_bytes(TPU_SAMPLE.read_bytes()[:4000])
    (bad / "notjson.json").write_text("{ not json")
    root = tmp_path / "run"
    report = xprosql.ingest([logs, bad], into=root, jobs=2, compact=False)
    assert len(report.ingested) == len(SMALL_KINETO) + 1 and report.skipped == []
    failed = dict(report.failed)
    assert set(failed) == {str(bad / "truncated.xplane.pb"), str(bad / "notjson.json")}
    assert all(reason for reason in failed.values())
    assert table_digest(root) == table_digest(serial_warehouse)
    again = xprosql.ingest(logs, into=root, jobs=2)
    assert again.ingested == [] and len(again.skipped) == len(SMALL_KINETO) + 1
    copy = tmp_path / "same_content_other_name.xplane.pb"
    shutil.copy(TPU_SAMPLE, copy)
    assert [s.path for s in xprosql.ingest([copy, copy], into=root, jobs=2).skipped] == [str(copy)] * 2


@pytest.mark.slow
def test_interrupted_in_process_then_resumed_equals_uninterrupted(
    logs: Path, serial_warehouse: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "run"
    monkeypatch.setattr(importlib.import_module("xprosql.ingest.batch"), "COMMIT_BATCH", 1)  # a commit per profile
    real_append = Warehouse._append
    calls = {"n": 0}

    def append_then_ctrl_c(self: Warehouse, table: str, *args: object) -> int:
        calls["n"] += 1
        if table == "events" and len(Warehouse(root).profile_ids()) == 3:  # the 4th profile, midway through its commit
            raise KeyboardInterrupt
        return real_append(self, table, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(Warehouse, "_append", append_then_ctrl_c)
    with pytest.raises(IngestInterrupted) as caught:
        xprosql.ingest(logs, into=root, compact=False)
    monkeypatch.setattr(Warehouse, "_append", real_append)
    report = caught.value.report
    assert len(report.ingested) == 3 and len(report.not_done) == len(SMALL_KINETO) + 1 - 3
    assert len(xprosql.load(root).profile_ids) == 3  # the half-committed 4th is invisible
    assert calls["n"] > 3
    resumed = xprosql.ingest(logs, into=root, compact=False)
    assert len(resumed.skipped) == 3 and len(resumed.ingested) == len(SMALL_KINETO) + 1 - 3
    assert table_digest(root) == table_digest(serial_warehouse)
    assert not list(root.glob("_xprosql/staging-*"))


@pytest.mark.slow
def test_killed_parallel_ingest_then_resumed_equals_uninterrupted(logs: Path, serial_warehouse: Path, tmp_path: Path) -> None:
    """SIGKILL to the whole process group of a --jobs 2 ingest: no cleanup runs at all."""
    root = tmp_path / "run"
    command = [sys.executable, "-m", "xprosql.cli", "ingest", str(logs), "--into", str(root), "--jobs", "2", "--compact", "never"]
    process = subprocess.Popen(command, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    committed: list[str] = []
    while time.monotonic() < deadline and process.poll() is None:
        committed = Warehouse(root).profile_ids() if (root / "profiles").is_dir() else []
        if committed:
            break
        time.sleep(0.005)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    while True:  # the workers too: a dying one still holds its staging folder's lock
        try:
            os.killpg(process.pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.01)
    assert len(committed) >= 1, "the ingest committed nothing before the deadline"
    before_resume = len(Warehouse(root).profile_ids())
    resumed = xprosql.ingest(logs, into=root, jobs=2, compact=False)
    assert resumed.ok and len(resumed.skipped) == before_resume
    assert len(resumed.ingested) + len(resumed.skipped) == len(SMALL_KINETO) + 1
    assert table_digest(root) == table_digest(serial_warehouse)
    assert not list(root.glob("_xprosql/staging-*"))  # the dead workers' folders went


def test_tags_from_metadata_files_and_options(logs: Path, tmp_path: Path) -> None:
    root = tmp_path / "run"
    assert xprosql.ingest(logs, into=root, tags={"cluster": "east", "team": "infra"}, compact=False).ok
    run = xprosql.load(root)
    rows = {name: dict(tags) for name, tags in run.sql("SELECT split_part(source_path, '/', -1), tags FROM profiles").rows()}
    assert rows["tpu.xplane.pb"] == {"cluster": "east", "commit": "c2", "job": "beta", "team": "infra"}
    assert rows["triton_example.json.gz"] == {"cluster": "east", "job": "beta", "team": "infra"}  # deeper file wins
    assert rows["cpu_only.json.gz"] == {"cluster": "east", "gpus": "8", "job": "alpha", "team": "infra"}
    # Grouping by a tag, and pruning: a predicate on tags reads only the matching profiles' files.
    by_job = dict(run.sql("SELECT tags['job'], count(*) FROM profiles GROUP BY ALL").rows())
    assert by_job == {"alpha": 4, "beta": 5}
    alpha = xprosql.load(root, where="tags['job'] = 'alpha'")
    assert len(alpha.profile_ids) == 4
    assert len(alpha.connection.execute("SELECT * FROM events").fetchall()) == run.sql(
        "SELECT count(*) FROM events JOIN profiles USING (profile_id) WHERE tags['job'] = 'alpha'"
    ).rows()[0][0]
    assert all(f.first in alpha.profile_ids and f.single for f in alpha.engine.snapshot.files["events"])
    assert len(alpha.engine.snapshot.table_files("events")) == 4 < len(run.engine.snapshot.table_files("events"))


def test_metadata_file_format(tmp_path: Path) -> None:
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "xprosql.json").write_text('{"tags": {"job": "j", "n": 3, "ok": true}}')
    assert read_metadata_file(tmp_path / "x" / "xprosql.json") == {"job": "j", "n": "3", "ok": "true"}
    assert tags_for(tmp_path / "x" / "p.json.gz", root=tmp_path) == {"job": "j", "n": "3", "ok": "true"}
    (tmp_path / "xprosql.json").write_text('{"tag": {"job": "typo"}}')
    with pytest.raises(xprosql.IngestError, match='the key "tags"'):
        tags_for(tmp_path / "x" / "p.json.gz", root=tmp_path)


def test_bad_metadata_file_fails_its_profiles_only(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    (logs / "good").mkdir(parents=True)
    (logs / "bad").mkdir()
    shutil.copy(TEST_DATA / "kineto" / "cpu_only.json.gz", logs / "good")
    shutil.copy(TEST_DATA / "kineto" / "triton_example.json.gz", logs / "bad")
    (logs / "bad" / "xprosql.json").write_text("{broken")
    report = xprosql.ingest(logs, into=tmp_path / "run")
    assert [Path(i.path).name for i in report.ingested] == ["cpu_only.json.gz"]
    assert len(report.failed) == 1 and "xprosql.json" in report.failed[0][1]


@pytest.mark.slow
def test_cli_batch_ingest(logs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "run"
    code = main(["ingest", str(logs), "--into", str(root), "--jobs", "2", "--tag", "team=x", "--progress", "-q", "--compact", "never"])
    out, err = capsys.readouterr()
    assert code == 0
    assert f"{len(SMALL_KINETO) + 1} ingested, 0 already present, 0 failed" in out
    assert "ingested " not in out.replace(f"{len(SMALL_KINETO) + 1} ingested", "")  # -q: no line per file
    assert "files/s" in err and "ETA" in err and f"{len(SMALL_KINETO) + 1}/{len(SMALL_KINETO) + 1}" in err
    run = xprosql.load(root)
    assert run.sql("SELECT DISTINCT tags['team'] FROM profiles").rows() == [("x",)]
    assert main(["ingest", str(logs), "--into", str(root), "--tag", "oops"]) == 2
