"""Dask scale-out: the same analyses on a LocalCluster of two worker processes equal local results."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pytest
from conftest import GPU_SAMPLE, TEST_DATA, TPU_SAMPLE

import xprosql

# Slow (tests/conftest.py): each test starts a two-process Dask LocalCluster.
pytestmark = pytest.mark.slow

distributed = pytest.importorskip("distributed", reason="needs the dask extra: pip install 'xprosql[dask]'")

KINETO = [TEST_DATA / "kineto" / f"{name}.json.gz" for name in
          ("alexnet", "sampled_rank0", "sampled_rank1", "cupti_counters", "mi250_rocm", "cpu_only")]


@pytest.fixture(scope="module")
def client() -> Iterator[object]:
    """One cluster for the module: starting one takes seconds."""
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        with distributed.Client(cluster) as client:
            yield client


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Real profiles, half of them packed: shares mix packs and per-profile partitions."""
    root = tmp_path_factory.mktemp("dask") / "run"
    assert xprosql.ingest(KINETO[:4], into=root, compact=False).ok
    xprosql.compact(root)
    assert xprosql.ingest([*KINETO[4:], TPU_SAMPLE, GPU_SAMPLE], into=root, compact=False).ok
    return root


def _same(local: pl.DataFrame, remote: pl.DataFrame) -> None:
    assert remote.columns == local.columns and remote.schema == local.schema
    assert remote.height == local.height > 0
    # Exactly the same rows; rows tied on the analysis's ORDER BY may come in either order.
    assert remote.sort(pl.all(), nulls_last=True).equals(local.sort(pl.all(), nulls_last=True))


@pytest.mark.parametrize(
    ("name", "params"),
    [
        ("top_ops", {"top": 1000}),  # no top-N cut: one between tied ops keeps either
        ("gpu.launch_coverage", {}),
        ("roofline", {}),
        ("memory_bound", {}),
        ("bottlenecks", {}),
        ("steps", {}),
        ("fleet.profile_summary", {}),
        ("fleet.worst_steps", {"top": 7}),
    ],
)
def test_per_profile_analysis_on_cluster_equals_local(client: object, warehouse: Path, name: str, params: dict) -> None:
    local = xprosql.load(warehouse).analysis(name, **params).pl()
    run = xprosql.load(warehouse, cluster=client)
    assert len(run.engine.snapshot.shares(4)) > 1
    remote = run.analysis(name, **params).pl()
    _same(local, remote)
    if name == "fleet.worst_steps":  # a global ORDER BY ... LIMIT re-applied to the combined shares
        assert remote["wall_ps"].to_list() == local["wall_ps"].to_list()


def test_fleet_queries_on_cluster_equal_local(client: object, warehouse: Path) -> None:
    local, remote = xprosql.load(warehouse), xprosql.load(warehouse, cluster=client)
    cohorts = {"baseline": "format = 'kineto'", "candidate": "format = 'xspace'"}
    _same(local.compare(**cohorts).pl(), remote.compare(**cohorts).pl())
    _same(local.compare(**cohorts, by="bottleneck").pl(), remote.compare(**cohorts, by="bottleneck").pl())
    _same(local.worst(by="step_time_ps", top=3).pl(), remote.worst(by="step_time_ps", top=3).pl())
    _same(local.roofline().pl(), remote.roofline().pl())


def test_cluster_with_a_pruned_snapshot(client: object, warehouse: Path) -> None:
    where = "format = 'kineto'"
    local = xprosql.load(warehouse, where=where).analysis("top_ops", top=1000).pl()
    remote = xprosql.load(warehouse, where=where, cluster=client).analysis("top_ops", top=1000).pl()
    _same(local, remote)
    assert set(remote["profile_id"]) <= set(xprosql.load(warehouse, where=where).profile_ids)
