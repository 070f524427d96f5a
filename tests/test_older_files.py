"""A warehouse file written by an older xprosql lacks a column: every execution path reads it as NULL.

Hand-made from real files: the events files of real profiles are rewritten without the ``flops``
column (no real older warehouse is kept in the repository). The same analysis then runs as one
query, share by share, after a compaction (its stored tables), and on a Dask cluster.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq
import pytest
from conftest import TEST_DATA, TPU_SAMPLE

import xprosql
from xprosql.engine import Engine
from xprosql.engine.executor import LocalBackend
from xprosql.ingest import profile_id_of
from xprosql.warehouse import Warehouse

SAMPLES = [TPU_SAMPLE, *(TEST_DATA / "kineto" / f"{name}.json.gz" for name in ("alexnet", "sampled_rank0"))]
DROPPED = "flops"
ANALYSES = ["steps.bottlenecks", "steps.steps", "fleet.profile_summary", "ops.top_ops"]


@pytest.fixture(scope="module")
def older(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("older") / "run"
    assert xprosql.ingest(SAMPLES, into=root, compact=False).ok
    files = Warehouse(root).snapshot().table_files("events")
    assert len(files) == len(SAMPLES)
    for file in files:
        table = pq.read_table(file)
        assert DROPPED in table.column_names
        pq.write_table(table.drop_columns([DROPPED]), file)
    return root


def _sorted(frame: pl.DataFrame) -> pl.DataFrame:
    return frame.sort(pl.all(), nulls_last=True)


def _one_query(root: Path, analysis: str) -> pl.DataFrame:
    with xprosql.load(root) as run:
        return run.analysis(analysis).pl()


@pytest.mark.parametrize("analysis", ANALYSES)
@pytest.mark.slow
def test_missing_column_reads_null_share_by_share(older: Path, analysis: str) -> None:
    expected = _one_query(older, analysis)
    assert expected.height > 0
    if analysis == "steps.bottlenecks":  # its flops column sums events.flops: NULL now, but for PyTorch ops' costs
        tpu = expected.filter(pl.col("profile_id") == profile_id_of(TPU_SAMPLE.read_bytes()))
        assert tpu.height > 0 and tpu["flops"].null_count() == tpu.height
    with xprosql.load(older) as run:
        assert run.sql(f"SELECT count({DROPPED}) FROM events").rows() == [(0,)]
        shared = Engine(run.engine.snapshot, backend=LocalBackend(share_events=5_000))
        assert len(shared.backend.shares(shared.snapshot, shared.library.text(shared.library.module(analysis).id),
                                         shared._events(shared.snapshot))) > 1
        assert _sorted(shared.analysis(analysis).pl()).equals(_sorted(expected))


@pytest.mark.slow
def test_missing_column_reads_null_after_compaction(older: Path, tmp_path: Path) -> None:
    expected = {analysis: _one_query(older, analysis) for analysis in ANALYSES}
    copy = tmp_path / "run"
    shutil.copytree(older, copy)
    report = xprosql.compact(copy)
    assert report is not None and report.rows.get("stored_bottleneck_steps", 0) > 0
    with xprosql.load(copy) as run:
        assert run.engine.snapshot.stored and run.sql("SELECT count(*) FROM stored_steps").rows()[0][0] > 0
        assert run.sql(f"SELECT count({DROPPED}) FROM events").rows() == [(0,)]
        for analysis, rows in expected.items():
            assert _sorted(run.analysis(analysis).pl()).equals(_sorted(rows)), analysis


@pytest.mark.slow
def test_missing_column_reads_null_on_dask(older: Path) -> None:
    distributed = pytest.importorskip("distributed", reason="needs the dask extra: pip install 'xprosql[dask]'")
    expected = {analysis: _one_query(older, analysis) for analysis in ANALYSES}
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client, xprosql.load(older, cluster=client) as run:
        for analysis, rows in expected.items():
            assert _sorted(run.analysis(analysis).pl()).equals(_sorted(rows)), analysis
