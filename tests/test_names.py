"""Time by the user's own names (sql/names/): PyTorch record_function and nn.Module trees, JAX/XLA and
TensorFlow name scopes.

The generated profiles (tests/names_profiles.py) are checked against independent walks over the raw
files: the Kineto JSON for the PyTorch tree, the XSpace protobuf (events and the HloProto in
/host:metadata) for the JAX scopes. The real samples of tests/data must run without error and give
names where they hold some.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from pathlib import Path

import polars as pl
import pytest

import xprosql

# Slow (tests/conftest.py): every rule or analysis over every real sample; `--runslow` runs them (CI does).
pytestmark = pytest.mark.slow

CPU_ROOFS = {"peak_flops_per_s": 1e12, "peak_hbm_bytes_per_s": 1e11}


# --- fixtures ----------------------------------------------------------------------------------

@pytest.fixture(scope="session")
def torch_names_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from names_profiles import make_torch_names_profile
    from wild_profiles import ProfileToolMissing

    try:
        return make_torch_names_profile(tmp_path_factory.mktemp("names_torch") / "log")
    except ProfileToolMissing as missing:
        pytest.skip(str(missing))


@pytest.fixture(scope="session")
def torch_names_warehouse(torch_names_trace: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("names_torch_wh") / "run"
    report = xprosql.ingest([torch_names_trace], into=root)
    assert report.ok, str(report)
    return root


@pytest.fixture(scope="session")
def jax_scopes_profile(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from names_profiles import make_jax_scopes_profile
    from wild_profiles import ProfileToolMissing

    try:
        return make_jax_scopes_profile(tmp_path_factory.mktemp("names_jax") / "log")
    except ProfileToolMissing as missing:
        pytest.skip(str(missing))


@pytest.fixture(scope="session")
def jax_scopes_warehouse(jax_scopes_profile: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("names_jax_wh") / "run"
    report = xprosql.ingest([jax_scopes_profile], into=root)
    assert report.ok, str(report)
    return root


# --- an independent walk over the Kineto JSON ----------------------------------------------------

_STEP = re.compile(r"^ProfilerStep#(\d+)$")


def _walk_kineto(trace: Path) -> dict[tuple[str, int | None], dict[str, int]]:
    """Per (path, step): calls, inclusive CPU time and the time and count of the outermost aten ops inside
    each call, in ns (the JSON's microseconds x 1000, rounded), from the trace's events alone."""
    events = json.loads(trace.read_text())["traceEvents"]
    ns = lambda us: round(us * 1000)  # noqa: E731
    by_thread: dict[tuple, dict[str, list]] = defaultdict(lambda: {"names": [], "ops": []})
    for e in events:
        if e.get("ph") != "X" or "dur" not in e:
            continue
        key = (e.get("pid"), e.get("tid"))
        start, end = ns(e["ts"]), ns(e["ts"]) + ns(e["dur"])
        if e.get("cat") == "user_annotation" or (e.get("cat") == "python_function" and e["name"].startswith("nn.Module: ")):
            step = _STEP.match(e["name"])
            component = ("ProfilerStep" if step else e["name"]).removeprefix("nn.Module: ")
            by_thread[key]["names"].append((start, end, component, int(step.group(1)) if step else None))
        elif e.get("cat") == "cpu_op":
            by_thread[key]["ops"].append((start, end))
    totals: dict[tuple[str, int | None], dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for thread in by_thread.values():
        # The op tree: each op's parent op by containment (a stack over ops sorted by start, longer first).
        ops = sorted(thread["ops"], key=lambda o: (o[0], -o[1]))
        op_parent_start: list[int | None] = []
        stack: list[tuple[int, int]] = []
        for start, end in ops:
            while stack and stack[-1][1] <= start:
                stack.pop()
            op_parent_start.append(stack[-1][0] if stack else None)
            stack.append((start, end))
        # The name tree, the same way.
        names = sorted(thread["names"], key=lambda n: (n[0], -n[1]))
        open_names: list[tuple[int, int, str, int | None]] = []
        for start, end, component, own_step in names:
            while open_names and open_names[-1][1] <= start:
                open_names.pop()
            path = "/".join([*(n[2] for n in open_names), component])
            step = own_step
            for n in reversed(open_names):
                step = step if step is not None else n[3]
            row = totals[(path, step)]
            row["calls"] += 1
            row["cpu_time_ns"] += end - start
            # Outermost ops inside: inside the name, and their parent op (if any) starts before the name.
            for (o_start, o_end), parent_start in zip(ops, op_parent_start):
                if start <= o_start < end and (parent_start is None or parent_start < start):
                    row["op_time_ns"] += o_end - o_start
                    row["ops"] += 1
            open_names.append((start, end, component, step))
    return totals


@pytest.mark.slow
def test_data_annotation_shows_the_sleep_every_step(torch_names_warehouse: Path) -> None:
    from names_profiles import TORCH_DATA_SLEEP_S, TORCH_NAMES_STEPS

    with xprosql.load(torch_names_warehouse) as run:
        tree = run.analysis("names.tree", by_step=True).pl()
        summed = run.analysis("names.tree").pl()
    data = tree.filter(pl.col("path") == "ProfilerStep/data").sort("step")
    assert data["step"].to_list() == TORCH_NAMES_STEPS
    sleep_ps = TORCH_DATA_SLEEP_S * 1e12
    for value in data["cpu_time_ps"]:
        assert sleep_ps <= value < sleep_ps * 1.5, value
    total = summed.filter(pl.col("path") == "ProfilerStep/data").row(0, named=True)
    assert total["steps"] == len(TORCH_NAMES_STEPS) and total["calls"] == len(TORCH_NAMES_STEPS)
    assert total["cpu_time_ps"] == data["cpu_time_ps"].sum()
    assert sleep_ps <= total["cpu_time_per_step_ps"] < sleep_ps * 1.5


@pytest.mark.slow
def test_every_node_matches_a_walk_over_the_json(torch_names_trace: Path, torch_names_warehouse: Path) -> None:
    expected = _walk_kineto(torch_names_trace)
    with xprosql.load(torch_names_warehouse) as run:
        tree = run.analysis("names.tree", by_step=True).pl()
    got = {(r["path"], r["step"]): r for r in tree.iter_rows(named=True)}
    assert set(got) == set(expected)
    # Nested modules and annotations all present, in every step.
    paths = {path for path, _ in expected}
    for path in ["ProfilerStep/forward/Model_0/Block_1/Attn_1/attn_core", "ProfilerStep/forward/Model_0/Block_0/Sequential_0/GELU_0",
                 "ProfilerStep/forward/Model_0/Linear_8", "ProfilerStep/optimizer/Optimizer.step#SGD.step"]:
        assert path in paths
    for key, want in expected.items():
        row = got[key]
        assert row["calls"] == want["calls"], key
        # The JSON's microseconds with 3 decimals: ingest and this walk may round each event 1 ns apart.
        assert row["cpu_time_ps"] == pytest.approx(want["cpu_time_ns"] * 1000, abs=1000 * row["calls"]), key
        assert row["ops"] == want["ops"], key
        assert row["op_time_ps"] == pytest.approx(want["op_time_ns"] * 1000, abs=2000 * max(want["ops"], 1)), key


@pytest.mark.slow
def test_tree_is_additive_and_costed(torch_names_warehouse: Path) -> None:
    with xprosql.load(torch_names_warehouse) as run:
        tree = run.analysis("names.tree", **CPU_ROOFS).pl()
    rows = {r["path"]: r for r in tree.iter_rows(named=True)}
    for path, row in rows.items():
        children = [r for r in rows.values() if r["parent_path"] == path]
        assert row["cpu_self_ps"] == row["cpu_time_ps"] - sum(c["cpu_time_ps"] for c in children), path
        assert row["op_time_ps"] == row["self_op_time_ps"] + sum(c["op_time_ps"] for c in children), path
        assert row["op_time_ps"] <= row["cpu_time_ps"] + 1000 * row["ops"], path
    # Linear_0 is Block_0's qkv: x [4, 32, 64] flattened to 128 rows, times W^T [64, 192], plus the bias.
    qkv = rows["ProfilerStep/forward/Model_0/Block_0/Attn_0/Linear_0"]
    assert qkv["flops"] / qkv["calls"] == 2 * 128 * 64 * 192 + 128 * 192
    assert qkv["flop_rate"] == pytest.approx(qkv["flops"] / (qkv["op_time_ps"] * 1e-12))
    assert qkv["bound_by"] in ("compute", "HBM") and qkv["device_kind"] == "cpu"
    block = rows["ProfilerStep/forward/Model_0/Block_0"]
    # Block_0's residual adds run in it, outside its modules: its FLOPs are its modules' and a little more.
    inside = sum(r["flops"] or 0 for r in rows.values() if r["parent_path"] == block["path"])
    assert inside < block["flops"] < inside * 1.01
    assert rows["ProfilerStep"]["source"] == "step" and qkv["source"] == "module"
    assert rows["ProfilerStep/data"]["source"] == "annotation"


# --- an independent walk over the XSpace protobuf -------------------------------------------------

def _walk_xspace(profile: Path, module: str) -> dict[str, int]:
    """Per scope path (every prefix of an op_name), the summed duration (ps) of the host events XLA tags with
    an HLO op of ``module`` whose instruction's op_name lies under it."""
    from xprosql.protos import hlo_pb2, xplane_pb2

    space = xplane_pb2.XSpace()
    space.ParseFromString(profile.read_bytes())
    op_names: dict[str, str] = {}
    for plane in space.planes:
        if plane.name != "/host:metadata":
            continue
        hlo_stat = {m.id for m in plane.stat_metadata.values() if m.name == "Hlo Proto"}
        for meta in plane.event_metadata.values():
            for stat in meta.stats:
                if stat.metadata_id in hlo_stat:
                    proto = hlo_pb2.HloProto()
                    proto.ParseFromString(stat.bytes_value)
                    if proto.hlo_module.name != module:
                        continue
                    for computation in proto.hlo_module.computations:
                        for instruction in computation.instructions:
                            if instruction.metadata.op_name:
                                op_names[instruction.name] = instruction.metadata.op_name
    assert op_names, f"no op_name metadata for {module}"
    times: dict[str, int] = defaultdict(int)
    for plane in space.planes:
        if plane.name != "/host:CPU":
            continue
        stat_names = {m.id: m.name for m in plane.stat_metadata.values()}

        def value(stat: xplane_pb2.XStat, stat_names: dict[int, str] = stat_names) -> str:
            return stat_names[stat.ref_value] if stat.WhichOneof("value") == "ref_value" else stat.str_value

        for line in plane.lines:
            for event in line.events:
                stats = {stat_names.get(s.metadata_id): s for s in event.stats}
                if "hlo_op" not in stats or "hlo_module" not in stats or value(stats["hlo_module"]) != module:
                    continue
                op_name = op_names.get(value(stats["hlo_op"]))
                if op_name is None:
                    continue
                parts = op_name.split("/")
                for depth in range(len(parts)):
                    times["/".join(parts[: depth + 1])] += event.duration_ps
    return dict(times)


@pytest.mark.slow
def test_jax_scopes_match_a_walk_over_the_xspace(jax_scopes_profile: Path, jax_scopes_warehouse: Path) -> None:
    from names_profiles import JAX_SCOPES, JAX_SCOPES_MODULE

    expected = _walk_xspace(jax_scopes_profile, JAX_SCOPES_MODULE)
    with xprosql.load(jax_scopes_warehouse) as run:
        scopes = run.analysis("names.scopes", **CPU_ROOFS).pl()
    rows = {r["scope"]: r for r in scopes.filter(pl.col("row_kind") == "scope").iter_rows(named=True)}
    assert set(rows) == set(expected)
    for scope, time_ps in expected.items():
        assert rows[scope]["op_time_ps"] == time_ps, scope
        assert rows[scope]["self_time_ps"] == time_ps, scope  # XLA:CPU thunks do not nest
    # The program's scopes under jit(step): those XLA kept as the op_name of some op have time.
    timed = [s for s in JAX_SCOPES if expected.get(f"jit(step)/{s}", 0) > 0]
    assert {"encoder", "encoder/layer_0", "encoder/layer_0/attn", "head"} <= set(timed), timed
    root = rows["jit(step)"]
    assert root["depth"] == 0 and root["parent_scope"] is None
    assert rows["jit(step)/encoder/layer_0"]["parent_scope"] == "jit(step)/encoder"
    assert root["flops"] > 0 and root["bound_by"] in ("compute", "HBM")
    assert 0 < root["time_share"] <= 1


# --- the real samples ---------------------------------------------------------------------------

def test_samples_run_and_give_names(samples_warehouse: Path) -> None:
    import warnings

    with xprosql.load(samples_warehouse) as run, warnings.catch_warnings():
        warnings.simplefilter("ignore", xprosql.NotApplicableWarning)
        tree = run.analysis("names.tree").pl()
        by_step = run.analysis("names.tree", by_step=True).pl()
        scopes = run.analysis("names.scopes").pl()
        files = dict(run.sql("SELECT profile_id, source_path FROM profiles").rows())
    name_of = {pid: Path(path).name for pid, path in files.items()}
    tree = tree.with_columns(pl.col("profile_id").replace_strict(name_of).alias("file"))
    scopes = scopes.with_columns(pl.col("profile_id").replace_strict(name_of).alias("file"))
    assert by_step["calls"].sum() == tree["calls"].sum()
    # Hugging Face Qwen on an H100 (with_modules): module nodes whose kernels ran on the GPU.
    qwen = tree.filter((pl.col("file") == "h100_qwen1.5_0.5b.json.gz") & (pl.col("source") == "module"))
    assert qwen.height > 10 and qwen.filter(pl.col("name") == "Qwen2Model_0")["gpu_time_ps"].item() > 0
    assert qwen.filter(pl.col("name") == "Qwen2Model_0")["flops"].item() > 0
    # An annotation's GPU-side extent (gpu_user_annotation) joins its record_function.
    a100 = tree.filter(pl.col("file") == "a100_nccl_rank0.json.gz")
    assert a100.filter(pl.col("name") == "DistributedDataParallel.forward")["gpu_annotation_ps"].item() > 0
    # Inclusive GPU time: its own plus its children's.
    for row in tree.filter(pl.col("gpu_time_ps") > 0).iter_rows(named=True):
        children = tree.filter((pl.col("profile_id") == row["profile_id"]) & (pl.col("parent_path") == row["path"]))
        assert row["gpu_time_ps"] == row["self_gpu_time_ps"] + children["gpu_time_ps"].sum(), row["path"]
        assert row["gpu_busy_ps"] <= row["gpu_time_ps"]
    # XSpace: JAX scopes on TPU and on AMD GPUs; TensorFlow name scopes on the V100.
    kinds = {(r["file"], r["device_kind"], r["source"]) for r in scopes.filter(pl.col("row_kind") == "scope").iter_rows(named=True)}
    assert ("tpu_v6e_inference.xplane.pb", "tpu", "hlo") in kinds
    assert ("mi355_jax_te_fused_attn.xplane.pb", "gpu", "hlo") in kinds
    assert ("gpu_v100_tf_bert.xplane.pb", "gpu", "tf_op") in kinds
    tpu = scopes.filter((pl.col("file") == "tpu_v6e_inference.xplane.pb") & (pl.col("row_kind") == "scope"))
    assert "jit(f)" in tpu["scope"].to_list()
    assert tpu.filter(pl.col("scope") == "jit(f)")["flops"].item() > 0
    bert = scopes.filter(pl.col("file") == "gpu_v100_tf_bert.xplane.pb")
    assert bert.filter(pl.col("scope") == "replica_4/bert_span_labeler/bert_encoder_1/transformer")["self_time_ps"].item() > 0
    # A scope's self time is at most its device's time.
    assert (scopes["time_share"].drop_nulls() <= 1 + 1e-9).all()
