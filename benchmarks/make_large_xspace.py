"""Build large XSpace files from a real sample: its events replicated with shifted times.

Run: python benchmarks/make_large_xspace.py SAMPLE.xplane.pb OUT.xplane.pb --copies 40 [--line-copies N]
Each line's events are repeated COPIES times; copy k is shifted by k times the
sample's time span (host clock and the TPU ops' device_offset_ps stat alike), so the
result looks like a long run of the same program
(same planes, metadata, stats and HLO). 40 copies of the TPU v6e sample give
1.07 million events in about 30 MB; 200 copies 5.3 million events.

For files of gigabytes, ``--line-copies N`` then repeats each resulting line N
times, each copy's line timestamp shifted past the previous one (the events'
bytes are copied as they are, so device_offset_ps does not move with these), and
writes the file as it goes: ``--copies 40 --line-copies 63`` gives 2.0 GB and 67
million events without holding them in memory.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import BinaryIO

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


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _field_head(number: int, size: int) -> bytes:
    """The key and length of a length-delimited field: concatenated fields are what protobuf parses as one message."""
    return _varint(number << 3 | 2) + _varint(size)


def write_line_copies(data: bytes, out: BinaryIO, copies: int) -> None:
    """Write ``data`` with each line repeated ``copies`` times, each copy after the last in time."""
    space = xplane_pb2.XSpace()
    space.ParseFromString(data)
    rest = xplane_pb2.XSpace()
    rest.CopyFrom(space)
    del rest.planes[:]
    for plane in space.planes:
        bare = xplane_pb2.XPlane()
        bare.CopyFrom(plane)
        del bare.lines[:]
        pieces = [bare.SerializeToString()]
        # Copies follow each other on the plane's clock: shifted by the span of its events.
        ends = [line.timestamp_ns + (e.offset_ps + e.duration_ps) // 1000 for line in plane.lines for e in line.events]
        starts = [line.timestamp_ns + e.offset_ps // 1000 for line in plane.lines for e in line.events]
        shift_ns = max(ends, default=0) - min(starts, default=0) + 1_000
        for line in plane.lines:
            events = xplane_pb2.XLine(events=line.events).SerializeToString()  # XLine.events, as bytes once
            head = xplane_pb2.XLine()
            head.CopyFrom(line)
            del head.events[:]
            for k in range(copies):
                head.timestamp_ns = line.timestamp_ns + k * shift_ns
                fields = head.SerializeToString()
                pieces += [_field_head(3, len(fields) + len(events)), fields, events]  # XPlane.lines
        out.write(_field_head(1, sum(map(len, pieces))))  # XSpace.planes
        out.writelines(pieces)
    out.write(rest.SerializeToString())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sample", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--copies", type=int, default=40)
    parser.add_argument("--line-copies", type=int, default=1)
    args = parser.parse_args()
    replicated = replicate(args.sample.read_bytes(), args.copies)
    with args.out.open("wb") as out:
        if args.line_copies > 1:
            write_line_copies(replicated, out, args.line_copies)
        else:
            out.write(replicated)
    print(f"{args.out}: {args.out.stat().st_size / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
