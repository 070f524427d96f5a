"""Fleet benchmark: batch ingest, compaction and fleet-wide queries on a corpus, with
XProf's per-profile hlo_stats loop and HTA as the reference points.

Run (after python benchmarks/make_corpus.py --n 1000 --out /tmp/corpus):

    python benchmarks/fleet.py --corpus /tmp/corpus --warehouse /tmp/wh --ingest --jobs 2
    python benchmarks/fleet.py --corpus /tmp/corpus --warehouse /tmp/wh          # queries only

Prints one line per measurement. XProf runs in a subprocess (its wheel's native
Arrow breaks pyarrow.compute in-process) on copies of the files (its tools write
a cache beside their input). Both reference loops run on ``--sample`` files and
are extrapolated to every file of their format in the corpus, which is said in
the output.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import xprosql

_XPROF = """
import json, sys, time
from xprof.convert.raw_to_tool_data import xspace_to_tool_data
times = []
for path in sys.argv[1:]:
    start = time.perf_counter()
    data, _ = xspace_to_tool_data([path], "hlo_stats", {"use_saved_result": False})
    assert data
    times.append(time.perf_counter() - start)
print(json.dumps(times))
"""

_HTA = """
import json, sys, time, logging
logging.disable(logging.WARNING)
from hta.trace_analysis import TraceAnalysis
times = []
for directory in sys.argv[1:]:
    start = time.perf_counter()
    analysis = TraceAnalysis(trace_dir=directory)
    analysis.get_temporal_breakdown(visualize=False)
    analysis.get_gpu_kernel_breakdown(visualize=False)
    times.append(time.perf_counter() - start)
print(json.dumps(times))
"""


def _timed(label: str, fn, *, repeat: int = 2) -> tuple[float, object]:
    """Best of ``repeat`` runs (the first one cold), printed."""
    times, result = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    print(f"{label}: {min(times):.2f} s (first run {times[0]:.2f} s)", flush=True)
    return min(times), result


def ingest(corpus: Path, warehouse: Path, jobs: int) -> None:
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "xprosql.cli", "ingest", str(corpus), "--into", str(warehouse), "--jobs", str(jobs),
         "--quiet", "--compact", "never"],
        check=True,
    )
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1e6
    run = xprosql.load(warehouse)
    profiles, events, size = (int(v) for v in run.sql("SELECT count(*), sum(n_events), sum(file_bytes) FROM profiles").rows()[0])
    run.close()
    print(
        f"ingest --jobs {jobs}: {profiles} profiles, {events} events, {size / 1e9:.2f} GB in {seconds:.0f} s: "
        f"{profiles / seconds:.2f} profiles/s, {events / seconds / 1e3:.0f}k events/s, {size / seconds / 1e6:.1f} MB/s; "
        f"peak RSS of one process {peak:.2f} GB",
        flush=True,
    )
    start = time.perf_counter()
    report = xprosql.compact(warehouse)
    print(f"compact: {time.perf_counter() - start:.1f} s: {report}", flush=True)


def queries(warehouse: Path) -> dict[str, float]:
    run = xprosql.load(warehouse)
    profiles, events = (int(v) for v in run.sql("SELECT count(*), sum(n_events) FROM profiles").rows()[0])
    files = sum(1 for _ in warehouse.rglob("*.parquet"))  # on disk: what a reader of any format lists
    print(f"warehouse: {profiles} profiles, {events} events, {files} Parquet files on disk", flush=True)
    timings = {}
    timings["load"], _ = _timed("load (snapshot, views)", lambda: xprosql.load(warehouse).close())
    timings["roofline"], frame = _timed("roofline (sql/ops/roofline.sql), every profile", lambda: run.roofline().pl())
    print(f"  roofline rows: {frame.height}")
    timings["memory_bound"], _ = _timed("memory_bound (sql/ops/memory_bound.sql), every profile", lambda: run.memory_bound().pl())
    timings["bottlenecks"], _ = _timed("bottlenecks (sql/steps/bottlenecks.sql), every profile", lambda: run.bottlenecks().pl(), repeat=1)
    timings["steps"], _ = _timed("steps (sql/steps/steps.sql), every profile", lambda: run.analysis("steps").pl())
    cohorts = {"baseline": "tags['run'] IN ('0', '1', '2')", "candidate": "tags['run'] IN ('3', '4')"}
    timings["compare"], frame = _timed("compare by op, two cohorts of the whole fleet", lambda: run.compare(**cohorts).pl())
    print(f"  compare rows: {frame.height}; top: {frame.row(0, named=True)['key']!r} ratio {frame.row(0, named=True)['time_ratio']:.3f}")
    timings["compare_bottleneck"], _ = _timed("compare by bottleneck class", lambda: run.compare(**cohorts, by="bottleneck").pl())
    timings["regressions"], frame = _timed("regressions per job tag", lambda: run.regressions(tag="job").pl(), repeat=1)
    print(f"  changes found: {frame.height} in series {sorted(set(frame['series']))}")
    timings["worst_steps"], _ = _timed("worst 10 steps", lambda: run.worst(by="step", top=10).pl())
    print(f"peak RSS of the query process: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6:.2f} GB", flush=True)
    run.close()
    return timings


def references(corpus: Path, sample: int, roofline_s: float) -> None:
    xspace = sorted(corpus.rglob("*.xplane.pb"))
    kineto = sorted(corpus.rglob("*.json.gz"))
    picked = xspace[:: max(len(xspace) // sample, 1)][:sample]
    with tempfile.TemporaryDirectory() as tmp:
        copies = []
        for i, path in enumerate(picked):
            copy = Path(tmp) / f"{i}" / path.name
            copy.parent.mkdir()
            shutil.copy(path, copy)
            copies.append(str(copy))
        out = subprocess.run([sys.executable, "-c", _XPROF, *copies], capture_output=True, text=True, check=True)
        times = json.loads(out.stdout.strip().splitlines()[-1])
    per_file = sum(times) / len(times)
    loop = per_file * len(xspace)
    print(
        f"xprof hlo_stats loop: {per_file:.2f} s per XSpace file (measured on {len(times)} files), "
        f"{loop:.0f} s for the corpus's {len(xspace)} XSpace files (extrapolated); "
        f"xprosql roofline over all {len(xspace) + len(kineto)} profiles: {roofline_s:.2f} s = {loop / roofline_s:.0f}x faster",
        flush=True,
    )
    picked = kineto[:: max(len(kineto) // sample, 1)][:sample]
    with tempfile.TemporaryDirectory() as tmp:
        directories = []
        for i, path in enumerate(picked):
            directory = Path(tmp) / f"{i}"
            directory.mkdir()
            shutil.copy(path, directory / path.name)
            directories.append(str(directory))
        out = subprocess.run([sys.executable, "-c", _HTA, *directories], capture_output=True, text=True, check=True)
        times = json.loads(out.stdout.strip().splitlines()[-1])
    per_file = sum(times) / len(times)
    print(
        f"HTA load + temporal and kernel breakdown: {per_file:.2f} s per Kineto file (measured on {len(times)} files), "
        f"{per_file * len(kineto):.0f} s for the corpus's {len(kineto)} Kineto files (extrapolated)",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, required=True)
    parser.add_argument("--warehouse", type=Path, required=True)
    parser.add_argument("--ingest", action="store_true", help="ingest the corpus first (into an empty --warehouse), then compact")
    parser.add_argument("--compact", action="store_true", help="compact the warehouse first (without --ingest)")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--sample", type=int, default=10, help="files per reference tool, extrapolated")
    parser.add_argument("--no-references", action="store_true")
    args = parser.parse_args()
    if args.ingest:
        ingest(args.corpus, args.warehouse, args.jobs)
    elif args.compact:
        start = time.perf_counter()
        report = xprosql.compact(args.warehouse)
        print(f"compact: {time.perf_counter() - start:.1f} s: {report}", flush=True)
    timings = queries(args.warehouse)
    if not args.no_references:
        references(args.corpus, args.sample, timings["roofline"])


if __name__ == "__main__":
    main()
