"""Where a batch ingest's time per file goes: decode, derive (and the connection it sets up), write, commit.

Run (the files of one format from the corpus of make_corpus.py; ``PYTHONPATH`` picks a tree to compare)::

    python benchmarks/ingest_phases.py "/tmp/corpus1000/job05/run00*/tpu*.xplane.pb" --n 20
    PYTHONPATH=/tmp/xprosql-before python benchmarks/ingest_phases.py "..." --n 20

One process ingests one file first (imports, numba's cached code, first calls: what a batch worker pays
once), then ``--n`` files in one call, under cProfile. Prints the wall time per file and each phase's
cumulative time per file, and the CPU time per file of the thread that writes the staged Parquet files
(cProfile sees only the main thread) and of redaction. Set ``XPROSQL_COMPILED=always`` to leave out the
compiled decoders' one-time load from the per-file numbers; a tree in a fresh worktree has an empty numba
cache, so warm it first (one ingest with ``XPROSQL_COMPILED=always`` of a file of each format).
"""

from __future__ import annotations

import argparse
import cProfile
import glob
import pstats
import tempfile
import time
from typing import Any

import xprosql
from xprosql.warehouse import StagedProfile

# Functions of xprosql by name, or file:name where a name is not unique (across versions), and what they are.
PHASES = {
    "derive_tables": "derive (op_stats and the other derived tables)",
    "derived.py:derive": "derive (op_stats and the other derived tables)",
    "derive_together": "derive (op_stats and the other derived tables)",
    "connect_views": "  of which: a DuckDB connection with its views",
    "register_functions": "  of which: the SQL functions registered",
    "decode_xspace": "decode XSpace",
    "decode_kineto": "decode Kineto",
    "secrets.py:batch": "redaction (of each decoded batch)",
    "warehouse.py:finish": "waiting for the staged files to close (the writer thread's rest)",
    "warehouse.py:commit": "commit",
}


def _writer_cpu(spent: dict[str, float]) -> None:
    """Count the CPU time of the staged files' writer thread in ``spent``."""
    for name in ("_write_rows", "_close_file"):
        method = getattr(StagedProfile, name, None)
        if method is None:  # a version without them
            continue

        def timed(self: Any, *args: Any, _method: Any = method) -> Any:
            start = time.thread_time()
            try:
                return _method(self, *args)
            finally:
                spent["writer"] = spent.get("writer", 0.0) + time.thread_time() - start

        setattr(StagedProfile, name, timed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("pattern", help="a glob of profile files")
    parser.add_argument("--n", type=int, default=20, help="files timed (after one to warm up)")
    args = parser.parse_args()
    files = sorted(glob.glob(args.pattern))[: args.n + 1]
    if len(files) < 2:
        raise SystemExit(f"{args.pattern}: fewer than 2 files")
    writer: dict[str, float] = {}
    _writer_cpu(writer)
    with tempfile.TemporaryDirectory() as scratch:
        assert xprosql.ingest(files[0], into=f"{scratch}/warm", compact=False).ok
        writer.clear()
        profile = cProfile.Profile()
        start = time.perf_counter()
        profile.enable()
        report = xprosql.ingest(files[1:], into=f"{scratch}/run", compact=False)
        profile.disable()
        wall = time.perf_counter() - start
    n = len(files) - 1
    assert report.ok and len(report.ingested) == n, report.failed
    spent: dict[str, float] = {}
    for (path, _line, name), (*_, cumulative, _callers) in pstats.Stats(profile).stats.items():  # type: ignore[attr-defined]
        phase = PHASES.get(f"{path.rsplit('/', 1)[-1]}:{name}", PHASES.get(name))
        if phase is not None and "xprosql" in path:
            spent[phase] = spent.get(phase, 0.0) + cumulative
    print(f"{xprosql.__file__}: {n} files, {wall / n * 1000:.0f} ms per file (under cProfile)")
    print(f"  {writer.get('writer', 0.0) / n * 1000:7.1f} ms  CPU of the writer thread (staged Parquet files), beside these")
    for phase, seconds in sorted(spent.items(), key=lambda item: -item[1]):
        print(f"  {seconds / n * 1000:7.1f} ms  {phase}")


if __name__ == "__main__":
    main()
