"""Hostile inputs, as whole processes (what a user types): time and peak memory of `xprosql ingest` on each.

Wide events (one event with N args, N = 50k .. 400k: the time should grow linearly), a gzip bomb
(a few hundred kB that expand to GiB: refused at the limit, in bounded memory), and the same on the
per-event (reference) path. Run:

    python benchmarks/hostile_input.py            # prints a Markdown table
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path


def _wide(path: Path, n: int) -> Path:
    args = {f"arg{i}": i for i in range(n)}
    trace = {"schemaVersion": 1, "traceEvents": [
        {"ph": "X", "cat": "cpu_op", "name": "wide", "pid": 1, "tid": 1, "ts": 1.0, "dur": 2.0, "args": args},
        {"ph": "X", "cat": "cpu_op", "name": "narrow", "pid": 1, "tid": 1, "ts": 5.0, "dur": 1.0}]}
    path.write_text(json.dumps(trace))
    return path


def _bomb(path: Path, gib: int) -> Path:
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
    with open(path, "wb") as file:
        file.write(compressor.compress(b'{"schemaVersion": 1, "traceEvents": ['))
        chunk = b" " * (1 << 20)
        for _ in range(gib << 10):
            file.write(compressor.compress(chunk))
        file.write(compressor.flush())
    return path


def _run(path: Path, into: Path, env: dict[str, str]) -> tuple[float, float, int]:
    """(seconds, peak RSS MiB, exit status) of one `xprosql ingest` process."""
    start = time.perf_counter()
    process = subprocess.Popen([sys.executable, "-m", "xprosql.cli", "ingest", str(path), "--into", str(into), "-q",
                                "--compact", "never"], env={**os.environ, **env}, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(process.pid, 0)
    seconds = time.perf_counter() - start
    return seconds, usage.ru_maxrss / 1024, os.waitstatus_to_exitcode(status)


def main() -> None:
    folder = Path(tempfile.mkdtemp(prefix="xprosql-hostile-"))
    _run(_wide(folder / "warm.json", 10), folder / "warm", {})  # the decoders compiled once, not timed
    print("| input | path | seconds | peak RSS MiB | exit |\n|---|---|---|---|---|")
    for n in (50_000, 100_000, 200_000, 400_000):
        path = _wide(folder / f"wide{n}.json", n)
        for label, env in (("columnar", {}), ("reference", {"XPROSQL_PURE_PYTHON": "1"})):
            seconds, peak, status = _run(path, folder / f"run-{n}-{label}", env)
            print(f"| one event, {n:,} args | {label} | {seconds:.2f} | {peak:.0f} | {status} |")
    bomb = _bomb(folder / "bomb.json.gz", 2)
    seconds, peak, status = _run(bomb, folder / "run-bomb", {})
    size = bomb.stat().st_size / 2**20
    print(f"| gzip bomb: {size:.1f} MiB expanding to 2 GiB, default limit (half the free memory) | columnar | "
          f"{seconds:.2f} | {peak:.0f} | {status} |")
    seconds, peak, status = _run(bomb, folder / "run-bomb2", {"XPROSQL_MAX_TRACE_BYTES": str(256 << 20)})
    print(f"| the same bomb, XPROSQL_MAX_TRACE_BYTES = 256 MiB | columnar | {seconds:.2f} | {peak:.0f} | {status} |")


if __name__ == "__main__":
    main()
