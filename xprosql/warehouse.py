"""The warehouse on disk: one Delta Lake table per warehouse table, written by xprosql, read by any engine.

Layout::

    <root>/<table>/_delta_log/...             # the Delta transaction log of <table>
    <root>/<table>/part-<uuid>.parquet        # data files: profile_id is a column, nothing is partitioned
    <root>/_xprosql/commit.lock               # held while a commit or a compaction writes the logs
    <root>/_xprosql/staging-<uuid>/           # the Parquet files of a profile being ingested

Each table is a Delta table (``deltalake``, the delta-rs binding): ``deltalake.DeltaTable``, ``pl.scan_delta``,
DuckDB's ``delta_scan``, Spark and Dask read it without xprosql. ``profile_id`` is a column, not a partition (a
thousand one-file partitions is what the issue warned against); each data file's log entry carries the
``profile_id`` range of its rows (``minValues``/``maxValues``), which is what readers skip files by.

Decisions (issue #15):

* **One ingest is one transaction across its tables, by ordering plus pinning.** Delta has no multi-table
  transaction. A commit writes the data tables' log entries first and the ``profiles`` table's last, and that
  last commit records in its ``commitInfo`` (``xprosql.versions``) the version of every data table that holds
  exactly the committed profiles. A *snapshot* is a version of ``profiles``: xprosql reads each data table at
  the version that ``profiles`` version pins, so a reader never sees part of a profile, nor rows of a profile
  committed after its snapshot, and no row filter is needed. Plain Delta readers (no pinning) read the latest
  version of each table; they see every committed profile whole, and during an ingest may see a profile's rows
  before its ``profiles`` row (join on ``profiles`` to see committed profiles only; the README says so).
* **Commits are serialised by an exclusive ``flock``** on ``_xprosql/commit.lock`` (local and NFSv4 file
  systems). Under it a committer reads the ``profiles`` head, drops profiles already present (content-addressed
  ``profile_id``: a race on the same content ends with one copy, the loser reports it "already present" and its
  staged files are deleted), appends, and pins. Delta's optimistic concurrency (which delta-rs retries for
  appends) would let two writers append the same profile, which the lock excludes before anything is written;
  the lock is held for the commits only (a few ms per table), never while decoding. Ingest commits several
  profiles at once (``xprosql.ingest`` batches up to ``COMMIT_BATCH`` per worker), each profile still whole.
* **A kill between commits.** The data-table commits of a committer killed before its ``profiles`` commit are
  past the pinned versions: no xprosql reader sees them. The next commit to such a table finds its version
  ahead of the pin and first removes every single-profile file of a profile ``profiles`` does not hold (ingest
  files hold one profile each; compaction, under the same lock, never packs such files). The next ingest of that
  file finds its profile absent and ingests it whole.
* **Time travel**: ``xprosql.load(DIR, version=N)`` reads ``profiles`` version N and the versions it pins;
  ``as_of=`` (a datetime or ISO text) the last ``profiles`` version committed by then. Old versions read while
  their files exist (see vacuum).
* **DuckDB reads Parquet natively**: a snapshot is the file list of each pinned table version (from
  ``DeltaTable.get_add_actions``, or the log's JSON entries replayed here while it has no checkpoint), handed to
  ``read_parquet``; no pyarrow dataset in between.
* **Compaction** (:meth:`Warehouse.compact`) is Delta's OPTIMIZE (bin-packing small files into files of up to
  ``PACK_TARGET_ROWS`` rows, ordered by ``profile_id``, committed as ``dataChange=false`` remove and add
  actions) then VACUUM. The files are written by xprosql's own writer, not delta-rs's ``optimize.z_order``:
  that one rewrites through the Delta schema, turning ``uint64`` columns into ``int64`` and dictionary
  columns into plain strings, so the same table would read with two types across files (Polars refuses).
  VACUUM (delta-rs, ``full=True``) deletes files no longer referenced by the latest versions once they have been
  unreferenced for ``VACUUM_RETENTION_HOURS``: **a reader opened before a compaction keeps reading by
  retention time**, not by a registry of readers (Delta's own model, which readers outside xprosql also
  rely on); a snapshot kept open longer than the retention may find its files gone, and says so.

* **Object storage** (issue #38): ``Warehouse("s3://bucket/run", storage_options=...)`` is a
  :class:`RemoteWarehouse`: the same tables, written and read in place through delta-rs (which speaks S3, GCS and
  Azure) and fsspec (the data files DuckDB reads, uploads, the logs' entries). There is no lock: every commit is
  optimistic, built on the one guarantee delta-rs needs of a store for concurrent writers, an atomic
  put-if-absent of a log entry (S3's conditional ``If-None-Match`` put, which delta-rs 1.x uses by default, with
  no DynamoDB lock any more; GCS and Azure have it natively). A writer commits each data table at exactly the
  version after its latest, in an entry that holds the files its head pins plus its own, then ``profiles`` at
  exactly the head's version + 1 with the pins: a compare-and-swap that one writer wins; a loser starts again
  from the new head (:meth:`RemoteWarehouse._optimistic`). Vacuum keeps the files of the pinned versions whatever
  the latest entries hold. **Safe for concurrent writers**: AWS S3 (conditional writes since August 2024), GCS,
  Azure Blob / ADLS, MinIO and Cloudflare R2 (conditional puts), local file systems. **Not safe**: stores without
  an atomic put-if-absent (older Ceph RGW, Backblaze B2, other "S3-compatible" stores without ``If-None-Match``):
  there, one writer at a time (``AWS_S3_ALLOW_UNSAFE_RENAME`` is the old delta-rs switch for that; xprosql sets
  nothing). Staging is local (the system's temporary folder), the staged files are uploaded into the tables'
  folders and committed. A local warehouse keeps the ``flock`` protocol above, unchanged.

Example:
    >>> wh = Warehouse("run/")                                  # doctest: +SKIP
    >>> with wh.stage("3fa2c0de12345678") as staged:            # doctest: +SKIP
    ...     staged.write("events", batch)
    >>> wh.commit([staged])                                     # doctest: +SKIP
    [True]
    >>> wh.snapshot(version=3).profile_ids                      # doctest: +SKIP
"""

from __future__ import annotations

import bisect
import datetime as dt
import fcntl
import itertools
import json
import os
import random
import re
import shutil
import tempfile
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any
from urllib.parse import unquote

import pyarrow as pa

from xprosql._version import __version__
from xprosql.errors import WarehouseError
from xprosql.models.tables import JOB_DERIVED_TABLES, PACK_DERIVED_TABLES, PARTITION_COLUMN, TABLES

if TYPE_CHECKING:  # imported where files are written or read directly: a command that only queries saves 13 ms
    import pyarrow.parquet as pq

    # delta-rs: where it writes a log, or reads one too long to replay here (Warehouse._replayed); a command that
    # queries a small warehouse saves its 20 ms of import
    from deltalake import DeltaTable
    from deltalake.transaction import AddAction, CommitProperties, RemoveAction

__all__ = [
    "AUTO_COMPACT_MIN_PROFILES",
    "COMMIT_BATCH",
    "PACK_TARGET_ROWS",
    "ROW_GROUP_ROWS",
    "SMALL_PROFILE_ROWS",
    "UNSIGNED_COLUMNS",
    "VACUUM_RETENTION_HOURS",
    "CompactReport",
    "DataFile",
    "JobRows",
    "PlacedProfile",
    "RemoteWarehouse",
    "Snapshot",
    "StagedProfile",
    "Warehouse",
    "file_schema",
    "filesystem",
    "is_uri",
    "store_error",
    "to_file_types",
    "unsigned_sql",
]

ROW_GROUP_ROWS = 500_000
# A compacted file is filled with profiles up to this many rows: a handful of row groups, so DuckDB scans one
# file with several threads.
PACK_TARGET_ROWS = 4_000_000
# A file with fewer rows than this is small: it holds less than one row group. Larger files stay as they are.
SMALL_PROFILE_ROWS = ROW_GROUP_ROWS
# Automatic compaction after an ingest once this many profiles were committed since the last one.
AUTO_COMPACT_MIN_PROFILES = 32
# Profiles an ingest worker commits at once (one log entry per table for all of them), after deriving their tables
# together: a chunk's DuckDB connection, its queries' planning and its commit cost about as much for 16 profiles as
# for 8 (benchmarks/commit_batch.py: 1,000 profiles in 107 s against 115-118 s; 32 gained 2 s more for 350 MB more
# peak). An interrupted or out-of-disk worker loses at most a chunk.
COMMIT_BATCH = 16
# Hours a file unreferenced by the latest versions is kept for readers of older ones (and time travel).
VACUUM_RETENTION_HOURS = 1
# The stored tables of the first xprosql that stored any, for lists records that do not name theirs.
_FIRST_STORED_TABLES = ("stored_bottleneck_steps", "stored_steps")
# A checkpoint every 10 commits: a commit replays at most 10 JSON entries (7 ms a commit, against 25 ms with
# Delta's default of 100, measured with 400 commits of one profile each).
_CHECKPOINT_INTERVAL = "10"
_META = "_xprosql"
_LOCK_FILE = "commit.lock"
# Held shared while a staging folder is made, exclusive while an empty new warehouse folder is removed.
_STAGE_LOCK_FILE = "stage.lock"
_STAGING_PREFIX = "staging-"
_PENDING_PREFIX = "pending-"
_OWNER_FILE = ".owner"
_LOG = "_delta_log"
_TABLE_FILE_PREFIX = "part-"
# Row groups handed to the writer thread and not yet written: enough to keep it busy, few enough to bound memory.
_WRITES_IN_FLIGHT = 2
# Compaction's pack files written at once (Warehouse._pack).
_PACK_THREADS = 2
# Per-event integer columns that are nearly all distinct: no dictionary (it never pays off there, and
# trying costs a fifth of the write), delta-encoded (small for sorted ids and times). Durations repeat: they
# keep the dictionary, which makes them a third of the size.
_DELTA_COLUMNS = {"events": ("event_id", "start_ps", "device_offset_ps"), "event_stats": ("event_id",)}
# Threads loading the tables' logs of a snapshot at once (delta-rs releases the GIL).
_LOAD_THREADS = 8


# Delta has no unsigned integers: a uint64 column (program ids, stat values: XLA fingerprints pass 2^63) is stored
# as int64 with the same 64 bits, and xprosql's readers give it back as uint64 (:func:`unsigned_sql`).
UNSIGNED_COLUMNS: dict[str, tuple[str, ...]] = {
    table: tuple(f.name for f in schema if pa.types.is_unsigned_integer(f.type)) for table, schema in TABLES.items()}


def file_schema(table: str) -> pa.Schema:
    """The Arrow schema of ``table``'s data files: ``profile_id`` first, then the table's columns (unsigned
    integers as int64 of the same bits)."""
    fields = [f.with_type(pa.int64()) if pa.types.is_unsigned_integer(f.type) else f for f in TABLES[table]]
    return pa.schema([pa.field(PARTITION_COLUMN, pa.string()), *fields])


def to_file_types(table: str, rows: pa.Table) -> pa.Table:
    """``rows`` with the unsigned columns of ``table`` (uint64, every one) as int64 of the same bits, as data files
    store them: the same buffers read as int64, where a cast filled new ones (0.08-0.12 s of the 5.3 M-event
    file's ingest, on the thread that decodes)."""
    for name in UNSIGNED_COLUMNS[table]:
        if name in rows.column_names and rows.schema.field(name).type == pa.uint64():
            index = rows.column_names.index(name)
            signed = pa.chunked_array([chunk.view(pa.int64()) for chunk in rows.column(index).chunks], pa.int64())
            rows = rows.set_column(index, rows.schema.field(name).with_type(pa.int64()), signed)
    return rows


def unsigned_sql(table: str) -> str:
    """A ``REPLACE`` list giving ``table``'s unsigned columns back as UBIGINT ('' when it has none); it takes the
    int64 bits of the data files and the uint64 of older files or Arrow alike."""
    names = UNSIGNED_COLUMNS.get(table, ())
    if not names:
        return ""
    fixed = ", ".join(f'(CASE WHEN "{n}" < 0 THEN "{n}"::HUGEINT + 18446744073709551616 ELSE "{n}" END)::UBIGINT AS "{n}"'
                      for n in names)
    return f" REPLACE ({fixed})"


def _writer_options(table: str) -> dict[str, Any]:
    """Parquet writer options of a table beyond zstd: encodings and statistics only, the content is the same.

    The per-event tables keep min/max statistics of their numbers (what scans prune row groups by) and of
    ``profile_id``, but not of their other strings, which no query prunes by and which cost a sixth of the write.
    """
    delta = _DELTA_COLUMNS.get(table, ())
    if not delta:
        return {}
    schema = file_schema(table)
    return {"use_dictionary": [name for name in schema.names if name not in delta],
            "column_encoding": dict.fromkeys(delta, "DELTA_BINARY_PACKED"),
            "write_statistics": [f.name for f in schema if f.name == PARTITION_COLUMN or not _is_text(f.type)]}


def _is_text(type_: pa.DataType) -> bool:
    value_type = type_.value_type if pa.types.is_dictionary(type_) else type_
    return pa.types.is_string(value_type) or pa.types.is_binary(value_type)


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


def _still_at(handle: IO[Any], path: Path) -> bool:
    """Whether the open file ``handle`` is still the file at ``path`` (not removed since it was opened)."""
    try:
        return os.fstat(handle.fileno()).st_ino == os.stat(path).st_ino
    except FileNotFoundError:
        return False


def _now_ms() -> int:
    return int(time.time() * 1000)


def _creation_entry(table: str) -> str:
    """The first log entry of ``table``'s Delta table, empty: the protocol, metadata and commit info that delta-rs's
    ``DeltaTable.create`` writes (tests/test_warehouse.py compares them)."""
    from deltalake import Schema
    now = _now_ms()
    metadata: dict[str, Any] = {
        "id": str(uuid.uuid4()), "name": None, "description": None, "format": {"provider": "parquet", "options": {}},
        "schemaString": Schema.from_arrow(file_schema(table)).to_json(), "partitionColumns": [], "createdTime": now,
        "configuration": {"delta.checkpointInterval": _CHECKPOINT_INTERVAL}}
    protocol = {"minReaderVersion": 1, "minWriterVersion": 2}
    parameters = {"metadata": json.dumps(metadata, separators=(",", ":")),
                  "protocol": json.dumps(protocol, separators=(",", ":")), "mode": "Ignore"}
    info = {"timestamp": now, "operation": "CREATE TABLE", "operationParameters": parameters,
            "engineInfo": f"xprosql {__version__}", "clientVersion": f"xprosql-{__version__}"}
    actions = [{"commitInfo": info}, {"protocol": protocol}, {"metaData": metadata}]
    return "".join(json.dumps(action, separators=(",", ":")) + "\n" for action in actions)


# A URI with a scheme other than file: (s3://, gs://, az://, abfs://, ...): object storage.
_URI = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://")


def is_uri(location: str | os.PathLike[str]) -> bool:
    """Whether ``location`` names object storage (``s3://bucket/run``) rather than a local path."""
    match = _URI.match(os.fspath(location)) if isinstance(location, str) else None
    return match is not None and match["scheme"].lower() != "file"


def _fsspec_options(scheme: str, options: Mapping[str, str]) -> dict[str, Any]:
    """delta-rs / object_store storage options as fsspec's file system of ``scheme`` takes them: the S3 keys
    (``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``, ``AWS_ENDPOINT_URL``, ``AWS_REGION``)
    become s3fs's; other schemes' options pass as they are (gcsfs and adlfs name theirs)."""
    if scheme not in ("s3", "s3a"):
        return dict(options)
    keys = {k.lower(): v for k, v in options.items()}
    # Listings are not cached: another process commits to the logs this one lists.
    out: dict[str, Any] = {"use_listings_cache": False}
    for name, key in (("aws_access_key_id", "key"), ("aws_secret_access_key", "secret"), ("aws_session_token", "token")):
        if name in keys:
            out[key] = keys[name]
    endpoint = keys.get("aws_endpoint_url") or keys.get("aws_endpoint") or keys.get("endpoint_url")
    if endpoint:
        out["endpoint_url"] = endpoint
    region = keys.get("aws_region") or keys.get("aws_default_region") or keys.get("region")
    if region:
        out["client_kwargs"] = {"region_name": region}
    return out


# The stores' client libraries, whose own errors are no OSError: botocore's NoCredentialsError (no credentials found),
# google-auth's DefaultCredentialsError, azure-core's ClientAuthenticationError, ...
_STORE_CLIENTS = ("botocore", "aiobotocore", "google.", "azure.")


def store_error(location: str, exc: BaseException) -> str | None:
    """A one-line reason for ``exc`` when a store's client library raised it reaching ``location`` (no credentials
    found, ...), saying where credentials and endpoint come from; None for any other error (OSErrors included:
    s3fs and the others raise those for a missing object or a refused request, with their own clear text)."""
    if isinstance(exc, OSError) or not type(exc).__module__.startswith(_STORE_CLIENTS):
        return None
    return (f"{location}: cannot reach the object store: {exc} (credentials and endpoint come from the environment, "
            "e.g. AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_ENDPOINT_URL, or from storage_options=; on the command "
            "line --storage-option KEY=VALUE)")


def filesystem(location: str, storage_options: Mapping[str, str] | None = None) -> Any:
    """The fsspec file system of an object-storage ``location`` (``s3://`` needs s3fs, ``gs://`` gcsfs, ``az://``
    adlfs), with the credentials of ``storage_options`` or else of the environment."""
    import fsspec

    scheme = location.split("://", 1)[0].lower()
    try:
        return fsspec.filesystem(scheme, **_fsspec_options(scheme, storage_options or {}))
    except ImportError as exc:
        raise WarehouseError(f"{location}: reading {scheme}:// needs its fsspec file system: {exc}") from None


# Data files' bytes a process keeps in memory (least recently used out), read in blocks of _READ_BLOCK; the tail of
# every file of a snapshot (its Parquet footer) is fetched at once, concurrently, before DuckDB binds its views.
_READ_CACHE_BYTES = 1 << 30
_READ_BLOCK = 4 << 20
_READ_TAIL = 64 << 10
_DATA_FILESYSTEMS: dict[tuple[str, str, bool], Any] = {}


def data_filesystem(location: str, storage_options: Mapping[str, str] | None = None, *, keep: bool = True) -> Any:
    """The fsspec file system DuckDB reads a warehouse's data files through: :func:`filesystem`, with what it reads
    kept in memory. A data file never changes once written (a fresh name each), so what is kept is never stale, and
    the sizes the Delta log gives (:meth:`CachedReads.know`) need no request. Reading through the store's own file
    objects instead costs DuckDB a request per read, per size and per date asked: thousands for one analysis of a
    few profiles. ``keep`` False: nothing is kept past the read (compaction reads each file once)."""
    scheme = location.split("://", 1)[0].lower()
    key = (scheme, json.dumps(sorted((storage_options or {}).items())), keep)
    with _FILE_IDS_LOCK:
        found = _DATA_FILESYSTEMS.get(key)
        if found is None:
            found = _DATA_FILESYSTEMS[key] = _cached_reads(filesystem(location, storage_options),
                                                           _READ_CACHE_BYTES if keep else 0)
    return found


def _cached_reads(target: Any, limit: int) -> Any:
    """``target`` with reads kept in memory, up to ``limit`` bytes (:func:`data_filesystem`)."""
    import io
    from collections import OrderedDict

    from fsspec import AbstractFileSystem

    class CachedReads(AbstractFileSystem):
        protocol = target.protocol

        def __init__(self) -> None:
            super().__init__(skip_instance_cache=True)
            self._lock = threading.Lock()
            self._sizes: dict[str, int] = {}
            self._info: dict[str, dict[str, Any]] = {}
            # (file, start) -> bytes from start; per file, the starts held
            self._segments: OrderedDict[tuple[str, int], bytes] = OrderedDict()
            self._starts: dict[str, list[int]] = {}
            self._kept = 0

        def _key(self, path: str) -> str:
            return str(target._strip_protocol(path))

        def know(self, files: Iterable[DataFile]) -> None:
            """Sizes of data files from the log (their info then needs no request), and their tails fetched
            concurrently, unless held already."""
            fresh = []
            with self._lock:
                for f in files:
                    key = self._key(f.path)
                    if f.size and key not in self._sizes:
                        self._sizes[key] = f.size
                    if f.size and not self._held(key, max(0, f.size - _READ_TAIL), f.size):
                        fresh.append((f.path, key, max(0, f.size - _READ_TAIL), f.size))
            if fresh and limit:
                tails = target.cat_ranges([p for p, _, _, _ in fresh], [s for _, _, s, _ in fresh],
                                          [e for _, _, _, e in fresh], on_error="return")
                for (_, key, start, _), data in zip(fresh, tails, strict=True):
                    if isinstance(data, bytes):
                        self._keep(key, start, data)

        def info(self, path: str, **kwargs: Any) -> dict[str, Any]:
            key = self._key(path)
            with self._lock:
                known = self._info.get(key)
                if known is None and key in self._sizes:
                    known = self._info[key] = {"name": key, "size": self._sizes[key], "type": "file"}
            if known is None:
                known = dict(target.info(path, **kwargs))
                with self._lock:
                    self._info[key] = known
                    if known.get("type") == "file":
                        self._sizes[key] = int(known.get("size") or 0)
            return known

        def modified(self, path: str) -> Any:
            info = self.info(path)
            if "modified" not in info:  # a data file never changes: any fixed date says so; else the store's
                info["modified"] = (dt.datetime.fromtimestamp(0, dt.timezone.utc) if self._key(path) in self._sizes
                                    and os.path.basename(path).startswith(_TABLE_FILE_PREFIX) else target.modified(path))
            return info["modified"]

        def ls(self, path: str, detail: bool = True, **kwargs: Any) -> Any:
            return target.ls(path, detail=detail, **kwargs)

        def _held(self, key: str, start: int, end: int) -> bytes | None:
            """The bytes [start, end) of a file if one kept segment holds them (call under the lock)."""
            for at in self._starts.get(key, ()):
                data = self._segments.get((key, at))
                if data is not None and at <= start and end <= at + len(data):
                    self._segments.move_to_end((key, at))
                    return data[start - at:end - at]
            return None

        def _keep(self, key: str, start: int, data: bytes) -> None:
            with self._lock:
                if (key, start) in self._segments or not limit:
                    return
                self._segments[(key, start)] = data
                self._starts.setdefault(key, []).append(start)
                self._kept += len(data)
                while self._kept > limit and self._segments:
                    (old, at), dropped = self._segments.popitem(last=False)
                    self._kept -= len(dropped)
                    self._starts[old].remove(at)

        def read(self, path: str, key: str, size: int, start: int, end: int) -> bytes:
            """Bytes [start, end) of a file, from memory or in whole blocks from the store."""
            with self._lock:
                held = self._held(key, start, end)
            if held is not None:
                return held
            first, last = start // _READ_BLOCK * _READ_BLOCK, min(-(-end // _READ_BLOCK) * _READ_BLOCK, size)
            try:
                data = bytes(target.cat_file(path, start=first, end=last))
            except FileNotFoundError:
                raise FileNotFoundError(f"{path}: no such object (vacuum deletes the files of versions older than its "
                                        "retention)") from None
            self._keep(key, first, data)
            return data[start - first:end - first]

        def _open(self, path: str, mode: str = "rb", **kwargs: Any) -> Any:
            if mode != "rb":
                return target.open(path, mode)
            return _File(self, path, self._key(path), int(self.info(path).get("size") or 0))

    class _File(io.RawIOBase):
        """A read-only file over :class:`CachedReads`."""

        def __init__(self, fs: CachedReads, path: str, key: str, size: int) -> None:
            super().__init__()
            self.fs, self.path, self.key, self.size, self.position = fs, path, key, size, 0

        def readable(self) -> bool:
            return True

        def seekable(self) -> bool:
            return True

        def tell(self) -> int:
            return self.position

        def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
            base = {io.SEEK_SET: 0, io.SEEK_CUR: self.position, io.SEEK_END: self.size}[whence]
            self.position = max(0, base + offset)
            return self.position

        def read(self, n: int | None = -1) -> bytes:
            end = self.size if n is None or n < 0 else min(self.size, self.position + n)
            if end <= self.position:
                return b""
            data = self.fs.read(self.path, self.key, self.size, self.position, end)
            self.position = end
            return data

        def readinto(self, buffer: Any) -> int:
            data = self.read(len(buffer))
            memoryview(buffer)[:len(data)] = data
            return len(data)

        def readall(self) -> bytes:
            return self.read(-1)

    return CachedReads()


def _read_column(path: str, column: str, fs: Any = None) -> pa.ChunkedArray:
    """One column of a Parquet file (through ``fs`` on object storage).

    ``ParquetFile``, not ``read_table``: that one imports ``pyarrow.dataset`` (and with it ``pyarrow.compute``), 70 ms
    of a query's first snapshot of a compacted warehouse."""
    import pyarrow.parquet as pq
    if fs is None:
        return pq.ParquetFile(path).read(columns=[column]).column(0)
    with fs.open(path, "rb") as handle:
        return pq.ParquetFile(handle).read(columns=[column]).column(0)


def _strip_scheme(uri: str) -> str:
    """``s3://bucket/key`` as fsspec paths name it (``bucket/key``)."""
    return uri.split("://", 1)[1] if "://" in uri else uri


class StagedProfile:
    """Parquet files of one profile being written aside, before commit: ``<staging>/<table>.parquet``.

    Every row carries ``profile_id`` (a column: the tables are not partitioned). Row groups are encoded and
    written on a background thread (Arrow releases the GIL), so a decoder producing the next batch and the zstd
    writer run at once; at most ``_WRITES_IN_FLIGHT`` row groups wait, which bounds the memory it costs.
    """

    def __init__(self, directory: Path, profile_id: str, owner: IO[Any] | None = None) -> None:
        self.directory = directory
        self.profile_id = profile_id
        self.rows: dict[str, int] = dict.fromkeys(TABLES, 0)
        self._owner = owner  # the flock that tells a cleanup this staging folder is alive
        self._writers: dict[str, pq.ParquetWriter] = {}  # touched only by the writer thread
        self._pending: dict[str, list[pa.RecordBatch]] = {}
        self._closed: set[str] = set()
        self._thread: ThreadPoolExecutor | None = None
        self._in_flight: deque[Future[None]] = deque()
        self._ids = pa.array([], pa.string())  # profile_id repeated, sliced for each row group

    def file(self, table: str) -> Path:
        """The staged Parquet file of ``table`` (written once :meth:`finish` closed it; none for a table without
        rows)."""
        return self.directory / f"{table}.parquet"

    def write(self, table: str, batch: pa.RecordBatch) -> None:
        """Buffer ``batch`` (the table's columns); row groups are written once they reach ``ROW_GROUP_ROWS``."""
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
        if rows is not None:  # a constant column: one dictionary entry per row group in the file
            rows = to_file_types(table, rows.add_column(0, PARTITION_COLUMN, self._profile_ids(rows.num_rows)))
        self._submit(self._write_rows, table, rows)

    def _profile_ids(self, rows: int) -> pa.Array:
        """``profile_id`` ``rows`` times: a slice of one array, made again only for a larger row group. ``pa.repeat``
        per row group took 0.1-0.3 s of the 5.3 M-event file's 10 M rows, once per table 0.01-0.15 s; the buffers
        from numpy take 7-8 ms."""
        if len(self._ids) < rows:
            import numpy as np

            text = self.profile_id.encode()
            offsets = np.arange(rows + 1, dtype=np.int32) * np.int32(len(text))  # an empty id too: all zero
            self._ids = pa.Array.from_buffers(pa.string(), rows, [None, pa.py_buffer(offsets), pa.py_buffer(text * rows)])
        return self._ids.slice(0, rows)

    def _write_rows(self, table: str, rows: pa.Table | None) -> None:
        import pyarrow.parquet as pq
        writer = self._writers.get(table)
        if writer is None:
            self.directory.mkdir(parents=True, exist_ok=True)
            writer = pq.ParquetWriter(self.file(table), file_schema(table), compression="zstd", **_writer_options(table))
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
        """Close the files of ``tables`` (default: every table; each with rows gets one). Closed files take no more
        rows."""
        for table in TABLES if tables is None else tables:
            if table in self._closed:
                continue
            # A file of no rows is never committed: a profile leaves about half of the tables empty, and each empty
            # file cost the writer about a millisecond (benchmarks/RESULTS.md, "Empty staged files").
            if self.rows[table]:
                self._flush(table)
                self._submit(self._close_file, table)
            self._closed.add(table)
        self._wait()
        if tables is None:
            self.close()

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

    def discard(self) -> None:
        """Delete the staged files (after a commit moved what it kept, or instead of one)."""
        self.abort()
        shutil.rmtree(self.directory, ignore_errors=True)
        if self._owner is not None:
            self._owner.close()
            self._owner = None


@dataclass(frozen=True)
class DataFile:
    """One data file of a table version: its path, rows and the range of ``profile_id`` in it."""

    path: str
    rows: int
    first: str | None
    last: str | None
    #: False when the file holds profiles outside the snapshot that lists it: a scan filters them out
    exact: bool = True
    #: bytes (what an add action that puts the file back into a table says)
    size: int = 0

    @property
    def single(self) -> bool:
        return self.first is not None and self.first == self.last


# Compaction's callback for the stored tables (xprosql.engine.derive_stored_tables): the profiles' snapshot -> the rows
# of each table of PACK_DERIVED_TABLES.
Derive = Callable[["Snapshot"], Mapping[str, pa.Table]]
# Its callback for the job tables (JOB_DERIVED_TABLES; xprosql.queries.job_critical_path.derive_job_tables): the snapshot
# -> None when the jobs it stores are those stored already (Snapshot.stored_jobs), else the rows to store.
DeriveJobs = Callable[["Snapshot"], "JobRows | None"]


@dataclass(frozen=True)
class JobRows:
    """The job tables' rows after a compaction: every job of the snapshot's, each table whole."""

    #: the jobs whose rows the tables hold (those without rows too)
    job_ids: tuple[str, ...]
    #: JOB_DERIVED_TABLES -> its rows, profile_id the job's first profile
    tables: Mapping[str, pa.Table]


class _TableFiles(Mapping[str, tuple["DataFile", ...]]):
    """Every table's data files, each read from the table's log when first asked for (``load(table)``).

    Reading a table's log in delta-rs costs 5-10 ms and a query reads a few of the tables: a command's first snapshot
    read all of them (0.05 s for one profile, 0.1 s for a compacted 1,000). ``short(table)``: its log is short enough
    to replay here (``Warehouse._replayed``), in less time than a thread takes to start. Pickles as a plain dict of
    every table (a Dask task gets its share whole)."""

    def __init__(self, load: Callable[[str], tuple[DataFile, ...]], short: Callable[[str], bool]) -> None:
        self._load = load
        self.short = short
        self._known: dict[str, tuple[DataFile, ...]] = {}  # two threads may both read a table: the same files

    def __getitem__(self, table: str) -> tuple[DataFile, ...]:
        if table not in TABLES:
            raise KeyError(table)
        known = self._known.get(table)
        return self._known.setdefault(table, self._load(table)) if known is None else known

    def read(self, tables: Iterable[str]) -> None:
        """Read the logs of ``tables`` not read yet that delta-rs reads, several at once (outside the GIL); a short
        log is replayed when its table is first asked for."""
        missing = [table for table in dict.fromkeys(tables)
                   if table in TABLES and table not in self._known and not self.short(table)]
        if len(missing) > 1:
            with ThreadPoolExecutor(min(len(missing), _LOAD_THREADS)) as pool:
                for table, files in zip(missing, pool.map(self._load, missing), strict=True):
                    self._known.setdefault(table, files)

    def __iter__(self) -> Iterator[str]:
        return iter(TABLES)

    def __len__(self) -> int:
        return len(TABLES)

    def __reduce__(self) -> tuple[type[dict[str, tuple[DataFile, ...]]], tuple[dict[str, tuple[DataFile, ...]]]]:
        return dict, (dict(self.items()),)


@dataclass(frozen=True)
class Snapshot:
    """The files of a set of committed profiles at one warehouse version: what a reader reads.

    Plain data (picklable): a Dask task gets a share of it. ``files`` holds each table's data files at the
    version ``profiles`` version ``version`` pins, read from the table's log when first asked for (a log that cannot
    be read raises WarehouseError then, naming the table); ``stored`` the profiles whose compaction-derived tables
    (``PACK_DERIVED_TABLES``) hold their rows; ``universe`` every profile of the version (what a file's
    ``profile_id`` range can hold), of which ``profile_ids`` is the part read.

    Example:
        >>> snap = Warehouse("run/").snapshot()                     # doctest: +SKIP
        >>> snap.scan_sql("events")                                  # doctest: +SKIP
        "SELECT * FROM read_parquet([...], hive_partitioning = false, union_by_name = true)"
    """

    root: str
    version: int
    profile_ids: tuple[str, ...]
    files: Mapping[str, tuple[DataFile, ...]]
    stored: frozenset[str] = frozenset()
    without: Mapping[str, frozenset[str]] = field(default_factory=dict)
    universe: tuple[str, ...] = ()
    #: credentials and endpoint of an object-storage warehouse (None: a local one, or the environment's)
    storage_options: Mapping[str, str] | None = field(default=None, repr=False, compare=False)
    #: the jobs (jobs.jobs.job_id) whose rows the job tables (``JOB_DERIVED_TABLES``) hold
    stored_jobs: frozenset[str] = frozenset()

    @property
    def remote(self) -> bool:
        """Whether the files are on object storage (their paths are URIs)."""
        return is_uri(self.root)

    def filesystem(self) -> Any:
        """The fsspec file system DuckDB reads an object-storage snapshot's files through (each fetched whole once a
        process: :func:`data_filesystem`); None when local."""
        if not self.remote:
            return None
        fs = data_filesystem(self.root, self.storage_options)
        self._read_logs(TABLES)
        fs.know(f for files in self.files.values() for f in files)
        return fs

    def table_files(self, table: str) -> list[str]:
        """Every Parquet file this snapshot reads for ``table``."""
        return [f.path for f in self.files.get(table, ())]

    def profiles_without(self, table: str) -> list[str]:
        """Profiles with no rows for ``table`` because an xprosql that did not have it wrote them (upgraded)."""
        return sorted(self.without.get(table, frozenset()) & set(self.profile_ids))

    def _keep(self, files: Sequence[DataFile]) -> list[str]:
        """The profiles of this snapshot inside the ranges of ``files`` (what a filter on them keeps)."""
        ids = self.profile_ids
        kept: set[str] = set()
        for f in files:
            lo, hi = bisect.bisect_left(ids, f.first or ""), bisect.bisect_right(ids, f.last or "")
            kept.update(ids[lo:hi])
        return sorted(kept)

    def _read_logs(self, tables: Iterable[str]) -> None:
        if isinstance(self.files, _TableFiles):
            self.files.read(tables)

    def scan_sqls(self, tables: Iterable[str]) -> dict[str, str | None]:
        """:meth:`scan_sql` of each of ``tables``, their logs read at once."""
        tables = list(tables)
        self._read_logs(tables)
        return {table: self.scan_sql(table) for table in tables}

    def scan_sql(self, table: str) -> str | None:
        """DuckDB SQL reading ``table`` (``profile_id`` first); None when there is no file."""
        files = self.files.get(table, ())
        exact = [f.path for f in files if f.exact]
        mixed = [f for f in files if not f.exact]
        parts = []
        if exact:
            parts.append(f"SELECT * FROM read_parquet({_sql_list(exact)}, hive_partitioning = false, union_by_name = true)")
        if mixed:  # a literal list: DuckDB prunes row groups by their profile_id range
            keep = ", ".join(_sql_str(p) for p in self._keep(mixed))
            parts.append(f"SELECT * FROM read_parquet({_sql_list(f.path for f in mixed)}, hive_partitioning = false, "
                         f"union_by_name = true) WHERE {PARTITION_COLUMN} IN ({keep})")
        if not parts:
            return None
        return parts[0] if len(parts) == 1 else "(" + ") UNION ALL BY NAME (".join(parts) + ")"

    def scan_polars(self, table: str) -> Any:
        """A Polars LazyFrame over ``table`` (``profile_id`` first); None when there is no file."""
        import polars as pl

        files = self.files.get(table, ())
        if not files:
            return None
        options = ({k.lower(): v for k, v in (self.storage_options or {}).items()} or None) if self.remote else None
        frame = pl.scan_parquet([f.path for f in files], hive_partitioning=False, missing_columns="insert",
                                storage_options=options)
        if any(not f.exact for f in files):
            frame = frame.filter(pl.col(PARTITION_COLUMN).is_in(list(self.profile_ids)))
        names = frame.collect_schema().names()
        frame = frame.select([c for c in file_schema(table).names if c in names])
        return frame.with_columns(pl.col(c).reinterpret(signed=False) for c in UNSIGNED_COLUMNS[table] if c in names)

    def row_counts(self) -> dict[str, int]:
        """Rows of every table in this snapshot, from the log's per-file counts (no scan); a packed file that also
        holds profiles outside the snapshot has its ``profile_id`` column read."""
        self._read_logs(TABLES)
        return {table: sum(f.rows if f.exact else self._rows_read(f.path) for f in self.files.get(table, ()))
                for table in TABLES}

    def _rows_read(self, path: str) -> int:
        """Rows of the file ``path`` that belong to this snapshot's profiles."""
        import pyarrow.compute as pc

        ids = _read_column(path, PARTITION_COLUMN, self.filesystem()).cast(pa.string())
        return int(pc.sum(pc.is_in(ids, pa.array(self.profile_ids, pa.string()))).as_py() or 0)

    def restrict(self, profile_ids: Iterable[str]) -> Snapshot:
        """The same snapshot narrowed to ``profile_ids`` (which it must hold)."""
        wanted = set(profile_ids)
        missing = sorted(wanted - set(self.profile_ids))
        if missing:
            raise KeyError(f"profiles not in {self.root}: {missing}")
        universe = self.universe or self.profile_ids

        def narrowed(table: str) -> tuple[DataFile, ...]:
            kept = []
            for f in self.files.get(table, ()):
                if f.first is None:
                    continue
                if f.single:
                    if f.first in wanted:
                        kept.append(f)
                    continue
                inside = universe[bisect.bisect_left(universe, f.first):bisect.bisect_right(universe, f.last or "")]
                held = [p in wanted for p in inside]
                if any(held):
                    kept.append(replace(f, exact=all(held)))
            return tuple(kept)

        short = self.files.short if isinstance(self.files, _TableFiles) else lambda table: True
        return replace(self, profile_ids=tuple(p for p in self.profile_ids if p in wanted),
                       files=_TableFiles(narrowed, short), universe=universe)

    def shares(self, n: int) -> list[Snapshot]:
        """Split into about ``n`` disjoint snapshots of whole profiles, balanced by events.

        The profiles of one events file stay together (a packed file is read whole by one share, with no filter),
        dealt out largest first into the lightest share.
        """
        ids = self.profile_ids
        if not ids:
            return []
        wanted = set(ids)
        units: list[tuple[int, list[str]]] = []
        placed: set[str] = set()
        for f in self.files.get("events", ()):
            if f.first is None:
                continue
            inside = [p for p in ids[bisect.bisect_left(ids, f.first):bisect.bisect_right(ids, f.last or "")]
                      if p in wanted and p not in placed]
            if inside:
                units.append((f.rows, inside))
                placed.update(inside)
        units += [(1, [p]) for p in ids if p not in placed]  # no events
        bins: list[tuple[int, list[str]]] = [(0, []) for _ in range(max(1, min(n, len(units))))]
        for size, members in sorted(units, key=lambda u: -u[0]):
            index = min(range(len(bins)), key=lambda i: bins[i][0])
            bins[index] = (bins[index][0] + size, bins[index][1] + members)
        return [self.restrict(members) for _, members in bins if members]


@dataclass
class CompactReport:
    """What a compaction did."""

    version: int
    profiles: int = 0
    files_written: int = 0
    files_replaced: int = 0
    rows: dict[str, int] = field(default_factory=dict)
    vacuumed: int = 0
    #: jobs whose rows the job tables (JOB_DERIVED_TABLES) got in this compaction
    jobs: int = 0

    def __str__(self) -> str:
        if not self.files_written and not self.jobs:
            text = f"nothing to compact (version {self.version})"
        else:
            text = (f"version {self.version}: {self.files_replaced} files of {self.profiles} profiles packed into "
                    f"{self.files_written} files, {sum(self.rows.values())} rows")
        if self.jobs:
            text += f"; the critical path and what-if of {self.jobs} new jobs stored"
        if self.vacuumed:
            text += f"; {self.vacuumed} unreferenced files vacuumed"
        return text


@dataclass
class _Head:
    """The latest ``profiles`` version under the commit lock: its pins and lists."""

    version: int
    ids: frozenset[str]
    versions: dict[str, int]
    lists_at: int | None


# Profile ids of a profiles data file (immutable: a path is never rewritten), per process.
_FILE_IDS: dict[str, tuple[str, ...]] = {}
_FILE_IDS_LOCK = threading.Lock()
# The data files of a (table folder, version), per process: a version's files never change.
_VERSION_FILES: dict[tuple[str, int], tuple[DataFile, ...]] = {}


@dataclass(frozen=True)
class PlacedProfile:
    """A staged profile whose files are in its tables' folders (uploaded, on object storage) but in no log yet: what
    a Dask worker hands the committer (:meth:`Warehouse.place`, :meth:`Warehouse.commit_placed`). Plain data."""

    profile_id: str
    adds: Mapping[str, AddAction]  # table -> the add action of its file


class Warehouse:
    """A warehouse directory. Cheap to construct: nothing is read until asked.

    An object-storage location (``s3://bucket/run``) gives a :class:`RemoteWarehouse`, with ``storage_options``
    (delta-rs's keys) or else the environment's credentials.
    """

    def __new__(cls, root: str | os.PathLike[str], *, storage_options: Mapping[str, str] | None = None) -> Warehouse:
        if cls is Warehouse and is_uri(root):
            return super().__new__(RemoteWarehouse)
        return super().__new__(cls)

    def __init__(self, root: str | os.PathLike[str], *, storage_options: Mapping[str, str] | None = None) -> None:
        self.root = Path(root)
        self.storage_options: dict[str, str] | None = None  # a local warehouse takes none

    @property
    def location(self) -> str:
        """The warehouse as the user named it: a path, or a URI."""
        return str(self.root)

    # -- tables and versions ------------------------------------------------------

    def table_path(self, table: str) -> Path:
        return self.root / table

    def _has_table(self, table: str) -> bool:
        return (self.table_path(table) / _LOG).is_dir()

    def _relative(self, table: str, path: str) -> str:
        """A data file's path relative to its table (what a log entry names)."""
        return os.path.relpath(path, self.table_path(table))

    def _log_entry(self, table: str, version: int) -> str | None:
        """The text of a table's log entry (None when there is no such entry)."""
        try:
            return (self.table_path(table) / _LOG / f"{version:020d}.json").read_text()
        except FileNotFoundError:
            return None

    def _has_log_entry(self, table: str, version: int) -> bool:
        return (self.table_path(table) / _LOG / f"{version:020d}.json").exists()

    def _table_key(self, table: str) -> str:
        """What names a table across the process (the version-files cache's key)."""
        return str(self.table_path(table).resolve())

    def is_warehouse(self) -> bool:
        return (self.root / "profiles" / _LOG).is_dir()

    def remove_if_empty(self) -> None:
        """Remove the folder when it holds no table and no live writer's staging: what an ingest that committed
        nothing into a new directory leaves (its lock file)."""
        meta = self._meta()
        if self.is_warehouse() or not self.root.is_dir():
            return
        if not meta.is_dir():
            with suppress(OSError):  # not empty: someone else's now
                self.root.rmdir()
            return
        # Exclusive: no other ingest is making a staging folder in it now, and one that starts waits, then finds
        # the folder gone and makes it again.
        try:
            lock = open(meta / _STAGE_LOCK_FILE, "a")  # noqa: SIM115 - the with below closes it
        except FileNotFoundError:  # another ingest removed it this instant
            return
        with lock:
            if not _try_lock(lock, fcntl.LOCK_EX):
                return
            self._collect_staging()
            if any(e.name not in (_LOCK_FILE, _STAGE_LOCK_FILE) for e in os.scandir(meta)):
                return
            if self.is_warehouse() or any(e.name != _META for e in os.scandir(self.root)):
                return
            shutil.rmtree(self.root, ignore_errors=True)

    def is_older_format(self) -> bool:
        """True for a warehouse of xprosql's own format before Delta (hive partitions, packs, manifests)."""
        profiles = self.root / "profiles"
        if self.is_warehouse():
            return False
        if (self.root / "_manifests").is_dir():
            return True
        return profiles.is_dir() and any(e.name.startswith(f"{PARTITION_COLUMN}=") for e in os.scandir(profiles))

    def check_readable(self) -> None:
        if not self.root.exists():
            raise WarehouseError(f"{self.root}: no such warehouse directory")
        if not self.root.is_dir():
            raise WarehouseError(f"{self.root}: not a directory")
        if self.is_older_format():
            raise WarehouseError(f"{self.root}: a warehouse of an older xprosql (hive partitions, not Delta tables); "
                                 f"convert it with `xprosql upgrade {self.root}`")
        if not self.is_warehouse():
            raise WarehouseError(f"{self.root}: not an xprosql warehouse (no profiles/ Delta table); ingest into it first")

    def create(self) -> None:
        """Create every table (empty) that does not exist yet.

        A table's first log entry is written here, as delta-rs writes it (:func:`_creation_entry`): delta-rs takes
        2.5 ms of CPU a table, 60 ms for a new warehouse, a twentieth of a small file's ingest and first analysis.
        """
        missing = [table for table in TABLES if not self._has_table(table)]
        if not missing:
            return
        meta = self._meta()
        meta.mkdir(parents=True, exist_ok=True)
        for table in missing:
            path = self.table_path(table)
            # The log folder, its entry inside, is moved into place whole: no reader sees a log without a commit.
            scratch = Path(tempfile.mkdtemp(prefix="create-", dir=meta))
            try:
                (scratch / f"{0:020d}.json").write_text(_creation_entry(table))
                path.mkdir(parents=True, exist_ok=True)
                os.rename(scratch, path / _LOG)
            except OSError as exc:
                if not self._has_table(table):  # else another process created it this instant
                    raise WarehouseError(f"{path}: cannot create its Delta table: {exc}") from exc
            finally:
                shutil.rmtree(scratch, ignore_errors=True)

    def _open(self, table: str, version: int | None = None) -> DeltaTable:
        from deltalake import DeltaTable
        return DeltaTable(self.table_path(table), version=version)

    def version(self) -> int:
        """The latest warehouse version: the ``profiles`` table's."""
        return self._open("profiles").version()

    def _commit_info(self, version: int) -> dict[str, Any]:
        """The ``xprosql`` entry of the ``commitInfo`` of ``profiles`` version ``version`` ({} when none)."""
        text = self._log_entry("profiles", version)
        if text is None:  # a log entry past the log's retention: its pins are unknown
            return {}
        for line in text.splitlines():
            action = json.loads(line)
            if "commitInfo" in action:
                info = action["commitInfo"].get("xprosql", {})
                return json.loads(info) if isinstance(info, str) else dict(info)
        return {}

    def _latest(self, table: str) -> int:
        """The latest version of ``table``: its highest log entry (what a Delta reader lists first)."""
        entries = [int(e.name[:20]) for e in os.scandir(self.table_path(table) / _LOG)
                   if len(e.name) == 25 and e.name.endswith(".json") and e.name[:20].isdigit()]
        if not entries:
            raise WarehouseError(f"{self.table_path(table)}: a Delta log without a commit")
        return max(entries)

    def _files_at(self, table: str, version: int) -> tuple[DataFile, ...]:
        """The data files of ``table`` at ``version``; a version never changes, so a process reads it once."""
        key = (self._table_key(table), version)
        with _FILE_IDS_LOCK:
            known = _VERSION_FILES.get(key)
        if known is None:
            replayed = self._replayed(table, version)
            known = self._data_files(self._open(table, version)) if replayed is None else replayed
            with _FILE_IDS_LOCK:
                if len(_VERSION_FILES) > 4096:
                    _VERSION_FILES.clear()
                _VERSION_FILES[key] = known
        return known

    def _replayed(self, table: str, version: int) -> tuple[DataFile, ...] | None:
        """The data files of ``table`` at ``version`` from its log's JSON entries, 0 to ``version``, where the log has
        no checkpoint yet: a small warehouse's tables (most still at their creation). Their few entries of a few
        hundred bytes read in a fraction of a millisecond, where delta-rs takes 5-10 ms to open a table (and 20 ms to
        import). None where delta-rs reads it: a checkpoint, a missing entry, an action not replayed here (a deletion
        vector, a partition)."""
        if not _short_log(version) or self._has_checkpoint(table):
            return None
        adds: dict[str, dict[str, Any]] = {}
        for at in range(version + 1):
            text = self._log_entry(table, at)
            if text is None:
                return None
            for line in filter(str.strip, text.splitlines()):
                action = json.loads(line)
                if "add" in action:
                    add = action["add"]
                    if add.get("deletionVector") or add.get("partitionValues"):
                        return None
                    adds[unquote(add["path"])] = add
                elif "remove" in action:
                    adds.pop(unquote(action["remove"]["path"]), None)
        listed = []
        for path, add in adds.items():
            stats = json.loads(add.get("stats") or "{}")
            listed.append((path, stats.get("numRecords"), stats.get("minValues", {}).get(PARTITION_COLUMN),
                           stats.get("maxValues", {}).get(PARTITION_COLUMN), add.get("size")))
        return _as_data_files(self._data_root(table), listed)

    def _has_checkpoint(self, table: str) -> bool:
        return (self.table_path(table) / _LOG / "_last_checkpoint").exists()

    def _data_root(self, table: str) -> str:
        """Where the relative paths of ``table``'s log start (delta-rs's table URI, as a path)."""
        return str(self.table_path(table).resolve())

    def _pins(self, version: int) -> dict[str, Any]:
        """The ``xprosql`` entry of the last ``profiles`` commit at or before ``version`` that pins the data tables
        (a vacuum's own commits, and any other writer's, pin nothing: they change no rows)."""
        for at in range(version, -1, -1):
            info = self._commit_info(at)
            if "versions" in info:
                return info
            if not self._has_log_entry("profiles", at) and at < version:
                break  # past the log's retention
        return {}

    def _lists(self, lists_at: int | None) -> tuple[frozenset[str], dict[str, frozenset[str]]]:
        """The stored profiles and the profiles without a table, as recorded at version ``lists_at``. Profiles stored
        by an xprosql with other stored tables (``PACK_DERIVED_TABLES``) count as not stored: they lack a table's
        rows, which an analysis would read as none; the next compaction stores them again."""
        if lists_at is None:
            return frozenset(), {}
        info = self._commit_info(lists_at)
        without = {t: frozenset(ids) for t, ids in info.get("without", {}).items()}
        if self._stale_stored(info):
            return frozenset(), without
        return frozenset(info.get("stored", ())), without

    def _stored_jobs(self, lists_at: int | None) -> frozenset[str]:
        """The jobs whose rows the job tables hold, as recorded at version ``lists_at`` (none when written by an
        xprosql with other job tables)."""
        if lists_at is None:
            return frozenset()
        info = self._commit_info(lists_at)
        if sorted(info.get("stored_job_tables", ())) != sorted(JOB_DERIVED_TABLES):
            return frozenset()
        return frozenset(info.get("stored_jobs", ()))

    @staticmethod
    def _stale_stored(info: Mapping[str, Any]) -> bool:
        """Whether the stored profiles of a lists record hold other stored tables than this xprosql's."""
        tables = info.get("stored_tables", _FIRST_STORED_TABLES)
        return bool(info.get("stored")) and sorted(tables) != sorted(PACK_DERIVED_TABLES)

    @staticmethod
    def _data_files(table: DeltaTable) -> tuple[DataFile, ...]:
        actions = pa.RecordBatchReader.from_stream(table.get_add_actions(flatten=True)).read_all()
        names = actions.column_names
        first = actions.column(f"min.{PARTITION_COLUMN}").to_pylist() if f"min.{PARTITION_COLUMN}" in names else [None] * actions.num_rows
        last = actions.column(f"max.{PARTITION_COLUMN}").to_pylist() if f"max.{PARTITION_COLUMN}" in names else [None] * actions.num_rows
        return _as_data_files(_local_path(table.table_uri), zip(
            actions.column("path").to_pylist(), actions.column("num_records").to_pylist(), first, last,
            actions.column("size_bytes").to_pylist(), strict=True))

    def _fs(self) -> Any:
        """The fsspec file system of object storage; None for a local warehouse."""
        return None

    def _read_schema(self, path: str) -> pa.Schema:
        import pyarrow.parquet as pq
        return pq.read_schema(path)

    def _ids_of(self, files: Sequence[DataFile]) -> frozenset[str]:
        """The profile ids in ``profiles`` data files: from the log's statistics, or the file when it holds several."""
        ids: set[str] = set()
        for f in files:
            if f.single:
                ids.add(f.first or "")
                continue
            with _FILE_IDS_LOCK:
                known = _FILE_IDS.get(f.path)
            if known is None:
                known = tuple(_read_column(f.path, PARTITION_COLUMN, self._fs()).to_pylist())
                with _FILE_IDS_LOCK:
                    _FILE_IDS[f.path] = known
            ids.update(known)
        return frozenset(ids)

    def profile_ids(self) -> list[str]:
        """Committed profiles of the latest version, in sorted order."""
        if not self.is_warehouse():
            return []
        return sorted(self._ids_of(self._data_files(self._open("profiles"))))

    # -- reading -----------------------------------------------------------------

    def snapshot(self, *, profiles: Sequence[str] | None = None, version: int | None = None,
                 as_of: dt.datetime | str | None = None) -> Snapshot:
        """The committed profiles of a version (default: the latest) and the files of every table that it pins.

        ``as_of``: the last version committed at or before that time (a datetime, or ISO 8601 text).

        Example:
            >>> snap = Warehouse("run/").snapshot()                  # doctest: +SKIP
            >>> len(snap.profile_ids), snap.version                    # doctest: +SKIP
            (1000, 131)
        """
        self.check_readable()
        try:
            if as_of is not None:
                head = self._open("profiles")
                head.load_as_version(dt.datetime.fromisoformat(as_of) if isinstance(as_of, str) else as_of)
                at = head.version()
            else:
                at = self._latest("profiles") if version is None else version
                if not 0 <= at <= self._latest("profiles"):
                    raise ValueError(f"the latest is {self._latest('profiles')}")
        except Exception as exc:
            raise WarehouseError(f"{self.root}: no version {version if version is not None else as_of!r}: {exc}") from None
        info = self._pins(at)
        pins = info.get("versions", {})

        def pinned(table: str) -> int | None:
            return at if table == "profiles" else pins.get(table)

        def load(table: str) -> tuple[DataFile, ...]:
            version = pinned(table)
            try:
                return () if version is None or not self._has_table(table) else self._files_at(table, version)
            except Exception as exc:
                raise WarehouseError(f"{self.root}: cannot read version {at} of {table}: {exc}") from None

        files = _TableFiles(load, lambda table: _short_log(pinned(table) or 0))
        ids = tuple(sorted(self._ids_of(files["profiles"])))
        stored, without = self._lists(info.get("lists_at"))
        snap = Snapshot(self.location, at, ids, files, stored & set(ids), without, ids, self.storage_options,
                        stored_jobs=self._stored_jobs(info.get("lists_at")))
        if profiles is not None:
            snap = snap.restrict(profiles)
        return snap

    # -- writing -----------------------------------------------------------------

    def _meta(self) -> Path:
        return self.root / _META

    @contextmanager
    def stage(self, profile_id: str) -> Iterator[StagedProfile]:
        """Write a profile aside; on any exception its files are deleted. Commit it with :meth:`commit`."""
        meta = self._meta()
        name = uuid.uuid4().hex
        pending, directory = meta / f"{_PENDING_PREFIX}{name}", meta / f"{_STAGING_PREFIX}{name}"
        while True:
            meta.mkdir(parents=True, exist_ok=True)
            with open(meta / _STAGE_LOCK_FILE, "a") as lock:
                fcntl.flock(lock, fcntl.LOCK_SH)
                if not _still_at(lock, meta / _STAGE_LOCK_FILE):
                    continue  # an ingest that committed nothing removed the new folder meanwhile: make it again
                pending.mkdir()
                # Held while staging: a later cleanup removes the directory only once this process is gone.
                owner = open(pending / _OWNER_FILE, "w")  # noqa: SIM115 - held until commit or discard
                fcntl.flock(owner, fcntl.LOCK_EX)
                # Renamed once locked, so every staging folder has its owner file (a crash before leaves a pending one).
                os.rename(pending, directory)
                break
        staged = StagedProfile(directory, profile_id, owner)
        try:
            yield staged
        except BaseException:
            staged.discard()
            raise
        finally:
            staged.close()

    @contextmanager
    def _locked(self, *, blocking: bool = True) -> Iterator[bool]:
        self._meta().mkdir(parents=True, exist_ok=True)
        with open(self._meta() / _LOCK_FILE, "a") as lock:
            if blocking:
                fcntl.flock(lock, fcntl.LOCK_EX)
                yield True
            else:
                yield _try_lock(lock, fcntl.LOCK_EX)

    def _head(self) -> _Head:
        """The latest ``profiles`` version with its pins (call under the commit lock)."""
        table = self._open("profiles")
        at = table.version()
        info = self._pins(at)
        versions = {t: int(v) for t, v in info.get("versions", {}).items()}
        for t in TABLES:  # a table no commit pinned yet: as created (version 0)
            if t != "profiles":
                versions.setdefault(t, 0)
        return _Head(at, self._ids_of(self._data_files(table)), versions, info.get("lists_at"))

    def _repair(self, table: str, head: _Head, latest: DeltaTable) -> int:
        """Remove what a committer killed before its ``profiles`` commit left in ``table``: every single-profile
        file of a profile ``profiles`` does not hold. Returns the files removed."""
        from deltalake.transaction import RemoveAction
        orphans = [f for f in self._data_files(latest) if f.single and f.first not in head.ids]
        if orphans:
            stamp = _now_ms()
            latest.create_write_transaction(
                [RemoveAction(os.path.relpath(f.path, self.table_path(table)), True, stamp) for f in orphans],
                "append", latest.schema(), commit_properties=_props("repair"))
        return len(orphans)

    def _append(self, table: str, actions: Sequence[AddAction | RemoveAction], head: _Head, operation: str) -> int:
        """Commit ``actions`` to ``table`` (under the commit lock); returns the version to pin."""
        delta = self._open(table)
        self._evolve(table, delta)
        if delta.version() != head.versions[table]:  # a dead committer's entries since the pin
            self._repair(table, head, delta)
            delta = self._open(table)
        delta.create_write_transaction(list(actions), "append", delta.schema(), commit_properties=_props(operation))
        return delta.version() + 1  # this commit's: no one else commits under the lock (opening again costs ~9 ms)

    @staticmethod
    def _evolve(table: str, delta: DeltaTable) -> None:
        """Add the columns this xprosql's schema has and the table (created by an older one) lacks."""
        from deltalake import Schema
        have = {f.name for f in delta.schema().fields}
        new = [f for f in file_schema(table) if f.name not in have]
        if new:
            delta.alter.add_columns(list(Schema.from_arrow(pa.schema(new)).fields))

    def _add(self, table: str, source: Path, rows: int, first: str, last: str, *, data_change: bool = True) -> AddAction:
        """Move ``source`` into ``table``'s folder under a fresh name; its add action."""
        from deltalake.transaction import AddAction
        name = f"{_TABLE_FILE_PREFIX}{uuid.uuid4().hex}.parquet"
        target = self.table_path(table) / name
        os.rename(source, target)
        return AddAction(name, target.stat().st_size, {}, _now_ms(), data_change, _stats(rows, first, last))

    def commit(self, staged: Sequence[StagedProfile]) -> list[bool]:
        """Commit finished profiles, each whole; per profile, False when it was already there (its files are
        deleted). The staged folders are gone afterwards, whatever happens."""
        try:
            for item in staged:
                item.finish()
            with self._locked():
                self.create()
                head = self._head()
                seen = set(head.ids)
                kept: list[bool] = []
                adds: dict[str, list[AddAction]] = {}
                for item in staged:
                    kept.append(item.profile_id not in seen)
                    if not kept[-1]:
                        continue
                    seen.add(item.profile_id)
                    for table in TABLES:
                        if item.rows[table]:
                            adds.setdefault(table, []).append(
                                self._add(table, item.file(table), item.rows[table], item.profile_id, item.profile_id))
                if not any(kept):
                    return kept
                self._publish(head, {t: a for t, a in adds.items() if t != "profiles"}, adds.get("profiles", []),
                              operation="ingest")
                return kept
        finally:
            for item in staged:
                item.discard()

    def place(self, staged: StagedProfile) -> PlacedProfile:
        """Move a staged profile's files into its tables' folders (upload them, on object storage), in no log yet: a
        Dask worker's part of an ingest, which :meth:`commit_placed` commits. The staged folder is gone afterwards.
        Files placed by a worker that dies before the commit are in no version: vacuum deletes them."""
        try:
            staged.finish()
            self.create()
            adds = {t: self._add(t, staged.file(t), staged.rows[t], staged.profile_id, staged.profile_id)
                    for t in TABLES if staged.rows[t]}
        finally:
            staged.discard()
        return PlacedProfile(staged.profile_id, adds)

    def commit_placed(self, placed: Sequence[PlacedProfile]) -> list[bool]:
        """Commit placed profiles, each whole; per profile, False when it was already there (its files are deleted)."""
        with self._locked():
            self.create()
            head = self._head()
            kept = _first_new(placed, head.ids)
            adds = _adds_of(placed, kept)
            if any(kept):
                self._publish(head, {t: a for t, a in adds.items() if t != "profiles"}, adds.get("profiles", []),
                              operation="ingest")
        self._drop_placed([p for p, k in zip(placed, kept, strict=True) if not k])
        return kept

    def _drop_placed(self, placed: Sequence[PlacedProfile]) -> None:
        """Delete the files of placed profiles that were not committed."""
        for item in placed:
            for table, add in item.adds.items():
                self._delete_file(self._file_path(table, add.path))

    def _file_path(self, table: str, name: str) -> str:
        """The path (URI, on object storage) of the file ``name`` of ``table``."""
        return os.path.join(self.table_path(table), name)

    def _delete_file(self, path: str) -> None:
        Path(path).unlink(missing_ok=True)

    def _publish(self, head: _Head, tables: Mapping[str, Sequence[AddAction | RemoveAction]],
                 profiles: Sequence[AddAction | RemoveAction], *, operation: str,
                 lists: Mapping[str, Any] | None = None) -> int:
        """Commit the data tables' actions, then ``profiles``' with the pins: the one commit readers see.

        ``lists`` (a compaction's stored profiles and profiles without a table) are recorded in this commit;
        otherwise it points at the commit that recorded them last."""
        versions = dict(head.versions)
        with ThreadPoolExecutor(_LOAD_THREADS) as pool:  # a table's commit is file reads and writes in delta-rs, outside the GIL
            versions.update(zip(tables, pool.map(lambda t: self._append(t, tables[t], head, operation), tables)))
        delta = self._open("profiles")
        info: dict[str, Any] = {"versions": versions, "lists_at": head.lists_at}
        if lists is not None:
            info.update(lists, lists_at=delta.version() + 1)  # this commit's version: no one else commits under the lock
        delta.create_write_transaction(list(profiles), "append", delta.schema(), commit_properties=_props(operation, info))
        return delta.version() + 1

    # -- compaction and cleanup -------------------------------------------------

    def uncompacted_profiles(self) -> int:
        """Profiles committed since the last compaction (whose stored tables it has not derived)."""
        if not self.is_warehouse():
            return 0
        table = self._open("profiles")
        info = self._pins(table.version())
        stored, _ = self._lists(info.get("lists_at"))
        return len(self._ids_of(self._data_files(table)) - stored)

    def compact(
        self,
        *,
        target_rows: int = PACK_TARGET_ROWS,
        min_profiles: int = 2,
        wait: bool = True,
        derive: Derive | None = None,
        derive_jobs: DeriveJobs | None = None,
        retention_hours: float = VACUUM_RETENTION_HOURS,
    ) -> CompactReport | None:
        """Pack small files into files of up to ``target_rows`` rows ordered by profile, store the rows of
        ``PACK_DERIVED_TABLES`` for the profiles not stored yet and those of ``JOB_DERIVED_TABLES`` for the jobs
        not stored yet, then vacuum.

        ``derive(snapshot)`` computes the per-profile rows (``xprosql.engine.derive_stored_tables``),
        ``derive_jobs(snapshot)`` the job tables (``xprosql.queries.job_critical_path.derive_job_tables``), both over
        the warehouse as this compaction publishes it (its packed files, placed but not yet in a log; the job tables
        also over the rows just stored);
        ``xprosql.compact`` passes both. Without them nothing is stored, and analyses compute it at query time.
        Ingests wait for the commit lock meanwhile; readers do not (a snapshot taken before keeps its files: see the
        module docstring). Returns None when ``wait`` is False and another commit or compaction holds the lock.

        Example:
            >>> print(Warehouse("run/").compact())                    # doctest: +SKIP
            version 131: 17998 files of 1000 profiles packed into 306 files, 101234567 rows
        """
        from deltalake.transaction import RemoveAction
        self.check_readable()
        with self._locked(blocking=wait) as got:
            if not got:
                return None
            self._collect_staging()
            self.create()
            head = self._head()
            self._repair_all(head)
            report = CompactReport(head.version)
            snap = self._pinned_snapshot(head)
            stored, without = self._lists(head.lists_at)
            fresh = sorted(set(snap.profile_ids) - stored)
            # Stored by an xprosql with other stored tables: their rows go, and every profile is stored again.
            restore = head.lists_at is not None and self._stale_stored(self._commit_info(head.lists_at))
            plans = {t: self._plan(snap.files.get(t, ()), target_rows) for t in TABLES
                     if t not in PACK_DERIVED_TABLES and t not in JOB_DERIVED_TABLES}
            stored_jobs = self._stored_jobs(head.lists_at)
            quiet = len(fresh) < min_profiles and not restore and not any(len(groups) for groups in plans.values())
            jobs: JobRows | None = None
            if quiet:  # nothing to pack or store, unless the jobs changed (a member arrived)
                if derive_jobs is not None:
                    jobs = derive_jobs(replace(snap, stored=stored & set(snap.profile_ids), stored_jobs=stored_jobs))
                if jobs is None:
                    report.vacuumed = self._vacuum(retention_hours)
                    return report
            written: list[str] = []  # what a failure (a full disk) must not leave filling the disk
            actions: dict[str, list[AddAction | RemoveAction]] = {}
            with self.stage("compaction") as staging:
                try:
                    self._pack(plans, staging.directory, actions, written, report)
                    if restore and derive is not None:
                        stamp = _now_ms()
                        for table in PACK_DERIVED_TABLES:
                            actions.setdefault(table, []).extend(
                                RemoveAction(self._relative(table, f.path), False, stamp)
                                for f in snap.files.get(table, ()))
                    if derive is not None and fresh:
                        # From the files this compaction publishes, as the job tables below: a few large files in
                        # profile order read faster than a file per profile (the stored tables of 100 profiles:
                        # 9.6-9.7 s from their own files, 6.5-6.8 s from packed ones).
                        self._store(self._published(snap, actions, snap.stored, snap.stored_jobs), fresh, derive,
                                    target_rows, staging.directory, actions, written, report)
                    if derive_jobs is not None and not quiet:
                        # The job analyses read what this compaction publishes (packed files, the rows just stored),
                        # as a query after it would: not every fresh profile's events again.
                        done = stored | set(fresh) if derive is not None else stored
                        jobs = derive_jobs(self._published(snap, actions, done & set(snap.profile_ids), stored_jobs))
                    if jobs is not None:
                        self._store_jobs(snap, jobs, staging.directory, actions, written, report)
                        report.jobs = len(set(jobs.job_ids) - stored_jobs)
                        stored_jobs = frozenset(jobs.job_ids)
                    lists = {"stored": sorted(stored | set(fresh)) if derive is not None else sorted(stored),
                             "stored_tables": sorted(PACK_DERIVED_TABLES),
                             "stored_jobs": sorted(stored_jobs), "stored_job_tables": sorted(JOB_DERIVED_TABLES),
                             "without": {t: sorted(ids) for t, ids in without.items()}}
                    report.version = self._publish(head, {t: a for t, a in actions.items() if t != "profiles"},
                                                   actions.get("profiles", []), operation="compact", lists=lists)
                except BaseException:
                    for path in written:
                        self._delete_file(path)
                    raise
                finally:
                    staging.discard()
            ids = snap.profile_ids
            report.profiles = len({p for groups in plans.values() for g in groups for f in g
                                   for p in ids[bisect.bisect_left(ids, f.first or ""):bisect.bisect_right(ids, f.last or "")]})
            report.vacuumed = self._vacuum(retention_hours)
            return report

    def _published(self, snap: Snapshot, actions: Mapping[str, Sequence[AddAction | RemoveAction]],
                   stored: frozenset[str] | set[str], stored_jobs: frozenset[str]) -> Snapshot:
        """``snap`` as it reads once ``actions`` are published (their files are in place, not yet in a log)."""
        from deltalake.transaction import AddAction, RemoveAction
        files: dict[str, tuple[DataFile, ...]] = {}
        for table in TABLES:
            changes = actions.get(table, ())
            gone = {a.path for a in changes if isinstance(a, RemoveAction)}
            kept = [f for f in snap.files.get(table, ()) if self._relative(table, f.path) not in gone]
            for add in changes:
                if isinstance(add, AddAction):
                    stats = json.loads(add.stats)
                    kept.append(DataFile(self._file_path(table, add.path), stats["numRecords"],
                                         stats["minValues"][PARTITION_COLUMN], stats["maxValues"][PARTITION_COLUMN],
                                         size=add.size))
            files[table] = tuple(kept)
        return replace(snap, files=files, stored=frozenset(stored), stored_jobs=stored_jobs)

    def _repair_all(self, head: _Head) -> None:
        """Remove what dead committers left in every table, before anything is packed (under the commit lock)."""
        for table in TABLES:
            if table != "profiles" and self._open(table).version() != head.versions[table]:
                self._repair(table, head, self._open(table))
                head.versions[table] = self._open(table).version()

    def _pack(self, plans: Mapping[str, list[list[DataFile]]], scratch: Path,
              actions: dict[str, list[AddAction | RemoveAction]], written: list[str], report: CompactReport) -> None:
        """Write each group of small files as one file: the remove and add actions that replace them.

        Two packs are written at once: a pack's DuckDB scan and its Parquet encoding take turns, and the encoding
        (zstd, outside the GIL) is most of it; two keep two cores busy. A pack that fails (a full disk) stops those
        after it: at most the one beside it is started."""
        from deltalake.transaction import RemoveAction
        packs = [(table, scratch / f"{table}-{uuid.uuid4().hex}.parquet", group)
                 for table, groups in plans.items() for group in groups]
        written.extend(str(target) for _, target, _ in packs)
        counts: list[int] = []
        with ThreadPoolExecutor(_PACK_THREADS, thread_name_prefix="xprosql-pack") as pool:
            running: deque[Future[int]] = deque()
            for table, target, group in packs:
                if len(running) == _PACK_THREADS:
                    counts.append(running.popleft().result())
                running.append(pool.submit(self._write_pack_file, table, target, group, scratch))
            counts += [future.result() for future in running]
        for (table, target, group), rows in zip(packs, counts, strict=True):
            if rows != sum(f.rows for f in group):  # nothing lost or doubled
                raise WarehouseError(f"{self.root}: compaction wrote {rows} {table} rows for "
                                     f"{sum(f.rows for f in group)}; nothing published")
            stamp = _now_ms()
            actions.setdefault(table, []).extend(
                RemoveAction(self._relative(table, f.path), False, stamp) for f in group)
            add = self._add(table, target, rows, min(f.first or "" for f in group),
                            max(f.last or "" for f in group), data_change=False)
            written.append(self._file_path(table, add.path))
            actions[table].append(add)
            report.rows[table] = report.rows.get(table, 0) + rows
            report.files_written += 1
            report.files_replaced += len(group)

    def _store(self, snap: Snapshot, fresh: Sequence[str], derive: Derive,
               target_rows: int, scratch: Path, actions: dict[str, list[AddAction | RemoveAction]],
               written: list[str], report: CompactReport) -> None:
        """Files of the stored tables' rows for the ``fresh`` profiles: their add actions."""
        import pyarrow.parquet as pq
        for table, parts in self._derive(snap, fresh, derive, target_rows).items():
            for rows in parts:
                target = scratch / f"{table}-{uuid.uuid4().hex}.parquet"
                written.append(str(target))
                pq.write_table(rows, target, compression="zstd", row_group_size=ROW_GROUP_ROWS)
                ids = rows.column(PARTITION_COLUMN).to_pylist()
                add = self._add(table, target, rows.num_rows, min(ids), max(ids))
                written.append(self._file_path(table, add.path))
                actions.setdefault(table, []).append(add)
                report.rows[table] = report.rows.get(table, 0) + rows.num_rows
                report.files_written += 1

    def _store_jobs(self, snap: Snapshot, jobs: JobRows, scratch: Path, actions: dict[str, list[AddAction | RemoveAction]],
                    written: list[str], report: CompactReport) -> None:
        """Replace each job table's files by one file of ``jobs``' rows: its remove and add actions."""
        import pyarrow.compute as pc
        import pyarrow.parquet as pq
        from deltalake.transaction import RemoveAction

        stamp = _now_ms()
        for table in JOB_DERIVED_TABLES:
            actions.setdefault(table, []).extend(
                RemoveAction(self._relative(table, f.path), True, stamp) for f in snap.files.get(table, ()))
            rows = jobs.tables.get(table)
            if rows is None or not rows.num_rows:
                continue
            schema = file_schema(table)
            rows = to_file_types(table, rows.select(schema.names)).cast(schema).sort_by(PARTITION_COLUMN)
            target = scratch / f"{table}-{uuid.uuid4().hex}.parquet"
            written.append(str(target))
            pq.write_table(rows, target, compression="zstd", row_group_size=ROW_GROUP_ROWS)
            ids = rows.column(PARTITION_COLUMN)
            add = self._add(table, target, rows.num_rows, pc.min(ids).as_py(), pc.max(ids).as_py())
            written.append(self._file_path(table, add.path))
            actions[table].append(add)
            report.rows[table] = report.rows.get(table, 0) + rows.num_rows
            report.files_written += 1

    def _pinned_snapshot(self, head: _Head) -> Snapshot:
        files = {t: self._data_files(self._open(t, head.version if t == "profiles" else head.versions[t])) for t in TABLES}
        ids = tuple(sorted(head.ids))
        return Snapshot(self.location, head.version, ids, files, universe=ids, storage_options=self.storage_options)

    @staticmethod
    def _plan(files: Sequence[DataFile], target_rows: int) -> list[list[DataFile]]:
        """Groups of small files to pack, in profile order, up to ``target_rows`` rows each; a group of one file
        is left as it is."""
        small = [f for f in files if f.first is not None and ((f.single and f.rows < SMALL_PROFILE_ROWS)
                                                               or (not f.single and f.rows < target_rows // 2))]
        groups: list[list[DataFile]] = [[]]
        filled = 0
        for f in sorted(small, key=lambda f: f.first or ""):
            if groups[-1] and filled + f.rows > target_rows:
                groups.append([])
                filled = 0
            groups[-1].append(f)
            filled += f.rows
        return [g for g in groups if len(g) > 1]

    def _derive(self, snap: Snapshot, fresh: Sequence[str], derive: Derive, target_rows: int) -> dict[str, list[pa.Table]]:
        """The rows of each stored table for the ``fresh`` profiles, computed over groups of about
        ``target_rows`` events."""
        part = snap.restrict(fresh)
        out: dict[str, list[pa.Table]] = {}
        for share in part.shares(max(1, -(-sum(f.rows for f in part.files.get("events", ())) // target_rows))):
            derived = derive(share)
            for table in PACK_DERIVED_TABLES:
                rows = derived[table]
                if rows.num_rows:
                    schema = file_schema(table)
                    out.setdefault(table, []).append(to_file_types(table, rows.select(schema.names)).cast(schema))
        return out

    def _write_pack_file(self, table: str, target: Path, group: Sequence[DataFile], scratch: Path) -> int:
        """Rows of the files of ``group``, sorted by profile and kept in their order within it, to one file."""
        import pyarrow.parquet as pq
        paths = [f.path for f in group]
        # The file layout to keep: that of an input (so Polars sees the same types), profile_id first.
        first = self._read_schema(paths[0])
        # Nullable: a column that some inputs lack (written by another version) reads as nulls.
        fields = [f.with_nullable(True) for f in first]
        fields += [f for f in file_schema(table) if f.name not in first.names]
        schema = pa.schema(fields, metadata=first.metadata)
        written = 0
        from xprosql._duckdb import connect  # only compaction sorts with DuckDB: readers of the log need none

        # Two packs at once (_pack): a thread and half the memory each.
        with connect(config={"threads": 1, "memory_limit": "1GB"}) as con:
            if self._fs() is not None:  # DuckDB reads object storage through fsspec, each file whole
                con.register_filesystem(data_filesystem(self.location, self.storage_options, keep=False))
            # Its own spill folder: two DuckDB instances would name their temporary files alike.
            con.execute(f"SET temp_directory = {_sql_str(str(scratch / f'duckdb_tmp-{target.stem}'))}")
            scan = f"read_parquet({_sql_list(paths)}, hive_partitioning = false, union_by_name = true"
            if all(a.last is not None and b.first is not None and a.last < b.first for a, b in itertools.pairwise(group)):
                # Files of disjoint profile ranges, in order: read in that order (DuckDB keeps a scan's order), they
                # are sorted already, as each file is (a profile's own, or a pack; the stored tables, whose files
                # are in their modules' order, are never packed). Sorting 100 M rows again was a third of packing.
                query = f"SELECT * FROM {scan})"
            else:
                query = (f"SELECT * EXCLUDE (file_row_number) FROM {scan}, file_row_number = true) "
                         f"ORDER BY {PARTITION_COLUMN}, file_row_number")
            reader = con.sql(query).to_arrow_reader(ROW_GROUP_ROWS)
            with pq.ParquetWriter(target, schema, compression="zstd", **_writer_options(table)) as writer:
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

    def _vacuum(self, retention_hours: float) -> int:
        """Delete the files no latest version references, unreferenced for ``retention_hours`` (under the lock)."""
        deleted = 0
        for table in TABLES:
            if self._has_table(table):
                deleted += len(self._open(table).vacuum(retention_hours=int(retention_hours), dry_run=False,
                                                        enforce_retention_duration=False, full=True))
        return deleted

    def collect_garbage(self) -> int:
        """Delete the staging folders of dead writers and remove what a committer killed mid-commit left in the
        tables' latest versions. Returns the folders and files removed."""
        if not self.root.is_dir():
            return 0
        removed = self._collect_staging()
        if self.is_warehouse():
            with self._locked():
                head = self._head()
                for table in TABLES:
                    if table != "profiles" and (self.table_path(table) / _LOG).is_dir():
                        latest = self._open(table)
                        if latest.version() != head.versions[table]:
                            removed += self._repair(table, head, latest)
        return removed

    def _collect_staging(self) -> int:
        meta = self._meta()
        if not meta.is_dir():
            return 0
        return sum(self._remove_dead_staging(Path(e.path)) for e in os.scandir(meta)
                   if e.name.startswith((_STAGING_PREFIX, _PENDING_PREFIX)) and e.is_dir())

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


# Rounds of an optimistic commit before it gives up: each round is lost only to a writer that committed meanwhile.
_MAX_ROUNDS = 64
# Object-storage warehouses whose tables this process has seen exist.
_CREATED: set[str] = set()


class _Superseded(Exception):
    """Another compaction committed while this one worked: nothing of this one is published."""


class RemoteWarehouse(Warehouse):
    """A warehouse on object storage (``s3://``, ``gs://``, ``az://``, ...): the same Delta tables, committed without a
    lock (see "Object storage" in the module docstring).

    Every commit is optimistic. A round reads the head (the latest ``profiles`` version and its pins), drops the
    profiles it already holds, and commits each data table it touches at exactly the version after that table's
    latest (a conditional put: delta-rs with no retries), that entry holding the pinned files plus its own: files
    that others added since the pin (a writer in flight, or a dead one) are removed from it, pinned files that
    another removed are added back, so the entry is exact whatever others did. The round ends with the ``profiles``
    commit at exactly the head's version + 1, pinning those entries: a compare-and-swap that only one writer wins.
    A loser starts a new round from the new head (its uploaded files are reused), so a race on the same content
    ends with one copy. A writer killed anywhere leaves entries no pin names and files no entry names: readers never
    see them, the next commit to the table drops them, vacuum deletes the files.

    Staging folders are local (the system's temporary folder); the data files are uploaded into the tables' folders.
    """

    def __init__(self, root: str | os.PathLike[str], *, storage_options: Mapping[str, str] | None = None) -> None:
        self.uri = os.fspath(root).rstrip("/")
        self.root = Path(_strip_scheme(self.uri))  # named in messages only: nothing local is read through it
        self.storage_options = dict(storage_options) if storage_options else None

    @property
    def location(self) -> str:
        return self.uri

    def table_uri(self, table: str) -> str:
        return f"{self.uri}/{table}"

    def _fs(self) -> Any:
        return filesystem(self.uri, self.storage_options)

    def _open(self, table: str, version: int | None = None) -> DeltaTable:
        from deltalake import DeltaTable
        return DeltaTable(self.table_uri(table), version=version, storage_options=self.storage_options)

    def _has_checkpoint(self, table: str) -> bool:
        return bool(self._fs().exists(f"{self.table_uri(table)}/{_LOG}/_last_checkpoint"))

    def _data_root(self, table: str) -> str:
        return self.table_uri(table)

    def _log_names(self, table: str) -> list[str]:
        try:
            return [n.rsplit("/", 1)[-1] for n in self._fs().ls(f"{self.table_uri(table)}/{_LOG}", detail=False)]
        except FileNotFoundError:
            return []
        except Exception as exc:  # the first request to the store: no credentials is said here, as a user error
            if (reason := store_error(self.uri, exc)) is not None:
                raise WarehouseError(reason) from None
            raise

    def _has_table(self, table: str) -> bool:
        return bool(self._log_names(table))

    def is_warehouse(self) -> bool:
        return self._has_table("profiles")

    def remove_if_empty(self) -> None:
        """Nothing to remove: the tables are made by the first commit, and staging is local."""

    def is_older_format(self) -> bool:
        return False

    def check_readable(self) -> None:
        if not self.is_warehouse():
            raise WarehouseError(f"{self.uri}: not an xprosql warehouse (no profiles/ Delta table); ingest into it first")

    def create(self) -> None:
        if self.uri in _CREATED:  # a listing per table: once a process
            return
        with ThreadPoolExecutor(_LOAD_THREADS) as pool:
            missing = [t for t, has in zip(TABLES, pool.map(self._has_table, TABLES), strict=True) if not has]
            list(pool.map(self._create_table, missing))
        _CREATED.add(self.uri)

    def _create_table(self, table: str) -> None:
        from deltalake import DeltaTable
        try:
            DeltaTable.create(self.table_uri(table), schema=file_schema(table), mode="ignore",
                              configuration={"delta.checkpointInterval": _CHECKPOINT_INTERVAL},
                              storage_options=self.storage_options)
        except Exception as exc:  # another writer created it this instant
            if not self._has_table(table):
                raise WarehouseError(f"{self.table_uri(table)}: cannot create its Delta table: {exc}") from exc

    def _log_entry(self, table: str, version: int) -> str | None:
        try:
            return bytes(self._fs().cat_file(f"{self.table_uri(table)}/{_LOG}/{version:020d}.json")).decode()
        except FileNotFoundError:
            return None

    def _has_log_entry(self, table: str, version: int) -> bool:
        return bool(self._fs().exists(f"{self.table_uri(table)}/{_LOG}/{version:020d}.json"))

    def _latest(self, table: str) -> int:
        entries = [int(n[:20]) for n in self._log_names(table) if len(n) == 25 and n.endswith(".json") and n[:20].isdigit()]
        if not entries:
            raise WarehouseError(f"{self.table_uri(table)}: a Delta log without a commit")
        return max(entries)

    def _table_key(self, table: str) -> str:
        return self.table_uri(table)

    def _relative(self, table: str, path: str) -> str:
        prefix = self.table_uri(table) + "/"
        return path[len(prefix):] if path.startswith(prefix) else path

    def _file_path(self, table: str, name: str) -> str:
        return f"{self.table_uri(table)}/{name}"

    def _delete_file(self, path: str) -> None:
        if not is_uri(path):
            Path(path).unlink(missing_ok=True)
            return
        with suppress(OSError):  # already gone; else vacuum deletes it later
            self._fs().rm_file(path)

    def _read_schema(self, path: str) -> pa.Schema:
        import pyarrow.parquet as pq
        with self._fs().open(path, "rb") as handle:
            return pq.read_schema(handle)

    def _meta(self) -> Path:
        """Staging is local: the system's temporary folder (a dead writer's folders go with the next cleanup)."""
        return Path(tempfile.gettempdir()) / "xprosql-staging"

    @contextmanager
    def _locked(self, *, blocking: bool = True) -> Iterator[bool]:
        yield True  # no lock: every commit is a compare-and-swap (_optimistic)

    def _repair_all(self, head: _Head) -> None:
        """Nothing: a commit drops what dead writers left in the tables it touches (:meth:`_restore`)."""

    def collect_garbage(self) -> int:
        return self._collect_staging()

    def _add(self, table: str, source: Path, rows: int, first: str, last: str, *, data_change: bool = True) -> AddAction:
        """Upload ``source`` into ``table``'s folder under a fresh name, then delete it; its add action."""
        from deltalake.transaction import AddAction
        name = f"{_TABLE_FILE_PREFIX}{uuid.uuid4().hex}.parquet"
        size = os.path.getsize(source)
        self._fs().put_file(str(source), self._file_path(table, name))
        os.unlink(source)
        return AddAction(name, size, {}, _now_ms(), data_change, _stats(rows, first, last))

    def place(self, staged: StagedProfile) -> PlacedProfile:
        """Upload a staged profile's files into its tables' folders at once (the tables are made by the commit)."""
        from deltalake.transaction import AddAction
        try:
            staged.finish()
            tables = [t for t in TABLES if staged.rows[t]]
            names = {t: f"{_TABLE_FILE_PREFIX}{uuid.uuid4().hex}.parquet" for t in tables}
            sources = [str(staged.file(t)) for t in tables]
            sizes = [os.path.getsize(source) for source in sources]
            self._fs().put(sources, [self._file_path(t, names[t]) for t in tables])
            stamp = _now_ms()
            adds = {t: AddAction(names[t], size, {}, stamp, True, _stats(staged.rows[t], staged.profile_id, staged.profile_id))
                    for t, size in zip(tables, sizes, strict=True)}
        finally:
            staged.discard()
        return PlacedProfile(staged.profile_id, adds)

    def commit(self, staged: Sequence[StagedProfile]) -> list[bool]:
        placed: list[PlacedProfile] = []
        try:
            for item in staged:
                placed.append(self.place(item))
        finally:
            for item in staged:
                item.discard()
        return self.commit_placed(placed)

    def commit_placed(self, placed: Sequence[PlacedProfile]) -> list[bool]:
        self.create()
        kept: list[bool] = [False] * len(placed)

        def plan(head: _Head) -> _Plan | None:
            kept[:] = _first_new(placed, head.ids)
            if not any(kept):
                return None
            adds = _adds_of(placed, kept)
            return {t: a for t, a in adds.items() if t != "profiles"}, adds.get("profiles", []), None

        self._optimistic(plan, operation="ingest")
        self._drop_placed([p for p, k in zip(placed, kept, strict=True) if not k])
        return kept

    def compact(
        self,
        *,
        target_rows: int = PACK_TARGET_ROWS,
        min_profiles: int = 2,
        wait: bool = True,
        derive: Derive | None = None,
        derive_jobs: DeriveJobs | None = None,
        retention_hours: float = VACUUM_RETENTION_HOURS,
    ) -> CompactReport | None:
        """:meth:`Warehouse.compact`; None also when another compaction committed while this one worked (nothing of
        this one is kept: the next finds less to do). ``wait`` has nothing to wait for: there is no lock."""
        try:
            return super().compact(target_rows=target_rows, min_profiles=min_profiles, wait=wait, derive=derive,
                                   derive_jobs=derive_jobs, retention_hours=retention_hours)
        except _Superseded:
            return None

    def _publish(self, head: _Head, tables: Mapping[str, Sequence[AddAction | RemoveAction]],
                 profiles: Sequence[AddAction | RemoveAction], *, operation: str,
                 lists: Mapping[str, Any] | None = None) -> int:
        def plan(now: _Head) -> _Plan:
            # Ingests since the head only added profiles, which a compaction's actions leave alone; another
            # compaction may have packed or stored the same files.
            if lists is not None and now.lists_at != head.lists_at:
                raise _Superseded(f"{self.uri}: another compaction committed first")
            return tables, profiles, lists

        version = self._optimistic(plan, operation=operation, head=head)
        assert version is not None
        return version

    def _optimistic(self, plan: Callable[[_Head], _Plan | None], *, operation: str, head: _Head | None = None) -> int | None:
        """Commit what ``plan`` makes of the head, in rounds until a round's ``profiles`` commit wins; its version
        (None when ``plan`` found nothing to commit)."""
        from deltalake.exceptions import CommitFailedError
        touched: set[str] = set()
        for round_ in range(_MAX_ROUNDS):
            now = head if round_ == 0 and head is not None else self._head()
            planned = plan(now)
            if planned is None:
                self._settle(touched, now)
                return None
            tables, profiles, lists = planned
            versions = dict(now.versions)
            with ThreadPoolExecutor(_LOAD_THREADS) as pool:  # delta-rs commits outside the GIL
                done = {t: pool.submit(self._commit_table, t, tables[t], now.versions[t], operation) for t in tables}
                versions.update({t: future.result() for t, future in done.items()})
            touched.update(tables)
            info: dict[str, Any] = {"versions": versions, "lists_at": now.lists_at}
            if lists is not None:
                info.update(lists, lists_at=now.version + 1)
            delta = self._open("profiles", now.version)
            try:
                delta.create_write_transaction(list(profiles), "append", delta.schema(),
                                               commit_properties=_props(operation, info, retries=0))
            except CommitFailedError:  # another writer's profiles commit came first: a new round from its head
                time.sleep(random.uniform(0, min(1.0, 0.01 * 2 ** round_)))
                continue
            return now.version + 1
        raise WarehouseError(f"{self.uri}: no commit after {_MAX_ROUNDS} rounds lost to other writers; try again")

    def _commit_table(self, table: str, actions: Sequence[AddAction | RemoveAction], pin: int, operation: str) -> int:
        """Commit ``actions`` to ``table`` at the version after its latest, in an entry that holds exactly the files
        of version ``pin`` plus those of ``actions``; that version."""
        from deltalake.exceptions import CommitFailedError
        own = {a.path for a in actions}
        for _ in range(_MAX_ROUNDS):
            latest = self._open(table)
            if actions:
                self._evolve(table, latest)
            at = latest.version()
            fix = [] if at == pin else self._restore(table, pin, latest, own)
            if not fix and not actions:
                return at
            try:
                latest.create_write_transaction([*fix, *actions], "append", latest.schema(),
                                                commit_properties=_props(operation, retries=0))
            except CommitFailedError:  # another writer took that version: again over the new latest
                time.sleep(random.uniform(0, 0.05))
                continue
            return at + 1
        raise WarehouseError(f"{self.table_uri(table)}: no commit after {_MAX_ROUNDS} rounds lost to other writers")

    def _restore(self, table: str, pin: int, latest: DeltaTable, own: set[str]) -> list[AddAction | RemoveAction]:
        """The actions that turn ``table``'s latest files back into those of version ``pin`` (leaving ``own``'s paths
        to the caller's actions)."""
        from deltalake.transaction import AddAction, RemoveAction
        want = {self._relative(table, f.path): f for f in self._files_at(table, pin)}
        have = {self._relative(table, f.path) for f in self._data_files(latest)}
        stamp = _now_ms()
        fix: list[AddAction | RemoveAction] = [RemoveAction(path, True, stamp) for path in sorted(have - want.keys() - own)]
        fix += [AddAction(path, f.size, {}, stamp, True, _stats(f.rows, f.first, f.last))
                for path, f in sorted(want.items()) if path not in have and path not in own]
        return fix

    def _settle(self, tables: Iterable[str], head: _Head) -> None:
        """Put the latest entries of ``tables`` back to ``head``'s pins (what a writer whose profiles all turned out
        present had added); best effort: the next commit to a table does it too."""
        for table in tables:
            with suppress(Exception):
                self._commit_table(table, [], head.versions[table], "restore")

    def _vacuum(self, retention_hours: float) -> int:
        """Vacuum every table, keeping the files of the versions the head pins whatever the latest entries hold."""
        head = self._head()
        deleted = 0
        for table in TABLES:
            if self._has_table(table):
                pin = head.version if table == "profiles" else head.versions[table]
                deleted += len(self._open(table).vacuum(retention_hours=int(retention_hours), dry_run=False,
                                                        enforce_retention_duration=False, full=True, keep_versions=[pin]))
        return deleted


# What a round of an optimistic commit commits: each data table's actions, those of ``profiles``, and the lists of a
# compaction (None for an ingest).
if TYPE_CHECKING:
    _Plan = tuple[Mapping[str, Sequence[AddAction | RemoveAction]], Sequence[AddAction | RemoveAction], Mapping[str, Any] | None]


def _short_log(version: int) -> bool:
    """Whether a table's log up to ``version`` may be replayed here (``Warehouse._replayed``): it has had fewer commits
    than the checkpoint interval, so none of its entries is behind a checkpoint."""
    return version < int(_CHECKPOINT_INTERVAL)


def _as_data_files(root: str, adds: Iterable[tuple[str, int | None, str | None, str | None, int | None]]) -> tuple[DataFile, ...]:
    """Data files of a table's add actions (path, rows, first and last ``profile_id``, bytes), in ``profile_id`` order;
    a relative path is under ``root``."""
    files = [DataFile(path if path.startswith("/") else os.path.join(root, path), rows or 0, lo, hi, size=size or 0)
             for path, rows, lo, hi, size in adds]
    return tuple(sorted(files, key=lambda f: (f.first or "", f.path)))


def _local_path(uri: str) -> str:
    from urllib.parse import unquote, urlparse

    return unquote(urlparse(uri).path) if uri.startswith("file:") else uri


def _props(operation: str, info: Mapping[str, Any] | None = None, *, retries: int = 20) -> CommitProperties:
    """Commit properties naming the xprosql operation (and, on ``profiles``, carrying the pins). ``retries`` 0: the
    commit takes the version after the one its table was loaded at, or fails (a compare-and-swap)."""
    from deltalake.transaction import CommitProperties
    return CommitProperties(custom_metadata={"xprosql": dict(info or {}, operation=operation)}, max_commit_retries=retries)


def _stats(rows: int, first: str | None, last: str | None) -> str:
    """A data file's statistics as its add action carries them: rows, and the range of ``profile_id``."""
    return json.dumps({"numRecords": rows, "minValues": {PARTITION_COLUMN: first}, "maxValues": {PARTITION_COLUMN: last},
                       "nullCount": {PARTITION_COLUMN: 0}})


def _first_new(placed: Sequence[PlacedProfile], present: Iterable[str]) -> list[bool]:
    """Per placed profile, whether to commit it: not ``present``, and the first of its content in ``placed``."""
    seen = set(present)
    kept = []
    for item in placed:
        kept.append(item.profile_id not in seen)
        seen.add(item.profile_id)
    return kept


def _adds_of(placed: Sequence[PlacedProfile], kept: Sequence[bool]) -> dict[str, list[AddAction]]:
    adds: dict[str, list[AddAction]] = {}
    for item, keep in zip(placed, kept, strict=True):
        if keep:
            for table in TABLES:
                if table in item.adds:
                    adds.setdefault(table, []).append(item.adds[table])
    return adds
