"""Build a fleet of N realistic profiles from the real samples in tests/data.

Run: python benchmarks/make_corpus.py --n 1000 --out /tmp/corpus [--seed 0] [--jobs 2]

Every profile is a real sample re-serialized with other values, so each has its
own content (and so its own profile id):

* XSpace (``xprosql/protos/xplane_pb2``): every line's ``timestamp_ns`` shifted
  so the profile starts at its place on the fleet's timeline, the Task
  Environment ``profile_start_time`` / ``profile_stop_time`` stats shifted the
  same, another host name (the file name, as XProf writes ``<host>.xplane.pb``;
  ``hostnames`` set where the sample has them). ``--scale K`` repeats each
  line's events K times, one copy after the other (scaled event counts).
* Kineto JSON: every ``ts`` shifted, ``distributedInfo.rank`` set to the host's
  index in its run, ``baseTimeNanoseconds`` shifted, gzip again.

The fleet: ``--jobs-in-fleet`` jobs (default 20), each training one model (one
sample kind) on 10 hosts, with runs of 10 profiles; a new commit every run.
Each job directory has an ``xprosql.json`` with its ``job`` and ``model`` tags,
each run directory one with its ``commit`` and ``run`` tags::

    <out>/<job>/xprosql.json                  {"tags": {"job": "job07", "model": "tpu_v6e_inference"}}
    <out>/<job>/<run>/xprosql.json            {"tags": {"commit": "c07-3", "run": "3"}}
    <out>/<job>/<run>/<host>.xplane.pb | <host>.json.gz

Injected regression, for the fleet queries to find: in every fourth job, from
run 3 on, the longest op (TPU: the XLA op with the most time; GPU and Kineto: the
kernel with the most time) runs 30% longer.

The sample mix (by default 40% TPU v6e XSpace, 28% V100 XSpace, 30% A100 Kineto,
2% two-rank Kineto) averages about 25,000 events a profile: 1,000 profiles hold
about 25 million events. The output is the same for the same arguments.
"""

from __future__ import annotations

import argparse
import gzip
import json
import multiprocessing
import random
import time
from pathlib import Path

from xprosql.protos import xplane_pb2

SHARED = Path(__file__).resolve().parents[1] / "tests" / "data"
SAMPLES = {
    "tpu_v6e_inference": (SHARED / "xspace" / "tpu_v6e_inference.xplane.pb", 0.40),
    "gpu_v100_tf_bert": (SHARED / "xspace" / "gpu_v100_tf_bert.xplane.pb", 0.28),
    "a100_nccl": (SHARED / "kineto" / "a100_nccl_rank0.json.gz", 0.30),
    "sampled": (SHARED / "kineto" / "sampled_rank0.json.gz", 0.02),
}
HOSTS_PER_RUN = 10
PROFILES_PER_RUN = 10
REGRESSION_FACTOR = 1.3
BASE_TIME_NS = 1_750_000_000 * 10**9  # mid 2025
RUN_SPACING_NS = 3600 * 10**9
JOB_SPACING_NS = 7 * 24 * 3600 * 10**9 // 20

_cache: dict[str, object] = {}


def _xspace(sample: str) -> bytes:
    if sample not in _cache:
        _cache[sample] = SAMPLES[sample][0].read_bytes()
    return _cache[sample]  # type: ignore[return-value]


def _slowest(space: xplane_pb2.XSpace) -> tuple[set[int], str]:
    """The event name with the most time on device op lines (XLA Ops, GPU streams)."""
    totals: dict[str, int] = {}
    for plane in space.planes:
        if not plane.name.startswith("/device:"):
            continue
        for line in plane.lines:
            if line.name == "XLA Ops" or line.name.startswith("Stream #"):
                for event in line.events:
                    name = plane.event_metadata[event.metadata_id].name
                    totals[name] = totals.get(name, 0) + event.duration_ps
    return set(), max(totals, key=totals.__getitem__) if totals else ""


def make_xspace(sample: str, *, host: str, start_ns: int, scale: int, regress: bool) -> bytes:
    space = xplane_pb2.XSpace()
    space.ParseFromString(_xspace(sample))
    if space.hostnames:
        del space.hostnames[:]
        space.hostnames.append(host)
    starts = [line.timestamp_ns for plane in space.planes for line in plane.lines if line.events]
    shift = start_ns - min(starts)
    _, slow_name = _slowest(space) if regress else (set(), "")
    for plane in space.planes:
        slow_ids = {i for i, m in plane.event_metadata.items() if m.name == slow_name} if slow_name else set()
        # TPU ops also carry their device-clock duration, which the analyses prefer: scale it too.
        device_duration = {i for i, m in plane.stat_metadata.items() if m.name == "device_duration_ps"}
        for line in plane.lines:
            line.timestamp_ns += shift
            if slow_ids:
                for event in line.events:
                    if event.metadata_id in slow_ids:
                        event.duration_ps = int(event.duration_ps * REGRESSION_FACTOR)
                        for stat in event.stats:
                            if stat.metadata_id in device_duration and stat.WhichOneof("value") in ("uint64_value", "int64_value"):
                                field = stat.WhichOneof("value")
                                setattr(stat, field, int(getattr(stat, field) * REGRESSION_FACTOR))
            if scale > 1 and line.events:
                span = max(e.offset_ps + e.duration_ps for e in line.events) - min(e.offset_ps for e in line.events)
                originals = list(line.events)
                for k in range(1, scale):
                    for event in originals:
                        copy = line.events.add()
                        copy.CopyFrom(event)
                        copy.offset_ps = event.offset_ps + k * (span + 1_000_000)
        names = {i: m.name for i, m in plane.stat_metadata.items()}
        for stat in plane.stats:
            if names.get(stat.metadata_id) in ("profile_start_time", "profile_stop_time"):
                field = stat.WhichOneof("value")
                if field in ("uint64_value", "int64_value"):
                    setattr(stat, field, getattr(stat, field) + shift)
    return space.SerializeToString()


def make_kineto(sample: str, *, rank: int, start_ns: int, regress: bool) -> bytes:
    if sample not in _cache:
        _cache[sample] = gzip.decompress(SAMPLES[sample][0].read_bytes())
    trace = json.loads(_cache[sample])  # type: ignore[arg-type]
    events = trace["traceEvents"]
    starts = [e["ts"] for e in events if isinstance(e.get("ts"), (int, float)) and e.get("ph") == "X"]
    shift_us = start_ns / 1000 - min(starts)
    slow = ""
    if regress:
        totals: dict[str, float] = {}
        for e in events:
            if e.get("cat") == "kernel":
                totals[e["name"]] = totals.get(e["name"], 0) + e.get("dur", 0)
        slow = max(totals, key=totals.__getitem__) if totals else ""
    for e in events:
        if isinstance(e.get("ts"), (int, float)):
            e["ts"] = round(e["ts"] + shift_us, 3)
        if slow and e.get("cat") == "kernel" and e.get("name") == slow:
            e["dur"] = round(e["dur"] * REGRESSION_FACTOR, 3)
    if isinstance(trace.get("distributedInfo"), dict):
        trace["distributedInfo"]["rank"] = rank
    if isinstance(trace.get("baseTimeNanoseconds"), int):
        trace["baseTimeNanoseconds"] += int(shift_us * 1000)
    return gzip.compress(json.dumps(trace).encode(), compresslevel=1)


def plan(n: int, *, jobs: int, seed: int) -> list[dict[str, object]]:
    """What each profile is: job, run, host, sample, time, regression."""
    rng = random.Random(seed)
    names = list(SAMPLES)
    weights = [SAMPLES[s][1] for s in names]
    job_samples = [rng.choices(names, weights)[0] for _ in range(jobs)]
    # Keep the mix close to the weights whatever the job count: deal samples by weight.
    order = sorted(range(jobs), key=lambda j: rng.random())
    counts = [round(w * jobs) for w in weights]
    dealt = [name for name, c in zip(names, counts) for _ in range(c)]
    for j, name in zip(order, dealt):
        job_samples[j] = name
    items = []
    for i in range(n):
        job = i % jobs
        index_in_job = i // jobs
        run = index_in_job // PROFILES_PER_RUN
        host_index = index_in_job % HOSTS_PER_RUN
        items.append({
            "index": i,
            "job": f"job{job:02d}",
            "sample": job_samples[job],
            "run": run,
            "host": f"{job_samples[job].split('_')[0]}-j{job:02d}-h{host_index:02d}",
            "host_index": host_index,
            "start_ns": BASE_TIME_NS + job * JOB_SPACING_NS + run * RUN_SPACING_NS + host_index * 10**9,
            "regress": job % 4 == 0 and run >= 3,
        })
    return items


def _write(args: tuple[dict[str, object], str, int]) -> int:
    item, out, scale = args
    sample = str(item["sample"])
    directory = Path(out) / str(item["job"]) / f"run{int(item['run']):03d}"
    directory.mkdir(parents=True, exist_ok=True)
    if SAMPLES[sample][0].name.endswith(".xplane.pb"):
        data = make_xspace(sample, host=str(item["host"]), start_ns=int(item["start_ns"]), scale=scale, regress=bool(item["regress"]))
        path = directory / f"{item['host']}.xplane.pb"
    else:
        data = make_kineto(sample, rank=int(item["host_index"]), start_ns=int(item["start_ns"]), regress=bool(item["regress"]))
        path = directory / f"{item['host']}.json.gz"
    path.write_bytes(data)
    return len(data)


def build(out: Path, *, n: int, jobs_in_fleet: int = 20, seed: int = 0, scale: int = 1, processes: int = 2) -> list[dict[str, object]]:
    """Write the corpus; returns the plan (one dict per profile)."""
    items = plan(n, jobs=jobs_in_fleet, seed=seed)
    out.mkdir(parents=True, exist_ok=True)
    for item in items:
        job_dir = out / str(item["job"])
        run_dir = job_dir / f"run{int(item['run']):03d}"
        run_dir.mkdir(parents=True, exist_ok=True)
        (job_dir / "xprosql.json").write_text(json.dumps({"tags": {"job": item["job"], "model": item["sample"]}}))
        (run_dir / "xprosql.json").write_text(json.dumps({"tags": {"commit": f"c{str(item['job'])[3:]}-{item['run']}", "run": str(item["run"])}}))
    work = [(item, str(out), scale) for item in items]
    if processes > 1:
        with multiprocessing.get_context("spawn").Pool(processes) as pool:
            list(pool.imap_unordered(_write, work, chunksize=4))
    else:
        for w in work:
            _write(w)
    return items


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1000, help="profiles to make")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--jobs-in-fleet", type=int, default=20, help="training jobs the profiles belong to")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--scale", type=int, default=1, help="repeat each XSpace line's events this many times")
    parser.add_argument("--processes", type=int, default=2)
    args = parser.parse_args()
    start = time.perf_counter()
    items = build(args.out, n=args.n, jobs_in_fleet=args.jobs_in_fleet, seed=args.seed, scale=args.scale, processes=args.processes)
    size = sum(p.stat().st_size for p in args.out.rglob("*") if p.is_file())
    print(f"{len(items)} profiles, {size / 1e9:.2f} GB in {args.out} ({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
