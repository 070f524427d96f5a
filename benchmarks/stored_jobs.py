"""The job tables compaction stores (stored_job_critical_path, stored_job_what_if): what storing them costs, what
reading them saves, and that the stored rows are the rows computed at query time, on a compacted fleet warehouse.

    python benchmarks/stored_jobs.py --warehouse /tmp/wh1000m

Each line is a fresh process (what a user types: import, open, query, fetch every row) with its peak RSS:
``run.what_if()`` and ``run.job_critical_path()`` reading the stored rows, the same two computing every job (the
stored jobs hidden from the snapshot), and compaction's share (``derive_job_tables`` for every job). The rows of
the computing processes are compared with the stored ones.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

_PROCESS = """
import dataclasses, json, resource, sys, time
import pyarrow.parquet as pq
import xprosql
from xprosql.queries.job_critical_path import derive_job_tables
run = xprosql.load(sys.argv[1])
what, stored = sys.argv[2], sys.argv[3] == "stored"
if not stored:  # every job computed, as before a compaction stored it
    run.engine.snapshot = dataclasses.replace(run.engine.snapshot, stored_jobs=frozenset())
start = time.perf_counter()
if what == "derive":
    tables = derive_job_tables(run.engine.snapshot).tables
    rows = {name: table.num_rows for name, table in tables.items()}
else:
    table = getattr(run, what)().arrow()
    rows = table.num_rows
    if not stored:
        pq.write_table(table, sys.argv[4])
query_s = time.perf_counter() - start
print(json.dumps({"rows": rows, "query_s": query_s, "rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6}))
"""


def _process(warehouse: Path, what: str, mode: str, out: Path) -> dict:
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", _PROCESS, str(warehouse), what, mode, str(out)],
                          capture_output=True, text=True, check=True)
    return {"process_s": time.perf_counter() - start, **json.loads(done.stdout.splitlines()[-1])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--warehouse", type=Path, required=True, help="a compacted warehouse (xprosql compact)")
    parser.add_argument("--scratch", type=Path, default=Path("/tmp"))
    args = parser.parse_args()
    import pyarrow.parquet as pq

    import xprosql

    run = xprosql.load(args.warehouse)
    print(f"{args.warehouse}: {len(run.profile_ids)} profiles, {len(run.engine.snapshot.stored_jobs)} jobs stored", flush=True)
    for what in ("what_if", "job_critical_path"):
        out = args.scratch / f"stored_jobs_{what}.parquet"
        read = _process(args.warehouse, what, "stored", out)
        computed = _process(args.warehouse, what, "computed", out)
        same = getattr(run, what)().arrow().equals(pq.read_table(out).cast(getattr(run, what)().arrow().schema))
        print(f"run.{what}(): stored {read['process_s']:.2f} s ({read['query_s']:.2f} s the query, {read['rss_gb']:.2f} GB); "
              f"computed {computed['process_s']:.1f} s ({computed['query_s']:.1f} s, {computed['rss_gb']:.2f} GB); "
              f"{read['rows']} rows, the same: {same}", flush=True)
    derive = _process(args.warehouse, "derive", "computed", args.scratch / "unused")
    print(f"compaction's share, derive_job_tables over every job: {derive['process_s']:.1f} s "
          f"({derive['query_s']:.1f} s, {derive['rss_gb']:.2f} GB peak), rows {derive['rows']}", flush=True)


if __name__ == "__main__":
    main()
