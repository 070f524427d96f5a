"""Build a large rocprofv3 JSON from a real one: its kernel dispatches replicated with shifted times.

Run: python benchmarks/make_large_rocprof.py SAMPLE.json.gz OUT.json --size-mb 1024
Copy k of every kernel_dispatch record is shifted by k times the run's window (init_time to
fini_time), its correlation and dispatch ids offset so that every copy keeps ids of its own;
``fini_time`` moves to the end of the last copy. Every other section (agents, kernel symbols,
strings, ...) is kept once, as rocprofv3 writes it. The output is written as it is made
(compact JSON like rocprofv3's; gzipped when OUT ends in .gz), never held whole.
"""

from __future__ import annotations

import argparse
import gzip
import json
from pathlib import Path
from typing import IO, Any

_PLACEHOLDER = "__xprosql_kernel_dispatch__"


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def write_large(sample: Path, out: IO[bytes], *, size_bytes: int = 0, copies: int = 0) -> tuple[int, int]:
    """Write the enlarged file to ``out``, with ``copies`` copies of the dispatches, else as many as make
    ``size_bytes`` of them: (copies, kernel dispatch records written)."""
    raw = sample.read_bytes()
    document = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    process = document["rocprofiler-sdk-tool"][0]
    records = process["buffer_records"]["kernel_dispatch"]
    metadata = process["metadata"]
    span = metadata["fini_time"] - metadata["init_time"]
    id_step = max(max(r["correlation_id"]["internal"], r["dispatch_info"]["dispatch_id"]) for r in records) + 1
    texts = [_compact(r) for r in records]
    per_copy = sum(len(t) + 1 for t in texts)
    copies = copies or max(1, size_bytes // per_copy)
    metadata["fini_time"] = metadata["init_time"] + copies * span
    process["buffer_records"]["kernel_dispatch"] = _PLACEHOLDER
    head, tail = _compact(document).split(f'"{_PLACEHOLDER}"')
    out.write(head.encode() + b"[")
    written = 0
    for k in range(copies):
        lines = []
        for record in records:
            copy = dict(record, start_timestamp=record["start_timestamp"] + k * span,
                        end_timestamp=record["end_timestamp"] + k * span,
                        correlation_id=dict(record["correlation_id"], internal=record["correlation_id"]["internal"] + k * id_step),
                        dispatch_info=dict(record["dispatch_info"], dispatch_id=record["dispatch_info"]["dispatch_id"] + k * id_step))
            lines.append(_compact(copy))
        out.write(("," if k else "").encode() + ",".join(lines).encode())
        written += len(lines)
    out.write(b"]" + tail.encode())
    return copies, written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sample", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--size-mb", type=float, default=1024, help="size of the kernel dispatch records to write, MiB")
    args = parser.parse_args()
    opener = gzip.open if args.out.name.endswith(".gz") else open
    with opener(args.out, "wb") as out:
        copies, written = write_large(args.sample, out, size_bytes=int(args.size_mb * 2**20))
    print(f"{args.out}: {args.out.stat().st_size / 1e6:.1f} MB, {copies} copies, {written:,} kernel dispatches")


if __name__ == "__main__":
    main()
