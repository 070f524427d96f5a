"""A small file's ingest and first answer, before and after, alternating: medians and bests of whole processes.

Run (a checkout of the older xprosql, run with the same interpreter)::

    git worktree add --detach /tmp/xprosql-before <commit>
    python benchmarks/first_answer.py --before /tmp/xprosql-before --rounds 12

Each round runs, for each tree in turn, ``xprosql ingest`` of the 0.86 MB TPU sample into a fresh warehouse then
``xprosql roofline`` of it as one shell command (issue #34's "ingest + first analysis"), then ``xprosql roofline DIR``
and ``xprosql tables DIR`` on that warehouse, then ``xprosql ingest`` of each of ``--ingest`` (e.g. the 32 MB file of
make_large_xspace.py), whose peak RSS is reported too. Each row has the CPU time of its processes beside the wall
time (user and system, threads included): what a command costs a machine shared with other work. Alternating the
trees round by round puts a noisy machine's slow minutes on both sides; the differences here are tens of ms, below
what best-of-N on one side then the other can tell.
"""

from __future__ import annotations

import argparse
import os
import resource
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPOSITORY = HERE.parent
sys.path.insert(0, str(HERE))
from startup import run  # noqa: E402

SMALL = REPOSITORY / "tests" / "data" / "xspace" / "tpu_v6e_inference.xplane.pb"
ROWS = ("ingest && roofline", "roofline DIR", "tables DIR")


def _seconds(command: str, tree: Path) -> tuple[float, float]:
    """Wall and CPU (user + system, every process of the command) seconds of ``command``."""
    env = dict(os.environ, PYTHONPATH=str(tree))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(command, shell=True, env=env, cwd=tempfile.gettempdir(), check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", type=Path, required=True, help="an older checkout to compare with")
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--ingest", type=Path, nargs="*", default=[], help="more files, each ingested alone")
    args = parser.parse_args()
    trees = {"before": args.before.resolve(), "after": REPOSITORY}
    cli = f"{shlex.quote(sys.executable)} -m xprosql.cli"
    times: dict[tuple[str, str], list[tuple[float, float]]] = {(tree, row): [] for tree in trees for row in ROWS}
    ingests: dict[tuple[str, Path], list[tuple[float, float, float]]] = {(t, p): [] for t in trees for p in args.ingest}
    with tempfile.TemporaryDirectory() as scratch:
        warehouse = Path(scratch) / "run"
        for _ in range(args.rounds):
            for name, tree in trees.items():
                shutil.rmtree(warehouse, ignore_errors=True)
                times[name, ROWS[0]].append(_seconds(
                    f"{cli} ingest {shlex.quote(str(SMALL))} --into {warehouse} --quiet && {cli} roofline {warehouse}", tree))
                times[name, ROWS[1]].append(_seconds(f"{cli} roofline {warehouse}", tree))
                times[name, ROWS[2]].append(_seconds(f"{cli} tables {warehouse}", tree))
                for path in args.ingest:
                    ingests[name, path].append(run([sys.executable, "-m", "xprosql.cli", "ingest", str(path), "--into",
                                                    str(warehouse), "--quiet"], tree=tree, repeat=1, fresh=warehouse))
    print("| what | before: median, best; CPU median | after: median, best; CPU median |\n|---|---|---|")
    for row in ROWS:
        cells = []
        for t in trees:
            wall, cpu = [w for w, _ in times[t, row]], [c for _, c in times[t, row]]
            cells.append(f"{statistics.median(wall):.3f} s, {min(wall):.3f} s; {statistics.median(cpu):.3f} s")
        print(f"| `xprosql {row}` | {cells[0]} | {cells[1]} |")
    for path in args.ingest:
        cells = []
        for t in trees:
            wall, rss = [r[0] for r in ingests[t, path]], [r[2] for r in ingests[t, path]]
            cells.append(f"{statistics.median(wall):.3f} s, {min(wall):.3f} s; peak RSS median {statistics.median(rss):.0f} MB "
                         f"({min(rss):.0f}-{max(rss):.0f})")
        print(f"| `xprosql ingest {path.name}` | {cells[0]} | {cells[1]} |")


if __name__ == "__main__":
    main()
