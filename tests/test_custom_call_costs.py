"""Costs of custom calls and compiled kernels, with the source they came from (issue 35).

Real profiles: the MI355 XSpace sample (JAX with Transformer Engine: ``te_fused_attn_*_ffi`` custom calls that
run CK kernels, a hipBLASLt ``__cublas$gemm`` and Triton GEMM fusions), the MI300 XSpace sample (a MIOpen
``__cudnn$convForward``) and the MI300 torch.compile Kineto trace (Inductor Triton kernels). Every expected
number is computed here, from the HLO protos as the profile recorded them (``hlo_modules.hlo_proto`` parsed
with the proto schema, not with xprosql's cost code) or from the raw JSON, by formulas written out below.

Generated on this machine (slow): JAX lowers, without a TPU or a GPU, a Pallas TPU kernel that declares a
``cost_estimate`` and cuDNN fused attention (grouped-query, causal, forward and backward) for a CUDA GPU (the
cuDNN version check is answered in the subprocess: JAX's own lowering writes the custom calls); and JAX profiles
on the CPU a Pallas kernel in interpret mode (the kernel becomes ordinary HLO: no custom call, costs from
XLA's rules) and a Cholesky that XLA:CPU runs as the LAPACK custom call ``lapack_spotrf_ffi`` (no rule knows
it: bytes of its operands and results, FLOPs unknown).

Hand-built: Inductor's ``kernel_flop`` / ``kernel_num_gb`` args, added to a copy of the real Triton trace,
because no public trace carries them (Inductor writes them only with ``benchmark_kernel`` or
``profile_bandwidth`` on).
"""

from __future__ import annotations

import gzip
import json
import math
import re
import shutil
import textwrap
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq
import pytest
from conftest import TEST_DATA
from jax_profiles import _run_jax_program, jax_available

import xprosql
from xprosql.engine.library import library
from xprosql.ingest import profile_id_of
from xprosql.ingest.hlo import parse_hlo_proto
from xprosql.ingest.hlo_cost import COST_SOURCES
from xprosql.protos import hlo_pb2
from xprosql.queries.roofline import ROOFLINE_KEYS, roofline_polars
from xprosql.warehouse import Warehouse

MI355_TE = TEST_DATA / "xspace" / "mi355_jax_te_fused_attn.xplane.pb"
MI300_CONV = TEST_DATA / "xspace" / "mi300_jax_conv.xplane.pb"
MI300_TRITON = TEST_DATA / "kineto" / "mi300_torch_compile_triton.json.gz"
TRITON_EXAMPLE = TEST_DATA / "kineto" / "triton_example.json.gz"

# Bytes per element of the HLO types these samples use, and of the PyTorch dtypes of the Triton traces.
_HLO_BYTES = {"BF16": 2, "F16": 2, "F32": 4, "S32": 4, "U32": 4, "U8": 1, "S8": 1, "PRED": 1}
_TORCH_BYTES = {"c10::BFloat16": 2, "c10::Half": 2, "float": 4, "long int": 8, "int": 4}


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("custom_calls") / "run"
    report = xprosql.ingest([MI355_TE, MI300_CONV, MI300_TRITON, TRITON_EXAMPLE], into=root)
    assert report.ok, str(report)
    return root


@pytest.fixture(scope="module")
def run(warehouse: Path) -> xprosql.Run:
    return xprosql.load(warehouse)


# ------------------------------------------------------------------ the raw HLO, read here


def _modules(run: xprosql.Run, sample: Path) -> list[tuple[int, hlo_pb2.HloModuleProto]]:
    rows = run.sql("SELECT program_id, hlo_proto FROM hlo_modules WHERE profile_id = $p",
                   {"p": profile_id_of(sample.read_bytes())}).rows()
    out = []
    for program_id, blob in rows:
        proto = hlo_pb2.HloProto()
        proto.ParseFromString(blob)
        out.append((program_id, proto.hlo_module))
    return out


def _instructions(module: hlo_pb2.HloModuleProto) -> dict[int, hlo_pb2.HloInstructionProto]:
    return {i.id: i for c in module.computations for i in c.instructions}


def _dims(shape: hlo_pb2.ShapeProto) -> list[int]:
    return list(shape.dimensions)


def _nbytes(shape: hlo_pb2.ShapeProto) -> int:
    """Bytes of every array of a shape (tuple elements summed)."""
    kind = hlo_pb2.PrimitiveType.Name(shape.element_type)
    if kind == "TUPLE":
        return sum(_nbytes(s) for s in shape.tuple_shapes)
    return math.prod(shape.dimensions) * _HLO_BYTES[kind]


def _hlo_rows(run: xprosql.Run, sample: Path) -> dict[tuple[int, str], dict]:
    frame = run.sql("SELECT * FROM hlo_ops WHERE profile_id = $p", {"p": profile_id_of(sample.read_bytes())}).pl()
    return {(r["program_id"], r["hlo_op"]): r for r in frame.iter_rows(named=True)}


def _roofline_ops(run: xprosql.Run, sample: Path) -> dict[str, dict]:
    frame = run.roofline(profiles=[profile_id_of(sample.read_bytes())]).pl()
    return {r["op"]: r for r in frame.filter(pl.col("row_kind") == "op").iter_rows(named=True)}


def _kernels(run: xprosql.Run, sample: Path, op: str, name_part: str) -> int:
    """Kernels of an HLO op whose name holds ``name_part``: one per execution for the op's main kernel."""
    return run.sql("SELECT count(*) FROM events WHERE profile_id = $p AND hlo_op = $op AND contains(name, $n)",
                   {"p": profile_id_of(sample.read_bytes()), "op": op, "n": name_part}).rows()[0][0]


def _attention_flops(*, b: int, hq: int, hkv: int, s: int, dqk: int, dv: int, causal: bool, backward: bool) -> int:
    """FLOPs of fused attention, written out: QKᵀ and PV forward; the backward recomputes QKᵀ and computes dV,
    dP, dQ, dK, each K/V head summing its H_q/H_kv query heads' dK and dV; a causal mask halves it."""
    pairs = b * hq * s * s
    flops = (2 * pairs * (3 * dqk + 2 * dv) + b * hkv * s * (dqk + dv) * (hq // hkv - 1)) if backward \
        else 2 * pairs * (dqk + dv)
    return flops // 2 if causal else flops


# ------------------------------------------------------------------ MI355: Transformer Engine fused attention


def test_te_fused_attention_flops_equal_the_attention_formula_for_their_operand_shapes(run: xprosql.Run) -> None:
    rows, roof = _hlo_rows(run, MI355_TE), _roofline_ops(run, MI355_TE)
    seen = 0
    for program_id, module in _modules(run, MI355_TE):
        by_id = _instructions(module)
        for c in module.computations:
            for hlo in c.instructions:
                if not hlo.custom_call_target.startswith("te_fused_attn_"):
                    continue
                attributes = dict(re.findall(r"(\w+) = (-?\d+) : i64", hlo.backend_config.decode()))
                layout, mask = int(attributes["qkv_layout"]), int(attributes["mask_type"])
                # NVTE_BS3HD: Q, K and V packed in the first operand as [batch, seq, 3, heads, head_dim].
                assert layout == 5
                b, s, three, h, d = _dims(by_id[hlo.operand_ids[0]].shape)
                assert three == 3
                backward = "backward" in hlo.custom_call_target
                expected = _attention_flops(b=b, hq=h, hkv=h, s=s, dqk=d, dv=d, causal=mask in (2, 3, 4, 5),
                                            backward=backward)
                row = rows[(program_id, hlo.name)]
                assert (row["derived_flops"], row["derived_cost_source"]) == (expected, "library"), hlo.name
                # Bytes: Q, K, V and O (the backward: those, their gradients and dO) at bf16.
                assert row["derived_bytes_accessed"] == (7 if backward else 4) * b * s * h * d * 2, hlo.name
                # The op runs several kernels (CK's main kernel, fills, dot(dO, O), dQ conversion) per execution:
                # its costs count once per execution, one per main kernel.
                executions = _kernels(run, MI355_TE, hlo.name, "FmhaBwdDQDKDV" if backward else "FmhaFwdKernel")
                assert executions == 5
                op = roof[hlo.name]
                assert op["occurrences"] > executions  # occurrences count kernels
                assert (op["flops"], op["cost_source"]) == (expected * executions, "library"), hlo.name
                assert op["bound_by"] in ("compute", "HBM") and 0 < op["roofline_efficiency"] <= 1, hlo.name
                seen += 1
    assert seen == 4  # two forward, two backward


def test_triton_gemm_fusion_flops_are_2mnk_of_their_dot(run: xprosql.Run) -> None:
    rows, roof = _hlo_rows(run, MI355_TE), _roofline_ops(run, MI355_TE)
    seen = 0
    for program_id, module in _modules(run, MI355_TE):
        by_id = _instructions(module)
        computations = {c.id: c for c in module.computations}
        for c in module.computations:
            for hlo in c.instructions:
                if hlo.opcode != "fusion" or '"kind":"__triton_nested_gemm_fusion"' not in hlo.backend_config.decode():
                    continue
                dots = [i for i in computations[hlo.called_computation_ids[0]].instructions if i.opcode == "dot"]
                if not dots:
                    continue  # an operand's block fusion inside a GEMM fusion
                (dot,) = dots
                lhs, rhs = (_dims(by_id[o].shape) for o in dot.operand_ids)
                dn = dot.dot_dimension_numbers
                batch = math.prod(lhs[i] for i in dn.lhs_batch_dimensions)
                k = math.prod(lhs[i] for i in dn.lhs_contracting_dimensions)
                m = math.prod(x for i, x in enumerate(lhs) if i not in (*dn.lhs_batch_dimensions, *dn.lhs_contracting_dimensions))
                n = math.prod(x for i, x in enumerate(rhs) if i not in (*dn.rhs_batch_dimensions, *dn.rhs_contracting_dimensions))
                row = rows[(program_id, hlo.name)]
                assert (row["derived_flops"], row["derived_cost_source"]) == (2 * batch * m * n * k, "triton_gemm"), hlo.name
                read = sum(_nbytes(by_id[o].shape) for o in hlo.operand_ids)
                assert row["derived_bytes_accessed"] == read + _nbytes(hlo.shape), hlo.name
                op = roof[hlo.name]
                assert op["flops"] == 2 * batch * m * n * k * op["occurrences"], hlo.name  # one kernel an execution
                assert op["cost_source"] == "triton_gemm" and op["bound_by"] == "compute", hlo.name
                seen += 1
    assert seen == 5


def test_hipblaslt_gemm_custom_call_flops_are_2mnk(run: xprosql.Run) -> None:
    rows = _hlo_rows(run, MI355_TE)
    seen = 0
    for program_id, module in _modules(run, MI355_TE):
        by_id = _instructions(module)
        for c in module.computations:
            for hlo in c.instructions:
                if hlo.custom_call_target != "__cublas$gemm":
                    continue
                numbers = json.loads(hlo.backend_config)["gemm_backend_config"]["dot_dimension_numbers"]
                lhs, rhs = (_dims(by_id[o].shape) for o in hlo.operand_ids[:2])
                contracting = [int(i) for i in numbers["lhs_contracting_dimensions"]]
                rhs_contracting = [int(i) for i in numbers["rhs_contracting_dimensions"]]
                assert not numbers["lhs_batch_dimensions"]
                k = math.prod(lhs[i] for i in contracting)
                m = math.prod(x for i, x in enumerate(lhs) if i not in contracting)
                n = math.prod(x for i, x in enumerate(rhs) if i not in rhs_contracting)
                out, workspace = hlo.shape.tuple_shapes
                assert hlo_pb2.PrimitiveType.Name(workspace.element_type) == "S8"
                row = rows[(program_id, hlo.name)]
                assert (row["derived_flops"], row["derived_cost_source"]) == (2 * m * n * k, "library")
                # Operands and the product; the library's scratch buffer is not data.
                assert row["derived_bytes_accessed"] == sum(_nbytes(by_id[o].shape) for o in hlo.operand_ids) + _nbytes(out)
                seen += 1
    assert seen == 1


def test_every_custom_call_of_the_amd_samples_has_costs_and_no_time_is_left_without(run: xprosql.Run) -> None:
    calls = run.sql("SELECT custom_call_target, derived_cost_source, derived_flops FROM hlo_ops "
                    "WHERE opcode = 'custom-call' AND is_entry_computation").rows()
    assert {t for t, _, _ in calls} == {"te_fused_attn_forward_ffi", "te_fused_attn_backward_ffi", "__cublas$gemm",
                                        "__cudnn$convForward"}
    assert all(source == "library" and flops > 0 for _, source, flops in calls)
    shares = run.memory_bound(profiles=[profile_id_of(MI355_TE.read_bytes())]).pl().filter(pl.col("row_kind") == "profile")
    assert shares["span_no_cost_data_share"].to_list() == [0.0]
    assert shares["span_unknown_share"].to_list() == [0.0]


def _array(dims: list[int], kind: str) -> hlo_pb2.ShapeProto:
    return hlo_pb2.ShapeProto(element_type=hlo_pb2.PrimitiveType.Value(kind), dimensions=dims)


def test_custom_calls_no_rule_can_read_get_their_operand_bytes_and_no_flops() -> None:
    # Hand-built: calls no real profile here shows (a ragged THD layout, an unreadable config, an unknown target).
    module = hlo_pb2.HloModuleProto(name="m", entry_computation_name="e")
    comp = module.computations.add(name="e", id=1)
    q = comp.instructions.add(name="q", opcode="parameter", id=1, shape=_array([4096, 16, 128], "BF16"))
    seqlens = comp.instructions.add(name="seqlens", opcode="parameter", id=2, shape=_array([3], "S32"), parameter_number=1)
    result = hlo_pb2.ShapeProto(element_type=hlo_pb2.PrimitiveType.TUPLE,
                                tuple_shapes=[_array([4096, 16, 128], "BF16"), _array([1024], "U8")])
    calls = {
        "te_fused_attn_forward_ffi": b"{qkv_layout = 14 : i64, mask_type = 2 : i64}",  # NVTE_THD_THD_THD
        "__cudnn$fmhaSoftmax": b'{"cudnn_fmha_backend_config": {"mask_type": {"not": "a name"}}}',
        "my_kernel": b"\x00\xff opaque",
    }
    for i, (target, config) in enumerate(calls.items(), start=3):
        comp.instructions.add(name=target, opcode="custom-call", id=i, shape=result, operand_ids=[1, 1, 1, 2],
                              custom_call_target=target, backend_config=config)
    proto = hlo_pb2.HloProto(hlo_module=module)
    rows = {r["hlo_op"]: r for r in parse_hlo_proto(proto.SerializeToString(), program_id=1)[1]}
    # Three reads of q, the sequence lengths, the output; the trailing u8 scratch buffer is not data.
    expected = 3 * 4096 * 16 * 128 * 2 + 3 * 4 + 4096 * 16 * 128 * 2
    for target in calls:
        row = rows[target]
        assert (row["derived_cost_source"], row["derived_flops"], row["derived_bytes_accessed"]) == \
            ("operand_bytes", None, expected), target
    assert rows[q.name]["derived_cost_source"] == rows[seqlens.name]["derived_cost_source"] == "hlo"


# ------------------------------------------------------------------ MI300: a MIOpen convolution custom call


def _valid_taps(size: int, kernel: int, out: int, w: hlo_pb2.WindowDimension) -> int:
    """(output, kernel) position pairs of one dimension that read a real input element: padding reads none."""
    stride, dilation, base = w.stride or 1, w.window_dilation or 1, w.base_dilation or 1
    taps = 0
    for o in range(out):
        for t in range(kernel):
            x = o * stride + t * dilation - w.padding_low
            taps += x % base == 0 and 0 <= x // base < size
    return taps


def test_cudnn_convolution_custom_call_flops_count_the_real_multiply_adds(run: xprosql.Run) -> None:
    rows, roof = _hlo_rows(run, MI300_CONV), _roofline_ops(run, MI300_CONV)
    seen = 0
    for program_id, module in _modules(run, MI300_CONV):
        by_id = _instructions(module)
        for c in module.computations:
            for hlo in c.instructions:
                if hlo.custom_call_target != "__cudnn$convForward":
                    continue
                x, w = (_dims(by_id[o].shape) for o in hlo.operand_ids)
                y = _dims(hlo.shape.tuple_shapes[0])
                dn = hlo.convolution_dimension_numbers
                taps = math.prod(_valid_taps(x[dn.input_spatial_dimensions[i]], w[dn.kernel_spatial_dimensions[i]],
                                             y[dn.output_spatial_dimensions[i]], wd)
                                 for i, wd in enumerate(hlo.window.dimensions))
                groups = hlo.feature_group_count or 1
                expected = 2 * x[dn.input_batch_dimension] * (x[dn.input_feature_dimension] // groups) \
                    * y[dn.output_feature_dimension] * taps
                row = rows[(program_id, hlo.name)]
                assert (row["derived_flops"], row["derived_cost_source"]) == (expected, "library")
                # Im2Col and a GEMM kernel per execution (the first Im2Col of the capture has no HLO op).
                executions = _kernels(run, MI300_CONV, hlo.name, "Cijk_")
                assert executions == 40 and roof[hlo.name]["occurrences"] == 79
                assert roof[hlo.name]["flops"] == expected * executions
                assert roof[hlo.name]["bound_by"] in ("compute", "HBM")
                seen += 1
    assert seen == 1


def test_polars_twin_equals_the_sql_on_custom_calls_and_compiled_kernels(run: xprosql.Run) -> None:
    sql = run.roofline().pl().sort(ROOFLINE_KEYS, nulls_last=True)
    twin = roofline_polars(run.table).collect().sort(ROOFLINE_KEYS, nulls_last=True)
    assert sql.columns == twin.columns and sql.height == twin.height
    for column in sql.columns:
        for ours, theirs in zip(sql[column].to_list(), twin[column].to_list()):
            if isinstance(ours, float) and isinstance(theirs, float):
                assert math.isclose(ours, theirs, rel_tol=1e-9, abs_tol=1e-15), column
            else:
                assert ours == theirs, column


def test_hlo_ops_files_written_before_derived_cost_source_read_as_xla_rules(warehouse: Path, tmp_path: Path) -> None:
    # Hand-made older files: the real hlo_ops files rewritten without the column (no older warehouse is kept).
    copy = tmp_path / "run"
    shutil.copytree(warehouse, copy)
    for file in Warehouse(copy).snapshot().table_files("hlo_ops"):
        pq.write_table(pq.read_table(file).drop_columns(["derived_cost_source"]), file)
    with xprosql.load(copy) as older:
        assert older.sql("SELECT count(derived_cost_source) FROM hlo_ops").rows() == [(0,)]
        text, params = library().runnable("ops._op_stats")
        derived = older.sql(text, params).pl().filter(pl.col("op") == "te_fused_attn_forward_ffi.10")
        twin = roofline_polars(older.table).collect().filter(pl.col("op") == "te_fused_attn_forward_ffi.10")
        assert derived["cost_source"].to_list() == twin["cost_source"].to_list() == ["hlo"]


def test_xprosql_analyses_roofline_documents_every_cost_source() -> None:
    (column,) = [c for c in library().module("ops.roofline").columns if c.name == "cost_source"]
    for source in (*COST_SOURCES, "profile", "trace", "shapes"):
        assert re.search(rf"\b{source}\b", column.description), source


# ------------------------------------------------------------------ torch.compile: Inductor Triton kernels


def _compiled_launches(trace: dict) -> list[dict]:
    return [e for e in trace["traceEvents"] if e.get("cat") == "cpu_op" and "kernel_backend" in (e.get("args") or {})]


def test_inductor_kernels_without_declared_costs_get_their_arguments_bytes_and_no_flops(run: xprosql.Run) -> None:
    launches = _compiled_launches(json.loads(gzip.decompress(MI300_TRITON.read_bytes())))
    assert len(launches) == 4
    roof = _roofline_ops(run, MI300_TRITON)
    bound = run.memory_bound(profiles=[profile_id_of(MI300_TRITON.read_bytes())]).pl()
    for launch in launches:
        args = launch["args"]
        expected = sum(math.prod(dims) * _TORCH_BYTES[kind] for dims, kind in zip(args["Input Dims"], args["Input type"])
                       if kind != "Scalar")
        op = roof[launch["name"]]
        assert (op["cost_source"], op["flops"], op["bytes_accessed"]) == ("operand_bytes", None, expected)
        # Bytes without FLOPs cannot say which roof binds.
        assert op["bound_by"] == "unknown" and op["roofline_efficiency"] is None
        assert 0 < op["hbm_utilization"] <= 1  # a lower bound of the bandwidth it drew
        assert bound.filter(pl.col("op") == launch["name"])["classification"].to_list() == ["unknown"]


def test_inductor_declared_kernel_flop_and_num_gb_win(tmp_path: Path) -> None:
    # Hand-built: the real Triton trace with the args Inductor writes under benchmark_kernel (no public trace has them).
    trace = json.loads(gzip.decompress(TRITON_EXAMPLE.read_bytes()))
    (launch,) = _compiled_launches(trace)
    launch["args"].update({"kernel_flop": 300, "kernel_num_gb": 1.2e-6})
    path = tmp_path / "triton_declared.json.gz"
    path.write_bytes(gzip.compress(json.dumps(trace).encode()))
    assert xprosql.ingest(path, into=tmp_path / "run").ok
    with xprosql.load(tmp_path / "run") as declared:
        (op,) = declared.roofline().pl().filter(pl.col("row_kind") == "op").iter_rows(named=True)
        assert (op["op"], op["cost_source"], op["flops"]) == (launch["name"], "declared", 300.0)
        assert math.isclose(op["bytes_accessed"], 1200.0)
        assert op["bound_by"] in ("compute", "HBM")
        (stats,) = declared.framework_ops().pl().filter(pl.col("op") == launch["name"]).iter_rows(named=True)
        assert (stats["cost_source"], stats["cost_rule"]) == ("declared", "inductor")


# ------------------------------------------------------------------ generated by JAX (slow)

_JAX_PROGRAM = textwrap.dedent(
    """
    import sys
    from pathlib import Path

    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.experimental import pallas as pl
    from jax._src.cudnn import fused_attention_stablehlo as cudnn_attention

    out = Path(sys.argv[1])

    def matmul_tanh(x_ref, y_ref, o_ref):
        o_ref[...] = jnp.tanh(x_ref[...] @ y_ref[...])

    def pallas(x, y, *, interpret):
        return pl.pallas_call(matmul_tanh, out_shape=jax.ShapeDtypeStruct((128, 128), jnp.float32),
                              interpret=interpret,
                              cost_estimate=pl.CostEstimate(flops=4194304, transcendentals=16384,
                                                            bytes_accessed=196608))(x, y)

    # A TPU kernel, lowered here without a TPU: its custom call as XLA would receive it.
    x = np.ones((128, 128), np.float32)
    tpu = jax.jit(lambda x, y: pallas(x, y, interpret=False)).trace(x, x).lower(lowering_platforms=("tpu",))
    (out / "pallas_tpu.hlo.pb").write_bytes(tpu.compiler_ir("hlo").as_serialized_hlo_module_proto())

    # cuDNN fused attention for a CUDA GPU, grouped-query and causal, forward and backward. JAX asks the
    # installed cuDNN for its version before it lowers; there is none here, so the answer is given.
    cudnn_attention.check_cudnn_version = lambda: 91000
    q = jnp.ones((2, 256, 8, 64), jnp.bfloat16)
    kv = jnp.ones((2, 256, 2, 64), jnp.bfloat16)
    def loss(q, k, v):
        return jax.nn.dot_product_attention(q, k, v, is_causal=True, implementation="cudnn").astype(jnp.float32).sum()
    gpu = jax.jit(jax.grad(loss, argnums=(0, 1, 2))).trace(q, kv, kv).lower(lowering_platforms=("cuda",))
    (out / "cudnn_attention.hlo.pb").write_bytes(gpu.compiler_ir("hlo").as_serialized_hlo_module_proto())

    # On the CPU: the Pallas kernel in interpret mode, and a Cholesky (XLA:CPU calls LAPACK).
    @jax.jit
    def step(x, a):
        return pallas(x, x, interpret=True), jnp.linalg.cholesky(a @ a.T + 64.0 * jnp.eye(64, dtype=a.dtype))
    a = np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)
    jax.block_until_ready(step(x, a))  # compile outside the trace
    with jax.profiler.trace(str(out)):
        for _ in range(3):
            jax.block_until_ready(step(x, a))
    """
)


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not jax_available():
        pytest.skip("jax is not installed (test extra)")
    out = tmp_path_factory.mktemp("jax_custom_calls")
    _run_jax_program(out, _JAX_PROGRAM, [], label="custom call", timeout_s=300)
    return out


def _rows_of(module_bytes: bytes) -> list[dict]:
    proto = hlo_pb2.HloProto()
    proto.hlo_module.ParseFromString(module_bytes)
    return parse_hlo_proto(proto.SerializeToString(), program_id=1)[1]


@pytest.mark.slow
def test_pallas_tpu_kernel_cost_estimate_is_what_its_author_declared(generated: Path) -> None:
    calls = [r for r in _rows_of((generated / "pallas_tpu.hlo.pb").read_bytes()) if r["opcode"] == "custom-call"]
    assert [r["custom_call_target"] for r in calls] == ["tpu_custom_call"]
    (row,) = calls
    assert (row["derived_flops"], row["derived_transcendentals"], row["derived_bytes_accessed"]) == (4194304, 16384, 196608)
    assert row["derived_cost_source"] == "declared"


@pytest.mark.slow
def test_cudnn_fused_attention_gqa_causal_forward_and_backward(generated: Path) -> None:
    module = hlo_pb2.HloModuleProto()
    module.ParseFromString((generated / "cudnn_attention.hlo.pb").read_bytes())
    by_id = _instructions(module)
    rows = {r["hlo_op"]: r for r in _rows_of(module.SerializeToString())}
    targets = []
    for c in module.computations:
        for hlo in c.instructions:
            if not hlo.custom_call_target.startswith("__cudnn$fmha"):
                continue
            targets.append(hlo.custom_call_target)
            # JAX's BTNH layout: [batch, seq, heads, head_dim]; K and V have 2 heads for Q's 8.
            (b, s, hq, d), (_, s_kv, hkv, _), (_, _, _, dv) = (_dims(by_id[o].shape) for o in hlo.operand_ids[:3])
            assert (hq, hkv, s, s_kv) == (8, 2, 256, 256)
            config = json.loads(hlo.backend_config)["cudnn_fmha_backend_config"]
            backward = hlo.custom_call_target.endswith("Backward")
            expected = _attention_flops(b=b, hq=hq, hkv=hkv, s=s, dqk=d, dv=dv, causal=config["mask_type"] == "CAUSAL",
                                        backward=backward)
            row = rows[hlo.name]
            assert (row["derived_flops"], row["derived_cost_source"]) == (expected, "library"), hlo.name
            q, kv = b * hq * s * d, b * hkv * s * d
            elements = 2 * (q + 2 * kv) + q if backward else q + 2 * kv + q
            assert row["derived_bytes_accessed"] == elements * 2
    assert sorted(targets) == ["__cudnn$fmhaSoftmax", "__cudnn$fmhaSoftmaxBackward"]


@pytest.mark.slow
def test_cpu_profile_pallas_interpret_and_lapack_custom_call(generated: Path, tmp_path: Path) -> None:
    (profile,) = generated.glob("plugins/profile/*/*.xplane.pb")
    assert xprosql.ingest(profile, into=tmp_path / "run").ok
    with xprosql.load(tmp_path / "run") as cpu:
        module = next(m for _, m in _modules(cpu, profile) if m.name == "jit_step")
        calls = [i for c in module.computations for i in c.instructions if i.opcode == "custom-call"]
        # Interpret mode turns the Pallas kernel into ordinary HLO: the only custom call is LAPACK's.
        assert [i.custom_call_target for i in calls] == ["lapack_spotrf_ffi"]
        (call,) = calls
        by_id = _instructions(module)
        expected = sum(_nbytes(by_id[o].shape) for o in call.operand_ids) + _nbytes(call.shape)
        ops = cpu.roofline(peak_flops_per_s=1e11, peak_hbm_bytes_per_s=2e10).pl().filter(pl.col("row_kind") == "op")
        (row,) = ops.filter(pl.col("op") == call.name).iter_rows(named=True)
        assert (row["cost_source"], row["flops"], row["bytes_accessed"]) == ("operand_bytes", None, expected * row["occurrences"])
        assert row["bound_by"] == "unknown"
        # Every other op of the step is costed by XLA's rules.
        step = ops.filter((pl.col("module") == "jit_step") & (pl.col("op") != call.name))
        assert step.height > 0 and set(step["cost_source"].to_list()) == {"hlo"}
