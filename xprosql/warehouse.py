"""The Parquet warehouse on disk: layout, atomic profile commits, snapshots.

Layout (plain hive-partitioned Parquet, readable without xprosql)::

    <root>/<table>/profile_id=<id>/part-0.parquet

A profile becomes visible when its ``profiles`` partition appears; that
directory is renamed into place last, after every other table's partition.
Readers list committed profiles first, so a half-committed or crashed ingest
is never seen. Writes go to a staging directory inside ``<root>`` (same file
system, so ``rename`` is atomic) that is removed on any failure.

Example:
    >>> wh = Warehouse("run/")                              # doctest: +SKIP
    >>> with wh.stage("3fa2c0de12345678") as staged:          # doctest: +SKIP
    ...     staged.write("events", batch)
    ...     wh.commit(staged)
"""

from __future__ import annotations

import fcntl
import os
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from xprosql.errors import WarehouseError
from xprosql.models.tables import PARTITION_COLUMN, TABLES

__all__ = ["Warehouse", "StagedProfile", "ROW_GROUP_ROWS"]

ROW_GROUP_ROWS = 500_000
_STAGING_PREFIX = ".staging-"
_LOCK_FILE = ".commit.lock"
_PART_FILE = "part-0.parquet"
# Sort keys applied when a partition is finalized; other tables keep decode order.
_SORT_KEYS = {"events": "start_ps NULLS LAST, event_id"}


def _partition_dir(table_dir: Path, profile_id: str) -> Path:
    return table_dir / f"{PARTITION_COLUMN}={profile_id}"


class StagedProfile:
    """Parquet files of one profile being written aside, before commit."""

    def __init__(self, directory: Path, profile_id: str) -> None:
        self.directory = directory
        self.profile_id = profile_id
        self.rows: dict[str, int] = dict.fromkeys(TABLES, 0)
        self._writers: dict[str, pq.ParquetWriter] = {}
        self._pending: dict[str, list[pa.RecordBatch]] = {}

    def _path(self, table: str, *, unsorted: bool = False) -> Path:
        name = "unsorted.parquet" if unsorted else _PART_FILE
        return _partition_dir(self.directory / table, self.profile_id) / name

    def write(self, table: str, batch: pa.RecordBatch) -> None:
        """Buffer ``batch``; row groups are written once they reach ``ROW_GROUP_ROWS``."""
        if table not in TABLES:
            raise KeyError(f"unknown table {table!r}")
        pending = self._pending.setdefault(table, [])
        pending.append(batch)
        self.rows[table] += batch.num_rows
        if sum(b.num_rows for b in pending) >= ROW_GROUP_ROWS:
            self._flush(table)

    def _flush(self, table: str) -> None:
        batches = self._pending.pop(table, [])
        writer = self._writers.get(table)
        if writer is None:
            path = self._path(table, unsorted=table in _SORT_KEYS)
            path.parent.mkdir(parents=True, exist_ok=True)
            writer = pq.ParquetWriter(path, TABLES[table], compression="zstd")
            self._writers[table] = writer
        if batches:
            writer.write_table(pa.Table.from_batches(batches, TABLES[table]), row_group_size=ROW_GROUP_ROWS)

    def finish(self) -> None:
        """Close every file; sort the tables that have a time order. Every table gets a file."""
        for table in TABLES:
            self._flush(table)
            self._writers.pop(table).close()
        for table, order in _SORT_KEYS.items():
            unsorted = self._path(table, unsorted=True)
            with duckdb.connect(config={"threads": 2, "memory_limit": "1GB", "preserve_insertion_order": False}) as con:
                con.execute(f"SET temp_directory = '{self.directory / 'duckdb_tmp'}'")
                con.execute(
                    f"COPY (SELECT * FROM read_parquet('{unsorted}') ORDER BY {order}) "
                    f"TO '{self._path(table)}' (FORMAT parquet, COMPRESSION zstd, ROW_GROUP_SIZE {ROW_GROUP_ROWS})"
                )
            unsorted.unlink()

    def abort(self) -> None:
        for writer in self._writers.values():
            writer.close()
        self._writers.clear()


class Warehouse:
    """A warehouse directory. Cheap to construct: nothing is read until asked."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)

    def has_profile(self, profile_id: str) -> bool:
        return _partition_dir(self.root / "profiles", profile_id).is_dir()

    def profile_ids(self) -> list[str]:
        """Committed profiles, in sorted order."""
        directory = self.root / "profiles"
        if not directory.is_dir():
            return []
        prefix = f"{PARTITION_COLUMN}="
        return sorted(
            entry.name[len(prefix):]
            for entry in os.scandir(directory)
            if entry.name.startswith(prefix) and entry.is_dir()
        )

    def table_files(self, table: str, profile_ids: list[str]) -> list[str]:
        """Parquet files of ``table`` for the given committed profiles."""
        table_dir = self.root / table
        files: list[str] = []
        for profile_id in profile_ids:
            partition = _partition_dir(table_dir, profile_id)
            if partition.is_dir():
                files.extend(str(p) for p in sorted(partition.glob("*.parquet")))
        return files

    def check_readable(self) -> None:
        if not self.root.exists():
            raise WarehouseError(f"{self.root}: no such warehouse directory")
        if not self.root.is_dir():
            raise WarehouseError(f"{self.root}: not a directory")
        if not (self.root / "profiles").is_dir():
            raise WarehouseError(f"{self.root}: not an xprosql warehouse (no profiles/ folder); ingest into it first")

    @contextmanager
    def stage(self, profile_id: str) -> Iterator[StagedProfile]:
        """Write a profile aside; on any exception the warehouse is left as it was."""
        created_root = not self.root.exists()
        self.root.mkdir(parents=True, exist_ok=True)
        directory = self.root / f"{_STAGING_PREFIX}{uuid.uuid4().hex}"
        directory.mkdir()
        staged = StagedProfile(directory, profile_id)
        try:
            yield staged
        except BaseException:
            staged.abort()
            raise
        finally:
            shutil.rmtree(directory, ignore_errors=True)
            if created_root and not any(self.root.iterdir()):
                self.root.rmdir()

    def commit(self, staged: StagedProfile) -> bool:
        """Move a finished profile into place. False when it was already there."""
        staged.finish()
        with open(self.root / _LOCK_FILE, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if self.has_profile(staged.profile_id):
                return False
            # profiles goes last: it is what makes the profile visible.
            for table in [t for t in TABLES if t != "profiles"] + ["profiles"]:
                source = _partition_dir(staged.directory / table, staged.profile_id)
                target = _partition_dir(self.root / table, staged.profile_id)
                target.parent.mkdir(exist_ok=True)
                if target.exists():  # left by a commit that crashed before its profiles row
                    shutil.rmtree(target)
                os.rename(source, target)
        return True
