"""Hardware peak models, used where a profile does not record its own peaks.

Profile stats always win over this table (REFERENCE.md section 9).

Example:
    >>> gpu_model(compute_capability=(7, 0), sm_count=80, memory_bytes=16945512448)
    'Tesla V100'
"""

from __future__ import annotations

__all__ = ["gpu_model", "gpu_peak_flops_per_s", "FP32_LANES_PER_SM"]

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
