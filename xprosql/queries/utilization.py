"""Measured utilization from hardware counters: TPU units (``sql/counters/utilization*.sql``) and GPU FLOPs.

Three views of the same TPU counter samples, each a packaged analysis:

* ``summary`` (``counters.utilization``): per chip and kernel, MXU, vector unit, XLU, HBM
  bandwidth and DMA utilization, cycle-weighted over the samples, with the busiest sample beside each;
* ``metrics`` (``counters.utilization_metrics``): every metric of XProf's utilization_viewer per
  chip, kernel and node, aggregated the same way;
* ``samples`` (``counters.utilization_samples``): the per-sample rows those are made of.

and :func:`gpu_flops` (``counters.gpu_flops``): FLOPs per GPU counter range from SASS counters.

Example:
    >>> import xprosql, polars as pl
    >>> run = xprosql.load("run/")                                                    # doctest: +SKIP
    >>> utilization(run.engine).pl().filter(pl.col("kernel").is_null())              # doctest: +SKIP
    >>> gpu_flops(run.engine).pl().select("kernel", "flops", "flop_rate")           # doctest: +SKIP
"""

from __future__ import annotations

from typing import Literal

from xprosql.engine import Engine, Result
from xprosql.errors import ParameterError
from xprosql.queries._params import Profiles

__all__ = ["LEVELS", "Level", "gpu_flops", "utilization"]

# How detailed: per chip and kernel, per XProf metric, or per counter sample.
Level = Literal["summary", "metrics", "samples"]
LEVELS: dict[str, str] = {"summary": "counters.utilization", "metrics": "counters.utilization_metrics",
                          "samples": "counters.utilization_samples"}


def utilization(engine: Engine, *, profiles: Profiles = None, level: Level = "summary") -> Result:
    """TPU utilization (0..1 shares of each unit's peak) measured by performance counters.

    Profiles without TPU counters give no rows.

    Example:
        >>> utilization(run.engine, level="metrics").pl()                         # doctest: +SKIP
    """
    if level not in LEVELS:
        raise ParameterError(f"level must be one of {', '.join(LEVELS)}, not {level!r}")
    return engine.analysis(LEVELS[level], profiles=profiles)


def gpu_flops(engine: Engine, *, profiles: Profiles = None) -> Result:
    """FLOPs per GPU counter range (an FMA counts two), per precision (``sql/counters/gpu_flops.sql``)."""
    return engine.analysis("counters.gpu_flops", profiles=profiles)
