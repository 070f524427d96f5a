"""Batch ingest: find profile files, name the profiles, decode them (in N processes with ``jobs=N``)
and commit them to a warehouse a few at a time.

One module per source format turns a file into Arrow record batches (:mod:`xprosql.ingest.xspace`,
:mod:`xprosql.ingest.kineto`, :mod:`xprosql.ingest.hlo`); this module orchestrates them. Profiles are
committed ``COMMIT_BATCH`` at a time (one Delta log entry per table for all of them), each profile whole,
so an interrupted batch is resumed by running it again.

Tags label profiles for grouping and pruning: ``tags={"job": "bert"}`` and
``xprosql.json`` files in the profile directories (see :func:`read_metadata_file`);
they land in ``profiles.tags``.

Inputs and the warehouse may be on object storage (``s3://``: :mod:`xprosql.ingest.remote`,
:class:`xprosql.warehouse.RemoteWarehouse`); ``cluster=`` runs the chunks as tasks of a Dask cluster
(:mod:`xprosql.ingest.cluster`), whose workers place the files in the warehouse's storage and leave the
commits to this process.

Example:
    >>> report = ingest("logs/", into="run/")                 # doctest: +SKIP
    >>> print(report)                                          # doctest: +SKIP
    1 ingested, 0 already present, 0 failed
    >>> ingest("fleet/", into="run/", jobs=8, tags={"team": "nlp"})   # doctest: +SKIP
"""

from __future__ import annotations

import concurrent.futures as cf
import ctypes
import datetime as dt
import errno
import gc
import hashlib
import json
import mmap
import multiprocessing
import os
import re
import signal
import stat
import sys
import threading
import time
from collections.abc import Callable, Container, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path, PurePath
from typing import IO, Any, Literal, TypeVar

import duckdb
import pyarrow as pa

from xprosql.errors import IngestError, WarehouseError
from xprosql.ingest import xspace_wire
from xprosql.ingest.compaction import compact_warehouse
from xprosql.ingest.derived import IN_MEMORY_BYTES, DecodedTables, Deriver
from xprosql.ingest.remote import RemoteFile, find_remote_profiles, read_remote, remote_tags
from xprosql.ingest.secrets import Redactor
from xprosql.models.tables import TABLES
from xprosql.warehouse import (
    AUTO_COMPACT_MIN_PROFILES,
    COMMIT_BATCH,
    CompactReport,
    StagedProfile,
    Warehouse,
    is_uri,
)

__all__ = [
    "METADATA_FILE",
    "IngestInterrupted",
    "IngestReport",
    "ProfileIngested",
    "find_profiles",
    "ingest",
    "profile_id_of",
    "read_metadata_file",
    "tags_for",
]

# Per-directory metadata: {"tags": {"job": "bert", "commit": "3f2a..."}}; inherited by subdirectories.
METADATA_FILE = "xprosql.json"

XSPACE_SUFFIX = ".xplane.pb"
JSON_SUFFIXES = (".json", ".json.gz")
# XProf writes <host>.trace.json.gz beside <host>.xplane.pb: a lossy view of the same profile;
# jax.profiler.trace(create_perfetto_trace=True) perfetto_trace.json.gz beside it, another.
_DERIVED_TRACE_SUFFIX = ".trace.json.gz"
_PERFETTO_TRACE = "perfetto_trace.json.gz"
# torch.profiler.tensorboard_trace_handler names its files <host>_<pid>.<ns>.pt.trace.json[.gz].
_TENSORBOARD_TRACE = re.compile(r"^(?P<host>.+)_\d+\.\d+\.pt\.trace\.json(\.gz)?$")


@dataclass(frozen=True)
class ProfileIngested:
    """One source file and what became of it."""

    path: str
    profile_id: str
    rows: dict[str, int] = field(default_factory=dict)
    redacted_secrets: int = 0  # values replaced by <redacted> (xprosql.ingest.secrets)


@dataclass
class IngestReport:
    """What an ingest did: profiles written, skipped as already present, and failures with reasons."""

    ingested: list[ProfileIngested] = field(default_factory=list)
    skipped: list[ProfileIngested] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)
    compaction: CompactReport | None = None
    #: files not attempted because the ingest was interrupted or stopped (run it again to resume)
    not_done: list[str] = field(default_factory=list)
    #: why the batch stopped before its end (a full disk), None when it did not
    stopped: str | None = None

    @property
    def ok(self) -> bool:
        return not self.failed

    def __str__(self) -> str:
        lines = [f"{len(self.ingested)} ingested, {len(self.skipped)} already present, {len(self.failed)} failed"]
        for item in self.ingested:
            counts = ", ".join(f"{n} {table}" for table, n in item.rows.items() if n)
            lines.append(f"  ingested {item.path} as {item.profile_id}: {counts}")
        for item in self.skipped:
            lines.append(f"  already present {item.path} ({item.profile_id})")
        for path, reason in self.failed:
            lines.append(f"  FAILED {path}: {reason}")
        if self.stopped:
            lines.append(f"  stopped: {self.stopped}")
        if self.not_done:
            lines.append(f"  not done: {len(self.not_done)} files; run the same ingest again to resume")
        if self.compaction is not None and self.compaction.files_written:
            lines.append(f"  compacted: {self.compaction}")
        return "\n".join(lines)


class IngestInterrupted(KeyboardInterrupt):
    """Ctrl-C during an ingest: what was committed stays, ``report`` says what was done.

    Every committed profile is whole; running the same ingest again skips them and
    does the rest.
    """

    def __init__(self, report: IngestReport) -> None:
        super().__init__(f"ingest interrupted: {len(report.ingested)} ingested, {len(report.not_done)} not done")
        self.report = report


def profile_id_of(data: bytes) -> str:
    """Stable profile id: the first 16 hex digits of the content's SHA-256."""
    return hashlib.sha256(data).hexdigest()[:16]


def _is_profile_file(path: Path) -> bool:
    name = path.name
    if name == METADATA_FILE:
        return False
    if name.endswith(XSPACE_SUFFIX):
        return True
    if not name.endswith(JSON_SUFFIXES):
        return False
    if name.endswith(_DERIVED_TRACE_SUFFIX):
        sibling = path.with_name(name[: -len(_DERIVED_TRACE_SUFFIX)] + XSPACE_SUFFIX)
        return not sibling.exists()
    if name == _PERFETTO_TRACE:
        return not any(path.parent.glob(f"*{XSPACE_SUFFIX}"))
    return True


def find_profiles(source: str | os.PathLike[str], *, problems: list[tuple[str, str]] | None = None) -> list[Path]:
    """Profile files under ``source``: the file itself, or every profile below a directory.

    A directory yields its ``*.xplane.pb`` (XSpace) and ``*.json`` / ``*.json.gz``
    (Kineto) files, except the ``<host>.trace.json.gz`` XProf derives from a
    ``<host>.xplane.pb`` beside it, and the ``perfetto_trace.json.gz`` JAX writes beside
    one. Such a file found without its ``.xplane.pb``, or named, fails its ingest saying so.

    Below a directory, symbolic links that lead out of it are not followed, and
    directories that cannot be read are skipped: each goes to ``problems`` as
    (path, reason), so none is lost silently. A file named directly is read wherever
    it leads.
    """
    path = Path(source)
    if path.is_dir():
        root = path.resolve()
        found = []

        def unreadable(error: OSError) -> None:
            if problems is not None:
                problems.append((str(error.filename or path), f"directory not searched: {error.strerror or error}"))

        for directory, subdirectories, files in os.walk(path, onerror=unreadable):
            for name in sorted(files) + [d for d in subdirectories if os.path.islink(os.path.join(directory, d))]:
                candidate = Path(directory, name)
                if candidate.is_symlink() and not candidate.resolve().is_relative_to(root):
                    if problems is not None and (candidate.is_dir() or _is_profile_file(candidate)):
                        problems.append((str(candidate), f"a link out of {path}, to {candidate.resolve()}: not followed "
                                                         "(name the file to ingest it)"))
                elif candidate.is_file() and _is_profile_file(candidate):
                    found.append(candidate)
                elif _is_profile_file(candidate) and not candidate.is_dir() and problems is not None:
                    problems.append((str(candidate), "not a regular file (a FIFO, device or socket): refused"))
        found.sort()
        if not found:
            raise IngestError(path, "no profiles found (no *.xplane.pb, *.json or *.json.gz files below this directory)")
        return found
    if not path.exists():
        raise IngestError(path, "no such file or directory")
    return [path]


# A rocprofv3 JSON this large is mapped, not read: its decoder streams it, dropping the pages it is done with.
_STREAMED_MIN_BYTES = 64 << 20
_HASH_WINDOW = 64 << 20  # a mapped file is hashed this much at a time (a multiple of the page size)

# A decoder: the bytes of one file (and its name, for errors) to (table, record batch) pairs.
_Decoder = Callable[..., Iterator[tuple[str, pa.RecordBatch]]]


# Each format's decoder is imported with its first file: the XSpace one loads the XPlane and HLO protobuf modules,
# which a process ingesting only Kineto traces never needs.
def _decode_xspace(data: bytes, *, source: str) -> Iterator[tuple[str, pa.RecordBatch]]:
    from xprosql.ingest.xspace import decode_xspace

    return decode_xspace(data, source=source)


def _decode_kineto(data: bytes, *, source: str) -> Iterator[tuple[str, pa.RecordBatch]]:
    from xprosql.ingest.kineto import decode_kineto

    return decode_kineto(data, source=source)


def _decode_rocprof(data: bytes | mmap.mmap, *, source: str) -> Iterator[tuple[str, pa.RecordBatch]]:
    from xprosql.ingest.rocprof import decode_rocprof

    return decode_rocprof(data, source=source)


def _decoder(path: Path, head: bytes) -> _Decoder:
    """XSpace by name; JSON (plain or gzipped) by name or content (``head``: the file's first bytes); else XSpace,
    whose errors say what it is."""
    if path.name.endswith(XSPACE_SUFFIX):
        return _decode_xspace
    if path.name.endswith(JSON_SUFFIXES) or head[:2] == b"\x1f\x8b" or head.lstrip()[:1] in (b"{", b"["):
        from xprosql.ingest.rocprof import looks_like_rocprof  # rocprofv3's JSON: {"rocprofiler-sdk-tool": ...}

        return _decode_rocprof if looks_like_rocprof(head) else _decode_kineto
    return _decode_xspace


def _run_and_host(path: PurePath) -> tuple[str | None, str]:
    """The run and the host of a file, from its path: the host when the file does not say it (an XSpace's
    hostnames, a Kineto trace's host_name win).

    jax.profiler.trace writes <logdir>/plugins/profile/<run>/<host>.xplane.pb;
    torch.profiler.tensorboard_trace_handler <dir>/<host>_<pid>.<ns>.pt.trace.json.
    """
    host = path.name
    if match := _TENSORBOARD_TRACE.match(host):
        host = match["host"]
    for suffix in (XSPACE_SUFFIX, *JSON_SUFFIXES[::-1]):
        if host.endswith(suffix):
            host = host[: -len(suffix)]
            break
    parts = path.parts
    run = parts[-2] if len(parts) >= 4 and parts[-4:-2] == ("plugins", "profile") else None
    return run, host


def read_metadata_file(path: str | os.PathLike[str]) -> dict[str, str]:
    """The tags of one ``xprosql.json`` metadata file.

    The format is a JSON object with one key, ``tags``: an object of tag names to
    values (strings; numbers and booleans are written as JSON writes them)::

        {"tags": {"job": "bert-large", "commit": "3f2a9c1", "cluster": "v6e-64"}}

    Example:
        >>> read_metadata_file("logs/bert/xprosql.json")           # doctest: +SKIP
        {'job': 'bert-large', 'commit': '3f2a9c1', 'cluster': 'v6e-64'}
    """
    path = Path(path)
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise IngestError(path, f"unreadable metadata file: {exc}") from None
    return _parse_metadata(str(path), text)


def _parse_metadata(path: str, text: str) -> dict[str, str]:
    """The tags of a metadata file's text (``path`` names it in errors)."""
    try:
        document = json.loads(text)
    except ValueError as exc:
        raise IngestError(path, f"unreadable metadata file: {exc}") from None
    if not isinstance(document, dict) or set(document) - {"tags"}:
        raise IngestError(path, 'metadata file must be a JSON object with the key "tags", e.g. {"tags": {"job": "bert"}}')
    tags = document.get("tags", {})
    if not isinstance(tags, dict):
        raise IngestError(path, '"tags" must be an object of tag names to values')
    result = {}
    for key, value in tags.items():
        if not key or "=" in key:
            raise IngestError(path, f"bad tag name {key!r}")
        if isinstance(value, (dict, list)) or value is None:
            raise IngestError(path, f"tag {key!r}: value must be a string, number or boolean")
        result[key] = value if isinstance(value, str) else json.dumps(value)
    return result


def tags_for(
    path: str | os.PathLike[str],
    *,
    root: str | os.PathLike[str] | None = None,
    tags: Mapping[str, str] | None = None,
    _cache: dict[Path, dict[str, str]] | None = None,
) -> dict[str, str]:
    """Tags of the profile at ``path``: the ``xprosql.json`` files of its directory and of
    each directory above it up to ``root`` (the directory given to ingest; by default the
    profile's own directory), the deeper file winning, then ``tags`` over all of them.

    Example:
        >>> tags_for("logs/bert/run1/host0.xplane.pb", root="logs", tags={"team": "nlp"})  # doctest: +SKIP
        {'job': 'bert-large', 'commit': '3f2a9c1', 'team': 'nlp'}
    """
    path = Path(path).absolute()
    top = Path(root).absolute() if root is not None else path.parent
    if top.is_file():
        top = top.parent
    directories = []
    directory = path.parent
    while True:
        directories.append(directory)
        if directory == top or directory.parent == directory:
            break
        directory = directory.parent
    if top not in directories:  # root is not above path: only the profile's own directory
        directories = [path.parent]
    merged: dict[str, str] = {}
    for directory in reversed(directories):
        if _cache is not None and directory in _cache:
            found = _cache[directory]
        else:
            candidate = directory / METADATA_FILE
            found = read_metadata_file(candidate) if candidate.is_file() else {}
            if _cache is not None:
                _cache[directory] = found
        merged.update(found)
    merged.update(tags or {})
    return dict(sorted(merged.items()))


# What became of one file: ("ingested" | "skipped", path, profile_id, (rows, redacted secrets)), ("failed", path,
# "", reason), ("disk_full", path, "", reason), which stops the batch, or ("not_done", path, "", ""): not tried; on a
# cluster's worker also ("placed", path, profile_id, (rows, redacted secrets, PlacedProfile)): for the committer.
_Outcome = tuple[str, str, str, object]
# A file to ingest: a local path, or an object of object storage.
_Source = Path | RemoteFile
T = TypeVar("T")
# Who commits a cluster's profiles: this process, from what the workers placed (one committer), or each worker its
# own chunk (optimistic commits racing). benchmarks/object_storage.py measures both: 100 profiles into S3 on 2
# workers took 48.4 s and 47.8 s (2 cores, 3 Dec 2026): the same, so one committer, which loses no round to a race
# and sees every outcome as it commits.
_CLUSTER_COMMITS: Literal["client", "workers"] = "client"
# A file decoded and staged, waiting for its chunk's commit: its outcome once committed, and its files.
_Staged = tuple[ProfileIngested, StagedProfile]


@dataclass
class _Decoded:
    """A file decoded and staged, its tables kept in memory: its derived tables still to add (:func:`_derive_staged`)."""

    path: _Source
    staged: StagedProfile
    tables: dict[str, pa.Table]
    redacted_secrets: int
    nbytes: int  # the Arrow memory of ``tables``

    def finish(self, derived: Mapping[str, pa.Table]) -> _Staged:
        """Add the ``derived`` tables and close the staged files."""
        _write_derived(self.staged, derived.items())
        self.staged.finish()
        return ProfileIngested(str(self.path), self.staged.profile_id, dict(self.staged.rows),
                               self.redacted_secrets), self.staged


def _attempt(path: _Source, warehouse: Warehouse, deriver: Deriver, present: Container[str], *, tags: Mapping[str, str],
             keep_secrets: bool) -> _Outcome | _Staged | _Decoded:
    """Decode and stage one file; every failure, whatever its kind, is an outcome naming the file, never an exception."""
    try:
        result = _ingest_file(path, warehouse, deriver, present, tags=tags, keep_secrets=keep_secrets)
    except Exception as exc:
        return _failure(str(path), exc)
    if isinstance(result, ProfileIngested):
        return "skipped", result.path, result.profile_id, (result.rows, result.redacted_secrets)
    return result


def _failure(path: str, exc: Exception) -> _Outcome:
    """The outcome of a file whose ingest raised ``exc``."""
    if isinstance(exc, IngestError):
        return "failed", exc.path, "", exc.problem
    if isinstance(exc, OSError):
        return _os_failure(path, exc)
    if isinstance(exc, RecursionError):
        return "failed", path, "", "nested too deeply to decode"
    if isinstance(exc, MemoryError):
        return "failed", path, "", "does not fit in memory: it expands to more than this machine has"
    # A bug must not stop the batch: report it against the file.
    return "failed", path, "", f"internal error: {type(exc).__name__}: {exc}"


def _os_failure(path: str, exc: OSError) -> _Outcome:
    if exc.errno == errno.ENOSPC:
        return "disk_full", path, "", f"no space left on the warehouse's disk ({exc.strerror}); nothing of it was kept"
    return "failed", path, "", f"cannot ingest: {exc.strerror or exc}"


def _derive_staged(items: Sequence[_Decoded], deriver: Deriver) -> list[_Outcome | _Staged]:
    """Add their derived tables to the staged profiles ``items``, derived together, and close their files: per
    item, the staged profile, or the outcome of its failure (its files deleted)."""
    try:
        derived = _derived_rows(items, deriver)
    except Exception as exc:
        if len(items) > 1:  # which profile fails: each alone says
            return [outcome for item in items for outcome in _derive_staged([item], deriver)]
        items[0].staged.discard()
        return [_failure(str(items[0].path), exc)]
    outcomes: list[_Outcome | _Staged] = []
    for item, rows in zip(items, derived, strict=True):
        try:
            outcomes.append(item.finish(rows))
        except Exception as exc:
            item.staged.discard()
            outcomes.append(_failure(str(item.path), exc))
    return outcomes


def _derived_rows(items: Sequence[_Decoded], deriver: Deriver) -> list[dict[str, pa.Table]]:
    try:
        return deriver.derive_together([item.tables for item in items])
    except duckdb.Error as exc:
        raise _underivable(items[0].path, exc) from None
    except _CORRUPT as exc:
        raise _corrupt(items[0].path, exc) from None


# What a file that parses but holds impossible values (times past int64 ps, ...) raises in decoding or deriving.
_CORRUPT = (OverflowError, ValueError, TypeError, KeyError, pa.ArrowException)


def _corrupt(path: _Source, exc: Exception) -> IngestError:
    return IngestError(path, f"corrupt content: {type(exc).__name__}: {exc}")


def _underivable(path: _Source, exc: duckdb.Error) -> IngestError:
    """Values the summary SQL cannot add up (e.g. sums past int64)."""
    return IngestError(path, f"cannot derive its summary tables: {type(exc).__name__}: {exc}")


def _ingest_chunk(items: Sequence[tuple[_Source, Mapping[str, str]]], warehouse: Warehouse, *,
                  keep_secrets: bool, place: bool = False) -> list[_Outcome]:
    """Decode and stage each file, derive the small ones together, then commit the staged profiles together (each
    one whole); ``place``: place them in the warehouse's storage instead, for another process to commit (a
    cluster's worker)."""
    outcomes: list[_Outcome | None] = []
    staged: dict[int, _Staged] = {}
    pending: dict[int, _Decoded] = {}  # decoded in memory, to derive together
    deriver = Deriver()  # one DuckDB connection derives the chunk's small profiles
    # Read once a chunk, not once a file (the profiles table's log: 20-40 ms in a warehouse of 1,000): a profile
    # that another process commits meanwhile is decoded for nothing, and the commit keeps one copy.
    present = frozenset(warehouse.profile_ids())

    def derive_pending() -> None:
        for index, outcome in zip(list(pending), _derive_staged(list(pending.values()), deriver), strict=True):
            if len(outcome) == 2:
                staged[index] = outcome
            else:
                outcomes[index] = outcome
        pending.clear()

    try:
        for index, (path, tags) in enumerate(items):
            attempt = _attempt(path, warehouse, deriver, present, tags=tags, keep_secrets=keep_secrets)
            if isinstance(attempt, _Decoded):
                pending[index] = attempt
                outcomes.append(None)
                if sum(item.nbytes for item in pending.values()) >= IN_MEMORY_BYTES:
                    derive_pending()
                continue
            if len(attempt) == 2:
                staged[index] = attempt
                outcomes.append(None)
                continue
            outcomes.append(attempt)
            if attempt[0] == "disk_full":  # the rest waits for a resume
                outcomes += [("not_done", str(p), "", "") for p, _ in items[index + 1:]]
                break
        if pending:
            derive_pending()
        deriver.close()  # what DuckDB holds after deriving a large profile is not kept through the commit
        if staged:
            if _PARENT is not None and os.getppid() != _PARENT:
                for index, (result, _) in staged.items():
                    outcomes[index] = ("failed", result.path, "", "the ingest that asked for it has stopped: not committed")
                return [o for o in outcomes if o is not None]
            if place:
                for index, (result, item) in staged.items():
                    outcomes[index] = _place(warehouse, result, item)
                return [o for o in outcomes if o is not None]
            try:
                kept = warehouse.commit([item for _, item in staged.values()])
            except OSError as exc:
                for index, (result, _) in staged.items():
                    outcomes[index] = _os_failure(result.path, exc)
            except Exception as exc:  # a bug must not stop the batch: report it against the files
                for index, (result, _) in staged.items():
                    outcomes[index] = ("failed", result.path, "", f"not committed: {type(exc).__name__}: {exc}")
            else:
                for (index, (result, _)), committed in zip(staged.items(), kept, strict=True):
                    outcomes[index] = ("ingested" if committed else "skipped", result.path, result.profile_id,
                                       (result.rows if committed else {}, result.redacted_secrets))
    finally:
        deriver.close()
        for _, item in staged.values():
            item.discard()  # committed ones are gone already; a Ctrl-C discards the rest
        for decoded in pending.values():
            decoded.staged.discard()
    return [o for o in outcomes if o is not None]


def _place(warehouse: Warehouse, result: ProfileIngested, staged: StagedProfile) -> _Outcome:
    """Place a staged profile in the warehouse's storage: its outcome for the committer."""
    try:
        placed = warehouse.place(staged)
    except OSError as exc:
        return _os_failure(result.path, exc)
    except Exception as exc:  # a bug must not stop the batch: report it against the file
        return "failed", result.path, "", f"not placed: {type(exc).__name__}: {exc}"
    return "placed", result.path, result.profile_id, (result.rows, result.redacted_secrets, placed)


def _commit_placed(warehouse: Warehouse, outcomes: Sequence[_Outcome]) -> list[_Outcome]:
    """Commit the placed profiles among ``outcomes`` together (each one whole): the outcomes as committed."""
    placed = [i for i, outcome in enumerate(outcomes) if outcome[0] == "placed"]
    if not placed:
        return list(outcomes)
    done = list(outcomes)
    payloads = [outcomes[i][3] for i in placed]
    try:
        kept = warehouse.commit_placed([p[2] for p in payloads if isinstance(p, tuple)])
    except OSError as exc:
        for i in placed:
            done[i] = _os_failure(outcomes[i][1], exc)
    except Exception as exc:  # a bug must not stop the batch: report it against the files
        for i in placed:
            done[i] = ("failed", outcomes[i][1], "", f"not committed: {type(exc).__name__}: {exc}")
    else:
        for i, payload, committed in zip(placed, payloads, kept, strict=True):
            rows, redacted, _ = payload if isinstance(payload, tuple) else ({}, 0, None)
            done[i] = ("ingested" if committed else "skipped", outcomes[i][1], outcomes[i][2],
                       (rows if committed else {}, redacted))
    return done


def _record(report: IngestReport, outcome: _Outcome) -> None:
    status, name, profile_id, payload = outcome
    if status == "not_done":
        report.not_done.append(name)
        return
    if status in ("failed", "disk_full"):
        report.failed.append((name, str(payload)))
        if status == "disk_full":
            report.stopped = f"{payload} (at {name})"
        return
    rows, redacted = payload if isinstance(payload, tuple) else ({}, 0)
    (report.ingested if status == "ingested" else report.skipped).append(ProfileIngested(name, profile_id, rows, redacted))


@contextmanager
def _contents(path: _Source) -> Iterator[tuple[bytes | mmap.mmap, _Decoder]]:
    """The file's bytes and its decoder.

    The bytes are a private copy, read whole, so a profiler still writing the file (or truncating it) cannot
    pull them from under the decoder; a file that changed while it was read is refused. Only an XSpace larger
    than half the free memory, and a rocprofv3 JSON of ``_STREAMED_MIN_BYTES`` or more, is mapped instead (its
    decoder walks it a chunk at a time and drops the pages it is done with): such a file must not change while
    it ingests. FIFOs, devices and sockets are refused up
    front: reading one could block forever or never end. An object of object storage is read into memory
    (:func:`~xprosql.ingest.remote.read_remote`)."""
    if isinstance(path, RemoteFile):
        remote = read_remote(path)
        yield remote, _decoder(Path(path.path), remote[:4096])
        return
    try:
        descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        raise IngestError(path, f"cannot read: {exc.strerror or exc}") from None
    with open(descriptor, "rb") as file:
        try:
            before = os.fstat(file.fileno())
            if not stat.S_ISREG(before.st_mode):
                raise IngestError(path, "not a regular file (a FIFO, device or socket): refused")
            size = before.st_size
            decoder = _decoder(path, file.read(4096))
            file.seek(0)
            available = xspace_wire.available_memory()
            data: bytes | mmap.mmap
            if size and ((decoder is _decode_xspace and available is not None and size > available // 2)
                         or (decoder is _decode_rocprof and size >= _STREAMED_MIN_BYTES)):
                data = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)
            else:
                if available is not None and size > available:  # fail clearly rather than be killed reading it
                    raise IngestError(path, f"too large to read: {size / 2**30:.1f} GiB, "
                                            f"{available / 2**30:.1f} GiB of memory is free")
                data = file.read(size + 1)
                after = os.fstat(file.fileno())
                if len(data) != size or (after.st_size, after.st_mtime_ns) != (before.st_size, before.st_mtime_ns):
                    raise IngestError(path, "changed while it was read (is a profiler still writing it?): "
                                            "ingest it again once it is complete")
        except OSError as exc:
            raise IngestError(path, f"cannot read: {exc.strerror or exc}") from None
    try:
        yield data, decoder
    finally:
        if isinstance(data, mmap.mmap):
            try:
                data.close()
            except BufferError:  # arrays of a failed decode still point into it: the collector unmaps it
                pass


def _sha256(data: bytes | mmap.mmap) -> str:
    """SHA-256 of a file's bytes; a mapped file a window at a time, each window's pages handed back to the kernel
    once hashed, so that hashing a large file does not hold it in memory."""
    if not isinstance(data, mmap.mmap):
        return hashlib.sha256(data).hexdigest()
    digest = hashlib.sha256()
    with memoryview(data) as view:
        for start in range(0, len(data), _HASH_WINDOW):
            digest.update(view[start:start + _HASH_WINDOW])
            if hasattr(mmap, "MADV_DONTNEED"):
                data.madvise(mmap.MADV_DONTNEED, start, min(_HASH_WINDOW, len(data) - start))
    return digest.hexdigest()


def _ingest_file(path: _Source, warehouse: Warehouse, deriver: Deriver, present: Container[str], *,
                 tags: Mapping[str, str] | None, keep_secrets: bool = False) -> ProfileIngested | _Staged | _Decoded:
    """Decode ``path`` into staged files: a profile kept in memory, its derived tables still to add (the caller
    derives several together: :func:`_derive_staged`); one too large to keep, derived here from its staged files;
    or, alone, the ProfileIngested of a file whose content is among the ``present`` profiles. The caller commits."""
    with _contents(path) as (data, decoder):
        sha256 = _sha256(data)
        xspace_wire.drop_pages(data)
        profile_id = sha256[:16]  # profile_id_of(data), hashed once
        if profile_id in present:
            return ProfileIngested(str(path), profile_id)
        run, host = _run_and_host(path.path if isinstance(path, RemoteFile) else path)
        with warehouse.stage(profile_id) as staged:
            try:
                decoded = DecodedTables()
                redactor = None if keep_secrets else Redactor()
                for table, batch in decoder(data, source=str(path)):
                    if redactor is not None:
                        batch = redactor.batch(table, batch)
                    if table == "profiles":  # the last: every secret of the profile is counted
                        batch = _complete_profile_row(batch, path=path, size=len(data), sha256=sha256, run=run,
                                                      host=host, tags=tags or {},
                                                      redacted=None if redactor is None else redactor.count)
                    staged.write(table, batch)
                    decoded.add(table, batch)
                xspace_wire.drop_pages(data)
                redacted = 0 if redactor is None else redactor.count
                kept = decoded.tables()
                if kept is not None:
                    return _Decoded(path, staged, kept, redacted, decoded.nbytes)
                try:
                    _write_derived(staged, deriver.derive(staged))
                except duckdb.Error as exc:
                    raise _underivable(path, exc) from None
                staged.finish()
            except _CORRUPT as exc:
                raise _corrupt(path, exc) from None
    return ProfileIngested(str(path), profile_id, dict(staged.rows), redacted), staged


def _write_derived(staged: StagedProfile, derived: Iterable[tuple[str, pa.Table]]) -> None:
    for table, rows in derived:
        for batch in rows.to_batches():
            staged.write(table, batch)


def _complete_profile_row(
    batch: pa.RecordBatch, *, path: _Source, size: int, sha256: str, run: str | None, host: str, tags: Mapping[str, str],
    redacted: int | None,
) -> pa.RecordBatch:
    from xprosql._version import __version__

    row = batch.to_pylist()[0]
    row.update(
        source_path=path.uri if isinstance(path, RemoteFile) else str(path.resolve()),
        host=row["host"] or host,
        run=run,
        tags=sorted(tags.items()),
        file_bytes=size,
        content_sha256=sha256,
        ingested_at=dt.datetime.now(dt.timezone.utc),
        xprosql_version=__version__,
        redacted_secrets=redacted,
    )
    return pa.RecordBatch.from_pylist([row], schema=TABLES["profiles"])


def _task(paths: list[str | RemoteFile], into: str, tags: list[dict[str, str]], keep_secrets: bool,
          storage_options: Mapping[str, str] | None = None) -> list[_Outcome]:
    """A chunk of files in a worker process, committed together."""
    return _ingest_chunk([(p if isinstance(p, RemoteFile) else Path(p), t) for p, t in zip(paths, tags, strict=True)],
                         Warehouse(into, storage_options=storage_options), keep_secrets=keep_secrets)


def _cluster_task(items: list[tuple[str | RemoteFile, dict[str, str]]], into: str, keep_secrets: bool,
                  storage_options: Mapping[str, str] | None, commit: bool) -> list[_Outcome]:
    """A chunk of files on a cluster's worker: decoded, derived, staged on its disk, placed in the warehouse's
    storage for this process to commit (or committed by the worker, with ``commit``)."""
    return _ingest_chunk([(p if isinstance(p, RemoteFile) else Path(p), t) for p, t in items],
                         Warehouse(into, storage_options=storage_options), keep_secrets=keep_secrets, place=not commit)


# The process that started this worker (None: not a worker). A worker never commits for a parent that is gone.
_PARENT: int | None = None
_PR_SET_PDEATHSIG = 1


def _worker_init(parent: int, collecting: bool) -> None:
    global _PARENT
    _PARENT = parent
    # The parent decides what Ctrl-C does: it lets running files finish and commit.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # Linux: the kernel kills the worker when its parent dies (kill -9 included), rather than leave it running.
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):  # not Linux: the commit check below still holds
        pass
    if os.getppid() != parent:  # the parent died before the signal was armed
        os._exit(1)
    # A worker runs only xprosql's ingest, whose local files leave few reference cycles; the cyclic collector's passes
    # over the libraries' objects were 0.6 s of 112 files (benchmarks/RESULTS.md, and xprosql.cli, which does the same).
    if not collecting:
        gc.disable()


class _Progress:
    """A one-line progress bar on stderr: done/total, files/s, MB/s, ETA, failures.

    On a terminal it redraws in place; elsewhere (logs, CI) it prints a line every
    ``every`` seconds.
    """

    def __init__(self, total: int, total_bytes: int, *, stream: IO[str] | None = None, every: float = 10.0) -> None:
        self.total, self.total_bytes = total, max(total_bytes, 1)
        self.done = self.done_bytes = self.failed = 0
        self.stream = stream or sys.stderr
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.every = 0.1 if self.tty else every
        self.start = self.last = time.monotonic()
        self._draw(force=True)

    def update(self, nbytes: int, *, failed: bool = False) -> None:
        self.done += 1
        self.done_bytes += nbytes
        self.failed += failed
        self._draw(force=self.done == self.total)

    def _draw(self, *, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self.last < self.every:
            return
        self.last = now
        elapsed = max(now - self.start, 1e-9)
        fraction = self.done_bytes / self.total_bytes
        eta = elapsed * (1 - fraction) / fraction if fraction > 0 else None
        width = 24
        bar = "#" * int(width * self.done / max(self.total, 1))
        text = (
            f"ingest [{bar:<{width}}] {self.done}/{self.total} {self.done / elapsed:.1f} files/s "
            f"{self.done_bytes / elapsed / 1e6:.1f} MB/s ETA {_duration(eta)}"
            + (f" {self.failed} failed" if self.failed else "")
        )
        self.stream.write(("\r" + text + "\x1b[K") if self.tty else text + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    seconds = int(seconds + 0.5)
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m" if seconds >= 3600 else f"{seconds // 60}m{seconds % 60:02d}s"


def ingest(
    sources: str | os.PathLike[str] | Iterable[str | os.PathLike[str]],
    *,
    into: str | os.PathLike[str],
    jobs: int = 1,
    tags: Mapping[str, str] | None = None,
    progress: bool | None = None,
    compact: bool | str = "auto",
    keep_secrets: bool = False,
    cluster: Any = None,
    storage_options: Mapping[str, str] | None = None,
) -> IngestReport:
    """Ingest profile files or directories into the warehouse at ``into``.

    Bad files are reported in ``report.failed`` with the reason, and the good
    ones are ingested; a file already in the warehouse (same content) is
    skipped. Each profile is committed atomically, so an interrupted ingest
    (Ctrl-C raises :class:`IngestInterrupted`; a killed process) is resumed by
    running it again, without loss or duplicates.

    Options:
        jobs: processes decoding files at once (1: in this process).
        tags: tags of every profile, over those of ``xprosql.json`` files (:func:`tags_for`).
        progress: a progress bar on stderr; default: when stderr is a terminal.
        compact: "auto" compacts once enough profiles were committed since the last compaction
            (``AUTO_COMPACT_MIN_PROFILES``); True always; False never.
        keep_secrets: store credentials as the files hold them; by default they are replaced by
            ``<redacted>`` and counted (``profiles.redacted_secrets``; :mod:`xprosql.ingest.secrets`).
        cluster: a ``dask.distributed.Client``: the files are decoded, derived and placed in the
            warehouse's storage by its workers (which must read the sources and write ``into``), and
            committed here in batches; ``jobs`` is then unused.
        storage_options: credentials and endpoint of object storage, for ``into`` and for sources
            that are URIs (``s3://bucket/logdir/``), with delta-rs's keys (``AWS_ENDPOINT_URL``,
            ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_REGION``, ...); default: the
            environment's.

    Example:
        >>> report = ingest(["a.xplane.pb", "logs/"], into="run/")   # doctest: +SKIP
        >>> report.ok                                                # doctest: +SKIP
        True
        >>> ingest("fleet/", into="run/", jobs=8, tags={"job": "bert"}, progress=True)  # doctest: +SKIP
        >>> ingest("s3://bucket/logs/", into="s3://bucket/run", cluster=Client("tcp://scheduler:8786"))  # doctest: +SKIP
    """
    if isinstance(sources, (str, os.PathLike)):
        sources = [sources]
    for key in tags or {}:
        if not key or "=" in key:
            raise ValueError(f"bad tag name {key!r}")
    warehouse = Warehouse(into, storage_options=storage_options)
    created = not warehouse.root.exists()
    if warehouse.is_older_format():
        raise WarehouseError(f"{into}: a warehouse of an older xprosql (hive partitions, not Delta tables); convert it "
                             f"with `xprosql upgrade {into}` first")
    report = IngestReport()
    # Leftovers of killed ingests (staging folders, commits cut short) go first.
    warehouse.collect_garbage()
    work: list[tuple[_Source, dict[str, str]]] = []
    cache: dict[Path, dict[str, str]] = {}
    for source in sources:
        if is_uri(source):
            work += _remote_work(str(source), report, tags=tags, storage_options=storage_options)
            continue
        try:
            paths = find_profiles(source, problems=report.failed)
        except IngestError as exc:
            report.failed.append((exc.path, exc.problem))
            continue
        for path in paths:
            try:
                work.append((path, tags_for(path, root=source, tags=tags, _cache=cache)))
            except IngestError as exc:
                report.failed.append((str(path), f"not ingested: {exc}"))
    sizes: dict[_Source, int] = {}
    for item, _ in work:
        try:
            sizes[item] = item.size if isinstance(item, RemoteFile) else item.stat().st_size
        except OSError:
            sizes[item] = 0
    show = sys.stderr.isatty() if progress is None else progress
    bar = _Progress(len(work), sum(sizes.values())) if show and work else None
    try:
        if cluster is not None and work:
            _ingest_on_cluster(work, warehouse, cluster, report, bar, sizes, keep_secrets=keep_secrets)
        elif jobs <= 1 or len(work) <= 1:
            _ingest_serial(work, warehouse, report, bar, sizes, keep_secrets=keep_secrets)
        else:
            _ingest_parallel(work, warehouse, jobs, report, bar, sizes, keep_secrets=keep_secrets)
    finally:
        if bar is not None:
            bar.close()
        if created:  # nothing committed: no warehouse is left behind
            warehouse.remove_if_empty()
    # Also after a run that found everything present: a resume after a kill during compaction compacts.
    if (report.ingested or report.skipped) and not report.stopped and (compact is True or (compact == "auto" and warehouse.uncompacted_profiles() >= AUTO_COMPACT_MIN_PROFILES)):
        try:
            report.compaction = compact_warehouse(warehouse, wait=compact is True)
        except OSError as exc:  # the profiles are committed; the files it began are gone again
            report.failed.append((str(into), f"compaction not done ({exc.strerror or exc}): the profiles are kept "
                                             "as they were; run `xprosql compact` once there is room"))
    return report


def _remote_work(source: str, report: IngestReport, *, tags: Mapping[str, str] | None,
                 storage_options: Mapping[str, str] | None) -> list[tuple[_Source, dict[str, str]]]:
    """The files below an object-storage prefix, with their tags (its ``xprosql.json`` objects, then ``tags``)."""
    try:
        files, metadata = find_remote_profiles(source, is_profile=_is_profile_file, problems=report.failed,
                                               storage_options=storage_options, metadata_name=METADATA_FILE)
    except IngestError as exc:
        report.failed.append((exc.path, exc.problem))
        return []
    work: list[tuple[_Source, dict[str, str]]] = []
    for file in files:
        try:
            work.append((file, remote_tags(file, root=source, metadata=metadata, tags=tags, parse=_parse_metadata)))
        except IngestError as exc:
            report.failed.append((file.uri, f"not ingested: {exc}"))
    return work


def _ingest_on_cluster(
    work: list[tuple[_Source, dict[str, str]]], warehouse: Warehouse, client: Any, report: IngestReport,
    bar: _Progress | None, sizes: dict[_Source, int], *, keep_secrets: bool,
) -> None:
    """The chunks as tasks of ``client``'s cluster; what the workers placed is committed here as it comes in,
    each profile whole (a worker killed before its chunk returned leaves files no log names: vacuum's)."""
    from xprosql.ingest.cluster import map_chunks, workers

    commit_here = _CLUSTER_COMMITS == "client"
    by_name = {str(path): path for path, _ in work}
    items = [(path if isinstance(path, RemoteFile) else str(path), dict(tags)) for path, tags in work]
    chunks = _chunks(items, workers(client))
    done: set[str] = set()

    def record(outcomes: Sequence[_Outcome]) -> None:
        for outcome in outcomes:
            _record(report, outcome)
            done.add(outcome[1])
            if bar is not None and outcome[0] != "not_done":
                bar.update(sizes.get(by_name.get(outcome[1], Path()), 0),
                           failed=outcome[0] not in ("ingested", "skipped"))

    tasks = map_chunks(client, chunks, _cluster_task, warehouse.location, keep_secrets, warehouse.storage_options,
                       not commit_here)
    try:
        for chunk, outcomes in tasks:
            if isinstance(outcomes, BaseException):
                reason = ("the worker decoding it died (killed by a signal: out of memory, or the file changed under it)"
                          if type(outcomes).__name__ == "KilledWorker" else
                          f"its task failed on the cluster: {type(outcomes).__name__}: {outcomes}")
                record([("failed", str(path), "", reason) for path, _ in chunk])
            else:
                record(_commit_placed(warehouse, outcomes) if commit_here else outcomes)
    except KeyboardInterrupt:
        tasks.close()  # cancels the tasks not done; what was committed stays
        report.not_done = sorted(str(path) for path, _ in work if str(path) not in done)
        raise IngestInterrupted(report) from None
    order = {str(path): i for i, (path, _) in enumerate(work)}
    report.ingested.sort(key=lambda item: order.get(item.path, 0))
    report.skipped.sort(key=lambda item: order.get(item.path, 0))
    report.failed.sort(key=lambda item: order.get(item[0], len(order)))


def _ingest_serial(
    work: list[tuple[_Source, dict[str, str]]], warehouse: Warehouse, report: IngestReport, bar: _Progress | None,
    sizes: dict[_Source, int], *, keep_secrets: bool,
) -> None:
    for start in range(0, len(work), COMMIT_BATCH):
        chunk = work[start:start + COMMIT_BATCH]
        try:
            outcomes = _ingest_chunk(chunk, warehouse, keep_secrets=keep_secrets)
        except KeyboardInterrupt:  # the profiles of the chunk not committed yet were discarded whole
            report.not_done = [str(p) for p, _ in work[start:]]
            raise IngestInterrupted(report) from None
        for (path, _), outcome in zip(chunk, outcomes, strict=True):
            _record(report, outcome)
            if bar is not None and outcome[0] != "not_done":
                bar.update(sizes[path], failed=outcome[0] != "ingested" and outcome[0] != "skipped")
        if any(outcome[0] == "disk_full" for outcome in outcomes):
            report.not_done += [str(p) for p, _ in work[start + len(chunk):]]
            return


def _pool(workers: int, *, collecting: bool) -> cf.ProcessPoolExecutor:
    """Worker processes; ``collecting``: keep their cyclic garbage collector (object storage's asyncio clients leave
    cycles with every request)."""
    # spawn: the parent may hold DuckDB and Polars thread pools, which fork would copy mid-flight.
    return cf.ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"),
                                  initializer=_worker_init, initargs=(os.getpid(), collecting))


def _ingest_parallel(
    work: list[tuple[_Source, dict[str, str]]], warehouse: Warehouse, jobs: int, report: IngestReport,
    bar: _Progress | None, sizes: dict[_Source, int], *, keep_secrets: bool,
) -> None:
    # A worker that dies leaves its pipe broken: writing to it must be an error to handle, not a SIGPIPE that
    # kills this process (the CLI restores SIGPIPE's default so that `| head` ends quietly).
    pipe = getattr(signal, "SIGPIPE", None)
    restore = signal.signal(pipe, signal.SIG_IGN) if pipe is not None and _main_thread() else None
    try:
        _run_pools(work, warehouse, jobs, report, bar, sizes, keep_secrets=keep_secrets)
    finally:
        if restore is not None:
            signal.signal(pipe, restore)  # type: ignore[arg-type]


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def _chunks(paths: list[T], jobs: int) -> list[list[T]]:
    """Files in chunks a worker commits together: up to ``COMMIT_BATCH``, small enough that every worker gets several."""
    size = max(1, min(COMMIT_BATCH, len(paths) // max(4 * jobs, 1)))
    return [paths[i:i + size] for i in range(0, len(paths), size)]


def _run_pools(
    work: list[tuple[_Source, dict[str, str]]], warehouse: Warehouse, jobs: int, report: IngestReport,
    bar: _Progress | None, sizes: dict[_Source, int], *, keep_secrets: bool,
) -> None:
    collecting = is_uri(warehouse.location) or any(isinstance(path, RemoteFile) for path, _ in work)
    executor = _pool(min(jobs, len(work)), collecting=collecting)
    tags_of = dict(work)

    def submit(pool: cf.ProcessPoolExecutor, chunk: list[_Source]) -> cf.Future:
        return pool.submit(_task, [p if isinstance(p, RemoteFile) else str(p) for p in chunk], warehouse.location,
                           [tags_of[p] for p in chunk], keep_secrets, warehouse.storage_options)

    futures = {submit(executor, chunk): chunk for chunk in _chunks([path for path, _ in work], jobs)}
    pending = set(futures)
    orphans: list[_Source] = []  # files of a pool whose worker died: each is tried again alone, to name the culprit

    def collect(done: Iterable[cf.Future], of: Mapping[cf.Future, list[_Source]] = futures) -> bool:
        """Record finished files; False once the disk is full."""
        room = True
        for future in done:
            chunk = of[future]
            try:
                outcomes = future.result()
            except cf.process.BrokenProcessPool:
                orphans.extend(chunk)
                continue
            for path, outcome in zip(chunk, outcomes, strict=True):
                _record(report, outcome)
                room = room and outcome[0] != "disk_full"
                if bar is not None and outcome[0] != "not_done":
                    bar.update(sizes[path], failed=outcome[0] not in ("ingested", "skipped"))
        return room

    def files(chosen: Iterable[cf.Future]) -> list[str]:
        return sorted(str(p) for f in chosen for p in futures[f])

    try:
        while pending:
            done, pending = cf.wait(pending, return_when=cf.FIRST_COMPLETED)
            if not collect(done):  # the files running finish (or fail alike); the others wait for a resume
                report.not_done += files(f for f in pending if f.cancel())
                collect(cf.wait([f for f in pending if not f.cancelled()]).done)
                break
    except KeyboardInterrupt:
        # Stop handing out files; the ones running finish and commit (a second Ctrl-C stops at once).
        not_started = [f for f in pending if f.cancel()]
        report.not_done = files(not_started)
        try:
            running = [f for f in pending if not f.cancelled()]
            collect(cf.wait(running).done)
        except KeyboardInterrupt:
            for process in list(getattr(executor, "_processes", {}).values()):
                process.terminate()
            report.not_done = files(f for f in pending if not f.done() or f.cancelled())
        executor.shutdown(wait=False, cancel_futures=True)
        raise IngestInterrupted(report) from None
    executor.shutdown(wait=True)
    # A worker died (killed: out of memory, a file changed under it): the pool's other files are tried again
    # together, and what breaks that pool too, alone, so that the file that kills a worker is the one named.
    for workers in (jobs, 1):
        retry, orphans = sorted(orphans, key=lambda p: p.path if isinstance(p, RemoteFile) else p), []
        for group in ([retry] if workers > 1 else [[path] for path in retry]):
            if not group:
                continue
            again = _pool(min(workers, len(group)), collecting=collecting)
            tries = {submit(again, chunk): chunk for chunk in _chunks(group, workers)}
            collect(cf.wait(tries).done, tries)
            again.shutdown(wait=True)
    for path in orphans:
        _record(report, ("failed", str(path), "", "the process decoding it died (killed by a signal: out of memory, "
                                                   "or the file changed under it)"))
    order = {str(path): i for i, (path, _) in enumerate(work)}
    report.ingested.sort(key=lambda item: order.get(item.path, 0))
    report.skipped.sort(key=lambda item: order.get(item.path, 0))
    report.failed.sort(key=lambda item: order.get(item[0], len(order)))
