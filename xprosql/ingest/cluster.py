"""Dask as the ingest's process pool: chunks of files run as tasks on a ``dask.distributed`` cluster.

``xprosql.ingest(..., cluster=client)`` (``xprosql ingest --cluster ADDRESS``) hands each chunk of files to
:func:`map_chunks`, which submits one task per chunk and yields each chunk's results as its task ends. A worker
that dies takes its task with it: the scheduler runs it again on another worker (``distributed``'s
``allowed-failures``, 3 by default); a chunk that still kills its workers is tried again one file per task, so
the file that kills a worker is the one named. The task is the batch module's (decode, derive, stage on the
worker's local disk, place the files in the warehouse's storage); the committing stays with the caller.

Tasks get paths, not bytes: the workers must read the inputs (object storage, or a file system mounted at the
same paths) and write the warehouse's storage.

Example:
    >>> for chunk, results in map_chunks(client, [["a.xplane.pb"]], task, "s3://bucket/run"):  # doctest: +SKIP
    ...     print(chunk, results)
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Generator, Sequence
from typing import Any, TypeVar

__all__ = ["map_chunks", "workers"]

T = TypeVar("T")
R = TypeVar("R")


def workers(client: Any) -> int:
    """Threads the cluster runs tasks on (at least 1)."""
    info = client.scheduler_info().get("workers", {})
    return max(sum(int(w.get("nthreads", 1)) for w in info.values()), 1)


def map_chunks(client: Any, chunks: Sequence[list[T]], task: Callable[..., list[R]], *args: Any,
               ) -> Generator[tuple[list[T], list[R] | BaseException], None, None]:
    """Run ``task(chunk, *args)`` for every chunk on ``client``'s cluster; yield (chunk, its results) as tasks end,
    or (chunk, the exception) for a task that raised one.

    A chunk whose task kept killing workers (``KilledWorker``) is run again one item per task; an item whose own
    task still does yields (``[item]``, that ``KilledWorker``). Stopping the iteration (Ctrl-C, an error in the
    caller) cancels the tasks not done yet.
    """
    from distributed import KilledWorker, as_completed

    # The arguments ride in the task's function (as for the queries: xprosql.engine.dask), not as keywords of submit.
    run = functools.partial(_call, task, args)
    futures = {client.submit(run, chunk, pure=False): chunk for chunk in chunks}
    alone: list[T] = []
    try:
        for future in as_completed(list(futures)):
            chunk = futures[future]
            try:
                results = future.result()
            except KilledWorker:  # each file again by itself, so that the one that kills a worker is named
                alone.extend(chunk)
                continue
            except Exception as exc:  # the task raised: the same would happen again
                yield chunk, exc
                continue
            yield chunk, results
        retried = {client.submit(run, [item], pure=False): [item] for item in alone}
        futures.update(retried)
        for future in as_completed(list(retried)):
            try:
                results = future.result()
            except Exception as exc:
                yield retried[future], exc
                continue
            yield retried[future], results
    finally:
        client.cancel([f for f in futures if not f.done()])


def _call(task: Callable[..., list[R]], args: tuple[Any, ...], chunk: list[T]) -> list[R]:
    return task(chunk, *args)
