"""HLO ingest against real profiles: the TPU v6e sample and a JAX CPU profile made here."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest
from conftest import TPU_SAMPLE
from jax_profiles import JAX_STEP_HLO_TEXT, JAX_STEP_MODULE, JAX_STEP_PARAMETER_DIMS, JAX_STEP_RUNS

from xprosql.ingest import hlo
from xprosql.protos import hlo_pb2, xplane_pb2

U64 = (1 << 64) - 1


# --------------------------------------------------------------------------- helpers


def _load_space(path: Path) -> xplane_pb2.XSpace:
    space = xplane_pb2.XSpace()
    space.ParseFromString(path.read_bytes())
    return space


def _stat_value(stat: xplane_pb2.XStat, names: dict[int, str]):
    kind = stat.WhichOneof("value")
    value = getattr(stat, kind) if kind else None
    return names.get(value) if kind == "ref_value" else value


def _stats(stats, names: dict[int, str]) -> dict[str, object]:
    return {names.get(s.metadata_id, ""): _stat_value(s, names) for s in stats}


def _plane(space: xplane_pb2.XSpace, name: str) -> xplane_pb2.XPlane:
    return next(p for p in space.planes if p.name == name)


def _embedded_protos(space: xplane_pb2.XSpace) -> list[tuple[int, str, bytes]]:
    """(program_id, metadata name, HloProto bytes), located as XProf stores them (/host:metadata plane)."""
    plane = _plane(space, "/host:metadata")
    names = {k: v.name for k, v in plane.stat_metadata.items()}
    found = []
    for md_id, md in plane.event_metadata.items():
        stats = _stats(md.stats, names)
        if "Hlo Proto" in stats:
            program_id = stats.get("program_id", md_id)
            found.append((int(program_id), md.name, stats["Hlo Proto"]))
    return found


def _ingest(space: xplane_pb2.XSpace) -> tuple[list[dict], list[dict]]:
    modules, ops = [], []
    for program_id, _, blob in _embedded_protos(space):
        module, rows = hlo.parse_hlo_proto(blob, program_id=program_id)
        modules.append(module)
        ops.extend(rows)
    return modules, ops


def _instruction_count(blob: bytes) -> int:
    proto = hlo_pb2.HloProto()
    proto.ParseFromString(blob)
    return sum(len(c.instructions) for c in proto.hlo_module.computations)


# --------------------------------------------------------------------------- TPU sample


@pytest.fixture(scope="module")
def tpu_space() -> xplane_pb2.XSpace:
    return _load_space(TPU_SAMPLE)


@pytest.fixture(scope="module")
def tpu_rows(tpu_space) -> tuple[list[dict], list[dict]]:
    return _ingest(tpu_space)


def test_tpu_every_proto_parses_with_one_row_per_instruction(tpu_space):
    protos = _embedded_protos(tpu_space)
    assert len(protos) == 4
    for program_id, md_name, blob in protos:
        module, rows = hlo.parse_hlo_proto(blob, program_id=program_id)
        expected = _instruction_count(blob)
        assert len(rows) == module["n_instructions"] == expected
        assert module["hlo_proto"] == blob
        # The metadata name reads "<module>(<unsigned program id>)".
        assert md_name == f"{module['module']}({module['program_id']})"
        assert {r["program_id"] for r in rows} == {module["program_id"]}
        assert sum(r["is_entry_computation"] for r in rows) >= 1
        assert all(set(r) == set(hlo.HLO_OP_COLUMNS.names) for r in rows)
        assert set(module) == set(hlo.HLO_MODULE_COLUMNS.names)


def test_tpu_rows_fit_the_arrow_schemas(tpu_rows):
    modules, ops = tpu_rows
    ops_table = pa.Table.from_pylist(ops, schema=hlo.HLO_OP_COLUMNS)
    modules_table = pa.Table.from_pylist(modules, schema=hlo.HLO_MODULE_COLUMNS)
    assert ops_table.num_rows == sum(m["n_instructions"] for m in modules)
    assert modules_table.column("program_id").type == pa.uint64()


def test_tpu_shapes_and_operands_match_device_op_metadata(tpu_space, tpu_rows):
    _, ops = tpu_rows
    by_key = {(r["program_id"], r["hlo_op"]): r for r in ops}
    checked_shapes = 0
    for plane in tpu_space.planes:
        if not plane.name.startswith("/device:TPU:"):
            continue
        names = {k: v.name for k, v in plane.stat_metadata.items()}
        line = next(each for each in plane.lines if each.name == "XLA Ops")
        for md_id in {e.metadata_id for e in line.events}:
            md = plane.event_metadata[md_id]
            stats = _stats(md.stats, names)
            if "program_id" not in stats:
                continue
            # display_name is the bare op name; name is the full HLO text line.
            row = by_key[(stats["program_id"], md.display_name)]
            if "shape_with_layout" in stats:
                assert row["shape"] == stats["shape_with_layout"]
                checked_shapes += 1
            assert md.name.startswith(f"%{row['hlo_op']} = {row['shape']} {row['opcode']}(")
            for operand, shape in zip(row["operand_names"], row["operand_shapes"], strict=True):
                assert f"{shape} %{operand}" in md.name
    assert checked_shapes >= 17  # /device:TPU:0 alone has 17 distinct ops
    # The strings the brief names, including S(5) host memory and a scalar's {:S(2)}.
    shapes = {r["shape"] for r in ops}
    assert (
        "(f32[5,1024,1024,256]{3,2,1,0:T(8,128)}, f32[5,1024,1024,256]{3,2,1,0:T(8,128)S(5)}, u32[]{:S(2)})"
        in shapes
    )


def test_tpu_program_id_signed_metadata_id_equals_unsigned_stat(tpu_space):
    plane = _plane(tpu_space, "/host:metadata")
    names = {k: v.name for k, v in plane.stat_metadata.items()}
    for md_id, md in plane.event_metadata.items():
        if "Hlo Proto" not in _stats(md.stats, names):
            continue
        blob = _stats(md.stats, names)["Hlo Proto"]
        module, _ = hlo.parse_hlo_proto(blob, program_id=md_id)
        unsigned, _ = hlo.parse_hlo_proto(blob, program_id=md_id & U64)
        assert module["program_id"] == unsigned["program_id"] == md_id & U64
        assert 0 <= module["program_id"] <= U64


def test_tpu_rows_content(tpu_rows):
    _, ops = tpu_rows
    by_name = {(r["module"], r["hlo_op"]): r for r in ops}
    all_reduce = by_name[("jit__psum", "all-reduce")]
    assert all_reduce["called_computations"] == ["region_0.3.clone"]
    assert all_reduce["operand_names"] == ["bitcast"]
    assert all_reduce["element_type"] == "f32"
    assert all_reduce["dimensions"] == [5, 1024, 1024, 256]
    assert all_reduce["source_line"] == 38
    assert all_reduce["source_file"].endswith("host_offload_stress_test.py")
    assert all_reduce["dot_lhs_contracting_dims"] is None and all_reduce["window"] is None

    fusion = by_name[("jit_f", "broadcast_add_fusion")]
    assert fusion["fusion_kind"] == "kLoop"
    assert fusion["called_computations"] == ["fused_computation"]
    inner = [r for r in ops if r["module"] == "jit_f" and r["computation"] == "fused_computation"]
    assert inner and all(r["is_fusion_computation"] and not r["is_entry_computation"] for r in inner)

    copy_start = by_name[("jit_f", "copy-start")]
    assert copy_start["element_type"] == "tuple" and copy_start["dimensions"] == []
    param = by_name[("jit_f", "param")]
    assert param["parameter_number"] == 0 and param["op_name"] == "ws[0]"


def test_stack_frames_give_the_same_source_as_inline_fields(tpu_space):
    # New XLA may set only stack_frame_id (JAX CPU does); the TPU sample sets both.
    checked = 0
    for program_id, _, blob in _embedded_protos(tpu_space):
        _, inline = hlo.parse_hlo_proto(blob, program_id=program_id)
        proto = hlo_pb2.HloProto()
        proto.ParseFromString(blob)
        for computation in proto.hlo_module.computations:
            for instruction in computation.instructions:
                instruction.metadata.ClearField("source_file")
                instruction.metadata.ClearField("source_line")
        _, via_frames = hlo.parse_hlo_proto(proto.SerializeToString(), program_id=program_id)
        for a, b in zip(inline, via_frames, strict=True):
            assert (a["source_file"], a["source_line"]) == (b["source_file"], b["source_line"])
            checked += a["source_file"] is not None
    assert checked >= 10


# --------------------------------------------------------------------------- format_shape units


def _array(etype: int, dims: list[int], minor_to_major: list[int] | None = None, **layout) -> hlo_pb2.ShapeProto:
    shape = hlo_pb2.ShapeProto(element_type=etype, dimensions=dims)
    if minor_to_major is not None:
        shape.layout.CopyFrom(hlo_pb2.LayoutProto(minor_to_major=minor_to_major, **layout))
    return shape


def test_format_shape_forms():
    pt = hlo_pb2.PrimitiveType
    assert hlo.format_shape(_array(pt.F32, [8, 128], [1, 0])) == "f32[8,128]{1,0}"
    assert hlo.format_shape(_array(pt.BF16, [8, 128])) == "bf16[8,128]"
    assert hlo.format_shape(_array(pt.F32, [], [])) == "f32[]"
    assert hlo.format_shape(_array(pt.U32, [], [], memory_space=2)) == "u32[]{:S(2)}"
    tiled = _array(pt.F32, [5, 1024, 1024, 256], [3, 2, 1, 0], memory_space=5,
                   tiles=[hlo_pb2.TileProto(dimensions=[8, 128]), hlo_pb2.TileProto(dimensions=[2, 1])])
    assert hlo.format_shape(tiled) == "f32[5,1024,1024,256]{3,2,1,0:T(8,128)(2,1)S(5)}"
    assert hlo.format_shape(_array(pt.S4, [16], [0], element_size_in_bits=4)) == "s4[16]{0:E(4)}"
    # Alignment 0 or 1 is the default and not printed.
    assert hlo.format_shape(_array(pt.F32, [4], [0], tail_padding_alignment_in_elements=1)) == "f32[4]{0}"
    assert hlo.format_shape(_array(pt.F32, [4], [0], tail_padding_alignment_in_elements=8)) == "f32[4]{0:L(8)}"
    dynamic = _array(pt.S32, [4, 7], [1, 0])
    dynamic.is_dynamic_dimension.extend([False, True])
    assert hlo.format_shape(dynamic) == "s32[4,<=7]{1,0}"
    assert hlo.format_shape(hlo_pb2.ShapeProto(element_type=pt.TOKEN)) == "token[]"
    assert hlo.format_shape(hlo_pb2.ShapeProto(element_type=pt.OPAQUE_TYPE)) == "opaque[]"
    assert hlo.format_shape(hlo_pb2.ShapeProto(element_type=pt.TUPLE)) == "()"
    six = hlo_pb2.ShapeProto(element_type=pt.TUPLE, tuple_shapes=[_array(pt.PRED, [i + 1], [0]) for i in range(6)])
    assert hlo.format_shape(six) == (
        "(pred[1]{0}, pred[2]{0}, pred[3]{0}, pred[4]{0}, pred[5]{0}, /*index=5*/pred[6]{0})"
    )
    assert hlo.primitive_type_name(pt.F8E4M3FN) == "f8e4m3fn"


def test_garbage_bytes_raise_value_error():
    for junk in (b"", b"not an hlo proto", b"\xff" * 32, bytes(range(256)), TPU_SAMPLE.read_bytes()[:4096]):
        with pytest.raises(ValueError):
            hlo.parse_hlo_proto(junk, program_id=None)
    # A valid proto of another kind is not an HloProto either.
    empty_module = hlo_pb2.HloProto(hlo_module=hlo_pb2.HloModuleProto(name="m")).SerializeToString()
    with pytest.raises(ValueError, match="no HLO module"):
        hlo.parse_hlo_proto(empty_module, program_id=1)


# --------------------------------------------------------------------------- JAX CPU profile


@pytest.fixture(scope="session")
def jax_profile(jax_cpu_profile: Path) -> Path:
    return jax_cpu_profile


@pytest.fixture(scope="session")
def jax_rows(jax_profile) -> tuple[xplane_pb2.XSpace, dict, list[dict]]:
    space = _load_space(jax_profile)
    for program_id, _, blob in _embedded_protos(space):
        module, rows = hlo.parse_hlo_proto(blob, program_id=program_id)
        if module["module"] == JAX_STEP_MODULE:
            return space, module, rows
    pytest.fail(f"no {JAX_STEP_MODULE} module in {jax_profile}")


def test_jax_profile_layout(jax_profile):
    assert jax_profile.name.endswith(".xplane.pb")
    assert jax_profile.parent.parent.name == "profile"
    assert jax_profile.parent.parent.parent.name == "plugins"


def test_jax_dot_and_convolution_rows(jax_rows):
    _, _, rows = jax_rows
    dots = [r for r in rows if r["opcode"] == "dot"]
    assert len(dots) == 1
    dot = dots[0]
    assert dot["dot_lhs_contracting_dims"] == [1] and dot["dot_rhs_contracting_dims"] == [0]
    assert dot["dot_lhs_batch_dims"] == [] and dot["dot_rhs_batch_dims"] == []
    assert [s.split("{")[0] for s in dot["operand_shapes"]] == ["f32[64,128]", "f32[128,256]"]
    assert dot["dimensions"] == [64, 256]

    convs = [r for r in rows if r["opcode"] == "convolution"]
    assert len(convs) == 1
    conv = convs[0]
    assert conv["convolution_dims"] == "b01f_01io->b01f"  # NHWC, HWIO -> NHWC
    assert conv["window"] == "size=3x3 pad=1_1x1_1"  # SAME padding of a 3x3 kernel
    assert conv["feature_group_count"] == 1 and conv["batch_group_count"] == 1
    assert conv["dimensions"] == [2, 16, 16, 16]
    assert conv["source_file"] is not None and conv["source_line"] is not None

    others = [r for r in rows if r["opcode"] not in ("dot", "convolution")]
    assert all(r["dot_lhs_contracting_dims"] is None and r["convolution_dims"] is None for r in others)
    reduces = [r for r in rows if r["opcode"] == "reduce"]
    assert sorted(r["instruction_dimensions"] for r in reduces) == [[0, 1, 2, 3], [1]]


def test_jax_module_totals(jax_rows):
    _, module, rows = jax_rows
    assert module["n_instructions"] == len(rows) == _instruction_count(module["hlo_proto"])
    assert module["n_computations"] == len({r["computation"] for r in rows})

    entry = [r for r in rows if r["is_entry_computation"]]
    assert {r["computation"] for r in entry} == {module["entry_computation"]}
    params = sorted((r for r in entry if r["opcode"] == "parameter"), key=lambda r: r["parameter_number"])
    assert [r["dimensions"] for r in params] == JAX_STEP_PARAMETER_DIMS
    # Elements fed to the program: 64*128 + 128*256 + 2*16*16*8 + 3*3*8*16.
    total = 0
    for r in params:
        n = 1
        for d in r["dimensions"]:
            n *= d
        total += n
    assert total == 8192 + 32768 + 4096 + 1152
    root = [r for r in entry if r["opcode"] == "tuple"]
    assert [r["shape"] for r in root] == ["(f32[64]{0}, f32[])"]


def test_jax_rows_match_xla_text(jax_rows, jax_profile):
    # XLA's own printer, for the same compiled module, is the oracle.
    _, _, rows = jax_rows
    text = (jax_profile.parents[3] / JAX_STEP_HLO_TEXT).read_text()
    for r in rows:
        assert f"%{r['hlo_op']} = {r['shape']} {r['opcode']}(" in text, r["hlo_op"]
        if r["convolution_dims"]:
            assert f"window={{{r['window']}}}, dim_labels={r['convolution_dims']}" in text
        if r["opcode"] == "fusion":
            assert f"kind={r['fusion_kind']}, calls=%{r['called_computations'][0]}" in text


def test_jax_cpu_events_join_op_rows(jax_rows):
    space, module, rows = jax_rows
    ops = {r["hlo_op"] for r in rows}
    plane = _plane(space, "/host:CPU")
    names = {k: v.name for k, v in plane.stat_metadata.items()}
    seen = Counter()
    for line in plane.lines:
        for event in line.events:
            stats = _stats(event.stats, names)
            if stats.get("hlo_module") != JAX_STEP_MODULE:
                continue
            assert stats["program_id"] & U64 == module["program_id"]
            assert stats["hlo_op"] in ops
            seen[stats["hlo_op"]] += 1
    # Every entry-level thunk ran once per traced step.
    assert seen and all(n == JAX_STEP_RUNS for n in seen.values())
