"""Start-up and small files as whole processes (what a user types): wall time, CPU time and peak RSS.

Run (``--before DIR``: a checkout of an older xprosql, run with the same interpreter, for a
before/after table; ``--xprof``: XProf's ``events_db.xspace_to_parquet`` on the same XSpace files)::

    git worktree add /tmp/xprosql-before <commit>
    python benchmarks/startup.py --before /tmp/xprosql-before --xprof [--files BIG.xplane.pb BIG.json.gz]

Each row is the best of ``--repeat`` processes. DIR is a one-profile warehouse of the 0.86 MB TPU sample. The numba cache is warm (a first run after an
install compiles: see ``XPROSQL_COMPILED`` in xprosql/ingest/_compiled.py), but for the "first run"
rows of each of ``--files``: those start with an empty numba cache (``NUMBA_CACHE_DIR``), as the
first ingest after ``pip install`` does.
"""

from __future__ import annotations

import argparse
import compileall
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[1]
SAMPLES = sorted([*(REPOSITORY / "tests" / "data" / "xspace").glob("*.xplane.pb"),
                  *(REPOSITORY / "tests" / "data" / "kineto").glob("*.json.gz")])
SMALL = REPOSITORY / "tests" / "data" / "xspace" / "tpu_v6e_inference.xplane.pb"  # the 0.86 MB TPU sample
_XPROF = ("import sys\nfrom xprof.convert.events_db.python.pywrap_events_db_c_api import xspace_to_parquet\n"
          "xspace_to_parquet(input_path=sys.argv[1], output_path=sys.argv[2])\n")


def run(command: list[str], *, tree: Path | None, repeat: int, fresh: Path | None = None,
        numba_cache: Path | None = None) -> tuple[float, float, float]:
    """(wall s, CPU s, peak RSS MB) of the best of ``repeat`` runs of ``command``; ``fresh`` is removed before each,
    and so is ``numba_cache``, given as numba's cache directory."""
    env = dict(os.environ)
    if tree is not None:
        env["PYTHONPATH"] = str(tree)
        # As `pip install` leaves it: every module compiled. A checkout run with PYTHONDONTWRITEBYTECODE (as on the
        # machines here) compiles xprosql's sources in every process, 0.08 s of a small command.
        compileall.compile_dir(str(tree / "xprosql"), quiet=1)
    if numba_cache is not None:
        env["NUMBA_CACHE_DIR"] = str(numba_cache)
    best: tuple[float, float, float] | None = None
    for _ in range(repeat):
        for path in (fresh, numba_cache):
            if path is not None and path.is_dir():
                shutil.rmtree(path)
            elif path is not None:
                path.unlink(missing_ok=True)
        start = time.perf_counter()
        # From elsewhere: `python -c` puts the working directory first on the path, before PYTHONPATH.
        process = subprocess.Popen(command, env=env, cwd=tempfile.gettempdir(), stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL)
        _, status, usage = os.wait4(process.pid, 0)
        wall = time.perf_counter() - start
        if os.waitstatus_to_exitcode(status) != 0:
            raise RuntimeError(f"{' '.join(command)} failed")
        result = (wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024)
        best = result if best is None or result[0] < best[0] else best
    assert best is not None
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", type=Path, help="an older checkout to compare with")
    parser.add_argument("--xprof", action="store_true", help="XProf's events_db converter on the XSpace samples")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--files", type=Path, nargs="*", default=[],
                        help="more files to ingest (e.g. made by make_large_xspace.py), each also as a first run")
    args = parser.parse_args()
    py = sys.executable
    trees = {"after": REPOSITORY, **({"before": args.before} if args.before else {})}
    with tempfile.TemporaryDirectory() as scratch:
        warehouse = Path(scratch) / "wh"
        subprocess.run([py, "-m", "xprosql.cli", "ingest", str(SMALL), "--into", str(warehouse), "--quiet"],
                       check=True, env=dict(os.environ, PYTHONPATH=str(REPOSITORY)), stdout=subprocess.DEVNULL)
        # (label, command, writes to {out}, starts with an empty numba cache)
        rows: list[tuple[str, list[str], bool, bool]] = [
            ("import xprosql", [py, "-c", "import xprosql"], False, False),
            ("xprosql --help", [py, "-m", "xprosql.cli", "--help"], False, False),
            ("xprosql tables DIR", [py, "-m", "xprosql.cli", "tables", str(warehouse)], False, False),
            ("xprosql roofline DIR", [py, "-m", "xprosql.cli", "roofline", str(warehouse)], False, False),
            # A first answer: ingest the small TPU sample and ask for its roofline, one shell command.
            (f"xprosql ingest {SMALL.name} && xprosql roofline DIR",
             ["sh", "-c", f'"{py}" -m xprosql.cli ingest "{SMALL}" --into "{{out}}" --quiet && '
                          f'"{py}" -m xprosql.cli roofline "{{out}}"'], True, False),
        ]
        for sample in [*SAMPLES, *args.files]:
            rows.append((f"xprosql ingest {sample.name} ({sample.stat().st_size / 1e6:.2f} MB)",
                         [py, "-m", "xprosql.cli", "ingest", str(sample), "--into", "{out}", "--quiet"], True, False))
        for sample in args.files:
            rows.append((f"first run: xprosql ingest {sample.name}, empty numba cache",
                         [py, "-m", "xprosql.cli", "ingest", str(sample), "--into", "{out}", "--quiet"], True, True))
        print("| what | " + " | ".join(f"{name}: wall, CPU, peak RSS" for name in trees)
              + (" | XProf events_db: wall, CPU, peak RSS |" if args.xprof else " |"))
        print("|---|" + "---|" * (len(trees) + args.xprof))
        for label, command, writes, first_run in rows:
            cells = []
            out = Path(scratch) / "out"
            for tree in trees.values():
                cells.append("{:.2f} s, {:.2f} s, {:.0f} MB".format(*run(
                    [c.replace("{out}", str(out)) for c in command], tree=tree, repeat=1 if first_run else args.repeat,
                    fresh=out if writes else None, numba_cache=Path(scratch) / "numba" if first_run else None)))
            if args.xprof:
                sample = Path(command[4]) if writes and not first_run and command[0] != "sh" else None
                if sample is not None and sample.name.endswith(".xplane.pb"):
                    copy = Path(scratch) / sample.name
                    shutil.copy(sample, copy)
                    cells.append("{:.2f} s, {:.2f} s, {:.0f} MB".format(*run(
                        [py, "-c", _XPROF, str(copy), str(out) + ".parquet"], tree=None, repeat=args.repeat,
                        fresh=Path(str(out) + ".parquet"))))
                else:
                    cells.append("—")
            print(f"| {label} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
