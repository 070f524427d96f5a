"""Real multi-rank profiles written on this machine's CPU, with a known straggler, for tests.

Each generator runs its ranks as subprocesses of this interpreter (as tests/wild_profiles.py does), so
the test process imports neither torch nor jax. Wrap them in session-scoped fixtures.

* :func:`make_ddp_straggler_profiles`: :data:`DDP_RANKS` ranks of PyTorch DistributedDataParallel on gloo
  (127.0.0.1), training the small MLP of wild_profiles under ``schedule(wait=1, warmup=1, active=4)``:
  the traces hold ``ProfilerStep#2..#5``. Every rank's forward sleeps :data:`DDP_BASE_S` (a stand-in for
  accelerator time: it keeps the step long against scheduling noise without using the 2 cores); rank
  :data:`DDP_SLOW_RANK` sleeps :data:`DDP_DELAY_S` more in the steps of :data:`DDP_DELAYED_STEPS`.
  ``delayed=False`` is the control run: the same program, no rank delayed.
* :func:`make_jax_straggler_profiles`: two JAX processes joined by ``jax.distributed.initialize`` on
  127.0.0.1 (CPU collectives over gloo), one device each, running a jitted ``shard_map`` step whose
  ``psum`` spans both processes: once outside the steps (so both start the steps together), then
  :data:`JAX_STEPS` times inside ``StepTraceAnnotation``; process 1 sleeps :data:`JAX_DELAY_S` before
  each step. Each process profiles itself with
  ``jax.profiler.trace``; both write ``<hostname>.xplane.pb`` (one machine, one host name), so the
  generator moves them into one run folder as ``host0.xplane.pb`` and ``host1.xplane.pb``, the layout
  of a two-host run.
* :func:`shifted_kineto_copy`: a copy of a Kineto trace with every event time moved by a constant,
  the one hand-made input (a rank whose clock is off by a known amount: no real file says by how much).
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import sys
import textwrap
from pathlib import Path

from wild_profiles import _TORCH_TRAIN, _free_port, _require, run_gloo_ranks, run_together

__all__ = [
    "DDP_BASE_S",
    "DDP_DELAYED_STEPS",
    "DDP_DELAY_S",
    "DDP_RANKS",
    "DDP_SLOW_RANK",
    "DDP_STEPS",
    "JAX_DELAY_S",
    "JAX_STEPS",
    "make_ddp_straggler_profiles",
    "make_jax_straggler_profiles",
    "shifted_kineto_copy",
]

DDP_RANKS = 4
DDP_SCHEDULE = {"wait": 1, "warmup": 1, "active": 4}
DDP_STEPS: list[int] = [2, 3, 4, 5]          # the ProfilerStep#N the traces hold
# Long against the stalls of a shared 2-core host (tens of ms when other processes compete): see stragglers.sql.
DDP_BASE_S = 0.5
DDP_SLOW_RANK = 2
DDP_DELAY_S = 0.5
DDP_DELAYED_STEPS: list[int] = [3, 5]

_DDP_STRAGGLER_PROGRAM = _TORCH_TRAIN + textwrap.dedent(
    """
    import datetime
    import json
    import os
    import sys
    import time

    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    logdir, schedule, base_s = sys.argv[1], json.loads(sys.argv[2]), float(sys.argv[3])
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    delays = {int(step): s for step, s in json.loads(sys.argv[4]).get(str(rank), {}).items()}  # step -> s
    bucket_cap_mb = float(sys.argv[5])

    class Paced(nn.Module):
        # forward call i is step i (ProfilerStep#i): sleep base_s, plus this rank's delay in that step
        def __init__(self, inner):
            super().__init__()
            self.inner, self.calls = inner, 0

        def forward(self, x):
            time.sleep(base_s + delays.get(self.calls, 0.0))
            self.calls += 1
            return self.inner(x)

    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=60))
    try:
        torch.manual_seed(0)  # the same initial weights on every rank
        model = DistributedDataParallel(Paced(mlp()), bucket_cap_mb=bucket_cap_mb)
        train(model, logdir, f"rank{rank}", schedule, rank)
        dist.barrier()
    finally:
        dist.destroy_process_group()
    """
)


def make_ddp_straggler_profiles(logdir: Path, *, delayed: bool = True, base_s: float = DDP_BASE_S,
                                delay_s: float = DDP_DELAY_S, bucket_cap_mb: float = 25.0,
                                timeout_s: float = 150.0) -> list[Path]:
    """Run the 4-rank gloo DDP job of the module docstring (``delayed=False``: the control run); return the
    ranks' ``*.pt.trace.json``, rank 0 first. ``base_s`` and ``delay_s`` replace :data:`DDP_BASE_S` and
    :data:`DDP_DELAY_S`; a ``bucket_cap_mb`` below the model's 0.4 MB of gradients splits each step's all-reduce
    into several (DDP's default, 25 MB, makes one), so the straggler arrives last at several collectives a step.

    Example:
        >>> make_ddp_straggler_profiles(tmp_path / "ddp")       # doctest: +SKIP
        [PosixPath('.../rank0.1700000000000.pt.trace.json'), ...]
    """
    _require("torch", "torch==2.13.0")
    # Each rank reads its own delays (step -> s) from one argument: one program text for every rank.
    delays = {str(DDP_SLOW_RANK): {str(s): delay_s for s in DDP_DELAYED_STEPS}} if delayed else {}
    return run_gloo_ranks(_DDP_STRAGGLER_PROGRAM, [json.dumps(DDP_SCHEDULE), str(base_s), json.dumps(delays),
                                                   str(bucket_cap_mb)],
                          Path(logdir), DDP_RANKS, label="gloo DDP straggler", timeout_s=timeout_s)


JAX_STEPS = 4
JAX_DELAY_S = 0.3
JAX_STEP_NAME = "train"

_JAX_STRAGGLER_PROGRAM = textwrap.dedent(
    """
    import sys
    import time
    from functools import partial
    from pathlib import Path

    import jax

    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    logdir, port, pid = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    steps, delay_s, name = int(sys.argv[4]), float(sys.argv[5]), sys.argv[6]
    jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=2, process_id=pid)

    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import NamedSharding, PartitionSpec as P

    assert jax.device_count() == 2, jax.devices()
    mesh = jax.make_mesh((2,), ("x",))

    @jax.jit
    @partial(jax.shard_map, mesh=mesh, in_specs=P("x"), out_specs=P())
    def train_step(x):
        h = jnp.tanh(x @ x.T)
        return jax.lax.psum(jnp.sum(h, axis=0)[None], "x")   # an all-reduce across the two processes

    local = np.random.default_rng(pid).standard_normal((64, 64), dtype=np.float32)
    x = jax.make_array_from_process_local_data(NamedSharding(mesh, P("x")), local)
    jax.block_until_ready(train_step(x))  # compile outside the trace
    with jax.profiler.trace(str(logdir)):
        jax.block_until_ready(train_step(x))  # both processes in step before the first step (outside the steps)
        for i in range(steps):
            if pid == 1:
                time.sleep(delay_s)  # host 1 is late to every step
            with jax.profiler.StepTraceAnnotation(name, step_num=i):
                jax.block_until_ready(train_step(x))
    jax.distributed.shutdown()
    """
)


def make_jax_straggler_profiles(logdir: Path, *, timeout_s: float = 180.0) -> list[Path]:
    """Run the two-process JAX job of the module docstring; return ``host0.xplane.pb`` and ``host1.xplane.pb``
    of its one run folder ``logdir/plugins/profile/<run>/``.

    Example:
        >>> make_jax_straggler_profiles(tmp_path / "jax")       # doctest: +SKIP
        [PosixPath('.../plugins/profile/2025_01_01_00_00_00/host0.xplane.pb'), ...]
    """
    _require("jax", "jax")
    logdir = Path(logdir)
    logdir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    env.pop("XLA_FLAGS", None)
    port = str(_free_port())
    commands = [[sys.executable, "-c", _JAX_STRAGGLER_PROGRAM, str(logdir / f"process{pid}"), port, str(pid),
                 str(JAX_STEPS), str(JAX_DELAY_S), JAX_STEP_NAME] for pid in range(2)]
    errors = run_together(commands, [env, env], timeout_s=timeout_s, member="process")
    if errors:
        raise RuntimeError("JAX two-process program: " + "\n".join(errors))
    written = [sorted((logdir / f"process{pid}").glob("plugins/profile/*/*.xplane.pb")) for pid in range(2)]
    if any(len(w) != 1 for w in written):
        raise RuntimeError(f"expected one *.xplane.pb per process under {logdir}, found {written}")
    run = logdir / "plugins" / "profile" / written[0][0].parent.name
    run.mkdir(parents=True, exist_ok=True)
    out = []
    for pid, (path,) in enumerate(written):
        target = run / f"host{pid}.xplane.pb"
        shutil.move(str(path), target)
        out.append(target)
    for pid in range(2):
        shutil.rmtree(logdir / f"process{pid}")
    return out


def shifted_kineto_copy(source: Path, target: Path, shift_us: float) -> Path:
    """Write ``target``: the Kineto trace ``source`` with every event's ``ts`` moved by ``shift_us``
    microseconds (its clock off by that much); gzip when ``target`` ends with .gz."""
    opener = gzip.open if str(source).endswith(".gz") else open
    with opener(source, "rt") as f:
        trace = json.load(f)
    for event in trace["traceEvents"]:
        if isinstance(event.get("ts"), (int, float)):
            event["ts"] = event["ts"] + shift_us
    target.parent.mkdir(parents=True, exist_ok=True)
    writer = gzip.open if str(target).endswith(".gz") else open
    with writer(target, "wt") as f:
        json.dump(trace, f)
    return target
