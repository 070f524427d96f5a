"""AMD GPUs on the real ROCm samples: device models, chip peaks and HIP launches.

Expectations come from outside the code under test: AMD's data sheet numbers (docs/reference.md,
AMD GPUs, written out again here), the Kineto traces' own deviceProperties and events, and the
XSpace planes' stats decoded straight from the protobuf.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import duckdb
import pytest
from conftest import TEST_DATA

import xprosql
from xprosql.ingest import profile_id_of
from xprosql.models import hardware
from xprosql.protos import xplane_pb2

KINETO = {name: TEST_DATA / "kineto" / f"{name}.json.gz"
          for name in ("mi250_rocm", "mi300_sglang_decode_bs32", "mi300_torch_compile_triton")}
XSPACE = {name: TEST_DATA / "xspace" / f"{name}.xplane.pb" for name in ("mi300_jax_conv", "mi355_jax_te_fused_attn")}
T, G = 1e12, 1e9

# AMD data sheets, whole product: (fp16/bf16 dense matrix FLOP/s, fp32 vector FLOP/s, HBM bytes/s, HBM bytes).
DATA_SHEET = {
    "MI210": (181.0 * T, 22.6 * T, 1600 * G, 64 * G),
    "MI250": (362.1 * T, 45.3 * T, 3200 * G, 128 * G),
    "MI250X": (383.0 * T, 47.9 * T, 3200 * G, 128 * G),
    "MI300A": (980.6 * T, 122.6 * T, 5300 * G, 128 * G),
    "MI300X": (1307.4 * T, 163.4 * T, 5300 * G, 192 * G),
    "MI325X": (1307.4 * T, 163.4 * T, 6000 * G, 256 * G),
    "MI355X": (2500 * T, 157.3 * T, 8000 * G, 288 * G),
}
# ROCm shows an MI250 / MI250X as two devices, one per GCD: each has half the module.
PER_DEVICE = {**{k: v for k, v in DATA_SHEET.items() if not k.startswith("MI250")},
              **{f"{k} GCD": tuple(x / 2 for x in DATA_SHEET[k]) for k in ("MI250", "MI250X")}}
# (gfx arch as ROCm's compute capability, CUs) -> the board (docs/reference.md, AMD GPUs).
BOARDS = {(9, 0, 104): "AMD Instinct MI210 / MI250 GCD", (9, 4, 304): "AMD Instinct MI300X",
          (9, 5, 256): "AMD Instinct MI355X"}
CHIP_OF = {"AMD Instinct MI210 / MI250 GCD": "MI250 GCD", "AMD Instinct MI300X": "MI300X",
           "AMD Instinct MI355X": "MI355X"}
HIP_LAUNCHES = {"hipLaunchKernel", "hipExtLaunchKernel", "hipModuleLaunchKernel", "hipExtModuleLaunchKernel",
                "hipGraphLaunch"}


def _close(a: float | None, b: float) -> bool:
    return a is not None and abs(a - b) <= 1e-9 * b


def _raw(path: Path) -> dict[str, Any]:
    return json.loads(gzip.decompress(path.read_bytes()))


def _plane_stats(path: Path) -> dict[str, dict[str, Any]]:
    space = xplane_pb2.XSpace()
    space.ParseFromString(path.read_bytes())
    out = {}
    for plane in space.planes:
        if plane.name.startswith("/device:GPU:"):
            out[plane.name] = {plane.stat_metadata[s.metadata_id].name: getattr(s, s.WhichOneof("value"))
                               for s in plane.stats}
    return out


@pytest.fixture(scope="module")
def run(samples_warehouse: Path) -> xprosql.Run:
    """Every real sample, the AMD ones among them (conftest: one ingest for the session)."""
    return xprosql.load(samples_warehouse)


def _devices(run: xprosql.Run, path: Path) -> dict[str, dict[str, Any]]:
    rows = run.sql("SELECT * FROM devices WHERE profile_id = $p AND kind = 'gpu'",
                   {"p": profile_id_of(path.read_bytes())}).pl()
    return {r["name"]: r for r in rows.iter_rows(named=True)}


def test_chip_table_holds_the_data_sheet_numbers() -> None:
    chips = {c.name: c for c in hardware.CHIPS if c.name in PER_DEVICE}
    assert set(chips) == set(PER_DEVICE)
    for name, (flops, fp32, bandwidth, memory) in PER_DEVICE.items():
        chip = chips[name]
        assert chip.kind == "gpu"
        for got, want in ((chip.peak_flops_per_s, flops), (chip.peak_fp32_flops_per_s, fp32),
                          (chip.peak_hbm_bytes_per_s, bandwidth), (chip.hbm_bytes, memory)):
            assert _close(got, want), (name, got, want)
    # docs/reference.md states the same module numbers.
    text = (Path(__file__).resolve().parents[1] / "docs" / "reference.md").read_text()
    section = text.split("## AMD GPUs")[1].split("\n## ")[0]
    documented = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 7 and cells[0].startswith("MI"):
            documented[cells[0].split()[0]] = (float(cells[1].split()[0]) * T, float(cells[2]) * T,
                                               float(cells[3]) * G, float(cells[4].split()[0]) * G)
    assert documented == DATA_SHEET


def test_model_names_find_their_chip_in_python_and_sql() -> None:
    names = {"AMD Instinct MI300X": "MI300X", "AMD Instinct MI300A": "MI300A", "AMD Instinct MI325X": "MI325X",
             "AMD Instinct MI355X": "MI355X", "AMD Instinct MI210": "MI210", "AMD Instinct MI250X": "MI250X GCD",
             "AMD Instinct MI250": "MI250 GCD", "AMD Instinct MI210 / MI250 GCD": "MI250 GCD",
             "AMD Radeon Graphics": None, "NVIDIA H100 80GB HBM3": "H100"}
    con = duckdb.connect()
    con.register("hardware_models", hardware.hardware_models_table())
    for model, want in names.items():
        chip = hardware.chip_for_model(model, memory_bytes=64e9)
        assert (chip.name if chip else None) == want, model
        got = con.execute("""SELECT chip FROM hardware_models
                             WHERE regexp_matches(regexp_replace(lower($m), '[^a-z0-9]', '', 'g'), model_pattern)
                               AND (max_memory_bytes IS NULL OR 64e9 <= max_memory_bytes)
                             ORDER BY priority LIMIT 1""", {"m": model}).fetchall()
        assert (got[0][0] if got else None) == want, model


def test_generic_names_give_way_to_arch_cus_and_memory() -> None:
    def model(name: str | None, capability: tuple[int, int] | None, cus: int, memory: float, vendor: str | None = None):
        return hardware.device_model(name, compute_capability=capability, sm_count=cus, memory_bytes=int(memory),
                                     vendor=vendor)

    assert model("AMD Radeon Graphics", (9, 4), 304, 206e9) == "AMD Instinct MI300X"
    assert model("AMD Radeon Graphics", (9, 4), 304, 275e9) == "AMD Instinct MI325X"
    assert model("AMD Radeon Graphics", (9, 4), 228, 128e9) == "AMD Instinct MI300A"
    assert model("AMD Radeon Graphics", (9, 0), 110, 68.7e9) == "AMD Instinct MI250X GCD"
    assert model("AMD Radeon Graphics", (9, 4), 38, 25e9) == "AMD Radeon Graphics"  # a partition: nothing better
    assert model(None, (9, 5), 256, 309e9, "AMD") == "AMD Instinct MI355X"
    assert model("AMD Instinct MI300X", (9, 4), 38, 25e9) == "AMD Instinct MI300X"  # a real name stays
    # AMD's 9.0 is gfx90a, not Hopper: the vendor keeps the tables apart.
    assert model(None, (9, 0), 132, 85e9) == "H100 SXM"
    assert model(None, (9, 0), 132, 85e9, "AMD") is None
    assert hardware.gpu_peak_flops_per_s(compute_capability=(9, 0), sm_count=104, clock_khz=1700000, vendor="AMD") is None


@pytest.mark.parametrize("name", sorted(KINETO))
def test_kineto_devices_with_properties_get_their_model_and_peaks(run: xprosql.Run, name: str) -> None:
    properties = _raw(KINETO[name])["deviceProperties"]
    devices = _devices(run, KINETO[name])
    assert properties
    for prop in properties:
        device = devices[f"/device:GPU:{prop['id']}"]
        assert (device["core_count"], device["memory_bytes"], device["compute_capability"]) == (
            prop["numSms"], prop["totalGlobalMem"], f"{prop['computeMajor']}.{prop['computeMinor']}")
        generic = prop["name"] == "AMD Radeon Graphics"
        model = BOARDS[(prop["computeMajor"], prop["computeMinor"], prop["numSms"])] if generic else prop["name"]
        assert device["model"] == model
        flops, _, bandwidth, _ = PER_DEVICE[CHIP_OF[model]]
        assert _close(device["peak_flops_per_s"], flops) and _close(device["peak_hbm_bytes_per_s"], bandwidth)
        assert device["peak_source"] == "hardware_model"


@pytest.mark.parametrize("name", sorted(KINETO))
def test_every_amd_gpu_that_ran_work_has_a_model_and_peaks(run: xprosql.Run, name: str) -> None:
    # The MI300 traces list device 0 in deviceProperties and run their kernels on pids 2 and 9: one board.
    raw = _raw(KINETO[name])
    listed = {p["id"] for p in raw["deviceProperties"]}
    busy = {e["pid"] for e in raw["traceEvents"] if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")}
    devices = _devices(run, KINETO[name])
    assert busy
    for pid in busy:
        device = devices[f"/device:GPU:{pid}"]
        assert device["model"] is not None and device["peak_flops_per_s"] and device["peak_hbm_bytes_per_s"], device
        if pid not in listed:
            stats = run.sql("SELECT str_value FROM device_stats WHERE profile_id = $p AND device_id = $d AND stat = 'model_source'",
                            {"p": profile_id_of(KINETO[name].read_bytes()), "d": device["device_id"]}).rows()
            assert stats and "one board" in stats[0][0]


@pytest.mark.parametrize("name", sorted(XSPACE))
def test_xspace_gpu_planes_get_their_model_and_peaks(run: xprosql.Run, name: str) -> None:
    planes = _plane_stats(XSPACE[name])
    devices = _devices(run, XSPACE[name])
    identified = 0
    for plane, stats in planes.items():
        assert stats["device_vendor"] == "AMD"
        device = devices[plane]
        if "compute_cap_major" not in stats:  # a vendor and nothing else: no model to give
            assert device["model"] is None and device["peak_flops_per_s"] is None
            continue
        identified += 1
        model = BOARDS[(stats["compute_cap_major"], stats["compute_cap_minor"], stats["core_count"])]
        assert device["model"] == model
        assert (device["core_count"], device["memory_bytes"], device["clock_rate_khz"]) == (
            stats["core_count"], stats["memory_size"], stats["clock_rate"])
        # FLOP/s from the data sheet; the bandwidth stat is the profile's and wins.
        assert _close(device["peak_flops_per_s"], PER_DEVICE[CHIP_OF[model]][0])
        assert device["peak_hbm_bytes_per_s"] == float(stats["memory_bandwidth"])
        assert device["peak_source"] == "profile+hardware_model"
    assert identified >= 1


@pytest.mark.parametrize("name", ["mi250_rocm", "mi300_jax_conv", "mi355_jax_te_fused_attn"])
def test_roofline_takes_the_amd_chip_peaks(run: xprosql.Run, name: str) -> None:
    path = {**KINETO, **XSPACE}[name]
    rows = run.roofline().pl().filter(row_kind="profile", profile_id=profile_id_of(path.read_bytes()))
    assert rows.height == 1
    row = rows.row(0, named=True)
    chip = CHIP_OF[row["device_model"]]
    assert row["hardware_chip"] == chip
    assert row["peak_flops_source"] == "hardware_model" and _close(row["peak_flops_per_s"], PER_DEVICE[chip][0])


@pytest.mark.parametrize("name", sorted(KINETO))
def test_launch_stats_count_every_hip_launch(run: xprosql.Run, name: str) -> None:
    events = _raw(KINETO[name])["traceEvents"]
    calls = {e["args"]["correlation"]: e for e in events
             if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})}
    ops = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    # HTA drops the ops of the last ProfilerStep when a trace has two or more.
    steps = [e for e in events if str(e.get("name")).startswith("ProfilerStep#") and not str(e.get("cat")).startswith("gpu")]
    last = max(e["ts"] for e in steps) if len({e["name"] for e in steps}) >= 2 else float("inf")
    expected = {}
    for op in ops:
        call = calls.get(op["args"].get("correlation"))
        if call and (call["name"] in HIP_LAUNCHES or call["name"].startswith(("hipMemcpy", "hipMemset"))) and call["ts"] < last:
            expected[op["args"]["correlation"]] = call["name"]
    assert expected

    stats = run.launch_stats(profiles=[profile_id_of(KINETO[name].read_bytes())]).pl()
    assert stats.height == len(expected)
    assert dict(zip(stats["correlation_id"], stats["launch_name"])) == expected
    assert (stats["launch_delay_ps"] >= 0).all() and (stats["cpu_dur_ps"] > 0).all()


def test_launch_kinds_keep_htas_cuda_list(run: xprosql.Run) -> None:
    names = {"cudaLaunchKernel": "kernel", "cudaLaunchKernelExC": "kernel", "cuLaunchKernel": None,
             "cudaMemcpyAsync": "memory", "cudaMemcpy": None, "cudaGraphLaunch": None,
             "hipLaunchKernel": "kernel", "hipExtLaunchKernel": "kernel", "hipModuleLaunchKernel": "kernel",
             "hipExtModuleLaunchKernel": "kernel", "hipGraphLaunch": "kernel", "hipMemcpyWithStream": "memory",
             "hipMemcpyAsync": "memory", "hipMemsetAsync": "memory", "hipGetDevicePropertiesR0600": None,
             "hipGraphInstantiateWithFlags": None}
    got = dict(run.sql("SELECT n, xprosql_launch_kind(n) FROM unnest($names) AS t(n)", {"names": list(names)}).rows())
    assert got == names


def test_hardware_models_view_is_the_chip_table() -> None:
    """Every connection's hardware_models (a view of literals, so that no Arrow table is registered) holds the rows
    and types of hardware_models_table, read straight from CHIPS."""
    from xprosql.engine.connection import connect_views

    got = connect_views({}).sql("SELECT * FROM hardware_models ORDER BY priority").to_arrow_table()
    want = hardware.hardware_models_table()
    assert got.schema == want.schema and got.to_pylist() == want.to_pylist()
    assert [row["chip"] for row in got.to_pylist()] == [chip.name for chip in hardware.CHIPS]
