"""Real profiles of the kinds users bring, written on this machine's CPU, for tests.

Each generator runs its program in a subprocess with this interpreter, so the test
process never imports jax or torch (slow, and jax would pin XLA flags for every
other test). Wrap them in session-scoped fixtures: one profile serves all tests.
Every generator takes a directory, writes there, and returns the paths of the
profile files it wrote; it raises :class:`ProfileToolMissing` when jax / torch is
not installed and RuntimeError (with the subprocess's stderr) when the program fails.

What each profile holds (known from the programs below):

* :func:`make_jax_sharded_profile`: an XSpace of JAX on 8 host CPU devices
  (``--xla_force_host_platform_device_count=8``): a jitted ``jax.shard_map``
  step over a 1-D mesh ``("x",)`` of 8 devices with a matmul, a ``lax.scan``
  loop, and the collectives psum (all-reduce), all_gather, ppermute
  (collective-permute) and all_to_all; run :data:`JAX_SHARDED_STEPS` times, step
  ``i`` inside ``jax.profiler.StepTraceAnnotation(JAX_SHARDED_STEP_NAME, step_num=i)``,
  with :data:`JAX_SHARDED_GAP_S` of host time between two steps, outside the annotations.
* :func:`make_torch_training_profile`: a Kineto trace of a small MLP trained with
  SGD on the CPU, under ``torch.profiler.profile`` with
  ``schedule(wait=1, warmup=1, active=3)`` and the TensorBoard trace handler:
  the trace holds ``ProfilerStep#2..#4`` (:data:`TORCH_ACTIVE_STEPS`).
* :func:`make_gloo_ddp_profiles`: one Kineto trace per rank of a 2-rank
  DistributedDataParallel run on gloo (127.0.0.1, a free port), each with the
  same schedule and steps as above and gloo all-reduces in each step.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

__all__ = [
    "DDP_WORLD_SIZE",
    "JAX_SHARDED_DEVICES",
    "JAX_SHARDED_GAP_S",
    "JAX_SHARDED_MODULE",
    "JAX_SHARDED_STEPS",
    "JAX_SHARDED_STEP_NAME",
    "TORCH_ACTIVE_STEPS",
    "TORCH_SCHEDULE",
    "ProfileToolMissing",
    "make_gloo_ddp_profiles",
    "make_jax_sharded_profile",
    "make_torch_training_profile",
    "run_gloo_ranks",
]


class ProfileToolMissing(RuntimeError):
    """The framework a generator needs (jax, torch) is not installed in this interpreter."""


def _require(module: str, extra: str) -> None:
    if importlib.util.find_spec(module) is None:
        raise ProfileToolMissing(
            f"{module} is not installed in {sys.executable}: cannot generate this profile "
            f"(install the test extra, which pins {extra})"
        )


def _run(program: str, args: list[str], *, label: str, timeout_s: float, env: dict[str, str] | None = None) -> None:
    """Run ``program`` with this interpreter in a new process group; kill the whole group on timeout."""
    proc = subprocess.Popen([sys.executable, "-c", program, *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        _, stderr = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        _, stderr = proc.communicate()
        raise RuntimeError(f"{label} program timed out after {timeout_s:g} s:\n{(stderr or '')[-4000:]}") from None
    finally:
        if proc.poll() is None:
            _kill_group(proc)
    if proc.returncode != 0:
        raise RuntimeError(f"{label} program failed (rc={proc.returncode}):\n{stderr[-4000:]}")


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the process group ``proc`` leads (it and the workers it spawned), then reap it."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def _new_files(logdir: Path, pattern: str, before: set[Path]) -> list[Path]:
    """Files matching ``pattern`` under ``logdir`` that were not there ``before``."""
    return sorted(set(logdir.glob(pattern)) - before)


# --- a. JAX: a sharded transformer-like step on 8 host devices ---------------------------------

JAX_SHARDED_DEVICES = 8
JAX_SHARDED_STEPS = 5
JAX_SHARDED_STEP_NAME = "train"
# Host time after each step, outside its annotation (the host preparing the next batch): it belongs
# to no step, so a step ending at the next one's start is this much too long.
JAX_SHARDED_GAP_S = 0.002
# Module name JAX gives the jitted step.
JAX_SHARDED_MODULE = "jit_train_step"

_JAX_SHARDED_PROGRAM = textwrap.dedent(
    """
    import sys
    import time
    from functools import partial
    from pathlib import Path

    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax import lax
    from jax.sharding import NamedSharding, PartitionSpec as P

    logdir, steps, name, n = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
    gap_s = float(sys.argv[5])
    assert jax.device_count() == n, jax.devices()
    mesh = jax.make_mesh((n,), ("x",))
    ring = [(i, (i + 1) % n) for i in range(n)]

    @partial(jax.shard_map, mesh=mesh, in_specs=(P("x", None), P(None, "x"), P()), out_specs=(P("x", None), P()))
    def block(x, w, wr):
        # x: [tokens/n, d] (data parallel), w: [d, d/n] (tensor parallel), wr: [d, d] replicated
        full_w = lax.all_gather(w, "x", axis=1, tiled=True)          # all-gather
        h = jnp.tanh(x @ full_w)                                     # matmul

        def layer(carry, _):                                         # a scan loop: a while op
            return jax.nn.relu(carry @ wr) * 0.5 + carry, None
        h, _ = lax.scan(layer, h, None, length=3)
        h = lax.all_to_all(h, "x", split_axis=1, concat_axis=1, tiled=True)  # all-to-all
        h = h + lax.ppermute(h, "x", perm=ring)                     # collective-permute
        loss = lax.psum(jnp.mean(h * h), "x")                        # all-reduce
        return h, loss

    @jax.jit
    def train_step(x, w, wr):
        h, loss = block(x, w, wr)
        return h, loss

    rng = np.random.default_rng(0)
    d, tokens = 64, 256
    x = jax.device_put(rng.standard_normal((tokens, d), dtype=np.float32), NamedSharding(mesh, P("x", None)))
    w = jax.device_put(rng.standard_normal((d, d), dtype=np.float32) / 8, NamedSharding(mesh, P(None, "x")))
    wr = jax.device_put(rng.standard_normal((d, d), dtype=np.float32) / 8, NamedSharding(mesh, P()))
    jax.block_until_ready(train_step(x, w, wr))  # compile outside the trace
    with jax.profiler.trace(str(logdir)):
        for i in range(steps):
            with jax.profiler.StepTraceAnnotation(name, step_num=i):
                h, loss = train_step(x, w, wr)
                jax.block_until_ready(loss)
            time.sleep(gap_s)  # the host between two steps, outside both annotations
    (logdir / "train_step.hlo.txt").write_text(train_step.lower(x, w, wr).compile().as_text())
    """
)


def make_jax_sharded_profile(logdir: Path, *, steps: int = JAX_SHARDED_STEPS, timeout_s: float = 180.0) -> Path:
    """Profile the sharded step of the module docstring on 8 host CPU devices, ``steps`` times
    (steps numbered 0 .. steps - 1); return its ``*.xplane.pb``.

    Writes ``logdir/plugins/profile/<run>/<host>.xplane.pb`` and, beside the run
    folders, ``train_step.hlo.txt`` (XLA's text of the compiled module).

    Example:
        >>> make_jax_sharded_profile(tmp_path / "sharded")        # doctest: +SKIP
        PosixPath('.../plugins/profile/2025_01_01_00_00_00/host.xplane.pb')
    """
    _require("jax", "jax")
    logdir = Path(logdir)
    logdir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, JAX_PLATFORMS="cpu",
               XLA_FLAGS=f"--xla_force_host_platform_device_count={JAX_SHARDED_DEVICES}")
    before = set(logdir.rglob("*"))
    _run(_JAX_SHARDED_PROGRAM,
         [str(logdir), str(steps), JAX_SHARDED_STEP_NAME, str(JAX_SHARDED_DEVICES), str(JAX_SHARDED_GAP_S)],
         label="JAX sharded", timeout_s=timeout_s, env=env)
    found = _new_files(logdir, "plugins/profile/*/*.xplane.pb", before)
    if len(found) != 1:
        raise RuntimeError(f"JAX wrote {len(found)} new *.xplane.pb under {logdir}, expected 1: {found}")
    return found[0]


# --- b. PyTorch: CPU training under a profiler schedule ----------------------------------------

# wait=1, warmup=1, active=3: the trace holds the steps numbered 2, 3 and 4.
TORCH_SCHEDULE = {"wait": 1, "warmup": 1, "active": 3}
TORCH_ACTIVE_STEPS: list[int] = [2, 3, 4]

# Shared by the single-process and the DDP programs: train(model, logdir, worker, schedule, seed), mlp().
_TORCH_TRAIN = textwrap.dedent(
    """
    import torch
    from torch import nn

    def train(model, logdir, worker, schedule, seed):
        torch.manual_seed(seed)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        loss_fn = nn.MSELoss()
        x, y = torch.randn(64, 128), torch.randn(64, 10)
        steps = schedule["wait"] + schedule["warmup"] + schedule["active"]
        with torch.profiler.profile(
            activities=[torch.profiler.ProfilerActivity.CPU],
            schedule=torch.profiler.schedule(**schedule),
            on_trace_ready=torch.profiler.tensorboard_trace_handler(logdir, worker_name=worker),
            record_shapes=True,
        ) as prof:
            for _ in range(steps):
                opt.zero_grad()
                loss = loss_fn(model(x), y)
                loss.backward()
                opt.step()
                prof.step()

    def mlp():
        return nn.Sequential(nn.Linear(128, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))
    """
)

_TORCH_PROGRAM = _TORCH_TRAIN + textwrap.dedent(
    """
    import json
    import sys

    torch.set_num_threads(1)
    train(mlp(), sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), 0)
    """
)


def make_torch_training_profile(logdir: Path, *, timeout_s: float = 120.0) -> list[Path]:
    """Profile a small MLP's SGD training on the CPU (see the module docstring); return the
    ``*.pt.trace.json`` written (one: the schedule runs one cycle).

    Example:
        >>> make_torch_training_profile(tmp_path / "torch")       # doctest: +SKIP
        [PosixPath('.../mlp.1700000000000.pt.trace.json')]
    """
    _require("torch", "torch==2.13.0")
    logdir = Path(logdir)
    logdir.mkdir(parents=True, exist_ok=True)
    before = set(logdir.rglob("*"))
    _run(_TORCH_PROGRAM, [str(logdir), "mlp", json.dumps(TORCH_SCHEDULE)], label="PyTorch training",
         timeout_s=timeout_s, env=_torch_env())
    found = _new_files(logdir, "mlp*.pt.trace.json", before)
    if not found:
        raise RuntimeError(f"PyTorch wrote no *.pt.trace.json under {logdir}")
    return found


def _torch_env() -> dict[str, str]:
    # One thread per process: fast and steady on a small machine, no oversubscription with 2 ranks.
    return dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="")


# --- c. PyTorch DDP: 2 ranks on gloo -----------------------------------------------------------

DDP_WORLD_SIZE = 2

_DDP_PROGRAM = _TORCH_TRAIN + textwrap.dedent(
    """
    import datetime
    import json
    import os
    import sys

    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    logdir, schedule = sys.argv[1], json.loads(sys.argv[2])
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=60))
    try:
        torch.manual_seed(0)  # the same initial weights on every rank
        model = DistributedDataParallel(mlp())
        train(model, logdir, f"rank{rank}", schedule, rank)
        dist.barrier()
    finally:
        dist.destroy_process_group()
    """
)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def make_gloo_ddp_profiles(logdir: Path, *, timeout_s: float = 120.0) -> list[Path]:
    """Run 2-rank DDP training on gloo, one subprocess per rank, each profiled with the
    TensorBoard handler; return the ranks' ``*.pt.trace.json`` (rank 0 first).

    Both ranks run in their own process group under one deadline: on a timeout or
    a failure of either, both are killed before this raises.

    Example:
        >>> make_gloo_ddp_profiles(tmp_path / "ddp")              # doctest: +SKIP
        [PosixPath('.../rank0.1700000000000.pt.trace.json'), PosixPath('.../rank1....pt.trace.json')]
    """
    _require("torch", "torch==2.13.0")
    return run_gloo_ranks(_DDP_PROGRAM, [json.dumps(TORCH_SCHEDULE)], Path(logdir), DDP_WORLD_SIZE,
                          label="gloo DDP", timeout_s=timeout_s)


def run_together(commands: list[list[str]], envs: list[dict[str, str]], *, timeout_s: float, member: str) -> list[str]:
    """Start one process per command (each in its own process group, stderr to a file so no pipe blocks it) and
    wait for all under one deadline; on a timeout or a failure of any, kill those left. Returns the errors, each
    naming the ``member`` (rank, process) by its index, with the end of its stderr."""
    errors: list[str] = []
    with contextlib.ExitStack() as stack:
        logs = [stack.enter_context(tempfile.TemporaryFile(mode="w+")) for _ in commands]
        procs = [subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=log, text=True, start_new_session=True)
                 for command, env, log in zip(commands, envs, logs)]
        deadline = time.monotonic() + timeout_s
        try:
            for index, proc in enumerate(procs):
                try:
                    proc.wait(timeout=max(deadline - time.monotonic(), 0.1))
                except subprocess.TimeoutExpired:
                    errors.append(f"{member} {index} timed out after {timeout_s:g} s")
                    break
                if proc.returncode != 0:
                    logs[index].seek(0)
                    errors.append(f"{member} {index} failed (rc={proc.returncode}):\n{logs[index].read()[-3000:]}")
                    break
        finally:
            for proc in procs:  # one left waiting for a failed peer: end it and its workers
                if proc.poll() is None:
                    _kill_group(proc)
    return errors


def run_gloo_ranks(program: str, args: list[str], logdir: Path, world_size: int, *, label: str,
                   timeout_s: float) -> list[Path]:
    """Run ``program`` (argv: logdir, *args) as ``world_size`` ranks of one torch.distributed job on
    127.0.0.1 (RANK, WORLD_SIZE, MASTER_ADDR/PORT set), each in its own process group under one deadline:
    on a timeout or a failure of any, all are killed before this raises. Returns the ``rank<N>.*.pt.trace.json``
    each rank wrote under ``logdir`` (rank 0 first)."""
    logdir.mkdir(parents=True, exist_ok=True)
    before = set(logdir.rglob("*"))
    base = dict(_torch_env(), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()), WORLD_SIZE=str(world_size),
                GLOO_SOCKET_IFNAME=_loopback_interface())
    commands = [[sys.executable, "-c", program, str(logdir), *args] for _ in range(world_size)]
    envs = [dict(base, RANK=str(rank), LOCAL_RANK=str(rank)) for rank in range(world_size)]
    errors = run_together(commands, envs, timeout_s=timeout_s, member="rank")
    if errors:
        raise RuntimeError(f"{label} program: " + "\n".join(errors))
    found = [_new_files(logdir, f"rank{rank}.*.pt.trace.json", before) for rank in range(world_size)]
    if any(len(f) != 1 for f in found):
        raise RuntimeError(f"expected one trace per rank under {logdir}, found {found}")
    return [f[0] for f in found]


def _loopback_interface() -> str:
    """Name of the loopback interface (gloo otherwise picks the host name's address, which may not resolve)."""
    try:
        names = [name for _, name in socket.if_nameindex()]
    except OSError:
        names = []
    return next((n for n in names if n.startswith("lo")), "lo")
