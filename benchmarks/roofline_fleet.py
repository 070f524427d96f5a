"""Roofline over a fleet: one query over a warehouse of 200 profiles.

Run: python benchmarks/roofline_fleet.py [--profiles 200] [--warehouse DIR] [--repeat 5]

Builds (once; reused when --warehouse already holds it) a warehouse of copies of
the real XSpace samples in tests/data/xspace, alternating TPU v6e and V100:
each copy is the sample re-serialized with every line's timestamp shifted by
its index (ns) and another hostname, so its bytes, and so its profile id,
differ while its content stays real. Then times ``run.roofline()`` (DuckDB,
``sql/ops/roofline.sql``) and :func:`roofline_polars` over all profiles in one
call, after one warm-up run: the first number is the load (listing files,
creating views) plus the query, the rest the query alone; best and median of
``--repeat`` runs are printed.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

import xprosql
from xprosql.protos import xplane_pb2
from xprosql.queries.roofline import roofline_polars

SAMPLES = Path(__file__).resolve().parents[1] / "tests" / "data" / "xspace"
SOURCES = ("tpu_v6e_inference.xplane.pb", "gpu_v100_tf_bert.xplane.pb")


def make_copies(out: Path, count: int) -> list[Path]:
    """``count`` distinct XSpace files made from the samples (shifted timestamps, new hostname)."""
    out.mkdir(parents=True, exist_ok=True)
    spaces = []
    for name in SOURCES:
        space = xplane_pb2.XSpace()
        space.ParseFromString((SAMPLES / name).read_bytes())
        spaces.append((name, space))
    paths = []
    for i in range(count):
        name, original = spaces[i % len(spaces)]
        space = xplane_pb2.XSpace()
        space.CopyFrom(original)
        for plane in space.planes:
            for line in plane.lines:
                line.timestamp_ns += i
        del space.hostnames[:]
        space.hostnames.append(f"fleet-host-{i:04d}")
        path = out / f"fleet-{i:04d}-{name}"
        path.write_bytes(space.SerializeToString())
        paths.append(path)
    return paths


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def cpu_seconds(fn) -> float:
    """CPU time (user + system, all threads) the call took: what a busy machine cannot inflate."""
    before = resource.getrusage(resource.RUSAGE_SELF)
    fn()
    after = resource.getrusage(resource.RUSAGE_SELF)
    return after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profiles", type=int, default=200)
    parser.add_argument("--warehouse", type=Path, help="reuse or build the fleet warehouse here")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    tmp = tempfile.TemporaryDirectory(prefix="xprosql-fleet-")
    warehouse = args.warehouse or Path(tmp.name) / "run"
    existing = len(xprosql.load(warehouse).profile_ids) if (warehouse / "profiles").exists() else 0
    if existing < args.profiles:
        files = make_copies(Path(tmp.name) / "files", args.profiles)
        start = time.perf_counter()
        report = xprosql.ingest(files, into=warehouse)
        print(f"built {warehouse}: {len(report.ingested)} ingested, {len(report.failed)} failed "
              f"in {time.perf_counter() - start:.0f} s", file=sys.stderr)
    run = xprosql.load(warehouse)
    n_events = run.sql("SELECT count(*) FROM events").rows()[0][0]
    print(f"{len(run.profile_ids)} profiles, {n_events:,} events")

    first = timed(lambda: xprosql.load(warehouse).roofline().pl())
    frame = run.roofline().pl()
    sql = [timed(lambda: run.roofline().pl()) for _ in range(args.repeat)]
    sql_cpu = min(cpu_seconds(lambda: run.roofline().pl()) for _ in range(args.repeat))
    polars = [timed(lambda: roofline_polars(run.table).collect()) for _ in range(args.repeat)]
    profiles = frame.filter(frame["row_kind"] == "profile").height
    print(f"one roofline query -> {frame.height} rows, {profiles} profile rows; "
          f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}")
    print(f"DuckDB SQL: load + query {first:.2f} s; query best {min(sql):.2f} s, median {statistics.median(sql):.2f} s; "
          f"CPU time {sql_cpu:.2f} s")
    print(f"Polars:     best {min(polars):.2f} s, median {statistics.median(polars):.2f} s")
    tmp.cleanup()


if __name__ == "__main__":
    main()
