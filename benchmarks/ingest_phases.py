"""Where a batch ingest's time per file goes: decode, derive (and the connection it sets up), write, commit.

Run (the files of one format from the corpus of make_corpus.py; ``PYTHONPATH`` picks a tree to compare)::

    python benchmarks/ingest_phases.py "/tmp/corpus1000/job05/run00*/tpu*.xplane.pb" --n 20
    PYTHONPATH=/tmp/xprosql-before python benchmarks/ingest_phases.py "..." --n 20

One process ingests one file first (imports, numba's cached code, first calls: what a batch worker pays
once), then ``--n`` files in one call, under cProfile. Prints the wall time per file and each phase's
cumulative time per file. Set ``XPROSQL_COMPILED=always`` to leave out the compiled decoders' one-time
load from the per-file numbers.
"""

from __future__ import annotations

import argparse
import cProfile
import glob
import pstats
import tempfile
import time

import xprosql

# Functions of xprosql by name (across versions), and what they are.
PHASES = {
    "derive_tables": "derive (op_stats and the other derived tables)",
    "derive": "derive (op_stats and the other derived tables)",
    "connect_views": "  of which: a DuckDB connection with its views",
    "register_functions": "  of which: the SQL functions registered",
    "decode_xspace": "decode XSpace",
    "decode_kineto": "decode Kineto",
    "finish": "staged files closed (the writer thread's rest)",
    "commit": "commit",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("pattern", help="a glob of profile files")
    parser.add_argument("--n", type=int, default=20, help="files timed (after one to warm up)")
    args = parser.parse_args()
    files = sorted(glob.glob(args.pattern))[: args.n + 1]
    if len(files) < 2:
        raise SystemExit(f"{args.pattern}: fewer than 2 files")
    with tempfile.TemporaryDirectory() as scratch:
        assert xprosql.ingest(files[0], into=f"{scratch}/warm", compact=False).ok
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
        if name in PHASES and "xprosql" in path:
            spent[PHASES[name]] = spent.get(PHASES[name], 0.0) + cumulative
    print(f"{xprosql.__file__}: {n} files, {wall / n * 1000:.0f} ms per file (under cProfile)")
    for phase, seconds in sorted(spent.items(), key=lambda item: -item[1]):
        print(f"  {seconds / n * 1000:7.1f} ms  {phase}")


if __name__ == "__main__":
    main()
