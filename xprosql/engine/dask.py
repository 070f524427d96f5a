"""Dask as an engine backend: the same analyses, per share of profiles, on a cluster.

``xprosql.load(DIR, cluster=client)`` with a ``dask.distributed.Client`` gives the run's
:class:`~xprosql.engine.Engine` this backend: each analysis (the includes of a fleet analysis) runs
as one task per share of whole profiles (contiguous in ``profile_id``), each task opening views over its
share's files (:func:`xprosql.engine.connection.run_on_share`); the engine combines the parts.

Tasks get file paths, not data: the workers must see the warehouse at the same paths (a shared file
system). Vacuum keeps the files of older versions for ``VACUUM_RETENTION_HOURS``
(:mod:`xprosql.warehouse`).

Example:
    >>> from dask.distributed import Client, LocalCluster                     # doctest: +SKIP
    >>> run = xprosql.load("run/", cluster=Client(LocalCluster(n_workers=4)))  # doctest: +SKIP
    >>> run.roofline().pl().equals(xprosql.load("run/").roofline().pl())     # doctest: +SKIP
    True
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from xprosql.engine.connection import run_on_share
from xprosql.warehouse import Snapshot

__all__ = ["SHARES_PER_WORKER", "DaskBackend"]

# More shares than workers evens out profiles of different sizes.
SHARES_PER_WORKER = 2


class DaskBackend:
    """Runs every share as a task on ``client`` (a ``dask.distributed.Client``)."""

    def __init__(self, client: Any) -> None:
        self.client = client

    def shares(self, snapshot: Snapshot, sql: str, events: int) -> list[Snapshot]:
        workers = max(len(self.client.scheduler_info().get("workers", {})), 1)
        return snapshot.shares(workers * SHARES_PER_WORKER) or [snapshot]

    def run(self, shares: list[Snapshot], sql: str, params: Mapping[str, Any]) -> list[pa.Table]:
        # The query rides in the task's function, not as keyword arguments of map: with the bottleneck queries'
        # text as `sql=`, the scheduler failed to place the tasks (an AssertionError on a task keyed 'sql', and a
        # hang), while a partial runs.
        task = functools.partial(run_on_share, sql=sql, params=dict(params) or None)
        futures = self.client.map(task, shares, pure=False)
        return list(self.client.gather(futures))
