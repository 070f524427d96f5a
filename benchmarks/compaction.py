"""What compaction buys: the same queries on per-profile partitions and on packs.

Run: python benchmarks/compaction.py --corpus /tmp/corpus --n 200 [--dask 2]

Ingests the first N profiles of the corpus into a temporary warehouse without
compaction, times a few queries, compacts, times them again; with --dask W, also
times roofline on a LocalCluster of W worker processes against the packs.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import xprosql

QUERIES = {
    "count events per profile": "SELECT profile_id, count(*) FROM events GROUP BY 1",
    "kernel time by name": "SELECT name, sum(dur_ps) FROM kernels GROUP BY 1",
    "events in a time window": "SELECT count(*) FROM events WHERE start_ps BETWEEN 1e12 AND 2e12",
}


def best(fn, repeat: int = 3) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def measure(root: Path, label: str) -> None:
    with xprosql.load(root) as run:
        files = sum(len(run._files[t]) for t in run.tables)
        print(f"{label}: {files} Parquet files")
        for name, sql in QUERIES.items():
            print(f"  {name}: {best(lambda q=sql: run.sql(q)):.3f} s")
        print(f"  roofline: {best(lambda: run.roofline().pl(), repeat=1):.2f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, required=True)
    parser.add_argument("--n", type=int, default=200)
    parser.add_argument("--dask", type=int, default=0, metavar="WORKERS")
    args = parser.parse_args()
    files = sorted(p for p in args.corpus.rglob("*") if p.name.endswith((".xplane.pb", ".json.gz")))[: args.n]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "run"
        report = xprosql.ingest(files, into=root, jobs=2, compact=False)
        assert report.ok, str(report)
        measure(root, f"{args.n} profiles, per-profile partitions")
        start = time.perf_counter()
        report = xprosql.compact(root)
        print(f"compact: {time.perf_counter() - start:.1f} s: {report}")
        measure(root, f"{args.n} profiles, packed")
        if args.dask:
            from distributed import Client, LocalCluster

            with LocalCluster(n_workers=args.dask, threads_per_worker=1, dashboard_address=None) as cluster, Client(cluster) as client:
                run = xprosql.load(root, cluster=client)
                print(f"  roofline on a {args.dask}-worker LocalCluster: {best(lambda: run.roofline().pl(), repeat=2):.2f} s")


if __name__ == "__main__":
    main()
