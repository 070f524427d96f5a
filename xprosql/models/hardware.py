"""Hardware peak models, used where a profile does not record its own peaks.

Profile stats always win over these tables (docs/reference.md, peak numbers). Two
models live here:

* :func:`gpu_peak_flops_per_s`: XProf's per-SM model of a GPU's FP32 peak from
  the SM count, compute capability and clock an XSpace GPU plane records
  (ingest fills ``devices.peak_flops_per_s`` with it).
* :data:`CHIPS`: published dense peaks per chip (bf16 matrix units or tensor
  cores, HBM bandwidth), matched on ``devices.model``. The roofline uses them
  when the ``devices`` row has no peak; :func:`hardware_models_table` is the
  same table for SQL (every :class:`xprosql.Run` has it as ``hardware_models``).

CPU peaks are not modelled: pass them, or measure this machine with
:func:`measure_cpu_peaks`.

Example:
    >>> gpu_model(compute_capability=(7, 0), sm_count=80, memory_bytes=16945512448)
    'Tesla V100'
    >>> chip_for_model("TPU v6 Lite").name
    'TPU v6e'
    >>> chip_for_model("NVIDIA A100-SXM4-80GB").peak_hbm_bytes_per_s
    2039000000000.0
"""

from __future__ import annotations

import itertools
import re
import time
from dataclasses import dataclass

import pyarrow as pa

__all__ = [
    "CHIPS",
    "FP32_LANES_PER_SM",
    "Chip",
    "chip_for_model",
    "gpu_model",
    "gpu_peak_flops_per_s",
    "hardware_models_table",
    "measure_cpu_peaks",
    "normalize_model",
]

# FP32 lanes per SM by compute capability; each retires one FMA (2 FLOP) per clock.
# XProf derives a GPU's peak the same way when the profile has no peak stat.
FP32_LANES_PER_SM: dict[tuple[int, int], int] = {
    (6, 0): 64, (6, 1): 128, (7, 0): 64, (7, 2): 64, (7, 5): 64,
    (8, 0): 64, (8, 6): 128, (8, 7): 128, (8, 9): 128,
    (9, 0): 128, (10, 0): 128, (12, 0): 128,
}

# (compute capability, SM count) -> marketing name; memory size splits H100 from H200.
_GPU_NAMES: dict[tuple[tuple[int, int], int], str] = {
    ((7, 0), 80): "Tesla V100",
    ((7, 5), 40): "Tesla T4",
    ((8, 0), 108): "A100",
    ((8, 6), 84): "RTX A6000",
    ((8, 9), 58): "L4",
    ((9, 0), 132): "H100 SXM",
    ((9, 0), 114): "H100 PCIe",
}


def gpu_model(*, compute_capability: tuple[int, int], sm_count: int | None, memory_bytes: int | None) -> str | None:
    """Best-effort GPU name from what XSpace GPU planes record."""
    name = _GPU_NAMES.get((compute_capability, sm_count or 0))
    if name == "H100 SXM" and memory_bytes and memory_bytes > 100e9:
        return "H200 SXM"
    return name


def gpu_peak_flops_per_s(*, compute_capability: tuple[int, int], sm_count: int, clock_khz: int) -> float | None:
    """FP32 peak of a GPU: SMs x lanes per SM x 2 FLOP per FMA x clock."""
    lanes = FP32_LANES_PER_SM.get(compute_capability)
    if lanes is None or not sm_count or not clock_khz:
        return None
    return float(sm_count) * lanes * 2.0 * clock_khz * 1e3


@dataclass(frozen=True)
class Chip:
    """Published dense peaks of one accelerator, per chip.

    ``pattern`` is a regular expression (the subset Python, DuckDB's RE2 and
    Polars agree on) searched in :func:`normalize_model` of ``devices.model``;
    with ``max_memory_bytes`` the device must also report at most that much
    memory (``devices.memory_bytes``), which tells board variants apart.
    """

    name: str
    kind: str
    pattern: str
    peak_flops_per_s: float
    peak_hbm_bytes_per_s: float
    hbm_bytes: float
    peak_fp32_flops_per_s: float | None = None
    max_memory_bytes: float | None = None


_T, _G, _GIB = 1e12, 1e9, float(1 << 30)

# First match wins, so specific variants come before their family.
# TPU and A100/H100/H200 numbers: docs/reference.md, peak numbers. V100 (SXM2) and B200
# are not there: they are NVIDIA's datasheet numbers (V100: 125 TFLOP/s fp16
# tensor, 15.7 fp32, 900 GB/s; B200: 2.25 PFLOP/s dense bf16, 8 TB/s).
CHIPS: tuple[Chip, ...] = (
    Chip("TPU v4", "tpu", r"^tpuv4($|pod)", 275 * _T, 1200 * _G, 32 * _GIB),
    Chip("TPU v5e", "tpu", r"^tpuv5(lite|e)", 197 * _T, 819 * _G, 16 * _G),
    Chip("TPU v5p", "tpu", r"^tpuv5(p|$)", 459 * _T, 2765 * _G, 95 * _GIB),
    Chip("TPU v6e", "tpu", r"^tpuv6(lite|e|$)", 918 * _T, 1638 * _G, 32 * _G),
    Chip("TPU7x", "tpu", r"^tpuv?7", 2307 * _T, 7380 * _G, 192 * _GIB),
    Chip("V100", "gpu", r"v100", 125 * _T, 900 * _G, 16 * _G, 15.7 * _T),
    Chip("A100 40GB", "gpu", r"a100.*40gb", 312 * _T, 1555 * _G, 40 * _G, 19.5 * _T),
    Chip("A100 40GB", "gpu", r"a100", 312 * _T, 1555 * _G, 40 * _G, 19.5 * _T, max_memory_bytes=48 * _G),
    Chip("A100", "gpu", r"a100", 312 * _T, 2039 * _G, 80 * _G, 19.5 * _T),
    Chip("H100 PCIe", "gpu", r"h100.*pcie", 756 * _T, 2000 * _G, 80 * _G, 51 * _T),
    Chip("H100", "gpu", r"h100", 989 * _T, 3350 * _G, 80 * _G, 67 * _T),
    Chip("H200", "gpu", r"h200", 989 * _T, 4800 * _G, 141 * _G, 67 * _T),
    Chip("B200", "gpu", r"b200", 2250 * _T, 8000 * _G, 192 * _G),
)


def normalize_model(model: str | None) -> str | None:
    """Lower-case letters and digits only: ``'NVIDIA A100-SXM4-80GB'`` -> ``'nvidiaa100sxm480gb'``."""
    if model is None:
        return None
    return re.sub(r"[^a-z0-9]", "", model.lower())


def chip_for_model(model: str | None, *, memory_bytes: float | None = None) -> Chip | None:
    """The first chip of :data:`CHIPS` matching ``model`` (and ``memory_bytes``), or None."""
    normalized = normalize_model(model)
    if not normalized:
        return None
    return next(
        (
            chip for chip in CHIPS
            if re.search(chip.pattern, normalized)
            and (chip.max_memory_bytes is None or (memory_bytes is not None and memory_bytes <= chip.max_memory_bytes))
        ),
        None,
    )


def hardware_models_table() -> pa.Table:
    """:data:`CHIPS` as an Arrow table (``priority`` = position: lower wins)."""
    return pa.table({
        "priority": pa.array(range(len(CHIPS)), pa.int32()),
        "chip": [c.name for c in CHIPS],
        "kind": [c.kind for c in CHIPS],
        "model_pattern": [c.pattern for c in CHIPS],
        "peak_flops_per_s": pa.array([c.peak_flops_per_s for c in CHIPS], pa.float64()),
        "peak_fp32_flops_per_s": pa.array([c.peak_fp32_flops_per_s for c in CHIPS], pa.float64()),
        "peak_hbm_bytes_per_s": pa.array([c.peak_hbm_bytes_per_s for c in CHIPS], pa.float64()),
        "hbm_bytes": pa.array([c.hbm_bytes for c in CHIPS], pa.float64()),
        "max_memory_bytes": pa.array([c.max_memory_bytes for c in CHIPS], pa.float64()),
    })


def measure_cpu_peaks(*, seconds: float = 1.0, size: int = 2048, repeats: int = 5) -> tuple[float, float]:
    """Measured (FLOP/s, bytes/s) of this machine's CPU: f32 matmul and array copy (needs numpy).

    Only meaningful for profiles taken on this machine. The FLOP rate is the best
    that the BLAS numpy uses (on all cores) reaches on ``size`` x ``size`` f32
    matrices, over at least ``repeats`` runs and ``seconds / 2``: the best run, since
    a busy machine only ever makes runs slower. The bandwidth counts read plus
    write of a 64 MiB copy, the best of as many runs. A roof measured low still
    shows: the roofline's ``above_roof`` flags ops that beat it.

    Example:
        >>> flops, bandwidth = measure_cpu_peaks(seconds=0.1)     # doctest: +SKIP
    """
    import numpy as np  # optional: only this helper needs it

    a = np.ones((size, size), np.float32)
    b = np.ones((size, size), np.float32)
    best_flops = 0.0
    deadline = time.perf_counter() + seconds / 2
    for run in itertools.count(1):
        start = time.perf_counter()
        a @ b
        best_flops = max(best_flops, 2.0 * size**3 / (time.perf_counter() - start))
        if run >= repeats and time.perf_counter() > deadline:
            break
    src = np.ones(16 << 20, np.float32)  # 64 MiB: far beyond any cache
    dst = np.empty_like(src)
    best_bw = 0.0
    deadline = time.perf_counter() + seconds / 2
    for run in itertools.count(1):
        start = time.perf_counter()
        np.copyto(dst, src)
        best_bw = max(best_bw, 2.0 * src.nbytes / (time.perf_counter() - start))
        if run >= repeats and time.perf_counter() > deadline:
            break
    return best_flops, best_bw
