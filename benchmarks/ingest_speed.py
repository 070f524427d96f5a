"""Ingest speed and peak memory against the reference tools, on the same files.

Run: python benchmarks/ingest_speed.py FILE... [--repeat N] [--no-reference]
(default: the real samples in tests/data; build large inputs with
make_large_xspace.py and make_large_kineto.py). Each measurement runs in a fresh
process, which reports its wall time and peak RSS; the reference tool is XProf's
C++ XSpace -> Parquet converter for *.xplane.pb and Holistic Trace Analysis'
trace loading for Kineto JSON. Prints one Markdown row per file, with ratios
(reference / xprosql: above 1 means xprosql is faster or smaller).

With --no-reference (for files the reference tools cannot open in this machine's
memory) the row gives xprosql's peak against the memory target instead: 1.5x the
file's size plus 300 MB.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

SHARED = Path(__file__).resolve().parents[1] / "tests" / "data"

# Each prints {"seconds": wall time of the work, "peak_mb": peak RSS of the process, "baseline_mb": after imports}.
_PRELUDE = """
import json, resource, sys, time
def peak_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
"""
_XPROSQL = _PRELUDE + """
import os, tempfile, xprosql
# Warm up on another file of the format first (numba's cached code, first-call costs): a batch ingest pays them once.
# The warm-up file is small: without XPROSQL_COMPILED=always it would leave the compiled decoder unloaded, and the
# measured ingest would pay its loading (0.4-0.7 s).
os.environ.setdefault("XPROSQL_COMPILED", "always")
warmup = tempfile.mkdtemp()
xprosql.ingest(sys.argv[3], into=warmup + "/run")
baseline = peak_mb()
start = time.perf_counter()
report = xprosql.ingest(sys.argv[1], into=sys.argv[2])
assert report.ok, str(report)
print(json.dumps({"seconds": time.perf_counter() - start, "peak_mb": peak_mb(), "baseline_mb": baseline,
                  "events": report.ingested[0].rows["events"]}))
"""
_XPROF = _PRELUDE + """
from xprof.convert.events_db.python.pywrap_events_db_c_api import xspace_to_parquet
baseline = peak_mb()
start = time.perf_counter()
xspace_to_parquet(input_path=sys.argv[1], output_path=sys.argv[2] + ".parquet")
print(json.dumps({"seconds": time.perf_counter() - start, "peak_mb": peak_mb(), "baseline_mb": baseline}))
"""
_HTA = _PRELUDE + """
import logging
logging.disable(logging.WARNING)
from hta.trace_analysis import TraceAnalysis
baseline = peak_mb()
start = time.perf_counter()
TraceAnalysis(trace_dir=sys.argv[1])
print(json.dumps({"seconds": time.perf_counter() - start, "peak_mb": peak_mb(), "baseline_mb": baseline}))
"""


def _run(script: str, *args: str) -> dict:
    done = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def _best(script: str, make_args, repeat: int) -> dict:
    results = [_run(script, *make_args(i)) for i in range(repeat)]
    return min(results, key=lambda r: r["seconds"])


def measure(path: Path, *, repeat: int, with_reference: bool = True) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        warmup = SHARED / ("xspace/gpu_v100_tf_bert.xplane.pb" if path.name.endswith(".xplane.pb")
                           else "kineto/sampled_rank1.json.gz")
        if not with_reference:
            ours = _best(_XPROSQL, lambda i: (str(path), str(work / f"run{i}"), str(warmup)), repeat)
            size_mb = path.stat().st_size / 1e6
            extra = ours["peak_mb"] - ours["baseline_mb"]
            return (f"| {path.name} | {size_mb:.1f} MB | {ours['events']:,} | {ours['seconds']:.2f} s | "
                    f"{ours['events'] / ours['seconds'] / 1e6:.2f} M/s | {extra:.0f} MB | {extra / size_mb:.2f}x | "
                    f"{1.5 * size_mb + 300:.0f} MB |")
        if path.name.endswith(".xplane.pb"):
            reference_name = "XProf events_db"
            reference = _best(_XPROF, lambda i: (str(path), str(work / f"xprof{i}")), repeat)
        else:
            reference_name = "HTA load"
            trace_dir = work / "trace"
            trace_dir.mkdir()
            shutil.copy(path, trace_dir / path.name)
            reference = _best(_HTA, lambda i: (str(trace_dir),), repeat)
        ours = _best(_XPROSQL, lambda i: (str(path), str(work / f"run{i}"), str(warmup)), repeat)
    events = ours["events"]
    ours_extra = ours["peak_mb"] - ours["baseline_mb"]
    reference_extra = reference["peak_mb"] - reference["baseline_mb"]
    return (
        f"| {path.name} | {path.stat().st_size / 1e6:.1f} MB | {events:,} | {reference_name} | "
        f"{reference['seconds']:.2f} s | {ours['seconds']:.2f} s | {events / ours['seconds'] / 1e6:.2f} M/s | "
        f"**{reference['seconds'] / ours['seconds']:.1f}x** | {reference_extra:.0f} MB | {ours_extra:.0f} MB | "
        f"**{reference_extra / max(ours_extra, 1):.1f}x** |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default = sorted((SHARED / "xspace").glob("*.xplane.pb")) + [SHARED / "kineto" / "a100_nccl_rank0.json.gz"]
    parser.add_argument("files", nargs="*", type=Path, default=default)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--no-reference", action="store_true", help="measure xprosql only, against the memory target")
    args = parser.parse_args()
    if args.no_reference:
        print("| file | size | events | xprosql ingest | xprosql events/s | xprosql peak (above imports) "
              "| peak / file size | target (1.5x size + 300 MB) |")
        print("|---|---|---|---|---|---|---|---|")
    else:
        print("| file | size | events | reference | reference time | xprosql ingest | xprosql events/s "
              "| speed ratio | reference peak (above imports) | xprosql peak (above imports) | memory ratio |")
        print("|---|---|---|---|---|---|---|---|---|---|---|")
    for path in args.files:
        print(measure(path, repeat=args.repeat, with_reference=not args.no_reference), flush=True)


if __name__ == "__main__":
    main()
