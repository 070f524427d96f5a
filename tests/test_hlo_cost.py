"""Costs derived from the HLO (hlo_ops.derived_*) against XLA's own numbers.

Two oracles, both real: the flops / bytes_accessed stats XLA's TPU compiler
wrote into the TPU v6e sample, and ``jax.jit(f).lower(...).compile().cost_analysis()``
of the JAX CPU programs the tests profile (run in a subprocess by jax_profiles).
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from conftest import TPU_SAMPLE
from jax_profiles import JAX_ROOFLINE_PROGRAMS, JAX_STEP_MODULE, jax_available, jax_cost_analysis, session_roofline_profile

import xprosql
from xprosql.ingest import hlo_cost
from xprosql.protos import hlo_pb2


@pytest.fixture(scope="module")
def tpu_run(xspace_warehouse: Path) -> xprosql.Run:
    return xprosql.load(xspace_warehouse)


@pytest.fixture(scope="module", params=sorted(JAX_ROOFLINE_PROGRAMS))
def roofline_profile(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    if not jax_available():
        pytest.skip("jax is not installed (test extra)")
    return JAX_ROOFLINE_PROGRAMS[request.param][0], session_roofline_profile(request.param, tmp_path_factory.getbasetemp() / "jax-roofline")


def _module_totals(profile: Path, tmp_path: Path) -> dict[str, dict[str, float]]:
    report = xprosql.ingest(profile, into=tmp_path / "run")
    assert report.ok, str(report)
    rows = xprosql.load(tmp_path / "run").sql(
        "SELECT module, sum(derived_flops), sum(derived_transcendentals), sum(derived_bytes_accessed) "
        "FROM hlo_ops WHERE is_entry_computation GROUP BY module"
    ).rows()
    return {m: {"flops": float(f), "transcendentals": float(t), "bytes accessed": float(b)} for m, f, t, b in rows}


def _assert_close(ours: dict[str, float], xla: dict[str, float], *, rel: float) -> None:
    for key in ("flops", "transcendentals", "bytes accessed"):
        expected = xla.get(key, 0.0)
        assert math.isclose(ours[key], expected, rel_tol=rel, abs_tol=0.5), f"{key}: ours {ours[key]}, XLA {expected}"


def test_module_costs_match_xla_cost_analysis_on_jax_cpu_programs(roofline_profile: tuple[str, Path], tmp_path: Path) -> None:
    module, profile = roofline_profile
    totals = _module_totals(profile, tmp_path)
    # The issue asks for 10%; the rules are XLA's, so anything off shows a wrong rule.
    _assert_close(totals[module], jax_cost_analysis(profile, module), rel=0.10)
    assert totals[module]["flops"] > 0


def test_step_module_with_convolution_and_reduces_matches_xla(jax_cpu_profile: Path, tmp_path: Path) -> None:
    # jit_step: a dot + tanh fusion, a padded 3x3 convolution and two reduces.
    totals = _module_totals(jax_cpu_profile, tmp_path)
    xla = jax_cost_analysis(jax_cpu_profile, JAX_STEP_MODULE)
    _assert_close(totals[JAX_STEP_MODULE], xla, rel=0.10)
    assert xla["transcendentals"] > 0  # the tanh: not counted as FLOPs by either side


def test_derived_costs_equal_the_tpu_compilers_stats(tpu_run: xprosql.Run) -> None:
    # The TPU sample's op stats come from XLA's cost analysis on the TPU: every op
    # XProf times must get the same FLOPs from the HLO, and nearly the same bytes
    # (tuple index tables are sized differently on TPU).
    rows = tpu_run.sql(
        """SELECT DISTINCT e.hlo_op, e.flops, e.bytes_accessed, h.derived_flops, h.derived_bytes_accessed
           FROM events e JOIN hlo_ops h USING (profile_id, program_id, hlo_op)
           WHERE e.flops IS NOT NULL AND profile_id = $pid""",
        {"pid": _profile_id(tpu_run, TPU_SAMPLE)},
    ).rows()
    assert len({r[0] for r in rows}) >= 15
    for op, flops, nbytes, derived_flops, derived_bytes in rows:
        assert derived_flops == flops, op
        assert math.isclose(derived_bytes, nbytes, rel_tol=1e-6), op


def _profile_id(run: xprosql.Run, path: Path) -> str:
    from xprosql.ingest import profile_id_of

    return profile_id_of(path.read_bytes())


# ------------------------------------------------------------ rules on their own


def _shape(dims: list[int], etype: int = hlo_pb2.PrimitiveType.F32) -> hlo_pb2.ShapeProto:
    shape = hlo_pb2.ShapeProto(element_type=etype, dimensions=dims)
    shape.layout.minor_to_major.extend(reversed(range(len(dims))))
    return shape


def test_convolution_counts_only_unpadded_window_positions() -> None:
    # A 1-D convolution, input 5, kernel 3, padding 1 each side, stride 2: outputs
    # at -1..1, 1..3, 3..5; the padded taps (first of the first, last of the
    # last) do no work. Built here because no profile has this exact shape.
    module = hlo_pb2.HloModuleProto(name="m", entry_computation_name="e")
    comp = module.computations.add(name="e", id=1)
    lhs = comp.instructions.add(name="lhs", opcode="parameter", id=1, shape=_shape([1, 5, 2]))
    rhs = comp.instructions.add(name="rhs", opcode="parameter", id=2, shape=_shape([3, 2, 4]), parameter_number=1)
    conv = comp.instructions.add(name="conv", opcode="convolution", id=3, shape=_shape([1, 3, 4]), operand_ids=[1, 2])
    conv.window.dimensions.add(size=3, stride=2, padding_low=1, padding_high=1, window_dilation=1, base_dilation=1)
    dn = conv.convolution_dimension_numbers
    dn.input_batch_dimension, dn.input_feature_dimension = 0, 2
    dn.input_spatial_dimensions.append(1)
    dn.kernel_input_feature_dimension, dn.kernel_output_feature_dimension = 1, 2
    dn.kernel_spatial_dimensions.append(0)
    dn.output_batch_dimension, dn.output_feature_dimension = 0, 2
    dn.output_spatial_dimensions.append(1)
    brute = sum(1 for o in range(3) for k in range(3) if 0 <= o * 2 - 1 + k < 5)
    costs = hlo_cost.instruction_costs(module)
    assert costs[(1, conv.id)].flops == 2 * 2 * 4 * 1 * brute
    assert costs[(1, conv.id)].bytes_accessed == 4 * (5 * 2 + 3 * 2 * 4 + 3 * 4)
    assert costs[(1, lhs.id)].bytes_accessed == costs[(1, rhs.id)].bytes_accessed == 0
