"""A read-only handle on a warehouse: DuckDB views over its Parquet files.

Example:
    >>> import xprosql
    >>> run = xprosql.load("run/")                                   # doctest: +SKIP
    >>> run.sql("SELECT name, sum(dur_ps) FROM events GROUP BY 1 ORDER BY 2 DESC LIMIT 3").pl()  # doctest: +SKIP
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import duckdb
import polars as pl
import pyarrow as pa

from xprosql._duckdb import connect
from xprosql.errors import WarehouseError
from xprosql.models.tables import INGEST_DERIVED_TABLES, PARTITION_COLUMN, TABLES
from xprosql.queries.analyses import bind_parameters
from xprosql.queries.functions import register_functions
from xprosql.warehouse import Warehouse

__all__ = ["Run", "Result", "load"]

Params = Mapping[str, Any] | Sequence[Any] | None


class Result:
    """A query result, fetched once, handed out as Arrow, Polars or pandas.

    Example:
        >>> r = run.sql("SELECT count(*) AS n FROM events")         # doctest: +SKIP
        >>> r.pl()["n"][0], r.arrow().num_rows                       # doctest: +SKIP
    """

    def __init__(self, table: pa.Table) -> None:
        self._table = table

    def arrow(self) -> pa.Table:
        return self._table

    def pl(self) -> pl.DataFrame:
        return pl.from_arrow(self._table)  # type: ignore[return-value]

    def df(self) -> Any:
        """pandas DataFrame (pandas must be installed)."""
        return self._table.to_pandas()

    def rows(self) -> list[tuple]:
        columns = [c.to_pylist() for c in self._table.columns]
        return list(zip(*columns))

    @property
    def columns(self) -> list[str]:
        return self._table.column_names

    def __len__(self) -> int:
        return self._table.num_rows

    def __repr__(self) -> str:
        with pl.Config(tbl_rows=20, fmt_str_lengths=60, tbl_width_chars=160):
            return repr(self.pl())


def _sql_list(paths: list[str]) -> str:
    return "[" + ", ".join("'" + p.replace("'", "''") + "'" for p in paths) + "]"


class Run:
    """Snapshot of a warehouse taken at open: profiles committed later are not seen.

    Use :func:`load` to make one.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        profiles: Sequence[str] | None = None,
        where: str | None = None,
        cluster: Any = None,
    ) -> None:
        self.path = Path(path)
        self._warehouse = Warehouse(self.path)
        self._warehouse.check_readable()
        # The lease keeps this snapshot's files on disk through later compactions, until close().
        self._snapshot, self._lease = self._warehouse.snapshot(profiles=profiles)
        if where is not None:
            from xprosql.fleet import profiles_where

            self._snapshot = self._snapshot.restrict(profiles_where(self._snapshot, where))
        self._cluster = cluster  # a dask.distributed Client: per-profile analyses run on it
        for derived in INGEST_DERIVED_TABLES:
            stale = self._snapshot.profiles_without(derived)
            if stale:
                if self._lease is not None:
                    self._lease.release()
                raise WarehouseError(
                    f"{self.path}: {len(stale)} profiles (e.g. {stale[0]}) were ingested by an older xprosql, "
                    f"without the {derived} table the analyses read; ingest their files into a new warehouse"
                )
        committed = list(self._snapshot.profile_ids)
        self.profile_ids: list[str] = committed
        self._files = {table: self._snapshot.files(table) for table in TABLES}
        self._con = connect()
        for table in TABLES:
            self._con.execute(f"CREATE VIEW {table} AS {self._scan_sql(table)}")
        register_functions(self._con)  # xprosql_memory_access(), hardware_models: used by the analyses

    def _scan_sql(self, table: str) -> str:
        # An empty relation with the table's columns: the whole view when there is no file yet,
        # and what fills columns that files written by an older xprosql lack (as NULL).
        empty = TABLES[table].empty_table().add_column(0, PARTITION_COLUMN, pa.array([], pa.string()))
        self._con.register(f"_columns_{table}", empty)
        scan = self._snapshot.scan_sql(table)
        if scan is None:
            return f"SELECT * FROM _columns_{table}"
        return f"SELECT * FROM ({scan}) UNION ALL BY NAME SELECT * FROM _columns_{table}"

    @property
    def tables(self) -> list[str]:
        return list(TABLES)

    @property
    def connection(self) -> duckdb.DuckDBPyConnection:
        """The DuckDB connection holding the views, for what :meth:`sql` does not cover."""
        return self._con

    def sql(self, query: str, params: Params = None) -> Result:
        """Run DuckDB SQL over every table. ``params`` binds ``$name`` or ``?`` parameters.

        Example:
            >>> run.sql("SELECT * FROM events WHERE dur_ps > $min", {"min": 10**9}).pl()  # doctest: +SKIP
        """
        relation = self._con.sql(query, params=params) if params else self._con.sql(query)
        if relation is None:
            return Result(pa.table({}))
        return Result(relation.to_arrow_table())

    def analysis(self, name: str, **params: Any) -> Result:
        """Run a packaged analysis (a file of ``sql/``) by name; parameters left out take their declared defaults."""
        # The same SQL per share of profiles (on the cluster, else here one share at a time), combined.
        from xprosql.dask import distributed_analysis

        return distributed_analysis(self, name, bind_parameters(name, params) or None)

    def roofline(self, *, profiles: Sequence[str] | None = None, top: int | None = None, **peaks: Any) -> pl.DataFrame:
        """Roofline of every op, program and profile (``sql/roofline.sql``) as Polars.

        ``peaks``: ``peak_flops_per_s``, ``peak_hbm_bytes_per_s`` (override every
        device; the CPU roof) and ``peak_source``.

        Example:
            >>> run.roofline(top=10).filter(pl.col("row_kind") == "op").select("op", "bound_by")  # doctest: +SKIP
        """
        from xprosql.queries.roofline import roofline

        return roofline(self, profiles=profiles, top=top, **peaks)

    def memory_bound(self, *, profiles: Sequence[str] | None = None, top: int | None = None, **params: Any) -> pl.DataFrame:
        """Each op compute- or memory-bound, with its share of device time; per profile the shares (``sql/memory_bound.sql``)."""
        from xprosql.queries.roofline import memory_bound

        return memory_bound(self, profiles=profiles, top=top, **params)

    def utilization(self, *, profiles: Sequence[str] | None = None, level: str = "summary") -> pl.DataFrame:
        """TPU MXU, vector, XLU, HBM and DMA utilization measured by hardware counters (``sql/utilization.sql``).

        ``level``: ``summary`` (per chip and kernel), ``metrics`` (every XProf
        metric) or ``samples`` (per counter sample); see :mod:`xprosql.queries.utilization`.

        Example:
            >>> run.utilization().select("device", "kernel", "mxu_utilization", "hbm_utilization")  # doctest: +SKIP
        """
        from xprosql.queries.utilization import utilization

        return utilization(self, profiles=profiles, level=level)  # type: ignore[arg-type]

    # Async ops, steps, bottlenecks and the HTA analyses: xprosql/queries/bottlenecks.py, hta.py.
    def async_ops(self, *, profiles: Sequence[str] | None = None, kinds: Sequence[str] | None = None, **params: Any) -> pl.DataFrame:
        """One row per async op (DMA, host offload, collective): window, bytes, bandwidth, coverage (``sql/async_ops.sql``).

        Example:
            >>> run.async_ops(kinds=["host_offload"]).select("start_op", "bandwidth_bytes_per_s", "status")  # doctest: +SKIP
        """
        from xprosql.queries import bottlenecks

        return bottlenecks.async_ops(self, profiles=profiles, kinds=kinds, **params)

    def async_summary(self, *, profiles: Sequence[str] | None = None, **params: Any) -> pl.DataFrame:
        """Per profile and async kind: exposed time and bandwidth against the peak (``sql/async_summary.sql``)."""
        from xprosql.queries import bottlenecks

        return bottlenecks.async_summary(self, profiles=profiles, **params)

    def steps(self, *, profiles: Sequence[str] | None = None) -> pl.DataFrame:
        """Steps per device with wall, busy and idle time (``sql/steps.sql``)."""
        from xprosql.queries import bottlenecks

        return bottlenecks.steps(self, profiles=profiles)

    def bottlenecks(self, *, profiles: Sequence[str] | None = None, scope: str | None = None, **params: Any) -> pl.DataFrame:
        """Per step and per profile: time breakdown summing to step time and the primary bottleneck (``sql/bottlenecks.sql``).

        Example:
            >>> run.bottlenecks(scope="profile").sort("idle_share", descending=True)  # doctest: +SKIP
        """
        from xprosql.queries import bottlenecks

        return bottlenecks.bottlenecks(self, profiles=profiles, scope=scope, **params)

    def temporal_breakdown(self, *, profiles: Sequence[str] | None = None, **params: Any) -> pl.DataFrame:
        """HTA's temporal breakdown per GPU: idle, compute, non-compute (``sql/hta_temporal_breakdown.sql``)."""
        from xprosql.queries import hta

        return hta.temporal_breakdown(self, profiles=profiles, **params)

    def idle_time(self, *, profiles: Sequence[str] | None = None, **params: Any) -> pl.DataFrame:
        """HTA's idle time per stream: host_wait, kernel_wait, other (``sql/hta_idle_time.sql``)."""
        from xprosql.queries import hta

        return hta.idle_time(self, profiles=profiles, **params)

    def comm_comp_overlap(self, *, profiles: Sequence[str] | None = None, **params: Any) -> pl.DataFrame:
        """HTA's communication / computation overlap per GPU (``sql/hta_comm_comp_overlap.sql``)."""
        from xprosql.queries import hta

        return hta.comm_comp_overlap(self, profiles=profiles, **params)

    def launch_stats(self, *, profiles: Sequence[str] | None = None, **params: Any) -> pl.DataFrame:
        """HTA's CUDA kernel launch statistics, one row per launched op (``sql/hta_launch_stats.sql``)."""
        from xprosql.queries import hta

        return hta.launch_stats(self, profiles=profiles, **params)

    cuda_kernel_launch_stats = launch_stats  # HTA's name for it

    def queue_length(self, *, profiles: Sequence[str] | None = None, summary: bool = False, **params: Any) -> pl.DataFrame:
        """HTA's launch queue length per stream over time, or per stream summarised (``summary=True``)."""
        from xprosql.queries import hta

        return hta.queue_length(self, profiles=profiles, summary=summary, **params)

    def table(self, name: str) -> pl.LazyFrame:
        """A table as a Polars LazyFrame over the same files (``profile_id`` included)."""
        if name not in TABLES:
            raise KeyError(f"unknown table {name!r}; tables are {list(TABLES)}")
        scan = self._snapshot.scan_polars(name)
        if scan is None:
            schema = {PARTITION_COLUMN: pl.String, **pl.Schema(pl.from_arrow(TABLES[name].empty_table()).schema)}
            return pl.LazyFrame(schema=schema)
        return scan

    @property
    def profiles(self) -> pl.DataFrame:
        """The ``profiles`` table, one row per profile."""
        return self.sql("SELECT * FROM profiles ORDER BY source_path").pl()

    def row_counts(self) -> dict[str, int]:
        return {t: self._con.execute(f"SELECT count(*) FROM {t}").fetchall()[0][0] for t in TABLES}

    def close(self) -> None:
        self._con.close()
        if self._lease is not None:
            self._lease.release()

    def compare(self, *, baseline: str, candidate: str, by: str = "op", **params: Any) -> pl.DataFrame:
        """Per op (``by="op"``) or category (``by="category"``): time share, FLOP rate and bandwidth
        in two cohorts of profiles (SQL predicates on ``profiles``) and the difference, by impact.

        Example:
            >>> run.compare(baseline="tags['commit'] = 'a1'", candidate="tags['commit'] = 'b2'").head(5)  # doctest: +SKIP
        """
        from xprosql.fleet import compare

        return compare(self, baseline=baseline, candidate=candidate, by=by, **params)

    def regressions(self, *, tag: str = "job", **params: Any) -> pl.DataFrame:
        """Step-time and per-op changes over time within each value of ``tag`` (``xprosql.fleet.regressions``).

        Example:
            >>> run.regressions(tag="job").select("job", "metric", "first_profile_id", "change")  # doctest: +SKIP
        """
        from xprosql.fleet import regressions

        return regressions(self, tag=tag, **params)

    def worst(
        self, *, by: str = "step_time_ps", n: int = 10, analysis: str | None = None, scope: str | None = None, **params: Any
    ) -> pl.DataFrame:
        """The ``n`` worst profiles (or steps, ``by="step"``) by a column (``xprosql.fleet.worst``).

        Example:
            >>> run.worst(by="step", n=5)                              # doctest: +SKIP
        """
        from xprosql.fleet import worst

        return worst(self, by=by, n=n, analysis=analysis, scope=scope, **params)

    def __enter__(self) -> Run:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Run({str(self.path)!r}, {len(self.profile_ids)} profiles)"


def load(
    path: str | os.PathLike[str],
    *,
    profiles: Sequence[str] | None = None,
    where: str | None = None,
    cluster: Any = None,
) -> Run:
    """Open a warehouse read-only. Cheap: lists files, copies no data.

    ``where`` keeps the profiles matching a SQL predicate on ``profiles`` (tags,
    times, hosts): only their files are read. ``cluster`` (a
    ``dask.distributed.Client``) runs per-profile analyses on the cluster.

    Example:
        >>> run = load("run/")                                       # doctest: +SKIP
        >>> run.sql("SELECT count(*) FROM events").rows()            # doctest: +SKIP
        [(37443,)]
    """
    return Run(path, profiles=profiles, where=where, cluster=cluster)
