"""The ``xprosql`` command line.

Example:
    $ xprosql ingest logs/ --into run/
    $ xprosql ingest fleet/ --into run/ --jobs 8 --tag team=nlp
    $ xprosql compact run/
    $ xprosql upgrade old_run/
    $ xprosql sql run/ "SELECT name, sum(dur_ps) FROM events GROUP BY 1 ORDER BY 2 DESC LIMIT 10"
    $ xprosql tables run/
    $ xprosql demo
    $ xprosql report run/ --out report.html
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import tempfile
import warnings
from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any, NoReturn

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from xprosql._version import __version__
from xprosql.engine import Result
from xprosql.errors import ParameterError, XprosqlError
from xprosql.ingest import ingest
from xprosql.models.tables import PARTITION_COLUMN, TABLES, column_unit
from xprosql.run import Run, load

__all__ = ["entry", "main"]

DEMO_PROFILE = "tpu_v6e_inference.xplane.pb"


def _print_table(result: Result, *, max_rows: int = 50) -> None:
    with pl.Config(tbl_rows=max_rows, fmt_str_lengths=70, tbl_width_chars=200, tbl_hide_dataframe_shape=True):
        print(_printable(_frame(result.arrow(), nested_as_json=False)))


# Control characters as Unicode's pictures of them (ESC as ␛): names from a profile cannot drive the terminal.
_CONTROLS = [chr(c) for c in (*range(0x20), 0x7F)]
_PICTURES = [chr(0x2400 + c) for c in range(0x20)] + ["\u2421"]


def _printable(frame: pl.DataFrame) -> pl.DataFrame:
    """``frame`` with the control characters of its text shown, not sent, for a terminal."""
    return frame.with_columns(pl.col(pl.String).str.replace_many(_CONTROLS, _PICTURES))


def _frame(table: pa.Table, *, nested_as_json: bool) -> pl.DataFrame:
    """A result as a frame that every output format takes: binary values as hex text (at any depth), a map whose
    keys are not text as its entries (a list of key, value structs), nested values (lists, structs, maps) as JSON
    text when ``nested_as_json`` (CSV has no nesting), and values of types Polars cannot hold (intervals,
    unions) as text."""
    columns = []
    for name, column in zip(table.column_names, table.columns):
        type_ = column.type
        if nested_as_json and pa.types.is_nested(type_):
            texts = [None if v is None else json.dumps(_plain(v, type_, objects=True), default=_json_default,
                                                       ensure_ascii=False) for v in column.to_pylist()]
            column = pa.chunked_array([pa.array(texts, pa.string())])
        elif _output_type(type_) != type_:
            column = pa.chunked_array([pa.array([_plain(v, type_) for v in column.to_pylist()], _output_type(type_))])
        try:
            columns.append(pl.from_arrow(column).alias(name))  # type: ignore[union-attr]
        except (pl.exceptions.PolarsError, pa.ArrowException, TypeError, ValueError):
            columns.append(pl.Series(name, [None if v is None else str(v) for v in column.to_pylist()], pl.String))
    return pl.DataFrame(columns)


def _is_binary(type_: pa.DataType) -> bool:
    return (pa.types.is_binary(type_) or pa.types.is_large_binary(type_) or pa.types.is_fixed_size_binary(type_)
            or getattr(pa.types, "is_binary_view", _never)(type_))


def _is_text(type_: pa.DataType) -> bool:
    return (pa.types.is_string(type_) or pa.types.is_large_string(type_)
            or getattr(pa.types, "is_string_view", _never)(type_))


def _never(type_: pa.DataType) -> bool:
    return False


def _output_type(type_: pa.DataType) -> pa.DataType:
    """``type_`` as the output holds it: binary as string (hex text), a map whose keys are not text (after that)
    as a list of its entries, at any depth."""
    if _is_binary(type_):
        return pa.string()
    if pa.types.is_map(type_):
        key, item = _output_type(type_.key_type), _output_type(type_.item_type)
        return pa.map_(key, item) if _is_text(key) else pa.list_(pa.struct([("key", key), ("value", item)]))
    if pa.types.is_struct(type_):
        return pa.struct([field.with_type(_output_type(field.type)) for field in type_])
    if pa.types.is_large_list(type_):
        return pa.large_list(_output_type(type_.value_type))
    if pa.types.is_fixed_size_list(type_):
        return pa.list_(_output_type(type_.value_type), type_.list_size)
    if pa.types.is_list(type_):
        return pa.list_(_output_type(type_.value_type))
    return type_


def _plain(value: Any, type_: pa.DataType, *, objects: bool = False) -> Any:
    """The Python value of an Arrow value of ``type_`` in :func:`_output_type` (bytes as hex text at any depth),
    or with ``objects`` as JSON writes it (a map as an object of text keys, else as [key, value] pairs)."""
    if value is None:
        return None
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).hex()
    if pa.types.is_map(type_):
        pairs = [(_plain(k, type_.key_type, objects=objects), _plain(v, type_.item_type, objects=objects))
                 for k, v in value]
        text_keys = _is_text(_output_type(type_.key_type))
        if objects:
            return dict(pairs) if text_keys and all(isinstance(k, str) for k, _ in pairs) else [list(p) for p in pairs]
        return pairs if text_keys else [{"key": k, "value": v} for k, v in pairs]
    if pa.types.is_struct(type_):
        return {field.name: _plain(value.get(field.name), field.type, objects=objects) for field in type_}
    if isinstance(value, list) and type_.num_fields == 1:
        return [_plain(v, type_.field(0).type, objects=objects) for v in value]
    return value


def _json_default(value: Any) -> Any:
    """JSON of what json does not write: dates and times as ISO text, anything else (decimals, ...) as its text."""
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return str(value)


def _parse_tags(pairs: Sequence[str]) -> dict[str, str]:
    tags: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise XprosqlError(f"--tag wants KEY=VALUE, got {pair!r}")
        tags[key] = value
    return tags


def _cmd_ingest(args: argparse.Namespace) -> int:
    from xprosql.ingest import IngestInterrupted

    compacts: dict[str, bool | str] = {"auto": "auto", "always": True, "never": False}
    compact = compacts[args.compact]
    interrupted = False
    try:
        report = ingest(
            args.sources, into=args.into, jobs=args.jobs, tags=_parse_tags(args.tag), progress=args.progress, compact=compact,
            keep_secrets=args.keep_secrets,
        )
    except IngestInterrupted as exc:
        report, interrupted = exc.report, True
    if not args.quiet:
        for item in report.ingested:
            secrets = f", {item.redacted_secrets} secrets redacted" if item.redacted_secrets else ""
            print(f"ingested {item.path} -> profile {item.profile_id} ({item.rows.get('events', 0)} events{secrets})")
        for item in report.skipped:
            print(f"already present {item.path} (profile {item.profile_id})")
    for path, reason in report.failed:  # at the end, after the progress bar: the list to act on
        print(f"error: {path}: {_one_line(reason)}", file=sys.stderr)
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
    from xprosql.engine import compact

    print(compact(args.dir))
    return 0


def _cmd_upgrade(args: argparse.Namespace) -> int:
    from xprosql.upgrade import upgrade

    print(upgrade(args.dir))
    return 0


def _cmd_analyses(args: argparse.Namespace) -> int:
    from xprosql.engine.catalogue import analyses, describe

    if args.name:
        print(describe(args.name))
        return 0
    for row in analyses().rows():
        name, _area, description, fleet = row[:4]
        print(f"{name:<30} {'(fleet) ' if fleet else ''}{description}")
    print("\nxprosql analyses NAME: its parameters and columns; xprosql sql DIR --analysis NAME runs it")
    return 0


def _parse_params(pairs: Sequence[str], declared: Mapping[str, str] | None = None) -> dict[str, Any]:
    """``NAME=VALUE`` pairs as values: of the declared DuckDB type (an analysis's ``name -> type``), else
    an integer, a number or a string, whichever reads. A list (``VARCHAR[]``) is comma-separated."""
    params: dict[str, Any] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep:
            raise XprosqlError(f"--param wants NAME=VALUE, got {pair!r}")
        sql_type = (declared or {}).get(name)
        try:
            if sql_type is None:
                params[name] = _guess(value)
            elif sql_type.endswith("[]"):
                params[name] = [v for v in value.split(",") if v]
            elif sql_type in ("BIGINT", "INTEGER"):
                params[name] = None if value.upper() == "NULL" else int(value)
            elif sql_type == "DOUBLE":
                params[name] = None if value.upper() == "NULL" else float(value)
            elif sql_type == "BOOLEAN":
                params[name] = {"true": True, "false": False}[value.lower()]
            else:
                params[name] = value
        except (ValueError, KeyError):
            raise XprosqlError(f"--param {name}: {value!r} is not a {sql_type}") from None
    return params


def _guess(value: str) -> int | float | str:
    for kind in (int, float):
        try:
            return kind(value)
        except ValueError:
            pass
    return value


def _cmd_sql(args: argparse.Namespace) -> int:
    if args.format == "parquet" and not args.out and not args.show:
        raise XprosqlError("--format parquet needs --out FILE")
    if args.analysis:
        from xprosql.engine.library import library

        if args.query:
            raise XprosqlError("give a SQL query or --analysis NAME, not both")
        if args.show:  # the runnable SQL, includes expanded, to copy and adapt
            print(library().text(library().module(args.analysis).id).rstrip())
            return 0
        module_id = library().module(args.analysis).id
        declared = {name: p.sql_type for name, p in library().parameters(module_id).items()}
        result = load(args.dir).analysis(module_id, **_parse_params(args.param, declared))
    else:
        if args.show:
            raise XprosqlError("--show needs --analysis NAME")
        if not args.query:
            raise XprosqlError("give a SQL query, or --analysis NAME")
        run = load(args.dir)
        result = run.sql(args.query, _parse_params(args.param) or None)
    if args.format == "table":
        _print_table(result, max_rows=args.max_rows)
    elif args.format == "parquet":
        pq.write_table(result.arrow(), args.out, compression="zstd")
    else:
        _write(_frame(result.arrow(), nested_as_json=args.format == "csv"), args.format, args.out)
    return 0


def _write(frame: pl.DataFrame, format_: str, out: str | None) -> None:
    """``frame`` as CSV or JSON (an array of row objects) to the file ``out``, else to stdout."""
    text = frame.write_csv() if format_ == "csv" else frame.write_json() + "\n"
    if out:
        Path(out).write_text(text)
    else:
        sys.stdout.write(text)


def _cmd_roofline(args: argparse.Namespace) -> int:
    from xprosql.queries.roofline import plot_roofline

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
    run = load(args.dir)
    frame = run.roofline(profiles=args.profile or None, top=args.top, **peaks).pl()  # type: ignore[arg-type]
    if args.out:
        _check_drawable(frame, args.profile[0] if args.profile else None)
    if args.format in ("csv", "json"):
        _write(_frame(frame.to_arrow(), nested_as_json=args.format == "csv"), args.format, None)
    else:
        shown = frame.select(
            "row_kind", pl.col("profile_id").str.slice(0, 8), "device_kind", pl.coalesce("op", "module").alias("op"),
            "category", "occurrences",
            (pl.col("self_time_ps") / 1e9).round(3).alias("self_ms"),
            (100 * pl.col("self_time_share")).round(2).alias("self_%"),
            (pl.col("flop_rate") / 1e12).alias("TFLOP/s"),
            (pl.col("hbm_bandwidth") / 1e9).alias("HBM GB/s"),
            pl.col("operational_intensity").alias("FLOP/B"), "ridge_point", "bound_by", "roofline_efficiency",
        )
        with pl.Config(tbl_rows=args.max_rows, fmt_str_lengths=40, tbl_width_chars=220, tbl_hide_dataframe_shape=True,
                       float_precision=4):
            print(_printable(shown))
    if args.out:
        path = plot_roofline(frame, args.out, profile_id=args.profile[0] if args.profile else None)
        print(f"wrote {path}", file=sys.stderr)
    return 0


def _check_drawable(frame: pl.DataFrame, profile_id: str | None) -> None:
    """Raise, naming the options that give them, unless a profile of ``frame`` has both peaks a chart needs."""
    totals = frame.filter(pl.col("row_kind") == "profile")
    if profile_id is not None:
        totals = totals.filter(pl.col("profile_id") == profile_id)
    if totals.filter(pl.col("peak_flops_per_s").is_not_null() & pl.col("peak_hbm_bytes_per_s").is_not_null()).is_empty():
        which = f"profile {profile_id} has no device" if profile_id else "no profile has a device"
        raise XprosqlError(f"roofline --out: {which} with known peak FLOP/s and memory bandwidth to draw "
                           "the roofs (CPU profiles record none): give --peak-flops FLOP/S and --peak-hbm-bandwidth "
                           "BYTES/S, or --measure-cpu-peaks on the machine the profiles were taken on")


def _cmd_tables(args: argparse.Namespace) -> int:
    run = load(args.dir)
    counts = run.row_counts()
    print(f"{run.path}: {len(run.profile_ids)} profiles")
    for table, schema in TABLES.items():
        print(f"\n{table} ({counts[table]} rows)")
        print(f"  {PARTITION_COLUMN:<24} string      partition key")
        for field in schema:
            unit = column_unit(table, field.name)
            description = (field.metadata or {}).get(b"description", b"").decode()
            type_name = "string" if str(field.type).startswith("dictionary") else str(field.type)
            unit_text = f" [{unit}]" if unit else ""
            print(f"  {field.name:<24} {type_name:<11} {description}{unit_text}")
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    sample = resources.files("xprosql") / "data" / DEMO_PROFILE
    with tempfile.TemporaryDirectory(prefix="xprosql-demo-") as tmp, resources.as_file(sample) as sample_path:
        warehouse = Path(tmp) / "run"
        report = ingest(sample_path, into=warehouse)
        if not report.ok:
            for path, reason in report.failed:
                print(f"error: {path}: {_one_line(reason)}", file=sys.stderr)
            return 1
        run = load(warehouse)
        print(f"Ingested the bundled TPU v6e sample ({DEMO_PROFILE}) into {warehouse}\n")
        print("Tables:", ", ".join(f"{t} {n}" for t, n in run.row_counts().items()), "\n")
        print("Devices with peaks:")
        _print_table(run.sql(
            "SELECT device_id, name, kind, model, peak_flops_per_s / 1e12 AS peak_tflops, "
            "peak_hbm_bytes_per_s / 1e9 AS peak_hbm_gb_s FROM devices WHERE kind IN ('tpu', 'gpu') ORDER BY device_id"
        ))
        print("\nTop XLA ops by time on /device:TPU:0 (sql/ops/top_ops.sql):")
        top = run.top_ops(top=8).relation.filter("device = '/device:TPU:0' AND track = 'XLA Ops'").project(
            "device, track, op, category, occurrences, round(total_ps / 1e9, 3) AS total_ms, "
            "round(100 * share_of_track, 1) AS pct")
        _print_table(Result(top))
    return 0


def _cmd_record(args: argparse.Namespace) -> int:
    import runpy

    from xprosql import cupti

    command = [c for c in args.command if c != "--"] if args.command[:1] == ["--"] else list(args.command)
    if command and Path(command[0]).name.startswith("python"):
        command = command[1:]
    if not command:
        raise XprosqlError("record wants a Python program: xprosql record --into DIR -- python train.py [ARGS]")
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
    report = ingest(recording.path, into=args.into)
    for path, reason in report.failed:
        print(f"error: {path}: {_one_line(reason)}", file=sys.stderr)
    return exit_code or (0 if report.ok else 1)


def _cmd_report(args: argparse.Namespace) -> int:
    from xprosql.report import build_report, terminal_summary

    run = load(args.dir)
    profiles = args.profile or None
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
    run = load(args.dir)
    summary = run.export_trace(args.out, profiles=_resolve_profiles(run, args.profile) if args.profile else None,
                               where=args.where, start_ps=_time_ps(args.start), end_ps=_time_ps(args.end),
                               args=args.args, flows=args.flows, counters=args.counters, memory=args.counters,
                               job_clock=args.job_clock)
    print(summary)
    print("open it in https://ui.perfetto.dev (Open trace file): it loads in the browser, nothing is uploaded")
    return 0


class _Parser(argparse.ArgumentParser):
    """Mistakes in the arguments as one line, ``error: ...``, and exit status 2, as every other user error."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"error: {self.prog}: {_one_line(message)} (see {self.prog} --help)\n")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="xprosql", description="ML accelerator profiles as Parquet tables, analysed with SQL.")
    parser.add_argument("--version", action="version", version=f"xprosql {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)

    p = commands.add_parser("ingest", help="ingest profile files or directories into a warehouse")
    p.add_argument("sources", nargs="+", help="*.xplane.pb files or directories to search")
    p.add_argument("--into", required=True, help="warehouse directory (created if missing)")
    p.add_argument("--jobs", "-j", type=int, default=1, metavar="N", help="decode N files at once, in N processes")
    p.add_argument("--tag", action="append", default=[], metavar="KEY=VALUE",
                   help="tag every profile (profiles.tags; over the xprosql.json files of its directories)")
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="progress bar with rate and ETA on stderr (default: when stderr is a terminal)")
    p.add_argument("--compact", choices=["auto", "always", "never"], default="auto",
                   help="compact after ingesting (auto: once enough profiles were committed since the last compaction)")
    p.add_argument("--quiet", "-q", action="store_true", help="no line per file; failures and the summary only")
    p.add_argument("--keep-secrets", action="store_true",
                   help="store credentials as the files hold them (default: replaced by <redacted> and counted)")
    p.set_defaults(func=_cmd_ingest)

    p = commands.add_parser("compact", help="Delta optimize (small files packed, ordered by profile) and vacuum; "
                                            "readers keep working")
    p.add_argument("dir", help="warehouse directory")
    p.set_defaults(func=_cmd_compact)

    p = commands.add_parser("upgrade", help="convert a warehouse of an older xprosql (hive partitions) to Delta tables")
    p.add_argument("dir", help="warehouse directory")
    p.set_defaults(func=_cmd_upgrade)

    p = commands.add_parser("analyses", help="list the analyses, or one's parameters and columns")
    p.add_argument("name", nargs="?", help="an analysis (e.g. roofline or ops.roofline)")
    p.set_defaults(func=_cmd_analyses)

    p = commands.add_parser("sql", help="run a DuckDB SQL query over a warehouse")
    p.add_argument("dir", help="warehouse directory")
    p.add_argument("query", nargs="?", help="SQL text; every table is a view")
    p.add_argument("--analysis", metavar="NAME", help="run an analysis of the SQL library instead (e.g. roofline; see: xprosql analyses)")
    p.add_argument("--show", action="store_true", help="with --analysis: print its SQL instead of running it")
    p.add_argument("--format", choices=["table", "csv", "json", "parquet"], default="table")
    p.add_argument("--out", help="write the result to this file")
    p.add_argument("--param", action="append", default=[], metavar="NAME=VALUE", help="bind $NAME in the query")
    p.add_argument("--max-rows", type=int, default=50, help="rows shown by --format table")
    p.set_defaults(func=_cmd_sql)

    p = commands.add_parser("roofline", help="roofline of every op (sql/ops/roofline.sql); --out draws the chart")
    p.add_argument("dir", help="warehouse directory")
    p.add_argument("--out", help="write a log-log roofline chart here (.png, .svg or .pdf; needs xprosql[plot])")
    p.add_argument("--profile", action="append", default=[], metavar="ID", help="only this profile (repeatable); the chart draws the first")
    p.add_argument("--top", type=int, help="op rows kept per profile and device kind, by self time")
    p.add_argument("--peak-flops", type=float, metavar="FLOP/S", help="peak FLOP/s for every device (wins over the profile; the CPU roof)")
    p.add_argument("--peak-hbm-bandwidth", type=float, metavar="BYTES/S", help="peak HBM (CPU: DRAM) bandwidth for every device")
    p.add_argument("--measure-cpu-peaks", action="store_true", help="measure this machine's CPU peaks and use them (for CPU profiles taken here)")
    p.add_argument("--format", choices=["table", "csv", "json"], default="table", help="how to print the rows")
    p.add_argument("--max-rows", type=int, default=40, help="rows shown by --format table")
    p.set_defaults(func=_cmd_roofline)

    p = commands.add_parser("tables", help="list tables, their columns with units, and row counts")
    p.add_argument("dir", help="warehouse directory")
    p.set_defaults(func=_cmd_tables)

    p = commands.add_parser("record", help="record CUDA activity of a Python program with CUPTI and ingest it")
    p.add_argument("--into", required=True, help="warehouse directory to ingest the recording into")
    p.add_argument("--raw-dir", help="where the raw recording goes (default: DIR/recordings)")
    p.add_argument("--metrics", help="CUPTI PM sampling metrics to sample too, comma-separated "
                                     "(e.g. sm__cycles_active.avg,gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed)")
    p.add_argument("--metrics-device", type=int, default=0, help="GPU index to PM-sample (default: 0)")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- python train.py [ARGS]")
    p.set_defaults(func=_cmd_record)

    p = commands.add_parser("report", help="per profile: bottleneck, step breakdown, top ops, async summary, roofline")
    p.add_argument("dir", help="warehouse directory")
    p.add_argument("--out", help="write an interactive HTML report here (charts need plotly: xprosql[plot]); without it, a terminal summary")
    p.add_argument("--profile", action="append", default=[], metavar="ID", help="only this profile (repeatable)")
    p.add_argument("--top", type=int, default=10, help="top ops listed per profile")
    p.add_argument("--sections", type=int, default=12, help="at most this many profile sections (the worst); every profile stays in the summary")
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="progress bar on stderr (default: when stderr is a terminal)")
    p.set_defaults(func=_cmd_report)

    p = commands.add_parser("export", help="write a selection as a Perfetto trace for ui.perfetto.dev (tracks, slices, flows, counters)")
    p.add_argument("dir", help="warehouse directory")
    p.add_argument("--out", required=True, help="the trace file to write, e.g. x.perfetto-trace")
    p.add_argument("--profile", action="append", default=[], metavar="P",
                   help="a profile: id, id prefix or file name (repeatable; default: every profile)")
    p.add_argument("--where", metavar="SQL", help="only events matching this predicate on events columns, e.g. \"name LIKE 'fusion%%'\"")
    p.add_argument("--from", dest="start", metavar="TIME", help="only events ending after this time of each profile (1.5ms, 250us, 2s)")
    p.add_argument("--to", dest="end", metavar="TIME", help="only events starting before this time of each profile")
    p.add_argument("--args", action=argparse.BooleanOptionalAction, default=True, help="events' stats as slice args")
    p.add_argument("--flows", action=argparse.BooleanOptionalAction, default=True, help="launch -> kernel and flows-table arrows")
    p.add_argument("--counters", action=argparse.BooleanOptionalAction, default=True,
                   help="counter tracks: the counters table and the memory timeline")
    p.add_argument("--job-clock", action="store_true", help="a job's ranks side by side on the job's clock (sql/jobs/clock_offsets.sql)")
    p.set_defaults(func=_cmd_export)

    p = commands.add_parser("demo", help="ingest the bundled TPU sample into a temporary warehouse and summarise it")
    p.set_defaults(func=_cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line with ``argv``; returns the exit code.

    A user error (a missing directory, bad SQL, an unknown analysis or parameter, a value no
    output can hold, a file that cannot be written) prints one line ``error: ...`` on stderr
    and returns 2; only a bug of xprosql shows a traceback.
    """
    args = _parser().parse_args(argv)
    # What a command warns of (an analysis with no rows for some profiles, ...) comes as a line each after its
    # output; but a recorded program's warnings are its own.
    recording = args.func is _cmd_record
    with warnings.catch_warnings(record=not recording) as caught:
        if not recording:
            warnings.simplefilter("default")
        try:
            code = args.func(args)
        except (XprosqlError, KeyError, OSError, ImportError, pl.exceptions.PolarsError, pa.ArrowException) as exc:
            message = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
            print(f"error: {_one_line(str(message))}", file=sys.stderr)
            return 2  # the error says what went wrong: the warnings on the way there are left out
        except Exception as exc:  # duckdb errors: show the message, not a traceback
            if type(exc).__module__.startswith(("duckdb", "_duckdb")):
                print(f"error: {_one_line(str(exc))}", file=sys.stderr)
                return 2
            raise
    for text in dict.fromkeys(_one_line(str(w.message)) for w in caught or []):
        print(f"warning: {text}", file=sys.stderr)
    return code


def _one_line(message: str) -> str:
    """A message of several lines (DuckDB's: the query line, a caret under it) as one."""
    lines = [line.strip() for line in message.strip().splitlines()]
    return " ".join(line for line in lines if line.strip("^ ")) or message.strip()


def entry() -> None:
    """The ``xprosql`` console script."""
    if hasattr(signal, "SIGPIPE"):  # `xprosql sql ... | head` ends quietly
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    sys.exit(main())


if __name__ == "__main__":
    entry()
