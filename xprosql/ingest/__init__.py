"""Ingest profiler output into a warehouse.

One module per source format turns a file into Arrow record batches
(:mod:`xprosql.ingest.xspace`, :mod:`xprosql.ingest.hlo`); this module finds
the files, names the profiles and hands the batches to the warehouse writer.

Example:
    >>> report = ingest("logs/", into="run/")                 # doctest: +SKIP
    >>> print(report)                                          # doctest: +SKIP
    1 ingested, 0 already present, 0 failed
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from xprosql.errors import IngestError
from xprosql.ingest.kineto import decode_kineto
from xprosql.ingest.xspace import decode_xspace
from xprosql.models.tables import TABLES
from xprosql.warehouse import Warehouse

__all__ = ["ingest", "IngestReport", "ProfileIngested", "find_profiles", "profile_id_of"]

XSPACE_SUFFIX = ".xplane.pb"
JSON_SUFFIXES = (".json", ".json.gz")
# XProf writes <host>.trace.json.gz beside <host>.xplane.pb: a lossy view of the same profile.
_DERIVED_TRACE_SUFFIX = ".trace.json.gz"


@dataclass(frozen=True)
class ProfileIngested:
    """One source file and what became of it."""

    path: str
    profile_id: str
    rows: dict[str, int] = field(default_factory=dict)


@dataclass
class IngestReport:
    """What an ingest did: profiles written, skipped as already present, and failures with reasons."""

    ingested: list[ProfileIngested] = field(default_factory=list)
    skipped: list[ProfileIngested] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)

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
        return "\n".join(lines)


def profile_id_of(data: bytes) -> str:
    """Stable profile id: the first 16 hex digits of the content's SHA-256."""
    return hashlib.sha256(data).hexdigest()[:16]


def _is_profile_file(path: Path) -> bool:
    name = path.name
    if name.endswith(XSPACE_SUFFIX):
        return True
    if not name.endswith(JSON_SUFFIXES):
        return False
    if name.endswith(_DERIVED_TRACE_SUFFIX):
        sibling = path.with_name(name[: -len(_DERIVED_TRACE_SUFFIX)] + XSPACE_SUFFIX)
        return not sibling.exists()
    return True


def find_profiles(source: str | os.PathLike[str]) -> list[Path]:
    """Profile files under ``source``: the file itself, or every profile below a directory.

    A directory yields its ``*.xplane.pb`` (XSpace) and ``*.json`` / ``*.json.gz``
    (Kineto) files, except the ``<host>.trace.json.gz`` XProf derives from a
    ``<host>.xplane.pb`` beside it.
    """
    path = Path(source)
    if path.is_dir():
        found = sorted(p for p in path.rglob("*") if p.is_file() and _is_profile_file(p))
        if not found:
            raise IngestError(path, "no profiles found (no *.xplane.pb, *.json or *.json.gz files below this directory)")
        return found
    if not path.exists():
        raise IngestError(path, "no such file or directory")
    return [path]


def _decoder(path: Path, data: bytes):
    """XSpace by name; JSON (plain or gzipped) by name or content; else XSpace, whose errors say what it is."""
    if path.name.endswith(XSPACE_SUFFIX):
        return decode_xspace
    if path.name.endswith(JSON_SUFFIXES) or data[:2] == b"\x1f\x8b" or data.lstrip()[:1] in (b"{", b"["):
        return decode_kineto
    return decode_xspace


def _run_and_host(path: Path) -> tuple[str | None, str]:
    """jax.profiler.trace writes <logdir>/plugins/profile/<run>/<host>.xplane.pb."""
    host = path.name
    for suffix in (XSPACE_SUFFIX, *JSON_SUFFIXES[::-1]):
        if host.endswith(suffix):
            host = host[: -len(suffix)]
            break
    parts = path.parts
    run = parts[-2] if len(parts) >= 4 and parts[-4:-2] == ("plugins", "profile") else None
    return run, host


def _ingest_one(path: Path, warehouse: Warehouse, report: IngestReport) -> None:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise IngestError(path, f"cannot read: {exc.strerror or exc}") from None
    profile_id = profile_id_of(data)
    if warehouse.has_profile(profile_id):
        report.skipped.append(ProfileIngested(str(path), profile_id))
        return
    run, host = _run_and_host(path)
    with warehouse.stage(profile_id) as staged:
        try:
            for table, batch in _decoder(path, data)(data, source=str(path)):
                if table == "profiles":
                    batch = _complete_profile_row(batch, path=path, data=data, run=run, host=host)
                staged.write(table, batch)
        except (OverflowError, ValueError, TypeError, KeyError, pa.ArrowException) as exc:
            # A file that parses but holds impossible values (times past int64 ps, ...).
            raise IngestError(path, f"corrupt content: {type(exc).__name__}: {exc}") from None
        written = warehouse.commit(staged)
    result = ProfileIngested(str(path), profile_id, {t: n for t, n in staged.rows.items()})
    (report.ingested if written else report.skipped).append(result)


def _complete_profile_row(batch: pa.RecordBatch, *, path: Path, data: bytes, run: str | None, host: str) -> pa.RecordBatch:
    from xprosql import __version__

    row = batch.to_pylist()[0]
    row.update(
        source_path=str(path.resolve()),
        host=row["host"] or host,
        run=run,
        file_bytes=len(data),
        content_sha256=hashlib.sha256(data).hexdigest(),
        ingested_at=dt.datetime.now(dt.timezone.utc),
        xprosql_version=__version__,
    )
    return pa.RecordBatch.from_pylist([row], schema=TABLES["profiles"])


def ingest(
    sources: str | os.PathLike[str] | Iterable[str | os.PathLike[str]],
    *,
    into: str | os.PathLike[str],
) -> IngestReport:
    """Ingest profile files or directories into the warehouse at ``into``.

    Bad files are reported in ``report.failed`` with the reason, and the good
    ones are ingested; a file already in the warehouse (same content) is
    skipped. Each profile is committed atomically.

    Example:
        >>> report = ingest(["a.xplane.pb", "logs/"], into="run/")   # doctest: +SKIP
        >>> report.ok                                                # doctest: +SKIP
        True
    """
    if isinstance(sources, (str, os.PathLike)):
        sources = [sources]
    warehouse = Warehouse(into)
    report = IngestReport()
    for source in sources:
        try:
            paths = find_profiles(source)
        except IngestError as exc:
            report.failed.append((exc.path, exc.problem))
            continue
        for path in paths:
            try:
                _ingest_one(path, warehouse, report)
            except IngestError as exc:
                report.failed.append((exc.path, exc.problem))
    return report
