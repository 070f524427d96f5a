"""Questions across many profiles: cohorts compared, regressions over time, the worst.

Each is a module of ``sql/fleet/`` (``compare``, ``compare_bottlenecks``, ``regressions``,
``profile_summary``, ``worst_steps``) run by the engine, so on a Dask cluster
(``load(DIR, cluster=client)``) the per-profile analyses under them run per share of profiles;
these functions turn SQL expressions on ``profiles`` into the cohorts those files take.

Example:
    >>> run = xprosql.load("run/")                                           # doctest: +SKIP
    >>> run.compare(baseline="tags['commit'] = 'a1'", candidate="tags['commit'] = 'b2'").pl().head(3)  # doctest: +SKIP
    >>> run.regressions(tag="job").pl()                                      # doctest: +SKIP
    >>> run.worst(by="memory_bound_share", top=5).pl()                       # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

from xprosql.engine import Engine, Result
from xprosql.errors import ParameterError
from xprosql.queries._params import given

__all__ = ["Cohort", "CompareBy", "compare", "regressions", "worst"]

# A cohort: a SQL expression on the profiles table (tags, hosts, times), or the profile ids themselves.
Cohort = str | Iterable[str]
# What two cohorts are compared by: op, HLO category or module (roofline rows), or bottleneck category.
CompareBy = Literal["op", "category", "module", "bottleneck"]
# fleet.profile_summary columns where a low value is the bad one.
_LOW_IS_BAD = ("busy_fraction", "step_flop_utilization", "step_hbm_utilization")


def _cohort(engine: Engine, label: str, cohort: Cohort) -> list[str]:
    """The profile ids of a cohort: those whose profiles row satisfies an expression, or those given (each in
    the warehouse); never none, which would compare against nothing."""
    if isinstance(cohort, str):
        ids = engine.profiles_where(cohort)
        if not ids:
            raise ParameterError(f"{label} cohort is empty: no profile satisfies {cohort!r}")
        return ids
    ids = list(dict.fromkeys(cohort))  # each checked by the analysis: a profile of the warehouse
    if not ids:
        raise ParameterError(f"{label} cohort is empty: give a SQL expression on profiles or profile ids")
    return ids


def compare(
    engine: Engine,
    *,
    baseline: Cohort,
    candidate: Cohort,
    by: CompareBy = "op",
    peak_flops_per_s: float | None = None,
    peak_hbm_bytes_per_s: float | None = None,
    peak_source: str | None = None,
) -> Result:
    """Two cohorts side by side, the largest change in time per profile first.

    ``baseline`` and ``candidate`` are each a SQL expression on ``profiles`` (tags, time ranges, hosts: one
    expression, as a ``WHERE`` takes it), or the profile ids themselves (a list; the ids the analysis module
    ``fleet.compare`` takes). ``xprosql compare DIR --baseline SQL --candidate SQL`` is the same on the command
    line. A cohort that selects no profile raises ParameterError.
    ``by``: ``"op"``, ``"category"`` or ``"module"`` (``sql/fleet/compare.sql``: time per profile in ps,
    share, FLOP rate, HBM bandwidth), or ``"bottleneck"`` (``sql/fleet/compare_bottlenecks.sql``: the
    step-time categories of the bottleneck analysis). Peaks (FLOP/s, bytes/s) as in the roofline.

    Example:
        >>> compare(run.engine, baseline="tags['commit'] = 'a1'", candidate="tags['commit'] = 'b2'").pl()  # doctest: +SKIP
        >>> compare(run.engine, baseline=["3fa2c0de12345678"], candidate="host LIKE 'tpu-%'", by="category").pl()  # doctest: +SKIP
    """
    if by not in ("op", "category", "module", "bottleneck"):
        raise ParameterError(f"by must be op, category, module or bottleneck, not {by!r}")
    cohorts = {"baseline": _cohort(engine, "baseline", baseline), "candidate": _cohort(engine, "candidate", candidate)}
    peaks = given(peak_flops_per_s=peak_flops_per_s, peak_hbm_bytes_per_s=peak_hbm_bytes_per_s, peak_source=peak_source)
    if by == "bottleneck":
        return engine.analysis("fleet.compare_bottlenecks", **cohorts, **peaks)
    return engine.analysis("fleet.compare", **cohorts, by=by, **peaks)


def regressions(
    engine: Engine,
    *,
    tag: str = "job",
    window: int | None = None,
    threshold: float | None = None,
    mads: float | None = None,
    top: int | None = None,
) -> Result:
    """Changes of level over time in each series of profiles sharing a value of ``tag``.

    Step time and the time per step of the ``top`` longest ops; see ``sql/fleet/regressions.sql`` for
    the rule (``window`` profiles before and after, a relative change over ``threshold`` and over
    ``mads`` median absolute deviations). One row per change, with the first profile after it.

    Example:
        >>> regressions(run.engine, tag="job", threshold=0.05).pl()               # doctest: +SKIP
    """
    return engine.analysis("fleet.regressions", tag=tag, **given(window=window, threshold=threshold, mads=mads, top=top))


def worst(
    engine: Engine,
    *,
    by: str = "step_time_ps",
    top: int = 10,
    analysis: str | None = None,
    scope: Literal["step", "profile"] | None = None,
) -> Result:
    """The ``top`` worst rows across the warehouse, largest ``by`` first.

    * ``by="step"``: the longest steps (``sql/fleet/worst_steps.sql``).
    * ``analysis=None``: profiles by a column of ``sql/fleet/profile_summary.sql`` (step_time_ps,
      max_step_time_ps, memory_bound_share, idle_share, ...; ``busy_fraction``, ``step_flop_utilization``
      and ``step_hbm_utilization`` rank smallest first, since low is bad).
    * ``analysis="NAME"``: the rows of any analysis by any of its columns, e.g.
      ``worst(engine, analysis="roofline", by="self_time_ps")``; ``scope`` keeps the rows whose
      ``scope`` column says so (bottlenecks: ``step`` or ``profile``).

    Example:
        >>> worst(run.engine, by="idle_share", top=5).pl()                         # doctest: +SKIP
    """
    import polars as pl

    if by == "step" and analysis is None:
        return engine.analysis("fleet.worst_steps", top=top)
    name = analysis or "fleet.profile_summary"
    result = engine.analysis(name)
    columns = result.columns
    if scope is not None and "scope" not in columns:
        raise ParameterError(f"{name} has no scope column")
    if by not in columns:
        raise ParameterError(f"{name} has no column {by!r}; columns are {columns}")
    frame = result.pl()
    if scope is not None:
        frame = frame.filter(pl.col("scope") == scope)
    low_is_bad = analysis is None and by in _LOW_IS_BAD
    order = [by, *(c for c in ("profile_id", "device_kind") if c in frame.columns and c != by)]
    frame = frame.filter(pl.col(by).is_not_null())
    frame = frame.sort(order, descending=[not low_is_bad] + [False] * (len(order) - 1)).head(top)
    return Result.from_arrow(frame.to_arrow(), description=f"worst {name} by {by}")
