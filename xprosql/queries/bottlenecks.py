"""Async operations, steps and bottlenecks: the Python side of ``sql/async_ops.sql``,
``sql/async_summary.sql``, ``sql/steps.sql`` and ``sql/bottlenecks.sql``.

Each function runs one packaged analysis on a :class:`xprosql.Run` and returns
Polars; parameters left out take the defaults the SQL file declares, so
``run.analysis("bottlenecks")`` and :func:`bottlenecks` agree.

Example:
    >>> import xprosql
    >>> run = xprosql.load("run/")                                          # doctest: +SKIP
    >>> bottlenecks(run, scope="profile").sort("exposed_host_offload_share", descending=True)  # doctest: +SKIP
    >>> async_ops(run, kinds=["host_offload"]).select("start_op", "window_ps", "bandwidth_bytes_per_s")  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import polars as pl

from xprosql.queries.analyses import analysis_frame

if TYPE_CHECKING:
    from xprosql.run import Run

__all__ = [
    "BOTTLENECK_CATEGORIES",
    "async_ops",
    "async_summary",
    "bottlenecks",
    "steps",
]

# The categories of sql/bottlenecks.sql, in the order the sweep gives them priority;
# their *_ps columns sum to step_ps.
BOTTLENECK_CATEGORIES: tuple[str, ...] = (
    "compute_bound",
    "memory_bound",
    "other_compute",
    "exposed_collective",
    "exposed_host_offload",
    "exposed_dma",
    "launch_overhead",
    "input_wait",
    "host_wait",
    "idle",
)


def async_ops(
    run: Run,
    *,
    profiles: Sequence[str] | None = None,
    kinds: Sequence[str] | None = None,
    **params: Any,
) -> pl.DataFrame:
    """One row per async operation (``sql/async_ops.sql``): window, bytes, bandwidth, coverage, status.

    ``kinds`` keeps only those kinds (``host_offload``, ``copy``, ``memcpy_HtoD``,
    ``nccl_all_reduce``, ...); ``params``: ``hidden_coverage``,
    ``exposed_coverage``, ``prefer_async_line``.

    Example:
        >>> async_ops(run, kinds=["host_offload"]).group_by("status").len()   # doctest: +SKIP
    """
    frame = analysis_frame(run, "async_ops", profiles, dict(params))
    if kinds is not None:
        frame = frame.filter(pl.col("kind").is_in(list(kinds)))
    return frame


def async_summary(run: Run, *, profiles: Sequence[str] | None = None, **params: Any) -> pl.DataFrame:
    """Per profile and kind: exposed async time and bandwidth against the peak (``sql/async_summary.sql``).

    Example:
        >>> async_summary(run).select("kind", "exposed_ps", "aggregate_vs_peak")  # doctest: +SKIP
    """
    return analysis_frame(run, "async_summary", profiles, dict(params))


def steps(run: Run, *, profiles: Sequence[str] | None = None) -> pl.DataFrame:
    """Steps per device with wall, busy and idle time (``sql/steps.sql``).

    Example:
        >>> steps(run).select("device", "step", "source", "wall_ps", "busy_fraction")  # doctest: +SKIP
    """
    return analysis_frame(run, "steps", profiles, {})


def bottlenecks(
    run: Run,
    *,
    profiles: Sequence[str] | None = None,
    scope: str | None = None,
    **params: Any,
) -> pl.DataFrame:
    """Step-time breakdown and primary bottleneck per step and per profile (``sql/bottlenecks.sql``).

    ``scope``: ``"step"`` or ``"profile"`` keeps only those rows; ``params``
    override the thresholds (``collective_bound_share=0.25``, ...) and the
    included analyses' parameters.

    Example:
        >>> bottlenecks(run, scope="profile").select("profile_id", "primary_bottleneck", "primary_share")  # doctest: +SKIP
    """
    if scope not in (None, "step", "profile"):
        raise ValueError(f"scope must be 'step', 'profile' or None, not {scope!r}")
    frame = analysis_frame(run, "bottlenecks", profiles, dict(params))
    if scope is not None:
        frame = frame.filter(pl.col("scope") == scope)
    return frame
