"""Measured utilization from hardware counters: TPU units (``sql/utilization*.sql``) and GPU FLOPs.

Three views of the same TPU counter samples, each a packaged analysis:

* ``utilization`` (default): per chip and kernel, MXU, vector unit, XLU, HBM
  bandwidth and DMA utilization, cycle-weighted over the samples, with the
  busiest sample beside each;
* ``utilization_metrics``: every metric of XProf's utilization_viewer per chip,
  kernel and node, aggregated the same way;
* ``utilization_samples``: the per-sample rows those are made of.

and ``counters_flops``: FLOPs per GPU counter range from SASS counters.

Example:
    >>> import xprosql
    >>> run = xprosql.load("run/")                                              # doctest: +SKIP
    >>> chips = run.utilization().filter(pl.col("kernel").is_null())           # doctest: +SKIP
    >>> chips.select("device", "mxu_utilization", "hbm_utilization")            # doctest: +SKIP
    >>> gpu_flops(run).select("kernel", "flops", "flop_rate")                   # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

import polars as pl

if TYPE_CHECKING:
    from xprosql.run import Run

__all__ = ["utilization", "gpu_flops", "LEVELS"]

LEVELS = {"summary": "utilization", "metrics": "utilization_metrics", "samples": "utilization_samples"}


def utilization(
    run: Run,
    *,
    profiles: Sequence[str] | None = None,
    level: Literal["summary", "metrics", "samples"] = "summary",
) -> pl.DataFrame:
    """TPU utilization measured by performance counters, as Polars.

    ``level``: ``summary`` (one row per chip and kernel, and per chip with
    kernel null; ``sql/utilization.sql``), ``metrics`` (every XProf metric per
    chip, kernel and node; ``sql/utilization_metrics.sql``) or ``samples``
    (per counter sample; ``sql/utilization_samples.sql``). Profiles without
    TPU counters give no rows.

    Example:
        >>> utilization(run, level="metrics").filter(pl.col("metric") == "Avg MXU Busy")  # doctest: +SKIP
    """
    if level not in LEVELS:
        raise ValueError(f"level must be one of {sorted(LEVELS)}, not {level!r}")
    return run.analysis(LEVELS[level], profiles=list(profiles) if profiles is not None else None).pl()


def gpu_flops(run: Run, *, profiles: Sequence[str] | None = None) -> pl.DataFrame:
    """FLOPs per GPU counter range (fma counted twice), per precision, as Polars (``sql/counters_flops.sql``).

    Example:
        >>> gpu_flops(run).select(pl.col("flops").sum())                         # doctest: +SKIP
    """
    return run.analysis("counters_flops", profiles=list(profiles) if profiles is not None else None).pl()
