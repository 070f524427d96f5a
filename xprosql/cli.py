"""The ``xprosql`` command line.

Example:
    $ xprosql ingest logs/ --into run/
    $ xprosql sql run/ "SELECT name, sum(dur_ps) FROM events GROUP BY 1 ORDER BY 2 DESC LIMIT 10"
    $ xprosql tables run/
    $ xprosql demo
"""

from __future__ import annotations

import argparse
import signal
import sys
import tempfile
from collections.abc import Sequence
from importlib import resources
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq

from xprosql import __version__
from xprosql.errors import XprosqlError
from xprosql.ingest import ingest
from xprosql.models.tables import PARTITION_COLUMN, TABLES, column_unit
from xprosql.run import Result, load

__all__ = ["main", "entry"]

DEMO_PROFILE = "tpu_v6e_inference.xplane.pb"


def _print_table(result: Result, *, max_rows: int = 50) -> None:
    with pl.Config(tbl_rows=max_rows, fmt_str_lengths=70, tbl_width_chars=200, tbl_hide_dataframe_shape=True):
        print(result.pl())


def _cmd_ingest(args: argparse.Namespace) -> int:
    report = ingest(args.sources, into=args.into)
    for item in report.ingested:
        print(f"ingested {item.path} -> profile {item.profile_id} ({item.rows['events']} events)")
    for item in report.skipped:
        print(f"already present {item.path} (profile {item.profile_id})")
    for path, reason in report.failed:
        print(f"error: {path}: {reason}", file=sys.stderr)
    print(f"{len(report.ingested)} ingested, {len(report.skipped)} already present, {len(report.failed)} failed")
    return 0 if report.ok else 1


def _parse_params(pairs: Sequence[str]) -> dict[str, object]:
    params: dict[str, object] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep:
            raise XprosqlError(f"--param wants NAME=VALUE, got {pair!r}")
        try:
            params[name] = int(value)
        except ValueError:
            try:
                params[name] = float(value)
            except ValueError:
                params[name] = value
    return params


def _cmd_sql(args: argparse.Namespace) -> int:
    run = load(args.dir)
    result = run.sql(args.query, _parse_params(args.param) or None)
    if args.format == "table":
        _print_table(result, max_rows=args.max_rows)
        return 0
    frame = result.pl()
    if args.format == "parquet":
        if not args.out:
            raise XprosqlError("--format parquet needs --out FILE")
        pq.write_table(result.arrow(), args.out, compression="zstd")
    elif args.format == "csv":
        text = frame.write_csv()
        Path(args.out).write_text(text) if args.out else sys.stdout.write(text)
    else:
        text = frame.write_json()
        Path(args.out).write_text(text) if args.out else print(text)
    return 0


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
                print(f"error: {path}: {reason}", file=sys.stderr)
            return 1
        run = load(warehouse)
        print(f"Ingested the bundled TPU v6e sample ({DEMO_PROFILE}) into {warehouse}\n")
        print("Tables:", ", ".join(f"{t} {n}" for t, n in run.row_counts().items()), "\n")
        print("Devices with peaks:")
        _print_table(run.sql(
            "SELECT device_id, name, kind, model, peak_flops_per_s / 1e12 AS peak_tflops, "
            "peak_hbm_bytes_per_s / 1e9 AS peak_hbm_gb_s FROM devices WHERE kind IN ('tpu', 'gpu') ORDER BY device_id"
        ))
        print("\nTop XLA ops by time on /device:TPU:0 (sql/top_ops.sql):")
        _print_table(run.sql(
            "SELECT device, track, op, category, occurrences, round(total_ps / 1e9, 3) AS total_ms, "
            "round(100 * share_of_track, 1) AS pct FROM (" + _analysis_text("top_ops") + ") "
            "WHERE device = '/device:TPU:0' AND track = 'XLA Ops'",
            {"top": 8},
        ))
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
    with cupti.record(raw_dir) as recording:
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
    report = ingest(recording.path, into=args.into)
    for path, reason in report.failed:
        print(f"error: {path}: {reason}", file=sys.stderr)
    return exit_code or (0 if report.ok else 1)


def _analysis_text(name: str) -> str:
    from xprosql.queries import analysis_sql

    return analysis_sql(name).rstrip().rstrip(";")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="xprosql", description="ML accelerator profiles as Parquet tables, analysed with SQL.")
    parser.add_argument("--version", action="version", version=f"xprosql {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)

    p = commands.add_parser("ingest", help="ingest profile files or directories into a warehouse")
    p.add_argument("sources", nargs="+", help="*.xplane.pb files or directories to search")
    p.add_argument("--into", required=True, help="warehouse directory (created if missing)")
    p.set_defaults(func=_cmd_ingest)

    p = commands.add_parser("sql", help="run a DuckDB SQL query over a warehouse")
    p.add_argument("dir", help="warehouse directory")
    p.add_argument("query", help="SQL text; every table is a view")
    p.add_argument("--format", choices=["table", "csv", "json", "parquet"], default="table")
    p.add_argument("--out", help="write the result to this file")
    p.add_argument("--param", action="append", default=[], metavar="NAME=VALUE", help="bind $NAME in the query")
    p.add_argument("--max-rows", type=int, default=50, help="rows shown by --format table")
    p.set_defaults(func=_cmd_sql)

    p = commands.add_parser("tables", help="list tables, their columns with units, and row counts")
    p.add_argument("dir", help="warehouse directory")
    p.set_defaults(func=_cmd_tables)

    p = commands.add_parser("record", help="record CUDA activity of a Python program with CUPTI and ingest it")
    p.add_argument("--into", required=True, help="warehouse directory to ingest the recording into")
    p.add_argument("--raw-dir", help="where the raw recording goes (default: DIR/recordings)")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- python train.py [ARGS]")
    p.set_defaults(func=_cmd_record)

    p = commands.add_parser("demo", help="ingest the bundled TPU sample into a temporary warehouse and summarise it")
    p.set_defaults(func=_cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line with ``argv``; returns the exit code."""
    args = _parser().parse_args(argv)
    try:
        return args.func(args)
    except (XprosqlError, KeyError, OSError) as exc:
        message = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        print(f"error: {message}", file=sys.stderr)
        return 2
    except Exception as exc:  # duckdb errors: show the message, not a traceback
        if type(exc).__module__.startswith(("duckdb", "_duckdb")):
            print(f"error: {exc}", file=sys.stderr)
            return 2
        raise


def entry() -> None:
    """The ``xprosql`` console script."""
    if hasattr(signal, "SIGPIPE"):  # `xprosql sql ... | head` ends quietly
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    sys.exit(main())


if __name__ == "__main__":
    entry()
