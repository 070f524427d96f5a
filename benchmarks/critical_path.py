"""The critical path as whole processes: a 1 M-event Kineto trace beside Holistic Trace Analysis, and a fleet.

Run::

    python benchmarks/critical_path.py --trace-events 1000000            # builds the trace, ingests it, times both
    python benchmarks/critical_path.py --warehouse /tmp/wh1000 --skip-trace  # the 1,000-profile fleet (read only)

The trace: ``tests/data/kineto/a100_nccl_rank0.json.gz`` replicated with shifted times (benchmarks/make_large_kineto.py)
until it holds at least ``--trace-events`` events, ingested once into a warehouse (the ingest is reported, not
counted). Then each measurement is a fresh ``python -c`` process (import, open, compute, fetch every row as Arrow):

* xprosql ``run.critical_path()``: HTA's graph and longest path of every step window of the trace;
* xprosql ``run.job_critical_path()``: the replay graph of the trace as a one-rank job, every step;
* HTA 0.5 ``CriticalPathAnalysis.critical_path_analysis`` on the same file (``TraceAnalysis`` load, then the
  critical path of the whole trace: HTA's annotation "" is one window over every event), under pandas 3 with the
  fixes tests/critical_path_profiles.py applies (HTA's own code otherwise). HTA's load and its critical path are
  reported apart, inside the same process.

The fleet: ``run.critical_path()`` over every profile and ``run.job_critical_path()`` over every job of a
warehouse (the corpus of benchmarks/make_corpus.py), best of ``--repeat`` processes, with the peak RSS.
"""

from __future__ import annotations

import argparse
import gzip
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "tests" / "data" / "kineto" / "a100_nccl_rank0.json.gz"

_XPROSQL = """
import json, resource, sys, time
import xprosql
run = xprosql.load(sys.argv[1])
start = time.perf_counter()
rows = getattr(run, sys.argv[2])(**json.loads(sys.argv[3])).arrow().num_rows
query_s = time.perf_counter() - start
print(json.dumps({"rows": rows, "query_s": query_s, "rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6}))
"""

_HTA = """
import json, logging, resource, sys, time, warnings
sys.path.insert(0, sys.argv[2])
warnings.simplefilter("ignore")
logging.disable(logging.CRITICAL)
from critical_path_profiles import hta_cp_module
from hta.trace_analysis import TraceAnalysis
module = hta_cp_module()
start = time.perf_counter()
trace = TraceAnalysis(trace_dir=sys.argv[1]).t
load_s = time.perf_counter() - start
start = time.perf_counter()
result = module.CriticalPathAnalysis.critical_path_analysis(trace, 0, "", 0)
length_us = float(result[0].get_critical_path_breakdown().duration.sum()) if result and result[1] else None
cp_s = time.perf_counter() - start
print(json.dumps({"load_s": load_s, "cp_s": cp_s, "length_us": length_us,
                  "rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6}))
"""


def _process(code: str, *args: str) -> dict[str, float]:
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"benchmark process failed:\n{done.stderr[-4000:]}")
    return {"process_s": time.perf_counter() - start, **json.loads(done.stdout.splitlines()[-1])}


def _best(code: str, args: list[str], repeat: int) -> dict[str, float]:
    runs = [_process(code, *args) for _ in range(repeat)]
    return min(runs, key=lambda r: r["process_s"])


def build_trace(events: int, out: Path) -> tuple[Path, int]:
    """The sample replicated until it holds ``events`` events; returns the file and its event count."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from make_large_kineto import replicate

    data = SAMPLE.read_bytes()
    per_copy = len(json.loads(gzip.decompress(data))["traceEvents"])
    copies = -(-events // per_copy)
    out.parent.mkdir(parents=True, exist_ok=True)
    if not out.exists():
        out.write_bytes(replicate(data, copies))
    return out, len(json.loads(gzip.decompress(out.read_bytes()))["traceEvents"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trace-events", type=int, default=1_000_000)
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "xprosql_critical_path_bench")
    parser.add_argument("--warehouse", type=Path, help="a fleet warehouse (read only), e.g. /tmp/wh1000")
    parser.add_argument("--skip-trace", action="store_true")
    parser.add_argument("--skip-hta", action="store_true")
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    if not args.skip_trace:
        trace, events = build_trace(args.trace_events, args.workdir / "trace" / f"a100x{args.trace_events}.json.gz")
        print(f"trace {trace}: {events:,} events, {trace.stat().st_size / 1e6:.1f} MB", flush=True)
        warehouse = args.workdir / "warehouse"
        if not (warehouse / "profiles").exists():
            import xprosql

            start = time.perf_counter()
            report = xprosql.ingest(trace, into=warehouse)
            assert report.ok, str(report)
            print(f"ingested in {time.perf_counter() - start:.1f} s (not counted below)", flush=True)
        for method in ("critical_path", "job_critical_path"):
            r = _best(_XPROSQL, [str(warehouse), method, "{}"], args.repeat)
            print(f"xprosql run.{method}(): {r['process_s']:.1f} s whole process ({r['query_s']:.1f} s the analysis), "
                  f"{r['rows']} rows, peak RSS {r['rss_gb']:.2f} GB", flush=True)
        if not args.skip_hta:
            r = _best(_HTA, [str(trace.parent), str(ROOT / "tests")], args.repeat)
            print(f"HTA critical_path_analysis (whole trace): {r['process_s']:.1f} s whole process: load "
                  f"{r['load_s']:.1f} s + critical path {r['cp_s']:.1f} s, length {r['length_us']} us, "
                  f"peak RSS {r['rss_gb']:.2f} GB", flush=True)
    if args.warehouse is not None:
        for method in ("critical_path", "job_critical_path"):
            r = _best(_XPROSQL, [str(args.warehouse), method, "{}"], args.repeat)
            print(f"fleet {args.warehouse}: run.{method}(): {r['process_s']:.1f} s whole process "
                  f"({r['query_s']:.1f} s the analysis), {r['rows']} rows, peak RSS {r['rss_gb']:.2f} GB", flush=True)


if __name__ == "__main__":
    main()
