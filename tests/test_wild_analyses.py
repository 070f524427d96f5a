"""Analyses on profiles from the wild, generated here: JAX on 8 host CPU devices with shard_map
collectives, and 2-rank PyTorch DDP on gloo (tests/wild_profiles.py).

Shares stay within 1 when one host plane runs 8 XLA devices; collectives count as communication
on XLA:CPU and gloo; an analysis with nothing to read in a profile says so; ops beating a roof are
flagged.
"""

from __future__ import annotations

import subprocess
import sys
import warnings
from pathlib import Path

import polars as pl
import pytest

import xprosql
from xprosql.engine.library import library

# Generous roofs for the CPU: every op classifies (peaks unknown otherwise), none beats them.
ROOFS = {"peak_flops_per_s": 1e15, "peak_hbm_bytes_per_s": 1e14}


def _share_columns(frame: pl.DataFrame) -> list[str]:
    return [c for c, t in frame.schema.items() if t.is_numeric() and c.endswith(("_share", "_fraction", "efficiency"))]


@pytest.mark.parametrize("warehouse", ["jax_sharded_warehouse", "gloo_ddp_warehouse"])
@pytest.mark.parametrize("analysis", [m.id for m in library().public() if not m.id.startswith("fleet.compare")])
def test_no_share_exceeds_one(request: pytest.FixtureRequest, warehouse: str, analysis: str) -> None:
    with xprosql.load(request.getfixturevalue(warehouse)) as run, warnings.catch_warnings():
        warnings.simplefilter("ignore", xprosql.NotApplicableWarning)
        params = ROOFS if set(ROOFS) <= set(library().parameters(library().module(analysis).id)) else {}
        frame = run.analysis(analysis, **params).pl()
    for column in _share_columns(frame):
        assert (frame[column].drop_nulls() <= 1 + 1e-9).all(), (column, frame[column].max())


def test_each_xla_device_of_the_host_counts_once(jax_sharded_warehouse: Path) -> None:
    with xprosql.load(jax_sharded_warehouse) as run:
        # Counted from the raw events: the ops' device_ordinal stats, and each ordinal's first-to-last op span.
        spans = run.sql("""
            SELECT count(*) AS devices, sum(span) AS device_time_ps FROM (
                SELECT s.int_value, max(e.start_ps + e.dur_ps) - min(e.start_ps) AS span
                FROM events AS e JOIN event_stats AS s USING (profile_id, event_id)
                WHERE e.hlo_op IS NOT NULL AND s.stat = 'device_ordinal' GROUP BY 1)""").pl().row(0, named=True)
        profile = run.roofline().pl().filter(pl.col("row_kind") == "profile").row(0, named=True)
    assert spans["devices"] == 8 == profile["devices"]
    assert profile["device_time_ps"] == spans["device_time_ps"]
    assert 0 < profile["self_time_share"] <= 1


def test_xla_cpu_collectives_are_communication(jax_sharded_warehouse: Path) -> None:
    with xprosql.load(jax_sharded_warehouse) as run:
        opcodes = dict(run.sql("SELECT hlo_op, opcode FROM hlo_ops").rows())
        classified = run.memory_bound(**ROOFS).pl()
        bottlenecks = run.bottlenecks(scope="profile", **ROOFS).pl().row(0, named=True)
    ops = classified.filter(pl.col("row_kind") == "op")
    collective_opcodes = {"all-reduce", "all-gather", "collective-permute", "all-to-all"}
    expected = {op for op in ops["op"] if opcodes.get(op) in collective_opcodes}
    assert {opcodes[op] for op in expected} == collective_opcodes  # the program's four collectives ran
    assert set(ops.filter(pl.col("classification") == "collective")["op"]) == expected
    profile = classified.filter(pl.col("row_kind") == "profile").row(0, named=True)
    collective_ps = ops.filter(pl.col("op").is_in(list(expected)))["self_time_ps"].sum()
    assert profile["collective_share"] == pytest.approx(collective_ps / profile["device_time_ps"])
    assert bottlenecks["exposed_collective_ps"] > 0
    assert bottlenecks["exposed_collective_share"] >= profile["collective_share"] * 0.5


def _measure(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The union of intervals, as sorted disjoint intervals."""
    merged: list[tuple[int, int]] = []
    for start, end in sorted(i for i in intervals if i[1] > i[0]):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def _length(intervals: list[tuple[int, int]]) -> int:
    return sum(end - start for start, end in intervals)


def _intersection(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> list[tuple[int, int]]:
    return _measure([(max(s1, s2), min(e1, e2)) for s1, e1 in a for s2, e2 in b if min(e1, e2) > max(s1, s2)])


def test_gloo_collectives_are_communication(gloo_ddp_warehouse: Path) -> None:
    """Exposed communication of each rank, counted again from its events: the time a collective
    (gloo:all_reduce on gloo's thread, c10d::allreduce_) runs inside a step while no other op does."""
    with xprosql.load(gloo_ddp_warehouse) as run:
        rows = {r["profile_id"]: r for r in run.bottlenecks(scope="profile").pl().iter_rows(named=True)}
        steps = run.steps().pl().filter(pl.col("complete"))
        events = run.sql("SELECT profile_id, name, category, start_ps, start_ps + dur_ps AS end_ps FROM events "
                         "WHERE dur_ps > 0 AND category IN ('cpu_op', 'user_annotation')").pl()
    assert len(rows) == 2
    gloo_ps = 0
    for profile_id, row in rows.items():
        mine = events.filter(pl.col("profile_id") == profile_id)
        collective = mine["name"].str.contains(r"^(gloo:|c10d::)")
        comms = _measure(list(zip(*mine.filter(collective).select("start_ps", "end_ps").to_dict(as_series=False).values())))
        ops = _measure(list(zip(*mine.filter(~collective & (pl.col("category") == "cpu_op"))
                                .select("start_ps", "end_ps").to_dict(as_series=False).values())))
        windows = _measure(list(zip(*steps.filter(pl.col("profile_id") == profile_id)
                                    .select("start_ps", "end_ps").to_dict(as_series=False).values())))
        in_steps = _intersection(comms, windows)
        expected = _length(in_steps) - _length(_intersection(in_steps, ops))
        assert row["exposed_collective_ps"] == expected, profile_id
        gloo_ps += _length(in_steps)
    assert gloo_ps > 0  # the ranks did all-reduce inside their steps


def test_an_analysis_without_input_says_why(gloo_ddp_warehouse: Path) -> None:
    with xprosql.load(gloo_ddp_warehouse) as run:
        names = sorted(Path(p).name for p in run.sql("SELECT source_path FROM profiles").pl()["source_path"])
        with pytest.warns(xprosql.NotApplicableWarning, match=r"hta.temporal_breakdown: no rows for 2 of 2 profiles") as caught:
            result = run.temporal_breakdown()
            assert len(result) == 0
        assert names[0] in str(caught[0].message) and "GPU kernels" in str(caught[0].message)
        assert result.notes == [str(caught[0].message)]
        with warnings.catch_warnings():
            warnings.simplefilter("error", xprosql.NotApplicableWarning)
            assert len(run.steps()) > 0  # an analysis with rows for every profile says nothing
    shell = subprocess.run([sys.executable, "-m", "xprosql.cli", "sql", str(gloo_ddp_warehouse), "--analysis",
                            "temporal_breakdown", "--format", "csv"], capture_output=True, text=True)
    assert shell.returncode == 0 and shell.stdout.startswith("profile_id,")
    assert shell.stderr.splitlines() == [f"warning: {caught[0].message}"]


def test_ops_above_a_roof_are_flagged(jax_sharded_warehouse: Path) -> None:
    with xprosql.load(jax_sharded_warehouse) as run:
        generous = run.roofline(**ROOFS).pl().filter(pl.col("row_kind") == "op")
        # A roof far below what the ops reach, as a peak measured on a busy machine would be.
        low = run.roofline(peak_flops_per_s=1e3, peak_hbm_bytes_per_s=1e3, peak_source="measured").pl()
    assert not generous["above_roof"].any()
    low_ops = low.filter(pl.col("row_kind") == "op")
    beating = low_ops.filter((pl.col("flop_rate") > 1e3) | (pl.col("hbm_bandwidth") > 1e3))
    assert beating.height > 0 and low_ops.filter(pl.col("above_roof"))["op"].sort().equals(beating["op"].sort())
