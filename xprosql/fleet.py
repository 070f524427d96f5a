"""Questions across many profiles: cohorts compared, regressions over time, the worst.

Each is a file of ``sql/`` (``fleet_compare``, ``fleet_compare_bottlenecks``,
``fleet_regressions``, ``fleet_profiles``, ``fleet_worst_steps``) run through
:meth:`xprosql.Run.analysis`, so on a Dask cluster (``load(DIR, cluster=client)``)
the per-profile analyses under them run per share of profiles; these functions
turn SQL predicates on ``profiles`` into the cohorts those files take.

Example:
    >>> run = xprosql.load("run/")                                           # doctest: +SKIP
    >>> run.compare(baseline="tags['commit'] = 'a1'", candidate="tags['commit'] = 'b2'").head(3)  # doctest: +SKIP
    >>> run.regressions(tag="job")                                           # doctest: +SKIP
    >>> run.worst(by="memory_bound_share", n=5)                              # doctest: +SKIP
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import duckdb
import polars as pl

from xprosql._duckdb import connect
from xprosql.errors import XprosqlError
from xprosql.warehouse import Snapshot

if TYPE_CHECKING:
    from xprosql.run import Run

__all__ = ["profiles_where", "cohort", "compare", "regressions", "worst"]


def profiles_where(snapshot: Snapshot, where: str) -> list[str]:
    """Profile ids of ``snapshot`` whose ``profiles`` row satisfies the SQL predicate ``where``.

    Reads the ``profiles`` table only (one small row per profile), so a predicate
    on tags prunes every other table to the matching profiles' files.

    Example:
        >>> snap, _ = Warehouse("run/").snapshot()                            # doctest: +SKIP
        >>> profiles_where(snap, "tags['job'] = 'bert' AND host LIKE 'tpu-%'")  # doctest: +SKIP
        ['0a1b...', ...]
    """
    scan = snapshot.scan_sql("profiles")
    if scan is None:
        return []
    with connect() as con:
        con.execute(f"CREATE VIEW profiles AS {scan}")
        try:
            rows = con.execute(f"SELECT profile_id FROM profiles WHERE ({where}) ORDER BY profile_id").fetchall()
        except duckdb.Error as exc:
            raise XprosqlError(f"bad profile predicate {where!r}: {exc}") from None
    return [r[0] for r in rows]


def cohort(run: Run, where: str) -> list[str]:
    """The profile ids of ``run`` that a SQL predicate on ``profiles`` selects."""
    return profiles_where(run._snapshot, where)


def compare(run: Run, *, baseline: str, candidate: str, by: str = "op", **params: Any) -> pl.DataFrame:
    """Two cohorts side by side, the largest change in time per profile first.

    ``baseline`` and ``candidate`` are SQL predicates on ``profiles`` (tags, time
    ranges, hosts). ``by``: ``"op"``, ``"category"`` or ``"module"``
    (``sql/fleet_compare.sql``: time per profile, share, FLOP rate, HBM
    bandwidth), or ``"bottleneck"`` (``sql/fleet_compare_bottlenecks.sql``: the
    step-time categories of ``sql/bottlenecks.sql``: compute-bound, memory-bound,
    exposed collectives, host wait, idle, ...). ``params`` go to the analysis
    underneath (roofline or bottlenecks).

    Example:
        >>> compare(run, baseline="tags['commit'] = 'a1'", candidate="tags['commit'] = 'b2'", by="category")  # doctest: +SKIP
    """
    base, cand = cohort(run, baseline), cohort(run, candidate)
    for label, ids, predicate in (("baseline", base, baseline), ("candidate", cand, candidate)):
        if not ids:
            raise XprosqlError(f"{label} cohort is empty: no profile satisfies {predicate!r}")
    if by == "bottleneck":
        return run.analysis("fleet_compare_bottlenecks", baseline=base, candidate=cand, **params).pl()
    if by not in ("op", "category", "module"):
        raise ValueError(f"by must be op, category, module or bottleneck, not {by!r}")
    return run.analysis("fleet_compare", baseline=base, candidate=cand, by=by, **params).pl()


def regressions(run: Run, *, tag: str = "job", **params: Any) -> pl.DataFrame:
    """Changes of level over time in each series of profiles sharing a value of ``tag``.

    Step time and the time per step of the longest ops; see
    ``sql/fleet_regressions.sql`` for the rule and its parameters (``window``,
    ``threshold``, ``mads``, ``top_ops``). One row per change, with the first
    profile after it.

    Example:
        >>> regressions(run, tag="job", threshold=0.05).select("series", "metric", "first_profile_id", "change")  # doctest: +SKIP
    """
    return run.analysis("fleet_regressions", tag=tag, **params).pl()


def worst(
    run: Run, *, by: str = "step_time_ps", n: int = 10, analysis: str | None = None, scope: str | None = None, **params: Any
) -> pl.DataFrame:
    """The ``n`` worst rows across the warehouse, largest ``by`` first.

    * ``by="step"``: the longest steps (``sql/fleet_worst_steps.sql``).
    * ``analysis=None``: profiles by a column of ``sql/fleet_profiles.sql``
      (step_time_ps, max_step_time_ps, memory_bound_share, idle_share, ...;
      ``busy_fraction``, ``flop_utilization`` and ``hbm_utilization`` rank
      smallest first, since low is bad).
    * ``analysis="NAME"``: the rows of any analysis by any of its columns, e.g.
      ``worst(run, analysis="roofline", by="self_time_ps")``; ``scope`` keeps the
      rows whose ``scope`` column says so (bottlenecks: ``step`` or ``profile``).

    Example:
        >>> worst(run, by="idle_share", n=5).select("profile_id", "host", "idle_share")  # doctest: +SKIP
        >>> worst(run, analysis="bottlenecks", scope="step", by="exposed_collective_ps")  # doctest: +SKIP
    """
    if by == "step" and analysis is None:
        return run.analysis("fleet_worst_steps", n=n, **params).pl()
    frame = run.analysis(analysis or "fleet_profiles", **params).pl()
    if scope is not None:
        if "scope" not in frame.columns:
            raise KeyError(f"{analysis or 'fleet_profiles'} has no scope column")
        frame = frame.filter(pl.col("scope") == scope)
    if by not in frame.columns:
        raise KeyError(f"{analysis or 'fleet_profiles'} has no column {by!r}; columns are {frame.columns}")
    low_is_bad = analysis is None and by in ("busy_fraction", "flop_utilization", "hbm_utilization")
    order = [by, *(c for c in ("profile_id", "device_kind") if c in frame.columns and c != by)]
    frame = frame.filter(pl.col(by).is_not_null())
    return frame.sort(order, descending=[not low_is_bad] + [False] * (len(order) - 1)).head(n)
