"""Differential test of the roofline against XProf's hlo_stats and roofline_model tools.

On the TPU v6e sample, for every op XProf's ``hlo_stats`` lists: occurrences,
self time, FLOP rate, HBM bandwidth, operational intensity and bound_by agree
within 0.5%; XProf's "Program" row of ``roofline_model`` is our profile row;
its peaks and ridge points are ours. The one deliberate difference: async copy
bandwidth, which XProf computes over the copy-start op's few nanoseconds and we
over the start..done window (checked here against that definition).
"""

from __future__ import annotations

import importlib.util
import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
from conftest import TPU_SAMPLE

import xprosql
from xprosql.ingest import profile_id_of

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("xprof") is None, reason="the xprof wheel (test extra) is not installed"
)

GIB = float(1 << 30)
TOLERANCE = 0.005

# In its own process: the xprof wheel bundles a native Arrow that clashes with pyarrow's.
_TOOLS = (
    "import json, sys\n"
    "from xprof.convert.raw_to_tool_data import xspace_to_tool_data\n"
    "out = {}\n"
    "for tool in ('hlo_stats', 'roofline_model'):\n"
    "    data, _ = xspace_to_tool_data([sys.argv[1]], tool, {'use_saved_result': False})\n"
    "    out[tool] = json.loads(data if isinstance(data, str) else data.decode())\n"
    "open(sys.argv[2], 'w').write(json.dumps(out))\n"
)


def _rows(table: dict) -> list[dict]:
    """Google DataTable JSON -> one dict per row, keyed by column id."""
    ids = [c["id"] for c in table["cols"]]
    return [{i: (cell or {}).get("v") for i, cell in zip(ids, row["c"])} for row in table["rows"]]


@pytest.fixture(scope="module")
def xprof(tmp_path_factory: pytest.TempPathFactory) -> dict:
    work = tmp_path_factory.mktemp("xprof-roofline")
    copy = work / TPU_SAMPLE.name  # the tools write cache files beside their input
    shutil.copy(TPU_SAMPLE, copy)
    out = work / "tools.json"
    subprocess.run([sys.executable, "-c", _TOOLS, str(copy), str(out)], check=True, capture_output=True, timeout=300)
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def ours(xspace_warehouse: Path) -> pl.DataFrame:
    return xprosql.load(xspace_warehouse).roofline(profiles=[profile_id_of(TPU_SAMPLE.read_bytes())]).pl()


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=TOLERANCE, abs_tol=1e-9)


def test_every_hlo_stats_op_agrees(xprof: dict, ours: pl.DataFrame) -> None:
    theirs = _rows(xprof["hlo_stats"])
    mine = {(r["program_id"], r["op"]): r for r in ours.filter(pl.col("row_kind") == "op").iter_rows(named=True)}
    assert len(theirs) == len(mine) == 17
    for t in theirs:
        m = mine[(int(t["program_id"]), t["hlo_op_name"])]
        op = t["hlo_op_name"]
        assert _close(m["occurrences"], t["occurrences"]), op
        assert _close(m["self_time_ps"], t["total_self_time"] * 1e6), op
        assert _close(m["total_time_ps"], t["total_time"] * 1e6), op
        assert _close(m["self_time_share"], t["total_self_time_percent"] / 100), op
        assert _close(m["flop_rate"], t["normalized_flop_rate"] * 1e9), op
        assert _close(m["operational_intensity"], t["operational_intensity"]), op
        assert m["bound_by"].lower() == t["bound_by"].lower(), op
        if m["async_window_ps"] is None:
            assert _close(m["hbm_bandwidth"], t["hbm_bw"] * GIB), op
            assert _close(m["memory_bandwidth"], t["measured_memory_bw"] * GIB), op
        else:
            # Deliberately not XProf's: bytes over the start..done window, never faster than over the op alone.
            assert op.startswith(("copy-start", "copy-done"))
            assert _close(m["hbm_bandwidth"], m["hbm_bytes"] / (m["async_window_ps"] * 1e-12)), op
            assert m["hbm_bandwidth"] < t["hbm_bw"] * GIB, op


def test_program_row_is_our_profile_row(xprof: dict, ours: pl.DataFrame) -> None:
    program = next(r for r in _rows(xprof["roofline_model"][0]) if r["category"] == "Program" and r["step"] == "Total")
    total = ours.filter(pl.col("row_kind") == "profile").row(0, named=True)
    assert _close(total["total_time_ps"], program["total_time"] * 1e6)
    assert _close(total["flop_rate"], program["measured_flop_rate"] * 1e9)
    assert _close(total["hbm_bandwidth"], program["hbm_bw"] * GIB)
    assert _close(total["memory_bandwidth"], program["measured_memory_bw"] * GIB)
    assert _close(total["operational_intensity"], program["operational_intensity"])
    assert _close(total["hbm_operational_intensity"], program["hbm_operational_intensity"])
    assert _close(total["roofline_efficiency"], program["roofline_efficiency"])
    assert total["bound_by"].lower() == program["bound_by"].lower()


def test_peaks_and_ridge_points_agree(xprof: dict, ours: pl.DataFrame) -> None:
    p = {k: float(v) for k, v in xprof["roofline_model"][0]["p"].items() if k != "device_type"}
    total = ours.filter(pl.col("row_kind") == "profile").row(0, named=True)
    # XProf prints 6 significant digits.
    digits = 1e-5
    assert math.isclose(total["peak_flops_per_s"], p["peak_flop_rate"] * 1e9, rel_tol=digits)
    assert math.isclose(total["peak_hbm_bytes_per_s"], p["peak_hbm_bw"] * GIB, rel_tol=digits)
    assert math.isclose(total["peak_vmem_read_bytes_per_s"], p["peak_vmem_read_bw"] * GIB, rel_tol=digits)
    assert math.isclose(total["peak_vmem_write_bytes_per_s"], p["peak_vmem_write_bw"] * GIB, rel_tol=digits)
    assert math.isclose(total["ridge_point"], p["hbm_ridge_point"], rel_tol=digits)
    assert math.isclose(total["peak_flops_per_s"] / total["peak_vmem_read_bytes_per_s"], p["vmem_read_ridge_point"], rel_tol=digits)
    assert math.isclose(total["peak_flops_per_s"] / total["peak_vmem_write_bytes_per_s"], p["vmem_write_ridge_point"], rel_tol=digits)
    assert p["peak_cmem_read_bw"] == 0 and total["peak_cmem_read_bytes_per_s"] is None
    assert total["device_model"] == xprof["roofline_model"][0]["p"]["device_type"]
