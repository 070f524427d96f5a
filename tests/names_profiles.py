"""Real profiles whose time the user's own names explain (``sql/names/``), written on this machine's CPU.

Each generator runs its program in a subprocess with this interpreter (as tests/wild_profiles.py
does): the test process never imports torch or jax. Wrap them in session-scoped fixtures.

* :func:`make_torch_names_profile`: a Kineto trace of a small transformer-like model trained
  with SGD on the CPU, under ``torch.profiler.profile(record_shapes=True, with_modules=True,
  with_stack=True)`` (PyTorch writes the ``python_function`` events "nn.Module: Block_0" only with
  the Python tracer on, i.e. with ``with_stack=True``) and ``schedule(wait=1, warmup=1, active=3)``:
  the trace holds ``ProfilerStep#2..#4`` (:data:`TORCH_NAMES_STEPS`). Each step runs
  ``record_function("data")`` around a :data:`TORCH_DATA_SLEEP_S` sleep (and the batch's
  ``torch.randn``), then ``record_function("forward")`` (the model: ``Model_0`` holding
  ``Block_0``, ``Block_1``, each with ``LayerNorm``, ``Attn`` (two ``Linear`` and a
  ``record_function("attn_core")``), and a ``Sequential`` MLP; a ``Linear`` head),
  ``record_function("backward")`` and ``record_function("optimizer")``.
* :func:`make_jax_scopes_profile`: an XSpace of a jitted JAX step on the CPU whose ops sit in
  ``jax.named_scope``\\ s: ``encoder/layer_{0,1}/{attn,mlp}`` and ``head``
  (:data:`JAX_SCOPES`), run :data:`JAX_SCOPES_RUNS` times inside
  ``jax.profiler.StepTraceAnnotation("train", step_num=i)``.
"""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

from wild_profiles import _new_files, _require, _run

__all__ = [
    "JAX_SCOPES",
    "JAX_SCOPES_MODULE",
    "JAX_SCOPES_RUNS",
    "TORCH_DATA_SLEEP_S",
    "TORCH_NAMES_SCHEDULE",
    "TORCH_NAMES_STEPS",
    "make_jax_scopes_profile",
    "make_torch_names_profile",
]

# wait=1, warmup=1, active=3: the trace holds the steps numbered 2, 3 and 4.
TORCH_NAMES_SCHEDULE = {"wait": 1, "warmup": 1, "active": 3}
TORCH_NAMES_STEPS: list[int] = [2, 3, 4]
TORCH_DATA_SLEEP_S = 0.020

_TORCH_PROGRAM = textwrap.dedent(
    """
    import json
    import sys
    import time

    import torch
    from torch import nn
    from torch.profiler import ProfilerActivity, profile, record_function, schedule, tensorboard_trace_handler

    logdir, sched, sleep_s = sys.argv[1], json.loads(sys.argv[2]), float(sys.argv[3])
    torch.set_num_threads(1)
    torch.manual_seed(0)

    class Attn(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.qkv = nn.Linear(d, 3 * d)
            self.proj = nn.Linear(d, d)

        def forward(self, x):
            q, k, v = self.qkv(x).chunk(3, -1)
            with record_function("attn_core"):
                a = torch.softmax(q @ k.transpose(-1, -2) / 8.0, -1) @ v
            return self.proj(a)

    class Block(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.ln = nn.LayerNorm(d)
            self.attn = Attn(d)
            self.mlp = nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d))

        def forward(self, x):
            x = x + self.attn(self.ln(x))
            return x + self.mlp(x)

    class Model(nn.Module):
        def __init__(self, d=64):
            super().__init__()
            self.blocks = nn.ModuleList([Block(d) for _ in range(2)])
            self.head = nn.Linear(d, 10)

        def forward(self, x):
            for block in self.blocks:
                x = block(x)
            return self.head(x).mean(1)

    model = Model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    steps = sched["wait"] + sched["warmup"] + sched["active"]
    with profile(
        activities=[ProfilerActivity.CPU],
        schedule=schedule(**sched),
        on_trace_ready=tensorboard_trace_handler(logdir, worker_name="names"),
        record_shapes=True,
        with_modules=True,
        with_stack=True,
    ) as prof:
        for _ in range(steps):
            with record_function("data"):
                time.sleep(sleep_s)
                x, y = torch.randn(4, 32, 64), torch.randn(4, 10)
            with record_function("forward"):
                loss = nn.functional.mse_loss(model(x), y)
            with record_function("backward"):
                loss.backward()
            with record_function("optimizer"):
                opt.step()
                opt.zero_grad()
            prof.step()
    """
)


def make_torch_names_profile(logdir: Path, *, timeout_s: float = 180.0) -> Path:
    """Profile the training of the module docstring on the CPU; return the ``*.pt.trace.json`` written.

    Example:
        >>> make_torch_names_profile(tmp_path / "names")          # doctest: +SKIP
        PosixPath('.../names.1700000000000.pt.trace.json')
    """
    _require("torch", "torch==2.13.0")
    logdir = Path(logdir)
    logdir.mkdir(parents=True, exist_ok=True)
    before = set(logdir.rglob("*"))
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="")
    _run(_TORCH_PROGRAM, [str(logdir), json.dumps(TORCH_NAMES_SCHEDULE), str(TORCH_DATA_SLEEP_S)],
         label="PyTorch names", timeout_s=timeout_s, env=env)
    found = _new_files(logdir, "names*.pt.trace.json", before)
    if len(found) != 1:
        raise RuntimeError(f"PyTorch wrote {len(found)} new names*.pt.trace.json under {logdir}, expected 1: {found}")
    return found[0]


# The scopes the JAX program opens (jax.named_scope), as they appear in op_name after jit(step)/.
JAX_SCOPES = ["encoder", "encoder/layer_0", "encoder/layer_0/attn", "encoder/layer_0/mlp",
              "encoder/layer_1", "encoder/layer_1/attn", "encoder/layer_1/mlp", "head"]
JAX_SCOPES_RUNS = 3
JAX_SCOPES_MODULE = "jit_step"

_JAX_PROGRAM = textwrap.dedent(
    """
    import sys
    from pathlib import Path

    import jax
    import jax.numpy as jnp
    import numpy as np

    logdir, runs = Path(sys.argv[1]), int(sys.argv[2])

    def layer(x, w1, w2, i):
        with jax.named_scope(f"layer_{i}"):
            with jax.named_scope("attn"):
                h = jnp.tanh(x @ w1)
                h = jax.nn.softmax(h @ h.T, axis=-1) @ h
            with jax.named_scope("mlp"):
                x = jax.nn.relu(h @ w2) + x
        return x

    @jax.jit
    def step(x, ws):
        with jax.named_scope("encoder"):
            for i, (w1, w2) in enumerate(ws):
                x = layer(x, w1, w2, i)
        with jax.named_scope("head"):
            return jnp.sum(jnp.tanh(x) * x, axis=1)

    rng = np.random.default_rng(0)
    x = rng.standard_normal((256, 256), dtype=np.float32)
    ws = [tuple(rng.standard_normal((256, 256), dtype=np.float32) / 16 for _ in range(2)) for _ in range(2)]
    jax.block_until_ready(step(x, ws))  # compile outside the trace
    with jax.profiler.trace(str(logdir)):
        for i in range(runs):
            with jax.profiler.StepTraceAnnotation("train", step_num=i):
                jax.block_until_ready(step(x, ws))
    """
)


def make_jax_scopes_profile(logdir: Path, *, runs: int = JAX_SCOPES_RUNS, timeout_s: float = 180.0) -> Path:
    """Profile the jitted step of the module docstring on the CPU; return its ``*.xplane.pb``.

    Example:
        >>> make_jax_scopes_profile(tmp_path / "scopes")          # doctest: +SKIP
        PosixPath('.../plugins/profile/2025_01_01_00_00_00/host.xplane.pb')
    """
    _require("jax", "jax")
    logdir = Path(logdir)
    logdir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    env.pop("XLA_FLAGS", None)
    before = set(logdir.rglob("*"))
    _run(_JAX_PROGRAM, [str(logdir), str(runs)], label="JAX scopes", timeout_s=timeout_s, env=env)
    found = _new_files(logdir, "plugins/profile/*/*.xplane.pb", before)
    if len(found) != 1:
        raise RuntimeError(f"JAX wrote {len(found)} new *.xplane.pb under {logdir}, expected 1: {found}")
    return found[0]
