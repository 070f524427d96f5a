"""The Parquet warehouse on disk: layout, atomic profile commits, snapshots.

Layout (plain hive-partitioned Parquet, readable without xprosql)::

    <root>/<table>/profile_id=<id>/part-0.parquet

A profile becomes visible when its ``profiles`` partition appears; that
directory is renamed into place last, after every other table's partition.
Readers list committed profiles first, so a half-committed or crashed ingest
is never seen. Writes go to a staging directory inside ``<root>`` (same file
system, so ``rename`` is atomic) that is removed on any failure.

Compaction (:meth:`Warehouse.compact`) merges the partitions of small profiles
into *packs*: one file per table holding many profiles, ``profile_id`` stored as a
column, rows sorted by profile, row groups of ``ROW_GROUP_ROWS``::

    <root>/<table>/_packs/<pack_id>.parquet
    <root>/_manifests/<generation>.json       # the packs of a generation; the highest is current
    <root>/.readers/<generation>.lock         # reader leases (shared flocks)

A snapshot (:meth:`Warehouse.snapshot`) is the current manifest's packs plus the
per-profile partitions of the committed profiles no pack holds. A compaction
writes its packs, then publishes the next manifest by an atomic rename: a reader
sees either generation whole. Files that a newer generation replaced (the
partitions of packed profiles, older packs) are deleted only once no reader holds
a lease on an older generation, so a snapshot taken before a compaction keeps
reading its own files.

Example:
    >>> wh = Warehouse("run/")                              # doctest: +SKIP
    >>> with wh.stage("3fa2c0de12345678") as staged:          # doctest: +SKIP
    ...     staged.write("events", batch)
    ...     wh.commit(staged)
    >>> wh.compact()                                          # doctest: +SKIP
    CompactReport(generation=1, packed_profiles=40, packs_written=1, ...)
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import json
import os
import shutil
import uuid
import weakref
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, Any

import pyarrow as pa
import pyarrow.parquet as pq

from xprosql._duckdb import connect
from xprosql.errors import WarehouseError
from xprosql.models.tables import PACK_DERIVED_TABLES, PARTITION_COLUMN, TABLES

__all__ = [
    "AUTO_COMPACT_MIN_PROFILES",
    "PACK_TARGET_ROWS",
    "ROW_GROUP_ROWS",
    "SMALL_PROFILE_ROWS",
    "CompactReport",
    "Lease",
    "Pack",
    "Snapshot",
    "StagedProfile",
    "Warehouse",
]

ROW_GROUP_ROWS = 500_000
# A pack is filled with profiles up to this many rows in its largest table (events or
# event_stats): a handful of row groups, so DuckDB scans one file with several threads.
PACK_TARGET_ROWS = 4_000_000
# A profile with fewer rows than this in every table is small: its files would hold less
# than one row group. Larger profiles already have full row groups and stay as they are.
SMALL_PROFILE_ROWS = ROW_GROUP_ROWS
# Automatic compaction after an ingest once this many small profiles are unpacked.
AUTO_COMPACT_MIN_PROFILES = 32
_STAGING_PREFIX = ".staging-"
_PENDING_PREFIX = ".pending-"
_OWNER_FILE = ".owner"
_LOCK_FILE = ".commit.lock"
_COMPACT_LOCK_FILE = ".compact.lock"
_MANIFESTS = "_manifests"
_READERS = ".readers"
_PACKS = "_packs"
_PART_FILE = "part-0.parquet"
# Tables whose row counts decide whether a profile is small (the long ones).
_SIZE_TABLES = ("events", "event_stats", "metadata_stats")


# Row groups handed to the writer thread and not yet written: enough to keep it busy, few enough to bound memory.
_WRITES_IN_FLIGHT = 2
# Per-event integer columns that are nearly all distinct: no dictionary (it never pays off there, and
# trying costs a fifth of the write), delta-encoded (small for sorted ids and times). Durations repeat: they
# keep the dictionary, which makes them a third of the size.
_DELTA_COLUMNS = {"events": ("event_id", "start_ps", "device_offset_ps"), "event_stats": ("event_id",)}


def _writer_options(table: str) -> dict[str, Any]:
    """Parquet writer options of a staged table beyond zstd: encodings and statistics only, the content is the same.

    The per-event tables keep min/max statistics of their numbers (what scans prune row groups by) but not of
    their strings, which no query prunes by and which cost a sixth of the write.
    """
    delta = _DELTA_COLUMNS.get(table, ())
    if not delta:
        return {}
    schema = TABLES[table]
    return {"use_dictionary": [name for name in schema.names if name not in delta],
            "column_encoding": dict.fromkeys(delta, "DELTA_BINARY_PACKED"),
            "write_statistics": [field.name for field in schema if not _is_text(field.type)]}


def _is_text(type_: pa.DataType) -> bool:
    value_type = type_.value_type if pa.types.is_dictionary(type_) else type_
    return pa.types.is_string(value_type) or pa.types.is_binary(value_type)


def _partition_dir(table_dir: Path, profile_id: str) -> Path:
    return table_dir / f"{PARTITION_COLUMN}={profile_id}"


def _sql_str(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _sql_list(items: Iterable[str]) -> str:
    return "[" + ", ".join(_sql_str(i) for i in items) + "]"


def _try_lock(handle: IO[Any], mode: int) -> bool:
    try:
        fcntl.flock(handle, mode | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


class StagedProfile:
    """Parquet files of one profile being written aside, before commit.

    Row groups are encoded and written on a background thread (Arrow releases the
    GIL), so a decoder producing the next batch and the zstd writer run at once; at
    most ``_WRITES_IN_FLIGHT`` row groups wait, which bounds the memory it costs.
    """

    def __init__(self, directory: Path, profile_id: str) -> None:
        self.directory = directory
        self.profile_id = profile_id
        self.rows: dict[str, int] = dict.fromkeys(TABLES, 0)
        self._writers: dict[str, pq.ParquetWriter] = {}  # touched only by the writer thread
        self._pending: dict[str, list[pa.RecordBatch]] = {}
        self._closed: set[str] = set()
        self._thread: ThreadPoolExecutor | None = None
        self._in_flight: deque[Future[None]] = deque()

    def _path(self, table: str) -> Path:
        return _partition_dir(self.directory / table, self.profile_id) / _PART_FILE

    def write(self, table: str, batch: pa.RecordBatch) -> None:
        """Buffer ``batch``; row groups are written once they reach ``ROW_GROUP_ROWS``."""
        if table not in TABLES:
            raise KeyError(f"unknown table {table!r}")
        if table in self._closed:
            raise ValueError(f"table {table!r} of the staged profile is already closed")
        pending = self._pending.setdefault(table, [])
        pending.append(batch)
        self.rows[table] += batch.num_rows
        if sum(b.num_rows for b in pending) >= ROW_GROUP_ROWS:
            self._flush(table)

    def _flush(self, table: str) -> None:
        batches = self._pending.pop(table, [])
        rows = pa.Table.from_batches(batches, TABLES[table]) if batches else None
        self._submit(self._write_rows, table, rows)

    def _write_rows(self, table: str, rows: pa.Table | None) -> None:
        writer = self._writers.get(table)
        if writer is None:
            path = self._path(table)
            path.parent.mkdir(parents=True, exist_ok=True)
            writer = pq.ParquetWriter(path, TABLES[table], compression="zstd", **_writer_options(table))
            self._writers[table] = writer
        if rows is not None:
            writer.write_table(rows, row_group_size=ROW_GROUP_ROWS)

    def _close_file(self, table: str) -> None:
        self._writers.pop(table).close()

    def _submit(self, work: Any, *args: Any) -> None:
        """Run ``work`` on the writer thread, in order; a failure comes back from a later call here or :meth:`finish`."""
        if self._thread is None:
            self._thread = ThreadPoolExecutor(1, thread_name_prefix="xprosql-parquet")
        while len(self._in_flight) >= _WRITES_IN_FLIGHT:
            self._in_flight.popleft().result()
        self._in_flight.append(self._thread.submit(work, *args))

    def _wait(self) -> None:
        while self._in_flight:
            self._in_flight.popleft().result()

    def finish(self, tables: Iterable[str] | None = None) -> None:
        """Close the files of ``tables`` (default: every table; each gets one). Closed files take no more rows.

        Decoders yield events already sorted by time.
        """
        for table in TABLES if tables is None else tables:
            if table in self._closed:
                continue
            self._flush(table)
            self._submit(self._close_file, table)
            self._closed.add(table)
        self._wait()

    def file(self, table: str) -> Path:
        """The staged Parquet file of ``table`` (written once :meth:`finish` closed it)."""
        return self._path(table)

    def abort(self) -> None:
        for future in self._in_flight:
            future.cancel()
        self._in_flight.clear()
        self.close()
        for writer in self._writers.values():
            writer.close()
        self._writers.clear()

    def close(self) -> None:
        """Stop the writer thread (after :meth:`finish` or :meth:`abort`)."""
        if self._thread is not None:
            self._thread.shutdown(wait=True)
            self._thread = None


@dataclass(frozen=True)
class Pack:
    """A compacted file set: one ``<table>/_packs/<id>.parquet`` per table, many profiles."""

    id: str
    profiles: tuple[str, ...]
    rows: dict[str, int] = field(default_factory=dict, compare=False)

    def file(self, root: str | os.PathLike[str], table: str) -> str:
        return str(Path(root) / table / _PACKS / f"{self.id}.parquet")


@dataclass(frozen=True)
class Snapshot:
    """The files of a set of committed profiles at one moment: what a reader reads.

    Plain data (picklable): a Dask task gets a share of it. ``loose`` holds the
    per-profile partition files ``(profile_id, path)`` of each table; ``packs`` the
    packs holding the other profiles (a pack may hold profiles outside
    ``profile_ids``: scans filter them out).

    Example:
        >>> snap = Warehouse("run/").snapshot()                     # doctest: +SKIP
        >>> snap.scan_sql("events")                                  # doctest: +SKIP
        "SELECT profile_id, * EXCLUDE (profile_id) FROM read_parquet([...], hive_partitioning = true, ...)"
    """

    root: str
    generation: int
    profile_ids: tuple[str, ...]
    loose: dict[str, tuple[tuple[str, str], ...]]
    packs: tuple[Pack, ...]

    def loose_files(self, table: str) -> list[str]:
        return [path for _, path in self.loose.get(table, ())]

    def pack_files(self, table: str) -> list[str]:
        # A pack written before ``table`` existed has no file for it.
        return [pack.file(self.root, table) for pack in self.packs if not pack.rows or table in pack.rows]

    def files(self, table: str) -> list[str]:
        """Every Parquet file this snapshot reads for ``table``."""
        return self.loose_files(table) + self.pack_files(table)

    def profiles_without(self, table: str) -> list[str]:
        """Profiles with no file for ``table``: written by an xprosql that did not have it yet."""
        have = {profile_id for profile_id, _ in self.loose.get(table, ())}
        have.update(p for pack in self.packs if not pack.rows or table in pack.rows for p in pack.profiles)
        return sorted(set(self.profile_ids) - have)

    def _pack_filter(self) -> str | None:
        """A filter on packed rows when a pack holds profiles outside this snapshot."""
        wanted = set(self.profile_ids)
        packed = {p for pack in self.packs for p in pack.profiles}
        if packed <= wanted:
            return None
        return ", ".join(_sql_str(p) for p in sorted(packed & wanted))

    def scan_sql(self, table: str) -> str | None:
        """DuckDB SQL reading ``table`` (``profile_id`` first); None when there is no file."""
        parts = []
        loose = self.loose_files(table)
        if loose:
            parts.append(
                f"SELECT {PARTITION_COLUMN}, * EXCLUDE ({PARTITION_COLUMN}) FROM read_parquet({_sql_list(loose)}, "
                f"hive_partitioning = true, hive_types = {{'{PARTITION_COLUMN}': 'VARCHAR'}}, union_by_name = true)"
            )
        packed = self.pack_files(table)
        if packed:
            sql = (
                f"SELECT {PARTITION_COLUMN}, * EXCLUDE ({PARTITION_COLUMN}) FROM read_parquet({_sql_list(packed)}, "
                f"hive_partitioning = false, union_by_name = true)"
            )
            keep = self._pack_filter()
            if keep is not None:  # a literal list: DuckDB prunes row groups by their profile_id range
                sql += f" WHERE {PARTITION_COLUMN} IN ({keep})"
            parts.append(sql)
        if not parts:
            return None
        return parts[0] if len(parts) == 1 else "(" + ") UNION ALL BY NAME (".join(parts) + ")"

    def scan_polars(self, table: str) -> Any:
        """A Polars LazyFrame over ``table`` (``profile_id`` first); None when there is no file."""
        import polars as pl

        frames = []
        loose = self.loose_files(table)
        if loose:
            frames.append(pl.scan_parquet(
                loose, hive_partitioning=True, hive_schema={PARTITION_COLUMN: pl.String}, missing_columns="insert"
            ))
        packed = self.pack_files(table)
        if packed:
            frame = pl.scan_parquet(packed, hive_partitioning=False, missing_columns="insert")
            if self._pack_filter() is not None:
                frame = frame.filter(pl.col(PARTITION_COLUMN).is_in(list(self.profile_ids)))
            frames.append(frame)
        if not frames:
            return None
        columns = [PARTITION_COLUMN, *TABLES[table].names]
        frames = [f.select([c for c in columns if c in f.collect_schema().names()]) for f in frames]
        return frames[0] if len(frames) == 1 else pl.concat(frames, how="diagonal_relaxed")

    def restrict(self, profile_ids: Iterable[str]) -> Snapshot:
        """The same snapshot narrowed to ``profile_ids`` (which it must hold)."""
        wanted = set(profile_ids)
        missing = sorted(wanted - set(self.profile_ids))
        if missing:
            raise KeyError(f"profiles not in {self.root}: {missing}")
        loose = {t: tuple(item for item in items if item[0] in wanted) for t, items in self.loose.items()}
        packs = tuple(pack for pack in self.packs if wanted.intersection(pack.profiles))
        return replace(self, profile_ids=tuple(p for p in self.profile_ids if p in wanted), loose=loose, packs=packs)

    def shares(self, n: int) -> list[Snapshot]:
        """Split into about ``n`` disjoint snapshots of whole profiles, balanced by size.

        A pack is never split (one task reads one file per table); unpacked
        profiles are dealt out by their events file size.
        """
        wanted = set(self.profile_ids)
        packed_ids = {p for pack in self.packs for p in pack.profiles if p in wanted}
        sizes: dict[str, int] = {}
        for profile_id, path in self.loose.get("events", ()):
            with contextlib.suppress(OSError):
                sizes[profile_id] = os.stat(path).st_size
        units: list[tuple[int, list[str]]] = []
        for pack in self.packs:
            ids = [p for p in pack.profiles if p in wanted]
            if ids:
                units.append((max(pack.rows.values(), default=0) * 40, ids))  # ~40 bytes a row, like a file size
        for profile_id in self.profile_ids:
            if profile_id not in packed_ids:
                units.append((sizes.get(profile_id, 1), [profile_id]))
        bins: list[tuple[int, list[str]]] = [(0, []) for _ in range(max(1, min(n, len(units))))]
        for size, ids in sorted(units, key=lambda u: -u[0]):  # largest first into the lightest bin
            index = min(range(len(bins)), key=lambda i: bins[i][0])
            bins[index] = (bins[index][0] + size, bins[index][1] + ids)
        return [self.restrict(ids) for _, ids in bins if ids]


class Lease:
    """A reader's hold on a generation: files it may read are not deleted while it lives.

    A shared ``flock`` on ``.readers/<generation>.lock``; released by :meth:`release`
    or when the holder is garbage collected or its process ends.
    """

    def __init__(self, handle: IO[Any] | None, generation: int) -> None:
        self.generation = generation
        self._handle = handle
        self._finalizer = weakref.finalize(self, Lease._close, handle) if handle is not None else None

    @staticmethod
    def _close(handle: IO[Any] | None) -> None:
        if handle is not None:
            handle.close()

    def release(self) -> None:
        if self._finalizer is not None:
            self._finalizer()


@dataclass
class CompactReport:
    """What a compaction did."""

    generation: int
    packed_profiles: int = 0
    packs_written: int = 0
    packs_replaced: int = 0
    rows: dict[str, int] = field(default_factory=dict)
    deleted_files: int = 0
    deferred: bool = False

    def __str__(self) -> str:
        if not self.packs_written:
            text = f"nothing to compact (generation {self.generation})"
        else:
            text = (
                f"generation {self.generation}: packed {self.packed_profiles} profiles into {self.packs_written} packs "
                f"({self.packs_replaced} older packs merged), {sum(self.rows.values())} rows"
            )
        if self.deferred:
            text += "; replaced files kept until older readers close"
        elif self.deleted_files:
            text += f"; {self.deleted_files} replaced files deleted"
        return text


class Warehouse:
    """A warehouse directory. Cheap to construct: nothing is read until asked."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self._manifest_cache: tuple[int, dict[str, Any]] | None = None

    # -- manifests ---------------------------------------------------------------

    def generation(self) -> int:
        """The current generation: the highest published manifest, 0 before any compaction."""
        directory = self.root / _MANIFESTS
        if not directory.is_dir():
            return 0
        numbers = [int(e.name[:-5]) for e in os.scandir(directory) if e.name.endswith(".json") and e.name[:-5].isdigit()]
        return max(numbers, default=0)

    def manifest(self, generation: int | None = None) -> dict[str, Any]:
        """The manifest of ``generation`` (default: current): ``{"generation", "packs": [...]}``."""
        generation = self.generation() if generation is None else generation
        if generation == 0:
            return {"generation": 0, "packs": []}
        if self._manifest_cache and self._manifest_cache[0] == generation:
            return self._manifest_cache[1]
        manifest = json.loads((self.root / _MANIFESTS / f"{generation:08d}.json").read_text())
        self._manifest_cache = (generation, manifest)
        return manifest

    def _packs(self, manifest: dict[str, Any]) -> list[Pack]:
        return [Pack(p["id"], tuple(p["profiles"]), dict(p["rows"])) for p in manifest["packs"]]

    # -- reading -----------------------------------------------------------------

    def _loose_profile_ids(self) -> list[str]:
        directory = self.root / "profiles"
        if not directory.is_dir():
            return []
        prefix = f"{PARTITION_COLUMN}="
        return sorted(
            entry.name[len(prefix):]
            for entry in os.scandir(directory)
            if entry.name.startswith(prefix) and entry.is_dir()
        )

    def packed_profile_ids(self) -> set[str]:
        return {p for pack in self.manifest()["packs"] for p in pack["profiles"]}

    def has_profile(self, profile_id: str) -> bool:
        return _partition_dir(self.root / "profiles", profile_id).is_dir() or profile_id in self.packed_profile_ids()

    def profile_ids(self) -> list[str]:
        """Committed profiles (unpacked and packed), in sorted order."""
        return sorted(set(self._loose_profile_ids()) | self.packed_profile_ids())

    def table_files(self, table: str, profile_ids: list[str]) -> list[str]:
        """Parquet files of ``table`` for the given committed profiles (packs included)."""
        return self.snapshot(profiles=profile_ids, lease=False)[0].files(table)

    def lease(self) -> tuple[Lease, int]:
        """Hold the current generation against deletion; returns the lease and the generation."""
        while True:
            generation = self.generation()
            handle = None
            try:
                (self.root / _READERS).mkdir(exist_ok=True)
                handle = open(self.root / _READERS / f"{generation:08d}.lock", "a")  # noqa: SIM115 - held for the snapshot's life
                fcntl.flock(handle, fcntl.LOCK_SH)
            except OSError:  # a read-only warehouse: nobody can compact it under us
                if handle is not None:
                    handle.close()
                return Lease(None, generation), generation
            # A compaction may have published (and collected) in between: then lease the new one.
            if self.generation() == generation:
                return Lease(handle, generation), generation
            handle.close()

    def snapshot(self, *, profiles: Sequence[str] | None = None, lease: bool = True) -> tuple[Snapshot, Lease | None]:
        """The committed profiles and their files now, with a lease that keeps those files.

        Example:
            >>> snap, lease = Warehouse("run/").snapshot()            # doctest: +SKIP
            >>> len(snap.profile_ids), snap.generation                  # doctest: +SKIP
            (1000, 3)
        """
        held, generation = self.lease() if lease else (None, self.generation())
        packs = self._packs(self.manifest(generation))
        packed = {p for pack in packs for p in pack.profiles}
        loose_ids = [p for p in self._loose_profile_ids() if p not in packed]
        loose: dict[str, tuple[tuple[str, str], ...]] = {}
        for table in TABLES:
            items: list[tuple[str, str]] = []
            table_dir = self.root / table
            for profile_id in loose_ids:
                partition = _partition_dir(table_dir, profile_id)
                with contextlib.suppress(FileNotFoundError):
                    items.extend(
                        (profile_id, str(partition / name))
                        for name in sorted(e.name for e in os.scandir(partition) if e.name.endswith(".parquet"))
                    )
            loose[table] = tuple(items)
        snap = Snapshot(str(self.root), generation, tuple(sorted(set(loose_ids) | packed)), loose, tuple(packs))
        if profiles is not None:
            snap = snap.restrict(profiles)
        return snap, held

    def check_readable(self) -> None:
        if not self.root.exists():
            raise WarehouseError(f"{self.root}: no such warehouse directory")
        if not self.root.is_dir():
            raise WarehouseError(f"{self.root}: not a directory")
        if not (self.root / "profiles").is_dir():
            raise WarehouseError(f"{self.root}: not an xprosql warehouse (no profiles/ folder); ingest into it first")

    # -- writing -----------------------------------------------------------------

    @contextmanager
    def stage(self, profile_id: str) -> Iterator[StagedProfile]:
        """Write a profile aside; on any exception the warehouse is left as it was."""
        created_root = not self.root.exists()
        self.root.mkdir(parents=True, exist_ok=True)
        name = uuid.uuid4().hex
        pending = self.root / f"{_PENDING_PREFIX}{name}"
        pending.mkdir()
        # Held while staging: a later cleanup removes the directory only once this process is gone.
        owner = open(pending / _OWNER_FILE, "w")  # noqa: SIM115 - held while staging
        fcntl.flock(owner, fcntl.LOCK_EX)
        # Renamed once locked, so every staging folder has its owner file (a crash before leaves a pending one).
        directory = self.root / f"{_STAGING_PREFIX}{name}"
        os.rename(pending, directory)
        staged = StagedProfile(directory, profile_id)
        try:
            yield staged
        except BaseException:
            staged.abort()
            raise
        finally:
            staged.close()
            owner.close()
            shutil.rmtree(directory, ignore_errors=True)
            if created_root and not any(self.root.iterdir()):
                self.root.rmdir()

    @contextmanager
    def _locked(self, name: str, *, blocking: bool = True) -> Iterator[bool]:
        with open(self.root / name, "a") as lock:
            if blocking:
                fcntl.flock(lock, fcntl.LOCK_EX)
                yield True
            else:
                yield _try_lock(lock, fcntl.LOCK_EX)

    def commit(self, staged: StagedProfile) -> bool:
        """Move a finished profile into place. False when it was already there."""
        staged.finish()
        with self._locked(_LOCK_FILE):
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

    # -- compaction and cleanup -------------------------------------------------

    def _profile_sizes(self, snap: Snapshot) -> dict[str, int]:
        """Rows of each unpacked profile in its longest table (Parquet footers only)."""
        sizes: dict[str, int] = {}
        for table in _SIZE_TABLES:
            for profile_id, path in snap.loose.get(table, ()):
                rows = pq.ParquetFile(path).metadata.num_rows
                sizes[profile_id] = max(sizes.get(profile_id, 0), rows)
        return sizes

    def small_unpacked(self) -> int:
        """How many unpacked profiles are small enough to pack (cheap: footers only)."""
        if not (self.root / "profiles").is_dir():
            return 0
        snap, _ = self.snapshot(lease=False)
        return sum(1 for rows in self._profile_sizes(snap).values() if rows < SMALL_PROFILE_ROWS)

    def compact(
        self,
        *,
        target_rows: int = PACK_TARGET_ROWS,
        min_profiles: int = 2,
        wait: bool = True,
        derive: Callable[[str, Snapshot], pa.Table] | None = None,
    ) -> CompactReport | None:
        """Merge small unpacked profiles, and underfull packs, into packs; publish atomically.

        ``derive(table, pack_snapshot)`` computes the rows of each table of ``PACK_DERIVED_TABLES`` for a
        new pack (``xprosql.engine.derive_stored_table``; ``xprosql.compact`` passes it). Without it the
        packs store none, and analyses compute those rows from events.

        Readers keep working throughout: a snapshot taken before keeps its files
        (see the module docstring). Returns None when ``wait`` is False and another
        compaction is running.

        Example:
            >>> print(Warehouse("run/").compact())                    # doctest: +SKIP
            generation 1: packed 1000 profiles into 7 packs (0 older packs merged), 61234567 rows
        """
        self.check_readable()
        with self._locked(_COMPACT_LOCK_FILE, blocking=wait) as got:
            if not got:
                return None
            self.collect_garbage(_compacting=True)
            snap, _ = self.snapshot(lease=False)
            generation = snap.generation
            sizes = self._profile_sizes(snap)
            small = sorted(p for p, rows in sizes.items() if rows < SMALL_PROFILE_ROWS)
            underfull = [p for p in snap.packs if max(p.rows.values(), default=0) < target_rows // 2]
            candidates = {p: sizes[p] for p in small}
            for pack in underfull:
                candidates.update(dict.fromkeys(pack.profiles, max(pack.rows.values(), default=0) // max(len(pack.profiles), 1)))
            report = CompactReport(generation)
            if len(candidates) < min_profiles or (not small and len(underfull) < 2):
                report.deleted_files, report.deferred = self.collect_garbage(_compacting=True)
                return report
            # Fill packs in profile order up to target_rows in the longest table.
            groups: list[list[str]] = [[]]
            filled = 0
            for profile_id in sorted(candidates):
                if groups[-1] and filled + candidates[profile_id] > target_rows:
                    groups.append([])
                    filled = 0
                groups[-1].append(profile_id)
                filled += candidates[profile_id]
            new_generation = generation + 1
            loose_by_table = {t: dict(snap.loose.get(t, ())) for t in TABLES}
            pack_of = {p: pack for pack in underfull for p in pack.profiles}
            new_packs = []
            written: list[Path] = []  # what a failure (a full disk) must not leave filling the disk
            try:
                for index, group in enumerate(groups):
                    pack_id = f"g{new_generation:06d}-{index:04d}-{uuid.uuid4().hex[:8]}"
                    rows = {}
                    for table in (t for t in TABLES if t not in PACK_DERIVED_TABLES):
                        loose_files = [loose_by_table[table][p] for p in group if p in loose_by_table[table]]
                        pack_files = sorted({
                            pack_of[p].file(self.root, table) for p in group if p in pack_of and table in pack_of[p].rows
                        })
                        target = Pack(pack_id, tuple(group)).file(self.root, table)
                        written.append(Path(target))
                        rows[table] = self._write_pack_file(table, target, loose_files, pack_files, group)
                    for table in PACK_DERIVED_TABLES if derive is not None else ():
                        assert derive is not None  # the loop runs only with it
                        pack = Pack(pack_id, tuple(group), dict(rows))
                        written.append(Path(pack.file(self.root, table)))
                        rows[table] = self._write_derived(table, pack, derive(table, Snapshot(str(self.root), new_generation, pack.profiles, {}, (pack,))))
                    new_packs.append({"id": pack_id, "profiles": group, "rows": rows})
                    for table, n in rows.items():
                        report.rows[table] = report.rows.get(table, 0) + n
            except BaseException:
                for path in written:
                    path.unlink(missing_ok=True)
                raise
            replaced = {p.id for p in underfull}
            # Nothing lost or doubled: every table's rows out equal its rows in (footers only).
            for table in (t for t in TABLES if t not in PACK_DERIVED_TABLES):
                rows_in = sum(pq.ParquetFile(path).metadata.num_rows for p, path in snap.loose.get(table, ()) if p in candidates)
                rows_in += sum(pack.rows.get(table, 0) for pack in underfull)
                if rows_in != report.rows.get(table, 0):
                    raise WarehouseError(f"{self.root}: compaction wrote {report.rows.get(table, 0)} {table} rows for {rows_in}; nothing published")
            manifest = {
                "generation": new_generation,
                "created_at": dt.datetime.now(dt.timezone.utc).isoformat(),
                "packs": [p for p in self.manifest(generation)["packs"] if p["id"] not in replaced] + new_packs,
            }
            directory = self.root / _MANIFESTS
            directory.mkdir(exist_ok=True)
            temporary = directory / f".{new_generation:08d}.json.tmp"
            with open(temporary, "w") as out:
                json.dump(manifest, out)
                out.flush()
                os.fsync(out.fileno())
            os.rename(temporary, directory / f"{new_generation:08d}.json")  # the publish: atomic
            report.generation = new_generation
            report.packed_profiles = len(candidates)
            report.packs_written = len(new_packs)
            report.packs_replaced = len(underfull)
            report.deleted_files, report.deferred = self.collect_garbage(_compacting=True)
            return report

    def _write_derived(self, table: str, pack: Pack, rows: pa.Table) -> int:
        """Write the derived ``table`` of ``pack``."""
        schema = pa.schema([pa.field(PARTITION_COLUMN, pa.string()), *TABLES[table]])
        target = Path(pack.file(self.root, table))
        target.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(rows.select(schema.names).cast(schema), target, compression="zstd", row_group_size=ROW_GROUP_ROWS)
        return rows.num_rows

    def _write_pack_file(
        self, table: str, target: str, loose_files: list[str], pack_files: list[str], profiles: Sequence[str]
    ) -> int:
        """Rows of the inputs, sorted by profile and kept in their order within it, to one file."""
        if not loose_files and not pack_files:  # a table newer than these profiles: an empty file
            schema = pa.schema([pa.field(PARTITION_COLUMN, pa.string()), *TABLES[table]])
            Path(target).parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(schema.empty_table(), target, compression="zstd")
            return 0
        parts = []
        if loose_files:
            parts.append(
                f"SELECT {PARTITION_COLUMN}, * EXCLUDE ({PARTITION_COLUMN}, file_row_number), file_row_number AS __row "
                f"FROM read_parquet({_sql_list(loose_files)}, hive_partitioning = true, "
                f"hive_types = {{'{PARTITION_COLUMN}': 'VARCHAR'}}, union_by_name = true, file_row_number = true)"
            )
        if pack_files:
            parts.append(
                f"SELECT {PARTITION_COLUMN}, * EXCLUDE ({PARTITION_COLUMN}, file_row_number), file_row_number AS __row "
                f"FROM read_parquet({_sql_list(pack_files)}, hive_partitioning = false, union_by_name = true, file_row_number = true) "
                f"WHERE {PARTITION_COLUMN} IN ({', '.join(_sql_str(p) for p in profiles)})"
            )
        union = parts[0] if len(parts) == 1 else "(" + ") UNION ALL BY NAME (".join(parts) + ")"
        # The file layout to keep: that of an input (so Polars sees the same types), profile_id first.
        first = pq.read_schema(loose_files[0] if loose_files else pack_files[0])
        # Nullable: a column that some inputs lack (written by another version) reads as nulls.
        fields = [f.with_nullable(True) for f in first if f.name != PARTITION_COLUMN]
        fields += [f for f in TABLES[table] if f.name not in first.names]
        schema = pa.schema([pa.field(PARTITION_COLUMN, pa.string()), *fields], metadata=first.metadata)
        Path(target).parent.mkdir(parents=True, exist_ok=True)
        written = 0
        with self.stage("compaction") as scratch, connect(config={"threads": 2, "memory_limit": "2GB"}) as con:
            con.execute(f"SET temp_directory = {_sql_str(str(scratch.directory / 'duckdb_tmp'))}")
            query = f"SELECT * EXCLUDE (__row) FROM ({union}) ORDER BY {PARTITION_COLUMN}, __row"
            reader = con.sql(query).to_arrow_reader(ROW_GROUP_ROWS)
            with pq.ParquetWriter(target, schema, compression="zstd") as writer:
                pending: list[pa.RecordBatch] = []
                buffered = 0
                for batch in reader:
                    names = set(batch.schema.names)
                    arrays = [batch.column(f.name) if f.name in names else pa.nulls(batch.num_rows, f.type) for f in schema]
                    batch = pa.RecordBatch.from_arrays(arrays, names=schema.names).cast(schema)
                    pending.append(batch)
                    buffered += batch.num_rows
                    if buffered >= ROW_GROUP_ROWS:
                        table_ = pa.Table.from_batches(pending, schema)
                        writer.write_table(table_.slice(0, ROW_GROUP_ROWS), row_group_size=ROW_GROUP_ROWS)
                        rest = table_.slice(ROW_GROUP_ROWS)
                        pending, buffered = rest.to_batches(), rest.num_rows
                        written += ROW_GROUP_ROWS
                if buffered or written == 0:
                    writer.write_table(pa.Table.from_batches(pending, schema), row_group_size=ROW_GROUP_ROWS)
                    written += buffered
        return written

    def collect_garbage(self, *, _compacting: bool = False) -> tuple[int, bool]:
        """Delete what no reader can need; returns (files deleted, deferred).

        Always: staging folders of dead writers, partitions of commits that died
        before their ``profiles`` partition. Once no reader holds an older
        generation: the partitions of packed profiles, packs and manifests the
        current generation replaced, and the older lease files. Pack files no
        manifest lists are left alone while a compaction runs (they may be its own).
        """
        if not (self.root / "profiles").is_dir():
            return 0, False
        with contextlib.ExitStack() as stack:
            if _compacting:
                no_compaction = True
            elif (self.root / _COMPACT_LOCK_FILE).exists():
                no_compaction = stack.enter_context(self._locked(_COMPACT_LOCK_FILE, blocking=False))
            else:  # never compacted (and creating the lock file here would change the tree): no packs to collect
                no_compaction = False
            return self._collect(packs=no_compaction)

    def _collect(self, *, packs: bool) -> tuple[int, bool]:
        deleted = 0
        with self._locked(_LOCK_FILE):  # no commit renames partitions meanwhile
            for entry in os.scandir(self.root):
                if entry.name.startswith((_STAGING_PREFIX, _PENDING_PREFIX)) and entry.is_dir():
                    deleted += self._remove_dead_staging(Path(entry.path))
            generation = self.generation()
            manifest = self.manifest(generation)
            packed = {p for pack in manifest["packs"] for p in pack["profiles"]}
            committed = set(self._loose_profile_ids())
            held = self._older_leases_held(generation)
            for table in TABLES:
                table_dir = self.root / table
                if not table_dir.is_dir():
                    continue
                prefix = f"{PARTITION_COLUMN}="
                for entry in os.scandir(table_dir):
                    if not entry.name.startswith(prefix):
                        continue
                    profile_id = entry.name[len(prefix):]
                    partial = table != "profiles" and profile_id not in committed and profile_id not in packed
                    retired = profile_id in packed and not held
                    if partial or retired:
                        shutil.rmtree(entry.path, ignore_errors=True)
                        deleted += 1
                if packs and not held and (table_dir / _PACKS).is_dir():
                    current = {f"{p['id']}.parquet" for p in manifest["packs"]}
                    for entry in os.scandir(table_dir / _PACKS):
                        if entry.name not in current:
                            os.unlink(entry.path)
                            deleted += 1
            if not held:
                for directory, suffix in ((self.root / _MANIFESTS, ".json"), (self.root / _READERS, ".lock")):
                    if directory.is_dir():
                        for entry in os.scandir(directory):
                            stem = entry.name[: -len(suffix)] if entry.name.endswith(suffix) else ""
                            if stem.isdigit() and int(stem) < generation:
                                os.unlink(entry.path)
        return deleted, held

    def _older_leases_held(self, generation: int) -> bool:
        """True while a reader holds a lease on a generation before ``generation``."""
        directory = self.root / _READERS
        if not directory.is_dir():
            return False
        for entry in os.scandir(directory):
            stem = entry.name[:-5] if entry.name.endswith(".lock") else ""
            if not stem.isdigit() or int(stem) >= generation:
                continue
            with open(entry.path, "a") as handle:
                if not _try_lock(handle, fcntl.LOCK_EX):
                    return True
        return False

    @staticmethod
    def _remove_dead_staging(directory: Path) -> int:
        """Remove a staging folder whose writer is gone (its owner lock is free)."""
        owner = directory / _OWNER_FILE
        try:
            handle = open(owner)  # noqa: SIM115 - closed below, after the lock test
        except FileNotFoundError:  # a pending folder: being created this instant, or long dead
            try:
                stale = dt.datetime.now().timestamp() - directory.stat().st_mtime > 60
            except OSError:
                return 0
            if stale:
                shutil.rmtree(directory, ignore_errors=True)
            return int(stale)
        except OSError:
            return 0
        with handle:
            if not _try_lock(handle, fcntl.LOCK_EX):
                return 0  # a live writer
            shutil.rmtree(directory, ignore_errors=True)
        return 1
