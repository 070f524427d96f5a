"""XSpace ingest checked against the real files, decoded here straight from the protobuf."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path

import pytest
from conftest import GPU_SAMPLE, TPU_SAMPLE, XSPACE_SAMPLES

import xprosql
from xprosql.ingest import profile_id_of
from xprosql.ingest.xspace import PROMOTED_STATS
from xprosql.protos import xplane_pb2


def _space(path: Path) -> xplane_pb2.XSpace:
    space = xplane_pb2.XSpace()
    space.ParseFromString(path.read_bytes())
    return space


def _stat_value(plane: xplane_pb2.XPlane, stat: xplane_pb2.XStat):
    which = stat.WhichOneof("value")
    value = getattr(stat, which)
    if which == "ref_value":
        value = plane.stat_metadata[value].name
    return plane.stat_metadata[stat.metadata_id].name, value


def _profile_id(path: Path) -> str:
    return profile_id_of(path.read_bytes())


@pytest.fixture(scope="module", params=["tpu", "gpu", "jax_cpu"])
def ingested(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[xprosql.Run, Path, str]:
    """Each real XSpace source: the two samples, and a profile JAX writes on this CPU."""
    if request.param == "jax_cpu":
        sample = request.getfixturevalue("jax_cpu_profile")
        root = tmp_path_factory.mktemp("jax_wh") / "run"
        assert xprosql.ingest(sample, into=root).ok
    else:
        sample, root = XSPACE_SAMPLES[request.param], request.getfixturevalue("xspace_warehouse")
    return xprosql.load(root), sample, _profile_id(sample)


def test_events_per_plane_and_line_equal_the_file(ingested: tuple[xprosql.Run, Path, str]) -> None:
    run, sample, pid = ingested
    expected = Counter()
    for plane in _space(sample).planes:
        for line in plane.lines:
            expected[(plane.name, line.name, line.id)] += len(line.events)
    rows = run.sql(
        """SELECT d.name, t.name, t.line_id, count(e.event_id)
           FROM tracks t JOIN devices d USING (profile_id, device_id)
           LEFT JOIN events e USING (profile_id, device_id, track_id)
           WHERE profile_id = $pid GROUP BY ALL""",
        {"pid": pid},
    ).rows()
    assert Counter({(d, t, line): n for d, t, line, n in rows}) == expected
    assert sum(expected.values()) > 20


def test_event_times_are_relative_picoseconds(ingested: tuple[xprosql.Run, Path, str]) -> None:
    run, sample, pid = ingested
    space = _space(sample)
    expected = sorted(
        (line.timestamp_ns * 1000 + event.offset_ps, event.duration_ps)
        for plane in space.planes for line in plane.lines for event in line.events
    )
    start_ns = run.sql("SELECT start_ns FROM profiles WHERE profile_id = $pid", {"pid": pid}).rows()[0][0]
    got = run.sql("SELECT start_ps, dur_ps FROM events WHERE profile_id = $pid", {"pid": pid}).rows()
    assert sorted((start + start_ns * 1000, dur) for start, dur in got) == expected
    assert min(start for start, _ in got) >= 0
    # Stored sorted by time, so range filters skip row groups.
    stored = [s for s, _ in got]
    assert stored == sorted(stored)


def test_duration_per_hlo_op_equals_the_file(xspace_warehouse: Path) -> None:
    # TPU op lines name the HLO op in the event metadata's display_name.
    expected: defaultdict[tuple[str, str], int] = defaultdict(int)
    for plane in _space(TPU_SAMPLE).planes:
        for line in plane.lines:
            if line.name == "XLA Ops":
                for event in line.events:
                    expected[(plane.name, plane.event_metadata[event.metadata_id].display_name)] += event.duration_ps
    rows = xprosql.load(xspace_warehouse).sql(
        """SELECT d.name, e.hlo_op, sum(e.dur_ps)::BIGINT FROM events e
           JOIN devices d USING (profile_id, device_id) JOIN tracks t USING (profile_id, device_id, track_id)
           WHERE profile_id = $pid AND t.name = 'XLA Ops' GROUP BY ALL""",
        {"pid": _profile_id(TPU_SAMPLE)},
    ).rows()
    assert {(d, op): total for d, op, total in rows} == dict(expected)
    assert len(expected) > 50


def test_every_stat_in_the_file_is_in_the_warehouse(ingested: tuple[xprosql.Run, Path, str]) -> None:
    """Plane, metadata and event stats are all findable; counts as the issue states for the TPU sample."""
    run, sample, pid = ingested
    space = _space(sample)
    params = {"pid": pid}
    plane_stats = Counter(
        (device_id, *_stat_value(plane, s)) for device_id, plane in enumerate(space.planes) for s in plane.stats
    )
    stored = Counter(
        (d, name, next(v for v in values if v is not None))
        for d, name, *values in run.sql(
            "SELECT device_id, stat, int_value, uint_value, double_value, str_value, bytes_value "
            "FROM device_stats WHERE profile_id = $pid", params).rows()
    )
    assert stored == plane_stats

    metadata_stats = Counter(
        (device_id, mid, *_stat_value(plane, s))
        for device_id, plane in enumerate(space.planes)
        for mid, md in plane.event_metadata.items() for s in md.stats
    )
    stored = Counter(
        (d, m, name, next(v for v in values if v is not None))
        for d, m, name, *values in run.sql(
            "SELECT device_id, metadata_id, stat, int_value, uint_value, double_value, str_value, bytes_value "
            "FROM metadata_stats WHERE profile_id = $pid", params).rows()
    )
    assert stored == metadata_stats

    # Event stats: promoted ones are columns of events, the rest rows of event_stats.
    columns = sorted({column for column, _ in PROMOTED_STATS.values()})
    events = run.sql(f"SELECT event_id, {', '.join(columns)} FROM events WHERE profile_id = $pid", params).pl()
    by_id = {row["event_id"]: row for row in events.iter_rows(named=True)}
    extra = Counter(
        (e, name, next(v for v in values if v is not None))
        for e, name, *values in run.sql(
            "SELECT event_id, stat, int_value, uint_value, double_value, str_value, bytes_value "
            "FROM event_stats WHERE profile_id = $pid", params).rows()
    )
    found = total = 0
    event_id = 0
    for plane in space.planes:
        for line in plane.lines:
            for event in line.events:
                for stat in event.stats:
                    total += 1
                    name, value = _stat_value(plane, stat)
                    column = PROMOTED_STATS.get(name, (None,))[0]
                    if column is not None and _same(by_id[event_id][column], value):
                        found += 1
                    elif extra[(event_id, name, value)] > 0:
                        extra[(event_id, name, value)] -= 1
                        found += 1
                event_id += 1
    assert found == total
    assert sum(extra.values()) == 0, "event_stats holds rows the file does not have"
    if sample == TPU_SAMPLE:
        assert (total, sum(metadata_stats.values()), sum(plane_stats.values())) == (37200, 708, 51)


def _same(stored: object, value: object) -> bool:
    if isinstance(stored, bool):
        return stored == bool(value)
    if isinstance(stored, int) and isinstance(value, int):
        return stored == value or stored == value & 0xFFFFFFFFFFFFFFFF
    return stored == value


def test_tpu_devices_and_peaks(xspace_warehouse: Path) -> None:
    rows = xprosql.load(xspace_warehouse).sql(
        "SELECT name, model, peak_flops_per_s, peak_hbm_bytes_per_s, peak_source FROM devices "
        "WHERE profile_id = $pid AND kind = 'tpu' ORDER BY name",
        {"pid": _profile_id(TPU_SAMPLE)},
    ).rows()
    assert [r[0] for r in rows] == [f"/device:TPU:{i}" for i in range(4)]
    for _, model, flops, bandwidth, source in rows:
        assert model == "TPU v6 Lite"
        assert flops == pytest.approx(918e12)
        assert bandwidth == pytest.approx(1637.99e9, rel=1e-5)
        assert source == "profile"


def test_gpu_devices_from_the_hardware_model(xspace_warehouse: Path) -> None:
    rows = xprosql.load(xspace_warehouse).sql(
        "SELECT model, compute_capability, core_count, peak_flops_per_s, peak_hbm_bytes_per_s, peak_source "
        "FROM devices WHERE profile_id = $pid AND kind = 'gpu'",
        {"pid": _profile_id(GPU_SAMPLE)},
    ).rows()
    assert len(rows) == 8
    # V100: 80 SMs x 1,024 dense fp16 tensor-core FLOP per clock x 1.53 GHz (the data sheet's 125 TF, the matrix
    # roof XProf models; tests/test_h200.py checks the model against XProf on a real H200); bandwidth from the
    # memory_bandwidth stat.
    assert set(rows) == {("Tesla V100", "7.0", 80, 80 * 1024 * 1.53e9, 898048000000.0, "profile+hardware_model")}


def test_every_tpu_op_event_joins_its_hlo_op(xspace_warehouse: Path) -> None:
    run = xprosql.load(xspace_warehouse)
    n_ops, unjoined = run.sql(
        """SELECT count(*), count(*) FILTER (WHERE h.hlo_op IS NULL)
           FROM events e JOIN tracks t USING (profile_id, device_id, track_id)
           LEFT JOIN hlo_ops h ON h.profile_id = e.profile_id AND h.program_id = e.program_id AND h.hlo_op = e.hlo_op
           WHERE e.profile_id = $pid AND t.name = 'XLA Ops'""",
        {"pid": _profile_id(TPU_SAMPLE)},
    ).rows()[0]
    assert n_ops == sum(
        len(line.events) for plane in _space(TPU_SAMPLE).planes for line in plane.lines if line.name == "XLA Ops"
    )
    assert unjoined == 0
    # The module name comes from the HLO proto of the event's program.
    modules = run.sql(
        "SELECT DISTINCT hlo_module FROM events WHERE profile_id = $pid AND program_id IS NOT NULL",
        {"pid": _profile_id(TPU_SAMPLE)},
    ).rows()
    assert None not in {m for (m,) in modules}


def test_profiles_row(xspace_warehouse: Path) -> None:
    run = xprosql.load(xspace_warehouse)
    profiles = run.profiles
    assert profiles.height == 2
    tpu = profiles.filter(profiles["profile_id"] == _profile_id(TPU_SAMPLE)).row(0, named=True)
    space = _space(TPU_SAMPLE)
    assert tpu["n_events"] == sum(len(line.events) for plane in space.planes for line in plane.lines)
    assert tpu["n_devices"] == len(space.planes)
    assert tpu["format"] == "xspace"
    assert tpu["host"] == "tpu_v6e_inference"
    assert tpu["source_path"] == str(TPU_SAMPLE.resolve())
    assert tpu["profile_start_time_ns"] == 1741722099081044120
    ends = [line.timestamp_ns * 1000 + e.offset_ps + e.duration_ps for p in space.planes for line in p.lines for e in line.events]
    starts = [line.timestamp_ns * 1000 + e.offset_ps for p in space.planes for line in p.lines for e in line.events]
    assert tpu["start_ns"] == min(starts) // 1000
    assert tpu["duration_ps"] == max(ends) - tpu["start_ns"] * 1000


def test_jax_cpu_profile_ingests_with_run_host_and_hlo(jax_cpu_profile: Path, tmp_path: Path) -> None:
    logdir = jax_cpu_profile.parents[3]
    report = xprosql.ingest(logdir, into=tmp_path / "run")
    assert report.ok and len(report.ingested) == 1, str(report)
    run = xprosql.load(tmp_path / "run")
    profile = run.profiles.row(0, named=True)
    assert profile["run"] == jax_cpu_profile.parent.name
    assert profile["host"] == jax_cpu_profile.name.removesuffix(".xplane.pb")
    assert profile["producer"] == f"jax {importlib.metadata.version('jax')}"

    space = _space(jax_cpu_profile)
    expected: defaultdict[str, int] = defaultdict(int)
    for plane in space.planes:
        for line in plane.lines:
            for event in line.events:
                stats = dict(_stat_value(plane, s) for s in event.stats)
                stats.update(dict(_stat_value(plane, s) for s in plane.event_metadata[event.metadata_id].stats))
                if "hlo_op" in stats:
                    expected[stats["hlo_op"]] += event.duration_ps
    assert expected, "JAX CPU thunk events carry hlo_op"
    got = dict(run.sql("SELECT hlo_op, sum(dur_ps)::BIGINT FROM events WHERE hlo_op IS NOT NULL GROUP BY 1").rows())
    assert got == dict(expected)
    unjoined = run.sql(
        """SELECT count(*) FROM events e LEFT JOIN hlo_ops h
           ON h.profile_id = e.profile_id AND h.program_id = e.program_id AND h.hlo_op = e.hlo_op
           WHERE e.hlo_op IS NOT NULL AND h.hlo_op IS NULL"""
    ).rows()[0][0]
    assert unjoined == 0
    assert run.sql("SELECT count(*) FROM hlo_modules WHERE module = 'jit_step'").rows()[0][0] >= 1


def _gpu_space(kernel_details: list[str], copy_sizes: list[str]) -> bytes:
    """Hand-built: what no real file shows, kernel and copy details that overflow or break their pattern, and
    `XLA Modules` names whose program does not fit (one with a program_id stat given as text)."""
    space = xplane_pb2.XSpace(hostnames=["h"])
    plane = space.planes.add(id=1, name="/device:GPU:0")
    for stat_id, name in enumerate(["kernel_details", "memcpy_details", "program_id"], 1):
        plane.stat_metadata[stat_id].CopyFrom(xplane_pb2.XStatMetadata(id=stat_id, name=name))
    for metadata_id, name in enumerate(["k", "MemcpyH2D", "jit_g(18446744073709551616)", "jit_h(77)"], 1):
        plane.event_metadata[metadata_id].CopyFrom(xplane_pb2.XEventMetadata(id=metadata_id, name=name))
    plane.event_metadata[4].stats.add(metadata_id=3, str_value=str(2**64 - 1))
    stream = plane.lines.add(id=1, name="Stream #3(Compute)", timestamp_ns=10)
    for k, details in enumerate(kernel_details):
        stream.events.add(metadata_id=1, offset_ps=100 * k, duration_ps=50).stats.add(metadata_id=1, str_value=details)
    for k, size in enumerate(copy_sizes):
        copy = stream.events.add(metadata_id=2, offset_ps=100 * (k + len(kernel_details)), duration_ps=10)
        copy.stats.add(metadata_id=2, str_value=f"kind:x size:{size}")
    modules = plane.lines.add(id=2, name="XLA Modules", timestamp_ns=10)
    for metadata_id in (3, 4):
        modules.events.add(metadata_id=metadata_id, offset_ps=metadata_id, duration_ps=1)
    return space.SerializeToString()


def test_kernel_and_copy_details_parse_field_by_field(tmp_path: Path) -> None:
    """A field that does not parse (a number past int64, "1.2.3", a grid of two) is null on its own; the others
    of its event are kept. Shared memory whose parts fit int64 but their sum does not has no total."""
    path = tmp_path / "details.xplane.pb"
    path.write_bytes(_gpu_space(["regs:99999999999999999999 shm:5 occ_pct:1.2.3 grid:1,2,3 block:4,5,6",
                                 "regs:7\tshm:1 static_shm:2 occ_pct:50.0", "occ_pct:.5 dynamic_shm:3 grid:1,2",
                                 f"shm:{2**63 - 1} static_shm:1"],
                                ["4096", "99999999999999999999"]))
    report = xprosql.ingest(path, into=tmp_path / "run")
    assert report.ok, str(report)
    run = xprosql.load(tmp_path / "run")
    kernels = run.sql("SELECT registers_per_thread, shared_memory_bytes, occupancy_pct, grid_x, grid_y, grid_z, "
                      "block_x, block_y, block_z FROM kernels ORDER BY start_ps").rows()
    assert kernels == [(None, 5, None, 1, 2, 3, 4, 5, 6), (7, 3, 50.0, None, None, None, None, None, None),
                       (None, 3, 0.5, None, None, None, None, None, None),
                       (None, None, None, None, None, None, None, None, None)]  # a total past int64: none, not negative
    assert run.sql("SELECT bytes FROM memcpys ORDER BY start_ps").rows() == [(4096,), (None,)]
    # jit_g's program is past uint64 (its module is still named); jit_h's program is its stat's text.
    assert run.sql("SELECT name, hlo_module, program_id FROM events WHERE name LIKE 'jit%' ORDER BY name").rows() == [
        ("jit_g(18446744073709551616)", "jit_g", None), ("jit_h(77)", None, 2**64 - 1)]


def test_a_grid_past_int64_fails_its_file_alone(tmp_path: Path) -> None:
    """A launch's grid or block must be whole: one that does not fit int64 makes its file corrupt, named."""
    bad = tmp_path / "grid.xplane.pb"
    bad.write_bytes(_gpu_space(["grid:99999999999999999999,1,1 block:1,1,1"], []))
    report = xprosql.ingest([bad, TPU_SAMPLE], into=tmp_path / "run")
    assert [Path(p.path).name for p in report.ingested] == [TPU_SAMPLE.name]
    [(path, reason)] = report.failed
    assert path == str(bad) and "corrupt XSpace content" in reason


def test_an_xspace_ingest_loads_no_polars(tmp_path: Path) -> None:
    """`xprosql ingest` decodes XSpace files with Arrow and numpy: Polars' import was about a tenth of the small
    sample's first answer (benchmarks/RESULTS.md, "The XSpace decoder without Polars")."""
    probe = "import sys\nfrom xprosql.cli import main\nmain(sys.argv[1:])\nprint('polars' in sys.modules, file=sys.stderr)\n"
    done = subprocess.run([sys.executable, "-c", probe, "ingest", str(TPU_SAMPLE), str(GPU_SAMPLE), "--into",
                           str(tmp_path / "run")], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stderr.split()[-1] == "False", done.stderr
