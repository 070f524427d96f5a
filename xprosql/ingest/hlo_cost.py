"""FLOPs, transcendentals and bytes of each HLO instruction, derived from the HLO alone.

Profiles of XLA on TPU carry per-op ``flops`` and ``bytes_accessed`` stats;
JAX on CPU and many GPU profiles do not. This module derives them from the
embedded ``HloModuleProto`` with the rules of XLA's own cost analysis
(``HloCostAnalysis``), so that a module's total agrees with what
``jax.jit(f).lower(...).compile().cost_analysis()`` reports:

* elementwise ops: one FLOP per output element; transcendental functions
  (exp, log, tanh, ...) count as transcendentals instead;
* ``dot``: 2 x output elements x the product of the contracting dimensions;
* ``convolution``: 2 x input features / feature groups x output features x
  batch / batch groups x the number of valid (unpadded) window positions;
* ``reduce``, ``map``, ``reduce-window``, ``scatter``, ``select-and-scatter``:
  the cost of the applied computation times the number of applications;
* ``fusion``: the FLOPs of its fused computation; bytes are the fusion's
  operands as its body reads them plus its results (intermediate values stay
  in registers or caches);
* ``call``, ``while`` (one iteration), ``conditional`` (the costliest
  branch), ``async-start``: the cost of the called computations;
* bytes of any other op: the sizes of its operands plus its result, with
  XLA's exceptions (parameters, constants, tuples, bitcasts, slices, ...).

A ``custom-call`` is opaque to XLA; its cost comes from the best source there
is, in this order, and :attr:`Cost.source` says which (``hlo`` for the rules above):

1. ``declared``: what the kernel's author declared: a Pallas / Mosaic TPU kernel's
   ``cost_estimate`` (flops, transcendentals, bytes_accessed) in the backend config of
   its ``tpu_custom_call``. ``triton_gemm``: a fusion XLA hands to Triton as a GEMM
   (backend config kind ``__triton_gemm``, ``__triton_nested_gemm_fusion``, ...):
   2·M·N·K of the dots in its body (batch included, no epilogue), bytes its operands
   plus its results.
2. ``library``: a known library call, by target and operand shapes:
   fused attention (cuDNN ``__cudnn$fmha*``, Transformer Engine ``te_fused_attn_*``,
   which ROCm builds run on CK kernels; forward and backward, causal, GQA) by
   :func:`xprosql.models.torch_costs.attention_cost`; cuBLAS / hipBLASLt GEMMs
   (``__cublas$gemm``, ``__cublas$lt$matmul*``: 2 x output elements x the contracting
   size); cuDNN / MIOpen convolutions (``__cudnn$conv*``: the convolution rule above on
   the call's input, filter and output, which a backward call swaps). Bytes: the
   attention formula's, else operands plus results (a trailing u8/s8 workspace left out).
3. ``operand_bytes``: any other custom call: bytes of its operands and results, a lower
   bound (a kernel may read an input more than once), and FLOPs and transcendentals
   unknown (None).

Sizes are dense element counts times element width (no TPU tile padding); tuples
count 8 bytes per element pointer, as XLA's CPU backend does.

Example:
    >>> costs = instruction_costs(module_proto)                     # doctest: +SKIP
    >>> costs[(computation_id, instruction_id)].flops               # doctest: +SKIP
    4194304
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from xprosql.models.torch_costs import attention_cost
from xprosql.protos import hlo_pb2

__all__ = ["COST_SOURCES", "Cost", "CostSource", "instruction_costs", "module_cost", "shape_bytes", "shape_elements"]

CostSource = Literal["hlo", "declared", "triton_gemm", "library", "operand_bytes"]
# Best first: the order in which a custom call's sources are tried (hlo: XLA's rules, for every other op).
COST_SOURCES: tuple[CostSource, ...] = ("declared", "triton_gemm", "library", "hlo", "operand_bytes")

_PT = hlo_pb2.PrimitiveType
_POINTER_BYTES = 8  # what a tuple's index table costs per element on CPU
_FMA_FLOPS = 2

_BITS: dict[int, int] = {
    _PT.PRED: 8, _PT.S1: 1, _PT.U1: 1, _PT.S2: 2, _PT.U2: 2, _PT.S4: 4, _PT.U4: 4,
    _PT.S8: 8, _PT.U8: 8, _PT.S16: 16, _PT.U16: 16, _PT.F16: 16, _PT.BF16: 16,
    _PT.S32: 32, _PT.U32: 32, _PT.F32: 32, _PT.S64: 64, _PT.U64: 64, _PT.F64: 64,
    _PT.C64: 64, _PT.C128: 128, _PT.F4E2M1FN: 4,
    _PT.F8E5M2: 8, _PT.F8E4M3: 8, _PT.F8E4M3FN: 8, _PT.F8E4M3B11FNUZ: 8, _PT.F8E3M4: 8,
    _PT.F8E5M2FNUZ: 8, _PT.F8E4M3FNUZ: 8, _PT.F8E8M0FNU: 8,
}
_NO_DATA = frozenset((_PT.TOKEN, _PT.OPAQUE_TYPE, _PT.PRIMITIVE_TYPE_INVALID))

_TRANSCENDENTAL = frozenset({
    "exponential", "exponential-minus-one", "log", "log-plus-one", "logistic", "power", "sqrt",
    "cbrt", "rsqrt", "tanh", "sine", "cosine", "tan", "atan2", "erf",
})
_ELEMENTWISE = _TRANSCENDENTAL | frozenset({
    "abs", "add", "and", "ceil", "clamp", "clz", "compare", "complex", "convert", "divide", "floor",
    "imag", "is-finite", "maximum", "minimum", "multiply", "negate", "not", "or", "popcnt", "real",
    "reduce-precision", "remainder", "round-nearest-afz", "round-nearest-even", "select",
    "shift-left", "shift-right-arithmetic", "shift-right-logical", "sign", "stochastic-convert",
    "subtract", "xor",
})
# Ops that move no data of their own.
_NO_BYTES = frozenset({"parameter", "constant", "get-tuple-element", "bitcast", "domain", "after-all", "add-dependency"})
# Ops whose cost is that of their called computations, bytes included.
_CALLERS = frozenset({"call", "async-start"})
# Applied computations contribute FLOPs and transcendentals, not bytes.
_APPLY_KEYS = ("flops", "transcendentals")


@dataclass
class Cost:
    """Cost of one execution of an instruction (FLOP, bytes). ``None`` means unknown (an opaque custom call)."""

    flops: int | None = 0
    transcendentals: int | None = 0
    bytes_accessed: int | None = 0
    source: CostSource = "hlo"  # where the numbers come from (module docstring); add() keeps the caller's

    def add(self, other: Cost, *, scale: int = 1, keys: Iterable[str] = ("flops", "transcendentals", "bytes_accessed")) -> None:
        for key in keys:
            mine, theirs = getattr(self, key), getattr(other, key)
            # Unknown parts count as nothing in a sum, as a total is still useful.
            setattr(self, key, (mine or 0) + (theirs or 0) * scale)


def shape_elements(shape: hlo_pb2.ShapeProto) -> int:
    """Elements of an array shape (1 for a scalar); of a tuple, the sum over its leaves."""
    if shape.element_type == _PT.TUPLE:
        return sum(shape_elements(s) for s in shape.tuple_shapes)
    return math.prod(shape.dimensions)


# Ops that move no data of their own inside a fusion: a slice behind them reads only its part.
_LAYOUT_OPS = ("bitcast", "transpose")


def _array_bytes(shape: hlo_pb2.ShapeProto) -> int:
    if shape.element_type in _NO_DATA:
        return 0
    bits = shape.layout.element_size_in_bits if shape.HasField("layout") and shape.layout.element_size_in_bits else None
    bits = bits or _BITS.get(shape.element_type, 8)
    return (math.prod(shape.dimensions) * bits + 7) // 8


def shape_bytes(shape: hlo_pb2.ShapeProto) -> int:
    """Bytes of a shape as XLA's CPU cost analysis sizes it: dense arrays, 8 bytes per tuple element."""
    if shape.element_type == _PT.TUPLE:
        return _POINTER_BYTES * len(shape.tuple_shapes)
    return _array_bytes(shape)


def _array_leaves(shape: hlo_pb2.ShapeProto) -> Iterable[tuple[tuple[int, ...], hlo_pb2.ShapeProto]]:
    if shape.element_type == _PT.TUPLE:
        for i, sub in enumerate(shape.tuple_shapes):
            for index, leaf in _array_leaves(sub):
                yield (i, *index), leaf
    elif shape.element_type not in _NO_DATA:
        yield (), shape


class _Analysis:
    """Per-instruction costs of one module, computations memoised by id."""

    def __init__(self, module: hlo_pb2.HloModuleProto) -> None:
        self.computations = {c.id: c for c in module.computations}
        self.by_id: dict[int, dict[int, hlo_pb2.HloInstructionProto]] = {}
        self.users: dict[int, dict[int, list[hlo_pb2.HloInstructionProto]]] = {}
        module_wide: dict[int, hlo_pb2.HloInstructionProto | None] = {}
        for c in module.computations:
            local = {i.id: i for i in c.instructions}
            self.by_id[c.id] = local
            users: dict[int, list[hlo_pb2.HloInstructionProto]] = {}
            for instruction in c.instructions:
                for operand_id in dict.fromkeys(instruction.operand_ids):  # a user counts once
                    users.setdefault(operand_id, []).append(instruction)
            self.users[c.id] = users
            for i in c.instructions:
                module_wide[i.id] = None if i.id in module_wide else i
        self.module_wide = {k: v for k, v in module_wide.items() if v is not None}
        self.costs: dict[tuple[int, int], Cost] = {}
        self.totals: dict[int, Cost] = {}

    # -- helpers ------------------------------------------------------------

    def operand(self, computation_id: int, instruction: hlo_pb2.HloInstructionProto, index: int) -> hlo_pb2.HloInstructionProto | None:
        if index >= len(instruction.operand_ids):
            return None
        operand_id = instruction.operand_ids[index]
        return self.by_id[computation_id].get(operand_id) or self.module_wide.get(operand_id)

    def operand_shape_bytes(self, computation_id: int, instruction: hlo_pb2.HloInstructionProto, index: int) -> int:
        operand = self.operand(computation_id, instruction, index)
        return shape_bytes(operand.shape) if operand is not None else 0

    def root(self, computation: hlo_pb2.HloComputationProto) -> hlo_pb2.HloInstructionProto:
        local = self.by_id[computation.id]
        return local.get(computation.root_id) or computation.instructions[-1]

    def total(self, computation_id: int) -> Cost:
        """Summed cost of every instruction of a computation (what a caller is charged)."""
        cached = self.totals.get(computation_id)
        if cached is not None:
            return cached
        computation = self.computations.get(computation_id)
        total = Cost()
        if computation is not None:
            for instruction in computation.instructions:
                total.add(self.cost(computation_id, instruction))
        self.totals[computation_id] = total
        return total

    def cost(self, computation_id: int, instruction: hlo_pb2.HloInstructionProto) -> Cost:
        key = (computation_id, instruction.id)
        cached = self.costs.get(key)
        if cached is None:
            cached = self.costs[key] = self._cost(computation_id, instruction)
        return cached

    # -- rules --------------------------------------------------------------

    def _cost(self, cid: int, hlo: hlo_pb2.HloInstructionProto) -> Cost:
        op = hlo.opcode
        out_bytes = shape_bytes(hlo.shape)
        operand_bytes = [self.operand_shape_bytes(cid, hlo, i) for i in range(len(hlo.operand_ids))]
        cost = Cost(bytes_accessed=out_bytes + sum(operand_bytes))
        called = list(hlo.called_computation_ids)

        if op in _NO_BYTES:
            cost.bytes_accessed = 0
        elif op == "tuple":
            cost.bytes_accessed = out_bytes
        elif op in _ELEMENTWISE:
            count = shape_elements(hlo.shape)
            if op in _TRANSCENDENTAL:
                cost.transcendentals = count
            else:
                cost.flops = count
        elif op == "slice":
            cost.bytes_accessed = 2 * out_bytes
        elif op == "dynamic-slice":
            cost.bytes_accessed = 2 * out_bytes + (operand_bytes[1] if len(operand_bytes) > 1 else 0)
        elif op == "dynamic-update-slice":
            update = operand_bytes[1] if len(operand_bytes) > 1 else 0
            cost.bytes_accessed = 2 * update + (operand_bytes[2] if len(operand_bytes) > 2 else 0)
        elif op == "gather":
            cost.bytes_accessed = 2 * out_bytes + (operand_bytes[1] if len(operand_bytes) > 1 else 0)
        elif op == "scatter":
            cost = self._scatter(cid, hlo, called)
        elif op == "dot":
            lhs = self.operand(cid, hlo, 0)
            width = math.prod(lhs.shape.dimensions[d] for d in hlo.dot_dimension_numbers.lhs_contracting_dimensions) if lhs else 0
            cost.flops = _FMA_FLOPS * shape_elements(hlo.shape) * width
        elif op == "convolution":
            cost.flops = self._convolution_flops(cid, hlo)
        elif op in ("reduce", "map", "reduce-window", "select-and-scatter"):
            self._apply(cid, hlo, called, cost)
        elif op == "sort":
            operand = self.operand(cid, hlo, 0)
            n = shape_elements(operand.shape) if operand else 0
            cost.flops = n * (math.ceil(math.log2(n)) if n > 1 else 0)
        elif op in ("all-reduce", "all-reduce-start"):
            leaves = [leaf for _, leaf in _array_leaves(hlo.shape)]
            cost.flops = sum(shape_elements(leaf) for leaf in leaves)
            cost.bytes_accessed = sum(_array_bytes(leaf) for leaf in leaves) + sum(operand_bytes)
        elif op in ("rng", "rng-bit-generator"):
            cost.transcendentals = shape_elements(hlo.shape)
        elif op == "triangular-solve":
            a, b = self.operand(cid, hlo, 0), self.operand(cid, hlo, 1)
            if a is not None and b is not None and a.shape.dimensions:
                cost.flops = _FMA_FLOPS * a.shape.dimensions[-1] * shape_elements(b.shape)
                cost.bytes_accessed = out_bytes + operand_bytes[0] // 2 + operand_bytes[1]
        elif op == "cholesky":
            a = self.operand(cid, hlo, 0)
            if a is not None and a.shape.dimensions:
                cost.flops = a.shape.dimensions[-1] * shape_elements(a.shape) // 3
                cost.bytes_accessed = operand_bytes[0]
        elif op == "fusion":
            cost = self._fusion(cid, hlo, called)
        elif op in _CALLERS and called:
            cost = Cost()
            cost.add(self.total(called[0]))
        elif op == "while":
            cost = Cost()  # one iteration of the body plus the condition
            for computation_id in called:
                cost.add(self.total(computation_id))
        elif op == "conditional":
            branches = [self.total(c) for c in called]
            flops, transcendentals, nbytes = (max((getattr(b, k) or 0) for b in branches) if branches else 0
                                              for k in ("flops", "transcendentals", "bytes_accessed"))
            cost = Cost(flops, transcendentals, nbytes)
        elif op == "custom-call":
            cost = self._custom_call(cid, hlo)
        return cost

    def _apply(self, cid: int, hlo: hlo_pb2.HloInstructionProto, called: list[int], cost: Cost) -> None:
        if not called:
            return
        op = hlo.opcode
        if op == "select-and-scatter":
            source = self.operand(cid, hlo, 1)
            count = shape_elements(source.shape) if source else 0
            window = math.prod(d.size for d in hlo.window.dimensions)
            cost.add(self.total(called[0]), scale=count * (window - 1), keys=_APPLY_KEYS)
            if len(called) > 1:
                cost.add(self.total(called[1]), scale=count, keys=_APPLY_KEYS)
            return
        output = hlo.shape.tuple_shapes[0] if hlo.shape.element_type == _PT.TUPLE and hlo.shape.tuple_shapes else hlo.shape
        out_elements = shape_elements(output)
        if op == "map":
            count = out_elements
        elif op == "reduce":
            operand = self.operand(cid, hlo, 0)
            count = (shape_elements(operand.shape) if operand else 0) - out_elements
        else:
            count = self._reduce_window_count(hlo, output, out_elements)
        cost.add(self.total(called[0]), scale=count, keys=_APPLY_KEYS)

    @staticmethod
    def _reduce_window_count(hlo: hlo_pb2.HloInstructionProto, output: hlo_pb2.ShapeProto, out_elements: int) -> int:
        dims = hlo.window.dimensions
        window = math.prod(d.size for d in dims)
        count = (window - 1) * out_elements
        # A reduce-window that is a reduce plus a broadcast back along one
        # dimension (window 2p+1, padding p on both sides, p = size - 1) counts as that.
        reduced = [d for d in dims if d.size != 1]
        padded = [d for d in dims if d.padding_low or d.padding_high]
        if len(reduced) == 1 and len(padded) == 1 and hlo.shape.element_type != _PT.TUPLE:
            for index, d in enumerate(dims):
                if (d.size != 1 and d.padding_low and d.padding_low == d.padding_high
                        and d.size == 2 * d.padding_low + 1 and d.padding_low == output.dimensions[index] - 1):
                    span = output.dimensions[index]
                    return out_elements // span + span - 1
        return count

    def _scatter(self, cid: int, hlo: hlo_pb2.HloInstructionProto, called: list[int]) -> Cost:
        n = (len(hlo.operand_ids) - 1) // 2  # operands..., indices, updates...
        updates = [self.operand(cid, hlo, n + 1 + i) for i in range(n)]
        update_bytes = sum(shape_bytes(u.shape) for u in updates if u is not None)
        indices = self.operand_shape_bytes(cid, hlo, n)
        cost = Cost(bytes_accessed=3 * update_bytes + indices)
        if called and updates and updates[0] is not None:
            cost.add(self.total(called[0]), scale=shape_elements(updates[0].shape), keys=_APPLY_KEYS)
        return cost

    def _convolution_flops(self, cid: int, hlo: hlo_pb2.HloInstructionProto) -> int:
        lhs, rhs = self.operand(cid, hlo, 0), self.operand(cid, hlo, 1)
        if lhs is None or rhs is None:
            return 0
        return _convolution_flops(hlo, lhs.shape, rhs.shape, hlo.shape)

    # -- custom calls and Triton GEMM fusions ----------------------------------

    def _custom_call(self, cid: int, hlo: hlo_pb2.HloInstructionProto) -> Cost:
        operands = [self.operand(cid, hlo, i) for i in range(len(hlo.operand_ids))]
        shapes = [o.shape if o is not None else None for o in operands]
        config = _backend_config(hlo)
        outputs = _outputs(hlo.shape)
        for rule in (_declared_cost, _library_cost):
            try:
                cost = rule(hlo, shapes, outputs, config)
            except (IndexError, KeyError, ValueError, TypeError, ZeroDivisionError):
                cost = None  # a config or shapes the rule cannot read: the next source, not the module's costs lost
            if cost is not None:
                return cost
        read = sum(_leaf_bytes(shape) for shape in shapes if shape is not None)
        return Cost(flops=None, transcendentals=None, bytes_accessed=read + sum(_array_bytes(o) for o in outputs),
                    source="operand_bytes")

    def _triton_gemm(self, cid: int, hlo: hlo_pb2.HloInstructionProto, body: hlo_pb2.HloComputationProto) -> Cost | None:
        """A fusion XLA runs as a Triton GEMM: the dots of its body (nested fusions included), read once."""
        kind = _fusion_kind(hlo)
        if not kind.startswith("__triton") or not ("gemm" in kind or "dot" in kind):
            return None
        flops = self._dot_flops(body.id, set())
        if flops is None:
            return None
        operands = (self.operand(cid, hlo, i) for i in range(len(hlo.operand_ids)))
        operand_bytes = sum(_leaf_bytes(o.shape) for o in operands if o is not None)
        written = sum(_array_bytes(leaf) for _, leaf in _array_leaves(hlo.shape))
        return Cost(flops=flops, transcendentals=0, bytes_accessed=operand_bytes + written, source="triton_gemm")

    def _dot_flops(self, computation_id: int, seen: set[int]) -> int | None:
        """FLOPs of the dots in a computation and what it calls; None when it holds no dot."""
        computation = self.computations.get(computation_id)
        if computation is None or computation_id in seen:
            return None
        seen.add(computation_id)
        total: int | None = None
        for inner in computation.instructions:
            found: int | None = None
            if inner.opcode == "dot":
                found = self.cost(computation_id, inner).flops or 0
            elif inner.opcode in ("fusion", "call"):
                nested = [self._dot_flops(c, seen) for c in inner.called_computation_ids]
                found = sum(n for n in nested if n is not None) if any(n is not None for n in nested) else None
            if found is not None:
                total = (total or 0) + found
        return total

    def _fusion(self, cid: int, hlo: hlo_pb2.HloInstructionProto, called: list[int]) -> Cost:
        if not called or called[0] not in self.computations:
            return Cost(flops=None, transcendentals=None, bytes_accessed=None)
        body = self.computations[called[0]]
        triton = self._triton_gemm(cid, hlo, body)
        if triton is not None:
            return triton
        if hlo.fusion_kind == "kCustom":
            # A custom fusion around a gather or scatter costs what that op costs.
            for inner in body.instructions:
                if inner.opcode in ("gather", "scatter"):
                    return self.cost(body.id, inner)
        cost = Cost()
        cost.add(self.total(body.id), keys=_APPLY_KEYS)
        root = self.root(body)
        written = 0
        for index, leaf in _array_leaves(hlo.shape):
            # An in-place dynamic-update-slice writes only its update.
            producer = root
            if index and root.opcode == "tuple" and len(index) == 1:
                producer = self.operand(body.id, root, index[0]) or root
            if len(index) <= 1 and producer.opcode == "dynamic-update-slice" and (not index or producer is not root):
                written += self.operand_shape_bytes(body.id, producer, 1)
            else:
                written += _array_bytes(leaf)
        read = 0
        for inner in body.instructions:
            if inner.opcode == "constant" and shape_elements(inner.shape) > 1:
                read += shape_bytes(inner.shape)  # large constants live in memory
        for inner in body.instructions:
            if inner.opcode == "parameter":
                read += self._parameter_read_bytes(body.id, inner)
        cost.bytes_accessed = written + read
        return cost

    def _parameter_read_bytes(self, cid: int, param: hlo_pb2.HloInstructionProto) -> int:
        """Bytes a fused parameter costs: whole for most readers, the slice for slicing readers."""
        if param.shape.element_type == _PT.TUPLE:
            total = 0
            for user in self.users[cid].get(param.id, []):
                if user.opcode == "get-tuple-element":
                    total += self._parameter_read_bytes(cid, user)
            return total
        size = shape_bytes(param.shape)
        read, trivial_seen = 0, False
        for user in self.users[cid].get(param.id, []):
            op = user.opcode
            if op == "fusion" and user.called_computation_ids:
                body = self.computations.get(user.called_computation_ids[0])
                if body is None:
                    continue
                inner_params = {p.parameter_number: p for p in body.instructions if p.opcode == "parameter"}
                for index, operand_id in enumerate(user.operand_ids):
                    if operand_id == param.id and index in inner_params:
                        read += self._parameter_read_bytes(body.id, inner_params[index])
            elif op == "slice":
                read += shape_bytes(user.shape)
            elif op in _LAYOUT_OPS and (sliced := self._sliced_bytes(cid, user)) is not None:
                read += sliced
            elif op == "dynamic-slice":
                if user.operand_ids and user.operand_ids[0] == param.id:
                    read += shape_bytes(user.shape)
                elif not trivial_seen:
                    trivial_seen, read = True, read + size
            elif op == "dynamic-update-slice":
                if (not user.operand_ids or user.operand_ids[0] != param.id) and not trivial_seen:
                    trivial_seen, read = True, read + size
            elif op in ("broadcast", "reshape"):
                read += size
            elif not trivial_seen:
                trivial_seen, read = True, read + size  # other readers share one read
        return read

    def _sliced_bytes(self, cid: int, inst: hlo_pb2.HloInstructionProto) -> int | None:
        """Bytes the slices behind a chain of layout ops read (a fused qkv split: bitcast, transpose, slice), or
        None when something else reads the chain. XLA's GPU cost analysis, which XProf runs on GPU profiles, counts
        the part a fusion uses (tests/test_h200.py: its loop_slice_fusions); reading the whole operand put them
        above the HBM roof."""
        total = 0
        for user in self.users[cid].get(inst.id, []):
            if user.opcode == "slice":
                total += shape_bytes(user.shape)
            elif user.opcode in _LAYOUT_OPS and (sliced := self._sliced_bytes(cid, user)) is not None:
                total += sliced
            else:
                return None
        return total if total else None


def _leaf_bytes(shape: hlo_pb2.ShapeProto) -> int:
    """Bytes of every array of a shape (a tuple's elements, not its index table)."""
    return sum(_array_bytes(leaf) for _, leaf in _array_leaves(shape))


def _outputs(shape: hlo_pb2.ShapeProto) -> list[hlo_pb2.ShapeProto]:
    """A custom call's results, less the scratch buffer libraries return last (a 1-D u8 / s8 array)."""
    leaves = [leaf for _, leaf in _array_leaves(shape)]
    if shape.element_type == _PT.TUPLE and len(leaves) > 1:
        last = leaves[-1]
        if last.element_type in (_PT.U8, _PT.S8) and len(last.dimensions) == 1:
            leaves.pop()
    return leaves


def _element_bytes(shape: hlo_pb2.ShapeProto) -> int:
    return max(_BITS.get(shape.element_type, 8) // 8, 1)


_MLIR_ATTRIBUTE = re.compile(r'\s*([A-Za-z_][\w.]*)\s*=\s*("(?:[^"\\]|\\.)*"|[^,]*?)\s*(?::\s*[\w<>]+)?\s*(?:,|$)')


def _mlir_value(text: str) -> Any:
    if text in ("true", "false"):
        return text == "true"
    if text.startswith('"'):
        return text[1:-1]
    for parse in (int, float):
        try:
            return parse(text)
        except ValueError:
            continue
    return text


def _backend_config(hlo: hlo_pb2.HloInstructionProto) -> dict[str, Any]:
    """A backend config as a dict: JSON (XLA's GPU configs, Pallas) or an MLIR attribute dictionary
    (``{attn_heads = 16 : i64, ...}``, what FFI custom calls such as Transformer Engine's carry); {} otherwise."""
    raw = hlo.backend_config
    if not raw:
        return {}
    text = raw.decode("utf-8", errors="replace").strip()
    if not text.startswith("{") or not text.endswith("}"):
        return {}
    try:
        value = json.loads(text)
        return value if isinstance(value, dict) else {}
    except ValueError:
        pass
    inner = text[1:-1].strip()
    return {m.group(1): _mlir_value(m.group(2).strip()) for m in _MLIR_ATTRIBUTE.finditer(inner) if m.group(1)}


def _fusion_kind(hlo: hlo_pb2.HloInstructionProto) -> str:
    config = _backend_config(hlo).get("fusion_backend_config")
    kind = config.get("kind") if isinstance(config, dict) else None
    return kind if isinstance(kind, str) else ""


def _count(value: Any) -> int | None:
    """A non-negative integer of a config (JSON writes int64 as a string)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        try:
            value = int(value)
        except ValueError:
            return None
    return value if isinstance(value, int) and value >= 0 else None


def _ints(values: Any) -> list[int] | None:
    if not isinstance(values, list):
        return None
    out = [_count(v) for v in values]
    return None if any(v is None for v in out) else [v for v in out if v is not None]


_Shapes = Sequence[hlo_pb2.ShapeProto | None]


def _declared_cost(hlo: hlo_pb2.HloInstructionProto, shapes: _Shapes, outputs: list[hlo_pb2.ShapeProto],
                   config: dict[str, Any]) -> Cost | None:
    """A Pallas / Mosaic kernel's ``cost_estimate``: what its author declared."""
    inner = config.get("custom_call_config")
    estimate = (inner if isinstance(inner, dict) else config).get("cost_estimate")
    if not isinstance(estimate, dict):
        return None
    flops, transcendentals, nbytes = (_count(estimate.get(k)) for k in ("flops", "transcendentals", "bytes_accessed"))
    if flops is None and nbytes is None:
        return None
    return Cost(flops=flops, transcendentals=transcendentals, bytes_accessed=nbytes, source="declared")


def _library_cost(hlo: hlo_pb2.HloInstructionProto, shapes: _Shapes, outputs: list[hlo_pb2.ShapeProto],
                  config: dict[str, Any]) -> Cost | None:
    target = hlo.custom_call_target
    flops: int | None = None
    nbytes: int | None = None
    if target.startswith("__cudnn$fmha"):
        found = _cudnn_attention(target, shapes, config)
        flops, nbytes = found if found is not None else (None, None)
    elif target in _TE_ATTENTION:
        found = _te_attention(_TE_ATTENTION[target], shapes, config)
        flops, nbytes = found if found is not None else (None, None)
    elif target.startswith("__cublas$"):
        flops = _gemm_flops(shapes, outputs, config)
    elif target in _CONVOLUTIONS and hlo.HasField("convolution_dimension_numbers") and outputs:
        flops = _library_convolution_flops(hlo, _CONVOLUTIONS[target], shapes, outputs[0])
    if flops is None:
        return None
    if nbytes is None:
        nbytes = sum(_leaf_bytes(s) for s in shapes if s is not None) + sum(_array_bytes(o) for o in outputs)
    return Cost(flops=flops, transcendentals=0, bytes_accessed=nbytes, source="library")


def _gemm_flops(shapes: _Shapes, outputs: list[hlo_pb2.ShapeProto], config: dict[str, Any]) -> int | None:
    """cuBLAS / hipBLASLt: 2 x output elements x the contracting size (alpha, beta and epilogues not counted)."""
    gemm = config.get("gemm_backend_config")
    numbers = gemm.get("dot_dimension_numbers") if isinstance(gemm, dict) else None
    contracting = _ints(numbers.get("lhs_contracting_dimensions")) if isinstance(numbers, dict) else None
    lhs = shapes[0] if shapes else None
    if contracting is None or lhs is None or not outputs or any(d >= len(lhs.dimensions) for d in contracting):
        return None
    return _FMA_FLOPS * shape_elements(outputs[0]) * math.prod(lhs.dimensions[d] for d in contracting)


# Which of a cuDNN / MIOpen convolution call's shapes is the convolution's input, filter and output.
_CONVOLUTIONS = {
    "__cudnn$convForward": "forward", "__cudnn$convBiasActivationForward": "forward",
    "__cudnn$convForwardGraph": "forward", "__cudnn$convBackwardInput": "backward_input",
    "__cudnn$convBackwardFilter": "backward_filter",
}


def _library_convolution_flops(hlo: hlo_pb2.HloInstructionProto, kind: str, shapes: _Shapes,
                               result: hlo_pb2.ShapeProto) -> int | None:
    first, second = (shapes[0], shapes[1]) if len(shapes) > 1 else (None, None)
    if first is None or second is None:
        return None
    # The call's dimension numbers and window are the forward convolution's (XLA's GpuConvConfig).
    roles = {"forward": (first, second, result), "backward_input": (result, second, first),
             "backward_filter": (first, result, second)}
    return _convolution_flops(hlo, *roles[kind])


def _tensor_sizes(shape: hlo_pb2.ShapeProto | None, batch: list[int] | None, contracting: list[int] | None,
                  ) -> tuple[int, int, int, int] | None:
    """(batch, heads, contracted, free) of a 4-D attention operand from one of its GEMMs' dimension numbers."""
    if shape is None or batch is None or contracting is None or len(shape.dimensions) != 4:
        return None
    if len(batch) != 2 or len(contracting) != 1 or len({*batch, *contracting}) != 3 or max(*batch, *contracting) > 3:
        return None
    free = ({0, 1, 2, 3} - {*batch, *contracting}).pop()
    dims = shape.dimensions
    return dims[batch[0]], dims[batch[1]], dims[contracting[0]], dims[free]


def _cudnn_attention(target: str, shapes: _Shapes, config: dict[str, Any]) -> tuple[int, int] | None:
    """cuDNN fused attention (``__cudnn$fmha*``): Q, K, V are its first operands, laid out as the GEMMs' dimension
    numbers in its backend config say (JAX writes BTNH or BNTH)."""
    fmha = config.get("cudnn_fmha_backend_config")
    if not isinstance(fmha, dict) or len(shapes) < 3:
        return None
    backward = "Backward" in target
    # (GEMM, side, is the contracted dimension the sequence?) for Q, K and V.
    plan = ((("bmm1_grad_gemm1", "rhs", True), ("bmm1_grad_gemm2", "rhs", True), ("bmm2_grad_gemm2", "rhs", False))
            if backward else (("bmm1", "lhs", False), ("bmm1", "rhs", False), ("bmm2", "rhs", True)))
    sizes = []
    for shape, (gemm, side, seq_contracted) in zip(shapes, plan):
        numbers = fmha.get(f"{gemm}_dot_dimension_numbers")
        if not isinstance(numbers, dict):
            return None
        found = _tensor_sizes(shape, _ints(numbers.get(f"{side}_batch_dimensions")),
                              _ints(numbers.get(f"{side}_contracting_dimensions")))
        if found is None:
            return None
        b, h, contracted, free = found
        sizes.append((b, h, contracted, free) if seq_contracted else (b, h, free, contracted))  # (B, H, N, d)
    (b, hq, nq, dqk), (bk, hkv, nkv, dk), (bv, hv, nv, dv) = sizes
    window = _count(fmha.get("sliding_window_length", 0))
    mask = fmha.get("mask_type", "NO_MASK")
    if b != bk or b != bv or hkv != hv or nkv != nv or dqk != dk or window != 0 or mask not in _CUDNN_MASKS:
        return None
    query = shapes[0]
    assert query is not None
    return attention_cost(batch=b, heads_q=hq, heads_kv=hkv, seq_q=nq, seq_kv=nkv, head_dim_qk=dqk, head_dim_v=dv,
                          causal=_CUDNN_MASKS[mask], backward=backward, bytes_per_element=_element_bytes(query))


# cuDNN mask types (JAX's MaskType names) and whether they are causal; ALIBI is a bias, all positions count.
_CUDNN_MASKS = {"NO_MASK": False, "PADDING": False, "CAUSAL": True, "PADDING_CAUSAL": True, "ALIBI": False}

# Transformer Engine's JAX custom calls (FFI ones carry their attributes), and whether each is the backward.
_TE_ATTENTION = {"te_fused_attn_forward_ffi": False, "te_fused_attn_backward_ffi": True,
                 "te_fused_attn_forward": False, "te_fused_attn_backward": True}
# NVTE_QKV_Layout: the tensors Q, K, V come in (one packed QKV, Q and a packed KV, or three), each as its
# dimensions: B batch, S sequence, H heads, D head size; 3 and 2 the packing. THD (ragged) and paged layouts
# are not here: their sequence lengths are in the data, not the shapes.
_TE_LAYOUTS = {
    0: ("SB3HD",), 1: ("SBH3D",), 2: ("SBHD", "SB2HD"), 3: ("SBHD", "SBH2D"), 4: ("SBHD", "SBHD", "SBHD"),
    5: ("BS3HD",), 6: ("BSH3D",), 7: ("BSHD", "BS2HD"), 8: ("BSHD", "BSH2D"), 9: ("BSHD", "BSHD", "BSHD"),
    15: ("SBHD", "BSHD", "BSHD"), 16: ("BSHD", "SBHD", "SBHD"),
}
# NVTE_Mask_Type: no mask, padding, causal, padding + causal, and both aligned to the bottom right.
_TE_CAUSAL = {0: False, 1: False, 2: True, 3: True, 4: True, 5: True}


def _te_attention(backward: bool, shapes: _Shapes, config: dict[str, Any]) -> tuple[int, int] | None:
    """Transformer Engine's fused attention (cuDNN on NVIDIA, CK or AOTriton on AMD): Q, K, V are its first
    operands (empty when packed into the first), laid out as its ``qkv_layout`` attribute says."""
    layout_id = _count(config.get("qkv_layout"))
    layout = _TE_LAYOUTS.get(layout_id) if layout_id is not None else None
    mask = _count(config.get("mask_type"))
    if layout is None or mask not in _TE_CAUSAL:
        return None
    # A sliding window is not modelled: only (-1, -1), or (-1, 0) that TE writes for a causal mask.
    if config.get("window_size_left", -1) != -1 or config.get("window_size_right", -1) not in (-1, 0):
        return None
    tensors: list[dict[str, int]] = []
    for labels, shape in zip(layout, shapes):
        if shape is None or len(shape.dimensions) != len(labels):
            return None
        tensors.append(dict(zip(labels, shape.dimensions)))
    if len(tensors) != len(layout):
        return None
    q = tensors[0]
    k = tensors[1] if len(tensors) > 1 else q
    v = tensors[2] if len(tensors) > 2 else k
    sizes = {"input_batch": q["B"], "attn_heads": q["H"], "num_gqa_groups": k["H"], "q_max_seqlen": q["S"],
             "kv_max_seqlen": k["S"], "qk_head_dim": q["D"], "v_head_dim": v["D"]}
    # The attributes, where present, must tell the same story as the shapes.
    if any(name in config and _count(config[name]) != size for name, size in sizes.items()):
        return None
    if q["B"] != k["B"] or k["B"] != v["B"] or k["H"] != v["H"] or k["S"] != v["S"] or q["D"] != k["D"]:
        return None
    query = shapes[0]
    assert query is not None
    return attention_cost(batch=q["B"], heads_q=q["H"], heads_kv=k["H"], seq_q=q["S"], seq_kv=k["S"],
                          head_dim_qk=q["D"], head_dim_v=v["D"], causal=_TE_CAUSAL[mask], backward=backward,
                          bytes_per_element=_element_bytes(query))


def _convolution_flops(hlo: hlo_pb2.HloInstructionProto, lhs: hlo_pb2.ShapeProto, rhs: hlo_pb2.ShapeProto,
                       out: hlo_pb2.ShapeProto) -> int:
    """A convolution's FLOPs from its input, filter and output shapes and the instruction's dimension numbers,
    window and group counts."""
    dn = hlo.convolution_dimension_numbers
    in_features = lhs.dimensions[dn.input_feature_dimension]
    out_features = out.dimensions[dn.output_feature_dimension]
    batch = lhs.dimensions[dn.input_batch_dimension]
    positions = 1
    for i, w in enumerate(hlo.window.dimensions):
        positions *= _valid_positions(
            input_size=lhs.dimensions[dn.input_spatial_dimensions[i]],
            kernel_size=rhs.dimensions[dn.kernel_spatial_dimensions[i]],
            output_size=out.dimensions[dn.output_spatial_dimensions[i]],
            window=w,
        )
    groups = hlo.feature_group_count or 1
    batch_groups = hlo.batch_group_count or 1
    return _FMA_FLOPS * (in_features // groups) * out_features * (batch // batch_groups) * positions


def _valid_positions(*, input_size: int, kernel_size: int, output_size: int, window: hlo_pb2.WindowDimension) -> int:
    """Kernel x output positions of one spatial dimension that land on a real (unpadded, undilated) input."""
    stride = window.stride or 1
    base = window.base_dilation or 1
    dilation = window.window_dilation or 1
    count = 0
    for k in range(kernel_size):
        for o in range(output_size):
            index = o * stride - window.padding_low + k * dilation
            if index % base:
                continue
            index //= base
            if 0 <= index < input_size:
                count += 1
    return count


def instruction_costs(module: hlo_pb2.HloModuleProto) -> dict[tuple[int, int], Cost]:
    """Cost of one execution of every instruction, keyed by (computation id, instruction id).

    An instruction's cost includes the computations it calls (a fusion's body,
    a reduce's reducer, a while loop's body once). Instructions inside a fused
    computation get what they would cost on their own.
    """
    analysis = _Analysis(module)
    for computation in module.computations:
        for instruction in computation.instructions:
            analysis.cost(computation.id, instruction)
    return analysis.costs


def module_cost(module: hlo_pb2.HloModuleProto, entry_computation_id: int) -> Cost:
    """Total cost of one execution of a module: the sum over its entry computation."""
    return _Analysis(module).total(entry_computation_id)
