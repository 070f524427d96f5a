"""Ingest speed against XProf's C++ XSpace -> Parquet converter, on the same real files.

Run: python benchmarks/ingest_xspace.py [FILE.xplane.pb ...]
(defaults to the XSpace samples in ../shared/data/xspace; needs the `xprof` wheel).
Prints, per file, the best of N runs for XProf's converter, our decode alone, and our
full ingest (decode, Parquet, sort, atomic commit), and the ratio ours / XProf.
XProf runs in its own process: its wheel bundles a native Arrow that clashes with pyarrow.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import xprosql
from xprosql.ingest.xspace import decode_xspace

SAMPLES = Path(__file__).resolve().parents[2] / "shared" / "data" / "xspace"

_XPROF = """
import sys, time
from xprof.convert.events_db.python.pywrap_events_db_c_api import xspace_to_parquet
times = []
for _ in range(int(sys.argv[3])):
    start = time.perf_counter()
    xspace_to_parquet(input_path=sys.argv[1], output_path=sys.argv[2])
    times.append(time.perf_counter() - start)
print(min(times))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", type=Path, default=sorted(SAMPLES.glob("*.xplane.pb")))
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    for path in args.files:
        with tempfile.TemporaryDirectory() as tmp:
            copy = Path(tmp) / path.name
            shutil.copy(path, copy)
            xprof = float(subprocess.run(
                [sys.executable, "-c", _XPROF, str(copy), str(Path(tmp) / "xprof.parquet"), str(args.repeat)],
                capture_output=True, text=True, check=True,
            ).stdout)
            data = path.read_bytes()
            decode, ingest = [], []
            for i in range(args.repeat):
                start = time.perf_counter()
                n_events = sum(b.num_rows for table, b in decode_xspace(data, source=str(path)) if table == "events")
                decode.append(time.perf_counter() - start)
                start = time.perf_counter()
                xprosql.ingest(path, into=Path(tmp) / f"run{i}")
                ingest.append(time.perf_counter() - start)
        print(
            f"{path.name}: {n_events} events, {len(data) / 1e6:.1f} MB | xprof events_db {xprof:.3f} s | "
            f"xprosql decode {min(decode):.3f} s, ingest {min(ingest):.3f} s | "
            f"ingest / xprof = {min(ingest) / xprof:.1f}x"
        )


if __name__ == "__main__":
    main()
