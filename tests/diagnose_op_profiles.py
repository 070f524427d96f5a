"""Real profiles for the op rules of sql/diagnose (tests/test_diagnose_ops.py), written by JAX on this machine's CPU.

:func:`make_jax_matmul_profile` runs a jitted chain of square f32 matrix multiplies (``size`` x ``size``)
for ``steps`` steps under ``jax.profiler.StepTraceAnnotation`` and writes the XSpace. With ``size`` 1000
every M, N and K is off a 128-wide tile (1000 = 7 x 128 + 104); with 1024 all are on it: the
diagnose.matmul_shapes positive and its control. The program runs in a subprocess (as
tests/jax_profiles.py does), so the test process never imports jax.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import textwrap
from pathlib import Path

__all__ = ["MATMULS_PER_STEP", "MATMUL_STEPS", "jax_available", "make_jax_matmul_profile"]

MATMULS_PER_STEP = 3
MATMUL_STEPS = 6

_PROGRAM = textwrap.dedent(
    """
    import sys
    import time
    from pathlib import Path

    import jax
    import jax.numpy as jnp
    import numpy as np

    logdir, size, steps, chain = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])

    @jax.jit
    def step(x, w):
        for _ in range(chain):
            x = x @ w
        return x

    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.standard_normal((size, size), dtype=np.float32) / np.sqrt(size))
    w = jnp.asarray(rng.standard_normal((size, size), dtype=np.float32) / np.sqrt(size))
    jax.block_until_ready(step(x, w))  # compile outside the trace
    with jax.profiler.trace(str(logdir)):
        for i in range(steps):
            with jax.profiler.StepTraceAnnotation("train", step_num=i):
                jax.block_until_ready(step(x, w))
            time.sleep(0.001)
    """
)


def jax_available() -> bool:
    """True when jax can be imported by this interpreter (checked without importing it)."""
    return importlib.util.find_spec("jax") is not None


def make_jax_matmul_profile(logdir: Path, *, size: int, steps: int = MATMUL_STEPS, chain: int = MATMULS_PER_STEP,
                            timeout_s: float = 180.0) -> Path:
    """Run the matmul chain under the JAX profiler on one CPU device; return the ``.xplane.pb`` written."""
    logdir.mkdir(parents=True, exist_ok=True)
    env = {"XLA_FLAGS": "--xla_force_host_platform_device_count=1", "JAX_PLATFORMS": "cpu"}
    import os

    subprocess.run([sys.executable, "-c", _PROGRAM, str(logdir), str(size), str(steps), str(chain)],
                   check=True, timeout=timeout_s, env={**os.environ, **env}, capture_output=True)
    written = sorted(logdir.rglob("*.xplane.pb"))
    assert len(written) == 1, written
    return written[0]
