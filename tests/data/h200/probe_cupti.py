"""Which cupti-python install records on this machine, and which PM-sampling metrics it can sample.

Run with the candidate install first on PYTHONPATH (capture.sh tries each); prints one
``probe:`` line a check and exits 0 when activity recording works.
"""

from __future__ import annotations

import sys
import tempfile
import warnings
from pathlib import Path

import cupy as cp

from xprosql import cupti

METRIC_SETS = [
    "sm__cycles_active.avg,dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "sm__cycles_active.avg,gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
    "sm__cycles_active.avg,gr__cycles_elapsed.max",
]


def work() -> None:
    x = cp.arange(1 << 24, dtype=cp.float32)
    for _ in range(50):
        x = x * 1.0001
    x.sum().get()


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        try:
            with cupti.record(tmp) as recording:
                work()
        except Exception as exc:
            print(f"probe: activity FAILED {type(exc).__name__}: {exc}")
            return 1
        libs = sorted({line.split()[-1] for line in Path("/proc/self/maps").read_text().splitlines() if "libcupti" in line})
        print(f"probe: activity ok {recording.counts} libcupti={libs}")
        for metrics in METRIC_SETS:
            try:
                with warnings.catch_warnings(record=True) as caught, \
                        cupti.record(tmp, metrics=metrics.split(","), sampling_interval_ns=100_000) as recording:
                    work()
                samples = {d: len(s.samples) for d, s in recording.pm_samples.items()}
                print(f"probe: metrics ok {metrics} samples={samples} warnings={[str(w.message) for w in caught]}")
            except Exception as exc:
                print(f"probe: metrics FAILED {metrics}: {type(exc).__name__}: {exc}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
