"""Build large Kineto traces from a real one: its events replicated with shifted times.

Run: python benchmarks/make_large_kineto.py SAMPLE.json.gz OUT.json.gz --copies 25
Copy k of every timed event (X, i, s, t, f) is shifted by k times the trace's time
span; correlation, External id and flow ids are offset so that each copy keeps its
own launch-to-kernel links. Metadata (M) events and top-level fields are kept once.
"""

from __future__ import annotations

import argparse
import gzip
import json
from pathlib import Path


def replicate(data: bytes, copies: int) -> bytes:
    trace = json.loads(gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data)
    events = trace["traceEvents"]
    timed = [e for e in events if e.get("ph") != "M" and isinstance(e.get("ts"), (int, float))]
    span = max(e["ts"] + e.get("dur", 0) for e in timed) - min(e["ts"] for e in timed) + 1.0
    ids = [e["args"][k] for e in timed for k in ("correlation", "External id")
           if isinstance(e.get("args", {}).get(k), int)] + [e["id"] for e in timed if isinstance(e.get("id"), int)]
    id_step = max(ids, default=0) + 1
    out = list(events)
    for k in range(1, copies):
        for event in timed:
            copy = dict(event, ts=event["ts"] + k * span)
            if isinstance(copy.get("id"), int):
                copy["id"] += k * id_step
            if "args" in copy:
                copy["args"] = dict(copy["args"])
                for key in ("correlation", "External id"):
                    if isinstance(copy["args"].get(key), int):
                        copy["args"][key] += k * id_step
            out.append(copy)
    trace["traceEvents"] = out
    return gzip.compress(json.dumps(trace).encode(), compresslevel=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sample", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--copies", type=int, default=25)
    args = parser.parse_args()
    args.out.write_bytes(replicate(args.sample.read_bytes(), args.copies))
    print(f"{args.out}: {args.out.stat().st_size / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
