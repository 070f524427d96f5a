"""The ``xprosql`` commands behind :mod:`xprosql.cli`: each ``_cmd_<name>`` runs one subcommand.

Kept apart from the parser so that ``xprosql --help`` and a mistyped option answer without
loading DuckDB, Polars or pyarrow.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from xprosql.errors import ParameterError, XprosqlError, one_line

if TYPE_CHECKING:
    import polars as pl
    import pyarrow as pa

    from xprosql._cli_table import Column
    from xprosql.engine import Result
    from xprosql.run import Run

__all__ = ["COMMANDS", "user_errors"]

DEMO_PROFILE = "tpu_v6e_inference.xplane.pb"


class _NoPandas:
    """An import finder that answers "not installed" for pandas."""

    @staticmethod
    def find_spec(name: str, path: object = None, target: object = None) -> None:
        if name == "pandas":
            raise ModuleNotFoundError("pandas is not loaded by this command", name=name)


def _arrow_without_pandas() -> None:
    """Let pyarrow run as if pandas were not installed (it is an optional extra of xprosql).

    pyarrow imports pandas, where installed, the first time it converts a Python value, to ask whether the value is
    a pandas object: 0.35 s and 50 MB that a command writing tables never uses. pyarrow asks once per process, so
    the answer it gets here is the one it keeps; pandas itself stays importable."""
    if "pandas" in sys.modules:
        return
    import pyarrow as pa

    sys.meta_path.insert(0, _NoPandas)
    try:
        pa.array([0])
    finally:
        sys.meta_path.remove(_NoPandas)


def _parse_tags(pairs: Sequence[str]) -> dict[str, str]:
    tags: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise XprosqlError(f"--tag wants KEY=VALUE, got {pair!r}")
        tags[key] = value
    return tags


def _storage_options(args: argparse.Namespace) -> dict[str, str] | None:
    """``--storage-option KEY=VALUE`` (parsed by :mod:`xprosql.cli`) as the Python API's ``storage_options``: delta-rs's
    keys for object storage's credentials and endpoint, the last of a key winning; None when none was given (the
    environment's alone)."""
    return dict(getattr(args, "storage_options", None) or ()) or None


def _cmd_ingest(args: argparse.Namespace) -> int:
    _arrow_without_pandas()
    from xprosql.ingest import IngestInterrupted, ingest

    compacts: dict[str, bool | str] = {"auto": "auto", "always": True, "never": False}
    compact = compacts[args.compact]
    interrupted = False
    client = None
    if args.cluster:
        try:
            from distributed import Client
        except ImportError:
            raise XprosqlError("--cluster needs the dask extra: pip install 'xprosql[dask]'") from None
        try:
            client = Client(args.cluster, timeout=30)
        except OSError as exc:
            raise XprosqlError(f"--cluster {args.cluster}: cannot reach the scheduler: {exc}") from None
    try:
        report = ingest(
            args.sources, into=args.into, jobs=args.jobs, tags=_parse_tags(args.tag), progress=args.progress, compact=compact,
            keep_secrets=args.keep_secrets, cluster=client, storage_options=_storage_options(args),
        )
    except IngestInterrupted as exc:
        report, interrupted = exc.report, True
    finally:
        if client is not None:
            client.close()
    if not args.quiet:
        for item in report.ingested:
            secrets = f", {item.redacted_secrets} secrets redacted" if item.redacted_secrets else ""
            print(f"ingested {item.path} -> profile {item.profile_id} ({item.rows.get('events', 0)} events{secrets})")
        for item in report.skipped:
            print(f"already present {item.path} (profile {item.profile_id})")
    for path, reason in report.failed:  # at the end, after the progress bar: the list to act on
        print(f"error: {path}: {one_line(reason)}", file=sys.stderr)
    print(f"{len(report.ingested)} ingested, {len(report.skipped)} already present, {len(report.failed)} failed")
    if report.compaction is not None and report.compaction.files_written:
        print(f"compacted: {report.compaction}")
    if interrupted:
        print(f"interrupted: {len(report.not_done)} files not done; run the same command again to resume", file=sys.stderr)
        return 130
    if report.stopped:
        print(f"error: stopped: {report.stopped}; {len(report.not_done)} files not done: free space and run the same "
              f"command again to resume", file=sys.stderr)
    return 0 if report.ok else 1


def _cmd_compact(args: argparse.Namespace) -> int:
    _arrow_without_pandas()
    from xprosql.ingest import compact

    print(compact(args.dir, storage_options=_storage_options(args)))
    return 0


def _cmd_upgrade(args: argparse.Namespace) -> int:
    _arrow_without_pandas()
    from xprosql.upgrade import upgrade

    print(upgrade(args.dir))
    return 0

def _cmd_analyses(args: argparse.Namespace) -> int:
    from xprosql.engine.catalogue import analyses, describe
    from xprosql.engine.library import VALUE_SYNTAX

    if args.name:
        print(describe(args.name))
        print(f"\n{VALUE_SYNTAX}")
        return 0
    for row in analyses().rows():
        name, _area, description, fleet = row[:4]
        print(f"{name:<30} {'(fleet) ' if fleet else ''}{description}")
    print("\nxprosql analyses NAME: its parameters and columns; xprosql sql DIR --analysis NAME runs it")
    return 0


def _parse_params(pairs: Sequence[str]) -> dict[str, str]:
    """``NAME=VALUE`` pairs as written: the library reads each value as its parameter's declared type
    (:meth:`xprosql.engine.library.Library.from_text`), the same checks as Python's then apply."""
    params: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise XprosqlError(f"--param wants NAME=VALUE, got {pair!r}")
        params[name] = value
    return params


def _cmd_sql(args: argparse.Namespace) -> int:
    from xprosql.engine.library import library, parse_value, shown_columns
    from xprosql.run import load

    if args.format == "parquet" and not args.out and not args.show:
        raise XprosqlError("--format parquet needs --out FILE")
    if args.analysis:
        if args.query:
            raise XprosqlError("give a SQL query or --analysis NAME, not both")
        module_id = library().module(args.analysis).id
        params = library().from_text(module_id, _parse_params(args.param))
        if args.show:  # the SQL as it runs, the values in place of $names: it runs as printed
            print(library().shown(module_id, params).rstrip())
            return 0
        result = load(args.dir, storage_options=_storage_options(args)).analysis(module_id, **params)
        # A terminal shows the columns its header names (-- Show:), and says how to see the rest.
        shown, what = shown_columns(library().module(module_id)), module_id
    else:
        if args.show:
            raise XprosqlError("--show needs --analysis NAME")
        if not args.query:
            raise XprosqlError("give a SQL query, or --analysis NAME")
        # No declaration to read the values by: each is whichever of NULL, a number, a list or a string it reads as.
        params = {name: parse_value(text) for name, text in _parse_params(args.param).items()}
        result = load(args.dir, storage_options=_storage_options(args)).sql(args.query, params or None)
        shown, what = (), "the result"
    _print_result(result, args, shown=shown, what=what)
    return 0


def _print_result(result: Result, args: argparse.Namespace, *, shown: Sequence[str] = (),
                  what: str = "the result") -> None:
    """``result`` as ``--format`` says, to ``--out`` or stdout; a table shows ``--columns``, else ``shown``."""
    from xprosql._cli_output import frame_of, print_table, write

    if args.format == "table":
        print_table(result, max_rows=args.max_rows, columns=getattr(args, "columns", None), shown=shown, what=what)
    elif args.format == "parquet":
        import pyarrow.parquet as pq

        pq.write_table(result.arrow(), args.out, compression="zstd")
    else:
        write(frame_of(result.arrow(), nested_as_json=args.format == "csv"), args.format, args.out)


def _cmd_compare(args: argparse.Namespace) -> int:
    from xprosql.engine.library import library, shown_columns
    from xprosql.run import load

    if args.format == "parquet" and not args.out:
        raise XprosqlError("--format parquet needs --out FILE")
    # Run.compare's cohorts (SQL expressions on profiles), so the command and Python mean the same by them.
    run = load(args.dir, storage_options=_storage_options(args))
    result = run.compare(baseline=args.baseline, candidate=args.candidate, by=args.by,
                         peak_flops_per_s=args.peak_flops, peak_hbm_bytes_per_s=args.peak_hbm_bandwidth)
    module = library().module("fleet.compare_bottlenecks" if args.by == "bottleneck" else "fleet.compare")
    _print_result(result, args, shown=shown_columns(module), what=module.id)
    return 0


def _cmd_diagnose(args: argparse.Namespace) -> int:
    from xprosql.engine.library import library, shown_columns
    from xprosql.run import load

    if args.format == "parquet" and not args.out:
        raise XprosqlError("--format parquet needs --out FILE")
    thresholds: dict[str, dict[str, str]] = {}
    for name, value in _parse_params(args.param).items():
        rule, dot, parameter = name.partition(".")
        if not dot or not parameter:
            raise XprosqlError(f"--param {name}=...: write RULE.NAME=VALUE, e.g. gpu_gaps.min_gap_ps=1e9")
        thresholds.setdefault(rule, {})[parameter] = value
    for rule in thresholds:  # a threshold of no rule is a mistake, whichever rules run
        if f"diagnose.{rule}" not in library().modules:
            raise XprosqlError(f"--param {rule}.…: no rule {rule!r}; xprosql analyses lists them as diagnose.RULE")
    # Each value read as its rule's declared type, then checked as Python's are.
    typed = {rule: library().from_text(f"diagnose.{rule}", given) for rule, given in thresholds.items()}
    run = load(args.dir, storage_options=_storage_options(args))
    result = run.diagnose(profiles=args.profile or None, where=args.where, job=args.job,
                          rules=args.rule or (list(typed) if typed else None), thresholds=typed or None,
                          min_severity=args.min_severity)
    if args.format != "text":
        _print_result(result, args, shown=shown_columns(library().module("diagnose.findings")), what="diagnose")
        return 0
    rows = result.arrow().to_pylist()
    names = run.engine.source_names(sorted({r["profile_id"] for r in rows})) if rows else {}
    for row in rows[: args.max_rows]:
        where = ", ".join(part for part in (
            names.get(row["profile_id"], row["profile_id"]), row["job"] and f"job {row['job']}",
            row["rank"] is not None and f"rank {row['rank']}", row["device"],
            row["step"] is not None and f"step {row['step']}") if part)
        print(f"[{row['severity']}] {row['rule']}: {row['title']}")
        print(f"    where:     {row['profile_id']} ({where})")
        print(f"    saving:    {_duration(row['expected_saving_ps'])} of step time ({100 * row['expected_saving_share']:.1f}%): "
              f"{row['saving_method']}")
        print(f"    evidence:  {row['evidence']}")
        print(f"    fix:       {row['fix']}")
        print(f"    reference: {row['reference']}")
        print()
    shown = min(len(rows), args.max_rows)
    more = f" ({len(rows) - shown} more: --max-rows, or --format csv for every one)" if len(rows) > shown else ""
    print(f"{len(rows)} finding{'s' if len(rows) > 1 else ''}{more}" if rows else "no findings: no rule fired at its thresholds")
    return 0


def _duration(ps: int) -> str:
    for scale, unit in ((1e12, "s"), (1e9, "ms"), (1e6, "us")):
        if ps >= scale:
            return f"{ps / scale:.3f} {unit}"
    return f"{ps / 1e3:.0f} ns"


def _cmd_roofline(args: argparse.Namespace) -> int:
    _arrow_without_pandas()
    from xprosql._cli_output import frame_of, print_columns, print_frame, write
    from xprosql.queries.roofline import plot_roofline, require_matplotlib
    from xprosql.run import load

    as_page = bool(args.out) and Path(args.out).suffix.lower() in (".html", ".htm")
    if args.out:  # the chart's library first: a missing one is said before any work, not after the table
        if as_page:
            from xprosql.report import plotly_js, roofline_page

            plotly_js()
        else:
            require_matplotlib()
    peaks: dict[str, object] = {}
    if args.measure_cpu_peaks:
        from xprosql.models.hardware import measure_cpu_peaks

        flops, bandwidth = measure_cpu_peaks()
        peaks = {"peak_flops_per_s": flops, "peak_hbm_bytes_per_s": bandwidth, "peak_source": "measured"}
        print(f"measured CPU peaks: {flops / 1e9:.1f} GFLOP/s, {bandwidth / 1e9:.1f} GB/s", file=sys.stderr)
    if args.peak_flops is not None:
        peaks.update(peak_flops_per_s=args.peak_flops, peak_source="user")
    if args.peak_hbm_bandwidth is not None:
        peaks.update(peak_hbm_bytes_per_s=args.peak_hbm_bandwidth, peak_source="user")
    run = load(args.dir, storage_options=_storage_options(args))
    result = run.roofline(profiles=args.profile or None, top=args.top, **peaks)  # type: ignore[arg-type]
    frame = result.pl() if args.out or args.format != "table" else None
    if frame is not None and args.out:
        _check_drawable(frame, args.profile[0] if args.profile else None)
    if frame is not None and args.format in ("csv", "json"):
        write(frame_of(frame.to_arrow(), nested_as_json=args.format == "csv"), args.format, None)
    elif args.format == "table":
        # Drawn from Arrow, without Polars (0.15-0.3 s to import); a table the terminal must wrap goes to Polars.
        shown = _roofline_shown(result.arrow())
        if not print_columns(_columns_of(shown), max_rows=args.max_rows, float_precision=4, what="the roofline"):
            import polars as pl

            print_frame(pl.DataFrame(shown), max_rows=args.max_rows, float_precision=4, what="the roofline")
    if args.out:
        assert frame is not None
        profile_id = args.profile[0] if args.profile else None
        try:
            path = (roofline_page(frame, args.out, profile_id=profile_id) if as_page
                    else plot_roofline(frame, args.out, profile_id=profile_id))
        except ValueError as exc:  # nothing to draw: said as the user error it is
            raise XprosqlError(f"roofline --out: {exc}") from None
        print(f"wrote {path}", file=sys.stderr)
    return 0


def _roofline_shown(table: pa.Table) -> pa.Table:
    """The roofline's rows as the terminal shows them: the profile id's first 8 characters, times in ms, shares in
    %, rates in TFLOP/s and GB/s (rounded as Polars' ``round``: half to even of the scaled value)."""
    import pyarrow as pa

    def values(name: str) -> list[Any]:
        return table.column(name).to_pylist()

    def scaled(name: str, factor: float, divide: bool = True, digits: int | None = None) -> pa.Array:
        out = []
        for value in values(name):
            if value is not None:
                value = value / factor if divide else factor * value
                value = round(value * 10**digits) / 10**digits if digits is not None else float(value)
            out.append(value)
        return pa.array(out, pa.float64())

    op = [a if a is not None else b for a, b in zip(values("op"), values("module"), strict=True)]
    return pa.table({
        "row_kind": table.column("row_kind"),
        "profile_id": pa.array([v if v is None else v[:8] for v in values("profile_id")], pa.string()),
        "device_kind": table.column("device_kind"), "op": pa.array(op, pa.string()), "category": table.column("category"),
        "occurrences": table.column("occurrences"), "self_ms": scaled("self_time_ps", 1e9, digits=3),
        "self_%": scaled("self_time_share", 100, divide=False, digits=2), "TFLOP/s": scaled("flop_rate", 1e12),
        "HBM GB/s": scaled("hbm_bandwidth", 1e9), "FLOP/B": table.column("operational_intensity"),
        "ridge_point": table.column("ridge_point"), "bound_by": table.column("bound_by"),
        "roofline_efficiency": table.column("roofline_efficiency")})


def _columns_of(table: pa.Table) -> list[Column]:
    """``table``'s columns for :func:`xprosql._cli_output.print_columns` (a type it cannot draw: "?", Polars prints)."""
    from xprosql._cli_table import Column, column_of

    return [column_of(name, table.column(name)) or Column(name, "?", []) for name in table.column_names]


def _check_drawable(frame: pl.DataFrame, profile_id: str | None) -> None:
    """Raise, naming the options that give them, unless a profile of ``frame`` has both peaks a chart needs."""
    import polars as pl

    totals = frame.filter(pl.col("row_kind") == "profile")
    if profile_id is not None:
        totals = totals.filter(pl.col("profile_id") == profile_id)
    if totals.filter(pl.col("peak_flops_per_s").is_not_null() & pl.col("peak_hbm_bytes_per_s").is_not_null()).is_empty():
        which = f"profile {profile_id} has no device" if profile_id else "no profile has a device"
        raise XprosqlError(f"roofline --out: {which} with known peak FLOP/s and memory bandwidth to draw "
                           "the roofs (CPU profiles record none): give --peak-flops FLOP/S and --peak-hbm-bandwidth "
                           "BYTES/S, or --measure-cpu-peaks on the machine the profiles were taken on")


def _cmd_tables(args: argparse.Namespace) -> int:
    # From the warehouse's log alone: neither DuckDB nor Polars is loaded to list the tables.
    _arrow_without_pandas()
    from xprosql.models.tables import PARTITION_COLUMN, TABLES, column_unit
    from xprosql.warehouse import Warehouse

    snapshot = Warehouse(args.dir, storage_options=_storage_options(args)).snapshot()
    counts = snapshot.row_counts()
    print(f"{snapshot.root if snapshot.remote else Path(args.dir)}: {len(snapshot.profile_ids)} profiles")
    for table, schema in TABLES.items():
        print(f"\n{table} ({counts[table]} rows)")
        print(f"  {PARTITION_COLUMN:<24} string      the profile (profiles.profile_id)")
        for field in schema:
            unit = column_unit(table, field.name)
            description = (field.metadata or {}).get(b"description", b"").decode()
            type_name = "string" if str(field.type).startswith("dictionary") else str(field.type)
            unit_text = f" [{unit}]" if unit else ""
            print(f"  {field.name:<24} {type_name:<11} {description}{unit_text}")
    return 0


DEMO_INTO = "xprosql-demo"


def _cmd_demo(args: argparse.Namespace) -> int:
    import shlex

    from xprosql._cli_output import print_table
    from xprosql.engine import Result
    from xprosql.ingest import ingest
    from xprosql.run import load
    from xprosql.warehouse import Warehouse

    warehouse = Path(args.into)
    # Kept, to try the next commands on; never into a directory of something else (a warehouse is fine: ingest is idempotent).
    if warehouse.exists() and (not warehouse.is_dir() or (any(warehouse.iterdir()) and not Warehouse(warehouse).is_warehouse())):
        raise XprosqlError(f"demo: {warehouse} exists and is not an xprosql warehouse: give another with --into DIR")
    sample = resources.files("xprosql") / "data" / DEMO_PROFILE
    with resources.as_file(sample) as sample_path:
        report = ingest(sample_path, into=warehouse)
    if not report.ok:
        for path, reason in report.failed:
            print(f"error: {path}: {one_line(reason)}", file=sys.stderr)
        return 1
    run = load(warehouse)
    done = "Ingested" if report.ingested else "Found"  # a second demo finds the sample already there
    print(f"{done} the bundled TPU v6e sample ({DEMO_PROFILE}) in the warehouse {warehouse} (kept: delete it when done)\n")
    print("Tables:", ", ".join(f"{t} {n}" for t, n in run.row_counts().items()), "\n")
    print("Devices with peaks:")
    print_table(run.sql(
        "SELECT device_id, name, kind, model, peak_flops_per_s / 1e12 AS peak_tflops, "
        "peak_hbm_bytes_per_s / 1e9 AS peak_hbm_gb_s FROM devices WHERE kind IN ('tpu', 'gpu') ORDER BY device_id"
    ))
    print("\nTop XLA ops by time on /device:TPU:0 (sql/ops/top_ops.sql):")
    top = run.top_ops(top=8).relation.filter("device = '/device:TPU:0' AND track = 'XLA Ops'").project(
        "device, track, op, category, occurrences, round(total_ps / 1e9, 3) AS total_ms, "
        "round(100 * share_of_track, 1) AS pct")
    print_table(Result(top))
    where = shlex.quote(str(warehouse))
    print("\nNext, on the same warehouse:")
    print(f"  xprosql diagnose {where}                     # what is wrong, what a fix would save, what to change")
    print(f"  xprosql report {where} --out report.html     # one interactive page: bottleneck, steps, ops, roofline, memory")
    print(f"  xprosql roofline {where}                     # every op against the TPU's roofs (--out chart.html draws it)")
    print(f"  xprosql sql {where} \"SELECT name, count(*) AS n, sum(dur_ps) / 1e9 AS ms FROM events "
          "GROUP BY 1 ORDER BY 3 DESC LIMIT 10\"")
    return 0


def _cmd_record(args: argparse.Namespace) -> int:
    import runpy

    from xprosql import cupti

    command = [c for c in args.command if c != "--"] if args.command[:1] == ["--"] else list(args.command)
    if command and Path(command[0]).name.startswith("python"):
        command = command[1:]
    if not command:
        raise XprosqlError("record wants a Python program: xprosql record --into DIR -- python train.py [ARGS]")
    if args.no_ingest and not args.raw_dir:
        raise XprosqlError("record --no-ingest wants --raw-dir DIR: where the recording goes")
    if not args.no_ingest and not args.into:
        raise XprosqlError("record wants --into DIR (the warehouse to ingest into), or --no-ingest --raw-dir DIR")
    raw_dir = Path(args.raw_dir) if args.raw_dir else Path(args.into) / "recordings"
    saved_argv = sys.argv
    exit_code = 0
    metrics = [m.strip() for m in (args.metrics or "").split(",") if m.strip()]
    with cupti.record(raw_dir, metrics=metrics, metrics_device=args.metrics_device) as recording:
        try:
            if command[0] == "-m" and len(command) > 1:
                sys.argv = command[1:]
                runpy.run_module(command[1], run_name="__main__", alter_sys=True)
            else:
                sys.argv = command
                runpy.run_path(command[0], run_name="__main__")
        except SystemExit as exc:  # the program's own exit ends the recording, not xprosql
            exit_code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        finally:
            sys.argv = saved_argv
    print(f"recorded {recording.path}: " + ", ".join(f"{n} {cat}" for cat, n in sorted(recording.counts.items())))
    assert recording.path is not None  # set once the recording has ended
    if args.no_ingest:
        return exit_code
    from xprosql.ingest import ingest  # after the recording: a GPU machine may lack DuckDB and Delta

    report = ingest(recording.path, into=args.into)
    for path, reason in report.failed:
        print(f"error: {path}: {one_line(reason)}", file=sys.stderr)
    return exit_code or (0 if report.ok else 1)


def _cmd_report(args: argparse.Namespace) -> int:
    from xprosql.report import build_report, plotly_js, terminal_summary
    from xprosql.run import load

    if args.out:
        plotly_js()  # the charts' library first: without it, one line saying what to install and no page
    run = load(args.dir, storage_options=_storage_options(args))
    profiles = args.profile or None
    if profiles:
        run.engine.restricted(profiles)  # an id the warehouse lacks is an error, as for every other command
    if args.out:
        report = build_report(run, profiles=profiles, top_ops=args.top, progress=args.progress, sections=args.sections)
        path = report.write(args.out)
        charts = sum(len(p.charts) for p in report.profiles)
        print(f"wrote {path}: {report.fleet.height} profiles, {len(report.profiles)} profile sections, {charts} charts "
              f"({path.stat().st_size / 1e6:.1f} MB, works offline)")
        return 0
    print(terminal_summary(run, profiles=profiles, top_ops=min(args.top, 5)), end="")
    return 0


_TIME_UNITS = {"ps": 1, "ns": 10**3, "us": 10**6, "ms": 10**9, "s": 10**12}


def _time_ps(text: str | None) -> int | None:
    """``1.5ms``, ``250us``, ``2s``, ``1000ns`` or a bare number of ps, as picoseconds."""
    if text is None:
        return None
    number = text.strip().lower()
    unit = next((u for u in ("ps", "ns", "us", "ms", "s") if number.endswith(u)), "ps")
    try:
        return round(float(number.removesuffix(unit) if number.endswith(unit) else number) * _TIME_UNITS[unit])
    except ValueError:
        raise ParameterError(f"{text!r} is not a time: write e.g. 1.5ms, 250us, 2s or a number of ps") from None


def _resolve_profiles(run: Run, wanted: Sequence[str]) -> list[str]:
    """Profile ids from ids, id prefixes or file names (one match each)."""
    rows = run.sql("SELECT profile_id, source_path FROM profiles ORDER BY source_path").rows()
    out = []
    for given in wanted:
        found = [pid for pid, path in rows if pid == given] or [pid for pid, path in rows if pid.startswith(given)] or [
            pid for pid, path in rows if Path(path or "").name == given]
        if len(found) != 1:
            raise ParameterError(f"--profile {given}: {'no' if not found else len(found)} profiles match "
                                 f"(an id, an id prefix or a file name of {run.path})")
        out.append(found[0])
    return out


def _cmd_export(args: argparse.Namespace) -> int:
    from xprosql.run import load

    run = load(args.dir, storage_options=_storage_options(args))
    summary = run.export_trace(args.out, profiles=_resolve_profiles(run, args.profile) if args.profile else None,
                               where=args.where, start_ps=_time_ps(args.start), end_ps=_time_ps(args.end),
                               args=args.args, flows=args.flows, counters=args.counters, memory=args.counters,
                               job_clock=args.job_clock)
    print(summary)
    print("open it in https://ui.perfetto.dev (Open trace file): it loads in the browser, nothing is uploaded")
    return 0


def _cmd_mcp(args: argparse.Namespace) -> int:
    from xprosql.mcp_server import Limits, serve

    limits = Limits(timeout_s=args.timeout, max_rows=args.max_rows, default_rows=min(50, args.max_rows))
    if args.http is not None and not 0 < args.http < 65536:
        raise XprosqlError(f"--http wants a port from 1 to 65535, not {args.http}")
    try:
        serve(args.dir, limits=limits, transport="http" if args.http is not None else "stdio", port=args.http or 0,
              storage_options=_storage_options(args))
    except KeyboardInterrupt:  # the usual end of an HTTP server
        return 130
    return 0


def _cmd_watch(args: argparse.Namespace) -> int:
    _arrow_without_pandas()
    import warnings

    from xprosql.engine.library import library
    from xprosql.watch import watch

    params = library().from_text("fleet.anomalies", _parse_params(args.param)) if args.param else {}
    stream = watch(args.logdir, into=args.into, tags=_parse_tags(args.tag), interval=args.interval,
                   max_interval=args.max_interval, stable=args.stable, settle=args.settle,
                   anomalies=args.anomalies, anomaly_params=params, compact=args.compact, keep_secrets=args.keep_secrets,
                   inotify=args.inotify)
    last = None
    # Said as they come, not gathered for the end (cli.main's way): a watch runs for days.
    with warnings.catch_warnings():
        warnings.simplefilter("default")
        warnings.showwarning = lambda message, *_, **__: print(f"warning: {one_line(str(message))}", file=sys.stderr)
        for report in stream:
            last = report
            if report.started:
                print(f"watching {args.logdir} into {args.into} (SIGINT or SIGTERM stops it)", file=sys.stderr, flush=True)
            if not args.quiet:
                for item in report.ingested:
                    print(f"ingested {item.path} -> profile {item.profile_id} ({item.rows.get('events', 0)} events)")
                for item in report.skipped:
                    print(f"already present {item.path} (profile {item.profile_id})")
            for anomaly in report.anomalies:
                print(anomaly)
            if report.checked and not args.quiet:
                print(f"checked {', '.join(report.checked)} against the job's recent profiles: "
                      f"{len(report.anomalies)} anomalies")
            for path, reason in report.failed:
                print(f"error: {path}: {one_line(reason)}", file=sys.stderr)
            if report.compaction is not None and report.compaction.files_written:
                print(f"compacted: {report.compaction}")
            if report.stopped:
                print(f"error: {report.stopped}; the files left are tried again", file=sys.stderr)
            sys.stdout.flush()
            sys.stderr.flush()
    if last is not None:
        print(f"stopped by {last.signal}: {last.totals}; every profile committed is whole: run the same command to "
              "go on", flush=True)
    return 1 if last is not None and last.totals.failed else 0


def user_errors() -> tuple[type[BaseException], ...]:
    """Errors a command reports as one line: the user's input, not a bug of xprosql. Polars' and Arrow's count
    when the command loaded them (one that did not load them cannot have raised theirs)."""
    errors: list[type[BaseException]] = [XprosqlError, KeyError, OSError, ImportError]
    if "polars" in sys.modules:
        errors.append(sys.modules["polars"].exceptions.PolarsError)
    if "pyarrow" in sys.modules:
        errors.append(sys.modules["pyarrow"].ArrowException)
    return tuple(errors)


COMMANDS = {name.removeprefix("_cmd_"): value for name, value in list(globals().items()) if name.startswith("_cmd_")}
