"""Where a compaction's time goes: packing, the per-profile stored tables and the job tables.

Run: python benchmarks/compaction_phases.py WAREHOUSE [--repeat N]

WAREHOUSE is an uncompacted warehouse (``xprosql ingest CORPUS --into WAREHOUSE --compact never``); each run
compacts a fresh copy of it, in this process, timing compaction's two callbacks (``derive_stored_tables`` and
``derive_job_tables``); packing and the commit are the rest. To compare two versions, run it with each on
PYTHONPATH, alternating.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from xprosql.engine import derive_stored_tables
from xprosql.queries.job_critical_path import derive_job_tables
from xprosql.warehouse import Warehouse


def _timed(fn: Callable[..., Any], spent: dict[str, float], key: str) -> Callable[..., Any]:
    def wrapper(*args: Any) -> Any:
        start = time.perf_counter()
        try:
            return fn(*args)
        finally:
            spent[key] = spent.get(key, 0.0) + time.perf_counter() - start
    return wrapper


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("warehouse", type=Path)
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    for _ in range(args.repeat):
        with tempfile.TemporaryDirectory() as scratch:
            copy = Path(scratch) / "warehouse"
            shutil.copytree(args.warehouse, copy)
            spent: dict[str, float] = {}
            start = time.perf_counter()
            report = Warehouse(copy).compact(derive=_timed(derive_stored_tables, spent, "stored"),
                                             derive_jobs=_timed(derive_job_tables, spent, "jobs"))
            total = time.perf_counter() - start
            rest = total - sum(spent.values())
            print(f"compaction {total:.1f} s: stored tables {spent.get('stored', 0):.1f} s, job tables "
                  f"{spent.get('jobs', 0):.1f} s, packing and commit {rest:.1f} s ({report})", flush=True)


if __name__ == "__main__":
    main()
