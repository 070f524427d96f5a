"""A read-only handle on a warehouse: SQL and every analysis over one snapshot of it.

:class:`Run` is the facade: it opens a snapshot (a version of the warehouse's Delta tables; an earlier
one with ``version=`` or ``as_of=``), hands it to an :class:`~xprosql.engine.Engine`, and gives each analysis of
:mod:`xprosql.queries` a method with explicit options. Every method returns a lazy
:class:`~xprosql.engine.Result`.

Example:
    >>> import xprosql
    >>> run = xprosql.load("run/")                                   # doctest: +SKIP
    >>> run.sql("SELECT name, sum(dur_ps) FROM events GROUP BY 1 ORDER BY 2 DESC LIMIT 3").pl()  # doctest: +SKIP
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import duckdb

from xprosql.engine import Engine, Result
from xprosql.engine.dask import DaskBackend
from xprosql.errors import UnknownTableError, WarehouseError
from xprosql.models.tables import INGEST_DERIVED_TABLES, PARTITION_COLUMN, TABLES
from xprosql.queries import bottlenecks as _bottlenecks
from xprosql.queries import critical_path as _critical_path
from xprosql.queries import diagnose as _diagnose
from xprosql.queries import export_trace as _export
from xprosql.queries import fleet as _fleet
from xprosql.queries import hta as _hta
from xprosql.queries import job_critical_path as _job_critical_path
from xprosql.queries import roofline as _roofline
from xprosql.queries import utilization as _utilization
from xprosql.queries._params import Profiles, given

if TYPE_CHECKING:
    import polars as pl
from xprosql.queries.bottlenecks import Scope
from xprosql.queries.diagnose import Severity
from xprosql.queries.fleet import Cohort, CompareBy
from xprosql.queries.utilization import Level
from xprosql.warehouse import Warehouse, is_uri

__all__ = ["Run", "load"]

Params = Mapping[str, Any] | Sequence[Any] | None


class Run:
    """Snapshot of a warehouse taken at open: profiles committed later are not seen.

    Use :func:`load` to make one. Times are integer picoseconds unless a column says otherwise.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        profiles: Sequence[str] | None = None,
        where: str | None = None,
        cluster: Any = None,
        version: int | None = None,
        as_of: dt.datetime | str | None = None,
        storage_options: Mapping[str, str] | None = None,
    ) -> None:
        self.path: Path | str = str(path) if is_uri(path) else Path(path)
        # Files of older versions stay for the vacuum retention (xprosql.warehouse), which is what keeps this
        # snapshot readable through later compactions.
        snapshot = Warehouse(self.path, storage_options=storage_options).snapshot(profiles=profiles, version=version,
                                                                                   as_of=as_of)
        for derived in INGEST_DERIVED_TABLES:
            stale = snapshot.profiles_without(derived)
            if stale:
                raise WarehouseError(
                    f"{self.path}: {len(stale)} profiles (e.g. {stale[0]}) were ingested by an older xprosql, "
                    f"without the {derived} table the analyses read; ingest their files into a new warehouse")
        self.engine = Engine(snapshot, backend=DaskBackend(cluster) if cluster is not None else None)
        if where is not None:
            self.engine = Engine(snapshot.restrict(self.engine.profiles_where(where)), backend=self.engine.backend)
        self.profile_ids: list[str] = self.engine.profile_ids
        #: the warehouse version read (the ``profiles`` Delta table's)
        self.version: int = snapshot.version

    # -- SQL and tables -----------------------------------------------------------------------------

    @property
    def tables(self) -> list[str]:
        return list(TABLES)

    @property
    def connection(self) -> duckdb.DuckDBPyConnection:
        """The DuckDB connection holding the views, for what :meth:`sql` does not cover."""
        return self.engine.connection

    def sql(self, query: str, params: Params = None) -> Result:
        """Run DuckDB SQL over every table. ``params`` binds ``$name`` or ``?`` placeholders.

        Example:
            >>> run.sql("SELECT * FROM events WHERE dur_ps > $min", {"min": 10**9}).pl()  # doctest: +SKIP
        """
        return self.engine.sql(query, params)

    def table(self, name: str) -> pl.LazyFrame:
        """A table as a Polars LazyFrame over the same files (``profile_id`` included)."""
        import polars as pl  # here, not at the top: an analysis printed by the CLI needs no Polars

        if name not in TABLES:
            raise UnknownTableError(f"unknown table {name!r}; tables are {', '.join(TABLES)}")
        scan = self.engine.table(name)
        if scan is None:
            empty = pl.DataFrame(TABLES[name].empty_table())
            return pl.LazyFrame(schema={PARTITION_COLUMN: pl.String, **empty.schema})
        return scan

    @property
    def profiles(self) -> pl.DataFrame:
        """The ``profiles`` table, one row per profile."""
        return self.sql("SELECT * FROM profiles ORDER BY source_path").pl()

    def row_counts(self) -> dict[str, int]:
        """Rows of each table for the profiles read, from the warehouse's log (no scan)."""
        return self.engine.snapshot.row_counts()

    def analysis(self, name: str, *, profiles: Profiles = None, **params: Any) -> Result:
        """Run an analysis of the SQL library by name (``ops.roofline`` or ``roofline``) with its parameters;
        those left out take their declared defaults. ``xprosql.analyses()`` lists them.

        Example:
            >>> run.analysis("top_ops", top=5).pl()                      # doctest: +SKIP
        """
        return self.engine.analysis(name, profiles=profiles, **params)

    # -- ops ----------------------------------------------------------------------------------------

    def roofline(self, *, profiles: Profiles = None, top: int | None = None, peak_flops_per_s: float | None = None,
                 peak_hbm_bytes_per_s: float | None = None, peak_source: str | None = None) -> Result:
        """Roofline of every op, program and profile (``sql/ops/roofline.sql``).

        ``top``: op rows per (profile, device kind), by self time. ``peak_flops_per_s`` (FLOP/s) and
        ``peak_hbm_bytes_per_s`` (bytes/s) override every device's peaks: the CPU roof.

        Example:
            >>> run.roofline(top=10).pl().filter(pl.col("row_kind") == "op").select("op", "bound_by")  # doctest: +SKIP
        """
        return _roofline.roofline(self.engine, profiles=profiles, top=top, peak_flops_per_s=peak_flops_per_s,
                                  peak_hbm_bytes_per_s=peak_hbm_bytes_per_s, peak_source=peak_source)

    def memory_bound(self, *, profiles: Profiles = None, top: int | None = None, high_utilization: float | None = None,
                     low_utilization: float | None = None, peak_flops_per_s: float | None = None,
                     peak_hbm_bytes_per_s: float | None = None, peak_source: str | None = None) -> Result:
        """Each op compute- or memory-bound, with its share (0..1) of device time; per profile the shares
        (``sql/ops/memory_bound.sql``). Peaks as in :meth:`roofline`."""
        return _roofline.memory_bound(self.engine, profiles=profiles, top=top, high_utilization=high_utilization,
                                      low_utilization=low_utilization, peak_flops_per_s=peak_flops_per_s,
                                      peak_hbm_bytes_per_s=peak_hbm_bytes_per_s, peak_source=peak_source)

    def framework_ops(self, *, profiles: Profiles = None, by_shapes: bool = True) -> Result:
        """PyTorch op statistics of Kineto traces (``sql/torch/framework_ops.sql``): per profile, device and op
        (and input shapes and dtypes, unless ``by_shapes=False``): calls, CPU total and self time (ps), the GPU
        time of the kernels each op launched (ps; through correlation ids and the CPU op tree), its share of the
        device's GPU time (0..1), FLOPs and bytes from shapes, FLOP/s and bytes/s.

        Example:
            >>> run.framework_ops().pl().filter(pl.col("op") == "aten::mm").select("input_shapes", "flop_rate")  # doctest: +SKIP
        """
        return self.engine.analysis("torch.framework_ops", profiles=profiles, by_shapes=by_shapes)

    def memory_timeline(self, *, profiles: Profiles = None, buckets: int | None = None) -> Result:
        """Bytes in use and reserved per device allocator over time (``sql/memory/memory_timeline.sql``): after
        every allocation and free, or the highest of each of ``buckets`` equal spans of the profile (bytes, ps).

        Example:
            >>> run.memory_timeline(buckets=200).pl().select("allocator", "start_ps", "in_use_bytes")  # doctest: +SKIP
        """
        return self.engine.analysis("memory.memory_timeline", profiles=profiles, buckets=buckets)

    def memory_peaks(self, *, profiles: Profiles = None, by_step: bool = False, top: int | None = 5) -> Result:
        """Per profile and device allocator (and step, ``by_step``): the peak of bytes in use, when (ps), the
        ``top`` largest (op, shape) groups of blocks live then (None: all), reserved bytes and fragmentation then,
        allocations, frees, unfreed blocks and the peak's share of the device's memory
        (``sql/memory/memory_peaks.sql``).

        Example:
            >>> run.memory_peaks(by_step=True).pl().select("allocator", "step", "peak_in_use_bytes")  # doctest: +SKIP
        """
        return self.engine.analysis("memory.memory_peaks", profiles=profiles, by_step=by_step, top=top)

    def memory_leaks(self, *, profiles: Profiles = None) -> Result:
        """Allocations never freed by the profile's end, by the op (and shape) that allocated them, with each
        allocator's growth of bytes in use per step (bytes; ``sql/memory/memory_leaks.sql``)."""
        return self.engine.analysis("memory.memory_leaks", profiles=profiles)

    def hlo_memory(self, *, profiles: Profiles = None, color: int | None = 0, top: int | None = 10) -> Result:
        """Per HLO module and memory space, XProf's memory viewer numbers from the compiler's buffer assignment
        (``sql/memory/hlo_memory.sql``): peak heap (bytes), its place in program order, the ``top`` largest
        buffers live then (None: all) and the parameter / output / temporary totals (bytes). ``color`` is the
        memory space (0: device memory; None: every space).

        Example:
            >>> run.hlo_memory(top=3).pl().select("module", "peak_heap_bytes", "top_buffers")  # doctest: +SKIP
        """
        return self.engine.analysis("memory.hlo_memory", profiles=profiles, color=color, top=top)

    def top_ops(self, *, profiles: Profiles = None, top: int | None = None) -> Result:
        """The ``top`` ops by total time (ps) per profile, device and track (``sql/ops/top_ops.sql``)."""
        return self.engine.analysis("ops.top_ops", profiles=profiles, **({} if top is None else {"top": top}))

    def utilization(self, *, profiles: Profiles = None, level: Level = "summary") -> Result:
        """TPU MXU, vector, XLU, HBM and DMA utilization (0..1) measured by hardware counters.

        ``level``: ``summary`` (per chip and kernel), ``metrics`` (every XProf metric) or ``samples``.

        Example:
            >>> run.utilization().pl().select("device", "kernel", "mxu_utilization", "hbm_utilization")  # doctest: +SKIP
        """
        return _utilization.utilization(self.engine, profiles=profiles, level=level)

    # -- steps, async ops, bottlenecks --------------------------------------------------------------

    def async_ops(self, *, profiles: Profiles = None, kinds: Sequence[str] | None = None,
                  hidden_coverage: float | None = None, exposed_coverage: float | None = None,
                  prefer_async_line: bool | None = None) -> Result:
        """One row per async op (DMA, host offload, collective): window (ps), bytes, bandwidth (bytes/s),
        coverage (0..1) and status (``sql/async/async_ops.sql``).

        Example:
            >>> run.async_ops(kinds=["host_offload"]).pl().select("start_op", "bandwidth_bytes_per_s", "status")  # doctest: +SKIP
        """
        return _bottlenecks.async_ops(self.engine, profiles=profiles, kinds=kinds, hidden_coverage=hidden_coverage,
                                      exposed_coverage=exposed_coverage, prefer_async_line=prefer_async_line)

    def async_summary(self, *, profiles: Profiles = None, hidden_coverage: float | None = None,
                      exposed_coverage: float | None = None, prefer_async_line: bool | None = None) -> Result:
        """Per profile and async kind: exposed time (ps) and bandwidth against the peak (``sql/async/async_summary.sql``)."""
        return _bottlenecks.async_summary(self.engine, profiles=profiles, hidden_coverage=hidden_coverage,
                                          exposed_coverage=exposed_coverage, prefer_async_line=prefer_async_line)

    def steps(self, *, profiles: Profiles = None) -> Result:
        """Steps per device with wall, busy and idle time in ps (``sql/steps/steps.sql``)."""
        return _bottlenecks.steps(self.engine, profiles=profiles)

    def bottlenecks(self, *, profiles: Profiles = None, scope: Scope | None = None,
                    peak_flops_per_s: float | None = None, peak_hbm_bytes_per_s: float | None = None,
                    peak_source: str | None = None, collective_bound_share: float | None = None,
                    data_transfer_bound_share: float | None = None, input_bound_share: float | None = None,
                    input_moderate_share: float | None = None, launch_bound_share: float | None = None,
                    launch_moderate_share: float | None = None, collective_high_share: float | None = None,
                    collective_moderate_share: float | None = None, host_bound_share: float | None = None,
                    idle_share: float | None = None, input_events: str | None = None,
                    prefer_async_line: bool | None = None) -> Result:
        """Per step and per profile: time breakdown (ps, summing to step time) and the primary bottleneck
        (``sql/steps/bottlenecks.sql``). The ``*_share`` thresholds (0..1) and the rest:
        :func:`xprosql.queries.bottlenecks.bottlenecks`.

        Example:
            >>> run.bottlenecks(scope="profile").pl().sort("idle_share", descending=True)  # doctest: +SKIP
        """
        return _bottlenecks.bottlenecks(
            self.engine, profiles=profiles, scope=scope, peak_flops_per_s=peak_flops_per_s,
            peak_hbm_bytes_per_s=peak_hbm_bytes_per_s, peak_source=peak_source,
            collective_bound_share=collective_bound_share, data_transfer_bound_share=data_transfer_bound_share,
            input_bound_share=input_bound_share, input_moderate_share=input_moderate_share,
            launch_bound_share=launch_bound_share, launch_moderate_share=launch_moderate_share,
            collective_high_share=collective_high_share, collective_moderate_share=collective_moderate_share,
            host_bound_share=host_bound_share, idle_share=idle_share, input_events=input_events,
            prefer_async_line=prefer_async_line)

    # -- findings -----------------------------------------------------------------------------------

    def diagnose(self, *, profiles: Profiles = None, where: str | None = None, job: str | None = None,
                 rules: Sequence[str] | None = None, thresholds: Mapping[str, Mapping[str, Any]] | None = None,
                 min_severity: Severity = "low") -> Result:
        """Findings: per profile (and job, rank, step where they apply) what is wrong, the step time a fix would
        save (``expected_saving_ps``, ps; ``expected_saving_share``, 0..1 of step time), the evidence, the fix and
        its reference; the largest saving first (``sql/diagnose/``, ``xprosql.queries.diagnose``).

        Over ``profiles`` (ids), those matching ``where`` (a SQL expression on ``profiles``) and those of ``job``
        (a ``jobs()`` job id, key or job tag), all given narrowing together. ``rules``: some of
        ``xprosql.queries.diagnose.rule_names``; ``thresholds``: per rule, its parameters.

        Example:
            >>> run.diagnose(min_severity="medium").pl().select("rule", "expected_saving_share", "title")  # doctest: +SKIP
        """
        selected = None if profiles is None else ([profiles] if isinstance(profiles, str) else list(profiles))
        for narrowing in ([] if where is None else [self.engine.profiles_where(where)],
                          [] if job is None else [_diagnose.job_profiles(self.engine, job)]):
            for ids in narrowing:
                keep = set(ids)
                selected = ids if selected is None else [p for p in selected if p in keep]
        return _diagnose.diagnose(self.engine, profiles=selected, rules=rules, thresholds=thresholds,
                                  min_severity=min_severity)

    # -- the user's own names -----------------------------------------------------------------------

    def names(self, *, profiles: Profiles = None, by_step: bool | None = None, peak_flops_per_s: float | None = None,
              peak_hbm_bytes_per_s: float | None = None, peak_source: str | None = None) -> Result:
        """Time by the user's own names in PyTorch traces (``sql/names/tree.sql``): per profile, the tree of
        record_function annotations and nn.Module calls (paths such as ``ProfilerStep/forward/Model_0/Block_0``),
        with calls, inclusive and self CPU time (ps), the outermost ops' CPU time, the GPU time of the kernels and
        copies launched inside (ps), FLOPs, bytes, FLOP/s, bytes/s and roofline position. ``by_step=True``: one
        row per (node, step); by default summed over steps. Peaks as in :meth:`roofline`.

        Example:
            >>> run.names(by_step=True).pl().filter(pl.col("path") == "ProfilerStep/data")  # doctest: +SKIP
        """
        return self.engine.analysis("names.tree", profiles=profiles, **given(
            by_step=by_step, peak_flops_per_s=peak_flops_per_s, peak_hbm_bytes_per_s=peak_hbm_bytes_per_s,
            peak_source=peak_source))

    def scopes(self, *, profiles: Profiles = None, peak_flops_per_s: float | None = None,
               peak_hbm_bytes_per_s: float | None = None, peak_source: str | None = None) -> Result:
        """Time by XLA / TensorFlow name scopes (``sql/names/scopes.sql``): per profile, device kind and scope path
        (every prefix of the HLO op_name, e.g. ``jit(step)/encoder/layer_0``), the time of the ops under it (ps),
        its share of device time (0..1), FLOPs, bytes and roofline position. Peaks as in :meth:`roofline`.

        Example:
            >>> run.scopes().pl().sort("op_time_ps", descending=True).head(10)  # doctest: +SKIP
        """
        return self.engine.analysis("names.scopes", profiles=profiles, **given(
            peak_flops_per_s=peak_flops_per_s, peak_hbm_bytes_per_s=peak_hbm_bytes_per_s, peak_source=peak_source))

    def graph_kernels(self, *, profiles: Profiles = None) -> Result:
        """The kernels, copies and memsets CUDA/HIP graph launches replayed (``sql/names/graph_kernels.sql``): each
        with its graph launch and, where the profiles analysed hold a capture of the graph (StreamBeginCapture ..
        StreamEndCapture, here or in another profile of the run), the PyTorch op and the names path that produced
        it (TraceLens's capture-merge); ``match`` says how (order, name, position) or why not (unmatched,
        no_capture, no_launch). Times in ps.

        Example:
            >>> run.graph_kernels().pl().group_by("match").len()  # doctest: +SKIP
        """
        return self.engine.analysis("names.graph_kernels", profiles=profiles)

    def graph_launches(self, *, profiles: Profiles = None) -> Result:
        """Per CUDA/HIP graph launch (``sql/names/graph_launches.sql``): the nodes it ran, their GPU time (ps), and
        how many :meth:`graph_kernels` attributed to the op that produced them, by how they matched
        (``attributed_share``, 0..1).

        Example:
            >>> run.graph_launches().pl().select("launch_name", "nodes", "attributed", "no_capture")  # doctest: +SKIP
        """
        return self.engine.analysis("names.graph_launches", profiles=profiles)

    # -- critical path ------------------------------------------------------------------------------

    def critical_path(self, *, profiles: Profiles = None, include_last_step: bool | None = True,
                      us_rounding: bool | None = None, launch_calls: Literal["all", "hta"] | None = None,
                      changes: Mapping[str | int, float] | None = None) -> Result:
        """HTA's critical path of each step of Kineto traces (``sql/critical_path/``, ``xprosql.queries.critical_path``):
        per profile and step, ``length_ps`` and its bound_by breakdown (ps, and shares 0..1 summing to 1).
        ``changes``: ``{op name or event id: factor}`` replays a what-if over the same graph (0 removes the op's own
        time, 0.5 halves it). ``include_last_step=False`` and ``us_rounding=True`` compare like for like with HTA.

        Example:
            >>> run.critical_path(changes={"aten::item": 0.0}).pl().select("step", "length_ps")  # doctest: +SKIP
        """
        return _critical_path.critical_path(self.engine, profiles=profiles, include_last_step=include_last_step,
                                            us_rounding=us_rounding, launch_calls=launch_calls, changes=changes)

    def critical_path_edges(self, *, profiles: Profiles = None, include_last_step: bool | None = True,
                            us_rounding: bool | None = None, launch_calls: Literal["all", "hta"] | None = None,
                            changes: Mapping[str | int, float] | None = None) -> Result:
        """The critical path itself, one row per edge in order (ps), with the op each edge's time belongs to."""
        return _critical_path.critical_path_edges(self.engine, profiles=profiles, include_last_step=include_last_step,
                                                  us_rounding=us_rounding, launch_calls=launch_calls, changes=changes)

    def job_critical_path(self, *, profiles: Profiles = None, changes: Mapping[str | int, float] | None = None,
                          like_median: _job_critical_path.LikeMedian | None = None,
                          remove: Sequence[str | int] | None = None, overlap_communication: bool = False) -> Result:
        """The critical path of each job step across its ranks (``xprosql.queries.job_critical_path``: the ranks'
        graphs joined through their collective instances): one row per job and step with the step time (ps), its
        breakdown, the ranks and op that held the job; with changes, the step replayed over the graph (what-if).

        Example:
            >>> run.job_critical_path(like_median="slowest").pl().select("step", "baseline_ps", "length_ps")  # doctest: +SKIP
            >>> run.job_critical_path(remove=["c10d::barrier"]).pl()                                      # doctest: +SKIP
        """
        return _job_critical_path.job_critical_path(self.engine, profiles=profiles, changes=changes,
                                                    like_median=like_median, remove=remove,
                                                    overlap_communication=overlap_communication)

    def job_critical_path_segments(self, *, profiles: Profiles = None,
                                   changes: Mapping[str | int, float] | None = None,
                                   like_median: _job_critical_path.LikeMedian | None = None,
                                   remove: Sequence[str | int] | None = None,
                                   overlap_communication: bool = False) -> Result:
        """The job critical path of each step as segments in order: a rank's stretch (its top op), a collective
        the job waited for (its last member), a late start; replayed times from the step's start (ps)."""
        return _job_critical_path.job_critical_path_segments(self.engine, profiles=profiles, changes=changes,
                                                             like_median=like_median, remove=remove,
                                                             overlap_communication=overlap_communication)

    # -- HTA ----------------------------------------------------------------------------------------

    def temporal_breakdown(self, *, profiles: Profiles = None, include_last_step: bool | None = None,
                           us_rounding: bool | None = None) -> Result:
        """HTA's temporal breakdown per GPU: idle, compute, non-compute, ps (``sql/hta/temporal_breakdown.sql``)."""
        return _hta.temporal_breakdown(self.engine, profiles=profiles, include_last_step=include_last_step,
                                       us_rounding=us_rounding)

    def idle_time(self, *, profiles: Profiles = None, include_last_step: bool | None = None,
                  us_rounding: bool | None = None, kernel_wait_ps: int | None = None) -> Result:
        """HTA's idle time per stream: host_wait, kernel_wait, other, ps (``sql/hta/idle_time.sql``)."""
        return _hta.idle_time(self.engine, profiles=profiles, include_last_step=include_last_step,
                              us_rounding=us_rounding, kernel_wait_ps=kernel_wait_ps)

    def comm_comp_overlap(self, *, profiles: Profiles = None, include_last_step: bool | None = None,
                          us_rounding: bool | None = None) -> Result:
        """HTA's communication / computation overlap per GPU, 0..1 (``sql/hta/comm_comp_overlap.sql``)."""
        return _hta.comm_comp_overlap(self.engine, profiles=profiles, include_last_step=include_last_step,
                                      us_rounding=us_rounding)

    def launch_stats(self, *, profiles: Profiles = None, include_last_step: bool | None = None,
                     us_rounding: bool | None = None, include_memory_events: bool | None = None,
                     runtime_cutoff_ps: int | None = None, launch_delay_cutoff_ps: int | None = None) -> Result:
        """HTA's kernel launch statistics, one row per launched op, ps (``sql/hta/launch_stats.sql``)."""
        return _hta.launch_stats(self.engine, profiles=profiles, include_last_step=include_last_step,
                                 us_rounding=us_rounding, include_memory_events=include_memory_events,
                                 runtime_cutoff_ps=runtime_cutoff_ps, launch_delay_cutoff_ps=launch_delay_cutoff_ps)

    cuda_kernel_launch_stats = launch_stats  # HTA's name for it

    def queue_length(self, *, profiles: Profiles = None, summary: bool = False, include_last_step: bool | None = None,
                     us_rounding: bool | None = None, max_queue_length: int | None = None) -> Result:
        """HTA's launch queue length per stream over time, or per stream summarised (``summary=True``)."""
        return _hta.queue_length(self.engine, profiles=profiles, summary=summary, include_last_step=include_last_step,
                                 us_rounding=us_rounding, max_queue_length=max_queue_length)

    # -- fleet --------------------------------------------------------------------------------------

    def compare(self, *, baseline: Cohort, candidate: Cohort, by: CompareBy = "op",
                peak_flops_per_s: float | None = None, peak_hbm_bytes_per_s: float | None = None,
                peak_source: str | None = None) -> Result:
        """Per op (``by="op"``), category, module or bottleneck: time share, FLOP rate and bandwidth in two
        cohorts of profiles and the difference, by impact. A cohort is a SQL expression on ``profiles`` or a
        list of profile ids (:func:`xprosql.queries.fleet.compare`; ``xprosql compare`` on the command line).

        Example:
            >>> run.compare(baseline="tags['commit'] = 'a1'", candidate="tags['commit'] = 'b2'").pl().head(5)  # doctest: +SKIP
        """
        return _fleet.compare(self.engine, baseline=baseline, candidate=candidate, by=by,
                              peak_flops_per_s=peak_flops_per_s, peak_hbm_bytes_per_s=peak_hbm_bytes_per_s,
                              peak_source=peak_source)

    def regressions(self, *, tag: str = "job", window: int | None = None, threshold: float | None = None,
                    mads: float | None = None, top: int | None = None) -> Result:
        """Step-time and per-op changes over time within each value of ``tag`` (``sql/fleet/regressions.sql``).

        Example:
            >>> run.regressions(tag="job").pl().select("series", "metric", "first_profile_id", "change")  # doctest: +SKIP
        """
        return _fleet.regressions(self.engine, tag=tag, window=window, threshold=threshold, mads=mads, top=top)

    def op_history(self, *, tag: str = "job", run_tag: str | None = None, op_key: str | None = None,
                   top: int | None = None, min_runs: int | None = None, threshold: float | None = None,
                   mads: float | None = None) -> Result:
        """One op across each series' runs (``sql/fleet/op_history.sql``): per (value of ``tag``, op by its
        ``op_stats.op_key``, run of ``run_tag``) the median time per occurrence (ps), and the run where it changed
        level (a least-absolute-deviations split, checked against ``threshold`` and ``mads`` scaled MADs of the
        run-to-run noise). ``op_key``: follow that op alone; else the ``top`` longest of each series.

        Example:
            >>> run.op_history().pl().filter(pl.col("is_change_point"))  # doctest: +SKIP
        """
        return self.engine.analysis("fleet.op_history", **given(
            tag=tag, run_tag=run_tag, op_key=op_key, top=top, min_runs=min_runs, threshold=threshold, mads=mads))

    def worst(self, *, by: str = "step_time_ps", top: int = 10, analysis: str | None = None,
              scope: Literal["step", "profile"] | None = None) -> Result:
        """The ``top`` worst profiles (or steps, ``by="step"``) by a column (:func:`xprosql.queries.fleet.worst`).

        Example:
            >>> run.worst(by="step", top=5).pl()                           # doctest: +SKIP
        """
        return _fleet.worst(self.engine, by=by, top=top, analysis=analysis, scope=scope)

    def fleet_memory(self, *, by_step: bool = False, within: float = 0.1) -> Result:
        """Per job (and step, ``by_step``): the highest memory peak of its profiles (bytes) and the profiles
        whose peak came within ``within`` (a share, 0..1) of their device's memory (``sql/fleet/job_memory.sql``).

        Example:
            >>> run.fleet_memory(within=0.05).pl().filter(pl.col("near_capacity_profiles") > 0)  # doctest: +SKIP
        """
        return self.engine.analysis("fleet.job_memory", by_step=by_step, within=within)

    # -- jobs: many ranks, one job ------------------------------------------------------------------

    def jobs(self, *, profiles: Profiles = None) -> Result:
        """The jobs of the warehouse: profiles of one run, one distributed job or one ``job`` tag, with the
        ranks and hosts present and the ranks missing (``sql/jobs/jobs.sql``).

        Example:
            >>> run.jobs().pl().select("job", "profiles", "world_size", "missing_ranks")  # doctest: +SKIP
        """
        return self.engine.analysis("jobs.jobs", profiles=profiles)

    def clock_offsets(self, *, profiles: Profiles = None, min_matched: int | None = None) -> Result:
        """Each profile's offset to its job's clock (ps: job time = profile time + ``offset_ps``) and its source:
        the reference member, a shared host clock, matched collective ends, or the wall clocks
        (``sql/jobs/clock_offsets.sql``). ``min_matched``: instances matched with the reference a member on
        another host needs for the collective-ends offset (default 3)."""
        return self.engine.analysis("jobs.clock_offsets", profiles=profiles,
                                    **({} if min_matched is None else {"min_matched": min_matched}))

    def collectives(self, *, profiles: Profiles = None, min_matched: int | None = None) -> Result:
        """One row per collective instance per rank of every job, on the job clock (ps): kind, process group,
        bytes, the last rank to arrive, the wait it imposed, transfer time after it, and NCCL's algbw / busbw
        (bytes/s) (``sql/jobs/collectives.sql``). ``min_matched`` as in :meth:`clock_offsets`.

        Example:
            >>> run.collectives().pl().filter(pl.col("matched")).select("kind", "last_member", "arrival_skew_ps")  # doctest: +SKIP
        """
        return self.engine.analysis("jobs.collectives", profiles=profiles,
                                    **({} if min_matched is None else {"min_matched": min_matched}))

    def stragglers(self, *, profiles: Profiles = None, min_cost_share: float | None = None,
                   min_matched: int | None = None) -> Result:
        """Per job, step and rank: the delay it imposed on the others at collectives (ps), its rank in the step,
        whether it is a straggler (imposed at least ``min_cost_share`` of the step, 0..1, default 0.2), HTA's
        late-start metric and the kernel pace (``sql/jobs/stragglers.sql``).

        Example:
            >>> run.stragglers().pl().filter(pl.col("straggler")).select("step", "member", "delay_imposed_ps")  # doctest: +SKIP
        """
        params: dict[str, Any] = {}
        if min_cost_share is not None:
            params["min_cost_share"] = min_cost_share
        if min_matched is not None:
            params["min_matched"] = min_matched
        return self.engine.analysis("jobs.stragglers", profiles=profiles, **params)

    def what_if(self, *, profiles: Profiles = None, min_matched: int | None = None) -> Result:
        """Per job and step (and per job): the step time if the step's worst rank ran like the median rank, and
        the saving (ps, share 0..1) (``sql/jobs/what_if.sql``), replayed over the job's critical-path graph where
        the job has one (``method`` replay: Kineto ranks), else the subtraction estimate (``method`` subtraction)."""
        return _job_critical_path.job_what_if(self.engine, profiles=profiles, min_matched=min_matched)

    # -- timeline export ----------------------------------------------------------------------------

    def export_trace(self, out: str | os.PathLike[str], *, profiles: Profiles = None, where: str | None = None,
                     start_ps: int | None = None, end_ps: int | None = None, args: bool = True, flows: bool = True,
                     counters: bool = True, memory: bool = True, job_clock: bool = False) -> _export.ExportSummary:
        """Write a selection as a Perfetto trace (TracePacket protobuf) for ui.perfetto.dev: a process per device,
        a track per line, slices with their stats as args, launch -> kernel flows, counter tracks and the memory
        timeline (``xprosql/queries/export_trace.py``). ``where``: a SQL predicate on ``events``; ``start_ps`` /
        ``end_ps``: a window of each profile, ps from its start; ``job_clock``: a job's ranks side by side on its
        clock (``sql/jobs/clock_offsets.sql``). Streams in bounded memory.

        Example:
            >>> run.export_trace("x.perfetto-trace", profiles=["e312ef8bd5a5104a"], start_ps=0, end_ps=10**10)  # doctest: +SKIP
        """
        return _export.export_trace(self.engine, out, profiles=profiles, where=where, start_ps=start_ps, end_ps=end_ps,
                                    args=args, flows=flows, counters=counters, memory=memory, job_clock=job_clock)

    # -- lifetime -----------------------------------------------------------------------------------

    def close(self) -> None:
        self.engine.close()

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
    version: int | None = None,
    as_of: dt.datetime | str | None = None,
    storage_options: Mapping[str, str] | None = None,
) -> Run:
    """Open a warehouse read-only. Cheap: reads the tables' logs, copies no data.

    ``where`` keeps the profiles matching one SQL expression on ``profiles`` (tags, times, hosts):
    only their files are read. ``cluster`` (a ``dask.distributed.Client``) runs the analyses per
    share of profiles on the cluster. ``version`` (an integer, ``run.version`` of an earlier load) or
    ``as_of`` (a datetime or ISO 8601 text: the last version committed by then) reads an earlier
    snapshot, while vacuum has not deleted its files (``xprosql.compact``'s ``retention_hours``).
    ``path`` may be object storage (``s3://bucket/run``, ``gs://``, ``az://``): ``storage_options`` gives its
    credentials and endpoint (delta-rs's keys: ``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ...), else the
    environment's; the files are read in place (DuckDB through fsspec, Polars through object_store).

    Example:
        >>> run = load("run/")                                       # doctest: +SKIP
        >>> run.sql("SELECT count(*) FROM events").rows()            # doctest: +SKIP
        [(37443,)]
    """
    return Run(path, profiles=profiles, where=where, cluster=cluster, version=version, as_of=as_of,
               storage_options=storage_options)
