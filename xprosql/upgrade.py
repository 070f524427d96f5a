"""``xprosql upgrade DIR``: a warehouse of xprosql's own format before Delta, converted in place, every row kept.

The older format: ``<table>/profile_id=<id>/part-0.parquet`` per profile (``profile_id`` only in the folder
name), compaction's packs ``<table>/_packs/<pack>.parquet`` (``profile_id`` a column) listed by the highest
``_manifests/<generation>.json``. A profile was committed when its ``profiles`` partition existed or a pack
listed it; partitions of other profiles were leftovers of killed ingests, and are dropped.

The conversion moves the old folders aside (``_xprosql/upgrade-old/``: one rename per table), writes each
file again as the data files are written now (``profile_id`` a column, unsigned integers as int64 of the same
bits: Delta has no unsigned type), and commits every table once, ``profiles`` last, pinning the others (:mod:`xprosql.warehouse`). The packs' stored
tables carry over, with the profiles they cover; profiles that an xprosql without some table wrote are
recorded as lacking it (``Snapshot.profiles_without``). Rows in must equal rows out, table by table, before
anything is committed. A killed upgrade is resumed by running it again.

Example:
    >>> print(upgrade("old_run/"))                                  # doctest: +SKIP
    upgraded old_run/: 1000 profiles, 18 packs, 101234567 rows
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from xprosql.errors import WarehouseError
from xprosql.models.tables import JOB_DERIVED_TABLES, PACK_DERIVED_TABLES, PARTITION_COLUMN, TABLES
from xprosql.warehouse import ROW_GROUP_ROWS, UNSIGNED_COLUMNS, Warehouse, _writer_options, to_file_types

__all__ = ["UpgradeReport", "upgrade"]

_OLD = "upgrade-old"
# What the older format kept beside its tables, deleted once converted.
_OLD_LEFTOVERS = ("_manifests", ".readers", ".commit.lock", ".compact.lock")


@dataclass
class UpgradeReport:
    """What an upgrade converted."""

    root: str
    profiles: int = 0
    packs: int = 0
    rows: dict[str, int] = field(default_factory=dict)
    dropped_partitions: int = 0  # leftovers of killed ingests, never visible

    def __str__(self) -> str:
        text = f"upgraded {self.root}: {self.profiles} profiles, {self.packs} packs, {sum(self.rows.values())} rows"
        if self.dropped_partitions:
            text += f"; {self.dropped_partitions} partitions of uncommitted profiles dropped"
        return text


def upgrade(path: str | os.PathLike[str]) -> UpgradeReport:
    """Convert the older-format warehouse at ``path`` to Delta tables in place (see the module docstring)."""
    root = Path(path)
    warehouse = Warehouse(root)
    old = root / "_xprosql" / _OLD
    if not old.is_dir():
        if not warehouse.is_older_format():
            raise WarehouseError(f"{root}: not a warehouse of an older xprosql (nothing to upgrade)")
        old.mkdir(parents=True)
        for name in (*TABLES, "_manifests"):
            if (root / name).exists():
                os.rename(root / name, old / name)
    for table in TABLES:  # a killed upgrade's Delta tables: made again from the old folders
        if (root / table).exists():
            shutil.rmtree(root / table)
    manifests = sorted((old / "_manifests").glob("*.json")) if (old / "_manifests").is_dir() else []
    packs = json.loads(manifests[-1].read_text())["packs"] if manifests else []
    packed = {p for pack in packs for p in pack["profiles"]}
    prefix = f"{PARTITION_COLUMN}="
    loose = sorted(e.name[len(prefix):] for e in os.scandir(old / "profiles") if e.name.startswith(prefix)) \
        if (old / "profiles").is_dir() else []
    committed = sorted(set(loose) | packed)
    report = UpgradeReport(str(root), profiles=len(committed), packs=len(packs))
    warehouse.create()
    with warehouse._locked(), warehouse.stage("upgrade") as staging:
        head = warehouse._head()
        actions: dict[str, list] = {}
        without: dict[str, list[str]] = {}
        for table in TABLES:
            table_dir = old / table
            have: set[str] = set()
            rows_in = rows_out = 0
            for profile_id in loose:
                if profile_id in packed:
                    continue
                partition = table_dir / f"{prefix}{profile_id}"
                files = sorted(partition.glob("*.parquet")) if partition.is_dir() else []
                if files:
                    have.add(profile_id)
                for file in files:
                    rows_in += pq.ParquetFile(file).metadata.num_rows
                    target = staging.directory / f"{table}-{profile_id}-{file.name}"
                    rows = _rewrite(file, target, table, profile_id)
                    rows_out += rows
                    if rows:
                        actions.setdefault(table, []).append(warehouse._add(table, target, rows, profile_id, profile_id))
            for pack in packs:
                if pack["rows"] and table not in pack["rows"]:
                    continue
                file = table_dir / "_packs" / f"{pack['id']}.parquet"
                if not file.exists():
                    continue
                have.update(pack["profiles"])
                rows_in += pq.ParquetFile(file).metadata.num_rows
                target = staging.directory / f"{table}-{file.name}"
                rows = _rewrite(file, target, table, None)
                rows_out += rows
                if rows:
                    ids = pq.read_table(target, columns=[PARTITION_COLUMN]).column(0).to_pylist()
                    actions.setdefault(table, []).append(warehouse._add(table, target, rows, min(ids), max(ids)))
            if table_dir.is_dir():
                report.dropped_partitions += sum(1 for e in os.scandir(table_dir) if e.name.startswith(prefix)
                                                 and e.name[len(prefix):] not in committed)
            if rows_in != rows_out:
                raise WarehouseError(f"{root}: upgrade wrote {rows_out} {table} rows for {rows_in}; nothing committed")
            report.rows[table] = rows_out
            lacking = sorted(set(committed) - have)
            if lacking and table not in PACK_DERIVED_TABLES and table not in JOB_DERIVED_TABLES:  # stored by compaction
                without[table] = lacking
        stored = sorted({p for pack in packs if all(t in pack["rows"] for t in PACK_DERIVED_TABLES)
                         for p in pack["profiles"]})
        warehouse._publish(head, {t: a for t, a in actions.items() if t != "profiles"}, actions.get("profiles", []),
                           operation="upgrade", lists={"stored": stored, "stored_tables": sorted(PACK_DERIVED_TABLES), "without": without})
        staging.discard()
    shutil.rmtree(old)
    for name in _OLD_LEFTOVERS:
        leftover = root / name
        if leftover.is_dir():
            shutil.rmtree(leftover)
        elif leftover.exists():
            leftover.unlink()
    for entry in os.scandir(root):  # the older format's staging folders of dead writers
        if entry.name.startswith((".staging-", ".pending-")) and entry.is_dir():
            shutil.rmtree(entry.path, ignore_errors=True)
    return report


def _rewrite(source: Path, target: Path, table: str, profile_id: str | None) -> int:
    """``source`` written again as the tables' data files are: ``profile_id`` its first column (added when
    ``profile_id`` is given: a per-profile partition's file lacks it), unsigned integers as int64 of the same
    bits. Returns its rows."""
    file = pq.ParquetFile(source)
    fields = [f for f in file.schema_arrow if f.name != PARTITION_COLUMN]
    fields = [f.with_type(pa.int64()) if f.name in UNSIGNED_COLUMNS[table] else f for f in fields]
    schema = pa.schema([pa.field(PARTITION_COLUMN, pa.string()), *fields], metadata=file.schema_arrow.metadata)
    options = _writer_options(table)
    if "use_dictionary" in options:  # the columns of this file, which may lack some of today's
        options = {**options, "use_dictionary": [n for n in schema.names if n in options["use_dictionary"]],
                   "write_statistics": [n for n in schema.names if n in options["write_statistics"]],
                   "column_encoding": {k: v for k, v in options["column_encoding"].items() if k in schema.names}}
    rows = 0
    with pq.ParquetWriter(target, schema, compression="zstd", **options) as writer:
        for batch in file.iter_batches(batch_size=ROW_GROUP_ROWS):
            part = pa.Table.from_batches([batch])
            if profile_id is not None:
                part = part.add_column(0, PARTITION_COLUMN, pa.repeat(pa.scalar(profile_id), batch.num_rows))
            writer.write_table(to_file_types(table, part).select(schema.names).cast(schema), row_group_size=ROW_GROUP_ROWS)
            rows += batch.num_rows
    return rows
