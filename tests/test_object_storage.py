"""The warehouse on object storage and ingest on a Dask cluster, against a real S3 server on localhost (moto's).

Each test works in a bucket of its own on one S3 server the module starts (``python -m moto.server``, which
honours S3's conditional writes: the ``If-None-Match`` put that delta-rs commits with). The reference is a
local ingest of the same real files of tests/data: the S3 warehouse must hold the same rows in every table
and give the same analysis results; the raw files themselves check what each profile row says about them.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pytest
from conftest import TEST_DATA

import xprosql
from xprosql.ingest.batch import _ingest_chunk
from xprosql.models import TABLES
from xprosql.models.tables import JOB_DERIVED_TABLES, PACK_DERIVED_TABLES
from xprosql.warehouse import PlacedProfile, RemoteWarehouse, Warehouse

boto3 = pytest.importorskip("boto3", reason="needs the test extra (moto[server], s3fs)")
pytest.importorskip("moto", reason="needs the test extra: pip install 'moto[server]'")
pytest.importorskip("s3fs", reason="needs the test extra: pip install s3fs")

# Small real profiles of both formats (a few hundred kB each).
SMALL = [TEST_DATA / "kineto" / f"{n}.json.gz" for n in ("triton_example", "cpu_only", "mi250_rocm", "alexnet")]
XSPACE = TEST_DATA / "xspace" / "mi355_jax_te_fused_attn.xplane.pb"
# Larger ones: a cluster's tasks run long enough for a worker to be killed in the middle of one.
LARGER = [TEST_DATA / "kineto" / f"{n}.json.gz" for n in ("mi300_sglang_decode_bs32", "b200_eager_nccl_rank0",
                                                          "a100_nccl_rank0", "h100_qwen1.5_0.5b", "sampled_rank0",
                                                          "sampled_rank1", "cupti_counters")]
ANALYSES: list[tuple[str, dict[str, Any]]] = [("top_ops", {"top": 1000}), ("roofline", {}), ("steps", {}), ("bottlenecks", {}),
            ("fleet.profile_summary", {}), ("gpu.launch_coverage", {})]


@pytest.fixture(scope="module")
def s3() -> Iterator[dict[str, str]]:
    """moto's S3 server on a free port; delta-rs's storage options for it."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    endpoint = f"http://127.0.0.1:{port}"
    try:
        for _ in range(200):
            try:
                urllib.request.urlopen(endpoint, timeout=1).close()
                break
            except OSError:
                time.sleep(0.05)
        yield {"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
               "AWS_REGION": "us-east-1", "AWS_ALLOW_HTTP": "true"}
    finally:
        server.terminate()
        server.wait(10)


def _client(options: dict[str, str]) -> Any:
    return boto3.client("s3", endpoint_url=options["AWS_ENDPOINT_URL"], aws_access_key_id="testing",
                        aws_secret_access_key="testing", region_name="us-east-1")


def _bucket(options: dict[str, str]) -> str:
    name = f"xprosql-{uuid.uuid4().hex[:12]}"
    _client(options).create_bucket(Bucket=name)
    return name


def _keys(options: dict[str, str], bucket: str, prefix: str = "") -> set[str]:
    pages = _client(options).get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    return {item["Key"] for page in pages for item in page.get("Contents", [])}


def _environment(options: dict[str, str]) -> dict[str, str]:
    """A process environment with the credentials and endpoint (what the CLI and a cluster's workers read)."""
    return {**os.environ, **options, "AWS_DEFAULT_REGION": options["AWS_REGION"]}


def _tables(run: xprosql.Run) -> dict[str, pa.Table]:
    """Every table's rows in one order (ingested_at, the wall clock, left out)."""
    out = {}
    for table in TABLES:
        drop = " EXCLUDE (ingested_at)" if table == "profiles" else ""
        out[table] = run.sql(f"SELECT *{drop} FROM {table} ORDER BY ALL").arrow()
    return out


def _same_tables(local: xprosql.Run, remote: xprosql.Run, *, skip: frozenset[str] = frozenset()) -> None:
    want, got = _tables(local), _tables(remote)
    assert sum(t.num_rows for t in want.values()) > 0
    for table in TABLES:
        if table not in skip:
            assert got[table].equals(want[table]), f"{table}: {got[table].num_rows} rows on S3, {want[table].num_rows} local"


def _same_analyses(local: xprosql.Run, remote: xprosql.Run) -> None:
    for name, params in ANALYSES:
        a = local.analysis(name, **params).pl()
        b = remote.analysis(name, **params).pl()
        assert a.schema == b.schema and a.height == b.height, name
        # Exactly the same rows; rows tied on the analysis's ORDER BY may come in either order.
        assert a.sort(pl.all(), nulls_last=True).equals(b.sort(pl.all(), nulls_last=True)), name


def _raw_checks(run: xprosql.Run, files: list[Path]) -> None:
    """Each profile row against its raw file: content hash and size, read here from the file itself."""
    rows = {r[0]: r[1:] for r in run.sql("SELECT profile_id, content_sha256, file_bytes FROM profiles").rows()}
    assert len(rows) == len(files)
    for path in files:
        data = path.read_bytes()
        digest = hashlib.sha256(data).hexdigest()
        assert rows[digest[:16]] == (digest, len(data)), path


@pytest.fixture(scope="module")
def local_small(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("local") / "run"
    report = xprosql.ingest([*SMALL, XSPACE], into=root, compact=False)
    assert report.ok and len(report.ingested) == len(SMALL) + 1, str(report)
    return root


@pytest.fixture(scope="module")
def s3_small(s3: dict[str, str]) -> str:
    """The same files ingested into S3 (in this process, no cluster)."""
    uri = f"s3://{_bucket(s3)}/run"
    report = xprosql.ingest([*SMALL, XSPACE], into=uri, storage_options=s3, compact=False)
    assert report.ok and len(report.ingested) == len(SMALL) + 1, str(report)
    return uri


# -- object storage, one process -------------------------------------------------------------------------------


@pytest.mark.slow
def test_ingest_into_s3_equals_a_local_ingest(s3: dict[str, str], s3_small: str, local_small: Path) -> None:
    remote = xprosql.load(s3_small, storage_options=s3)
    assert isinstance(Warehouse(s3_small, storage_options=s3), RemoteWarehouse)
    _raw_checks(remote, [*SMALL, XSPACE])
    _same_tables(xprosql.load(local_small), remote)
    _same_analyses(xprosql.load(local_small), remote)
    # Every data file a version names is an object of the bucket, under its table's prefix.
    bucket, prefix = s3_small[len("s3://"):].split("/", 1)
    keys = _keys(s3, bucket, prefix)
    for table, files in remote.engine.snapshot.files.items():
        for f in files:
            assert f.path.startswith(f"{s3_small}/{table}/part-") and f.path[len("s3://"):].split("/", 1)[1] in keys
    # Polars reads the same files through object_store.
    assert remote.table("events").select("profile_id").collect().height == remote.sql(
        "SELECT count(*) FROM events").rows()[0][0]


@pytest.mark.slow
def test_ingest_again_is_a_no_op_and_the_cli_reads_credentials_from_the_environment(
        s3: dict[str, str], s3_small: str) -> None:
    before = xprosql.load(s3_small, storage_options=s3).version
    report = xprosql.ingest([*SMALL, XSPACE], into=s3_small, storage_options=s3, compact=False)
    assert report.ok and not report.ingested and len(report.skipped) == len(SMALL) + 1
    assert xprosql.load(s3_small, storage_options=s3).version == before
    done = subprocess.run([sys.executable, "-m", "xprosql.cli", "sql", s3_small, "SELECT count(*) AS n FROM profiles",
                           "--format", "csv"], env=_environment(s3), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["n", str(len(SMALL) + 1)]


def test_missing_warehouse_and_prefix_are_named(s3: dict[str, str]) -> None:
    bucket = _bucket(s3)
    with pytest.raises(xprosql.WarehouseError, match=f"s3://{bucket}/nothing: not an xprosql warehouse"):
        xprosql.load(f"s3://{bucket}/nothing", storage_options=s3)
    report = xprosql.ingest(f"s3://{bucket}/no-logs/", into=f"s3://{bucket}/run", storage_options=s3)
    assert report.failed == [(f"s3://{bucket}/no-logs/", "no such file or prefix")]
    assert _keys(s3, bucket) == set()  # nothing was created


def _upload_tree(s3: dict[str, str], bucket: str, root: Path, prefix: str) -> None:
    client = _client(s3)
    for path in sorted(root.rglob("*")):
        if path.is_file():
            client.upload_file(str(path), bucket, f"{prefix}/{path.relative_to(root).as_posix()}")


@pytest.fixture(scope="module")
def log_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A JAX-style log tree (plugins/profile/<run>/<host>.xplane.pb with the trace XProf derives beside it), Kineto
    traces in two jobs, metadata files, and a file that is no profile."""
    root = tmp_path_factory.mktemp("tree") / "logs"
    run = root / "jax" / "plugins" / "profile" / "2026_12_03_09_00_00"
    run.mkdir(parents=True)
    shutil.copy(XSPACE, run / "host0.xplane.pb")
    (run / "host0.trace.json.gz").write_bytes(b"not read: XProf's lossy copy of host0.xplane.pb")
    for index, path in enumerate(SMALL[:3]):
        target = root / ("a" if index % 2 else "b")
        target.mkdir(exist_ok=True)
        shutil.copy(path, target / path.name)
    (root / "xprosql.json").write_text('{"tags": {"team": "ml", "job": "unset"}}')
    (root / "a" / "xprosql.json").write_text('{"tags": {"job": "alpha", "gpus": 8}}')
    (root / "notes.txt").write_text("no profile")
    return root


@pytest.mark.slow
def test_an_s3_log_prefix_ingests_as_the_same_local_tree(s3: dict[str, str], log_tree: Path, tmp_path: Path) -> None:
    bucket = _bucket(s3)
    _upload_tree(s3, bucket, log_tree, "logs")
    local = tmp_path / "run"
    assert xprosql.ingest(log_tree, into=local, compact=False).ok
    report = xprosql.ingest(f"s3://{bucket}/logs/", into=f"s3://{bucket}/run", storage_options=s3, compact=False)
    assert report.ok and len(report.ingested) == 4, str(report)
    assert {i.path for i in report.ingested} == {f"s3://{bucket}/logs/{p.relative_to(log_tree).as_posix()}"
                                                for p in log_tree.rglob("*") if p.suffix in (".pb", ".gz")
                                                and not p.name.endswith(".trace.json.gz")}
    remote = xprosql.load(f"s3://{bucket}/run", storage_options=s3)
    query = "SELECT profile_id, run, host, tags, format FROM profiles ORDER BY ALL"
    assert remote.sql(query).rows() == xprosql.load(local).sql(query).rows()
    paths = dict(remote.sql("SELECT profile_id, source_path FROM profiles").rows())
    for path in log_tree.rglob("*.gz"):
        if not path.name.endswith(".trace.json.gz"):
            assert paths[hashlib.sha256(path.read_bytes()).hexdigest()[:16]].startswith(f"s3://{bucket}/logs/")
    # source_path aside, the same rows everywhere.
    _same_tables(xprosql.load(local), remote, skip=frozenset({"profiles"}))


@pytest.mark.slow
def test_workers_keep_their_cyclic_collector_for_object_storage(
    s3: dict[str, str], log_tree: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A batch's workers run without the cyclic garbage collector on local files, with it on object storage's
    (whose asyncio clients leave cycles with every request): files or warehouse."""
    from xprosql.ingest import batch

    pools: list[bool] = []
    real = batch._pool
    monkeypatch.setattr(batch, "_pool", lambda workers, *, collecting: pools.append(collecting) or real(
        workers, collecting=collecting))
    bucket = _bucket(s3)
    _upload_tree(s3, bucket, log_tree, "logs")
    assert xprosql.ingest(log_tree, into=tmp_path / "local", jobs=2, compact=False).ok
    assert xprosql.ingest(f"s3://{bucket}/logs/", into=tmp_path / "from_s3", jobs=2, storage_options=s3,
                          compact=False).ok
    assert xprosql.ingest(log_tree, into=f"s3://{bucket}/run", jobs=2, storage_options=s3, compact=False).ok
    assert pools == [False, True, True]


@pytest.mark.slow
def test_compaction_load_and_time_travel_on_s3(s3: dict[str, str], local_small: Path) -> None:
    uri = f"s3://{_bucket(s3)}/run"
    assert xprosql.ingest([*SMALL, XSPACE], into=uri, storage_options=s3, compact=False).ok
    before = xprosql.load(uri, storage_options=s3)
    report = xprosql.compact(uri, storage_options=s3, retention_hours=0)
    assert report is not None and report.files_written and report.files_replaced > report.files_written
    after = xprosql.load(uri, storage_options=s3)
    assert after.version > before.version and after.engine.snapshot.stored == frozenset(after.profile_ids)
    local = xprosql.load(local_small)
    _same_tables(local, after, skip=frozenset((*PACK_DERIVED_TABLES, *JOB_DERIVED_TABLES)))
    _same_analyses(local, after)
    # Vacuum with no retention deleted the unpacked files: the bucket holds exactly what the head's versions name
    # (and the logs).
    bucket, prefix = uri[len("s3://"):].split("/", 1)
    data = {k for k in _keys(s3, bucket, prefix) if "/_delta_log/" not in k}
    named = {f.path[len("s3://"):].split("/", 1)[1] for files in after.engine.snapshot.files.values() for f in files}
    assert data == named
    # The version before compaction is still in the log; its files are gone: a fresh process says so.
    done = subprocess.run([sys.executable, "-c", "import sys, xprosql; xprosql.load(sys.argv[1], version=int(sys.argv[2]))"
                           ".sql('SELECT sum(dur_ps) FROM events').rows()", uri, str(before.version)],
                          env=_environment(s3), capture_output=True, text=True, timeout=300)
    assert done.returncode != 0 and "no such object" in done.stderr, done.stderr[-2000:]


# -- the commit protocol under races ---------------------------------------------------------------------------


def _placed(warehouse: Warehouse, files: list[Path]) -> list[PlacedProfile]:
    outcomes = _ingest_chunk([(p, {}) for p in files], warehouse, keep_secrets=False, place=True)
    assert [o[0] for o in outcomes] == ["placed"] * len(files), outcomes
    return [o[3][2] for o in outcomes]  # type: ignore[index]


@pytest.mark.slow
def test_a_writer_that_loses_the_race_commits_again_without_duplicates(s3: dict[str, str], local_small: Path) -> None:
    """Writer B reads the head, A commits meanwhile (one profile both hold, one of A's own), then B commits: B's
    profiles commit fails its compare-and-swap, B's next round finds the shared profile present and commits only
    its own; the tables' latest entries (what plain Delta readers see) hold each profile once."""
    uri = f"s3://{_bucket(s3)}/run"
    a, b = Warehouse(uri, storage_options=s3), Warehouse(uri, storage_options=s3)
    assert isinstance(a, RemoteWarehouse) and isinstance(b, RemoteWarehouse)
    shared, only_a, only_b = SMALL[2], SMALL[0], SMALL[3]
    first = _placed(a, [SMALL[1]])
    assert a.commit_placed(first) == [True]
    stale = b._head()
    placed_a, placed_b = _placed(a, [shared, only_a]), _placed(b, [shared, only_b])
    assert a.commit_placed(placed_a) == [True, True]
    heads = iter([stale])
    real_head = b._head
    b._head = lambda: next(heads, None) or real_head()  # type: ignore[method-assign]
    assert b.commit_placed(placed_b) == [False, True]
    b._head = real_head  # type: ignore[method-assign]
    remote = xprosql.load(uri, storage_options=s3)
    expected = {p.profile_id for p in [*first, *placed_a, *placed_b]}
    assert set(remote.profile_ids) == expected and len(expected) == 4
    local = xprosql.load(local_small, profiles=sorted(expected))
    _same_tables(local, remote)
    # Plain Delta readers read each table's latest version: every profile's files once there too.
    for table in TABLES:
        if table in ("profiles", *PACK_DERIVED_TABLES):
            continue
        latest = a._data_files(a._open(table))
        ids = [f.first for f in latest]
        assert len(ids) == len(set(ids)), table
        assert set(ids) == set(f.first for f in remote.engine.snapshot.files.get(table, ())), table
    # The loser's copy of the shared profile is deleted from the bucket.
    bucket, prefix = uri[len("s3://"):].split("/", 1)
    for table, add in placed_b[0].adds.items():
        assert f"{prefix}/{table}/{add.path}" not in _keys(s3, bucket, prefix)


@pytest.mark.slow
def test_two_processes_ingesting_the_same_files_commit_each_profile_once(
        s3: dict[str, str], local_small: Path, tmp_path: Path) -> None:
    uri = f"s3://{_bucket(s3)}/run"
    files = [str(p) for p in [*SMALL, XSPACE]]
    command = [sys.executable, "-m", "xprosql.cli", "ingest", *files, "--into", uri, "--compact", "never"]
    runs = [subprocess.Popen(command, env=_environment(s3), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for _ in range(2)]
    outputs = [r.communicate(timeout=600) for r in runs]
    assert [r.returncode for r in runs] == [0, 0], outputs
    ingested = [sum(line.startswith("ingested ") for line in out.splitlines()) for out, _ in outputs]
    present = [sum(line.startswith("already present ") for line in out.splitlines()) for out, _ in outputs]
    assert sum(ingested) == len(files) and [i + p for i, p in zip(ingested, present, strict=True)] == [len(files)] * 2
    remote = xprosql.load(uri, storage_options=s3)
    _same_tables(xprosql.load(local_small), remote)


# -- ingest on a Dask cluster ------------------------------------------------------------------------------------


distributed = pytest.importorskip("distributed", reason="needs the dask extra: pip install 'xprosql[dask]'")


@pytest.fixture(scope="module")
def cluster_client() -> Iterator[object]:
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        with distributed.Client(cluster) as client:
            yield client


@pytest.fixture(scope="module")
def local_larger(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("larger") / "run"
    assert xprosql.ingest([*LARGER, *SMALL, XSPACE], into=root, compact=False).ok
    return root


@pytest.mark.slow
def test_cluster_ingest_into_s3_races_a_second_ingest(s3: dict[str, str], cluster_client: object,
                                                     local_larger: Path) -> None:
    """Two workers ingest into S3 (this process commits what they placed) while a second ingest of the same files
    runs in two local processes (each committing its own): each profile once, both reports complete, the same
    tables and analyses as a local ingest."""
    uri = f"s3://{_bucket(s3)}/run"
    files = [str(p) for p in [*LARGER[:3], *SMALL, XSPACE]]
    other = subprocess.Popen([sys.executable, "-m", "xprosql.cli", "ingest", *files, "--into", uri, "--jobs", "2",
                              "--compact", "never"], env=_environment(s3), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    report = xprosql.ingest(files, into=uri, storage_options=s3, cluster=cluster_client, compact=False)
    out, err = other.communicate(timeout=600)
    assert other.returncode == 0 and report.ok, (err, str(report))
    theirs = {line.split()[1] for line in out.splitlines() if line.startswith("ingested ")}
    ours = {item.path for item in report.ingested}
    assert len(report.ingested) + len(report.skipped) == len(files)
    assert ours | theirs == set(files) and not ours & theirs
    remote = xprosql.load(uri, storage_options=s3)
    assert len(remote.profile_ids) == len(files)
    local = xprosql.load(local_larger, profiles=remote.profile_ids)
    _same_tables(local, remote)
    _same_analyses(local, remote)
    # The queries on the cluster read the S3 warehouse too (the workers get the storage options with the shares).
    on_cluster = xprosql.load(uri, storage_options=s3, cluster=cluster_client)
    _same_analyses(local, on_cluster)


@pytest.mark.slow
def test_cluster_ingest_into_a_local_warehouse(cluster_client: object, local_small: Path, tmp_path: Path) -> None:
    """A warehouse on a file system the workers share: they move their files into the tables' folders, this
    process commits them under the warehouse's lock; the same as a local ingest, and again a no-op."""
    files = [*SMALL, XSPACE]
    report = xprosql.ingest(files, into=tmp_path / "run", cluster=cluster_client, compact=False)
    assert report.ok and [i.path for i in report.ingested] == [str(p) for p in files], str(report)
    _same_tables(xprosql.load(local_small), xprosql.load(tmp_path / "run"))
    again = xprosql.ingest(files, into=tmp_path / "run", cluster=cluster_client, compact=False)
    assert again.ok and not again.ingested and len(again.skipped) == len(files)
    # Nothing but the committed files in the tables' folders: the skipped copies were never placed.
    named = {f.path for fs in xprosql.load(tmp_path / "run").engine.snapshot.files.values() for f in fs}
    assert {str(p) for p in (tmp_path / "run").glob("*/part-*.parquet")} == named


@pytest.mark.slow
def test_a_worker_killed_mid_ingest_loses_nothing(s3: dict[str, str], local_larger: Path) -> None:
    """SIGKILL to a worker while it decodes: the scheduler runs its task again on the other worker (or the file is
    reported, and the next ingest does it); in the end every profile once, the same rows as a local ingest."""
    uri = f"s3://{_bucket(s3)}/run"
    files = [*LARGER, *SMALL, XSPACE]
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        with distributed.Client(cluster) as client:
            pids = client.run(os.getpid)
            result: dict[str, object] = {}
            thread = threading.Thread(target=lambda: result.update(report=xprosql.ingest(
                files, into=uri, storage_options=s3, cluster=client, compact=False)))
            thread.start()
            victim = None
            deadline = time.monotonic() + 120
            while victim is None and time.monotonic() < deadline and thread.is_alive():
                busy = [w for w, tasks in client.processing().items() if tasks]
                victim = busy[0] if busy else None
                time.sleep(0.2)
            assert victim is not None, "no task ever ran"
            time.sleep(1.0)  # inside the task: decoding, or placing its files
            os.kill(pids[victim], signal.SIGKILL)
            thread.join(600)
            report = result["report"]
            assert isinstance(report, xprosql.IngestReport)
            assert len(report.ingested) + len(report.skipped) + len(report.failed) == len(files), str(report)
            assert all("worker decoding it died" in reason for _, reason in report.failed), str(report)
            again = xprosql.ingest(files, into=uri, storage_options=s3, cluster=client, compact=False)
            assert again.ok and len(again.ingested) == len(report.failed), str(again)
    remote = xprosql.load(uri, storage_options=s3)
    assert len(remote.profile_ids) == len(files)
    _same_tables(xprosql.load(local_larger), remote)


@pytest.mark.slow
def test_cli_ingest_on_a_cluster_with_credentials_from_the_environment(
        s3: dict[str, str], log_tree: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """`xprosql ingest s3://... --into s3://... --cluster ADDRESS`: the workers read the environment's credentials."""
    for key, value in _environment(s3).items():
        if key.startswith("AWS_"):
            monkeypatch.setenv(key, value)
    bucket = _bucket(s3)
    _upload_tree(s3, bucket, log_tree, "logs")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        done = subprocess.run([sys.executable, "-m", "xprosql.cli", "ingest", f"s3://{bucket}/logs/", "--into",
                               f"s3://{bucket}/run", "--cluster", cluster.scheduler_address, "--compact", "always"],
                              env=_environment(s3), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert "4 ingested, 0 already present, 0 failed" in done.stdout.splitlines(), done.stdout
    local = tmp_path / "run"
    assert xprosql.ingest(log_tree, into=local).ok
    remote = xprosql.load(f"s3://{bucket}/run")  # the environment's credentials
    query = "SELECT profile_id, run, host, tags FROM profiles ORDER BY ALL"
    assert remote.sql(query).rows() == xprosql.load(local).sql(query).rows()
    _same_analyses(xprosql.load(local), remote)


# -- the command line's --storage-option ---------------------------------------------------------------------------


def _storage_flags(options: dict[str, str]) -> list[str]:
    return [arg for key, value in options.items() for arg in ("--storage-option", f"{key}={value}")]


def test_a_storage_option_without_key_is_a_one_line_error(capsys: pytest.CaptureFixture[str]) -> None:
    from xprosql.cli import main

    for bad in ("s3cr3t-without-its-key", "=s3cr3t"):
        with pytest.raises(SystemExit) as stopped:
            main(["sql", "s3://bucket/run", "SELECT 1", "--storage-option", "AWS_REGION=us-east-1",
                  "--storage-option", bad])
        err = capsys.readouterr().err
        assert stopped.value.code == 2 and err.count("\n") == 1, err
        assert err.startswith("error: xprosql sql: argument --storage-option: wants KEY=VALUE"), err
        assert "s3cr3t" not in err  # a value without its key may be a secret: not repeated


@pytest.mark.slow
def test_cli_storage_options_alone_reach_the_store(s3: dict[str, str], log_tree: Path, monkeypatch: pytest.MonkeyPatch,
                                                   tmp_path: Path) -> None:
    """No AWS_* variable anywhere (nor ~/.aws): `--storage-option` alone gives the endpoint and keys to ingest (the
    sources on S3, the warehouse on S3, the decoding on a cluster whose workers have none either), sql, tables,
    compact, and the MCP server's tools (storage_options=); without it, one line saying where credentials come
    from. The reference: a local ingest of the same tree."""
    for key in [k for k in os.environ if k.startswith("AWS_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.aws/credentials to fall back on
    env = dict(os.environ)
    bucket = _bucket(s3)
    _upload_tree(s3, bucket, log_tree, "logs")
    uri, flags = f"s3://{bucket}/run", _storage_flags(s3)

    def cli(*args: str, options: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "xprosql.cli", *args, *(flags if options else [])], env=env,
                              capture_output=True, text=True, timeout=600)

    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        with distributed.Client(cluster) as client:
            workers_env = client.run(lambda: sorted(k for k in os.environ if k.startswith("AWS_")))
            assert all(keys == [] for keys in workers_env.values()), workers_env
        done = cli("ingest", f"s3://{bucket}/logs/", "--into", uri, "--cluster", cluster.scheduler_address,
                   "--compact", "never", "--quiet")
    assert done.returncode == 0, done.stderr
    assert "4 ingested, 0 already present, 0 failed" in done.stdout.splitlines(), done.stdout
    local = tmp_path / "run"
    assert xprosql.ingest(log_tree, into=local, compact=False).ok
    query = "SELECT count(*) AS n, sum(dur_ps) AS d, count(DISTINCT profile_id) AS p FROM events"
    want = [",".join(map(str, xprosql.load(local).sql(query).rows()[0]))]
    done = cli("sql", uri, query, "--format", "csv")
    assert done.returncode == 0 and done.stdout.split()[1:] == want, (done.stdout, done.stderr)
    done = cli("tables", uri)
    assert done.returncode == 0 and done.stdout.splitlines()[0].endswith(": 4 profiles"), done.stdout
    assert cli("compact", uri).returncode == 0
    done = cli("sql", uri, query, "--format", "csv")
    assert done.returncode == 0 and done.stdout.split()[1:] == want, (done.stdout, done.stderr)
    # The MCP server's tools read the same rows, and nothing outside the warehouse's prefix.
    from xprosql.mcp_server import WarehouseTools

    tools = WarehouseTools(uri, storage_options=s3)
    try:
        out = tools.call("sql", {"query": query})
        assert not out.error and out.structured is not None, out.text
        assert [tuple(row.values()) for row in out.structured["rows"]] == xprosql.load(local).sql(query).rows()
        other = tools.call("sql", {"query": f"SELECT * FROM read_parquet('s3://{bucket}/logs/x.parquet')"})
        assert other.error
    finally:
        tools.close()
    # Without the options: one line naming the warehouse and where credentials come from; nothing written.
    before = _keys(s3, bucket, "run/")
    for args in (("sql", uri, query), ("ingest", str(SMALL[0]), "--into", uri)):
        done = cli(*args, options=False)
        assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
        assert done.stderr.startswith(f"error: {uri}: cannot reach the object store") and "--storage-option" in done.stderr
    assert _keys(s3, bucket, "run/") == before
