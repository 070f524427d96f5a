"""FLOPs and bytes of one PyTorch op call, from the argument shapes a Kineto trace records.

With ``record_shapes=True`` PyTorch's profiler gives each ``cpu_op`` event three parallel lists:
``Input Dims`` (a tensor's shape; ``[]`` for a scalar, a ``None`` argument or a 0-d tensor; a list of
shapes for a TensorList), ``Input type`` (a tensor's C++ dtype name such as ``float``,
``c10::BFloat16``, ``long int``; else ``Scalar``, ``ScalarList``, ``TensorList``, ``""`` for ``None``)
and ``Concrete Inputs`` (a non-tensor argument as text: ``'[1, 1]'``, ``'True'``, ``'0.125'``; ``''``
for tensors). :func:`op_cost` turns one such signature into an :class:`OpCost`; :func:`op_costs` does
it for columns of the JSON text, parsing each distinct signature once.

The model is a roofline one: FLOPs count multiply and add as two, and bytes assume every operand is
read once and every output written once. An op without a rule, or whose arguments do not fit its
rule (wrong arity, a malformed shape, an unknown dtype, a flag the trace lacks, inconsistent shapes),
gets ``None``: the model never guesses. It prices each op on its own: a composite op (``aten::linear``,
``aten::conv2d``: ``OpCost.composite``) and the op it calls (``aten::addmm``, ``aten::convolution``)
both get a cost, and the caller, which sees the op tree, keeps the callee's so that nothing is counted
twice (``sql/torch/_op_tree.sql``). ``aten::scaled_dot_product_attention`` and
``aten::_flash_attention_forward`` (parent and child of the modelled attention ops) have no rule.

Rules (n: element count of a tensor; bpe: its dtype's bytes per element; b: bytes):

- gemm (``mm``, ``addmm``, ``bmm``, ``baddbmm``, ``linear``, ``matmul``): A (M, K) times B (K, N),
  ``batch`` times: FLOPs = batch·2MNK (+ batch·MN for the bias of addmm, baddbmm and linear);
  b = b(A) + b(B) + batch·MN·bpe(A) (+ b(bias)). ``addmm``/``baddbmm`` take (bias, A, B);
  ``linear`` (x[..., K], W[N, K], bias?) has M = prod(x[:-1]); ``matmul`` takes 1-D, 2-D and batched
  operands and broadcasts their batch dimensions.
- scaled_gemm (``_scaled_mm``, fp8): as gemm, the output's bpe that of ``out_dtype`` (by default the
  input's); the scale tensors are not counted.
- conv (``convolution``, ``conv1d/2d/3d``, ``conv_transpose1d/2d/3d``): output spatial size
  floor((in + 2·pad - dil·(k - 1) - 1) / stride) + 1, transposed (in - 1)·stride - 2·pad +
  dil·(k - 1) + output_pad + 1; FLOPs = 2·prod(W[1:])·prod(out) (prod(x) for transposed)
  + prod(out) with a bias; b = b(x) + b(W) + prod(out)·bpe(x) + b(bias).
- conv_backward (``convolution_backward``): input gradient plus weight gradient, each the forward
  convolution's FLOPs (so 2x forward), + prod(out) with a bias gradient (``output_mask[2]``);
  b = 2·(b(grad_out) + b(x) + b(W)) + the bias gradient's b(grad_out) + C_out·bpe.
- attention (the SDPA flash/efficient/cudnn/for_cpu ops, ``flash_attn::_flash_attn_forward``), with
  Q (B, H_q, N_q, d_qk), K (B, H_kv, N_kv, d_qk), V (B, H_kv, N_kv, d_v) (flash_attn's are (B, N, H, d)):
  FLOPs = 2·B·H_q·N_q·N_kv·(d_qk + d_v), halved when causal (which needs N_q = N_kv); softmax is not
  counted; b = (n(Q) + n(K) + n(V) + n(O))·bpe(Q), O being (B, H_q, N_q, d_v).
- attention_backward (their ``_backward`` ops): QKᵀ recomputed, then dV, dP, dQ, dK:
  FLOPs = 2·B·H_q·N_q·N_kv·(3·d_qk + 2·d_v) + B·H_kv·N_kv·(d_qk + d_v)·(H_q/H_kv - 1) (summing the
  query heads' dK and dV of each K/V head), halved when causal;
  b = (n(Q) + n(K) + n(V) + n(dO) + n(dQ) + n(dK) + n(dV))·bpe(Q).
- unary (TraceLens's ``copy``, ``clamp_min``, ``clamp_max``, ``sigmoid``, ``rsqrt``, ``silu``, ``neg``,
  ``pow``; and ``relu``, ``gelu``, ``tanh``, ``exp``, ``exp2``, ``expm1``, ``log``, ``log2``, ``log1p``,
  ``sqrt``, ``abs``, ``sin``, ``cos``, ``reciprocal``, ``erf``, ``floor``, ``ceil``, ``round``,
  ``trunc``, ``sign``, ``hardtanh``, ``leaky_relu``, ``elu``, ``softplus``, ``mish``, ``hardswish``,
  ``hardsigmoid``, ``logical_not``, ``bitwise_not``; each also in its in-place ``_`` form):
  FLOPs = n; b = n·(bpe_in + bpe_out), the output's dtype from a second tensor input when one has a
  shape (``copy_``'s source, an ``out=``), else the input's.
- binary (``add``, ``sub``, ``mul``, ``div`` and their in-place forms, ``rsub``, ``maximum``,
  ``minimum``, ``eq``, ``ne``, ``lt``, ``le``, ``gt``, ``ge``, ``sigmoid_backward``, ``tanh_backward``,
  ``threshold_backward``, ``silu_backward``, ``gelu_backward``): n_out is the broadcast shape's count;
  FLOPs = n_out;
  b = b(self) + b(other) + n_out·bpe_out, where an ``other`` without dims (a Python scalar or a 0-d
  tensor: the trace cannot tell them apart) adds no bytes, and bpe_out follows PyTorch's type
  promotion (in-place: self's dtype; comparisons: bool; integer true division: float; an ``out=``
  tensor: its dtype).
- reduction (``sum``, ``mean``, ``max``, ``min``, ``amax``, ``amin``, norms, ``std``, ``var``,
  ``logsumexp``, ``cumsum``, ``cumprod``): FLOPs = n_in; b = (n_in + n_out)·bpe_in, n_out from the
  recorded dims (all of them when none are given; n_in for the cumulative ops).
- norm (layer, RMS, batch and group norm), with n elements and C the normalised size (layer/RMS) or
  the channel count (batch/group): FLOPs = 6C + 2n (+ 3n when training: batch statistics; layer
  and group norm always are); b = 2n·bpe + V·C·bpe with V = 2 (mean, variance) + 1 with a weight + 1
  with a weight and bias + 2 when training. RMS norm: FLOPs = (n/C)·(2C + 2) + n (+ n with a weight);
  b = 2n·bpe (+ C·bpe with a weight).
- norm_backward: FLOPs = 4n (+ 3C when not training) + (5n if training else 2n) when the input
  gradient is computed; b = n·bpe(grad) + n·bpe (2n·bpe when the input gradient is computed in
  training) + C·bpe when training, and with a weight + C·bpe, + C·bpe more when training (2C·bpe
  with a bias). Group norm's C is channels / groups. RMS norm: FLOPs = n (+ n with a weight) + 6n for the input gradient
  + n (+ n if n/C > 1) for the weight gradient; b = 3n·bpe (+ 2C·bpe with a weight).
- softmax (``softmax``, ``_softmax``, ``log_softmax``, ``_log_softmax``): FLOPs = 5n (max, subtract,
  exp, sum, divide or log); b = n·(bpe_in + bpe_out). Their ``_backward_data`` ops: FLOPs = 4n
  (y·(g - Σg·y), or g - exp(y)·Σg); b = n·(bpe(g) + bpe(y) + bpe_out).
- embedding: FLOPs = 0 (a gather); b = b(indices) + 2·n(indices)·D·bpe(W) (rows read, output
  written).
- fill (``fill_``, and ``zero_``, a composite over it; ours): FLOPs = 0; b = b(self) (written).

Precision is the dtype class whose peak applies: fp8 when any math operand is fp8, else the first
floating tensor operand's (bf16, fp16, fp32, fp64), else int8 for 1-byte integers and int for the
wider ones and bool. Bytes per element: double and 64-bit integers 8; float and 32-bit integers 4;
half, bfloat16 and 16-bit integers 2; fp8, (un)signed char and bool 1.

Sources: AMD TraceLens's perf model (``TraceLens/PerfModel/perf_model.py``, op names from
``torch_op_mapping.py``; MIT), whose GEMM, convolution, attention, elementwise, reduction and
normalisation formulas these are; PyTorch's ``torch/utils/flop_counter.py`` (the same GEMM,
convolution and attention FLOPs, bias and causality aside); argument positions from PyTorch's
``native_functions.yaml`` and flash-attention's ``flash_attn_interface.py``, checked against traces.
PyTorch's counter counts a grouped convolution's weight gradient ``groups`` times; here it is the
forward's count, as in TraceLens.

Deliberate differences from TraceLens:

- Ops it does not model: ``aten::linear`` and ``aten::matmul``; ``aten::conv1d``-style and
  ``aten::conv_transpose2d``-style ops (their own argument orders); the CPU
  ``_scaled_dot_product_flash_attention_for_cpu``; the aten SDPA ``_backward`` ops (category only
  there); ``aten::rms_norm``; ``linalg_vector_norm``; the softmax family, ``embedding`` and ``fill_``
  (rules of ours); unary and binary ops beyond its lists (copy, clamp_min/max, sigmoid, rsqrt, silu, neg, pow;
  add, sub, mul, div, sigmoid_backward, threshold_backward).
- A bias is found from the recorded arguments. TraceLens tests ``len(Input Dims) == 3`` for
  ``aten::convolution`` and ``aten::_scaled_mm``, never true for their 9 and 8 recorded inputs, and
  the ``Input Dims`` of ``convolution_backward``'s ``bias_sizes``, always ``[]``: it never counts a
  convolution bias. Here the bias input's presence counts, and ``output_mask[2]`` for the bias
  gradient, whose bytes are multiplied by bpe (TraceLens adds its element count to the bytes).
  ``output_mask`` is otherwise not read: as in TraceLens both input and weight gradients count.
- A transposed grouped convolution has W[1]·groups output channels (TraceLens: W[1]).
- ``convolution_backward``'s ``grad_output`` must have the computed output shape.
- Bias bytes are the bias tensor's own (TraceLens assumes N elements; the same for a 1-D bias) and
  every GEMM/conv operand's bytes use its own dtype (TraceLens: the first operand's for all).
- ``_scaled_mm``'s output size is that of its recorded ``out_dtype``, whose default is the input's
  (TraceLens assumes 2 bytes for fp8 inputs).
- Attention bytes use Q's dtype (TraceLens fixes 2 bytes for the forward ops: the same for bf16 and
  fp16). Every attention backward counts the QKᵀ recomputation, as PyTorch's counter does, and its
  GQA term counts every K/V head (TraceLens's B·N_kv·d·(H_q/H_kv - 1) leaves out the H_kv factor).
- ``flash_attn::_flash_attn_backward``'s ``causal`` is read at position 11, after ``dropout_p`` and
  ``softmax_scale`` (flash-attention's signature); TraceLens reads 10, the scale, so it takes nearly
  every call as causal. Causal halving is an integer one (TraceLens divides floats).
- Elementwise scalars: a non-self operand without dims adds no bytes (TraceLens adds one element of
  its type's bpe: 8 for double, 4 for Scalar, and for int or bool no bytes at all); the output dtype
  follows type promotion (TraceLens: the wider tensor, else the first input's).
- Types TraceLens's table lacks (int, bool, 16-bit and unsigned integers, float8_e5m2fnuz) are
  known; unsigned char is int8 (TraceLens: fp8) and every float8 is fp8.
- Reductions read ``dim`` from the Concrete Inputs text; TraceLens expects Python values there, so
  on real traces its output is always one element. ``max``/``min`` with a tensor second input are
  elementwise and get no rule.
- Norms: a weight or bias is present when its input is a tensor (TraceLens tests ``Input Dims[i] is
  not None``, always true, so every forward norm is affine with a bias); ``training`` is parsed from its text
  (TraceLens's ``bool(text)`` is always true); the weight's position is the op's own
  (``native_group_norm``: 1, its backward: 4; TraceLens reads 2 and 5). The input-gradient term of
  the backward is 5n in training and 2n otherwise when it is computed, and nothing when it is not
  (TraceLens adds the 2n when it is not computed, nothing in eval mode).
- ``copy``/``copy_`` keep TraceLens's n FLOPs though they only move data.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from math import prod
from typing import Literal, NamedTuple

__all__ = ["RULES", "OpCost", "Precision", "attention_cost", "op_cost", "op_costs", "tensor_bytes", "tensor_bytes_of_json"]

Precision = Literal["fp8", "bf16", "fp16", "fp32", "fp64", "int8", "int"]


@dataclass(frozen=True)
class OpCost:
    """The cost of one call of an op."""

    flops: int  # 0 for pure data movement (embedding)
    bytes_accessed: int  # read and written
    rule: str  # the rule that priced it (see RULES)
    precision: Precision | None  # the dtype class of the math operands
    # A composite (aten::linear, aten::conv2d) calls the op that does the work (aten::addmm, aten::convolution):
    # its cost is the callee's, to count only where the trace shows no callee.
    composite: bool = False


# PyTorch's promotion categories, lowest first.
_BOOL, _INT, _FLOAT = 0, 1, 2


@dataclass(frozen=True)
class _DType:
    name: str  # tells apart types of one size and category (int8 and uint8)
    bpe: int
    category: int
    precision: Precision


def _dtype_table(*rows: tuple[str, int, int, Precision]) -> dict[str, _DType]:
    return {name: _DType(name, bpe, category, precision) for name, bpe, category, precision in rows}


# Keyed by the lower-cased names Kineto writes: GCC's spelling of the C++ types, and the shorter one of older
# PyTorch releases and of Clang builds (long, short, unsigned long, long long...).
_DTYPES = _dtype_table(
    ("double", 8, _FLOAT, "fp64"),
    ("float", 4, _FLOAT, "fp32"),
    ("c10::half", 2, _FLOAT, "fp16"),
    ("c10::bfloat16", 2, _FLOAT, "bf16"),
    ("c10::float8_e4m3fn", 1, _FLOAT, "fp8"),
    ("c10::float8_e4m3fnuz", 1, _FLOAT, "fp8"),
    ("c10::float8_e5m2", 1, _FLOAT, "fp8"),
    ("c10::float8_e5m2fnuz", 1, _FLOAT, "fp8"),
    ("long int", 8, _INT, "int"),
    ("long", 8, _INT, "int"),
    ("long long", 8, _INT, "int"),
    ("long unsigned int", 8, _INT, "int"),
    ("unsigned long", 8, _INT, "int"),
    ("unsigned long long", 8, _INT, "int"),
    ("int", 4, _INT, "int"),
    ("unsigned int", 4, _INT, "int"),
    ("short int", 2, _INT, "int"),
    ("short", 2, _INT, "int"),
    ("short unsigned int", 2, _INT, "int"),
    ("unsigned short", 2, _INT, "int"),
    ("signed char", 1, _INT, "int8"),
    ("unsigned char", 1, _INT, "int8"),
    ("bool", 1, _BOOL, "int"),
)

# c10::ScalarType numbers, as a ``dtype`` argument is recorded.
_SCALAR_TYPES = {
    number: _DTYPES[name] for number, name in (
        (0, "unsigned char"), (1, "signed char"), (2, "short int"), (3, "int"), (4, "long int"),
        (5, "c10::half"), (6, "float"), (7, "double"), (11, "bool"), (15, "c10::bfloat16"),
        (23, "c10::float8_e5m2"), (24, "c10::float8_e4m3fn"), (25, "c10::float8_e5m2fnuz"),
        (26, "c10::float8_e4m3fnuz"), (27, "short unsigned int"), (28, "unsigned int"),
        (29, "long unsigned int"))
}
# What a Python float or int promotes an integer or bool tensor to (PyTorch's defaults).
_DEFAULT_OF_CATEGORY = {_FLOAT: _DTYPES["float"], _INT: _DTYPES["long int"]}


class _Unfit(Exception):
    """The recorded arguments do not fit the op's rule."""


def _need(ok: bool) -> None:
    if not ok:
        raise _Unfit


class _Tensor(NamedTuple):
    shape: tuple[int, ...]
    dtype: _DType

    @property
    def numel(self) -> int:
        return prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.numel * self.dtype.bpe


class _Args:
    """One call's recorded inputs; an accessor raises _Unfit for what is absent or malformed."""

    __slots__ = ("_concrete", "_dims", "_types")

    def __init__(self, dims: Sequence[object], types: Sequence[object], concrete: Sequence[object] | None) -> None:
        _need(len(dims) == len(types) and (concrete is None or len(concrete) == len(dims)))
        self._dims, self._types, self._concrete = dims, types, concrete

    def __len__(self) -> int:
        return len(self._dims)

    def _type(self, i: int) -> object:
        _need(i < len(self._types))
        return self._types[i]

    def _dtype(self, i: int) -> _DType | None:
        kind = self._type(i)
        return _DTYPES.get(kind.lower()) if isinstance(kind, str) else None

    def is_tensor(self, i: int) -> bool:
        return self._dtype(i) is not None

    def is_scalar(self, i: int) -> bool:
        return self._type(i) == "Scalar"

    def tensor(self, i: int) -> _Tensor:
        dtype, shape = self._dtype(i), self._dims[i]
        if dtype is None or not isinstance(shape, (list, tuple)) or not all(type(d) is int and d >= 0 for d in shape):
            raise _Unfit
        return _Tensor(tuple(shape), dtype)

    def is_none(self, i: int) -> bool:
        """An optional input not passed (recorded with type '')."""
        return i >= len(self) or self._type(i) == ""

    def optional(self, i: int) -> _Tensor | None:
        return None if self.is_none(i) else self.tensor(i)

    def text(self, i: int) -> str:
        value = self._concrete[i] if self._concrete is not None and i < len(self._concrete) else None
        if not isinstance(value, str):
            raise _Unfit
        return value.strip()

    def flag(self, i: int) -> bool:
        value = self.text(i)
        _need(value in ("True", "False"))
        return value == "True"

    def flags(self, i: int, count: int) -> tuple[bool, ...]:
        value = self.text(i)
        _need(value.startswith("[") and value.endswith("]"))
        words = tuple(word.strip() for word in value[1:-1].split(","))
        _need(len(words) == count and all(word in ("True", "False") for word in words))
        return tuple(word == "True" for word in words)

    def integer(self, i: int) -> int:
        return _parse_int(self.text(i))

    def ints(self, i: int, default: tuple[int, ...]) -> tuple[int, ...]:
        """An int list ('[1, 1]', or one int '2'); ``default`` when not passed ('')."""
        value = self.text(i)
        if value == "":
            return default
        if value.startswith("[") and value.endswith("]"):
            inner = value[1:-1].strip()
            return tuple(_parse_int(word) for word in inner.split(",")) if inner else ()
        return (_parse_int(value),)

    def scalar_type(self, i: int) -> _DType | None:
        """A ``ScalarType?`` input: None when not passed."""
        if self.is_none(i):
            return None
        dtype = _SCALAR_TYPES.get(self.integer(i))
        _need(dtype is not None)
        return dtype

    def scalar_category(self, i: int) -> int:
        """The promotion category of a Scalar input, from its text."""
        value = self.text(i)
        if value in ("True", "False"):
            return _BOOL
        for parse, category in ((int, _INT), (float, _FLOAT)):
            try:
                parse(value)
            except ValueError:
                continue
            return category
        raise _Unfit


def _parse_int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise _Unfit from None


def _broadcast(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    rank = max(len(s) for s in shapes)
    out = []
    for sizes in zip(*((1,) * (rank - len(s)) + s for s in shapes)):
        wide = {d for d in sizes if d != 1}
        _need(len(wide) <= 1)
        out.append(wide.pop() if wide else 1)
    return tuple(out)


def _precision(*dtypes: _DType) -> Precision:
    if any(d.precision == "fp8" for d in dtypes):
        return "fp8"
    floating = [d for d in dtypes if d.category == _FLOAT]
    return (floating or list(dtypes))[0].precision


_Cost = tuple[int, int, Precision]
_Rule = Callable[[_Args], _Cost]


# GEMM


def _gemm(batch: int, m: int, n: int, k: int, a: _Tensor, b: _Tensor, bias: _Tensor | None,
          out: tuple[int, ...]) -> _Cost:
    """``out``: the output's shape, which the bias must broadcast to."""
    if bias is not None:
        _need(_broadcast(bias.shape, out) == out)
    flops = batch * (2 * m * n * k + (m * n if bias is not None else 0))
    written = batch * m * n * a.dtype.bpe
    return flops, a.nbytes + b.nbytes + written + (bias.nbytes if bias is not None else 0), _precision(a.dtype, b.dtype)


def _matrices(a: _Args, first: int, rank: int) -> tuple[_Tensor, _Tensor]:
    x, y = a.tensor(first), a.tensor(first + 1)
    _need(len(x.shape) == rank == len(y.shape) and x.shape[-1] == y.shape[-2] and x.shape[:-2] == y.shape[:-2])
    return x, y


def _mm(a: _Args, *, with_bias: bool) -> _Cost:
    x, y = _matrices(a, 1 if with_bias else 0, 2)
    m, n = x.shape[0], y.shape[1]
    return _gemm(1, m, n, x.shape[1], x, y, a.tensor(0) if with_bias else None, (m, n))


def _bmm(a: _Args, *, with_bias: bool) -> _Cost:
    x, y = _matrices(a, 1 if with_bias else 0, 3)
    batch, m, n = x.shape[0], x.shape[1], y.shape[2]
    return _gemm(batch, m, n, x.shape[2], x, y, a.tensor(0) if with_bias else None, (batch, m, n))


def _scaled_mm(a: _Args) -> _Cost:
    x, y = _matrices(a, 0, 2)
    # Before PyTorch 2.4 the same 8 inputs were (self, mat2, bias, out_dtype, scale_a, ...): required scales tell.
    _need(a.is_tensor(2) and a.is_tensor(3))
    m, n = x.shape[0], y.shape[1]
    bias = a.optional(4)
    out = a.scalar_type(6) or x.dtype  # out_dtype defaults to the input's
    flops, _, precision = _gemm(1, m, n, x.shape[1], x, y, bias, (m, n))
    return flops, x.nbytes + y.nbytes + m * n * out.bpe + (bias.nbytes if bias is not None else 0), precision


def _linear(a: _Args) -> _Cost:
    x, w = a.tensor(0), a.tensor(1)
    _need(len(x.shape) >= 1 and len(w.shape) == 2 and x.shape[-1] == w.shape[1])
    return _gemm(1, prod(x.shape[:-1]), w.shape[0], w.shape[1], x, w, a.optional(2), (*x.shape[:-1], w.shape[0]))


def _matmul(a: _Args) -> _Cost:
    x, y = a.tensor(0), a.tensor(1)
    _need(len(x.shape) >= 1 and len(y.shape) >= 1)
    # A 1-D operand is a row (left) or a column (right) that the result drops.
    m, k = (1, x.shape[0]) if len(x.shape) == 1 else x.shape[-2:]
    k2, n = (y.shape[0], 1) if len(y.shape) == 1 else y.shape[-2:]
    _need(k == k2)
    batch = prod(_broadcast(x.shape[:-2], y.shape[:-2]))
    return 2 * batch * m * n * k, x.nbytes + y.nbytes + batch * m * n * x.dtype.bpe, _precision(x.dtype, y.dtype)


# Convolution


def _spread(values: tuple[int, ...], rank: int, least: int) -> tuple[int, ...]:
    """A per-dimension parameter: one value stands for every spatial dimension."""
    _need(len(values) in (1, rank) and all(v >= least for v in values))
    return values * rank if len(values) == 1 else values


def _conv_output(x: _Tensor, w: _Tensor, stride: tuple[int, ...], padding: tuple[int, ...],
                 dilation: tuple[int, ...], transposed: bool, output_padding: tuple[int, ...],
                 groups: int) -> tuple[int, ...]:
    rank = len(x.shape) - 2
    _need(1 <= rank <= 3 and len(w.shape) == len(x.shape) and groups >= 1)
    stride, dilation = _spread(stride, rank, 1), _spread(dilation, rank, 1)
    padding, output_padding = _spread(padding, rank, 0), _spread(output_padding, rank, 0)
    sizes = zip(x.shape[2:], w.shape[2:], stride, padding, dilation, output_padding)
    if transposed:
        # The weight is (C_in, C_out / groups, k...).
        _need(w.shape[0] == x.shape[1] and x.shape[1] % groups == 0)
        channels = w.shape[1] * groups
        spatial = tuple((i - 1) * s - 2 * p + d * (k - 1) + o + 1 for i, k, s, p, d, o in sizes)
    else:
        _need(x.shape[1] == w.shape[1] * groups and w.shape[0] % groups == 0)
        channels = w.shape[0]
        spatial = tuple((i + 2 * p - d * (k - 1) - 1) // s + 1 for i, k, s, p, d, _ in sizes)
    _need(all(size >= 1 for size in spatial))
    return (x.shape[0], channels, *spatial)


def _conv_flops(x: _Tensor, w: _Tensor, out: tuple[int, ...], transposed: bool) -> int:
    """The multiply-adds: a weight slice (C_in/groups·k...) per output point, per input point when transposed."""
    return 2 * prod(w.shape[1:]) * (x.numel if transposed else prod(out))


def _conv(a: _Args, *, layout: Literal["convolution", "convNd", "conv_transposeNd"], rank: int | None = None) -> _Cost:
    x, w, bias = a.tensor(0), a.tensor(1), a.optional(2)
    stride, padding = a.ints(3, (1,)), a.ints(4, (0,))
    if layout == "convolution":
        dilation, transposed, output_padding, groups = a.ints(5, (1,)), a.flag(6), a.ints(7, (0,)), a.integer(8)
    elif layout == "convNd":
        dilation, transposed, output_padding, groups = a.ints(5, (1,)), False, (0,), a.integer(6)
    else:
        output_padding, groups, dilation, transposed = a.ints(5, (0,)), a.integer(6), a.ints(7, (1,)), True
    # conv2d and the like also take an unbatched input, which only their aten::convolution child sees batched.
    _need(rank is None or len(x.shape) == rank + 2)
    out = _conv_output(x, w, stride, padding, dilation, transposed, output_padding, groups)
    flops = _conv_flops(x, w, out, transposed)
    nbytes = x.nbytes + w.nbytes + prod(out) * x.dtype.bpe
    if bias is not None:
        _need(bias.shape == (out[1],))
        flops, nbytes = flops + prod(out), nbytes + bias.nbytes
    return flops, nbytes, _precision(x.dtype, w.dtype)


def _conv_backward(a: _Args) -> _Cost:
    grad, x, w = a.tensor(0), a.tensor(1), a.tensor(2)
    transposed = a.flag(7)
    out = _conv_output(x, w, a.ints(4, (1,)), a.ints(5, (0,)), a.ints(6, (1,)), transposed, a.ints(8, (0,)),
                       a.integer(9))
    _need(grad.shape == out)
    bias_grad = a.flags(10, 3)[2]
    # The input gradient is a (transposed) convolution of grad with W, the weight gradient one of x with grad:
    # each has the forward's multiply-adds.
    flops = 2 * _conv_flops(x, w, out, transposed) + (grad.numel if bias_grad else 0)
    nbytes = 2 * (grad.nbytes + x.nbytes + w.nbytes) + (grad.nbytes + out[1] * grad.dtype.bpe if bias_grad else 0)
    return flops, nbytes, _precision(x.dtype, w.dtype)


# Attention


def attention_cost(*, batch: int, heads_q: int, heads_kv: int, seq_q: int, seq_kv: int, head_dim_qk: int,
                   head_dim_v: int, causal: bool, backward: bool, bytes_per_element: int) -> tuple[int, int] | None:
    """FLOPs and bytes of one attention call (the ``attention`` and ``attention_backward`` rules above), from
    its sizes: Q (batch, heads_q, seq_q, head_dim_qk), K (batch, heads_kv, seq_kv, head_dim_qk), V (batch,
    heads_kv, seq_kv, head_dim_v); bytes at ``bytes_per_element`` (Q's dtype). None when the sizes do not fit
    the formula: no K/V head, heads_q not a multiple of heads_kv, or a causal mask that is not square.
    Fused-attention library calls (cuDNN, Transformer Engine, CK: :mod:`xprosql.ingest.hlo_cost`) use it too.

    Example:
        >>> attention_cost(batch=1, heads_q=2, heads_kv=2, seq_q=4, seq_kv=4, head_dim_qk=8, head_dim_v=8,
        ...                causal=False, backward=False, bytes_per_element=2)
        (1024, 512)
    """
    b, hq, hkv, nq, nkv, dqk, dv = batch, heads_q, heads_kv, seq_q, seq_kv, head_dim_qk, head_dim_v
    if hkv < 1 or hq % hkv:
        return None
    # Which half of a non-square causal mask is kept depends on the library: not modelled.
    if causal and nq != nkv:
        return None
    pairs = b * hq * nq * nkv  # query-key pairs
    q, k, v, out = b * hq * nq * dqk, b * hkv * nkv * dqk, b * hkv * nkv * dv, b * hq * nq * dv
    if backward:
        # With grouped queries each dK and dV element sums H_q/H_kv heads' contributions.
        flops = 2 * pairs * (3 * dqk + 2 * dv) + b * hkv * nkv * (dqk + dv) * (hq // hkv - 1)
        elements = 2 * (q + k + v) + out
    else:
        flops = 2 * pairs * (dqk + dv)
        elements = q + k + v + out
    return flops // 2 if causal else flops, elements * bytes_per_element


def _attention(a: _Args, *, query: int, bnhd: bool, causal_at: int, backward: bool) -> _Cost:
    q, k, v = a.tensor(query), a.tensor(query + 1), a.tensor(query + 2)
    _need(len(q.shape) == len(k.shape) == len(v.shape) == 4)
    order = (0, 2, 1, 3) if bnhd else (0, 1, 2, 3)
    (b, hq, nq, dqk), (bk, hkv, nkv, dk), (bv, hv, nv, dv) = (tuple(t.shape[i] for i in order) for t in (q, k, v))
    _need(b == bk == bv and hkv == hv and nkv == nv and dqk == dk)
    cost = attention_cost(batch=b, heads_q=hq, heads_kv=hkv, seq_q=nq, seq_kv=nkv, head_dim_qk=dqk, head_dim_v=dv,
                          causal=a.flag(causal_at), backward=backward, bytes_per_element=q.dtype.bpe)
    if cost is None:
        raise _Unfit
    flops, nbytes = cost
    return flops, nbytes, _precision(q.dtype, k.dtype, v.dtype)


# Elementwise and reductions


def _unary(a: _Args) -> _Cost:
    x = a.tensor(0)
    # A second tensor with a shape is copy_'s source or an out= tensor (TraceLens's convention).
    second = a.tensor(1) if len(a) > 1 and a.is_tensor(1) else None
    out_bpe = second.dtype.bpe if second is not None and second.shape else x.dtype.bpe
    return x.numel, x.numel * (x.dtype.bpe + out_bpe), _precision(x.dtype)


def _promoted_bpe(tensors: list[_DType], scalar_category: int) -> int:
    top = max(d.category for d in tensors)
    if scalar_category > top:
        return _DEFAULT_OF_CATEGORY[scalar_category].bpe
    kinds = {d for d in tensors if d.category == top}
    widest = max(d.bpe for d in kinds)
    # half with bfloat16 gives float, int8 with uint8 gives int16: twice the width.
    return widest * 2 if sum(d.bpe == widest for d in kinds) > 1 and widest < 8 else widest


def _binary(a: _Args, *, inplace: bool = False, predicate: bool = False, division: bool = False) -> _Cost:
    x = a.tensor(0)
    _need(len(a) >= 2)
    other = a.tensor(1) if a.is_tensor(1) else None
    _need(other is not None or a.is_scalar(1))
    read = other if other is not None and other.shape else None  # a 0-d other is read like a scalar: no bytes
    shape = _broadcast(x.shape, read.shape) if read is not None else x.shape
    last = a.tensor(len(a) - 1) if len(a) > 2 and a.is_tensor(len(a) - 1) else None
    if inplace:
        _need(shape == x.shape)
        out_bpe = x.dtype.bpe
    elif last is not None and last.shape:  # out=
        out_bpe = last.dtype.bpe
    elif predicate:
        out_bpe = _DTYPES["bool"].bpe
    else:
        tensors = [x.dtype] + ([read.dtype] if read is not None else [])
        scalar = _BOOL
        if read is None and max(d.category for d in tensors) < _FLOAT:
            # Only then can a scalar lift the result's category (a Scalar's is read from its text).
            scalar = other.dtype.category if other is not None else a.scalar_category(1)
        if division and max(scalar, *(d.category for d in tensors)) < _FLOAT:
            # True division of integers gives floats; a third input is a rounding mode the trace leaves blank.
            _need(len(a) == 2)
            scalar = _FLOAT
        out_bpe = _promoted_bpe(tensors, scalar)
    n = prod(shape)
    nbytes = x.nbytes + (read.nbytes if read is not None else 0) + n * out_bpe
    return n, nbytes, _precision(x.dtype, *([read.dtype] if read is not None else []))


def _reduction(a: _Args, *, dim_at: int | None) -> _Cost:
    x = a.tensor(0)
    _need(not (len(a) > 1 and a.is_tensor(1)))  # max(self, other) is elementwise
    rank = max(len(x.shape), 1)  # a 0-d tensor takes dim 0 or -1
    if dim_at is None:  # cumulative: one output per input
        n_out = x.numel
    elif len(a) > dim_at + 1 and len(x.shape) > 1:  # the overload with a dim (keepdim follows; the count is the same)
        dims = () if a.is_none(dim_at) else a.ints(dim_at, ())
        _need(all(-rank <= d < rank for d in dims))
        reduced = {d % rank for d in dims} if dims else set(range(len(x.shape)))
        n_out = prod(size for i, size in enumerate(x.shape) if i not in reduced)
    else:
        n_out = 1
    return x.numel, (x.numel + n_out) * x.dtype.bpe, _precision(x.dtype)


def _softmax(a: _Args, *, internal: bool) -> _Cost:
    x = a.tensor(0)
    if internal:  # _softmax(self, dim, half_to_float): the flag applies to 16-bit floats only
        out_bpe = _DTYPES["float"].bpe if x.dtype.bpe == 2 and x.dtype.category == _FLOAT and a.flag(2) else x.dtype.bpe
    else:  # softmax(self, dim, dtype)
        out = a.scalar_type(2)
        out_bpe = out.bpe if out is not None else x.dtype.bpe
    return 5 * x.numel, x.numel * (x.dtype.bpe + out_bpe), _precision(x.dtype)


def _softmax_backward(a: _Args) -> _Cost:
    grad, y = a.tensor(0), a.tensor(1)
    out = a.scalar_type(3)
    if out is None or grad.shape != y.shape:
        raise _Unfit
    return 4 * grad.numel, grad.nbytes + y.nbytes + grad.numel * out.bpe, _precision(grad.dtype)


def _fill(a: _Args) -> _Cost:
    x = a.tensor(0)
    return 0, x.nbytes, _precision(x.dtype)


def _embedding(a: _Args) -> _Cost:
    weight, indices = a.tensor(0), a.tensor(1)
    _need(len(weight.shape) == 2 and indices.dtype.category == _INT)
    rows = indices.numel * weight.shape[1] * weight.dtype.bpe
    return 0, indices.nbytes + 2 * rows, _precision(weight.dtype)


# Normalization


def _norm_cost(x: _Tensor, channels: int, affine: bool, bias: bool, training: bool) -> _Cost:
    n, bpe = x.numel, x.dtype.bpe
    flops = 6 * channels + (3 * n if training else 0) + 2 * n
    vectors = 2 + ((2 if bias else 1) if affine else 0) + (2 if training else 0)
    return flops, 2 * n * bpe + vectors * channels * bpe, _precision(x.dtype)


def _normalized(a: _Args, x: _Tensor, at: int) -> int:
    """The element count of the trailing normalized_shape recorded at ``at``."""
    shape = a.ints(at, ())
    _need(len(shape) >= 1 and x.shape[len(x.shape) - len(shape):] == shape)
    return prod(shape)


def _layer_norm(a: _Args) -> _Cost:
    x = a.tensor(0)
    return _norm_cost(x, _normalized(a, x, 1), a.optional(2) is not None, a.optional(3) is not None, True)


def _channels(x: _Tensor) -> int:
    _need(len(x.shape) >= 2)
    return x.shape[1]


def _batch_norm(a: _Args) -> _Cost:
    x = a.tensor(0)
    return _norm_cost(x, _channels(x), a.optional(1) is not None, a.optional(2) is not None, a.flag(5))


def _group_norm(a: _Args, *, weight: int, groups: int) -> _Cost:
    x = a.tensor(0)
    count = a.integer(groups)
    _need(count >= 1 and _channels(x) % count == 0)
    return _norm_cost(x, _channels(x), a.optional(weight) is not None, a.optional(weight + 1) is not None, True)


def _rms_norm(a: _Args) -> _Cost:
    x = a.tensor(0)
    size, affine = _normalized(a, x, 1), a.optional(2) is not None
    n = x.numel
    flops = ((n // size) * (2 * size + 2) + n * (2 if affine else 1)) if size else 0
    return flops, 2 * n * x.dtype.bpe + (size * x.dtype.bpe if affine else 0), _precision(x.dtype)


def _norm_backward_cost(grad: _Tensor, x: _Tensor, channels: int, affine: bool, bias: bool, training: bool,
                        grad_input: bool) -> _Cost:
    _need(grad.shape == x.shape and channels >= 1)
    n, bpe = x.numel, x.dtype.bpe
    per_channel = n // channels
    steps = (0 if training else 3) + 4 * per_channel + ((5 if training else 2) * per_channel if grad_input else 0)
    nbytes = n * grad.dtype.bpe + n * bpe * (2 if grad_input and training else 1) + (channels * bpe if training else 0)
    if affine:
        nbytes += channels * bpe + (channels * bpe * (2 if bias else 1) if training else 0)
    return channels * steps, nbytes, _precision(x.dtype)


def _layer_norm_backward(a: _Args) -> _Cost:
    grad, x = a.tensor(0), a.tensor(1)
    grad_input, affine, bias = a.flags(7, 3)
    return _norm_backward_cost(grad, x, _normalized(a, x, 2), affine, bias, True, grad_input)


def _batch_norm_backward(a: _Args) -> _Cost:
    # TraceLens takes the input gradient and the bias as always computed.
    grad, x = a.tensor(0), a.tensor(1)
    return _norm_backward_cost(grad, x, _channels(x), a.optional(2) is not None, True, a.flag(7), True)


def _group_norm_backward(a: _Args) -> _Cost:
    grad, x = a.tensor(0), a.tensor(1)
    groups = a.integer(8)
    _need(groups >= 1 and _channels(x) % groups == 0)
    grad_input = a.flags(9, 3)[0]
    return _norm_backward_cost(grad, x, _channels(x) // groups, a.optional(4) is not None, True, True, grad_input)


def _rms_norm_backward(a: _Args) -> _Cost:
    grad, x = a.tensor(0), a.tensor(1)
    size, affine = _normalized(a, x, 2), a.optional(4) is not None
    grad_input, grad_weight = a.flags(5, 2)
    _need(grad.shape == x.shape and size >= 1)
    n, bpe = x.numel, x.dtype.bpe
    flops = (n if affine else 0) + n + (6 * n if grad_input else 0)
    if grad_weight and affine:  # grad_out times x_hat, then summed over the rows when there are several
        flops += n + (n if n // size > 1 else 0)
    return flops, n * grad.dtype.bpe + 2 * n * bpe + (2 * size * bpe if affine else 0), _precision(x.dtype)


class _Entry(NamedTuple):
    rule: str
    price: _Rule
    # The input counts of the schema's overloads (with out= among them): another count is another layout.
    arities: frozenset[int] | None
    composite: bool = False


def _registry() -> dict[str, _Entry]:
    entries: dict[str, _Entry] = {}

    def add(names: Iterable[str], rule: str, price: _Rule, *arities: int, composite: bool = False) -> None:
        for name in names:
            entries[name] = _Entry(rule, price, frozenset(arities) or None, composite)

    add(["aten::mm"], "gemm", partial(_mm, with_bias=False), 2, 3)
    add(["aten::addmm"], "gemm", partial(_mm, with_bias=True), 5, 6)
    add(["aten::bmm"], "gemm", partial(_bmm, with_bias=False), 2, 3)
    add(["aten::baddbmm"], "gemm", partial(_bmm, with_bias=True), 5, 6)
    add(["aten::linear"], "gemm", _linear, 3, 4, composite=True)
    add(["aten::matmul"], "gemm", _matmul, 2, 3, composite=True)
    add(["aten::_scaled_mm"], "scaled_gemm", _scaled_mm, 8, 9)
    add(["aten::convolution"], "conv", partial(_conv, layout="convolution"), 9)
    for rank in (1, 2, 3):
        add([f"aten::conv{rank}d"], "conv", partial(_conv, layout="convNd", rank=rank), 7, composite=True)
        add([f"aten::conv_transpose{rank}d"], "conv", partial(_conv, layout="conv_transposeNd", rank=rank), 8,
            composite=True)
    add(["aten::convolution_backward"], "conv_backward", _conv_backward, 11)
    # (name, position of is_causal, input counts: the flash ops' schemas gained ``scale`` in PyTorch 2.1)
    for name, causal_at, *counts in (("aten::_scaled_dot_product_flash_attention", 4, 6, 7),
                                     ("aten::_scaled_dot_product_flash_attention_for_cpu", 4, 7),
                                     ("aten::_scaled_dot_product_efficient_attention", 6, 8),
                                     ("aten::_scaled_dot_product_cudnn_attention", 6, 9)):
        add([name], "attention", partial(_attention, query=0, bnhd=False, causal_at=causal_at, backward=False), *counts)
    for name, causal_at, *counts in (("aten::_scaled_dot_product_flash_attention_backward", 11, 14, 15),
                                     ("aten::_scaled_dot_product_flash_attention_for_cpu_backward", 7, 10),
                                     ("aten::_scaled_dot_product_efficient_attention_backward", 11, 13),
                                     ("aten::_scaled_dot_product_cudnn_attention_backward", 14, 16)):
        add([name], "attention_backward",
            partial(_attention, query=1, bnhd=False, causal_at=causal_at, backward=True), *counts)
    # flash-attention's own ops have grown arguments across releases, after these positions.
    add(["flash_attn::_flash_attn_forward"], "attention",
        partial(_attention, query=0, bnhd=True, causal_at=5, backward=False))
    add(["flash_attn::_flash_attn_backward"], "attention_backward",
        partial(_attention, query=1, bnhd=True, causal_at=11, backward=True))
    unary = ("copy", "clamp_min", "clamp_max", "sigmoid", "rsqrt", "silu", "neg", "pow", "relu", "gelu", "tanh",
             "exp", "exp2", "expm1", "log", "log2", "log1p", "sqrt", "abs", "sin", "cos", "reciprocal", "erf",
             "floor", "ceil", "round", "trunc", "sign", "hardtanh", "leaky_relu", "elu", "softplus", "mish",
             "hardswish", "hardsigmoid", "logical_not", "bitwise_not")
    add([f"aten::{name}{suffix}" for name in unary for suffix in ("", "_")], "unary", _unary)
    add([f"aten::{name}" for name in ("add", "sub", "mul", "rsub", "maximum", "minimum", "sigmoid_backward",
                                      "tanh_backward", "threshold_backward", "silu_backward", "gelu_backward")],
        "binary", _binary)
    add(["aten::div"], "binary", partial(_binary, division=True))
    add([f"aten::{name}_" for name in ("add", "sub", "mul", "div")], "binary", partial(_binary, inplace=True))
    add([f"aten::{name}" for name in ("eq", "ne", "lt", "le", "gt", "ge")], "binary",
        partial(_binary, predicate=True))
    # The position of dim (None: one output per input); the overload is told by the input count.
    for names, dim_at in ((("sum", "mean", "max", "min", "amax", "amin", "logsumexp", "std", "var"), 1),
                          (("norm", "linalg_norm", "linalg_vector_norm"), 2), (("cumsum", "cumprod"), None)):
        add([f"aten::{name}" for name in names], "reduction", partial(_reduction, dim_at=dim_at))
    add(["aten::softmax", "aten::log_softmax"], "softmax", partial(_softmax, internal=False), 3, 4)
    add(["aten::_softmax", "aten::_log_softmax"], "softmax", partial(_softmax, internal=True), 3, 4)
    add(["aten::_softmax_backward_data", "aten::_log_softmax_backward_data"], "softmax", _softmax_backward, 4, 5)
    add(["aten::embedding"], "embedding", _embedding, 5, 6)
    add(["aten::fill_"], "fill", _fill, 1, 2)
    add(["aten::zero_"], "fill", _fill, 1, composite=True)  # calls fill_
    add(["aten::layer_norm"], "norm", _layer_norm, 6)
    add(["aten::native_layer_norm"], "norm", _layer_norm, 5)
    add(["aten::rms_norm", "aten::_fused_rms_norm"], "norm", _rms_norm, 4)
    add(["aten::batch_norm"], "norm", _batch_norm, 9)
    add(["aten::native_batch_norm", "aten::cudnn_batch_norm", "aten::miopen_batch_norm"], "norm", _batch_norm, 8)
    add(["aten::group_norm"], "norm", partial(_group_norm, weight=2, groups=1), 6)
    add(["aten::native_group_norm"], "norm", partial(_group_norm, weight=1, groups=6), 8)
    add(["aten::native_layer_norm_backward"], "norm_backward", _layer_norm_backward, 8)
    add(["aten::native_batch_norm_backward"], "norm_backward", _batch_norm_backward, 10)
    add(["aten::native_group_norm_backward"], "norm_backward", _group_norm_backward, 10)
    add(["aten::_fused_rms_norm_backward"], "norm_backward", _rms_norm_backward, 6)
    return entries


_REGISTRY = _registry()
RULES: dict[str, str] = {name: entry.rule for name, entry in _REGISTRY.items()}


def op_cost(name: str, input_dims: Sequence[object] | None, input_types: Sequence[object] | None,
            concrete_inputs: Sequence[object] | None) -> OpCost | None:
    """The cost of one call of ``name`` with these recorded inputs (the args' ``Input Dims``, ``Input type``,
    ``Concrete Inputs``); None when the op has no rule or its args do not fit the rule: never a guess."""
    entry = _REGISTRY.get(name)
    if entry is None or not isinstance(input_dims, (list, tuple)) or not isinstance(input_types, (list, tuple)):
        return None
    if concrete_inputs is not None and not isinstance(concrete_inputs, (list, tuple)):
        return None
    if entry.arities is not None and len(input_dims) not in entry.arities:
        return None
    try:
        flops, nbytes, precision = entry.price(_Args(input_dims, input_types, concrete_inputs))
    except _Unfit:
        return None
    return OpCost(flops, nbytes, entry.rule, precision, entry.composite)


def tensor_bytes(input_dims: Sequence[object] | None, input_types: Sequence[object] | None) -> int | None:
    """Bytes of the tensor arguments of one call: each tensor's elements times its dtype's bytes, once.

    What a compiled kernel (a torch.compile / Inductor Triton kernel's launch, whose ``Input Dims`` are its
    pointer arguments) moves at the least when it declares nothing: an in-place argument is counted once, a
    tensor read twice once. None when no argument is a tensor of a known dtype or the lists do not match.

    Example:
        >>> tensor_bytes([[8, 4096], [4096], []], ["c10::BFloat16", "float", "Scalar"])
        81920
    """
    if not isinstance(input_dims, (list, tuple)) or not isinstance(input_types, (list, tuple)):
        return None
    if len(input_dims) != len(input_types):
        return None
    total, tensors = 0, 0
    for dims, kind in zip(input_dims, input_types):
        dtype = _DTYPES.get(kind.lower()) if isinstance(kind, str) else None
        if dtype is None or not isinstance(dims, (list, tuple)) or not all(type(d) is int and d >= 0 for d in dims):
            continue  # a scalar, None, or a TensorList (its shapes are lists)
        total, tensors = total + prod(dims) * dtype.bpe, tensors + 1
    return total if tensors else None


def tensor_bytes_of_json(input_dims_json: Iterable[str | None], input_types_json: Iterable[str | None]) -> list[int | None]:
    """:func:`tensor_bytes` over parallel columns of the args as JSON text (or None); malformed JSON gives None."""
    out: list[int | None] = []
    for dims, types in zip(input_dims_json, input_types_json, strict=True):
        try:
            out.append(tensor_bytes(_parsed(dims), _parsed(types)))
        except _Unfit:
            out.append(None)
    return out


def _parsed(text: str | None) -> list[object] | None:
    if text is None:
        return None
    try:
        value = json.loads(text)
    except (TypeError, ValueError):
        raise _Unfit from None
    if not isinstance(value, list):
        raise _Unfit
    return value


def _cost_of_json(name: str, dims: str | None, types: str | None, concrete: str | None) -> OpCost | None:
    if name not in _REGISTRY:
        return None
    try:
        parsed = _parsed(dims), _parsed(types), _parsed(concrete)
    except _Unfit:
        return None
    return op_cost(name, *parsed)


def op_costs(names: Iterable[str], input_dims_json: Iterable[str | None], input_types_json: Iterable[str | None],
             concrete_inputs_json: Iterable[str | None]) -> list[OpCost | None]:
    """op_cost over parallel columns of the args as JSON text (or None); each distinct signature is parsed
    once, and malformed JSON gives None."""
    seen: dict[tuple[str, str | None, str | None, str | None], OpCost | None] = {}
    costs = []
    for key in zip(names, input_dims_json, input_types_json, concrete_inputs_json, strict=True):
        if key not in seen:
            seen[key] = _cost_of_json(*key)
        costs.append(seen[key])
    return costs
