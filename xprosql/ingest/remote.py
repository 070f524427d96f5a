"""Profile files on object storage (``s3://bucket/logdir/``, ``gs://``, ``az://``): found by one listing, read through
fsspec into memory.

``xprosql ingest s3://bucket/logdir/`` walks the prefix with the same rules as a local directory (the batch module's
predicate, asked about paths whose siblings are looked up in the listing), and each file is streamed from the store
into the process's memory, never copied to a local disk: the memory rule is the local one (a file larger than the free
memory is refused; there is no mapping of a remote file). A file whose size or ETag changed between the listing and
the end of its read (a profiler still writing it) is refused, as a local file that changed is. Credentials come from
``storage_options`` (delta-rs's keys, :func:`xprosql.warehouse.filesystem`) or the environment.

This module does not import the batch module (which imports it): the batch module hands it its predicate and its
metadata parser.

Example:
    >>> files, metadata = find_remote_profiles("s3://bucket/logs", is_profile=..., problems=[])   # doctest: +SKIP
    >>> data = read_remote(files[0])                                                             # doctest: +SKIP
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

from xprosql.errors import IngestError
from xprosql.ingest import xspace_wire
from xprosql.warehouse import filesystem, store_error

__all__ = ["RemoteFile", "find_remote_profiles", "read_remote", "remote_tags"]


@dataclass(frozen=True)
class RemoteFile:
    """One profile file on object storage, as its listing showed it. Plain data: a Dask worker reads it itself."""

    uri: str
    size: int
    etag: str | None = None
    storage_options: Mapping[str, str] | None = field(default=None, repr=False, compare=False)

    @property
    def path(self) -> PurePosixPath:
        """``bucket/key`` as a path: what the run and host of a file are read from (``plugins/profile/<run>/``)."""
        return PurePosixPath(self.uri.split("://", 1)[1])

    @property
    def name(self) -> str:
        return self.path.name

    def __str__(self) -> str:
        return self.uri


def _listed_path_type(names: frozenset[str]) -> type[PurePosixPath]:
    """A path type whose ``exists``, ``is_file`` and ``glob`` answer from one listing (``names``: every file's
    ``bucket/key``), so the local directory rules (a sibling ``.xplane.pb``, ...) apply to a prefix unchanged."""
    directories = frozenset(str(PurePosixPath(n).parent) for n in names)

    class Listed(PurePosixPath):
        def exists(self) -> bool:
            return str(self) in names or str(self) in directories

        def is_file(self) -> bool:
            return str(self) in names

        def is_dir(self) -> bool:
            return str(self) in directories

        def glob(self, pattern: str) -> Iterator[PurePosixPath]:
            here = str(self)
            return (type(self)(n) for n in sorted(names)
                    if str(PurePosixPath(n).parent) == here and fnmatch.fnmatchcase(PurePosixPath(n).name, pattern))

    return Listed


def find_remote_profiles(
    uri: str, *, is_profile: Callable[[Any], bool], problems: list[tuple[str, str]],
    storage_options: Mapping[str, str] | None = None, metadata_name: str = "xprosql.json",
) -> tuple[list[RemoteFile], dict[str, str]]:
    """The profile files below ``uri`` (or the one object it names), sorted, and the text of every metadata file
    (``metadata_name``) among them by its directory's ``bucket/key``.

    ``is_profile`` is the local rule, asked about each listed file as a path (siblings answered from the listing).
    Raises :class:`IngestError` naming ``uri`` when it cannot be listed or holds no profile.
    """
    fs = filesystem(uri, storage_options)
    scheme = uri.split("://", 1)[0]
    root = uri.split("://", 1)[1].rstrip("/")
    try:
        listing: dict[str, dict[str, Any]] = fs.find(root, detail=True)
    except (OSError, ValueError) as exc:
        raise IngestError(uri, f"cannot list: {exc}") from None
    except Exception as exc:  # no credentials found, ...: said with where they come from
        if (reason := store_error(uri, exc)) is None:
            raise
        raise IngestError(uri, reason.removeprefix(f"{uri}: ")) from None
    if not listing:
        raise IngestError(uri, "no such file or prefix")
    files = {name.rstrip("/"): info for name, info in listing.items() if info.get("type", "file") == "file"}
    single = root in files  # the URI names one object: read whatever its name
    listed = _listed_path_type(frozenset(files))
    found, metadata = [], {}
    for name in sorted(files):
        info = files[name]
        if PurePosixPath(name).name == metadata_name and not single:
            try:
                metadata[str(PurePosixPath(name).parent)] = bytes(fs.cat_file(name)).decode()
            except (OSError, UnicodeDecodeError) as exc:
                problems.append((f"{scheme}://{name}", f"unreadable metadata file: {exc}"))
            continue
        if single or is_profile(listed(name)):
            etag = info.get("ETag") or info.get("etag") or info.get("md5Hash")
            found.append(RemoteFile(f"{scheme}://{name}", int(info.get("size") or 0), str(etag) if etag else None,
                                    storage_options))
    if not found:
        raise IngestError(uri, "no profiles found (no *.xplane.pb, *.json or *.json.gz objects below this prefix)")
    return found, metadata


def remote_tags(file: RemoteFile, *, root: str, metadata: Mapping[str, str], tags: Mapping[str, str] | None,
                parse: Callable[[str, str], dict[str, str]]) -> dict[str, str]:
    """Tags of a remote profile: the metadata files of its prefix and each prefix above it up to ``root`` (the
    deeper winning; ``parse(name, text)`` reads one), then ``tags`` over them: :func:`xprosql.ingest.tags_for`'s rule."""
    top = PurePosixPath(root.split("://", 1)[1].rstrip("/"))
    if top == file.path:  # the file named itself: its own prefix's metadata applies, as to a local file
        top = top.parent
    scheme = file.uri.split("://", 1)[0]
    directories = [d for d in [file.path.parent, *file.path.parent.parents] if d == top or top in d.parents]
    merged: dict[str, str] = {}
    for directory in reversed(directories):
        text = metadata.get(str(directory))
        if text is not None:
            merged.update(parse(f"{scheme}://{directory}/xprosql.json", text))
    merged.update(tags or {})
    return dict(sorted(merged.items()))


def read_remote(file: RemoteFile) -> bytes:
    """The bytes of ``file``, streamed from the store into memory. Refused (:class:`IngestError` naming it) when it
    is larger than the free memory, or when it changed since it was listed or while it was read."""
    available = xspace_wire.available_memory()  # looked up here, not bound at import: a patch of it reaches here
    if available is not None and file.size > available:  # fail clearly rather than be killed reading it
        raise IngestError(file.uri, f"too large to read: {file.size / 2**30:.1f} GiB, "
                                    f"{available / 2**30:.1f} GiB of memory is free")
    fs = filesystem(file.uri, file.storage_options)
    try:
        with fs.open(file.uri, "rb", cache_type="none") as handle:
            data = bytes(handle.read(file.size + 1))
        after = fs.info(file.uri)
    except OSError as exc:
        raise IngestError(file.uri, f"cannot read: {exc.strerror or exc}") from None
    etag = after.get("ETag") or after.get("etag") or after.get("md5Hash")
    if len(data) != file.size or int(after.get("size") or 0) != file.size or (file.etag and etag and str(etag) != file.etag):
        raise IngestError(file.uri, "changed while it was read (is a profiler still writing it?): ingest it again "
                                    "once it is complete")
    return data
