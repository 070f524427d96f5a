"""Compaction with what it stores: the per-profile tables' rows and the job tables' replays.

:meth:`xprosql.warehouse.Warehouse.compact` packs files and writes what its callbacks compute; storage never runs
analyses itself. This module hands it both callbacks: ``derive_stored_tables`` (the SQL modules of
``PACK_DERIVED_TABLES``, per profile) and ``derive_job_tables`` (the job critical path and what-if of
``JOB_DERIVED_TABLES``, per job: they depend on all of a job's members, so they are kept per job and computed
again when a member arrives). ``xprosql compact``, ``xprosql.compact`` and ingest's automatic compaction use it.

Example:
    >>> print(xprosql.compact("run/"))                                     # doctest: +SKIP
    version 131: 17998 files of 1000 profiles packed into 306 files, 101234567 rows
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from xprosql.warehouse import PACK_TARGET_ROWS, VACUUM_RETENTION_HOURS, CompactReport, Warehouse

__all__ = ["compact", "compact_warehouse"]


def compact(path: str | os.PathLike[str], *, target_rows: int = PACK_TARGET_ROWS, min_profiles: int = 2,
            wait: bool = True, retention_hours: float = VACUUM_RETENTION_HOURS,
            storage_options: Mapping[str, str] | None = None) -> CompactReport | None:
    """Compact the warehouse at ``path`` (:meth:`xprosql.warehouse.Warehouse.compact`: Delta's optimize, ordered
    by profile, then vacuum), storing the rows fleet queries read instead of events: ``PACK_DERIVED_TABLES`` for
    the profiles compacted the first time, ``JOB_DERIVED_TABLES`` for the jobs not stored yet.

    ``target_rows``: rows of a packed file; ``min_profiles``: fewer new profiles than this (and nothing else to
    do) leave the warehouse as it is; ``wait``: wait for a running ingest or compaction (else return None);
    ``retention_hours``: how long a file no latest version references is kept for readers of older versions
    before vacuum deletes it. ``storage_options``: credentials and endpoint of an object-storage warehouse
    (``s3://...``; default: the environment's).

    Example:
        >>> print(xprosql.compact("run/"))                                     # doctest: +SKIP
    """
    return compact_warehouse(Warehouse(path, storage_options=storage_options), target_rows=target_rows,
                             min_profiles=min_profiles, wait=wait, retention_hours=retention_hours)


def compact_warehouse(warehouse: Warehouse, *, target_rows: int = PACK_TARGET_ROWS, min_profiles: int = 2,
                      wait: bool = True, retention_hours: float = VACUUM_RETENTION_HOURS) -> CompactReport | None:
    """:func:`compact` on an open :class:`~xprosql.warehouse.Warehouse`."""
    from xprosql.engine import derive_stored_tables  # the analyses' imports only when compacting
    from xprosql.queries.job_critical_path import derive_job_tables

    return warehouse.compact(target_rows=target_rows, min_profiles=min_profiles, wait=wait, derive=derive_stored_tables,
                             derive_jobs=derive_job_tables, retention_hours=retention_hours)
