"""Holistic Trace Analysis (HTA) analyses as SQL: the Python side of ``sql/hta/``.

One row per GPU (temporal breakdown, overlap), per stream and idle category, per launched op, or per
queue change. They share HTA's view of a trace (``sql/hta/_gpu_ops.sql``): the last ProfilerStep's ops
left out unless ``include_last_step=True``, and, with ``us_rounding=True``, every event rounded to
whole microseconds as HTA does (by default times stay exact). Options left None take the analysis's
declared default (``xprosql.analyses()``).

Example:
    >>> import xprosql
    >>> run = xprosql.load("run/")                                       # doctest: +SKIP
    >>> temporal_breakdown(run.engine, us_rounding=True).pl()           # doctest: +SKIP
"""

from __future__ import annotations

from xprosql.engine import Engine, Result
from xprosql.queries._params import Profiles, given

__all__ = ["comm_comp_overlap", "idle_time", "launch_stats", "queue_length", "temporal_breakdown"]


def temporal_breakdown(engine: Engine, *, profiles: Profiles = None, include_last_step: bool | None = None,
                       us_rounding: bool | None = None) -> Result:
    """Idle, compute and non-compute time (ps) of each GPU's busy span (``sql/hta/temporal_breakdown.sql``)."""
    return engine.analysis("hta.temporal_breakdown", profiles=profiles,
                           **given(include_last_step=include_last_step, us_rounding=us_rounding))


def idle_time(engine: Engine, *, profiles: Profiles = None, include_last_step: bool | None = None,
              us_rounding: bool | None = None, kernel_wait_ps: int | None = None) -> Result:
    """Idle gaps per stream split into host_wait, kernel_wait and other, ps (``sql/hta/idle_time.sql``).

    ``kernel_wait_ps``: a gap shorter than this is a kernel wait (HTA: 30 ns).
    """
    return engine.analysis("hta.idle_time", profiles=profiles, **given(
        include_last_step=include_last_step, us_rounding=us_rounding, kernel_wait_ps=kernel_wait_ps))


def comm_comp_overlap(engine: Engine, *, profiles: Profiles = None, include_last_step: bool | None = None,
                      us_rounding: bool | None = None) -> Result:
    """Share (0..1) of communication time overlapped by computation, per GPU (``sql/hta/comm_comp_overlap.sql``)."""
    return engine.analysis("hta.comm_comp_overlap", profiles=profiles,
                           **given(include_last_step=include_last_step, us_rounding=us_rounding))


def launch_stats(engine: Engine, *, profiles: Profiles = None, include_last_step: bool | None = None,
                 us_rounding: bool | None = None, include_memory_events: bool | None = None,
                 runtime_cutoff_ps: int | None = None, launch_delay_cutoff_ps: int | None = None) -> Result:
    """One row per launched GPU op: call duration, op duration, launch delay (ps) and outlier flags
    (``sql/hta/launch_stats.sql``; HTA flags calls over 50 us and delays over 100 us).
    """
    return engine.analysis("hta.launch_stats", profiles=profiles, **given(
        include_last_step=include_last_step, us_rounding=us_rounding, include_memory_events=include_memory_events,
        runtime_cutoff_ps=runtime_cutoff_ps, launch_delay_cutoff_ps=launch_delay_cutoff_ps))


def queue_length(engine: Engine, *, profiles: Profiles = None, summary: bool = False,
                 include_last_step: bool | None = None, us_rounding: bool | None = None,
                 max_queue_length: int | None = None) -> Result:
    """Launch queue length per stream over time (``sql/hta/queue_length.sql``), or with ``summary=True``
    per stream its max, time-weighted mean and time at a full queue of ``max_queue_length`` launches
    (``sql/hta/queue_summary.sql``).
    """
    options = given(include_last_step=include_last_step, us_rounding=us_rounding)
    if summary:
        return engine.analysis("hta.queue_summary", profiles=profiles, **options, **given(max_queue_length=max_queue_length))
    return engine.analysis("hta.queue_length", profiles=profiles, **options)
