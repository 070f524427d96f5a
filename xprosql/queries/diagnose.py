"""Findings: what is wrong in a profile (or a fleet), how much step time a fix would save, and what to change.

Each rule is a module ``sql/diagnose/<rule>.sql`` returning the columns of the ``stored_findings`` table
(``xprosql.models.tables``); ``diagnose.findings`` runs them all at their default thresholds, reading the
findings compaction stored where it can. Other thresholds, or a few rules, run those rules alone.

Example:
    >>> run = xprosql.load("run/")                                                    # doctest: +SKIP
    >>> run.diagnose().pl().select("profile_id", "rule", "expected_saving_share", "title")  # doctest: +SKIP
    >>> run.diagnose(rules=["gpu_gaps"], thresholds={"gpu_gaps": {"min_gap_ps": 10**9}})   # doctest: +SKIP
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import pyarrow as pa

from xprosql.engine import Engine, Result
from xprosql.errors import NotApplicableWarning, ParameterError
from xprosql.models.tables import PARTITION_COLUMN, TABLES
from xprosql.queries._params import Profiles

__all__ = ["SEVERITIES", "Severity", "diagnose", "job_profiles", "rule_names"]

Severity = Literal["high", "medium", "low"]
SEVERITIES: tuple[Severity, ...] = ("high", "medium", "low")
_AREA = "diagnose."
_ALL = "diagnose.findings"
_FINDINGS = pa.schema([pa.field(PARTITION_COLUMN, pa.string()), *TABLES["stored_findings"]])


def rule_names(engine: Engine) -> list[str]:
    """The rule names (``sql/diagnose/<rule>.sql``), as ``rule`` holds them."""
    return sorted(m.id.removeprefix(_AREA) for m in engine.library.public()
                  if m.id.startswith(_AREA) and m.id != _ALL)


def job_profiles(engine: Engine, job: str) -> list[str]:
    """The profile ids of a job of ``jobs.jobs``, named by its ``job_id``, its key (``tag:NAME``, a run
    directory) or its job tag's value."""
    table = engine.analysis("jobs.jobs").arrow().to_pylist()
    for row in table:
        if row["job_id"] == job or row["job"] in (job, f"tag:{job}"):
            return list(row["profile_ids"])
    known = ", ".join(sorted(r["job"] for r in table)[:10]) or "none"
    raise ParameterError(f"no job {job!r} in the warehouse; jobs: {known}")


def diagnose(
    engine: Engine,
    *,
    profiles: Profiles = None,
    rules: Sequence[str] | None = None,
    thresholds: Mapping[str, Mapping[str, Any]] | None = None,
    min_severity: Severity = "low",
) -> Result:
    """Every finding of the chosen ``rules`` (default: all) over ``profiles`` (default: all), the largest
    ``expected_saving_ps`` first, at least ``min_severity``. ``thresholds``: per rule, its parameters
    (``xprosql analyses diagnose.<rule>``), e.g. ``{"gpu_gaps": {"min_gap_ps": 10**9}}``.

    A profile no rule can apply to (no device ops, so no steps) is named in a
    :class:`~xprosql.NotApplicableWarning`, also kept in the result's ``notes``.
    """
    known = rule_names(engine)
    chosen = list(dict.fromkeys(rules)) if rules is not None else known
    thresholds = dict(thresholds or {})
    for rule in [*chosen, *thresholds]:
        if rule not in known:
            raise ParameterError(f"no rule {rule!r}; rules are {', '.join(known)}")
    unused = sorted(set(thresholds) - set(chosen))
    if unused:
        raise ParameterError(f"thresholds for rules not run: {', '.join(unused)}")
    if min_severity not in SEVERITIES:
        raise ParameterError(f"min_severity must be one of {', '.join(SEVERITIES)}, not {min_severity!r}")
    if rules is None and not thresholds:
        table = engine.analysis(_ALL, profiles=profiles).arrow()
    else:
        parts = [engine.analysis(_AREA + rule, profiles=profiles, **thresholds.get(rule, {})).arrow() for rule in chosen]
        table = _in_order(pa.concat_tables(parts)) if parts else _FINDINGS.empty_table()
    import pyarrow.compute as pc  # not at import: run.py imports this module for every command

    allowed = SEVERITIES[: SEVERITIES.index(min_severity) + 1]
    table = table.filter(pc.is_in(table.column("severity"), pa.array(allowed)))
    result = Result.from_arrow(table, description=_ALL)
    for note in _not_applicable(engine, profiles):
        result.notes.append(note)
        warnings.warn(note, NotApplicableWarning, stacklevel=3)
    return result


def _in_order(table: pa.Table) -> pa.Table:
    """Rules run one by one, in diagnose.findings' order: the largest saving first."""
    return table.sort_by([("expected_saving_ps", "descending"), ("expected_saving_share", "descending"),
                          ("profile_id", "ascending"), ("rule", "ascending")])


def _not_applicable(engine: Engine, profiles: Profiles) -> list[str]:
    """Why rules do not apply to some profiles: no steps at all (no device ops), which every saving is a share of;
    or no step markers, which the idle-time rules need (their one "step" would be the whole capture)."""
    selected = engine.restricted(profiles).profile_ids
    with warnings.catch_warnings():  # said below, in diagnose's words
        warnings.simplefilter("ignore", NotApplicableWarning)
        steps = engine.analysis("steps.steps", profiles=profiles).arrow()
    sources: dict[str, set[str]] = {}
    for profile_id, source in zip(steps.column("profile_id").to_pylist(), steps.column("source").to_pylist()):
        sources.setdefault(profile_id, set()).add(source)
    notes = []
    without = [p for p in selected if p not in sources]
    if without:
        notes.append(f"diagnose: no rule applies to {_named(engine, without, selected)}: they have no device ops (TPU XLA "
                     "ops, GPU kernels or copies, host XLA ops or PyTorch cpu_ops), so no steps to save time in")
    unmarked = [p for p in selected if p in sources and sources[p] <= {"profile", "unmarked"}]
    if unmarked:
        notes.append(f"diagnose: host_bound, gpu_gaps and low_utilization do not apply to {_named(engine, unmarked, selected)}: "
                     "they have no step markers, so their one step is the whole capture, start-up included; mark steps "
                     "(torch.profiler.profile(schedule=...) with prof.step(), jax.profiler.StepTraceAnnotation)")
    return notes


def _named(engine: Engine, some: Sequence[str], selected: Sequence[str]) -> str:
    """``3 of 17 profiles (a.json.gz, b.xplane.pb, c.json.gz)``, at most three named."""
    names = sorted(set(engine.source_names(some).values()))
    shown = ", ".join(names[:3]) + (f" and {len(some) - 3} more" if len(some) > 3 else "")
    return f"{len(some)} of {len(selected)} profiles ({shown})"
