"""``xprosql upgrade``: a warehouse of the format before Delta, converted in place with every row.

The older warehouse is hand-made, in that format's layout, from the rows of real profiles ingested here (no
warehouse of an older xprosql is kept in the repository): per-profile hive partitions whose files lack
``profile_id``, one pack of three profiles with its stored tables listed by a manifest, and the leftover
partition of a killed ingest.
"""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from conftest import TEST_DATA, TPU_SAMPLE
from test_batch import table_digest

import xprosql
from xprosql.cli import main
from xprosql.errors import WarehouseError
from xprosql.models import TABLES
from xprosql.models.tables import PACK_DERIVED_TABLES
from xprosql.warehouse import Warehouse

KINETO = [TEST_DATA / "kineto" / f"{name}.json.gz" for name in ("triton_example", "cpu_only", "alexnet", "sampled_rank0")]


def _rows(run: xprosql.Run, table: str, profiles: list[str]) -> pa.Table:
    rows = run.sql(f"SELECT * FROM {table} WHERE list_contains($p, profile_id) ORDER BY profile_id", {"p": profiles}).arrow()
    return rows.cast(pa.schema([pa.field("profile_id", pa.string()), *TABLES[table]]))


def _older_format(reference: Path, root: Path, *, without_op_stats: str | None = None) -> dict[str, int]:
    """The older layout of ``reference``'s rows at ``root``; returns the rows of each table written."""
    run = xprosql.load(reference)
    ids = sorted(run.profile_ids)
    loose, packed = ids[:2], ids[2:]
    written = dict.fromkeys(TABLES, 0)
    for table in TABLES:
        if table in PACK_DERIVED_TABLES:
            continue
        for profile_id in loose:
            if table == "op_stats" and profile_id == without_op_stats:
                continue  # written by an xprosql before op_stats existed
            part = root / table / f"profile_id={profile_id}" / "part-0.parquet"
            part.parent.mkdir(parents=True)
            rows = _rows(run, table, [profile_id])
            pq.write_table(rows.drop_columns(["profile_id"]), part)
            written[table] += rows.num_rows
    pack = {"id": "g000001-0000-0a1b2c3d", "profiles": packed, "rows": {}}
    for table in TABLES:
        rows = _rows(run, table, packed)
        target = root / table / "_packs" / f"{pack['id']}.parquet"
        target.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(rows, target)
        pack["rows"][table] = rows.num_rows  # type: ignore[index]
        written[table] += rows.num_rows
    (root / "_manifests").mkdir()
    (root / "_manifests" / "00000001.json").write_text(json.dumps({"generation": 1, "packs": [pack]}))
    # A killed ingest's events partition, never committed (no profiles partition).
    leftover = root / "events" / "profile_id=ffffffffffffffff" / "part-0.parquet"
    leftover.parent.mkdir()
    events = _rows(run, "events", loose[:1])
    pq.write_table(events.drop_columns(["profile_id"]), leftover)
    return written


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("reference") / "run"
    assert xprosql.ingest([*KINETO, TPU_SAMPLE], into=root, compact=False).ok
    xprosql.compact(root)  # its stored tables: what the older pack held
    return root


@pytest.mark.slow
def test_upgrade_keeps_every_row(reference: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "old"
    written = _older_format(reference, root)
    with pytest.raises(WarehouseError, match="xprosql upgrade"):
        xprosql.load(root)
    with pytest.raises(WarehouseError, match="xprosql upgrade"):
        xprosql.ingest(TPU_SAMPLE, into=root)
    assert main(["upgrade", str(root)]) == 0
    assert "5 profiles, 1 packs" in capsys.readouterr().out
    assert table_digest(root) == table_digest(reference)
    with xprosql.load(root) as run, xprosql.load(reference) as ref:
        assert {t: n for t, n in run.row_counts().items()} == written
        for table in PACK_DERIVED_TABLES:  # the pack's stored rows came along, for the profiles it held
            held = run.sql(f"SELECT count(DISTINCT profile_id) FROM {table}").rows()[0][0]
            # every profile has steps; collective calls and findings only some
            assert held == 3 if table in ("stored_steps", "stored_bottleneck_steps") else 0 < held <= 3, table
        assert len(run.engine.snapshot.stored) == 3
        assert run.bottlenecks().pl().sort(pl.all(), nulls_last=True).equals(
            ref.bottlenecks().pl().sort(pl.all(), nulls_last=True))
        # uint64 values past 2^63 are kept (stored as int64 of the same bits)
        assert run.sql("SELECT max(program_id) FROM events").rows() == ref.sql("SELECT max(program_id) FROM events").rows()
    assert not (root / "_manifests").exists() and not list(root.glob("*/profile_id=*")) and not list(root.glob("*/_packs"))
    # An upgraded warehouse takes new ingests and compactions.
    assert xprosql.ingest(TPU_SAMPLE, into=root).skipped
    assert xprosql.compact(root) is not None
    assert table_digest(root) == table_digest(reference)
    events = [pq.read_table(f, columns=["program_id"]).column(0) for f in Warehouse(root).snapshot().table_files("events")]
    assert all(c.type == pa.int64() for c in events) and min(pc.min(c).as_py() for c in events if c.null_count < len(c)) < 0


@pytest.mark.slow
def test_a_profile_without_the_op_stats_its_analyses_read_is_refused(reference: Path, tmp_path: Path) -> None:
    """A warehouse from before op_stats existed (hand-made: one profile's op_stats partition left out)."""
    root = tmp_path / "old"
    missing = sorted(xprosql.load(reference).profile_ids)[0]
    _older_format(reference, root, without_op_stats=missing)
    assert main(["upgrade", str(root)]) == 0
    with pytest.raises(WarehouseError, match="1 profiles .* without the op_stats table"):
        xprosql.load(root)
