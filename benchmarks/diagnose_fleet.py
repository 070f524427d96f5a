"""`xprosql diagnose` over a fleet, as a whole process (what a user types), and whether it finds what the corpus hides.

Run on a warehouse of the 1,000-profile corpus (benchmarks/make_corpus.py, then ``xprosql ingest CORPUS --into WH
--jobs 2``, which compacts and so stores each profile's findings)::

    python benchmarks/diagnose_fleet.py --warehouse /tmp/wh1000 [--repeat 3]

Times ``xprosql diagnose WH --format csv --out F`` (best of ``--repeat`` processes: import, open, every rule,
write), then reads the findings back and checks the corpus's injected regressions (make_corpus.py: every fourth
job, from its run 3 on, the longest op 30% slower) against the ``regressions`` rule's findings: each injected job
should have one, no other job should.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import polars as pl

import xprosql


def timed_process(command: list[str], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        subprocess.run(command, check=True, capture_output=True, text=True)
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--warehouse", type=Path, required=True)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    exe = shutil.which("xprosql") or f"{sys.executable} -m xprosql.cli"
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "findings.csv"
        seconds = timed_process([*exe.split(), "diagnose", str(args.warehouse), "--format", "csv", "--out", str(out)],
                                args.repeat)
        findings = pl.read_csv(out)
    run = xprosql.load(args.warehouse)
    profiles = run.sql("SELECT profile_id, tags['job'] AS job FROM profiles").pl()
    print(f"xprosql diagnose over {profiles.height} profiles: {seconds:.2f} s whole process (best of {args.repeat}), "
          f"{findings.height} findings")
    print(findings.group_by("rule", "severity").agg(pl.len().alias("findings"),
                                                    pl.col("profile_id").n_unique().alias("profiles"),
                                                    pl.col("expected_saving_share").median().alias("median_saving_share"))
          .sort("rule", "severity"))
    jobs = sorted(profiles["job"].drop_nulls().unique())
    injected = {job for job in jobs if int(job.removeprefix("job")) % 4 == 0}
    regressed = findings.filter(pl.col("rule") == "regressions").select("profile_id").join(profiles, on="profile_id")
    found = set(regressed["job"].drop_nulls())
    print(f"injected regressions: {sorted(injected)}; found by the regressions rule: {sorted(found)}; "
          f"missed: {sorted(injected - found)}; found without an injection: {sorted(found - injected)}")


if __name__ == "__main__":
    main()
