"""Fleet analyses (memory, many-rank jobs) as whole processes (what a user types), with their peak RSS.

Run on a warehouse of the 1,000-profile corpus (benchmarks/make_corpus.py, then
``xprosql ingest CORPUS --into WH --jobs 2`` and ``xprosql compact WH``)::

    python benchmarks/fleet_processes.py --warehouse /tmp/wh --area memory
    python benchmarks/fleet_processes.py --warehouse /tmp/wh --area jobs

Each query runs in a fresh ``python -c`` process that opens the warehouse, runs it and fetches every
row as Arrow; the line gives that process's wall time (import, open, query, fetch), the query alone
inside it, the rows, and the process's peak RSS. Best of ``--repeat`` processes.

``--before TREE`` (an older checkout, e.g. ``git worktree add --detach /tmp/before <commit>``) runs each query
``--repeat`` times in each tree, alternating, and prints the medians and bests of both: differences of a tenth of a
second, which best-of-N on one side then the other cannot tell on a noisy machine.
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[1]

_PROCESS = """
import json, resource, sys, time
import xprosql
run = xprosql.load(sys.argv[1])
start = time.perf_counter()
rows = getattr(run, sys.argv[2])(**json.loads(sys.argv[3])).arrow().num_rows
query_s = time.perf_counter() - start
print(json.dumps({"rows": rows, "query_s": query_s, "rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6}))
"""

# area -> label -> (Run method, its options)
QUERIES: dict[str, dict[str, tuple[str, dict]]] = {"memory": {
    "memory timeline, every profile, 100 spans each": ("memory_timeline", {"buckets": 100}),
    "memory timeline, every event of every profile": ("memory_timeline", {}),
    "memory peaks, every profile and allocator": ("memory_peaks", {}),
    "memory peaks per step, every profile": ("memory_peaks", {"by_step": True}),
    "fleet memory per job and step, within 10% of capacity": ("fleet_memory", {"by_step": True, "within": 0.1}),
    "hlo_memory, every module": ("hlo_memory", {}),
    "memory leaks, every profile": ("memory_leaks", {}),
}, "jobs": {
    "jobs of the warehouse": ("jobs", {}),
    "clock offsets of every profile": ("clock_offsets", {}),
    "matched collectives of every job": ("collectives", {}),
    "stragglers per job and step": ("stragglers", {}),
    "what if the worst rank ran like the median": ("what_if", {}),
    "critical path of every job": ("job_critical_path", {}),
}}


def _once(warehouse: Path, method: str, options: dict, tree: Path | None) -> dict[str, float]:
    """One fresh process of the query (``tree``: the xprosql checkout first on its path)."""
    env = dict(os.environ, PYTHONPATH=str(tree)) if tree is not None else None
    start = time.perf_counter()
    # From elsewhere: `python -c` puts the working directory first on the path, before PYTHONPATH.
    done = subprocess.run([sys.executable, "-c", _PROCESS, str(warehouse), method, json.dumps(options)],
                          capture_output=True, text=True, check=True, env=env, cwd=tempfile.gettempdir())
    return {"process_s": time.perf_counter() - start, **json.loads(done.stdout.splitlines()[-1])}


def measure(warehouse: Path, method: str, options: dict, repeat: int) -> dict[str, float]:
    return min((_once(warehouse, method, options, None) for _ in range(repeat)), key=lambda r: r["process_s"])


def compare(warehouse: Path, area: str, before: Path, repeat: int) -> None:
    """Each query of ``area`` in ``before`` and in this checkout, alternating: medians and bests of whole processes."""
    trees = {"before": before.resolve(), "after": REPOSITORY}
    for tree in trees.values():  # as `pip install` leaves them: every module compiled (startup.py says why)
        compileall.compile_dir(str(tree / "xprosql"), quiet=1)
    print("| query | before: median, best | after: median, best |\n|---|---|---|", flush=True)
    for label, (method, options) in QUERIES[area].items():
        seconds: dict[str, list[float]] = {name: [] for name in trees}
        for round_ in range(repeat):
            for name, tree in (trees.items() if round_ % 2 == 0 else reversed(trees.items())):
                seconds[name].append(_once(warehouse, method, options, tree)["process_s"])
        cells = [f"{statistics.median(seconds[name]):.3f} s, {min(seconds[name]):.3f} s" for name in trees]
        print(f"| {label} (`run.{method}()`) | {cells[0]} | {cells[1]} |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--warehouse", type=Path, required=True)
    parser.add_argument("--area", choices=sorted(QUERIES), default="memory")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--before", type=Path, help="an older checkout to compare with, query by query")
    args = parser.parse_args()
    if args.before is not None:
        compare(args.warehouse, args.area, args.before, args.repeat)
        return
    info = measure(args.warehouse, "sql", {"query": "SELECT count(*) AS n FROM profiles"}, 1)
    print(f"warehouse {args.warehouse}: opened and counted in {info['process_s']:.2f} s (whole process)", flush=True)
    for label, (method, options) in QUERIES[args.area].items():
        r = measure(args.warehouse, method, options, args.repeat)
        print(f"{label} (run.{method}(**{options})): {r['process_s']:.2f} s whole process, {r['query_s']:.2f} s the query, "
              f"{r['rows']} rows, peak RSS {r['rss_gb']:.2f} GB", flush=True)


if __name__ == "__main__":
    main()
