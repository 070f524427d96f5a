"""Real XSpace profiles written by JAX on CPU, for tests.

The program runs in a subprocess so the test process never imports jax (slow,
and it would pin XLA flags for every other test). Wrap
:func:`make_jax_cpu_profile` in a session-scoped fixture: one profile serves
all tests.

What the profile holds (known from the program below):
    jit_step(x f32[64,128], w f32[128,256], img f32[2,16,16,8], ker f32[3,3,8,16])
      -> (sum(tanh(x @ w) + 1, axis=1) f32[64], sum(conv_nhwc(img, ker, SAME)) f32[])
run JAX_STEP_RUNS times under ``jax.profiler.trace``.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap
from pathlib import Path

__all__ = [
    "JAX_STEP_HLO_TEXT",
    "JAX_STEP_MODULE",
    "JAX_STEP_PARAMETER_DIMS",
    "JAX_STEP_RUNS",
    "jax_available",
    "make_jax_cpu_profile",
]

# Module name JAX gives the jitted function below.
JAX_STEP_MODULE = "jit_step"
# Entry parameter dims in parameter order.
JAX_STEP_PARAMETER_DIMS: list[list[int]] = [[64, 128], [128, 256], [2, 16, 16, 8], [3, 3, 8, 16]]
JAX_STEP_RUNS = 3
# File, inside logdir, with XLA's text of the compiled module (an oracle for formatting).
JAX_STEP_HLO_TEXT = "jit_step.hlo.txt"

_PROGRAM = textwrap.dedent(
    """
    import sys
    from pathlib import Path

    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax import lax

    logdir, runs = Path(sys.argv[1]), int(sys.argv[2])

    @jax.jit
    def step(x, w, img, ker):
        y = jnp.tanh(x @ w) + 1.0
        conv = lax.conv_general_dilated(
            img, ker, window_strides=(1, 1), padding="SAME",
            dimension_numbers=("NHWC", "HWIO", "NHWC"))
        return jnp.sum(y, axis=1), jnp.sum(conv)

    # numpy inputs: no extra jitted programs (RNG) in the profile.
    rng = np.random.default_rng(0)
    args = [rng.standard_normal(s, dtype=np.float32)
            for s in [(64, 128), (128, 256), (2, 16, 16, 8), (3, 3, 8, 16)]]
    jax.block_until_ready(step(*args))  # compile outside the trace
    with jax.profiler.trace(str(logdir)):
        for _ in range(runs):
            jax.block_until_ready(step(*args))
    (logdir / sys.argv[3]).write_text(step.lower(*args).compile().as_text())
    """
)


def jax_available() -> bool:
    """True when jax can be imported by this interpreter (checked without importing it)."""
    return importlib.util.find_spec("jax") is not None


def make_jax_cpu_profile(logdir: Path, *, timeout_s: float = 180.0) -> Path:
    """Profile a small jitted program on the JAX CPU backend; return its ``*.xplane.pb``.

    Writes ``logdir/plugins/profile/<run>/<host>.xplane.pb`` and, next to the
    run folders, :data:`JAX_STEP_HLO_TEXT`. Raises RuntimeError with the
    subprocess's stderr when it fails.
    """
    logdir = Path(logdir)
    logdir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    env.pop("XLA_FLAGS", None)  # a caller's dump flags would slow this down
    proc = subprocess.run(
        [sys.executable, "-c", _PROGRAM, str(logdir), str(JAX_STEP_RUNS), JAX_STEP_HLO_TEXT],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"JAX profile program failed (rc={proc.returncode}):\n{proc.stderr[-4000:]}")
    found = sorted(logdir.glob("plugins/profile/*/*.xplane.pb"), key=lambda p: p.stat().st_mtime)
    if not found:
        raise RuntimeError(f"JAX wrote no *.xplane.pb under {logdir}")
    return found[-1]
