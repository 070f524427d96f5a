"""Async operations, steps and bottlenecks: the Python side of ``sql/async/async_ops.sql``,
``sql/async/async_summary.sql``, ``sql/steps/steps.sql`` and ``sql/steps/bottlenecks.sql``.

Each function runs one packaged analysis on an :class:`xprosql.engine.Engine` and returns
a :class:`xprosql.Result`; parameters left out take the defaults the SQL file declares, so
``run.analysis("bottlenecks")`` and :func:`bottlenecks` agree.

Options left None take the analysis's declared default (``xprosql.analyses()``).

Example:
    >>> import xprosql
    >>> run = xprosql.load("run/")                                          # doctest: +SKIP
    >>> bottlenecks(run.engine, scope="profile").pl().sort("exposed_host_offload_share", descending=True)  # doctest: +SKIP
    >>> async_ops(run.engine, kinds=["host_offload"]).pl().select("start_op", "window_ps", "bandwidth_bytes_per_s")  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from xprosql.engine import Engine, Result
from xprosql.queries._params import Profiles, given

__all__ = [
    "BOTTLENECK_CATEGORIES",
    "Scope",
    "async_ops",
    "async_summary",
    "bottlenecks",
    "steps",
]

# Rows of the bottleneck analysis: one step on one device, or a whole profile.
Scope = Literal["step", "profile"]

# The categories of sql/steps/bottlenecks.sql, in the order the sweep gives them priority;
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
    engine: Engine,
    *,
    profiles: Profiles = None,
    kinds: Sequence[str] | None = None,
    hidden_coverage: float | None = None,
    exposed_coverage: float | None = None,
    prefer_async_line: bool | None = None,
) -> Result:
    """One row per async operation (``sql/async/async_ops.sql``): window, bytes, bandwidth, coverage, status.

    ``kinds`` keeps only those kinds (``host_offload``, ``copy``, ``memcpy_HtoD``, ``nccl_all_reduce``,
    ...). ``hidden_coverage`` / ``exposed_coverage`` (0..1): the covered share of a window at or above
    which it is hidden, at or below which it is exposed (XProf's 0.9 and 0.1). ``prefer_async_line``:
    TPU windows from the ``Async XLA Ops`` line where there is one.

    Example:
        >>> async_ops(run.engine, kinds=["host_offload"]).pl().select("start_op", "bandwidth_bytes_per_s")  # doctest: +SKIP
    """
    return engine.analysis("async.async_ops", profiles=profiles, **given(
        kinds=None if kinds is None else list(kinds), hidden_coverage=hidden_coverage,
        exposed_coverage=exposed_coverage, prefer_async_line=prefer_async_line))


def async_summary(
    engine: Engine,
    *,
    profiles: Profiles = None,
    hidden_coverage: float | None = None,
    exposed_coverage: float | None = None,
    prefer_async_line: bool | None = None,
) -> Result:
    """Per profile and kind: exposed async time (ps) and bandwidth (bytes/s) against the peak
    (``sql/async/async_summary.sql``); the options are :func:`async_ops`'s.
    """
    return engine.analysis("async.async_summary", profiles=profiles, **given(
        hidden_coverage=hidden_coverage, exposed_coverage=exposed_coverage, prefer_async_line=prefer_async_line))


def steps(engine: Engine, *, profiles: Profiles = None) -> Result:
    """Steps per device with wall, busy and idle time in ps (``sql/steps/steps.sql``)."""
    return engine.analysis("steps.steps", profiles=profiles)


def bottlenecks(
    engine: Engine,
    *,
    profiles: Profiles = None,
    scope: Scope | None = None,
    peak_flops_per_s: float | None = None,
    peak_hbm_bytes_per_s: float | None = None,
    peak_source: str | None = None,
    collective_bound_share: float | None = None,
    data_transfer_bound_share: float | None = None,
    input_bound_share: float | None = None,
    input_moderate_share: float | None = None,
    launch_bound_share: float | None = None,
    launch_moderate_share: float | None = None,
    collective_high_share: float | None = None,
    collective_moderate_share: float | None = None,
    host_bound_share: float | None = None,
    idle_share: float | None = None,
    input_events: str | None = None,
    prefer_async_line: bool | None = None,
) -> Result:
    """Step-time breakdown and primary bottleneck per step and per profile (``sql/steps/bottlenecks.sql``).

    ``scope``: ``"step"`` or ``"profile"`` keeps only those rows. ``peak_*``: the roofs (FLOP/s,
    bytes/s) that decide compute- vs memory-bound ops, as in :func:`xprosql.queries.roofline.roofline`.
    The ``*_share`` options (0..1 of step time) are the thresholds that make a category the bottleneck
    or rate it high / moderate (XProf's by default: collectives 0.3, data transfer 0.3, input 0.2,
    launch 0.15, host 0.5, idle 0.1). ``input_events``: a regex on host event names that read input (their time is input wait).
    ``prefer_async_line``: TPU async windows from the ``Async XLA Ops`` line where there is one.

    Example:
        >>> bottlenecks(run.engine, scope="profile", collective_bound_share=0.25).pl()  # doctest: +SKIP
    """
    # scope, the shares and the peaks are checked by the header's [choices: ...] and [range: ...], as for every caller.
    return engine.analysis("steps.bottlenecks", profiles=profiles, **given(
        scope=scope, peak_flops_per_s=peak_flops_per_s, peak_hbm_bytes_per_s=peak_hbm_bytes_per_s,
        peak_source=peak_source, collective_bound_share=collective_bound_share,
        data_transfer_bound_share=data_transfer_bound_share, input_bound_share=input_bound_share,
        input_moderate_share=input_moderate_share, launch_bound_share=launch_bound_share,
        launch_moderate_share=launch_moderate_share, collective_high_share=collective_high_share,
        collective_moderate_share=collective_moderate_share, host_bound_share=host_bound_share,
        idle_share=idle_share, input_events=input_events, prefer_async_line=prefer_async_line))
