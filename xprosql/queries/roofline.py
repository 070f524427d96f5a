"""Roofline and memory-bound classification: the SQL analyses, a Polars twin, and a chart.

:func:`roofline` and :func:`memory_bound` run ``sql/ops/roofline.sql`` and
``sql/ops/memory_bound.sql`` (see their headers, or ``xprosql.analyses()``, for every column).
:func:`roofline_polars` computes the same roofline with Polars LazyFrames over
the same Parquet files, step for step, so either engine answers the same
question with the same numbers. :func:`plot_roofline` draws the classic
log-log chart.

Example:
    >>> run = xprosql.load("run/")                                                # doctest: +SKIP
    >>> ops = roofline(run.engine, top=10).pl().filter(pl.col("row_kind") == "op")  # doctest: +SKIP
    >>> ops.select("op", "operational_intensity", "ridge_point", "bound_by")       # doctest: +SKIP
    >>> plot_roofline(roofline(run.engine).pl(), "roofline.png")                 # doctest: +SKIP
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from xprosql.engine import Engine, Result
from xprosql.engine.connection import connect_views, query_rows
from xprosql.engine.functions import decode_memory_access_breakdown
from xprosql.engine.library import library
from xprosql.queries._params import Profiles, given

if TYPE_CHECKING:
    import polars as pl

__all__ = ["ROOFLINE_KEYS", "memory_bound", "plot_roofline", "require_matplotlib", "roofline", "roofline_polars"]

# A roofline row is identified by these columns.
ROOFLINE_KEYS = ["row_kind", "profile_id", "device_kind", "program_id", "op"]

_INNER_OP_CATEGORIES = ("call", "conditional", "while", "megacore fusion")
# Kineto events on a GPU's lines that are no GPU work (sql/ops/_op_stats.sql).
_NOT_GPU_WORK = ("gpu_user_annotation", "cuda_sync", "python_function", "cpu_op", "user_annotation", "cpu_instant_event",
                 "cuda_runtime", "cuda_driver")
_MEMORIES = ("HBM", "VMEM read", "VMEM write", "CMEM read", "CMEM write")
_ASYNC_OP = r"-(start|done)(\.[0-9]+)?$"


def roofline(
    engine: Engine,
    *,
    profiles: Profiles = None,
    top: int | None = None,
    peak_flops_per_s: float | None = None,
    peak_hbm_bytes_per_s: float | None = None,
    peak_source: str | None = None,
) -> Result:
    """``sql/ops/roofline.sql``: one row per op, program and profile (see ``xprosql.analyses()`` for the columns).

    ``top``: op rows kept per (profile, device kind), by self time. ``peak_flops_per_s`` (FLOP/s) and
    ``peak_hbm_bytes_per_s`` (bytes/s) override every device's peaks (and are the only CPU roof);
    ``peak_source`` is what the output's ``peak_*_source`` columns then say (default ``user``).

    Example:
        >>> roofline(run.engine, top=5, peak_flops_per_s=2e11, peak_hbm_bytes_per_s=2e10).pl()  # doctest: +SKIP
    """
    return engine.analysis("ops.roofline", profiles=profiles, **given(
        top=top, peak_flops_per_s=_float(peak_flops_per_s), peak_hbm_bytes_per_s=_float(peak_hbm_bytes_per_s),
        peak_source=peak_source))


def memory_bound(
    engine: Engine,
    *,
    profiles: Profiles = None,
    top: int | None = None,
    high_utilization: float | None = None,
    low_utilization: float | None = None,
    peak_flops_per_s: float | None = None,
    peak_hbm_bytes_per_s: float | None = None,
    peak_source: str | None = None,
) -> Result:
    """``sql/ops/memory_bound.sql``: each op compute- or memory-bound; per profile the shares (0..1) of device time.

    ``top`` keeps the op rows with the most self time per (profile, device kind); the profile rows'
    shares always cover every op. ``high_utilization`` / ``low_utilization`` (0..1): XProf's
    thresholds for the profile verdict. Peaks as in :func:`roofline`.

    Example:
        >>> memory_bound(run.engine).pl().filter(pl.col("row_kind") == "profile")  # doctest: +SKIP
    """
    return engine.analysis("ops.memory_bound", profiles=profiles, **given(
        top=top, high_utilization=_float(high_utilization), low_utilization=_float(low_utilization),
        peak_flops_per_s=_float(peak_flops_per_s), peak_hbm_bytes_per_s=_float(peak_hbm_bytes_per_s),
        peak_source=peak_source))


def _float(value: float | None) -> float | None:
    return None if value is None else float(value)


def _strings(frame: pl.LazyFrame) -> pl.LazyFrame:
    """Dictionary-encoded columns arrive as Categorical: compare them as strings."""
    import polars as pl

    schema = frame.collect_schema()
    return frame.with_columns(
        pl.col(name).cast(pl.String) for name, dtype in schema.items() if dtype in (pl.Categorical, pl.Enum) or isinstance(dtype, (pl.Categorical, pl.Enum))
    )


def _cost_source() -> pl.Expr:
    """The cost source of a group of ops, by precedence (sql/ops/roofline.sql)."""
    import polars as pl

    expr: Any = pl
    for source in ("profile", "declared", "triton_gemm", "library", "hlo", "trace", "shapes", "operand_bytes"):
        expr = expr.when((pl.col("cost_source") == source).any()).then(pl.lit(source))
    return expr.otherwise(None).alias("cost_source")


def _sum_or_null(expr: pl.Expr) -> pl.Expr:
    """SQL's sum: null when every value is null."""
    import polars as pl

    return pl.when(expr.is_not_null().any()).then(expr.sum()).otherwise(None)


def _breakdown_frame(rows: list[tuple[Any, ...]], keys: list[str]) -> pl.DataFrame:
    """Decoded memory_access_breakdown per key: has_breakdown and bytes per occurrence by space."""
    import polars as pl

    def total(entries: list[tuple[int, int, int]], space: int, op: int | None = None) -> int:
        return sum(b for o, s, b in entries if s == space and (op is None or o == op))

    records = []
    for *key, blob in rows:
        entries = decode_memory_access_breakdown(blob) or []
        records.append({
            **dict(zip(keys, key)),
            "has_breakdown": bool(entries),
            "hbm_each": total(entries, 1),
            "vmem_read_each": total(entries, 3, 1), "vmem_write_each": total(entries, 3, 2),
            "cmem_read_each": total(entries, 2, 1), "cmem_write_each": total(entries, 2, 2),
        })
    schema = {**{k: (pl.String if k == "profile_id" else pl.Int64) for k in keys}, "has_breakdown": pl.Boolean,
              **{c: pl.Int64 for c in ("hbm_each", "vmem_read_each", "vmem_write_each", "cmem_read_each", "cmem_write_each")}}
    return pl.DataFrame(records, schema=schema)


def roofline_polars(
    tables: Callable[[str], pl.LazyFrame] | Mapping[str, pl.LazyFrame],
    *,
    top: int | None = None,
    peak_flops_per_s: float | None = None,
    peak_hbm_bytes_per_s: float | None = None,
    peak_source: str | None = None,
) -> pl.LazyFrame:
    """The roofline of :func:`roofline` computed with Polars, for a Polars pipeline: LazyFrames of the
    warehouse tables in (``run.table``, or a mapping of table name to frame), the roofline's rows out.

    The same rows and columns as the SQL, whose definitions it shares: the peaks (FLOP/s, bytes/s) come
    from ``sql/ops/_peaks.sql`` run over the given frames, and options left None take the SQL's declared
    defaults. ``top``: op rows kept per (profile, device kind), by self time.

    Example:
        >>> roofline_polars(run.table).filter(pl.col("row_kind") == "profile").collect()   # doctest: +SKIP
        >>> frames = {name: run.table(name).filter(pl.col("profile_id") == pid) for name in run.tables}  # doctest: +SKIP
        >>> roofline_polars(frames, top=10).collect()                                     # doctest: +SKIP
    """
    import polars as pl

    source = tables.__getitem__ if isinstance(tables, Mapping) else tables
    options = library().bind("ops.roofline", given(
        top=top, peak_flops_per_s=_float(peak_flops_per_s), peak_hbm_bytes_per_s=_float(peak_hbm_bytes_per_s),
        peak_source=peak_source))
    top = options["top"]

    def table(name: str) -> pl.LazyFrame:
        return _strings(source(name))

    devices = table("devices")
    accelerated = devices.filter(pl.col("kind").is_in(["tpu", "gpu"])).select("profile_id").unique().collect()["profile_id"].to_list()

    ordinals = (
        table("event_stats").filter(pl.col("stat") == "device_ordinal")
        .select("profile_id", "event_id", pl.coalesce("int_value", pl.col("uint_value").cast(pl.Int64)).alias("xla_device"))
    )
    ev = (
        table("events")
        .join(devices.select("profile_id", "device_id", "kind"), on=["profile_id", "device_id"])
        .join(ordinals, on=["profile_id", "event_id"], how="left")
        .join(table("tracks").select("profile_id", "device_id", "track_id", pl.col("name").alias("track_name"), "stream_id"),
              on=["profile_id", "device_id", "track_id"])
    )
    is_op = (
        ((pl.col("kind") == "tpu") & (pl.col("track_name") == "XLA Ops"))
        | ((pl.col("kind") == "gpu") & pl.col("stream_id").is_not_null()
           & ~pl.col("category").fill_null("").is_in(list(_NOT_GPU_WORK)))
        | (pl.col("kind").is_in(["host", "cpu"]) & pl.col("hlo_op").is_not_null() & ~pl.col("profile_id").is_in(accelerated))
    )
    # PyTorch GPU work belongs to the op that launched it; the op's costs come with its first activity.
    torch_kernels = table("framework_op_kernels").select(
        "profile_id", "event_id", pl.col("op").alias("torch_op"), "input_shapes", "input_dtypes", "precision",
        pl.col("cost_source").alias("torch_cost_source"), "first_of_call",
        pl.col("flops").alias("torch_flops"), pl.col("bytes_accessed").alias("torch_bytes"))
    op_events = ev.filter(is_op).join(torch_kernels, on=["profile_id", "event_id"], how="left").select(
        "profile_id", "device_id", "track_id", "event_id", "metadata_id",
        pl.when(pl.col("kind").is_in(["tpu", "gpu"])).then(pl.col("kind")).otherwise(pl.lit("cpu")).alias("device_kind"),
        "program_id", "hlo_op",
        pl.coalesce("hlo_op", "torch_op", "name").alias("op"),
        "input_shapes", "input_dtypes", "precision",
        "hlo_module",
        pl.when(pl.col("first_of_call").is_null()).then(pl.col("category")).otherwise(pl.lit("cpu_op")).alias("category"),
        pl.when(pl.col("first_of_call").is_null()).then(pl.col("num_occurrences").fill_null(1))
        .otherwise(pl.col("first_of_call").cast(pl.Int64)).alias("occurrences"),
        pl.coalesce("device_offset_ps", "start_ps").alias("start_ps"),
        pl.coalesce("device_duration_ps", "dur_ps").alias("dur_ps"),
        pl.coalesce("flops", "torch_flops").alias("flops"), pl.coalesce("bytes_accessed", "torch_bytes").alias("bytes_accessed"),
        "torch_cost_source",
        # A host plane running several XLA devices tags each op with its device (ops/_op_stats.sql).
        pl.when(~pl.col("kind").is_in(["tpu", "gpu"])).then(pl.col("xla_device")).alias("xla_device"),
    ).collect()

    # Nesting per line: depth = earlier ops still open at the start; parent = latest earlier op one level up.
    # Only lines where some op starts before its predecessor ends nest at all.
    line = ["profile_id", "track_id"]
    ordered = (
        op_events.filter(pl.col("start_ps").is_not_null())
        .select("profile_id", "track_id", "event_id", "start_ps", "dur_ps")
        .sort([*line, "start_ps", "dur_ps", "event_id"], descending=[False, False, False, True, False])
        .with_columns(
            ((pl.col("start_ps") + pl.col("dur_ps")).shift(1).over(line) > pl.col("start_ps")).fill_null(False).alias("overlaps"),
        )
        .filter(pl.col("overlaps").any().over(line))
        .with_columns(
            pl.int_range(pl.len()).over(line).alias("ord"),
            pl.int_range(pl.len()).alias("gord"),
        )
    )
    points = pl.concat([
        ordered.select("profile_id", "track_id", "event_id", "ord", pl.col("start_ps").alias("at_ps"), pl.lit(0).alias("is_end")),
        ordered.select("profile_id", "track_id", "event_id", "ord", (pl.col("start_ps") + pl.col("dur_ps")).alias("at_ps"), pl.lit(1).alias("is_end")),
    ])
    depths = (
        points.sort(["profile_id", "track_id", "at_ps", "ord", "is_end"])
        .with_columns(pl.col("is_end").cum_sum().over(["profile_id", "track_id"]).alias("ended"))
        .filter(pl.col("is_end") == 0)
        .select("profile_id", "track_id", "event_id", (pl.col("ord") - pl.col("ended")).alias("depth"))
    )
    nested = ordered.join(depths, on=["profile_id", "track_id", "event_id"]).sort("gord")
    kids = nested.filter(pl.col("depth") > 0).with_columns((pl.col("depth") - 1).alias("parent_depth"))
    parents = nested.select("profile_id", "track_id", pl.col("depth").alias("parent_depth"), "gord", pl.col("event_id").alias("parent_id"))
    children = (
        kids.join_asof(parents, on="gord", by=["profile_id", "track_id", "parent_depth"], strategy="backward",
                       allow_exact_matches=False, check_sortedness=False)  # both sorted by gord above
        .filter(pl.col("parent_id").is_not_null())
        .group_by("profile_id", "parent_id").agg(pl.col("dur_ps").sum().alias("children_ps"))
    )

    # Async pairs: each done with the latest matching start before it on its line.
    async_events = (
        op_events.filter(pl.col("start_ps").is_not_null()
                         & (pl.col("op").str.contains(_ASYNC_OP) | pl.col("op").str.contains(r"^(send|recv)(\.[0-9]+)?$")))
        .select(
            "profile_id", "track_id", "event_id", "start_ps", (pl.col("start_ps") + pl.col("dur_ps")).alias("end_ps"),
            (pl.col("program_id").cast(pl.String).fill_null("") + ":" + pl.col("op").str.replace(_ASYNC_OP, "${2}")).alias("pair_key"),
            pl.col("op").str.contains(r"-done(\.[0-9]+)?$").alias("is_done"),
        )
        .sort("start_ps")
    )
    dones = async_events.filter(pl.col("is_done")).drop("is_done")
    starts = async_events.filter(~pl.col("is_done")).select("profile_id", "track_id", "pair_key", "start_ps",
                                                              pl.col("start_ps").alias("pair_start_ps"), pl.col("event_id").alias("start_id"))
    pairs = (
        dones.join_asof(starts, on="start_ps", by=["profile_id", "track_id", "pair_key"], strategy="backward",
                        check_sortedness=False)  # both sorted by start_ps above
        .filter(pl.col("start_id").is_not_null())
        .sort("start_ps")
        .unique(subset=["profile_id", "start_id"], keep="first", maintain_order=True)
        .select("profile_id", "start_id", pl.col("event_id").alias("done_id"), (pl.col("end_ps") - pl.col("pair_start_ps")).alias("window_ps"))
    )
    windows = pl.concat([
        pairs.select("profile_id", pl.col("start_id").alias("event_id"), "window_ps"),
        pairs.select("profile_id", pl.col("done_id").alias("event_id"), "window_ps"),
    ])

    metadata_rows = (
        table("metadata_stats").filter((pl.col("stat") == "memory_access_breakdown") & pl.col("bytes_value").is_not_null())
        .select("profile_id", "device_id", "metadata_id", "bytes_value").collect()
        .unique(subset=["profile_id", "device_id", "metadata_id"], keep="first", maintain_order=True)
    )
    event_rows = (
        table("event_stats").filter((pl.col("stat") == "memory_access_breakdown") & pl.col("bytes_value").is_not_null())
        .select("profile_id", "event_id", "bytes_value").collect()
        .unique(subset=["profile_id", "event_id"], keep="first", maintain_order=True)
    )
    metadata_breakdowns = _breakdown_frame(metadata_rows.rows(), ["profile_id", "device_id", "metadata_id"]).with_columns(pl.col("device_id").cast(pl.Int32))
    event_breakdowns = _breakdown_frame(event_rows.rows(), ["profile_id", "event_id"])

    hlo_ops = table("hlo_ops")
    if "derived_cost_source" not in hlo_ops.collect_schema().names():  # files written before it: XLA's rules
        hlo_ops = hlo_ops.with_columns(pl.lit(None, pl.String).alias("derived_cost_source"))
    hlo = (
        hlo_ops.group_by("profile_id", "program_id", "hlo_op")
        .agg(pl.col("opcode").drop_nulls().first(), pl.col("derived_flops").drop_nulls().first(),
             pl.col("derived_bytes_accessed").drop_nulls().first(),
             pl.col("derived_cost_source").drop_nulls().first().fill_null("hlo"))
        .collect()
    )
    # An HLO op's derived costs count once per execution: on a GPU, with the first kernel of each run of its
    # kernels on a stream (ops/_op_stats.sql).
    line_order = ["profile_id", "device_id", "track_id"]
    executions = (
        op_events.filter((pl.col("device_kind") == "gpu") & pl.col("start_ps").is_not_null())
        .sort([*line_order, "start_ps", "event_id"])
        .with_columns(
            (pl.col("hlo_op").shift(1).over(line_order).ne_missing(pl.col("hlo_op"))
             | pl.col("program_id").shift(1).over(line_order).ne_missing(pl.col("program_id"))).alias("first_of_execution"))
        .filter(pl.col("hlo_op").is_not_null())
        .select("profile_id", "event_id", "first_of_execution")
    )
    derived_weight = pl.col("first_of_execution").fill_null(True).cast(pl.Int64)

    space_cols = ["hbm_each", "vmem_read_each", "vmem_write_each", "cmem_read_each", "cmem_write_each"]
    costed = (
        op_events
        .join(children, left_on=["profile_id", "event_id"], right_on=["profile_id", "parent_id"], how="left")
        .join(hlo, on=["profile_id", "program_id", "hlo_op"], how="left")
        .join(event_breakdowns, on=["profile_id", "event_id"], how="left")
        .join(metadata_breakdowns, on=["profile_id", "device_id", "metadata_id"], how="left", suffix="_md")
        .join(windows, on=["profile_id", "event_id"], how="left")
        .join(executions, on=["profile_id", "event_id"], how="left")
        .with_columns(
            (pl.col("dur_ps") - pl.col("children_ps").fill_null(0)).clip(lower_bound=0).alias("self_ps"),
            pl.coalesce("flops", pl.col("derived_flops") * derived_weight).alias("flops_each"),
            pl.coalesce("bytes_accessed", pl.col("derived_bytes_accessed") * derived_weight).alias("bytes_each"),
            pl.when(pl.col("torch_cost_source").is_not_null()).then(pl.col("torch_cost_source"))
            .when(pl.col("flops").is_not_null() | pl.col("bytes_accessed").is_not_null()).then(pl.lit("profile"))
            .when(pl.col("derived_flops").is_not_null() | pl.col("derived_bytes_accessed").is_not_null())
            .then(pl.col("derived_cost_source"))
            .otherwise(None).alias("cost_source"),
            # The event's breakdown wins over its metadata's, as for promoted stats.
            *[pl.when(pl.col("has_breakdown").is_not_null()).then(pl.col(c)).otherwise(pl.col(f"{c}_md")).fill_null(0).alias(c)
              for c in space_cols],
            pl.coalesce("has_breakdown", "has_breakdown_md").fill_null(False).alias("has_breakdown"),
        )
    )

    occ = pl.col("occurrences")
    ops = (
        costed.group_by("profile_id", "device_kind", "program_id", "op", "input_shapes", "input_dtypes")
        .agg(
            pl.col("precision").drop_nulls().first().alias("precision"),
            pl.col("hlo_module").drop_nulls().first().alias("module"),
            pl.coalesce(pl.col("category").drop_nulls().first(), pl.col("opcode").drop_nulls().first()).alias("category"),
            _cost_source(),
            pl.struct("device_id", "xla_device").n_unique().cast(pl.Int64).alias("devices"),
            occ.sum().alias("occurrences"),
            pl.col("dur_ps").sum().alias("total_time_ps"),
            pl.col("self_ps").sum().alias("self_time_ps"),
            _sum_or_null(pl.col("window_ps")).alias("async_window_ps"),
            pl.coalesce("window_ps", "dur_ps").sum().alias("bandwidth_time_ps"),
            _sum_or_null(pl.col("flops_each") * occ).cast(pl.Float64).alias("flops"),
            _sum_or_null(pl.col("bytes_each") * occ).cast(pl.Float64).alias("bytes_accessed"),
            pl.col("has_breakdown").any().alias("has_breakdown"),
            (pl.col("hbm_each") * occ).sum().cast(pl.Float64).alias("breakdown_hbm_bytes"),
            pl.when(pl.col("has_breakdown").any()).then((pl.col("hbm_each") * occ).sum())
            .otherwise(_sum_or_null(pl.col("bytes_each") * occ)).cast(pl.Float64).alias("hbm_bytes"),
            *[pl.when(pl.col("has_breakdown").any()).then((pl.col(f"{name}_each") * occ).sum()).otherwise(None)
              .cast(pl.Float64).alias(f"{name}_bytes") for name in ("vmem_read", "vmem_write", "cmem_read", "cmem_write")],
        )
    )

    # PyTorch profiles without GPU activity: each costed op on its CPU, by its CPU time (ops/_op_stats.sql).
    torch_profiles = table("framework_op_kernels").select("profile_id").unique().collect()["profile_id"].to_list()
    torch_cpu = (
        table("framework_op_stats")
        .filter(pl.col("cost_source").is_in(["declared", "trace", "shapes", "operand_bytes"])
                & ~pl.col("profile_id").is_in(torch_profiles)
                & ~pl.col("profile_id").is_in(accelerated))
        .collect()
    )
    cpu_device_spans = (
        table("events").filter((pl.col("category") == "cpu_op") & pl.col("start_ps").is_not_null()
                               & pl.col("profile_id").is_in(torch_cpu["profile_id"].unique().to_list()))
        .group_by("profile_id", "device_id")
        .agg(((pl.col("start_ps") + pl.col("dur_ps")).max() - pl.col("start_ps").min()).alias("span_ps"))
        .with_columns(pl.lit("cpu").alias("device_kind")).collect()
    )
    ops = pl.concat([ops, torch_cpu.group_by("profile_id", "op", "input_shapes", "input_dtypes").agg(
        pl.lit("cpu").alias("device_kind"), pl.lit(None, pl.UInt64).alias("program_id"),
        pl.col("precision").drop_nulls().first().cast(pl.String).alias("precision"), pl.lit(None, pl.String).alias("module"),
        pl.lit("cpu_op").alias("category"), _cost_source(), pl.col("device_id").n_unique().cast(pl.Int64).alias("devices"),
        pl.col("occurrences").sum().alias("occurrences"),
        *[pl.col("cpu_total_time_ps").sum().alias(c) for c in ("total_time_ps", "self_time_ps", "bandwidth_time_ps")],
        pl.lit(None, pl.Int64).alias("async_window_ps"),
        pl.col("flops").sum().alias("flops"), pl.col("bytes_accessed").sum().alias("bytes_accessed"),
        pl.lit(False).alias("has_breakdown"), pl.lit(0.0).alias("breakdown_hbm_bytes"),
        pl.col("bytes_accessed").sum().alias("hbm_bytes"),
        *[pl.lit(None, pl.Float64).alias(f"{name}_bytes") for name in ("vmem_read", "vmem_write", "cmem_read", "cmem_write")],
    )], how="diagonal_relaxed")

    device_time = (
        pl.concat([
            op_events.filter(pl.col("start_ps").is_not_null())
            .group_by("profile_id", "device_kind", "device_id", "xla_device")
            .agg(((pl.col("start_ps") + pl.col("dur_ps")).max() - pl.col("start_ps").min()).alias("span_ps")),
            cpu_device_spans,
        ], how="diagonal_relaxed")
        .group_by("profile_id", "device_kind").agg(pl.col("span_ps").sum().alias("device_time_ps"))
    )

    inner = ops.with_columns(
        (~pl.col("category").fill_null("").str.to_lowercase().is_in(list(_INNER_OP_CATEGORIES))).alias("innermost")
    )
    w = pl.col("innermost")

    def total_aggs() -> list[pl.Expr]:
        return [
            _cost_source(),
            pl.col("devices").max().alias("devices"),
            pl.col("occurrences").sum().alias("occurrences"),
            pl.col("self_time_ps").sum().alias("self_time_ps"),
            _sum_or_null(pl.col("flops").filter(w)).alias("flops"),
            _sum_or_null(pl.col("bytes_accessed").filter(w)).alias("bytes_accessed"),
            pl.when(pl.col("has_breakdown").filter(w).any()).then(_sum_or_null(pl.col("breakdown_hbm_bytes").filter(w)))
            .otherwise(_sum_or_null(pl.col("bytes_accessed").filter(w))).alias("hbm_bytes"),
            *[_sum_or_null(pl.col(f"{name}_bytes").filter(w)).alias(f"{name}_bytes")
              for name in ("vmem_read", "vmem_write", "cmem_read", "cmem_write")],
        ]

    program_totals = inner.group_by("profile_id", "device_kind", "program_id").agg(
        pl.col("module").drop_nulls().first().alias("module"), *total_aggs()
    ).with_columns(pl.lit("program").alias("row_kind"))
    profile_totals = inner.group_by("profile_id", "device_kind").agg(*total_aggs()).with_columns(
        pl.lit("profile").alias("row_kind"), pl.lit(None, pl.UInt64).alias("program_id"), pl.lit(None, pl.String).alias("module")
    )
    totals = (
        pl.concat([program_totals, profile_totals], how="diagonal_relaxed")
        .join(device_time, on=["profile_id", "device_kind"], how="left")
        .with_columns(
            pl.when(pl.col("row_kind") == "profile").then(pl.col("device_time_ps")).otherwise(pl.col("self_time_ps")).alias("total_time_ps"),
            pl.lit(None, pl.String).alias("op"), pl.lit(None, pl.String).alias("category"),
            pl.lit(None, pl.Int64).alias("async_window_ps"),
        )
        .with_columns(pl.col("total_time_ps").alias("bandwidth_time_ps"))
        .drop("device_time_ps")
    )

    op_rows = ops.with_columns(pl.lit("op").alias("row_kind"))
    if top is not None:
        op_rows = (
            op_rows.sort(["self_time_ps", "program_id", "op", "input_shapes", "input_dtypes"],
                         descending=[True, False, False, False, False], nulls_last=True)
            .filter(pl.int_range(pl.len()).over(["profile_id", "device_kind"]) < top)
        )
    row_columns = [
        "row_kind", "profile_id", "device_kind", "program_id", "module", "op", "input_shapes", "input_dtypes", "precision",
        "category", "cost_source", "devices",
        "occurrences", "total_time_ps", "self_time_ps", "async_window_ps", "bandwidth_time_ps", "flops", "bytes_accessed",
        "hbm_bytes", "vmem_read_bytes", "vmem_write_bytes", "cmem_read_bytes", "cmem_write_bytes",
    ]
    totals = totals.with_columns(*[pl.lit(None, pl.String).alias(c) for c in ("input_shapes", "input_dtypes", "precision")])
    rows = pl.concat([op_rows.select(row_columns), totals.select(row_columns)], how="vertical_relaxed")

    peaks = _peaks(table, pl.concat([op_events.select("profile_id", "device_id"), torch_cpu.select("profile_id", "device_id")]),
                   options)

    seconds = lambda column: pl.when(pl.col(column) != 0).then(pl.col(column)).otherwise(None) * 1e-12  # noqa: E731
    out = (
        rows.join(device_time, on=["profile_id", "device_kind"], how="left")
        .join(peaks, on=["profile_id", "device_kind"], how="left")
        .with_columns(  # an fp32 or fp8 op has its precision's roof where the chip table has one (sql/ops/roofline.sql)
            pl.when(pl.col("precision") == "fp32").then(pl.coalesce("peak_fp32_flops_per_s", "peak_flops_per_s"))
            .when(pl.col("precision") == "fp8").then(pl.coalesce("peak_fp8_flops_per_s", "peak_flops_per_s"))
            .otherwise(pl.col("peak_flops_per_s")).alias("peak_flops_per_s"),
        )
        .with_columns(
            (pl.col("flops") / seconds("total_time_ps")).alias("flop_rate"),
            (pl.col("bytes_accessed") / seconds("bandwidth_time_ps")).alias("memory_bandwidth"),
            (pl.col("hbm_bytes") / seconds("bandwidth_time_ps")).alias("hbm_bandwidth"),
            *[(pl.col(f"{name}_bytes") / seconds("bandwidth_time_ps")).alias(f"{name}_bandwidth")
              for name in ("vmem_read", "vmem_write", "cmem_read", "cmem_write")],
        )
        .with_columns(
            (pl.col("flop_rate") / pl.col("peak_flops_per_s")).alias("flop_utilization"),
            (pl.col("hbm_bandwidth") / pl.col("peak_hbm_bytes_per_s")).alias("hbm_utilization"),
            *[pl.when(pl.col(f"{name}_bytes") > 0).then(pl.col(f"{name}_bandwidth") / pl.col(f"peak_{name}_bytes_per_s"))
              .otherwise(None).alias(f"{name}_utilization") for name in ("vmem_read", "vmem_write", "cmem_read", "cmem_write")],
        )
    )
    utilizations = ["flop_utilization", "hbm_utilization", "cmem_read_utilization", "cmem_write_utilization",
                    "vmem_read_utilization", "vmem_write_utilization"]
    labels = ["compute", "HBM", "CMEM read", "CMEM write", "VMEM read", "VMEM write"]
    # Without FLOPs (operand_bytes: bytes only) no side of the ridge can be told (sql/ops/roofline.sql).
    out = out.with_columns(pl.when(pl.col("flops").is_null()).then(0.0)
                           .otherwise(pl.max_horizontal([pl.col(c).fill_null(0) for c in utilizations]))
                           .alias("max_utilization"))
    bound: Any = pl.when(pl.col("max_utilization") <= 0).then(pl.lit("unknown"))
    for column, label in zip(utilizations, labels):
        bound = bound.when(pl.col(column) == pl.col("max_utilization")).then(pl.lit(label))
    out = out.with_columns(
        bound.otherwise(None).alias("bound_by"),
        pl.when(pl.col("max_utilization") > 0).then(pl.col("max_utilization")).otherwise(None).alias("roofline_efficiency"),
        (pl.col("max_utilization") > 1).alias("above_roof"),
        pl.when(pl.col("max_utilization") <= 1).then(None)
        .when(pl.col("flop_utilization") == pl.col("max_utilization"))
        .then(pl.format("compute above its roof (peak from {}): the peak is below what the op achieved, or its FLOPs are "
                        "overcounted", pl.col("peak_flops_source").fill_null("unknown")))
        .when(pl.col("hbm_utilization") == pl.col("max_utilization"))
        .then(pl.format("HBM above its roof (peak from {}): the peak is below what the op achieved, or its bytes are "
                        "overcounted", pl.col("peak_hbm_source").fill_null("unknown")))
        .otherwise(pl.lit("on-chip memory above its roof (peak from profile): the peak is below what the op achieved, or "
                          "its bytes are overcounted")).alias("above_roof_reason"),
        (pl.col("self_time_ps") / pl.when(pl.col("device_time_ps") != 0).then(pl.col("device_time_ps"))).alias("self_time_share"),
        (pl.col("flops") / pl.when(pl.col("bytes_accessed") != 0).then(pl.col("bytes_accessed"))).alias("operational_intensity"),
        (pl.col("flops") / pl.when(pl.col("hbm_bytes") != 0).then(pl.col("hbm_bytes"))).alias("hbm_operational_intensity"),
        (pl.col("peak_flops_per_s") / pl.col("peak_hbm_bytes_per_s")).alias("ridge_point"),
    )
    columns = [
        "row_kind", "profile_id", "device_kind", "program_id", "module", "op", "input_shapes", "input_dtypes", "precision",
        "category", "cost_source", "devices", "occurrences", "total_time_ps", "self_time_ps", "device_time_ps", "self_time_share", "async_window_ps",
        "flops", "bytes_accessed", "hbm_bytes", "vmem_read_bytes", "vmem_write_bytes", "cmem_read_bytes", "cmem_write_bytes",
        "flop_rate", "memory_bandwidth", "hbm_bandwidth", "operational_intensity", "hbm_operational_intensity",
        "peak_flops_per_s", "peak_hbm_bytes_per_s", "peak_vmem_read_bytes_per_s", "peak_vmem_write_bytes_per_s",
        "peak_cmem_read_bytes_per_s", "peak_cmem_write_bytes_per_s", "peak_flops_source", "peak_hbm_source",
        "device_model", "hardware_chip", "ridge_point", "flop_utilization", "hbm_utilization",
        "vmem_read_utilization", "vmem_write_utilization", "cmem_read_utilization", "cmem_write_utilization",
        "bound_by", "roofline_efficiency", "above_roof", "above_roof_reason",
    ]
    order = pl.col("row_kind").replace_strict({"profile": 0, "program": 1, "op": 2}, return_dtype=pl.Int8)
    return (
        out.lazy().with_columns(order.alias("_order"))
        .sort(["profile_id", "device_kind", "_order", "self_time_ps", "program_id", "op", "input_shapes", "input_dtypes"],
              descending=[False, False, False, True, False, False, False, False], nulls_last=True)
        .select(columns)
    )


def _peaks(table: Callable[[str], pl.LazyFrame], op_devices: pl.DataFrame, options: Mapping[str, Any]) -> pl.DataFrame:
    """The roofs per (profile, device kind) by the SQL's one definition (``sql/ops/_peaks.sql``), over the frames."""
    import polars as pl

    frames = {
        "devices": table("devices").collect().to_arrow(),
        "device_stats": table("device_stats").collect().to_arrow(),
        "op_stats": op_devices.unique().to_arrow(),  # the devices that ran ops
    }
    text, params = library().runnable("ops._peaks", {k: v for k, v in options.items() if k != "top"})
    con = connect_views({name: f"SELECT * FROM _frame_{name}" for name in frames},
                        arrow={f"_frame_{name}": rows for name, rows in frames.items()})
    try:
        return pl.DataFrame(query_rows(con, text, params))
    finally:
        con.close()


# ---------------------------------------------------------------------------
# Chart
# ---------------------------------------------------------------------------

_COLORS = {
    "compute": "#d62728", "HBM": "#1f77b4", "VMEM read": "#2ca02c", "VMEM write": "#98df8a",
    "CMEM read": "#9467bd", "CMEM write": "#c5b0d5", "unknown": "#7f7f7f",
}


def _op_label(row: Mapping[str, Any]) -> str:
    """An op's name for a chart, with a PyTorch op's tensor shapes: ``aten::mm [8944,1024]x[1024,2816]``."""
    name = row["op"] if len(row["op"] or "") <= 32 else row["op"][:30] + "…"
    try:
        dims = json.loads(row.get("input_shapes") or "[]")
    except ValueError:
        return name
    tensors = ["[" + ",".join(map(str, d)) + "]" for d in dims if isinstance(d, list) and d and all(isinstance(x, int) for x in d)]
    return f"{name} {'x'.join(tensors)}" if tensors else name


def require_matplotlib() -> None:
    """Raise ImportError, one line saying what to install, unless matplotlib (the ``plot`` extra) is importable:
    what ``xprosql roofline --out chart.png`` asks before it does any work."""
    try:
        import matplotlib  # noqa: F401  (the package alone: pyplot loads when drawing)
    except ImportError as exc:
        raise ImportError("a PNG, SVG or PDF roofline chart needs matplotlib: pip install 'xprosql[plot]' "
                          "(or write --out chart.html, drawn with plotly, which xprosql installs)") from exc


def plot_roofline(
    frame: pl.DataFrame,
    out: str | os.PathLike[str],
    *,
    profile_id: str | None = None,
    device_kind: str | None = None,
    label_top: int = 8,
    title: str | None = None,
) -> Path:
    """Draw a log-log roofline of one (profile, device kind) of a :func:`roofline` frame into ``out``.

    The compute roof is flat at the peak FLOP/s; each memory with a known peak
    adds a slanted roof (bandwidth x intensity). Ops are points at (operational
    intensity, FLOP/s), sized by self time and coloured by ``bound_by``; the
    ``label_top`` ops with the most self time are named, and a star marks the
    profile's total. Ops without FLOPs (copies, broadcasts) cannot sit on a log
    axis: a note gives their share of device time. Needs matplotlib (the
    ``plot`` extra). Without ``profile_id`` the (profile, device kind) with the
    most device time is drawn.

    Example:
        >>> plot_roofline(run.roofline().pl(), "roofline.png")              # doctest: +SKIP
    """
    import polars as pl

    require_matplotlib()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    profiles = frame.filter(pl.col("row_kind") == "profile")
    if profile_id is not None:
        profiles = profiles.filter(pl.col("profile_id") == profile_id)
    if device_kind is not None:
        profiles = profiles.filter(pl.col("device_kind") == device_kind)
    profiles = profiles.filter(pl.col("peak_flops_per_s").is_not_null() & pl.col("peak_hbm_bytes_per_s").is_not_null())
    if profiles.is_empty():
        raise ValueError("no (profile, device kind) with known peak FLOP/s and memory bandwidth to draw (CPU profiles "
                         "record none): give roofline() peak_flops_per_s= and peak_hbm_bytes_per_s= (the command "
                         "line: --peak-flops and --peak-hbm-bandwidth, or --measure-cpu-peaks)")
    total = profiles.sort("device_time_ps", descending=True, nulls_last=True).row(0, named=True)
    key = (pl.col("profile_id") == total["profile_id"]) & (pl.col("device_kind") == total["device_kind"])
    ops = frame.filter(key & (pl.col("row_kind") == "op"))
    drawn = ops.filter((pl.col("flops") > 0) & (pl.col("bytes_accessed") > 0) & (pl.col("flop_rate") > 0))
    hidden = ops.filter(~((pl.col("flops") > 0) & (pl.col("bytes_accessed") > 0) & (pl.col("flop_rate") > 0)))
    if drawn.is_empty():
        costed = ops.filter(pl.col("cost_source").is_not_null()).height
        raise ValueError(
            f"no op of profile {total['profile_id']} ({total['device_kind']}) has FLOPs and bytes to place "
            f"({ops.height} ops, {costed} with cost data): " + (
                "its ops do no FLOPs (copies, data movement)" if costed else
                "PyTorch traces need record_shapes=True (or with_flops=True) for op costs; GPU kernels that no op "
                "in the trace launched have none" if total["device_kind"] == "gpu" else
                "the profile records no op costs"))

    peak = total["peak_flops_per_s"]
    roofs = [("HBM", total["peak_hbm_bytes_per_s"])]
    for name in ("vmem_read", "vmem_write", "cmem_read", "cmem_write"):
        value = total.get(f"peak_{name}_bytes_per_s")
        if value:
            roofs.append((name.replace("_", " ").upper().replace(" READ", " read").replace(" WRITE", " write"), value))
    intensities = [x for x in drawn["operational_intensity"].to_list() if x] + [peak / bw for _, bw in roofs]
    if total.get("operational_intensity"):
        intensities.append(total["operational_intensity"])
    x_lo, x_hi = min(intensities) / 10, max(intensities) * 10
    rates = [r for r in drawn["flop_rate"].to_list() if r]
    if total.get("flop_rate"):
        rates.append(total["flop_rate"])
    y_lo = (min(rates) if rates else peak / 1e4) / 10
    y_hi = peak * 3

    fig, ax = plt.subplots(figsize=(9, 6), dpi=120)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(x_lo, x_hi)
    ax.set_ylim(y_lo, y_hi)
    ax.axhline(peak, color="black", linewidth=1.6)
    ax.text(x_hi / 1.5, peak * 1.15, f"peak {peak / 1e12:,.4g} TFLOP/s ({total['peak_flops_source']})", ha="right", fontsize=8)
    styles = ["-", "--", ":", "-.", (0, (1, 1))]
    roof_lines = []
    for (name, bandwidth), style in zip(roofs, styles):
        ridge = peak / bandwidth
        xs = [x_lo, ridge]
        ax.plot(xs, [bandwidth * x for x in xs], color="black", linestyle=style, linewidth=1.2)
        ax.axvline(ridge, color="gray", linewidth=0.5, linestyle=":")
        ax.text(ridge * 1.05, peak / 2.5, f"ridge {ridge:.3g}", fontsize=7, rotation=90, va="top", ha="left", color="gray")
        roof_lines.append((name, bandwidth, ridge))

    device_time = total["device_time_ps"] or 1
    shares = (drawn["self_time_ps"] / device_time).to_list()
    sizes = [30 + 900 * (s or 0) ** 0.5 for s in shares]
    colors = [_COLORS.get(b or "unknown", _COLORS["unknown"]) for b in drawn["bound_by"].to_list()]
    ax.scatter(drawn["operational_intensity"].to_list(), drawn["flop_rate"].to_list(), s=sizes, c=colors,
               alpha=0.7, edgecolors="black", linewidths=0.5, zorder=3)
    labelled = drawn.sort("self_time_ps", descending=True).head(label_top)
    for i, row in enumerate(labelled.iter_rows(named=True)):
        name = _op_label(row)
        ax.annotate(f"{name} ({100 * (row['self_time_share'] or 0):.2g}%)", (row["operational_intensity"], row["flop_rate"]),
                    xytext=(8, 10 - 12 * i), textcoords="offset points", fontsize=7,
                    arrowprops={"arrowstyle": "-", "color": "gray", "linewidth": 0.5})
    if total.get("flop_rate") and total.get("operational_intensity"):
        ax.scatter([total["operational_intensity"]], [total["flop_rate"]], marker="*", s=260, c="gold",
                   edgecolors="black", zorder=4)
        ax.annotate("profile total", (total["operational_intensity"], total["flop_rate"]), xytext=(8, -14),
                    textcoords="offset points", fontsize=8)
    for bound in sorted(set(drawn["bound_by"].to_list()) - {None}):
        ax.scatter([], [], c=_COLORS.get(bound, _COLORS["unknown"]), label=f"{bound}-bound" if bound != "unknown" else "unknown",
                   edgecolors="black", linewidths=0.5)
    if not hidden.is_empty():
        share = (hidden["self_time_ps"].sum() or 0) / device_time
        ax.text(0.99, 0.02, f"{hidden.height} ops without FLOPs not drawn ({100 * share:.3g}% of device time)",
                transform=ax.transAxes, ha="right", fontsize=8, color="dimgray")
    above = drawn.filter(pl.col("above_roof")) if "above_roof" in drawn.columns else drawn.clear()
    if not above.is_empty():
        ax.text(0.01, 0.98, f"{above.height} ops above the roof: the peaks are too low for this profile "
                f"({total['peak_flops_source']})", transform=ax.transAxes, ha="left", va="top", fontsize=8, color="firebrick")
    ax.legend(loc="lower right", bbox_to_anchor=(1.0, 0.06), fontsize=8, title="ops (area ~ self time)", title_fontsize=8)
    ax.set_xlabel("operational intensity (FLOP / byte accessed)")
    ax.set_ylabel("FLOP/s")
    model = total.get("device_model") or total["device_kind"]
    ax.set_title(title or f"Roofline: {model}, profile {total['profile_id']}", fontsize=11)
    ax.grid(True, which="major", linewidth=0.3)
    fig.tight_layout()
    # Roof labels lie along their roofs: the angle is known once the layout is.
    for i, (name, bandwidth, ridge) in enumerate(roof_lines):
        x = max(x_lo * 2, ridge / (300 if i else 30))
        (x0, y0), (x1, y1) = ax.transData.transform([(x, bandwidth * x), (x * 10, bandwidth * x * 10)])
        angle = math.degrees(math.atan2(y1 - y0, x1 - x0))
        above = bandwidth == max(b for _, b, _ in roof_lines)  # the others below: no label between two close roofs
        ax.text(x, bandwidth * x * (1.25 if above else 0.8), f"{name} {bandwidth / 1e9:,.0f} GB/s", fontsize=8,
                rotation=angle, rotation_mode="anchor", ha="left", va="bottom" if above else "top")
    path = Path(out)
    fig.savefig(path)
    plt.close(fig)
    return path
