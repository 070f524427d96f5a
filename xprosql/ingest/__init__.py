"""Ingest profiler output into a warehouse.

One module per source format turns a file into Arrow record batches (:mod:`xprosql.ingest.xspace`,
:mod:`xprosql.ingest.kineto`, :mod:`xprosql.ingest.rocprof`, :mod:`xprosql.ingest.hlo`,
:mod:`xprosql.ingest.counters`);
:mod:`xprosql.ingest.batch` finds the files, names the profiles and commits them. This package's face
hands on the batch module's public names.

Example:
    >>> import xprosql
    >>> report = xprosql.ingest("logs/", into="run/")          # doctest: +SKIP
"""

from __future__ import annotations

from xprosql.ingest.batch import (
    METADATA_FILE,
    IngestInterrupted,
    IngestReport,
    ProfileIngested,
    find_profiles,
    ingest,
    profile_id_of,
    read_metadata_file,
    tags_for,
)
from xprosql.ingest.compaction import compact

__all__ = [
    "METADATA_FILE",
    "IngestInterrupted",
    "IngestReport",
    "ProfileIngested",
    "compact",
    "find_profiles",
    "ingest",
    "profile_id_of",
    "read_metadata_file",
    "tags_for",
]
