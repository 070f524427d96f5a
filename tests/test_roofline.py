"""Roofline and memory-bound classification (sql/ops/roofline.sql, sql/ops/memory_bound.sql).

Real profiles throughout: the TPU v6e and V100 XSpace samples, a Kineto A100
trace, and JAX CPU profiles made here (the test step, a matmul-heavy MLP step
and an elementwise step). One test builds an XSpace with nested ops, because
no sample nests ops on an op line; it says so.
"""

from __future__ import annotations

import importlib.util
import math
import random
import re
from collections import defaultdict
from pathlib import Path

import polars as pl
import pytest
from conftest import GPU_SAMPLE, TEST_DATA, TPU_SAMPLE, analysis_text, bound_parameters
from jax_profiles import JAX_ROOFLINE_PROGRAMS, jax_available, session_roofline_profile
from polars.testing import assert_frame_equal

import xprosql
from xprosql.engine.library import library
from xprosql.ingest import profile_id_of
from xprosql.models import hardware
from xprosql.protos import xplane_pb2
from xprosql.queries.roofline import ROOFLINE_KEYS, roofline, roofline_polars

KINETO_A100 = TEST_DATA / "kineto" / "a100_nccl_rank0.json.gz"
# A CPU roof of the order of a small x86 server: 100 GFLOP/s, 20 GB/s (ridge 5 FLOP/byte).
CPU_PEAKS = {"peak_flops_per_s": 1e11, "peak_hbm_bytes_per_s": 2e10}


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory: pytest.TempPathFactory, jax_cpu_profile: Path) -> Path:
    """TPU, GPU (XSpace and Kineto) and JAX CPU profiles in one warehouse."""
    sources = [TPU_SAMPLE, GPU_SAMPLE, KINETO_A100, jax_cpu_profile]
    if jax_available():
        base = tmp_path_factory.getbasetemp() / "jax-roofline"
        sources += [session_roofline_profile(program, base) for program in sorted(JAX_ROOFLINE_PROGRAMS)]
    root = tmp_path_factory.mktemp("roofline") / "run"
    report = xprosql.ingest(sources, into=root)
    assert report.ok, str(report)
    return root


@pytest.fixture(scope="module")
def run(warehouse: Path) -> xprosql.Run:
    return xprosql.load(warehouse)


def _pid(path: Path) -> str:
    return profile_id_of(path.read_bytes())


def _jax_pid(run: xprosql.Run, module: str) -> str:
    rows = run.sql("SELECT DISTINCT profile_id FROM hlo_modules WHERE module = $m", {"m": module}).rows()
    assert len(rows) == 1, rows
    return rows[0][0]


def _assert_frames_equal(a: pl.DataFrame, b: pl.DataFrame) -> None:
    assert a.columns == b.columns
    assert a.height == b.height
    a, b = a.sort(ROOFLINE_KEYS, nulls_last=True), b.sort(ROOFLINE_KEYS, nulls_last=True)
    for column in a.columns:
        for i, (x, y) in enumerate(zip(a[column].to_list(), b[column].to_list())):
            if isinstance(x, float) and isinstance(y, float):
                assert math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-15), (column, a.row(i, named=True)["op"], x, y)
            else:
                assert x == y, (column, a.row(i, named=True)["op"], x, y)


# --------------------------------------------------------------------------- both engines


@pytest.mark.parametrize("options", [{}, {"top": 3}, {**CPU_PEAKS, "peak_source": "measured"}], ids=["default", "top", "peaks"])
def test_polars_roofline_equals_the_sql_one(run: xprosql.Run, options: dict) -> None:
    sql = roofline(run.engine, **options).pl()
    assert set(sql["device_kind"]) >= {"tpu", "gpu", "cpu"}
    _assert_frames_equal(sql, roofline_polars(run.table, **options).collect())


def test_op_stats_stored_at_ingest_equal_the_sql_over_the_warehouse(run: xprosql.Run) -> None:
    # Each profile's op_stats rows are derived alone, from its staged files; recomputed over the
    # committed warehouse, all profiles at once, they must come out the same.
    stored = run.sql("SELECT * FROM op_stats").pl()
    recomputed = run.sql(analysis_text("ops._op_stats")).pl()
    assert len(stored) > 0 and set(stored["device_kind"]) >= {"tpu", "gpu", "cpu"}
    assert set(stored["profile_id"]) == set(run.profile_ids)
    keys = ["profile_id", "device_id", "program_id", "op"]
    as_text = [pl.col(c).cast(pl.String) for c in ("device_kind", "cost_source")]
    assert_frame_equal(
        stored.with_columns(as_text).sort(keys, nulls_last=True),
        recomputed.select(stored.columns).with_columns(as_text).sort(keys, nulls_last=True),
    )


@pytest.mark.slow
def test_op_stats_derived_in_memory_equal_derived_from_the_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Small profiles are derived from their decoded tables in memory, large ones from the staged Parquet files."""
    from xprosql.ingest import derived

    kept: list[bool] = []
    tables = derived.DecodedTables.tables
    monkeypatch.setattr(derived.DecodedTables, "tables", lambda self: kept.append(tables(self) is not None) or tables(self))
    sources = [TPU_SAMPLE, GPU_SAMPLE, KINETO_A100]
    assert xprosql.ingest(sources, into=tmp_path / "memory").ok
    monkeypatch.setattr(derived, "IN_MEMORY_BYTES", 0)
    assert xprosql.ingest(sources, into=tmp_path / "files").ok
    assert kept == [True] * 3 + [False] * 3
    query = "SELECT * FROM op_stats ORDER BY ALL"
    in_memory = xprosql.load(tmp_path / "memory").sql(query).arrow()
    assert in_memory.num_rows > 0
    assert in_memory.equals(xprosql.load(tmp_path / "files").sql(query).arrow())


def test_analysis_by_name_is_the_python_api(run: xprosql.Run) -> None:
    by_name = run.analysis("roofline", top=5).pl()
    _assert_frames_equal(by_name, run.roofline(top=5).pl())
    assert by_name.filter(pl.col("row_kind") == "op").group_by("profile_id", "device_kind").len()["len"].max() <= 5


def test_profiles_parameter_selects_profiles(run: xprosql.Run) -> None:
    frame = run.roofline(profiles=[_pid(TPU_SAMPLE)]).pl()
    assert set(frame["profile_id"]) == {_pid(TPU_SAMPLE)}
    with pytest.raises(xprosql.ParameterError, match="0123456789abcdef"):
        run.roofline(profiles=["0123456789abcdef"]).pl()


# --------------------------------------------------------------------------- times


def _nested_spans(rng: random.Random, start: int, end: int, depth: int) -> list[tuple[int, int]]:
    """Random ops inside [start, end): siblings in order, some back to back or sharing the parent's start."""
    spans: list[tuple[int, int]] = []
    cursor = start
    for _ in range(rng.randint(1, 3) if depth < 3 else 0):
        if end - cursor < 4:
            break
        s = cursor + rng.choice([0, rng.randint(0, (end - cursor) // 4)])
        e = s + rng.randint(1, max(1, (end - s) // 2))
        spans.append((s, e))
        spans += _nested_spans(rng, s, e, depth + 1)
        cursor = e
    return spans


def _direct_children_ps(spans: list[tuple[int, int]]) -> list[int]:
    """Brute force: each span's direct children are the spans it contains with no span between."""
    out = []
    for i, (s, e) in enumerate(spans):
        inside = [j for j, (a, b) in enumerate(spans) if j != i and s <= a and b <= e]
        direct = [j for j in inside
                  if not any(k != j and spans[k][0] <= spans[j][0] and spans[j][1] <= spans[k][1] for k in inside)]
        out.append(sum(spans[j][1] - spans[j][0] for j in direct))
    return out


def test_self_time_subtracts_the_ops_nested_on_the_same_line(tmp_path: Path) -> None:
    # No real sample nests ops on an op line, so this test writes an XSpace whose
    # TPU `XLA Ops` lines hold random trees of nested ops (one tree per device).
    rng = random.Random(4)
    space = xplane_pb2.XSpace(hostnames=["nesting-test"])
    expected: dict[str, tuple[int, int, int]] = {}
    for device in range(12):
        plane = space.planes.add(id=device, name=f"/device:TPU:{device}")
        plane.stat_metadata[1].id, plane.stat_metadata[1].name = 1, "hlo_op"
        plane.stat_metadata[2].id, plane.stat_metadata[2].name = 2, "program_id"
        line = plane.lines.add(id=1, name="XLA Ops", timestamp_ns=1_000_000)
        spans = _nested_spans(rng, 0, 200_000, 0)
        rng.shuffle(spans)  # event order on the line must not matter
        for i, ((s, e), children) in enumerate(zip(spans, _direct_children_ps(spans))):
            op = f"op{device}.{i}"
            md = plane.event_metadata[i + 1]
            md.id, md.name = i + 1, op
            md.stats.add(metadata_id=1, str_value=op)
            md.stats.add(metadata_id=2, uint64_value=7)
            line.events.add(metadata_id=i + 1, offset_ps=s * 1000, duration_ps=(e - s) * 1000)
            expected[op] = (1, (e - s) * 1000, (e - s - children) * 1000)
    path = tmp_path / "nested.xplane.pb"
    path.write_bytes(space.SerializeToString())
    assert xprosql.ingest(path, into=tmp_path / "run").ok
    nested_run = xprosql.load(tmp_path / "run")
    for frame in (roofline(nested_run.engine).pl(), roofline_polars(nested_run.table).collect()):
        ops = frame.filter(pl.col("row_kind") == "op")
        got = {r["op"]: (r["occurrences"], r["total_time_ps"], r["self_time_ps"]) for r in ops.iter_rows(named=True)}
        assert got == expected
        assert sum(v[2] < v[1] for v in expected.values()) > 20  # the trees do nest
        total = frame.filter(pl.col("row_kind") == "profile").row(0, named=True)
        assert total["self_time_ps"] == sum(v[2] for v in expected.values())


def test_tpu_times_are_device_clock_and_device_time_is_xprof_denominator(run: xprosql.Run) -> None:
    pid = _pid(TPU_SAMPLE)
    frame = run.roofline(profiles=[pid]).pl()
    raw = run.sql(
        """SELECT sum(coalesce(device_duration_ps, dur_ps)), count(*) FROM events e
           JOIN tracks t USING (profile_id, device_id, track_id) WHERE profile_id = $p AND t.name = 'XLA Ops'""",
        {"p": pid},
    ).rows()[0]
    ops = frame.filter(pl.col("row_kind") == "op")
    assert ops["total_time_ps"].sum() == raw[0] and ops["occurrences"].sum() == raw[1]
    profile = frame.filter(pl.col("row_kind") == "profile").row(0, named=True)
    # Each device's first op start to last op end on the device clock, summed.
    spans = run.sql(
        """SELECT sum(s) FROM (SELECT max(device_offset_ps + device_duration_ps) - min(device_offset_ps) AS s
           FROM events e JOIN tracks t USING (profile_id, device_id, track_id)
           WHERE profile_id = $p AND t.name = 'XLA Ops' GROUP BY device_id)""",
        {"p": pid},
    ).rows()[0][0]
    assert profile["total_time_ps"] == profile["device_time_ps"] == spans


# --------------------------------------------------------------------------- async copies


def _stat(stat: xplane_pb2.XStat, names: dict[int, str]):
    kind = stat.WhichOneof("value")
    value = getattr(stat, kind)
    return names.get(value) if kind == "ref_value" else value


def test_async_copy_bandwidth_is_bytes_over_the_start_to_done_window(run: xprosql.Run) -> None:
    # Independent pairing from the raw file: on each TPU's `XLA Ops` line, every
    # copy-done.N closes the latest open copy-start.N. Windows, like op times, are
    # on the device clock; on the host timeline the same pairs must give XProf's
    # `Async XLA Ops` spans. A copy cut by the profile's edges keeps its own time.
    space = xplane_pb2.XSpace()
    space.ParseFromString(TPU_SAMPLE.read_bytes())
    windows: dict[str, int] = defaultdict(int)
    seconds_ps: dict[str, int] = defaultdict(int)
    nbytes: dict[str, int] = defaultdict(int)
    device0: dict[str, int] = defaultdict(int)
    async_line: dict[str, int] = defaultdict(int)
    for plane in space.planes:
        if not re.fullmatch(r"/device:TPU:\d+", plane.name):
            continue
        names = {k: v.name for k, v in plane.stat_metadata.items()}
        for line in plane.lines:
            if line.name == "Async XLA Ops":  # XProf's own start..done spans (TPU:0 only, host clock)
                for event in line.events:
                    async_line[next(_stat(s, names) for s in event.stats if names.get(s.metadata_id) == "hlo_op")] += event.duration_ps
            if line.name != "XLA Ops":
                continue
            copies = []
            for event in line.events:
                md = plane.event_metadata[event.metadata_id]
                match = re.fullmatch(r"copy-(start|done)(\.\d+)?", md.display_name)
                if match:
                    stats = {names.get(s.metadata_id): _stat(s, names) for s in event.stats}
                    md_stats = {names.get(s.metadata_id): _stat(s, names) for s in md.stats}
                    copies.append((stats["device_offset_ps"], stats["device_duration_ps"], md.display_name,
                                   "copy" + (match.group(2) or ""), match.group(1), md_stats["bytes_accessed"],
                                   line.timestamp_ns * 1000 + event.offset_ps, event.duration_ps))
            copies.sort()
            open_starts: dict[str, list[int]] = defaultdict(list)
            for index, (start, dur, op, key, phase, size, host_start, host_dur) in enumerate(copies):
                nbytes[op] += size
                if phase == "start":
                    open_starts[key].append(index)
                    continue
                if not open_starts[key]:
                    seconds_ps[op] += dur
                    continue
                first = open_starts[key].pop()
                window = start + dur - copies[first][0]
                windows[op] += window
                windows[copies[first][2]] += window
                seconds_ps[op] += window
                seconds_ps[copies[first][2]] += window
                copies[first] = (*copies[first][:4], "paired", *copies[first][5:])
                if plane.name == "/device:TPU:0":
                    device0[op] += host_start + host_dur - copies[first][6]
            for _, dur, op, _, phase, *_ in copies:
                if phase == "start":  # never closed
                    seconds_ps[op] += dur
    assert len(windows) == 12 and len(async_line) == 6
    # The pairing is XProf's notion of the window: on the host timeline it is the Async XLA Ops line.
    for done, ps in async_line.items():
        assert math.isclose(device0[done], ps, rel_tol=1e-9), done
    ops = run.roofline(profiles=[_pid(TPU_SAMPLE)]).pl().filter(pl.col("row_kind") == "op")
    copies_out = {r["op"]: r for r in ops.iter_rows(named=True) if r["op"].startswith("copy-")}
    assert set(copies_out) == set(windows)
    for op, row in copies_out.items():
        assert row["async_window_ps"] == windows[op], op
        assert math.isclose(row["hbm_bandwidth"], nbytes[op] / (seconds_ps[op] * 1e-12), rel_tol=1e-9), op
        # A real transfer rate: under the HBM roof, unlike XProf's per-copy-start figure.
        assert row["hbm_utilization"] < 1.0
        assert row["total_time_ps"] < row["async_window_ps"]


# --------------------------------------------------------------------------- peaks


def test_peaks_come_from_the_profile_then_the_chip_table_then_the_user(run: xprosql.Run) -> None:
    profiles = run.roofline().pl().filter(pl.col("row_kind") == "profile")
    by_pid = {r["profile_id"]: r for r in profiles.iter_rows(named=True)}

    tpu = by_pid[_pid(TPU_SAMPLE)]
    stats = dict(run.sql(
        "SELECT stat, max(double_value) FROM device_stats WHERE profile_id = $p GROUP BY stat", {"p": _pid(TPU_SAMPLE)}
    ).rows())
    assert tpu["peak_flops_per_s"] == stats["peak_teraflops_per_second"] * 1e12
    assert tpu["peak_hbm_bytes_per_s"] == stats["peak_hbm_bw_gigabytes_per_second"] * 1e9
    assert tpu["peak_vmem_read_bytes_per_s"] == stats["peak_vmem_rd_bw_gigabytes_per_second"] * 1e9
    assert tpu["peak_cmem_read_bytes_per_s"] is None  # the profile says 0: no CMEM on v6e
    assert (tpu["peak_flops_source"], tpu["peak_hbm_source"]) == ("profile", "profile")
    assert tpu["ridge_point"] == tpu["peak_flops_per_s"] / tpu["peak_hbm_bytes_per_s"]

    v100 = by_pid[_pid(GPU_SAMPLE)]  # bandwidth stat, FLOP/s from SMs x clock at ingest
    device = run.sql("SELECT * FROM devices WHERE profile_id = $p AND kind = 'gpu' LIMIT 1", {"p": _pid(GPU_SAMPLE)}).pl().row(0, named=True)
    assert (v100["peak_flops_per_s"], v100["peak_hbm_bytes_per_s"]) == (device["peak_flops_per_s"], device["peak_hbm_bytes_per_s"])
    assert (v100["peak_flops_source"], v100["peak_hbm_source"]) == ("hardware_model", "profile")

    a100 = by_pid[_pid(KINETO_A100)]  # Kineto records no peaks: the chip table, by name and memory
    gpu = run.sql("SELECT model, memory_bytes FROM devices WHERE profile_id = $p AND kind = 'gpu' LIMIT 1", {"p": _pid(KINETO_A100)}).rows()[0]
    chip = hardware.chip_for_model(gpu[0], memory_bytes=gpu[1])
    assert chip is not None and a100["hardware_chip"] == chip.name
    assert (a100["peak_flops_per_s"], a100["peak_hbm_bytes_per_s"]) == (chip.peak_flops_per_s, chip.peak_hbm_bytes_per_s)
    assert (a100["peak_flops_source"], a100["peak_hbm_source"]) == ("hardware_model", "hardware_model")

    cpu = by_pid[_jax_pid(run, "jit_step")]  # no CPU model: unknown until the user says
    assert cpu["peak_flops_per_s"] is None and cpu["peak_flops_source"] is None and cpu["bound_by"] == "unknown"

    overridden = run.roofline(peak_flops_per_s=5e14, peak_source="user").pl().filter(pl.col("row_kind") == "profile")
    assert set(overridden["peak_flops_per_s"]) == {5e14} and set(overridden["peak_flops_source"]) == {"user"}
    # The override touches only what it names.
    assert overridden.filter(pl.col("profile_id") == _pid(TPU_SAMPLE))["peak_hbm_source"].to_list() == ["profile"]


def _reference_chip_table() -> dict[str, tuple[float, float]]:
    """docs/reference.md, peak numbers: chip -> (bf16 TFLOP/s, HBM GB/s)."""
    text = (Path(__file__).resolve().parents[1] / "docs" / "reference.md").read_text()
    section = text.split("## Peak numbers")[1].split("\n## ")[0]
    table = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[1][:1].isdigit():
            table[cells[0]] = (float(cells[1].split()[0]), float(cells[2]))
    return table


def test_chip_table_holds_the_reference_numbers_and_sql_matches_like_python() -> None:
    reference = _reference_chip_table()
    # Reference row -> a model string a profile carries for that chip.
    models = {"A100 SXM 80GB": ("NVIDIA A100-SXM4-80GB", 85e9), "H100 SXM": ("NVIDIA H100 80GB HBM3", 85e9),
              "H200 SXM": ("NVIDIA H200", 150e9), "TPU v4": ("TPU v4", None), "TPU v5e": ("TPU v5 lite", None),
              "TPU v5p": ("TPU v5p", None), "TPU v6e (Trillium)": ("TPU v6 Lite", None), "TPU7x (Ironwood)": ("TPU7x", None)}
    assert set(models) == set(reference)
    for row, (model, memory) in models.items():
        chip = hardware.chip_for_model(model, memory_bytes=memory)
        assert chip is not None, model
        assert (chip.peak_flops_per_s / 1e12, chip.peak_hbm_bytes_per_s / 1e9) == reference[row], row
    for model in ("Tesla V100-SXM2-16GB", "NVIDIA B200"):
        assert hardware.chip_for_model(model) is not None
    # The SQL join (DuckDB regex) picks the chip Python picks.
    import duckdb

    con = duckdb.connect()
    con.register("hardware_models", hardware.hardware_models_table())
    samples = [m for m, _ in models.values()] + ["Tesla V100-SXM2-16GB", "NVIDIA B200", "NVIDIA A100-PG509-200", "Intel Xeon"]
    for model in samples:
        for memory in (None, 42e9, 85e9):
            got = con.execute(
                """SELECT chip FROM hardware_models
                   WHERE regexp_matches(regexp_replace(lower($m), '[^a-z0-9]', '', 'g'), model_pattern)
                     AND (max_memory_bytes IS NULL OR $mem <= max_memory_bytes)
                   ORDER BY priority LIMIT 1""",
                {"m": model, "mem": memory},
            ).fetchall()
            chip = hardware.chip_for_model(model, memory_bytes=memory)
            assert (got[0][0] if got else None) == (chip.name if chip else None), (model, memory)


def test_measured_cpu_peaks_are_plausible() -> None:
    pytest.importorskip("numpy")
    flops, bandwidth = hardware.measure_cpu_peaks(seconds=0.2, size=256)
    assert 1e8 < flops < 1e14 and 1e8 < bandwidth < 1e13


# --------------------------------------------------------------------------- classification


def test_matmul_step_dots_are_compute_bound_and_elementwise_step_memory_bound(run: xprosql.Run) -> None:
    if not jax_available():
        pytest.skip("jax is not installed (test extra)")
    frame = run.memory_bound(**CPU_PEAKS).pl()
    mlp, ew = _jax_pid(run, "jit_mlp_step"), _jax_pid(run, "jit_elementwise_step")
    # Ops whose HLO holds a dot: the dot itself, or a fusion calling a computation with one.
    dot_ops = {r[0] for r in run.sql(
        """SELECT f.hlo_op FROM hlo_ops f JOIN hlo_ops d
             ON d.profile_id = f.profile_id AND d.program_id = f.program_id AND list_contains(f.called_computations, d.computation)
           WHERE f.profile_id = $p AND d.opcode = 'dot'
           UNION SELECT hlo_op FROM hlo_ops WHERE profile_id = $p AND opcode = 'dot' AND is_entry_computation""",
        {"p": mlp},
    ).rows()}
    ops = frame.filter(pl.col("row_kind") == "op")
    mlp_ops = ops.filter(pl.col("profile_id") == mlp)
    assert dot_ops and dot_ops <= set(mlp_ops["op"])
    assert set(mlp_ops.filter(pl.col("op").is_in(list(dot_ops)))["classification"]) == {"compute-bound"}
    assert set(mlp_ops.filter(~pl.col("op").is_in(list(dot_ops)))["classification"]) == {"memory-bound"}
    assert set(ops.filter(pl.col("profile_id") == ew)["classification"]) == {"memory-bound"}
    profile = frame.filter(pl.col("row_kind") == "profile")
    assert profile.filter(pl.col("profile_id") == mlp)["span_compute_bound_share"][0] > profile.filter(pl.col("profile_id") == mlp)["span_memory_bound_share"][0]
    assert profile.filter(pl.col("profile_id") == ew)["span_compute_bound_share"][0] == 0.0


def test_memory_bound_shares_cover_the_device_time(run: xprosql.Run) -> None:
    frame = run.memory_bound().pl()
    roof = run.roofline().pl()
    for row in frame.filter(pl.col("row_kind") == "profile").iter_rows(named=True):
        parts = [row[c] for c in ("span_memory_bound_share", "span_compute_bound_share", "span_no_cost_data_share", "span_unknown_share",
                                  "span_collective_share", "span_idle_share")]
        assert math.isclose(sum(parts), 1.0, rel_tol=1e-9), row["profile_id"]
    ops = frame.filter(pl.col("row_kind") == "op").join(
        roof.filter(pl.col("row_kind") == "op"), on=["profile_id", "device_kind", "program_id", "op"], how="left", nulls_equal=True
    )
    assert ops["bound_by"].to_list() == ops["bound_by_right"].to_list()
    no_cost = frame.filter((pl.col("row_kind") == "op") & (pl.col("profile_id") == _pid(GPU_SAMPLE)))
    assert set(no_cost["classification"]) == {"no cost data"}  # TF on V100 records no costs and has no HLO
    top = run.memory_bound(top=2).pl()
    assert top.filter(pl.col("row_kind") == "op").group_by("profile_id", "device_kind").len()["len"].max() == 2
    assert top.filter(pl.col("row_kind") == "profile").equals(frame.filter(pl.col("row_kind") == "profile"))


# --------------------------------------------------------------------------- the SQL files


@pytest.mark.parametrize("name", ["ops.roofline", "ops.memory_bound", "ops._op_stats", "steps._bottleneck_steps", "steps.bottlenecks"])
def test_sql_header_describes_every_column_and_parameter(run: xprosql.Run, name: str) -> None:
    module = library().modules[name]
    text = module.text
    header = text.split("\nWITH ")[0]
    described = [c.name for c in module.columns]
    result = run.sql(analysis_text(name), bound_parameters(name)).pl()
    assert described == result.columns
    body = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("--"))
    own = re.findall(r"^--   \$([a-z_]+)\s", header, re.MULTILINE)
    assert set(own) == set(module.own_parameters) and all(f"${p}" in body for p in own)
    assert "{" not in body.replace("{'", "")  # no string formatting placeholders
    assert set(library().bind(name, {})) == set(library().parameters(name))


def test_unknown_or_missing_parameters_are_named(run: xprosql.Run) -> None:
    with pytest.raises(xprosql.ParameterError, match="peak_flop"):
        library().bind("ops.roofline", {"peak_flop": 1.0})
    with pytest.raises(xprosql.ParameterError, match="baseline"):
        library().bind("fleet.compare", {})
    with pytest.raises(xprosql.ParameterError, match="peak_flop"):
        run.analysis("roofline", peak_flop=1.0)
    with pytest.raises(xprosql.UnknownAnalysisError, match="ops.roofline"):
        run.analysis("rooflin")
    with pytest.raises(xprosql.UnknownAnalysisError):  # private building blocks are not run by name
        run.analysis("steps._bottleneck_steps")


def test_cli_shows_runs_and_draws(warehouse: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from xprosql.cli import main

    assert main(["sql", str(warehouse), "--analysis", "memory_bound", "--show"]) == 0
    shown = capsys.readouterr().out
    assert shown.strip() == library().shown("ops.memory_bound").strip()  # the defaults written in: it runs as printed
    assert "-- ops.roofline:" in shown and "-- @include" not in shown  # the included roofline, in full
    assert main(["sql", str(warehouse), "--analysis", "roofline", "--param", "top=1", "--format", "csv"]) == 0
    rows = pl.read_csv(capsys.readouterr().out.encode(), infer_schema_length=None)
    assert rows.filter(pl.col("row_kind") == "op").height == rows.filter(pl.col("row_kind") == "profile").height > 3
    assert main(["sql", str(warehouse), "--analysis", "roofline", "--param", "peak_flop=1"]) == 2
    assert "peak_flop" in capsys.readouterr().err
    if importlib.util.find_spec("matplotlib") is None:
        pytest.skip("matplotlib (the plot extra) is not installed")
    chart = tmp_path / "roofline.png"
    assert main(["roofline", str(warehouse), "--profile", _pid(TPU_SAMPLE), "--out", str(chart)]) == 0
    assert "broadcast_add_fusion" in capsys.readouterr().out
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and chart.stat().st_size > 20_000
