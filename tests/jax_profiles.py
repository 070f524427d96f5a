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
import json
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
    import json
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
    compiled = step.lower(*args).compile()
    (logdir / sys.argv[3]).write_text(compiled.as_text())
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, list) else cost
    (logdir / "jit_step.cost_analysis.txt").write_text(json.dumps({k: float(v) for k, v in cost.items()}))
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
    return _run_jax_program(logdir, _PROGRAM, [str(JAX_STEP_RUNS), JAX_STEP_HLO_TEXT],
                            label="profile", timeout_s=timeout_s)


def _run_jax_program(logdir: Path, program: str, args: list[str], *, label: str, timeout_s: float) -> Path:
    """Run ``program`` (argv: logdir, *args) on the JAX CPU backend in a subprocess; its newest ``*.xplane.pb``."""
    logdir = Path(logdir)
    logdir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    env.pop("XLA_FLAGS", None)  # a caller's dump flags would slow this down
    proc = subprocess.run([sys.executable, "-c", program, str(logdir), *args],
                          env=env, capture_output=True, text=True, timeout=timeout_s, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"JAX {label} program failed (rc={proc.returncode}):\n{proc.stderr[-4000:]}")
    found = sorted(logdir.glob("plugins/profile/*/*.xplane.pb"), key=lambda p: p.stat().st_mtime)
    if not found:
        raise RuntimeError(f"JAX wrote no *.xplane.pb under {logdir}")
    return found[-1]


# --- Steps variant: a training-style loop marked with jax.profiler.StepTraceAnnotation ---

# Name JAX gives each step's host annotation, and the step numbers the program marks.
JAX_STEPS_NAME = "train"
JAX_STEPS_NUMBERS: list[int] = [10, 11, 12, 13]

_STEPS_PROGRAM = textwrap.dedent(
    """
    import sys
    from pathlib import Path

    import jax
    import jax.numpy as jnp
    import numpy as np

    logdir, name = Path(sys.argv[1]), sys.argv[2]
    steps = [int(s) for s in sys.argv[3].split(",")]

    @jax.jit
    def train_step(w, x):
        loss, grad = jax.value_and_grad(lambda w: jnp.mean(jnp.tanh(x @ w) ** 2))(w)
        return w - 0.1 * grad, loss

    rng = np.random.default_rng(0)
    w = rng.standard_normal((256, 256), dtype=np.float32)
    x = rng.standard_normal((128, 256), dtype=np.float32)
    jax.block_until_ready(train_step(w, x))  # compile outside the trace
    with jax.profiler.trace(str(logdir)):
        for step in steps:
            with jax.profiler.StepTraceAnnotation(name, step_num=step):
                w, loss = train_step(w, x)
                jax.block_until_ready(loss)
    """
)


def make_jax_steps_profile(logdir: Path, *, timeout_s: float = 180.0) -> Path:
    """Profile a jitted train step run once per :data:`JAX_STEPS_NUMBERS`, each inside
    ``jax.profiler.StepTraceAnnotation(JAX_STEPS_NAME, step_num=N)``; return its ``*.xplane.pb``.

    Example:
        >>> make_jax_steps_profile(tmp_path / "steps")              # doctest: +SKIP
        PosixPath('.../plugins/profile/2025_01_01_00_00_00/host.xplane.pb')
    """
    numbers = ",".join(str(n) for n in JAX_STEPS_NUMBERS)
    return _run_jax_program(logdir, _STEPS_PROGRAM, [JAX_STEPS_NAME, numbers], label="steps", timeout_s=timeout_s)


__all__ += ["JAX_STEPS_NAME", "JAX_STEPS_NUMBERS", "make_jax_steps_profile"]


# --- Roofline variants: a matmul-heavy MLP step and an elementwise-heavy step ---
#
# Each writes, beside its run folders, XLA's own cost analysis of the compiled
# module (``<module>.cost_analysis.txt``, JSON text: flops, transcendentals, bytes
# accessed; not *.json, which ingest would take for a Kineto trace): the
# oracle for costs derived from the HLO.

# program -> (module name JAX gives it, argument shapes)
JAX_ROOFLINE_PROGRAMS: dict[str, tuple[str, list[tuple[int, ...]]]] = {
    # relu(x @ w1 + b1) @ w2 + b2: two 256x512x1024 matmuls dominate.
    "mlp": ("jit_mlp_step", [(256, 512), (512, 1024), (1024,), (1024, 512), (512,)]),
    # seven elementwise ops over 1024x1024 f32 arrays: bytes dominate.
    "elementwise": ("jit_elementwise_step", [(1024, 1024), (1024, 1024), (1024, 1024)]),
}
JAX_ROOFLINE_RUNS = 5

_ROOFLINE_PROGRAM = textwrap.dedent(
    """
    import json
    import sys
    from pathlib import Path

    import jax
    import numpy as np

    logdir, which, runs = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    shapes = json.loads(sys.argv[4])

    @jax.jit
    def mlp_step(x, w1, b1, w2, b2):
        h = jax.nn.relu(x @ w1 + b1)
        return h @ w2 + b2

    @jax.jit
    def elementwise_step(a, b, c):
        return (a * b + c) * 0.5 - a / (b * b + 1.0)

    step = {"mlp": mlp_step, "elementwise": elementwise_step}[which]
    rng = np.random.default_rng(0)
    args = [rng.standard_normal(tuple(s), dtype=np.float32) for s in shapes]
    jax.block_until_ready(step(*args))  # compile outside the trace
    with jax.profiler.trace(str(logdir)):
        for _ in range(runs):
            jax.block_until_ready(step(*args))
    cost = step.lower(*args).compile().cost_analysis()
    cost = cost[0] if isinstance(cost, list) else cost
    (logdir / sys.argv[5]).write_text(json.dumps({k: float(v) for k, v in cost.items()}))
    """
)

_SESSION_PROFILES: dict[str, Path] = {}


def make_jax_roofline_profile(logdir: Path, program: str, *, timeout_s: float = 180.0) -> Path:
    """Profile one of :data:`JAX_ROOFLINE_PROGRAMS` on the JAX CPU backend; return its ``*.xplane.pb``.

    Also writes ``logdir/<module>.cost_analysis.txt`` (see :func:`jax_cost_analysis`).

    Example:
        >>> make_jax_roofline_profile(tmp_path / "mlp", "mlp")        # doctest: +SKIP
    """
    module, shapes = JAX_ROOFLINE_PROGRAMS[program]
    return _run_jax_program(
        logdir, _ROOFLINE_PROGRAM,
        [program, str(JAX_ROOFLINE_RUNS), json.dumps(shapes), f"{module}.cost_analysis.txt"],
        label=program, timeout_s=timeout_s,
    )


def session_roofline_profile(program: str, base: Path) -> Path:
    """:func:`make_jax_roofline_profile` once per test session (cached by program), under ``base``."""
    if program not in _SESSION_PROFILES:
        _SESSION_PROFILES[program] = make_jax_roofline_profile(Path(base) / program, program)
    return _SESSION_PROFILES[program]


def jax_cost_analysis(profile: Path, module: str) -> dict[str, float]:
    """XLA's cost analysis of ``module`` that the program wrote beside ``profile``'s run folders."""
    logdir = Path(profile).parents[3]  # <logdir>/plugins/profile/<run>/<host>.xplane.pb
    return json.loads((logdir / f"{module}.cost_analysis.txt").read_text())


__all__ += ["JAX_ROOFLINE_PROGRAMS", "JAX_ROOFLINE_RUNS", "jax_cost_analysis", "make_jax_roofline_profile",
            "session_roofline_profile"]
