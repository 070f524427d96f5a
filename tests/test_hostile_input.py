"""Hostile input and faults around the ingest: each refused in bounded time and memory, named, and the batch goes on.

Hand-made where no real file shows the fault (a gzip bomb, a FIFO, a 1,000-deep JSON, out-of-range values,
a full disk through a fake filesystem layer); built from the real samples otherwise. Each test is bounded
to seconds: the limits are lowered for the test (XPROSQL_MAX_TRACE_BYTES), not the inputs raised to them.
"""

from __future__ import annotations

import errno
import gzip
import importlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
import zlib
from pathlib import Path

import pytest
from conftest import TEST_DATA, TPU_SAMPLE
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import xprosql
from xprosql.models import TABLES
from xprosql.warehouse import Warehouse

# Slow (tests/conftest.py): hostile input in bounded time and memory takes minutes: killed workers, full disks, bombs.
pytestmark = pytest.mark.slow

SMALL_KINETO = TEST_DATA / "kineto" / "mi250_rocm.json.gz"
LIMIT = 32 << 20


def _cli(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "xprosql.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})


def _profiles(root: Path) -> int:
    try:
        with xprosql.load(root) as run:
            return run.sql("SELECT count(*) FROM profiles").rows()[0][0]
    except xprosql.WarehouseError:  # nothing committed yet (the tables are being created)
        return 0


def _kineto_variants(folder: Path, n: int) -> list[Path]:
    """``n`` distinct real traces: the small ROCm sample, each with its time origin moved (other bytes, other
    profile ids)."""
    trace = json.loads(gzip.decompress(SMALL_KINETO.read_bytes()))
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(n):
        for event in trace["traceEvents"]:
            if isinstance(event.get("ts"), (int, float)):
                event["ts"] += 1
        path = folder / f"rank{i:03d}.json"
        path.write_text(json.dumps(trace))
        paths.append(path)
    return paths


# --- 1. files that change, special files, links ------------------------------------------------------------


def test_a_file_rewritten_while_it_ingests_is_refused_or_ingested_never_a_crash(tmp_path: Path) -> None:
    data = TPU_SAMPLE.read_bytes()
    target = tmp_path / "changing.xplane.pb"
    target.write_bytes(data)
    stop = threading.Event()

    def churn() -> None:  # what a profiler still writing its file does: truncate, write again
        while not stop.is_set():
            with open(target, "r+b") as file:
                file.truncate(len(data) // 3)
                file.flush()
                time.sleep(0.002)
                file.seek(0)
                file.write(data)
            time.sleep(0.002)

    writer = threading.Thread(target=churn)
    writer.start()
    try:
        outcomes = [_cli("ingest", str(target), "--into", str(tmp_path / f"run{i}"), "--compact", "never")
                    for i in range(3)]
    finally:
        stop.set()
        writer.join()
    for done in outcomes:
        assert done.returncode in (0, 1), (done.returncode, done.stderr)  # never SIGBUS (-7 / 135)
        if done.returncode == 1:
            assert f"error: {target}:" in done.stderr and "Traceback" not in done.stderr


def test_a_fifo_is_refused_up_front_named_or_found(tmp_path: Path) -> None:
    fifo = tmp_path / "logs" / "pipe.json"
    fifo.parent.mkdir()
    os.mkfifo(fifo)
    (tmp_path / "logs" / "good.json.gz").write_bytes(SMALL_KINETO.read_bytes())
    named = _cli("ingest", str(fifo), "--into", str(tmp_path / "run"), timeout=60)
    assert named.returncode == 1 and "not a regular file" in named.stderr
    report = xprosql.ingest(tmp_path / "logs", into=tmp_path / "run2")
    assert len(report.ingested) == 1 and report.failed == [(str(fifo), "not a regular file (a FIFO, device or socket): refused")]


def test_a_link_to_a_device_is_refused(tmp_path: Path) -> None:
    link = tmp_path / "zeros.json"
    link.symlink_to("/dev/zero")
    report = xprosql.ingest(link, into=tmp_path / "run")
    assert report.failed and "not a regular file" in report.failed[0][1]


def test_links_out_of_the_tree_are_reported_not_followed(tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "secret.json.gz").write_bytes(SMALL_KINETO.read_bytes())
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "mine.json.gz").write_bytes((TEST_DATA / "kineto" / "triton_example.json.gz").read_bytes())
    (logs / "theirs.json.gz").symlink_to(outside / "secret.json.gz")
    (logs / "their_dir").symlink_to(outside)
    report = xprosql.ingest(logs, into=tmp_path / "run")
    assert [Path(i.path).name for i in report.ingested] == ["mine.json.gz"]
    reasons = dict(report.failed)
    assert "not followed" in reasons[str(logs / "theirs.json.gz")] and "not followed" in reasons[str(logs / "their_dir")]
    assert xprosql.ingest(logs / "theirs.json.gz", into=tmp_path / "run").ok  # named: read wherever it leads


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads every directory")
def test_an_unreadable_directory_is_reported(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    (logs / "closed").mkdir(parents=True)
    (logs / "open.json.gz").write_bytes(SMALL_KINETO.read_bytes())
    (logs / "closed").chmod(0)
    try:
        report = xprosql.ingest(logs, into=tmp_path / "run")
    finally:
        (logs / "closed").chmod(0o755)
    assert len(report.ingested) == 1
    assert any(path.endswith("closed") and "not searched" in reason for path, reason in report.failed)


# --- 2. what a file expands to ------------------------------------------------------------------------------


def _gzip_of(prefix: bytes, filler: bytes, megabytes: int) -> bytes:
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
    parts = [compressor.compress(prefix)]
    chunk = filler * (1 << 20)
    parts += [compressor.compress(chunk) for _ in range(megabytes)]
    return b"".join([*parts, compressor.flush()])


@pytest.mark.parametrize("fast", [True, False], ids=["columnar", "reference"])
def test_a_gzip_bomb_stops_at_the_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fast: bool) -> None:
    bomb = tmp_path / "bomb.json.gz"
    bomb.write_bytes(_gzip_of(b'{"schemaVersion": 1, "traceEvents": [', b" ", 4 * LIMIT >> 20))
    assert bomb.stat().st_size < LIMIT // 50
    monkeypatch.setenv("XPROSQL_MAX_TRACE_BYTES", str(LIMIT))
    if not fast:
        monkeypatch.setenv("XPROSQL_PURE_PYTHON", "1")
    report = xprosql.ingest([bomb, SMALL_KINETO], into=tmp_path / "run")
    assert [Path(i.path).name for i in report.ingested] == [SMALL_KINETO.name]
    [(path, reason)] = report.failed
    assert path == str(bomb) and f"more than {LIMIT:,} bytes" in reason and "XPROSQL_MAX_TRACE_BYTES" in reason


def test_a_valid_prefix_then_garbage_stops_at_the_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "padded.json"
    with open(path, "wb") as file:
        file.write(gzip.decompress(SMALL_KINETO.read_bytes())[:-2])
        file.write(b" " * (2 * LIMIT))
    monkeypatch.setenv("XPROSQL_MAX_TRACE_BYTES", str(LIMIT))
    report = xprosql.ingest(path, into=tmp_path / "run")
    assert report.failed and "this ingest's limit" in report.failed[0][1]


# --- 3, 4, 6: structure and values --------------------------------------------------------------------------


def test_deep_json_fails_alone_and_the_batch_goes_on(tmp_path: Path) -> None:
    deep = tmp_path / "deep.json"
    deep.write_text('{"schemaVersion": 1, "traceEvents": [{"ph": "X", "name": "x", "pid": 1, "tid": 1, "ts": 1, '
                    '"dur": 1, "args": {"a": ' + "[" * 1000 + "]" * 1000 + "}}]}")
    report = xprosql.ingest([deep, SMALL_KINETO], into=tmp_path / "run")
    assert [Path(i.path).name for i in report.ingested] == [SMALL_KINETO.name]
    assert report.failed and report.failed[0][0] == str(deep)


def test_an_event_with_200k_args_ingests(tmp_path: Path) -> None:
    # Linear in the args (benchmarks/hostile_input.py times it); a repeated key still leaves the fast path.
    args = {f"arg{i}": i for i in range(200_000)}
    trace = {"schemaVersion": 1, "traceEvents": [
        {"ph": "X", "cat": "cpu_op", "name": "wide", "pid": 1, "tid": 1, "ts": 1.0, "dur": 2.0, "args": args},
        {"ph": "X", "cat": "cpu_op", "name": "narrow", "pid": 1, "tid": 1, "ts": 5.0, "dur": 1.0}]}
    path = tmp_path / "wide.json"
    path.write_text(json.dumps(trace))
    report = xprosql.ingest(path, into=tmp_path / "run")
    assert report.ok and report.ingested[0].rows["event_stats"] == 200_000
    path.write_text(json.dumps(trace)[:-3] + ', "args": {"k": 1, "k": 2}}]}')
    report = xprosql.ingest(path, into=tmp_path / "run2")
    assert report.ok
    with xprosql.load(tmp_path / "run2") as run:
        assert run.sql("SELECT int_value FROM event_stats WHERE stat = 'k'").rows() == [(2,)]  # the last, as JSON


@pytest.mark.parametrize(("field", "value"), [("ts", 1e30), ("ts", -1e30), ("dur", 1e25), ("pid", 2**70),
                                              ("tid", -(2**70)), ("correlation", 2**64)])
def test_an_out_of_range_value_skips_its_event_and_is_counted(tmp_path: Path, field: str, value: float) -> None:
    trace = json.loads(gzip.decompress(SMALL_KINETO.read_bytes()))
    timed = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    target = timed[len(timed) // 2]
    if field == "correlation":
        target.setdefault("args", {})[field] = value
    else:
        target[field] = value
    path = tmp_path / "odd.json"
    path.write_text(json.dumps(trace))
    report = xprosql.ingest([path, SMALL_KINETO], into=tmp_path / "run")
    assert report.ok, report.failed
    with xprosql.load(tmp_path / "run") as run:
        rows = dict(run.sql("SELECT regexp_extract(source_path, '[^/]+$'), n_events FROM profiles").rows())
        reasons = run.sql("SELECT drop_reasons FROM profiles WHERE source_path LIKE '%odd.json'").rows()[0][0]
    assert rows["odd.json"] == rows[SMALL_KINETO.name] - 1
    assert any(r.startswith("1 events with a value out of range") for r in reasons), reasons


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    cut=st.integers(min_value=0, max_value=len(gzip.decompress(SMALL_KINETO.read_bytes()))),
    flips=st.lists(st.tuples(st.integers(0, 10**9), st.integers(1, 255)), max_size=4),
    value=st.sampled_from([1e30, -1, 2**70, "x", None, [], {}, True, 1.5e308, -(2**63)]),
    field=st.sampled_from(["ts", "dur", "pid", "tid", "name", "cat", "ph", "args"]),
)
def test_mutated_kineto_fails_cleanly_or_ingests_consistently(
    cut: int, flips: list[tuple[int, int]], value: object, field: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    trace = json.loads(gzip.decompress(SMALL_KINETO.read_bytes()))
    events = [e for e in trace["traceEvents"] if isinstance(e, dict)]
    events[cut % len(events)][field] = value
    data = bytearray(json.dumps(trace).encode()[: cut + len(json.dumps(trace)) // 2])
    for position, mask in flips:
        if data:
            data[position % len(data)] ^= mask
    folder = tmp_path_factory.mktemp("kineto_mutant")
    path = folder / "mutant.json"
    path.write_bytes(bytes(data))
    root = folder / "run"
    assert xprosql.ingest(SMALL_KINETO, into=root).ok
    before = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and "_locks" not in p.parts)
    report = xprosql.ingest(path, into=root, compact=False)
    if report.failed:
        assert report.failed[0][0] == str(path) and report.failed[0][1] and "internal error" not in report.failed[0][1]
        after = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and "_locks" not in p.parts)
        assert after == before
        return
    profile_id = (report.ingested or report.skipped)[0].profile_id
    with xprosql.load(root) as run:
        n_events, dropped = run.sql("SELECT n_events, dropped_events FROM profiles WHERE profile_id = $p",
                                    {"p": profile_id}).rows()[0]
        assert run.sql("SELECT count(*) FROM events WHERE profile_id = $p", {"p": profile_id}).rows() == [(n_events,)]
    assert n_events >= 1 and dropped >= 0


# --- 4, 5: the batch around the files -----------------------------------------------------------------------


def test_a_full_disk_stops_the_batch_with_its_summary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A fake filesystem layer: the third profile's commit finds the disk full.
    paths = _kineto_variants(tmp_path / "logs", 5)
    commits = {"n": 0}
    real_commit = Warehouse.commit
    monkeypatch.setattr(importlib.import_module("xprosql.ingest.batch"), "COMMIT_BATCH", 1)  # a commit per profile

    def commit(self: Warehouse, staged: list) -> list[bool]:
        commits["n"] += 1
        if commits["n"] == 3:
            for item in staged:
                item.discard()
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_commit(self, staged)

    monkeypatch.setattr(Warehouse, "commit", commit)
    report = xprosql.ingest(paths, into=tmp_path / "run")
    assert len(report.ingested) == 2 and report.stopped and "no space left" in report.stopped
    assert report.failed == [(str(paths[2]), report.failed[0][1])] and report.not_done == [str(p) for p in paths[3:]]
    assert report.compaction is None
    monkeypatch.setattr(Warehouse, "commit", real_commit)
    assert _profiles(tmp_path / "run") == 2
    resumed = xprosql.ingest(paths, into=tmp_path / "run")
    assert resumed.ok and len(resumed.ingested) == 3 and len(resumed.skipped) == 2


def _tagged_processes(tag: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if f"XPROSQL_TEST_TAG={tag}".encode() in (entry / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="needs Linux /proc")
def test_a_killed_parallel_ingest_leaves_no_worker_and_commits_nothing_after(tmp_path: Path) -> None:
    paths = _kineto_variants(tmp_path / "logs", 40)
    root = tmp_path / "run"
    tag = uuid.uuid4().hex
    parent = subprocess.Popen([sys.executable, "-m", "xprosql.cli", "ingest", str(tmp_path / "logs"), "--into", str(root),
                               "--jobs", "2", "--compact", "never", "-q"],
                              env={**os.environ, "XPROSQL_TEST_TAG": tag}, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and (len(_tagged_processes(tag)) < 3 or _profiles(root) < 2):
        time.sleep(0.05)
    assert len(_tagged_processes(tag)) >= 3, "the workers never started"
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    time.sleep(5)
    assert _tagged_processes(tag) == []
    committed = _profiles(root)
    time.sleep(1)
    assert _profiles(root) == committed < len(paths)
    resumed = xprosql.ingest(tmp_path / "logs", into=root, compact=False)
    assert resumed.ok and len(resumed.ingested) + len(resumed.skipped) == len(paths)


def test_a_resume_that_finds_everything_present_still_compacts(tmp_path: Path) -> None:
    # What a kill during the automatic compaction leaves: every profile committed, none packed.
    paths = _kineto_variants(tmp_path / "logs", 33)
    root = tmp_path / "run"
    assert xprosql.ingest(paths, into=root, compact=False).ok
    assert Warehouse(root).uncompacted_profiles() == len(paths)
    resumed = xprosql.ingest(paths, into=root)
    assert not resumed.ingested and resumed.compaction is not None and resumed.compaction.files_written
    assert Warehouse(root).uncompacted_profiles() == 0


def test_xspace_events_without_metadata_or_with_negative_durations_are_said(tmp_path: Path) -> None:
    from xprosql.protos import xplane_pb2

    space = xplane_pb2.XSpace()
    space.ParseFromString(TPU_SAMPLE.read_bytes())
    line = next(line for plane in space.planes for line in plane.lines if len(line.events) > 2)
    line.events[0].metadata_id = 10**9  # no such metadata
    line.events[1].duration_ps = -5
    path = tmp_path / "damaged.xplane.pb"
    path.write_bytes(space.SerializeToString())
    assert xprosql.ingest(path, into=tmp_path / "run").ok
    with xprosql.load(tmp_path / "run") as run:
        warnings = run.sql("SELECT warnings FROM profiles").rows()[0][0]
    assert "1 events whose metadata_id has no event metadata: kept without a name" in warnings
    assert "1 events with a negative duration: kept as recorded" in warnings


def test_a_compaction_that_fills_the_disk_leaves_no_partial_pack(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    *paths, last = _kineto_variants(tmp_path / "logs", 7)
    root = tmp_path / "run"
    assert xprosql.ingest(paths, into=root, compact=False).ok
    before = sorted(p for p in root.rglob("*.parquet"))
    calls = {"n": 0}
    real_write = Warehouse._write_pack_file

    def write(self: Warehouse, *args: object, **kwargs: object) -> int:
        calls["n"] += 1
        if calls["n"] == 5:  # a fake filesystem layer: the fifth pack file finds the disk full
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Warehouse, "_write_pack_file", write)
    report = xprosql.ingest(last, into=root, compact=True)
    assert len(report.ingested) == 1 and "compaction not done" in report.failed[0][1]
    assert calls["n"] in (5, 6), "the packs go on past the full disk"  # two at a time: one may start beside it
    after = sorted(p for p in root.rglob("*.parquet"))
    referenced = sorted(Path(f) for t in TABLES for f in Warehouse(root).snapshot().table_files(t))
    assert after == referenced, "a partial pack was left"
    assert len(after) > len(before) and _profiles(root) == 7
    monkeypatch.setattr(Warehouse, "_write_pack_file", real_write)
    assert xprosql.compact(root).files_written >= 1 and _profiles(root) == 7


def _packing(root: Path) -> bool:
    """A compaction is writing: its packed files are <table>-<uuid>.parquet in its staging folder."""
    try:
        return any(root.glob("_xprosql/staging-*/*-*.parquet"))
    except FileNotFoundError:  # a profile's staging folder went away while we listed it
        return False


def test_a_kill_during_the_automatic_compaction_then_a_resume_compacts(tmp_path: Path) -> None:
    paths = _kineto_variants(tmp_path / "logs", 34)  # past AUTO_COMPACT_MIN_PROFILES (32): the ingest compacts
    root = tmp_path / "run"
    ingest = subprocess.Popen([sys.executable, "-m", "xprosql.cli", "ingest", str(tmp_path / "logs"), "--into",
                               str(root), "-q"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and ingest.poll() is None and not _packing(root):
        time.sleep(0.002)
    if ingest.poll() is not None:
        pytest.skip("the compaction ended before the test saw it begin")
    ingest.send_signal(signal.SIGKILL)
    ingest.wait()
    assert Warehouse(root).uncompacted_profiles() == len(paths), "it had published"
    resumed = xprosql.ingest(tmp_path / "logs", into=root)
    assert resumed.ok and not resumed.ingested and len(resumed.skipped) == len(paths)
    assert resumed.compaction is not None and resumed.compaction.files_written >= 1
    assert _profiles(root) == len(paths) and Warehouse(root).uncompacted_profiles() == 0


def test_a_profile_filter_is_one_expression_not_a_statement(tmp_path: Path) -> None:
    root = tmp_path / "run"
    assert xprosql.ingest(SMALL_KINETO, into=root).ok
    written = tmp_path / "x.csv"
    for where in [f"1=1; COPY (SELECT 1) TO '{written}'", f"1=1) TO '{written}' --", "true; DROP TABLE profiles"]:
        with pytest.raises(xprosql.errors.ParameterError, match="not one SQL expression|bad profile predicate"):
            xprosql.load(root, where=where)
    assert not written.exists()
    assert len(xprosql.load(root, where="format = 'kineto'").profile_ids) == 1


def test_a_worker_killed_on_one_file_names_that_file_and_the_rest_ingest(tmp_path: Path) -> None:
    # Fault injection: every interpreter of the run (the workers too) loads a sitecustomize that kills its
    # own process when it decodes a file named crash*, as the kernel would kill one out of memory.
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    (hooks / "sitecustomize.py").write_text(
        "import importlib, os, signal\n"
        "ingest = importlib.import_module('xprosql.ingest.batch')\n"
        "real = ingest._ingest_file\n"
        "def dying(path, *args, **kwargs):\n"
        "    if path.name.startswith('crash'):\n"
        "        os.kill(os.getpid(), signal.SIGKILL)\n"
        "    return real(path, *args, **kwargs)\n"
        "ingest._ingest_file = dying\n")
    paths = _kineto_variants(tmp_path / "logs", 6)
    crash = paths[2].rename(paths[2].with_name("crash.json"))
    done = _cli("ingest", str(tmp_path / "logs"), "--into", str(tmp_path / "run"), "--jobs", "2", "--compact", "never",
                env={"PYTHONPATH": os.pathsep.join([str(hooks), os.environ.get("PYTHONPATH", "")])}, timeout=300)
    assert done.returncode == 1, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert errors == [f"error: {crash}: the process decoding it died (killed by a signal: out of memory, or the file "
                      "changed under it)"], done.stderr
    assert _profiles(tmp_path / "run") == 5


def _mounted_tmpfs(directory: Path, size: str) -> bool:
    directory.mkdir()
    if os.geteuid() != 0:
        return False
    return subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(directory)],
                          capture_output=True).returncode == 0


def test_a_really_full_disk_stops_the_batch_cleanly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    disk = tmp_path / "small_disk"
    if not _mounted_tmpfs(disk, "3m"):
        pytest.skip("needs root and tmpfs to make a small disk (the fake-layer test covers the rest)")
    # Commits of 4 profiles: some are committed before the 3 MB fill up (COMMIT_BATCH's 16 staged would not fit).
    monkeypatch.setattr(importlib.import_module("xprosql.ingest.batch"), "COMMIT_BATCH", 4)
    try:
        paths = _kineto_variants(tmp_path / "logs", 40)
        root = disk / "run"
        report = xprosql.ingest(paths, into=root, compact=False)
        assert report.stopped and "no space left" in report.stopped, str(report)
        assert 1 <= len(report.ingested) < len(paths) and report.not_done
        assert report.failed[-1][0] in map(str, paths)
        assert _profiles(root) == len(report.ingested)
        assert not list(root.glob("_xprosql/staging-*"))
    finally:
        subprocess.run(["umount", str(disk)], check=False)
