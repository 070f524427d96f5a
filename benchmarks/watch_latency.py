"""Continuous profiling: how long a profile takes from landing in a log directory to being queryable, and what the
watcher costs while it waits.

Run: python benchmarks/watch_latency.py [--profiles 40] [--period 3] [--idle 60] [--work DIR]

A real JAX (CPU) training job first writes ``--profiles`` snapshots aside (one ``jax.profiler`` trace every few
steps, each its own log directory). Then ``xprosql watch`` runs as a process on an empty directory while this script
plays an hour of a job that profiles every ``--simulated-period`` seconds (default 90: 40 snapshots in an hour),
compressed in time: a snapshot lands every ``--period`` seconds, written as XProf writes it (open, one write, close)
under ``plugins/profile/<run>/<host>.xplane.pb``. Then nothing lands for ``--idle`` seconds.

Measured, with the machine's clock:

* latency: from the file's close to the first moment ``Warehouse.profile_ids()`` lists its profile (this script
  watches the ``profiles`` table's Delta log, a stat every 10 ms, and reads the ids when it changes): the rows are
  queryable then (a snapshot pins them). The watcher runs its anomaly check after the commit, so it does not count
  here, except when a file lands while the check of the one before runs;
* the watcher's CPU time (``/proc/<pid>/stat`` utime + stime) while no file is landing: the idle stretch at the end,
  and between files once the last one is committed;
* its resident memory (``VmRSS``) over the stream: after the first profile, the largest, and at the end.

Linux only (``/proc``). Prints one JSON object at the end and a line per profile on the way.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from xprosql.warehouse import Warehouse

_SNAPSHOTS = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    import jax, jax.numpy as jnp, numpy as np

    out, snapshots = Path(sys.argv[1]), int(sys.argv[2])

    @jax.jit
    def train_step(w, x):
        loss, grad = jax.value_and_grad(lambda w: jnp.mean(jnp.tanh(x @ w) ** 2))(w)
        return w - 0.01 * grad, loss

    rng = np.random.default_rng(0)
    w = rng.standard_normal((512, 512), dtype=np.float32)
    x = rng.standard_normal((512, 512), dtype=np.float32)
    jax.block_until_ready(train_step(w, x))
    step = 0
    for snapshot in range(snapshots):
        jax.profiler.start_trace(str(out / f"s{snapshot:04d}"))
        for _ in range(4):
            with jax.profiler.StepTraceAnnotation("train", step_num=step):
                w, loss = train_step(w, x)
                jax.block_until_ready(loss)
            step += 1
        jax.profiler.stop_trace()
    """
)


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def _profile_id(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()[:16]


def _generate(out: Path, count: int) -> list[Path]:
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    env.pop("XLA_FLAGS", None)
    subprocess.run([sys.executable, "-c", _SNAPSHOTS, str(out), str(count)], env=env, check=True, timeout=1800)
    files = sorted(out.glob("s*/plugins/profile/*/*.xplane.pb"))
    assert len(files) == count, files
    return files


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profiles", type=int, default=40, help="snapshots in the simulated hour")
    parser.add_argument("--period", type=float, default=3.0, help="seconds between snapshots, compressed")
    parser.add_argument("--simulated-period", type=float, default=90.0, help="seconds between snapshots it stands for")
    parser.add_argument("--idle", type=float, default=60.0, help="seconds of nothing landing at the end")
    parser.add_argument("--work", type=Path, help="working directory (default: a temporary one)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = args.work or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        started = time.perf_counter()
        sources = _generate(work / "snapshots", args.profiles)
        print(f"{len(sources)} JAX snapshots generated in {time.perf_counter() - started:.1f} s", flush=True)
        logdir, into = work / "logdir", work / "run"
        logdir.mkdir()
        command = [str(Path(sys.executable).with_name("xprosql")), "watch", str(logdir), "--into", str(into),
                   "--tag", "job=bench"]
        watcher = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        assert watcher.stderr is not None
        for line in watcher.stderr:  # its handlers are set once it says so
            if line.startswith("watching "):
                break
        log = into / "profiles" / "_delta_log"
        latencies: list[float] = []
        between_cpu, between_s = 0.0, 0.0
        rss: list[int] = []
        try:
            for index, source in enumerate(sources):
                data = source.read_bytes()
                target = logdir / "plugins" / "profile" / f"run_{index:04d}" / "host.xplane.pb"
                target.parent.mkdir(parents=True)
                due = started_at = time.monotonic()
                with open(target, "wb") as handle:
                    handle.write(data)
                landed = time.monotonic()
                wanted = _profile_id(data)
                last_mtime = None
                while True:
                    try:
                        mtime = log.stat().st_mtime_ns
                    except FileNotFoundError:
                        mtime = None
                    if mtime != last_mtime:
                        last_mtime = mtime
                        if mtime is not None and wanted in Warehouse(into).profile_ids():
                            break
                    if time.monotonic() - landed > 300:
                        raise TimeoutError(f"{target} not queryable after 300 s")
                    time.sleep(0.01)
                latencies.append(time.monotonic() - landed)
                rss.append(_rss_bytes(watcher.pid))
                print(f"profile {index + 1}/{len(sources)}: queryable {latencies[-1]:.3f} s after it landed, "
                      f"watcher RSS {rss[-1] / 2**20:.0f} MiB", flush=True)
                # Between files: let the watcher finish (its anomaly check), then count its CPU until the next lands.
                time.sleep(min(1.5, args.period / 2))
                quiet_from, cpu_from = time.monotonic(), _cpu_seconds(watcher.pid)
                time.sleep(max(0.0, started_at + args.period - time.monotonic()))
                between_cpu += _cpu_seconds(watcher.pid) - cpu_from
                between_s += time.monotonic() - quiet_from
                del due
            time.sleep(5.0)  # the last anomaly check
            cpu_from, idle_from = _cpu_seconds(watcher.pid), time.monotonic()
            rss_idle_start = _rss_bytes(watcher.pid)
            time.sleep(args.idle)
            idle_cpu = _cpu_seconds(watcher.pid) - cpu_from
            idle_s = time.monotonic() - idle_from
            rss_end = _rss_bytes(watcher.pid)
        finally:
            watcher.send_signal(signal.SIGTERM)
            watcher.wait(120)
        ordered = sorted(latencies)
        result = {
            "profiles": len(sources),
            "period_s": args.period,
            "simulated_hours": len(sources) * args.simulated_period / 3600,
            "file_bytes_median": statistics.median(s.stat().st_size for s in sources),
            "latency_s": {"median": statistics.median(ordered), "p90": ordered[int(0.9 * (len(ordered) - 1))],
                          "max": ordered[-1], "min": ordered[0]},
            "between_files_cpu_share": between_cpu / between_s if between_s else None,
            "idle_cpu_share": idle_cpu / idle_s,
            "idle_s": idle_s,
            "rss_mib": {"after_first": rss[0] / 2**20, "max": max(rss) / 2**20, "first_10_median":
                        statistics.median(rss[:10]) / 2**20, "last_10_median": statistics.median(rss[-10:]) / 2**20,
                        "idle_start": rss_idle_start / 2**20, "end": rss_end / 2**20},
            "watcher_exit": watcher.returncode,
        }
        print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
