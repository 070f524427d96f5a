"""Ingest locally, into S3, and on a Dask cluster into S3: whole processes, side by side.

Run on a corpus of benchmarks/make_corpus.py (100 profiles keep it to minutes on 2 cores)::

    python benchmarks/make_corpus.py --n 100 --out /tmp/corpus100
    python benchmarks/object_storage.py --corpus /tmp/corpus100

The S3 is moto's server (``python -m moto.server``) on localhost, started here: a single Python process that
keeps every object in memory, so the S3 numbers measure xprosql's requests through a slow store on the same
two cores, not a real bucket. The cluster is a ``distributed.LocalCluster`` of ``--workers`` worker processes
(one thread each) started here before the clock starts, as a cluster is already up when a user points
``--cluster`` at it. Each ingest is ``xprosql ingest CORPUS --into TARGET --compact never --quiet`` in a fresh
process (import, listing, decode, stage, upload, commit); then a fresh process opens each warehouse and runs
``top_ops`` over every profile. Every warehouse must hold the corpus's profiles and the same rows.

Rows:
  local --jobs N            the local warehouse, N decoding processes each committing its chunks (flock)
  s3 --jobs N               the same into s3://, each process committing optimistically (compare-and-swap)
  cluster -> s3             the LocalCluster's workers decode and upload; the ingesting process commits
  cluster -> s3, workers commit   each worker commits its own chunk (optimistic, racing): the alternative

``--rows`` picks rows by key (local, s3, cluster, workers-commit; all by default) and ``--no-compact`` skips the
compactions. The compactions run after every chosen row's ingest, so a run cut short still has its ingest rows.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path

_OPEN = """
import json, sys, time
import xprosql
start = time.perf_counter()
run = xprosql.load(sys.argv[1])
rows = run.sql("SELECT count(*) FROM profiles").rows()[0][0], run.sql("SELECT count(*) FROM events").rows()[0][0]
opened = time.perf_counter() - start
top = run.analysis("top_ops", top=10).arrow().num_rows
print(json.dumps({"profiles": rows[0], "events": rows[1], "open_s": opened, "top_ops_s": time.perf_counter() - start - opened}))
"""

# The alternative commit placement: each worker commits its own chunks.
_WORKERS_COMMIT = ("import importlib, sys; importlib.import_module('xprosql.ingest.batch')._CLUSTER_COMMITS = 'workers'; "
                   "from xprosql.cli import main; sys.exit(main(sys.argv[1:]))")


def _moto() -> tuple[subprocess.Popen[bytes], dict[str, str]]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    endpoint = f"http://127.0.0.1:{port}"
    for _ in range(400):
        try:
            urllib.request.urlopen(endpoint, timeout=1).close()
            break
        except OSError:
            time.sleep(0.05)
    env = {"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench",
           "AWS_REGION": "us-east-1", "AWS_DEFAULT_REGION": "us-east-1", "AWS_ALLOW_HTTP": "true"}
    return server, env


def _bucket(env: dict[str, str]) -> str:
    import boto3

    name = f"bench-{uuid.uuid4().hex[:10]}"
    boto3.client("s3", endpoint_url=env["AWS_ENDPOINT_URL"], aws_access_key_id="bench", aws_secret_access_key="bench",
                 region_name="us-east-1").create_bucket(Bucket=name)
    return name


def _timed(command: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    took = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}")
    return took


def _opened(target: str, env: dict[str, str]) -> dict[str, float]:
    done = subprocess.run([sys.executable, "-c", _OPEN, target], env=env, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.splitlines()[-1])


_ROWS = ("local", "s3", "cluster", "workers-commit")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", type=Path, required=True, help="a corpus of benchmarks/make_corpus.py")
    parser.add_argument("--jobs", type=int, default=2, help="decoding processes of the local and s3 rows")
    parser.add_argument("--workers", type=int, default=2, help="worker processes of the LocalCluster")
    parser.add_argument("--rows", default=",".join(_ROWS),
                        help=f"comma-separated rows to run, in this order, from {', '.join(_ROWS)} (default: all)")
    parser.add_argument("--no-compact", action="store_true", help="skip the compactions and the compacted reads")
    args = parser.parse_args()
    chosen = [key.strip() for key in args.rows.split(",") if key.strip()]
    if unknown := sorted(set(chosen) - set(_ROWS)):
        parser.error(f"--rows: unknown {', '.join(unknown)}; choose from {', '.join(_ROWS)}")
    from distributed import LocalCluster

    files = [p for p in args.corpus.rglob("*") if p.name.endswith((".xplane.pb", ".json.gz"))]
    size = sum(p.stat().st_size for p in files)
    print(f"corpus {args.corpus}: {len(files)} profiles, {size / 1e6:.0f} MB; {os.cpu_count()} cores", flush=True)
    server, s3 = _moto()
    os.environ.update(s3)  # the LocalCluster's workers read the credentials from their environment, as on a real one
    env = dict(os.environ)
    scratch = Path(tempfile.mkdtemp(prefix="xprosql-bench-"))
    ingest = [sys.executable, "-m", "xprosql.cli", "ingest", str(args.corpus), "--compact", "never", "--quiet"]
    results = []
    try:
        with LocalCluster(n_workers=args.workers, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
            every = {
                "local": (f"local --jobs {args.jobs}", lambda: str(scratch / "local"), [*ingest, "--jobs", str(args.jobs)]),
                "s3": (f"s3 --jobs {args.jobs}", lambda: f"s3://{_bucket(s3)}/run", [*ingest, "--jobs", str(args.jobs)]),
                "cluster": (f"cluster ({args.workers} workers) -> s3", lambda: f"s3://{_bucket(s3)}/run",
                            [*ingest, "--cluster", cluster.scheduler_address]),
                "workers-commit": (f"cluster ({args.workers} workers) -> s3, workers commit",
                                   lambda: f"s3://{_bucket(s3)}/run",
                                   [sys.executable, "-c", _WORKERS_COMMIT, *ingest[3:], "--cluster",
                                    cluster.scheduler_address]),
            }
            compactable = []
            for key in chosen:
                label, make_target, command = every[key]
                target = make_target()
                took = _timed([*command, "--into", target], env)
                opened = _opened(target, env)
                results.append((label, took, opened))
                print(f"{label}: ingest {took:.1f} s ({len(files) / took:.2f} profiles/s, {size / 1e6 / took:.1f} MB/s); "
                      f"a fresh process opens it in {opened['open_s']:.2f} s, top_ops over every profile "
                      f"{opened['top_ops_s']:.2f} s; {opened['profiles']} profiles, {opened['events']} events "
                      f"[{time.strftime('%H:%M:%S')}, load {os.getloadavg()[0]:.1f}]", flush=True)
                if key != "workers-commit":
                    compactable.append((label, target))
            for label, target in [] if args.no_compact else compactable:  # then the same reads of the compacted tables
                packed = _timed([sys.executable, "-m", "xprosql.cli", "compact", target], env)
                again = _opened(target, env)
                print(f"{label}: compacted in {packed:.1f} s (whole process); then opened in {again['open_s']:.2f} s, "
                      f"top_ops {again['top_ops_s']:.2f} s [{time.strftime('%H:%M:%S')}, load {os.getloadavg()[0]:.1f}]",
                      flush=True)
    finally:
        server.terminate()
    counts = {(r[2]["profiles"], r[2]["events"]) for r in results}
    if len(counts) != 1 or next(iter(counts))[0] != len(files):
        raise SystemExit(f"the warehouses differ: {counts}")
    print("every warehouse holds the same profiles and events")


if __name__ == "__main__":
    main()
