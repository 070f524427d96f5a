"""Differential test against XProf's own C++ XSpace -> Parquet converter (events_db).

Every row XProf writes must be one of our events, with the same name, times and
promoted stats. We keep more: XProf drops whole derived lines (TPU `Async XLA Ops`
and `XLA TraceMe`, GPU `TensorFlow Ops`, `TensorFlow Name Scope`, `Steps`), every
plane-level stat and the GPU file's own group_id stats; we keep all of them.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from conftest import GPU_SAMPLE, XSPACE_SAMPLES

import xprosql
from xprosql.ingest import profile_id_of

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("xprof") is None, reason="the xprof wheel (test extra) is not installed"
)

# In its own process: the xprof wheel bundles a native Arrow that clashes with pyarrow's.
_CONVERT = (
    "import sys\n"
    "from xprof.convert.events_db.python.pywrap_events_db_c_api import xspace_to_parquet\n"
    "xspace_to_parquet(input_path=sys.argv[1], output_path=sys.argv[2])\n"
)


def _xprof_device(plane: str) -> str | None:
    if plane == "/host:CPU":
        return "cpu:0"
    match = re.fullmatch(r"/device:(TPU|GPU):(\d+)", plane)
    return None if match is None else ("TPU:" if match[1] == "TPU" else "gpu:") + match[2]


@pytest.fixture(scope="module", params=list(XSPACE_SAMPLES), ids=list(XSPACE_SAMPLES))
def xprof_rows(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict]]:
    sample = XSPACE_SAMPLES[request.param]
    work = tmp_path_factory.mktemp("xprof")
    copy = work / sample.name  # XProf tools may write beside their input
    shutil.copy(sample, copy)
    out = work / "events.parquet"
    subprocess.run([sys.executable, "-c", _CONVERT, str(copy), str(out)], check=True, capture_output=True, timeout=300)
    return sample, pq.read_table(out).to_pylist()


def test_every_xprof_event_is_ours(xprof_rows: tuple[Path, list[dict]], xspace_warehouse: Path) -> None:
    sample, rows = xprof_rows
    run = xprosql.load(xspace_warehouse)
    ours = run.sql(
        """SELECT d.name AS plane, t.line_id, e.name, p.start_ns * 1000 + e.start_ps AS abs_ps, e.dur_ps,
                  e.flops, e.bytes_accessed, e.correlation_id, e.hlo_op, t.name AS line
           FROM events e JOIN tracks t USING (profile_id, device_id, track_id)
           JOIN devices d USING (profile_id, device_id) JOIN profiles p USING (profile_id)
           WHERE profile_id = $pid""",
        {"pid": profile_id_of(sample.read_bytes())},
    ).rows()

    def key(plane: str, line_id: int, name: str, abs_ps: int, dur_ps: int) -> tuple:
        # XProf truncates to ns: start = ts + offset_ps // 1000, end = start + duration_ps // 1000.
        start_ns = abs_ps // 1000
        return (_xprof_device(plane), line_id, name, start_ns, start_ns + dur_ps // 1000)

    our_keys = Counter(key(*row[:5]) for row in ours)
    their_keys = Counter(
        (
            r["device"],
            r["thread_id"] if r["thread_id"] is not None else r["stream_id"],
            r["kernel_name"].removeprefix("HLO Module:"),
            r["start_ns"],
            r["end_ns"],
        )
        for r in rows
    )
    missing = their_keys - our_keys
    assert not missing, f"{sum(missing.values())} XProf events not in ours, e.g. {list(missing)[:3]}"
    assert sum(their_keys.values()) == len(rows) > 10_000

    # The stats XProf promotes to columns agree with ours on every matched event.
    by_key = {key(*row[:5]): row for row in ours}
    for r in rows:
        k = (r["device"], r["thread_id"] if r["thread_id"] is not None else r["stream_id"],
             r["kernel_name"].removeprefix("HLO Module:"), r["start_ns"], r["end_ns"])
        _, _, _, _, _, flops, bytes_accessed, correlation_id, hlo_op, _ = by_key[k]
        assert r["flops"] in (None, flops)
        assert r["memory_accessed"] in (None, bytes_accessed)
        assert r["correlation_id"] in (None, correlation_id)
        assert r["hlo_op"] in (None, hlo_op)

    # What we keep beyond XProf is whole lines it leaves out, not stray events.
    extra_lines = Counter(row[9] for row in ours if our_keys[key(*row[:5])] > their_keys[key(*row[:5])])
    assert set(extra_lines) <= {"Async XLA Ops", "XLA TraceMe", "TensorFlow Ops", "TensorFlow Name Scope", "Steps"}


_TOOL = (
    "import sys\n"
    "from xprof.convert.raw_to_tool_data import xspace_to_tool_data\n"
    "data, _ = xspace_to_tool_data([sys.argv[1]], sys.argv[2], {'use_saved_result': False})\n"
    "sys.stdout.write(data.decode() if isinstance(data, bytes) else data)\n"
)


def xprof_tool(sample: Path, tool: str, work: Path) -> list[dict]:
    """Rows of an XProf tool's DataTable output (its first table, for tools that write several), run on a copy (the
    tools write caches beside their input); each row also holds the table's properties under ``_properties``."""
    copy = work / sample.name
    shutil.copy(sample, copy)
    done = subprocess.run([sys.executable, "-c", _TOOL, str(copy), tool], check=True, capture_output=True, timeout=300)
    tables = json.loads(done.stdout)
    table = tables[0] if isinstance(tables, list) else tables
    labels = [c["id"] for c in table["cols"]]
    return [{**dict(zip(labels, (cell["v"] if cell else None for cell in row["c"]))), "_properties": table.get("p", {})}
            for row in table["rows"]]


def test_gpu_kernels_match_xprof_kernel_stats(xspace_warehouse: Path, tmp_path: Path) -> None:
    rows = xprof_tool(GPU_SAMPLE, "kernel_stats", tmp_path)
    theirs: dict[str, list[float]] = {}
    for row in rows:  # XProf groups by (name, launch configuration), over all devices
        count, total = theirs.setdefault(row["kernel_name"], [0, 0.0])
        theirs[row["kernel_name"]] = [count + row["occurrences"], total + row["total_duration_us"]]
    ours = xprosql.load(xspace_warehouse).sql(
        "SELECT name, count(*), sum(dur_ps) / 1e6 FROM kernels WHERE profile_id = $p GROUP BY 1",
        {"p": profile_id_of(GPU_SAMPLE.read_bytes())},
    ).rows()
    assert {name for name, _, _ in ours} == set(theirs)
    for name, count, total_us in ours:
        assert count == theirs[name][0]
        assert total_us == pytest.approx(theirs[name][1], rel=1e-3)
    assert sum(c for _, c, _ in ours) == 1330
