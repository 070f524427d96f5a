"""CUPTI PM sampling samples in a Kineto-format trace, as rows of the ``counters`` table.

:func:`xprosql.cupti.record` with ``metrics=`` writes each decoded PM sample as
one ``X`` event of category ``pm_sampling`` on the sampled GPU (``pid`` = device
index): ``ts``/``dur`` span the sample's interval and ``args`` hold CUPTI's
sample index under ``sample`` and one entry per metric, name -> value. That is
the layout of ``cuda_profiler_range`` events (one event, metrics as args), so
the event lands in ``events`` like any other and each metric becomes one
``counters`` row with ``counter_set = 'pm_sampling'``.

Example:
    >>> pm_sampling_rows(7, 0, {"sample": 3, "sm__cycles_elapsed.sum": 1500.0}, start_ps=0, end_ps=10)
    [(7, 0, None, 3, None, 'sm__cycles_elapsed.sum', None, 'pm_sampling', None, 1500.0, 0, 10)]
"""

from __future__ import annotations

from typing import Any

from xprosql.models.recording import PM_SAMPLE_ARG, PM_SAMPLING_CATEGORY

__all__ = ["PM_SAMPLING_CATEGORY", "pm_sampling_rows"]


def pm_sampling_rows(event_id: int, device_id: int, args: dict[str, Any], *, start_ps: int,
                     end_ps: int) -> list[tuple]:
    """``counters`` rows of one ``pm_sampling`` event: one per numeric metric arg.

    PM metric values are evaluated doubles (ratios, rates, sums), not raw counter
    words, so they go to ``value_double`` and ``value`` stays NULL.
    """
    sample = args.get(PM_SAMPLE_ARG)
    sample = sample if isinstance(sample, int) and not isinstance(sample, bool) else None
    return [(event_id, device_id, None, sample, None, name, None, PM_SAMPLING_CATEGORY, None, float(value),
             start_ps, end_ps)
            for name, value in args.items()
            if name != PM_SAMPLE_ARG and isinstance(value, (int, float)) and not isinstance(value, bool)]
