"""Build large XSpace files from a real sample: its events replicated with shifted times.

Run: python benchmarks/make_large_xspace.py SAMPLE.xplane.pb OUT.xplane.pb --copies 40
Each line's events are repeated COPIES times; copy k is shifted by k times the
sample's time span (host clock and the TPU ops' device_offset_ps stat alike), so the
result looks like a long run of the same program
(same planes, metadata, stats and HLO). 40 copies of the TPU v6e sample give
1.07 million events in about 30 MB; 200 copies 5.3 million events.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from xprosql.protos import xplane_pb2


def replicate(data: bytes, copies: int) -> bytes:
    space = xplane_pb2.XSpace()
    space.ParseFromString(data)
    starts = [line.timestamp_ns * 1000 + e.offset_ps for p in space.planes for line in p.lines for e in line.events]
    ends = [line.timestamp_ns * 1000 + e.offset_ps + e.duration_ps
            for p in space.planes for line in p.lines for e in line.events]
    span = max(ends) - min(starts) + 1_000_000
    for plane in space.planes:
        # TPU ops carry their device-clock start as a stat: it moves with the copy, as in a longer run.
        device_offset = {sid for sid, m in plane.stat_metadata.items() if m.name == "device_offset_ps"}
        for line in plane.lines:
            original = list(line.events)
            for k in range(1, copies):
                for event in original:
                    copy = line.events.add()
                    copy.CopyFrom(event)
                    if copy.WhichOneof("data") == "offset_ps":
                        copy.offset_ps = event.offset_ps + k * span
                    for stat in copy.stats:
                        if stat.metadata_id in device_offset:
                            field = stat.WhichOneof("value")
                            setattr(stat, field, getattr(stat, field) + k * span)
    return space.SerializeToString()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sample", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--copies", type=int, default=40)
    args = parser.parse_args()
    args.out.write_bytes(replicate(args.sample.read_bytes(), args.copies))
    print(f"{args.out}: {args.out.stat().st_size / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
