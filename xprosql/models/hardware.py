"""Hardware peak models, used where a profile does not record its own peaks.

Profile stats always win over these tables (docs/reference.md, peak numbers). Two
models live here:

* :func:`gpu_peak_flops_per_s`: XProf's per-SM model of an NVIDIA GPU's dense bf16/fp16 matrix peak
  from the SM count, compute capability and clock an XSpace GPU plane records
  (ingest fills ``devices.peak_flops_per_s`` with it; AMD GPUs take the chip
  table's peak instead).
* :data:`CHIPS`: published dense peaks per chip (bf16 matrix units or tensor
  cores, HBM bandwidth), matched on ``devices.model``. The roofline uses them
  when the ``devices`` row has no peak; :func:`hardware_models_table` is the
  same table in Arrow, :func:`hardware_models_sql` in SQL (every :class:`xprosql.Run` has it as
  ``hardware_models``).

CPU peaks are not modelled: pass them, or measure this machine with
:func:`measure_cpu_peaks`.

Example:
    >>> gpu_model(compute_capability=(7, 0), sm_count=80, memory_bytes=16945512448)
    'Tesla V100'
    >>> device_model("AMD Radeon Graphics", compute_capability=(9, 4), sm_count=304, memory_bytes=206141652992)
    'AMD Instinct MI300X'
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
    "MATRIX_FLOPS_PER_SM_CLOCK",
    "Chip",
    "chip_for_model",
    "device_model",
    "gpu_model",
    "gpu_peak_flops_per_s",
    "hardware_models_sql",
    "hardware_models_table",
    "measure_cpu_peaks",
    "normalize_model",
]

# Dense bf16/fp16 tensor-core FLOP per SM per clock by compute capability (NVIDIA's architecture
# whitepapers: V100 125 TF = 80 SMs x 1.53 GHz x 1024; A100 312 TF = 108 x 1.41 GHz x 2048; H100/H200
# x 4096; B200 x 8192). XProf's roofline on a real H200 XSpace prints this peak: 132 SMs x 1.98 GHz
# (the clock_rate stat) x 4096 = 1,070,530 GFLOP/s (tests/test_h200.py).
MATRIX_FLOPS_PER_SM_CLOCK: dict[tuple[int, int], int] = {
    (7, 0): 1024, (7, 2): 1024, (7, 5): 1024,
    (8, 0): 2048, (8, 6): 1024, (8, 7): 1024, (8, 9): 1024,
    (9, 0): 4096, (10, 0): 8192, (12, 0): 1024,
}

# (vendor, compute capability, SM count) -> marketing name. ROCm reports an AMD GPU's gfx
# arch as its capability (gfx90a 9.0, gfx942 9.4, gfx950 9.5) and its compute units as SMs,
# and shows each GCD of an MI250 / MI250X as a device (docs/reference.md, AMD GPUs).
_GPU_NAMES: dict[tuple[str, tuple[int, int], int], str] = {
    ("nvidia", (7, 0), 80): "Tesla V100",
    ("nvidia", (7, 5), 40): "Tesla T4",
    ("nvidia", (8, 0), 108): "A100",
    ("nvidia", (8, 6), 84): "RTX A6000",
    ("nvidia", (8, 9), 58): "L4",
    ("nvidia", (9, 0), 132): "H100 SXM",
    ("nvidia", (9, 0), 114): "H100 PCIe",
    # One MI250 GCD is an MI210 in all the device reports: 104 CUs, 64 GB, and the same peaks.
    ("amd", (9, 0), 104): "AMD Instinct MI210 / MI250 GCD",
    ("amd", (9, 0), 110): "AMD Instinct MI250X GCD",
    ("amd", (9, 4), 228): "AMD Instinct MI300A",
    ("amd", (9, 4), 304): "AMD Instinct MI300X",
    ("amd", (9, 5), 256): "AMD Instinct MI355X",
}
# The same SMs with more memory than this: the later board.
_MORE_MEMORY: dict[str, tuple[float, str]] = {
    "H100 SXM": (100e9, "H200 SXM"),
    "AMD Instinct MI300X": (224e9, "AMD Instinct MI325X"),  # 192 GB against 256 GB
}
# Names that say no more than the vendor: ROCm's for a board its ID table lacks.
_GENERIC_GPU_NAMES = frozenset({"", "amdradeongraphics"})


def gpu_model(*, compute_capability: tuple[int, int], sm_count: int | None, memory_bytes: int | None,
              vendor: str | None = None) -> str | None:
    """Best-effort GPU name from what XSpace GPU planes and Kineto deviceProperties record.

    ``vendor`` is XSpace's ``device_vendor`` stat ("Nvidia", "AMD"); None means NVIDIA.
    """
    key = "amd" if (vendor or "").lower() == "amd" else "nvidia"
    name = _GPU_NAMES.get((key, compute_capability, sm_count or 0))
    threshold, larger = _MORE_MEMORY.get(name or "", (None, None))
    if threshold is not None and memory_bytes and memory_bytes > threshold:
        return larger
    return name


def device_model(name: str | None, *, compute_capability: tuple[int, int] | None, sm_count: int | None,
                 memory_bytes: int | None, vendor: str | None = None) -> str | None:
    """A GPU device's model: the name it reports, unless it has none or a generic one ("AMD Radeon
    Graphics"); then :func:`gpu_model` of its capability, SMs and memory (an AMD GPU when the name
    or ``vendor`` says so), else the name as reported."""
    if name is not None and normalize_model(name) not in _GENERIC_GPU_NAMES:
        return name
    if compute_capability is None:
        return name
    if name is not None and "amd" in name.lower():
        vendor = "AMD"
    derived = gpu_model(compute_capability=compute_capability, sm_count=sm_count, memory_bytes=memory_bytes,
                        vendor=vendor)
    return derived or name


def gpu_peak_flops_per_s(*, compute_capability: tuple[int, int], sm_count: int, clock_khz: int,
                         vendor: str | None = None) -> float | None:
    """Dense bf16/fp16 matrix peak of an NVIDIA GPU, as XProf models it: SMs x FLOP per SM per clock x
    clock (None for other vendors, whose capabilities mean something else: AMD's 9.0 is gfx90a, not Hopper)."""
    per_clock = MATRIX_FLOPS_PER_SM_CLOCK.get(compute_capability)
    if (vendor or "nvidia").lower() != "nvidia" or per_clock is None or not sm_count or not clock_khz:
        return None
    return float(sm_count) * per_clock * clock_khz * 1e3


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
    peak_fp8_flops_per_s: float | None = None


_T, _G, _GIB = 1e12, 1e9, float(1 << 30)

# First match wins, so specific variants come before their family.
# TPU and A100/H100/H200 numbers: docs/reference.md, peak numbers. V100 (SXM2) and B200
# are not there: they are NVIDIA's datasheet numbers (V100: 125 TFLOP/s fp16
# tensor, 15.7 fp32, 900 GB/s; B200: 2.25 PFLOP/s dense bf16, 4.5 fp8, 80 TFLOP/s fp32, 8 TB/s;
# H100 PCIe fp8 1513). fp8 peaks are dense (the data sheets' "with sparsity" numbers halved);
# A100, V100 and the CDNA2 GPUs have no fp8 units.
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
    Chip("H100 PCIe", "gpu", r"h100.*pcie", 756 * _T, 2000 * _G, 80 * _G, 51 * _T, peak_fp8_flops_per_s=1513 * _T),
    Chip("H100", "gpu", r"h100", 989 * _T, 3350 * _G, 80 * _G, 67 * _T, peak_fp8_flops_per_s=1979 * _T),
    Chip("H200", "gpu", r"h200", 989 * _T, 4800 * _G, 141 * _G, 67 * _T, peak_fp8_flops_per_s=1979 * _T),
    Chip("B200", "gpu", r"b200", 2250 * _T, 8000 * _G, 192 * _G, 80 * _T, peak_fp8_flops_per_s=4500 * _T),
    # AMD data sheet peaks (dense fp16/bf16 matrix; not the lower "max achievable"), docs/reference.md,
    # AMD GPUs. ROCm shows each GCD of an MI250 / MI250X as a device: their rows are half a module.
    Chip("MI250X GCD", "gpu", r"mi250x", 383 * _T / 2, 3200 * _G / 2, 128 * _G / 2, 47.9 * _T / 2),
    Chip("MI250 GCD", "gpu", r"mi250", 362.1 * _T / 2, 3200 * _G / 2, 128 * _G / 2, 45.3 * _T / 2),
    Chip("MI210", "gpu", r"mi210", 181 * _T, 1600 * _G, 64 * _G, 22.6 * _T),
    Chip("MI300A", "gpu", r"mi300a", 980.6 * _T, 5300 * _G, 128 * _G, 122.6 * _T, peak_fp8_flops_per_s=1961.2 * _T),
    Chip("MI300X", "gpu", r"mi300x", 1307.4 * _T, 5300 * _G, 192 * _G, 163.4 * _T, peak_fp8_flops_per_s=2614.9 * _T),
    Chip("MI325X", "gpu", r"mi325x", 1307.4 * _T, 6000 * _G, 256 * _G, 163.4 * _T, peak_fp8_flops_per_s=2614.9 * _T),
    # MI350X (not in docs/reference.md): MI355X's gfx950 with 256 CUs at 2.2 GHz against 2.4 (air-cooled, 1,000 W);
    # AMD's data sheet: 2.3 PFLOP/s dense fp16/bf16 (256 CUs x 4,096 FLOP per clock), 4.6 fp8, 144.2 TFLOP/s fp32.
    Chip("MI350X", "gpu", r"mi350x", 2306.9 * _T, 8000 * _G, 288 * _G, 144.2 * _T, peak_fp8_flops_per_s=4613.7 * _T),
    Chip("MI355X", "gpu", r"mi355x", 2500 * _T, 8000 * _G, 288 * _G, 157.3 * _T, peak_fp8_flops_per_s=5000 * _T),
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
        "peak_fp8_flops_per_s": pa.array([c.peak_fp8_flops_per_s for c in CHIPS], pa.float64()),
        "peak_hbm_bytes_per_s": pa.array([c.peak_hbm_bytes_per_s for c in CHIPS], pa.float64()),
        "hbm_bytes": pa.array([c.hbm_bytes for c in CHIPS], pa.float64()),
        "max_memory_bytes": pa.array([c.max_memory_bytes for c in CHIPS], pa.float64()),
    })


def hardware_models_sql() -> str:
    """:func:`hardware_models_table` as a SQL SELECT of its rows, same columns and types.

    A view of literals rather than a registered Arrow table: building Arrow arrays from Python values
    and registering them makes pyarrow and DuckDB import pandas (0.15-0.3 s of a command's start)
    to check whether the values are pandas objects."""
    def number(value: float | None) -> str:
        # repr round-trips the float; DuckDB parses the text to the same double
        return "NULL::DOUBLE" if value is None else f"'{float(value)!r}'::DOUBLE"

    def text(value: str) -> str:
        return "'" + value.replace("'", "''") + "'"

    rows = ",\n  ".join(
        f"({i}::INTEGER, {text(c.name)}, {text(c.kind)}, {text(c.pattern)}, {number(c.peak_flops_per_s)}, "
        f"{number(c.peak_fp32_flops_per_s)}, {number(c.peak_fp8_flops_per_s)}, {number(c.peak_hbm_bytes_per_s)}, "
        f"{number(c.hbm_bytes)}, {number(c.max_memory_bytes)})"
        for i, c in enumerate(CHIPS))
    return (f"SELECT * FROM (VALUES\n  {rows}\n) AS t(priority, chip, kind, model_pattern, peak_flops_per_s, "
            "peak_fp32_flops_per_s, peak_fp8_flops_per_s, peak_hbm_bytes_per_s, hbm_bytes, max_memory_bytes)")


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
