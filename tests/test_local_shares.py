"""Analyses that scan events run share by share on one machine; the combined result is the one-query result."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from conftest import GPU_SAMPLE, TEST_DATA, TPU_SAMPLE, analysis_text, bound_parameters

import xprosql
import xprosql.engine.executor as executor
from xprosql.models.tables import PACK_DERIVED_TABLES

KINETO = [TEST_DATA / "kineto" / f"{name}.json.gz" for name in ("a100_nccl_rank0", "sampled_rank0", "alexnet",
                                                                "h100_qwen1.5_0.5b")]  # memory events


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Real profiles, some packed: shares mix packs and per-profile partitions."""
    root = tmp_path_factory.mktemp("shares") / "run"
    assert xprosql.ingest(KINETO, into=root, compact=False).ok
    xprosql.compact(root)
    assert xprosql.ingest([TPU_SAMPLE, GPU_SAMPLE], into=root, compact=False).ok
    return root


@pytest.mark.parametrize(("name", "params"), [("bottlenecks", {}), ("steps", {}), ("async_ops", {}), ("fleet.profile_summary", {})])
@pytest.mark.slow
def test_share_by_share_equals_one_query(warehouse: Path, monkeypatch: pytest.MonkeyPatch, name: str, params: dict) -> None:
    run = xprosql.load(warehouse)
    one_query = run.sql(analysis_text(name), bound_parameters(name, params)).pl()
    monkeypatch.setattr(executor, "SHARE_EVENTS", 20_000)  # the samples hold 23k-27k events each
    assert len(_shares(run, "steps")) > 1
    shared = run.analysis(name, **params).pl()
    assert shared.columns == one_query.columns and shared.height == one_query.height > 0
    # Exactly the same rows; rows tied on the analysis's ORDER BY may come in either order.
    assert shared.sort(pl.all(), nulls_last=True).equals(one_query.sort(pl.all(), nulls_last=True))


@pytest.mark.slow
def test_only_event_scans_are_split(warehouse: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run = xprosql.load(warehouse)
    monkeypatch.setattr(executor, "SHARE_EVENTS", 20_000)
    assert len(_shares(run, "roofline")) == 1  # reads op_stats only
    chosen = run.profile_ids[:1]
    assert [s.profile_ids for s in _shares(run, "steps", chosen)] == [tuple(chosen)]


def _shares(run: xprosql.Run, name: str, profiles: list[str] | None = None) -> list:
    snapshot = run.engine.restricted(profiles)
    return run.engine.backend.shares(snapshot, analysis_text(name), run.engine._events(snapshot))


def _same_rows(a: pl.DataFrame, b: pl.DataFrame) -> None:
    assert a.columns == b.columns and a.height == b.height > 0
    assert a.sort(pl.all(), nulls_last=True).equals(b.sort(pl.all(), nulls_last=True))


# The findings' union as one text takes a minute on the samples: a slow test.
@pytest.mark.parametrize(("table", "module"), [
    pytest.param(table, module, marks=[pytest.mark.slow] if table == "stored_findings" else [])
    for table, module in PACK_DERIVED_TABLES.items()])
def test_compaction_stores_analyses_that_equal_their_sql(warehouse: Path, table: str, module: str) -> None:
    run = xprosql.load(warehouse)
    packed = set(run.engine.snapshot.stored)
    assert len(packed) == len(KINETO)
    stored = run.sql(f"SELECT * FROM {table}").pl()
    # every packed profile has steps; collective calls and findings only where it has some
    assert set(stored["profile_id"]) == packed if table in ("stored_steps", "stored_bottleneck_steps") else (
        set(stored["profile_id"]) <= packed)
    only_packed = xprosql.load(warehouse, profiles=sorted(packed))
    recomputed = only_packed.sql(analysis_text(module), bound_parameters(module)).pl()
    _same_rows(stored, recomputed)


@pytest.mark.parametrize("params", [{}, {"input_events": "ProfilerStep"}, {"peak_flops_per_s": 1e11, "peak_hbm_bytes_per_s": 2e10}],
                         ids=["defaults", "input_events", "peaks"])
@pytest.mark.slow
def test_bottlenecks_read_what_compaction_stored_only_for_the_same_parameters(warehouse: Path, params: dict) -> None:
    # Packed profiles (the Kineto traces) and unpacked ones (the XSpace samples) in one result.
    run = xprosql.load(warehouse)
    from_events = run.sql(analysis_text("bottlenecks"), bound_parameters("bottlenecks", params)).pl()
    # steps takes no parameter: it is read from compaction's table in every case.
    stored = run.engine._stored("steps.bottlenecks", xprosql.engine.library().bind("steps.bottlenecks", params))
    assert sorted(stored.values()) == (["stored_steps"] if params else ["stored_bottleneck_steps", "stored_steps"])
    _same_rows(run.bottlenecks(**params).pl(), from_events)
    assert set(from_events["profile_id"]) == set(run.profile_ids)
