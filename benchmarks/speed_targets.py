"""Issue #34's targets, before and after, with the reference tools, in one run: the table of benchmarks/RESULTS.md.

Run on a quiet machine (nothing else running; each row is the best of ``--repeat`` fresh processes but the batch
ingest, run once)::

    git worktree add --detach /tmp/xprosql-before 768c719      # what the issue measured
    python benchmarks/speed_targets.py --before /tmp/xprosql-before --corpus /tmp/corpus1000 --fleet /tmp/wh1000m

Rows (whole processes unless said; the "before" and "after" trees run with the same interpreter and packages):

* 5.3 M events in-process: ``xprosql.ingest`` of 200 copies of the TPU v6e sample after a warm-up ingest in the same
  process (benchmarks/ingest_speed.py's measurement), beside XProf's ``events_db`` converter in-process;
* the 40-copy file (30 MB) as ``xprosql ingest``, beside XProf's converter as a process; peak RSS against the
  target of 1.5x the file plus 300 MB;
* ``xprosql ingest CORPUS --jobs 2`` then ``xprosql compact``, as one shell command, run once (``--corpus``);
* ``xprosql ingest`` of the small TPU sample then ``xprosql roofline``, one shell command, beside XProf's
  ``hlo_stats`` tool in a fresh process on the same file; ``xprosql roofline DIR`` and ``xprosql tables DIR`` on
  that one-profile warehouse;
* the job analyses and memory peaks over a compacted warehouse of the corpus (``--fleet``), each a fresh
  ``python -c`` process that opens it, runs the analysis and fetches every row (benchmarks/fleet_processes.py).
  The before tree reads the same warehouse; a cell says "fails" when it cannot.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPOSITORY = HERE.parent
sys.path.insert(0, str(HERE))
from fleet_processes import _PROCESS as _FLEET  # noqa: E402
from ingest_speed import _XPROF as _XPROF_IN_PROCESS  # noqa: E402
from ingest_speed import _XPROSQL as _XPROSQL_IN_PROCESS  # noqa: E402
from startup import _XPROF as _XPROF_PROCESS  # noqa: E402
from startup import run  # noqa: E402

SMALL = REPOSITORY / "tests" / "data" / "xspace" / "tpu_v6e_inference.xplane.pb"
WARMUP = REPOSITORY / "tests" / "data" / "xspace" / "mi300_jax_conv.xplane.pb"
_HLO_STATS = ("import sys\nfrom xprof.convert.raw_to_tool_data import xspace_to_tool_data\n"
              "data, _ = xspace_to_tool_data([sys.argv[1]], 'hlo_stats', {'use_saved_result': False})\nassert data\n")
FLEET = {"jobs": ("jobs", {}), "clock_offsets": ("clock_offsets", {}), "collectives": ("collectives", {}),
         "stragglers": ("stragglers", {}), "what_if": ("what_if", {}), "job_critical_path": ("job_critical_path", {}),
         "memory_peaks": ("memory_peaks", {})}


def _cell(result: tuple[float, float, float] | None) -> str:
    return "fails" if result is None else f"{result[0]:.2f} s, {result[2]:.0f} MB"


def _whole(command: list[str], *, tree: Path | None, repeat: int, fresh: Path | None = None) -> tuple[float, float, float] | None:
    try:
        return run(command, tree=tree, repeat=repeat, fresh=fresh)
    except RuntimeError:
        return None


def _in_process(script: str, arguments: list[str], tree: Path | None, repeat: int) -> dict | None:
    """The best of ``repeat`` in-process measurements (each a fresh process printing JSON)."""
    best = None
    for _ in range(repeat):
        with tempfile.TemporaryDirectory() as out:
            env = dict(os.environ, **({"PYTHONPATH": str(tree)} if tree else {}))
            done = subprocess.run([sys.executable, "-c", script, *[a.replace("{out}", out + "/o") for a in arguments]],
                                  capture_output=True, text=True, env=env, cwd=tempfile.gettempdir())
        if done.returncode != 0:
            return None
        found = json.loads(done.stdout.splitlines()[-1])
        best = found if best is None or found["seconds"] < best["seconds"] else best
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", type=Path, required=True, help="a checkout of the version the issue measured")
    parser.add_argument("--corpus", type=Path, help="the corpus of make_corpus.py, for the batch ingest row")
    parser.add_argument("--fleet", type=Path, help="a compacted warehouse of that corpus, for the fleet rows")
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    py = sys.executable
    trees = {"before": args.before.resolve(), "after": REPOSITORY}
    print(f"{time.strftime('%Y-%m-%d %H:%M')}, load average {os.getloadavg()[0]:.2f} at the start", flush=True)
    print("| what | before | after | reference | target |\n|---|---|---|---|---|", flush=True)
    with tempfile.TemporaryDirectory() as scratch_name:
        scratch = Path(scratch_name)
        big, mid = scratch / "tpu200.xplane.pb", scratch / "tpu40.xplane.pb"
        for path, copies in ((big, 200), (mid, 40)):
            subprocess.run([py, str(HERE / "make_large_xspace.py"), str(SMALL), str(path), "--copies", str(copies)],
                           check=True, env=dict(os.environ, PYTHONPATH=str(REPOSITORY)), stdout=subprocess.DEVNULL)

        cells = [_in_process(_XPROSQL_IN_PROCESS, [str(big), "{out}", str(WARMUP)], tree, args.repeat) for tree in trees.values()]
        xprof = _in_process(_XPROF_IN_PROCESS, [str(big), "{out}"], None, args.repeat)
        print(f"| 5.3 M events in-process ({big.stat().st_size / 1e6:.0f} MB) | "
              + " | ".join("fails" if c is None else f"{c['seconds']:.2f} s ({xprof['seconds'] / c['seconds']:.1f}x XProf)"
                           for c in cells)
              + f" | XProf events_db {xprof['seconds']:.2f} s | >= 5x XProf |", flush=True)

        out = scratch / "out"
        cells = [_whole([py, "-m", "xprosql.cli", "ingest", str(mid), "--into", str(out), "--quiet"], tree=tree,
                        repeat=args.repeat, fresh=out) for tree in trees.values()]
        reference = _whole([py, "-c", _XPROF_PROCESS, str(mid), str(out) + ".parquet"], tree=None, repeat=args.repeat,
                           fresh=Path(str(out) + ".parquet"))
        assert reference is not None
        memory_target = 1.5 * mid.stat().st_size / 2**20 + 300
        print(f"| xprosql ingest of 1.07 M events ({mid.stat().st_size / 1e6:.0f} MB), whole process | "
              + " | ".join(_cell(c) + ("" if c is None else f" ({reference[0] / c[0]:.1f}x XProf)") for c in cells)
              + f" | XProf events_db {_cell(reference)} | >= 4x XProf, <= {memory_target:.0f} MB |", flush=True)

        if args.corpus:
            files = sum(1 for p in args.corpus.rglob("*") if p.name.endswith((".xplane.pb", ".json.gz")))
            cells = []
            for tree in trees.values():
                wh = scratch / "batch"
                command = ["sh", "-c", f'"{py}" -m xprosql.cli ingest "{args.corpus}" --into "{wh}" --jobs 2 --quiet '
                                       f'--compact never && "{py}" -m xprosql.cli compact "{wh}"']
                found = _whole(command, tree=tree, repeat=1, fresh=wh)
                cells.append("fails" if found is None else f"{found[0]:.0f} s, {files / found[0]:.1f} profiles/s")
            print(f"| batch ingest of {files} profiles, `--jobs 2`, compaction included | " + " | ".join(cells)
                  + " | | >= 10 profiles/s |", flush=True)

        small = scratch / "small"
        subprocess.run([py, "-m", "xprosql.cli", "ingest", str(SMALL), "--into", str(small), "--quiet"], check=True,
                       env=dict(os.environ, PYTHONPATH=str(REPOSITORY)), stdout=subprocess.DEVNULL)
        copy = scratch / SMALL.name
        shutil.copy(SMALL, copy)
        hlo_stats = _whole([py, "-c", _HLO_STATS, str(copy)], tree=None, repeat=args.repeat)
        rows = [(f"`xprosql ingest {SMALL.name} && xprosql roofline` (0.86 MB)",
                 ["sh", "-c", f'"{py}" -m xprosql.cli ingest "{SMALL}" --into "{out}" --quiet && '
                              f'"{py}" -m xprosql.cli roofline "{out}"'], out, f"XProf hlo_stats {_cell(hlo_stats)}", "<= 1.0 s"),
                ("`xprosql roofline DIR` (one profile)", [py, "-m", "xprosql.cli", "roofline", str(small)], None, "", "<= 0.4 s"),
                ("`xprosql tables DIR` (one profile)", [py, "-m", "xprosql.cli", "tables", str(small)], None, "", "<= 0.3 s")]
        for label, command, fresh, reference_cell, target in rows:
            cells = [_cell(_whole(command, tree=tree, repeat=args.repeat, fresh=fresh)) for tree in trees.values()]
            print(f"| {label} | " + " | ".join(cells) + f" | {reference_cell} | {target} |", flush=True)

        if args.fleet:
            for label, (method, options) in FLEET.items():
                cells = [_cell(_whole([py, "-c", _FLEET, str(args.fleet), method, json.dumps(options)], tree=tree,
                                      repeat=args.repeat)) for tree in trees.values()]
                print(f"| {label} over the fleet warehouse | " + " | ".join(cells) + " | | <= 3 s |", flush=True)


if __name__ == "__main__":
    main()
