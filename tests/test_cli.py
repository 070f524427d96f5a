"""The xprosql command line, run as a user would (installed entry point) and in-process."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from conftest import GPU_SAMPLE, TPU_SAMPLE

from xprosql.cli import main
from xprosql.warehouse import Warehouse


def test_ingest_sql_tables(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    shutil.copy(TPU_SAMPLE, logs)
    shutil.copy(GPU_SAMPLE, logs)
    root = tmp_path / "run"
    assert main(["ingest", str(logs), "--into", str(root)]) == 0
    assert "2 ingested, 0 already present, 0 failed" in capsys.readouterr().out
    assert main(["ingest", str(logs), "--into", str(root)]) == 0
    assert "0 ingested, 2 already present" in capsys.readouterr().out

    query = "SELECT name, sum(dur_ps) AS total FROM events GROUP BY 1 ORDER BY 2 DESC, 1 LIMIT 5"
    assert main(["sql", str(root), query, "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert len(rows) == 5 and rows[0]["total"] >= rows[-1]["total"]

    assert main(["sql", str(root), query, "--format", "csv"]) == 0
    csv_lines = capsys.readouterr().out.strip().splitlines()
    assert csv_lines[0] == "name,total" and len(csv_lines) == 6

    out = tmp_path / "top.parquet"
    assert main(["sql", str(root), query, "--format", "parquet", "--out", str(out)]) == 0
    assert pq.read_table(out).column("name").to_pylist() == [r["name"] for r in rows]

    assert main(["sql", str(root), "SELECT count(*) AS n FROM events WHERE dur_ps > $min", "--param", "min=-1"]) == 0
    assert "49851" in capsys.readouterr().out  # 26723 TPU + 23128 GPU events, every dur_ps is >= 0

    assert main(["tables", str(root)]) == 0
    text = capsys.readouterr().out
    assert "events (49851 rows)" in text
    assert "dur_ps" in text and "[ps]" in text


def test_errors_go_to_stderr_with_nonzero_exit(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.xplane.pb"
    bad.write_bytes(b"")
    assert main(["ingest", str(bad), "--into", str(tmp_path / "run")]) == 1
    captured = capsys.readouterr()
    assert f"error: {bad}: empty file" in captured.err
    assert main(["sql", str(tmp_path / "missing"), "SELECT 1"]) == 2
    assert "no such warehouse" in capsys.readouterr().err
    Warehouse(tmp_path / "run").create()  # an empty warehouse
    assert main(["sql", str(tmp_path / "run"), "SELECT nope FROM events"]) == 2
    assert "nope" in capsys.readouterr().err


def xprosql_command() -> list[str]:
    exe = Path(sys.executable).with_name("xprosql")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "xprosql.cli"]


def test_demo_runs_from_the_installed_entry_point(tmp_path: Path) -> None:
    done = subprocess.run([*xprosql_command(), "demo"], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "/device:TPU:3" in done.stdout and "918.0" in done.stdout
    assert "all-reduce" in done.stdout  # one of the top XLA ops


@pytest.mark.slow  # a whole demo (ingest, report, three commands): 18 s of the fast suite's 5 min
def test_demo_keeps_its_warehouse_and_its_next_commands_run(tmp_path: Path) -> None:
    """The warehouse stays (./xprosql-demo, or --into), and the commands the demo prints run as printed."""
    done = subprocess.run([*xprosql_command(), "demo"], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "in the warehouse xprosql-demo (kept" in done.stdout
    assert Warehouse(tmp_path / "xprosql-demo").is_warehouse()
    following = done.stdout.split("Next, on the same warehouse:\n", 1)[1].splitlines()
    commands = [shlex.split(line, comments=True) for line in following if line.startswith("  xprosql ")]
    assert [c[1] for c in commands] == ["diagnose", "report", "roofline", "sql"] and all(c[2] == "xprosql-demo" for c in commands)
    for command in commands:
        ran = subprocess.run([*xprosql_command(), *command[1:]], capture_output=True, text=True, timeout=300, cwd=tmp_path)
        assert ran.returncode == 0 and ran.stdout, (command, ran.stderr)
    assert (tmp_path / "report.html").stat().st_size > 1_000_000
    # again: the same warehouse, found; elsewhere with --into; never into a folder of something else
    again = subprocess.run([*xprosql_command(), "demo"], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert again.returncode == 0 and "Found the bundled" in again.stdout, again.stderr
    into = subprocess.run([*xprosql_command(), "demo", "--into", str(tmp_path / "mine")], capture_output=True, text=True,
                          timeout=300)
    assert into.returncode == 0 and f"xprosql report {tmp_path / 'mine'} --out" in into.stdout, into.stderr
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "todo.txt").write_text("mine")
    refused = subprocess.run([*xprosql_command(), "demo", "--into", "notes"], capture_output=True, text=True,
                             timeout=300, cwd=tmp_path)
    assert refused.returncode == 2 and "not an xprosql warehouse" in refused.stderr
    assert sorted(p.name for p in (tmp_path / "notes").iterdir()) == ["todo.txt"]


@pytest.mark.parametrize(("argv", "collecting", "blas_threads", "arrow_pool"), [
    (["tables", "W"], False, "1", "system"), (["ingest", "F", "--into", "W"], False, "1", "system"),
    (["roofline", "W"], False, "1", "system"), (["roofline", "W", "--measure-cpu-peaks"], False, None, "system"),
    (["watch", "LOGDIR", "--into", "W"], True, "1", "system"), (["mcp", "W"], True, "1", "system"),
    (["record", "prog.py"], True, None, None),
    (["ingest", "s3://bucket/logs/", "--into", "W"], True, "1", "system"), (["tables", "gs://bucket/run"], True, "1", "system"),
    (["ingest", "F", "--into", "W", "--cluster", "tcp://127.0.0.1:8786"], True, "1", "system"),
])
def test_a_command_runs_without_the_collector_and_with_one_blas_thread_unless_it_needs_them(
    argv: list[str], collecting: bool, blas_threads: str | None, arrow_pool: str | None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A one-shot command on local files runs with the cyclic garbage collector off (its passes over the libraries'
    objects cost a small command tens of ms), and numpy's OpenBLAS, imported from there on (the batch's workers too),
    with one thread (its threads' spin at start took 0.1 s of CPU); watch and mcp keep the collector, as they run as
    long as they are left, and so does a command naming a URL (object storage's and a cluster's asyncio clients leave
    cycles); the CPU peaks' matrix product keeps every core; Arrow allocates with the system's malloc (mimalloc held
    30-35 MB more at a 32 MB file's peak); the program record runs gets all as they were. The caller's settings are
    back afterwards, whatever the command did."""
    import gc
    import os

    from xprosql import _cli_commands

    names = ("OPENBLAS_NUM_THREADS", "ARROW_DEFAULT_MEMORY_POOL")
    for name in names:
        monkeypatch.delenv(name, raising=False)
    seen: list[tuple[bool | str | None, ...]] = []
    monkeypatch.setitem(_cli_commands.COMMANDS, argv[0],
                        lambda args: seen.append((gc.isenabled(), *map(os.environ.get, names))) or 0)
    assert gc.isenabled()
    assert main(argv) == 0
    assert seen == [(collecting, blas_threads, arrow_pool)]
    assert gc.isenabled()
    assert not set(names) & set(os.environ)
    monkeypatch.setenv("ARROW_DEFAULT_MEMORY_POOL", "jemalloc")  # the caller's own value wins
    seen.clear()
    assert main(argv) == 0
    assert seen[0][2] == "jemalloc" and os.environ["ARROW_DEFAULT_MEMORY_POOL"] == "jemalloc"


@pytest.mark.parametrize("collecting", [False, True])
def test_an_ingest_worker_runs_without_the_cyclic_collector_on_local_files(collecting: bool) -> None:
    """The batch's worker processes (spawned) run only xprosql's ingest: the collector is off there too, but for
    object storage's files or warehouse."""
    import gc

    from xprosql.ingest.batch import _pool

    with _pool(1, collecting=collecting) as pool:
        assert pool.submit(gc.isenabled).result() is collecting
    assert gc.isenabled()  # this process's collector is untouched
