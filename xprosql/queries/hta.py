"""Holistic Trace Analysis (HTA) analyses as SQL: the Python side of ``sql/hta_*.sql``.

Each function returns Polars with one row per GPU (temporal breakdown, overlap),
per stream and idle category, per launched op, or per queue change. They share
HTA's view of a trace (``sql/hta_gpu_ops.sql``): the last ProfilerStep's ops left
out unless ``include_last_step=True``, and, with ``us_rounding=True``, every
event rounded to whole microseconds as HTA does (by default times stay exact).

Example:
    >>> import xprosql
    >>> run = xprosql.load("run/")                                       # doctest: +SKIP
    >>> temporal_breakdown(run).select("rank", "idle_pct", "compute_pct", "non_compute_pct")  # doctest: +SKIP
    >>> launch_stats(run).filter(pl.col("long_delay")).height                 # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import polars as pl

from xprosql.queries.analyses import analysis_frame

if TYPE_CHECKING:
    from xprosql.run import Run

__all__ = [
    "comm_comp_overlap",
    "idle_time",
    "launch_stats",
    "queue_length",
    "temporal_breakdown",
]


def temporal_breakdown(run: Run, *, profiles: Sequence[str] | None = None, **params: Any) -> pl.DataFrame:
    """Idle, compute and non-compute time of each GPU's busy span (``sql/hta_temporal_breakdown.sql``).

    Example:
        >>> temporal_breakdown(run, us_rounding=True)["idle_pct"]             # doctest: +SKIP
    """
    return analysis_frame(run, "hta_temporal_breakdown", profiles, dict(params))


def idle_time(run: Run, *, profiles: Sequence[str] | None = None, **params: Any) -> pl.DataFrame:
    """Idle gaps per stream split into host_wait, kernel_wait and other (``sql/hta_idle_time.sql``).

    Example:
        >>> idle_time(run).filter(pl.col("category") == "host_wait")          # doctest: +SKIP
    """
    return analysis_frame(run, "hta_idle_time", profiles, dict(params))


def comm_comp_overlap(run: Run, *, profiles: Sequence[str] | None = None, **params: Any) -> pl.DataFrame:
    """Share of communication time overlapped by computation, per GPU (``sql/hta_comm_comp_overlap.sql``).

    Example:
        >>> comm_comp_overlap(run).select("rank", "overlap_pct")               # doctest: +SKIP
    """
    return analysis_frame(run, "hta_comm_comp_overlap", profiles, dict(params))


def launch_stats(run: Run, *, profiles: Sequence[str] | None = None, **params: Any) -> pl.DataFrame:
    """One row per launched GPU op: call duration, op duration, launch delay and outlier flags
    (``sql/hta_launch_stats.sql``).

    Example:
        >>> launch_stats(run).select(pl.col("launch_delay_ps").mean())         # doctest: +SKIP
    """
    return analysis_frame(run, "hta_launch_stats", profiles, dict(params))


def queue_length(
    run: Run, *, profiles: Sequence[str] | None = None, summary: bool = False, **params: Any
) -> pl.DataFrame:
    """Launch queue length per stream over time (``sql/hta_queue_length.sql``), or with
    ``summary=True`` per stream its max, time-weighted mean and time at a full queue
    (``sql/hta_queue_summary.sql``, ``max_queue_length=1024``).

    Example:
        >>> queue_length(run, summary=True).select("stream_id", "max_queue_length", "time_at_full_ps")  # doctest: +SKIP
    """
    return analysis_frame(run, "hta_queue_summary" if summary else "hta_queue_length", profiles, dict(params))
