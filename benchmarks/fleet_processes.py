"""Fleet analyses (memory, many-rank jobs) as whole processes (what a user types), with their peak RSS.

Run on a warehouse of the 1,000-profile corpus (benchmarks/make_corpus.py, then
``xprosql ingest CORPUS --into WH --jobs 2`` and ``xprosql compact WH``)::

    python benchmarks/fleet_processes.py --warehouse /tmp/wh --area memory
    python benchmarks/fleet_processes.py --warehouse /tmp/wh --area jobs

Each query runs in a fresh ``python -c`` process that opens the warehouse, runs it and fetches every
row as Arrow; the line gives that process's wall time (import, open, query, fetch), the query alone
inside it, the rows, and the process's peak RSS. Best of ``--repeat`` processes.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

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
}}


def measure(warehouse: Path, method: str, options: dict, repeat: int) -> dict[str, float]:
    best: dict[str, float] | None = None
    for _ in range(repeat):
        start = time.perf_counter()
        done = subprocess.run([sys.executable, "-c", _PROCESS, str(warehouse), method, json.dumps(options)],
                              capture_output=True, text=True, check=True)
        result = {"process_s": time.perf_counter() - start, **json.loads(done.stdout.splitlines()[-1])}
        if best is None or result["process_s"] < best["process_s"]:
            best = result
    assert best is not None
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--warehouse", type=Path, required=True)
    parser.add_argument("--area", choices=sorted(QUERIES), default="memory")
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    info = measure(args.warehouse, "sql", {"query": "SELECT count(*) AS n FROM profiles"}, 1)
    print(f"warehouse {args.warehouse}: opened and counted in {info['process_s']:.2f} s (whole process)", flush=True)
    for label, (method, options) in QUERIES[args.area].items():
        r = measure(args.warehouse, method, options, args.repeat)
        print(f"{label} (run.{method}(**{options})): {r['process_s']:.2f} s whole process, {r['query_s']:.2f} s the query, "
              f"{r['rows']} rows, peak RSS {r['rss_gb']:.2f} GB", flush=True)


if __name__ == "__main__":
    main()
