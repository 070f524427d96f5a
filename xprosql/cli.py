"""The ``xprosql`` command line.

Example:
    $ xprosql ingest logs/ --into run/
    $ xprosql ingest fleet/ --into run/ --jobs 8 --tag team=nlp
    $ xprosql compact run/
    $ xprosql watch logs/ --into run/ --tag job=bert
    $ xprosql upgrade old_run/
    $ xprosql sql run/ "SELECT name, sum(dur_ps) FROM events GROUP BY 1 ORDER BY 2 DESC LIMIT 10"
    $ xprosql tables run/
    $ xprosql compare run/ --baseline "tags['commit'] = 'a1'" --candidate "tags['commit'] = 'b2'"
    $ xprosql demo
    $ xprosql report run/ --out report.html
    $ xprosql mcp run/
"""

from __future__ import annotations

import argparse
import gc
import os
import signal
import sys
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import NoReturn

from xprosql._version import __version__
from xprosql.errors import one_line

__all__ = ["entry", "main"]


class _Parser(argparse.ArgumentParser):
    """Mistakes in the arguments as one line, ``error: ...``, and exit status 2, as every other user error."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"error: {self.prog}: {one_line(message)} (see {self.prog} --help)\n")


def _storage_option(text: str) -> tuple[str, str]:
    """``KEY=VALUE`` of ``--storage-option``, checked as the arguments are parsed (before any work)."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        # The text itself is not repeated: a value without its key may be a secret.
        raise argparse.ArgumentTypeError("wants KEY=VALUE, e.g. AWS_ENDPOINT_URL=http://127.0.0.1:9000 (got "
                                         f"{'one with an empty KEY' if sep else 'one without ='})")
    return key.strip(), value


def _storage_parent() -> _Parser:
    """``--storage-option``, shared by every command that opens or writes a warehouse or reads remote inputs."""
    parent = _Parser(add_help=False)
    parent.add_argument("--storage-option", dest="storage_options", action="append", default=[], type=_storage_option,
                        metavar="KEY=VALUE",
                        help="object storage's credentials or endpoint (repeatable; delta-rs's keys, e.g. "
                             "AWS_ENDPOINT_URL=http://host:9000, AWS_ACCESS_KEY_ID=..., AWS_REGION=...), over the "
                             "environment's; a command line is visible to other users: keep secrets in the environment")
    return parent


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="xprosql", description="ML accelerator profiles as Parquet tables, analysed with SQL.")
    storage = [_storage_parent()]
    parser.add_argument("--version", action="version", version=f"xprosql {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)

    p = commands.add_parser(
        "ingest", help="ingest profile files or directories into a warehouse", parents=storage,
        description="Ingest profiles into a warehouse: XProf XSpace files (*.xplane.pb: JAX, TensorFlow, PyTorch/XLA), "
                    "PyTorch profiler (Kineto) traces (*.json, *.json.gz) and xprosql's CUPTI recordings "
                    "(*.cupti.json.gz, from xprosql record). A directory is searched for all of them.")
    p.add_argument("sources", nargs="+", metavar="SOURCE",
                   help="a profile file (*.xplane.pb, *.json, *.json.gz, *.cupti.json.gz) or a directory to search; "
                        "also on object storage (s3://bucket/logdir/; credentials from the environment or --storage-option)")
    p.add_argument("--into", required=True,
                   help="warehouse directory (created if missing), or object storage (s3://bucket/run)")
    p.add_argument("--jobs", "-j", type=int, default=1, metavar="N", help="decode N files at once, in N processes")
    p.add_argument("--cluster", metavar="ADDRESS",
                   help="decode on a Dask cluster (its scheduler, tcp://host:8786): the workers must read the sources "
                        "and write the warehouse; they place the files, this process commits them")
    p.add_argument("--tag", action="append", default=[], metavar="KEY=VALUE",
                   help="tag every profile (profiles.tags; over the xprosql.json files of its directories)")
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="progress bar with rate and ETA on stderr (default: when stderr is a terminal)")
    p.add_argument("--compact", choices=["auto", "always", "never"], default="auto",
                   help="compact after ingesting (auto: once enough profiles were committed since the last compaction)")
    p.add_argument("--quiet", "-q", action="store_true", help="no line per file; failures and the summary only")
    p.add_argument("--keep-secrets", action="store_true",
                   help="store credentials as the files hold them (default: replaced by <redacted> and counted)")
    p.set_defaults(subcommand="ingest")

    p = commands.add_parser("compact", help="Delta optimize (small files packed, ordered by profile) and vacuum; "
                                            "readers keep working", parents=storage)
    p.add_argument("dir", help="warehouse directory")
    p.set_defaults(subcommand="compact")

    p = commands.add_parser(
        "watch", help="ingest each profile that lands in a log directory, once complete; flag anomalies as they land",
        description="Watch a log directory (jax.profiler traces, torch.profiler's tensorboard_trace_handler, XProf "
                    "snapshots) and ingest every profile file once it is complete, comparing each new profile with its "
                    "job's recent ones (sql/fleet/anomalies.sql). Resumes where it stopped; SIGINT or SIGTERM stops it.")
    p.add_argument("logdir", metavar="LOGDIR", help="the directory to watch (every directory below it too)")
    p.add_argument("--into", required=True, help="warehouse directory (created if missing)")
    p.add_argument("--tag", action="append", default=[], metavar="KEY=VALUE",
                   help="tag every profile (over xprosql.json files); without a job tag, job=LOGDIR's name")
    p.add_argument("--interval", type=float, default=2.0, metavar="S",
                   help="seconds between scans when polling (doubling while nothing changes), default 2")
    p.add_argument("--max-interval", type=float, default=60.0, metavar="S",
                   help="longest wait between scans (with inotify: a safety rescan), default 60")
    p.add_argument("--stable", type=float, default=1.0, metavar="S",
                   help="a file is read once unchanged this long (or closed by its writer), default 1")
    p.add_argument("--settle", type=float, default=30.0, metavar="S",
                   help="a file that does not ingest is retried until unchanged this long, then reported once, default 30")
    p.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                   help="a threshold of the anomaly check (xprosql analyses fleet.anomalies), e.g. mads=5")
    p.add_argument("--anomalies", action=argparse.BooleanOptionalAction, default=True,
                   help="compare each new profile with its job's recent ones and print a line per anomaly")
    p.add_argument("--compact", choices=["auto", "never"], default="auto",
                   help="compact once enough profiles landed since the last compaction (auto), or never")
    p.add_argument("--inotify", action=argparse.BooleanOptionalAction, default=True,
                   help="wake on directory changes (Linux inotify) rather than polling")
    p.add_argument("--quiet", "-q", action="store_true", help="no line per file; anomalies, failures and the summary")
    p.add_argument("--keep-secrets", action="store_true",
                   help="store credentials as the files hold them (default: replaced by <redacted> and counted)")
    p.set_defaults(subcommand="watch")

    p = commands.add_parser("upgrade", help="convert a warehouse of an older xprosql (hive partitions) to Delta tables")
    p.add_argument("dir", help="warehouse directory")
    p.set_defaults(subcommand="upgrade")

    p = commands.add_parser("analyses", help="list the analyses, or one's parameters and columns")
    p.add_argument("name", nargs="?", help="an analysis (e.g. roofline or ops.roofline)")
    p.set_defaults(subcommand="analyses")

    p = commands.add_parser("sql", help="run a DuckDB SQL query over a warehouse", parents=storage)
    p.add_argument("dir", help="warehouse directory")
    p.add_argument("query", nargs="?", help="SQL text; every table is a view")
    p.add_argument("--analysis", metavar="NAME", help="run an analysis of the SQL library instead (e.g. roofline; see: xprosql analyses)")
    p.add_argument("--show", action="store_true",
                   help="with --analysis: print its SQL instead of running it, the --param values (else the defaults) "
                        "written in: it runs as printed")
    p.add_argument("--format", choices=["table", "csv", "json", "parquet"], default="table")
    p.add_argument("--out", help="write the result to this file")
    p.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                   help="bind $NAME (repeatable); NULL unquoted is NULL, a list is a,b or ['a', 'b']; an analysis "
                        "checks each against its declaration (xprosql analyses NAME)")
    p.add_argument("--max-rows", type=int, default=50, help="rows shown by --format table")
    p.add_argument("--columns", metavar="A,B|all",
                   help="columns of --format table (default: an analysis's main ones, -- Show: in its header; all: "
                        "every column); tables wider than the terminal (COLUMNS) are split into parts")
    p.set_defaults(subcommand="sql")

    p = commands.add_parser(
        "compare", help="two cohorts of profiles side by side (sql/fleet/compare.sql): the largest change in time first",
        parents=storage,
        description="Two cohorts of profiles side by side, each chosen by a SQL expression on the profiles table, as "
                    "Run.compare takes them: e.g. --baseline \"tags['commit'] = 'a1'\" --candidate \"tags['commit'] = "
                    "'b2'\"; given profiles: --baseline \"profile_id IN ('3fa2...', '77c0...')\". (sql --analysis compare "
                    "runs the SQL module itself, whose baseline and candidate are lists of profile ids.)")
    p.add_argument("dir", help="warehouse directory")
    p.add_argument("--baseline", required=True, metavar="SQL", help="the baseline cohort: a SQL expression on profiles")
    p.add_argument("--candidate", required=True, metavar="SQL", help="the candidate cohort: a SQL expression on profiles")
    p.add_argument("--by", choices=["op", "category", "module", "bottleneck"], default="op",
                   help="a row per op, HLO category or module (roofline time), or bottleneck category (step time)")
    p.add_argument("--peak-flops", type=float, metavar="FLOP/S", help="peak FLOP/s for every device (as roofline's)")
    p.add_argument("--peak-hbm-bandwidth", type=float, metavar="BYTES/S", help="peak HBM bandwidth for every device")
    p.add_argument("--format", choices=["table", "csv", "json", "parquet"], default="table")
    p.add_argument("--out", help="write the result to this file")
    p.add_argument("--max-rows", type=int, default=50, help="rows shown by --format table")
    p.add_argument("--columns", metavar="A,B|all",
                   help="columns of --format table (default: an analysis's main ones, -- Show: in its header; all: "
                        "every column); tables wider than the terminal (COLUMNS) are split into parts")
    p.set_defaults(subcommand="compare")

    p = commands.add_parser(
        "diagnose", help="findings: what is wrong, how much step time a fix would save, what to change (sql/diagnose/)",
        parents=storage,
        description="Findings of every rule of sql/diagnose/ (xprosql analyses lists them as diagnose.*), the largest "
                    "expected saving first: the evidence, the fix to try and the reference behind each rule.")
    p.add_argument("dir", help="warehouse directory")
    p.add_argument("--profile", action="append", default=[], metavar="ID", help="only this profile (repeatable)")
    p.add_argument("--where", metavar="SQL", help="only the profiles matching a SQL expression on profiles, e.g. "
                                                  "\"tags['job'] = 'bert'\"")
    p.add_argument("--job", metavar="JOB", help="only the profiles of a job (xprosql sql DIR --analysis jobs: its job_id, "
                                                "job key or job tag)")
    p.add_argument("--rule", action="append", default=[], metavar="RULE", help="only this rule (repeatable), e.g. gpu_gaps")
    p.add_argument("--param", action="append", default=[], metavar="RULE.NAME=VALUE",
                   help="a rule's threshold (repeatable), e.g. gpu_gaps.min_gap_ps=1e9 (xprosql analyses diagnose.RULE)")
    p.add_argument("--min-severity", choices=["high", "medium", "low"], default="low", help="leave out lesser findings")
    p.add_argument("--format", choices=["text", "table", "csv", "json", "parquet"], default="text",
                   help="text: each finding with its evidence, fix and reference; or the rows")
    p.add_argument("--out", help="write the result to this file")
    p.add_argument("--max-rows", type=int, default=50, help="findings shown by --format text or table")
    p.add_argument("--columns", metavar="A,B|all", help="columns of --format table")
    p.set_defaults(subcommand="diagnose")

    p = commands.add_parser("roofline", help="roofline of every op (sql/ops/roofline.sql); --out draws the chart",
                            parents=storage)
    p.add_argument("dir", help="warehouse directory")
    p.add_argument("--out", help="write a log-log roofline chart here: .html (interactive, plotly) or .png, .svg, .pdf (matplotlib: xprosql[plot])")
    p.add_argument("--profile", action="append", default=[], metavar="ID", help="only this profile (repeatable); the chart draws the first")
    p.add_argument("--top", type=int, help="op rows kept per profile and device kind, by self time")
    p.add_argument("--peak-flops", type=float, metavar="FLOP/S", help="peak FLOP/s for every device (wins over the profile; the CPU roof)")
    p.add_argument("--peak-hbm-bandwidth", type=float, metavar="BYTES/S", help="peak HBM (CPU: DRAM) bandwidth for every device")
    p.add_argument("--measure-cpu-peaks", action="store_true", help="measure this machine's CPU peaks and use them (for CPU profiles taken here)")
    p.add_argument("--format", choices=["table", "csv", "json"], default="table", help="how to print the rows")
    p.add_argument("--max-rows", type=int, default=40, help="rows shown by --format table")
    p.set_defaults(subcommand="roofline")

    p = commands.add_parser("tables", help="list tables, their columns with units, and row counts", parents=storage)
    p.add_argument("dir", help="warehouse directory")
    p.set_defaults(subcommand="tables")

    p = commands.add_parser("record", help="record CUDA activity of a Python program with CUPTI and ingest it")
    p.add_argument("--into", help="warehouse directory to ingest the recording into")
    p.add_argument("--raw-dir", help="where the raw recording goes (default: DIR/recordings)")
    p.add_argument("--no-ingest", action="store_true",
                   help="only write the recording into --raw-dir (a GPU machine without the analysis stack: "
                        "ingest the *.cupti.json.gz elsewhere)")
    p.add_argument("--metrics", help="CUPTI PM sampling metrics to sample too, comma-separated "
                                     "(e.g. sm__cycles_active.avg,gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed)")
    p.add_argument("--metrics-device", type=int, default=0, help="GPU index to PM-sample (default: 0)")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- python train.py [ARGS]")
    p.set_defaults(subcommand="record")

    p = commands.add_parser("report", help="per profile: bottleneck, step breakdown, top ops, async summary, roofline",
                            parents=storage)
    p.add_argument("dir", help="warehouse directory")
    p.add_argument("--out", help="write an interactive HTML report here (works offline); without it, a terminal summary")
    p.add_argument("--profile", action="append", default=[], metavar="ID", help="only this profile (repeatable)")
    p.add_argument("--top", type=int, default=10, help="top ops listed per profile")
    p.add_argument("--sections", type=int, default=12, help="at most this many profile sections (the worst); every profile stays in the summary")
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="progress bar on stderr (default: when stderr is a terminal)")
    p.set_defaults(subcommand="report")

    p = commands.add_parser("export", help="write a selection as a Perfetto trace for ui.perfetto.dev (tracks, slices, flows, counters)",
                            parents=storage)
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
    p.set_defaults(subcommand="export")

    p = commands.add_parser(
        "mcp", help="serve a warehouse to AI assistants over the Model Context Protocol (read-only; pip install 'xprosql[mcp]')",
        parents=storage,
        description="A Model Context Protocol server over a warehouse, on stdin/stdout (or streamable HTTP on 127.0.0.1): "
                    "a tool per analysis, tables, sql (one read-only SELECT), describe and diagnose; within a row cap "
                    "and a time limit. Register it with an MCP client as the command: xprosql mcp DIR.")
    p.add_argument("dir", help="warehouse directory")
    p.add_argument("--timeout", type=float, default=30.0, metavar="S", help="wall-clock seconds one tool call may run (default 30)")
    p.add_argument("--max-rows", type=int, default=500, metavar="N", help="the most rows one result carries (default 500)")
    p.add_argument("--http", type=int, metavar="PORT", help="streamable HTTP at http://127.0.0.1:PORT/mcp instead of stdio")
    p.set_defaults(subcommand="mcp")

    p = commands.add_parser("demo", help="ingest the bundled TPU sample into a warehouse (kept: ./xprosql-demo), summarise it "
                                         "and print the commands to try next on it")
    p.add_argument("--into", default="xprosql-demo", metavar="DIR",
                   help="the warehouse to create or reuse (default: xprosql-demo in the current directory)")
    p.set_defaults(subcommand="demo")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line with ``argv``; returns the exit code.

    A user error (a missing directory, bad SQL, an unknown analysis or parameter, a value no
    output can hold, a file that cannot be written) prints one line ``error: ...`` on stderr
    and returns 2; only a bug of xprosql shows a traceback.
    """
    args = _parser().parse_args(argv)
    with _command_process(args):
        return _run(args)


# The libraries a command imports make some 300,000 objects that live as long as its process, and the cyclic garbage
# collector's passes walk them again and again: 40 ms of a small file's `xprosql ingest`, 13 ms of an analysis, 0.6 s of
# 112 files ingested in one process (benchmarks/RESULTS.md). xprosql's own work on local files leaves few cycles (about
# 2,300 objects after 112 files ingested or 100 profiles compacted), so the collector is off while such a command runs;
# but not in the commands that run for as long as they are left (watch, mcp), nor in the one that runs the user's
# program (record), nor where a command names a URL (object storage, a cluster's scheduler): the network clients'
# asyncio leaves some 370 objects in cycles a file.
_COLLECTING = frozenset({"watch", "mcp", "record"})
# numpy's OpenBLAS starts a thread per core as numpy is imported, and each spins for about 0.1 s of CPU before it
# sleeps: on two cores, 0.1 s taken from a small file's ingest and as much from an analysis (benchmarks/RESULTS.md).
# xprosql does no linear algebra but --measure-cpu-peaks' matrix product, which wants every core.
_BLAS_THREADS = "OPENBLAS_NUM_THREADS"
# pyarrow's default allocator, mimalloc, held 30-35 MB more at the peak of the 32 MB file's ingest than the system's
# malloc, and spent up to twice its system time on the 5.3 M-event file (benchmarks/RESULTS.md).
_ARROW_POOL = "ARROW_DEFAULT_MEMORY_POOL"


def _environment(args: argparse.Namespace) -> dict[str, str]:
    """The environment variables a command runs with, read as numpy and pyarrow load (after this, in this process and
    in the batch's workers); a recorded program gets the environment it was given."""
    if args.subcommand == "record":
        return {}
    return {_ARROW_POOL: "system", **({} if getattr(args, "measure_cpu_peaks", False) else {_BLAS_THREADS: "1"})}


@contextmanager
def _command_process(args: argparse.Namespace) -> Iterator[None]:
    """The process as a command runs in: the cyclic collector off (:data:`_COLLECTING`), the environment of
    :func:`_environment` where the caller's sets none of it; as the caller had them afterwards, since :func:`main` may
    run inside another program."""
    collecting = gc.isenabled()
    if args.subcommand not in _COLLECTING and not _names_a_url(args):
        gc.disable()
    added = {name: value for name, value in _environment(args).items() if name not in os.environ}
    os.environ.update(added)
    try:
        yield
    finally:
        if collecting:
            gc.enable()
        for name in added:
            os.environ.pop(name, None)


def _names_a_url(args: argparse.Namespace) -> bool:
    """Whether any argument is a URL (``s3://...``, ``tcp://...``: ``file://`` too, to keep it simple)."""
    values = [item for value in vars(args).values() for item in (value if isinstance(value, list) else [value])]
    return any(isinstance(value, str) and "://" in value for value in values)


def _run(args: argparse.Namespace) -> int:
    from xprosql import _cli_commands as commands  # after parsing: --help needs none of it

    # What a command warns of (an analysis with no rows for some profiles, ...) comes as a line each after its
    # output; but a recorded program's warnings are its own.
    recording = args.subcommand == "record"
    with warnings.catch_warnings(record=not recording) as caught:
        if not recording:
            warnings.simplefilter("default")
        try:
            code = commands.COMMANDS[args.subcommand](args)
        except Exception as exc:
            if isinstance(exc, commands.user_errors()):
                message = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
                print(f"error: {one_line(str(message))}", file=sys.stderr)
                return 2  # the error says what went wrong: the warnings on the way there are left out
            if type(exc).__module__.startswith(("duckdb", "_duckdb")):  # show the message, not a traceback
                print(f"error: {one_line(str(exc))}", file=sys.stderr)
                return 2
            raise
    for text in dict.fromkeys(one_line(str(w.message)) for w in caught or []):
        print(f"warning: {text}", file=sys.stderr)
    return code


def entry() -> None:
    """The ``xprosql`` console script."""
    if hasattr(signal, "SIGPIPE"):  # `xprosql sql ... | head` ends quietly
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    sys.exit(main())


if __name__ == "__main__":
    entry()
