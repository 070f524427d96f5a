"""xprosql.models.torch_costs against PyTorch itself and against real traces.

The oracles: PyTorch's FlopCounterMode run on real CPU tensors (it counts no bias and no causal mask), and the
element counts and sizes of the tensors an op really read and wrote. The arguments priced are those PyTorch's
profiler records for the op (``record_shapes=True``, exported as a Chrome trace), so the tests also check the
argument layout the model expects. Then the GPU traces in tests/data/kineto, and arguments that fit no rule.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import tempfile
from collections import Counter
from collections.abc import Callable
from functools import partial
from math import prod
from pathlib import Path
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from xprosql.models import torch_costs
from xprosql.models.torch_costs import RULES, OpCost, op_cost, op_costs

try:
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils import flop_counter
except ImportError:  # the test extra
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch (test extra) is not installed")
KINETO = Path(__file__).resolve().parent / "data" / "kineto"
H100 = KINETO / "h100_qwen1.5_0.5b.json.gz"
MI300 = KINETO / "mi300_torch_compile_triton.json.gz"
# Modest example counts: every example profiles real ops.
FEW = settings(max_examples=15, deadline=None)
SOME = settings(max_examples=25, deadline=None)
PRECISION = {"float32": "fp32", "float64": "fp64", "bfloat16": "bf16", "float16": "fp16"}

Signature = tuple[Any, Any, Any]


def recorded(fn: Callable[[], object], name: str) -> list[Signature]:
    """(Input Dims, Input type, Concrete Inputs) of every call of the op ``name`` that PyTorch's profiler records
    while fn runs."""
    activities = [torch.profiler.ProfilerActivity.CPU]
    with torch.profiler.profile(activities=activities, record_shapes=True) as profile:
        fn()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "trace.json"
        profile.export_chrome_trace(str(path))
        events = json.loads(path.read_text())["traceEvents"]
    return [(e["args"]["Input Dims"], e["args"]["Input type"], e["args"].get("Concrete Inputs"))
            for e in events if e.get("cat") == "cpu_op" and e.get("name") == name]


def priced(fn: Callable[[], object], name: str) -> OpCost:
    """The one cost of the op ``name`` as fn runs it (an op that calls an overload of itself runs twice: the costs
    must agree)."""
    calls = recorded(fn, name)
    assert calls, f"{name} did not run"
    costs = {op_cost(name, *call) for call in calls}
    assert len(costs) == 1 and None not in costs, (name, calls, costs)
    return costs.pop()


def counted(fn: Callable[[], object]) -> int:
    with flop_counter.FlopCounterMode(display=False) as counter:
        fn()
    return int(counter.get_total_flops())


def nbytes(*tensors: Any) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def tensor(*shape: int, dtype: str = "float32") -> Any:
    return torch.randn(*shape).to(getattr(torch, dtype))


# GEMM


GemmCase = tuple[str, Callable[[], Any], list[Any], Any, Callable[[], Any]]


def _gemm_case(case: str, m: int, n: int, k: int, b: int, dtype: str) -> GemmCase:
    """(op, the call, the matrices it reads, its bias, a call FlopCounterMode counts the same matrix product of)."""
    def t(*shape: int) -> Any:
        return tensor(*shape, dtype=dtype)

    if case == "mm":
        x, y = t(m, k), t(k, n)
        return "aten::mm", lambda: torch.mm(x, y), [x, y], None, lambda: torch.mm(x, y)
    if case == "addmm":
        c, x, y = t(n), t(m, k), t(k, n)
        return "aten::addmm", lambda: torch.addmm(c, x, y), [x, y], c, lambda: torch.addmm(c, x, y)
    if case == "bmm":
        x, y = t(b, m, k), t(b, k, n)
        return "aten::bmm", lambda: torch.bmm(x, y), [x, y], None, lambda: torch.bmm(x, y)
    if case == "baddbmm":
        c, x, y = t(b, m, n), t(b, m, k), t(b, k, n)
        return "aten::baddbmm", lambda: torch.baddbmm(c, x, y), [x, y], c, lambda: torch.baddbmm(c, x, y)
    if case == "linear":
        x, w, c = t(b, m, k), t(n, k), t(n)
        return "aten::linear", lambda: F.linear(x, w, c), [x, w], c, lambda: F.linear(x, w, c)
    if case == "linear without bias":
        x, w = t(b, m, k), t(n, k)
        return "aten::linear", lambda: F.linear(x, w), [x, w], None, lambda: F.linear(x, w)
    if case == "matmul batched":
        x, y = t(b, m, k), t(b, k, n)
        return "aten::matmul", lambda: x @ y, [x, y], None, lambda: x @ y
    if case == "matmul broadcast":
        x, y = t(b, 1, m, k), t(2, k, n)
        return "aten::matmul", lambda: x @ y, [x, y], None, lambda: x @ y
    if case == "matmul vector left":  # PyTorch's counter skips mv and dot: count the 2-D product
        x, y = t(k), t(b, k, n)
        return "aten::matmul", lambda: x @ y, [x, y], None, lambda: x.unsqueeze(0) @ y
    assert case == "matmul vector right"
    x, y = t(b, m, k), t(k)
    return "aten::matmul", lambda: x @ y, [x, y], None, lambda: x @ y.unsqueeze(-1)


GEMM_CASES = ["mm", "addmm", "bmm", "baddbmm", "linear", "linear without bias", "matmul batched",
              "matmul broadcast", "matmul vector left", "matmul vector right"]


@needs_torch
@SOME
@given(case=st.sampled_from(GEMM_CASES), m=st.integers(1, 6), n=st.integers(1, 6), k=st.integers(1, 6),
       b=st.integers(1, 3), dtype=st.sampled_from(sorted(PRECISION)))
def test_gemm_matches_pytorch(case: str, m: int, n: int, k: int, b: int, dtype: str) -> None:
    op, call, matrices, bias, equivalent = _gemm_case(case, m, n, k, b, dtype)
    cost = priced(call, op)
    out = call()
    # The bias add is one FLOP per output element, which PyTorch's counter leaves out.
    assert cost.flops == counted(equivalent) + (out.numel() if bias is not None else 0)
    assert cost.bytes_accessed == nbytes(*matrices, out, *([bias] if bias is not None else []))
    assert (cost.rule, cost.precision) == ("gemm", PRECISION[dtype])


@needs_torch
@FEW
@given(m=st.integers(1, 6), n=st.integers(1, 6), k=st.integers(1, 6),
       out=st.sampled_from([None, "bfloat16", "float32"]), with_bias=st.booleans())
def test_scaled_mm_matches_pytorch(m: int, n: int, k: int, out: str | None, with_bias: bool) -> None:
    a = tensor(m, k).to(torch.float8_e4m3fn)
    b = tensor(n, k).to(torch.float8_e4m3fn).t()  # column-major, as _scaled_mm wants
    scale = torch.tensor(1.0)
    bias = tensor(n, dtype="bfloat16") if with_bias else None
    kwargs = {"out_dtype": getattr(torch, out or "bfloat16"), "bias": bias} if out or with_bias else {}

    def call() -> Any:
        return torch._scaled_mm(a, b, scale, scale, **kwargs)

    cost = priced(call, "aten::_scaled_mm")
    result = call()
    assert cost.flops == counted(call) + (result.numel() if with_bias else 0)
    assert cost.bytes_accessed == nbytes(a, b, result) + (nbytes(bias) if with_bias else 0)
    assert (cost.rule, cost.precision) == ("scaled_gemm", "fp8")


# Convolution


@st.composite
def convolutions(draw: st.DrawFn) -> dict[str, Any]:
    rank = draw(st.integers(1, 3))
    groups = draw(st.integers(1, 2))
    transposed = draw(st.booleans())
    dims = st.lists(st.integers(1, 3), min_size=rank, max_size=rank)
    kernel, stride, dilation = draw(dims), draw(dims), draw(dims)
    if transposed:  # PyTorch wants output_padding below the stride or the dilation, and padding that leaves an output
        padding = [draw(st.integers(0, d * (k - 1) // 2)) for k, d in zip(kernel, dilation)]
        output_padding = [draw(st.integers(0, max(s, d) - 1)) for s, d in zip(stride, dilation)]
        size = [draw(st.integers(1, 4)) for _ in range(rank)]
    else:
        padding = draw(st.lists(st.integers(0, 2), min_size=rank, max_size=rank))
        output_padding = [0] * rank
        size = [draw(st.integers(d * (k - 1) + 1, d * (k - 1) + 4)) for k, d in zip(kernel, dilation)]
    return {"rank": rank, "groups": groups, "transposed": transposed, "kernel": kernel, "stride": stride,
            "dilation": dilation, "padding": padding, "output_padding": output_padding, "size": size,
            "batch": draw(st.integers(1, 2)), "c_in": groups * draw(st.integers(1, 2)),
            "c_out": groups * draw(st.integers(1, 2)), "bias": draw(st.booleans())}


def _conv_call(c: dict[str, Any], requires_grad: bool = False) -> tuple[Callable[[], Any], Any, Any, Any, str]:
    """The functional call of a convolution, its input, weight and bias, and the name of the op it records."""
    x = tensor(c["batch"], c["c_in"], *c["size"]).requires_grad_(requires_grad)
    channels = (c["c_in"], c["c_out"] // c["groups"]) if c["transposed"] else (c["c_out"], c["c_in"] // c["groups"])
    w = tensor(*channels, *c["kernel"]).requires_grad_(requires_grad)
    bias = tensor(c["c_out"]).requires_grad_(requires_grad) if c["bias"] else None
    if c["transposed"]:
        name = f"conv_transpose{c['rank']}d"
        args = {"stride": c["stride"], "padding": c["padding"], "output_padding": c["output_padding"],
                "groups": c["groups"], "dilation": c["dilation"]}
    else:
        name = f"conv{c['rank']}d"
        args = {"stride": c["stride"], "padding": c["padding"], "dilation": c["dilation"], "groups": c["groups"]}
    function = getattr(F, name)
    return lambda: function(x, w, bias, **args), x, w, bias, f"aten::{name}"


@needs_torch
@SOME
@given(c=convolutions())
def test_convolution_matches_pytorch(c: dict[str, Any]) -> None:
    call, x, w, bias, functional = _conv_call(c)
    cost = priced(call, "aten::convolution")
    out = call()
    assert cost.flops == counted(call) + (out.numel() if bias is not None else 0)
    assert cost.bytes_accessed == nbytes(x, w, out, *([bias] if bias is not None else []))
    assert (cost.rule, cost.precision) == ("conv", "fp32")
    # conv2d and conv_transpose2d record their own argument orders: the same convolution, by a composite.
    composite = priced(call, functional)
    assert composite is not None and composite.composite and not cost.composite
    assert dataclasses.replace(composite, composite=False) == cost


@needs_torch
@FEW
@given(c=convolutions())
def test_convolution_backward_matches_pytorch(c: dict[str, Any]) -> None:
    call, x, w, bias, _ = _conv_call(c, requires_grad=True)
    out = call()
    grad = torch.randn_like(out)

    def backward() -> None:
        out.backward(grad, retain_graph=True)

    cost = priced(backward, "aten::convolution_backward")
    # Each gradient has the forward's multiply-adds; PyTorch's counter counts a grouped weight gradient groups
    # times, so grouped convolutions are checked against twice its forward count.
    expected = counted(backward) if c["groups"] == 1 else 2 * counted(call)
    assert cost.flops == expected + (out.numel() if bias is not None else 0)
    bias_gradient = nbytes(grad, bias) if bias is not None else 0  # grad_out read, the bias gradient written
    assert cost.bytes_accessed == 2 * nbytes(grad, x, w) + bias_gradient
    assert cost.rule == "conv_backward"


@needs_torch
def test_convolution_backward_counts_both_gradients_whatever_the_mask() -> None:
    """TraceLens's convention, kept: the input and weight gradients count even when output_mask skips one."""
    c = {"rank": 2, "groups": 1, "transposed": False, "kernel": [3, 3], "stride": [1, 1], "dilation": [1, 1],
         "padding": [1, 1], "output_padding": [0, 0], "size": [5, 5], "batch": 1, "c_in": 2, "c_out": 3, "bias": False}
    call, *_ = _conv_call(c, requires_grad=True)
    out = call()
    (dims, types, concrete), = recorded(lambda: out.sum().backward(), "aten::convolution_backward")
    assert concrete[10] == "[True, True, False]"
    frozen = [*concrete[:10], "[False, True, False]"]
    assert op_cost("aten::convolution_backward", dims, types, frozen) == op_cost("aten::convolution_backward",
                                                                                 dims, types, concrete)


# Attention


@needs_torch
@SOME
@given(b=st.integers(1, 2), kv_heads=st.integers(1, 2), group=st.integers(1, 2), n_q=st.integers(1, 12),
       n_kv=st.integers(1, 12), d=st.integers(1, 8), causal=st.booleans(),
       dtype=st.sampled_from(["float32", "bfloat16"]))
def test_attention_matches_pytorch(b: int, kv_heads: int, group: int, n_q: int, n_kv: int, d: int, causal: bool,
                                   dtype: str) -> None:
    n_kv = n_q if causal else n_kv
    q, k, v = tensor(b, kv_heads * group, n_q, d, dtype=dtype), *(tensor(b, kv_heads, n_kv, d, dtype=dtype)
                                                                     for _ in range(2))

    def call() -> Any:
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=group > 1)

    name = "aten::_scaled_dot_product_flash_attention_for_cpu"
    (dims, types, concrete), = recorded(call, name)
    cost = op_cost(name, dims, types, concrete)
    assert cost is not None
    with sdpa_kernel(SDPBackend.MATH):  # the math backend's matmuls are what PyTorch's counter sees
        full = counted(call)
    unmasked = op_cost(name, dims, types, [*concrete[:4], "False", *concrete[5:]])
    assert unmasked is not None and unmasked.flops == full
    assert cost.flops == (full // 2 if causal else full)
    if causal:
        assert 2 * cost.flops == unmasked.flops
    assert cost.bytes_accessed == nbytes(q, k, v, call())
    assert (cost.rule, cost.precision) == ("attention", PRECISION[dtype])


@needs_torch
@FEW
@given(b=st.integers(1, 2), heads=st.integers(1, 3), n=st.integers(1, 12), d=st.integers(1, 8), causal=st.booleans())
def test_attention_backward_matches_pytorch(b: int, heads: int, n: int, d: int, causal: bool) -> None:
    q, k, v = (tensor(b, heads, n, d).requires_grad_() for _ in range(3))
    out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    grad = torch.randn_like(out)
    name = "aten::_scaled_dot_product_flash_attention_for_cpu_backward"
    cost = priced(lambda: out.backward(grad, retain_graph=True), name)
    # PyTorch's formula for its GPU attention backwards: QKᵀ recomputed, then the four gradient matmuls.
    full = flop_counter.sdpa_backward_flop_count(grad.shape, q.shape, k.shape, v.shape)
    assert cost.flops == (full // 2 if causal else full)
    assert cost.bytes_accessed == nbytes(q, k, v, grad, q.grad, k.grad, v.grad)
    assert cost.rule == "attention_backward"


def test_grouped_query_attention_backward_adds_the_head_reduction() -> None:
    """A shared K/V head's gradients sum those of its H_q/H_kv query heads (TraceLens's term, times H_kv)."""
    def backward(kv_heads: int) -> OpCost | None:
        q, kv = [2, 4, 6, 8], [2, kv_heads, 6, 8]
        dims = [q, q, kv, kv, q, [2, 4, 6], [], [], [], []]
        types = ["float"] * 6 + ["Scalar", "Scalar", "", ""]
        concrete = [""] * 6 + ["0.", "False", "", ""]
        return op_cost("aten::_scaled_dot_product_flash_attention_for_cpu_backward", dims, types, concrete)

    mha, gqa = backward(4), backward(2)
    assert mha is not None and gqa is not None
    # Each of the 2·2·6·8 elements of dK and of dV sums 2 query heads' contributions: one add each.
    assert gqa.flops - mha.flops == 2 * (2 * 2 * 6 * 8)


def _schema(op: str) -> list[tuple[str, str]]:
    """(type, name) of each argument of an aten op, from the native_functions.yaml PyTorch ships."""
    torchgen = pytest.importorskip("torchgen", reason="torchgen (with PyTorch) is not installed")
    yaml = Path(torchgen.__file__).parent / "packaged" / "ATen" / "native" / "native_functions.yaml"
    prefix = f"- func: {op.removeprefix('aten::')}("
    (line,) = [line for line in yaml.read_text().splitlines() if line.startswith(prefix)]
    arguments = [a.split("=")[0].split(" ") for a in line[len(prefix):line.index(") ->")].split(", ") if a != "*"]
    return [(kind, name) for kind, name in arguments]


@pytest.mark.parametrize("op", sorted(op for op, rule in RULES.items()
                                      if op.startswith("aten::") and rule.startswith("attention")))
def test_attention_reads_is_causal_where_the_schema_puts_it(op: str) -> None:
    """The GPU ops never run here: their arguments are built from PyTorch's schema, is_causal at its position."""
    q = [2, 4, 6, 8]  # (B, H, N, d)
    tensors = {"query": q, "key": q, "value": q, "grad_out": q, "grad_out_": q, "out": q}

    def signature(causal: str) -> Signature:
        dims, types, concrete = [], [], []
        for kind, name in _schema(op):
            shape = tensors.get(name, [2, 4, 6] if name in ("logsumexp", "log_sumexp") else [])
            dims.append(shape)
            types.append("c10::BFloat16" if name in tensors else "float" if kind == "Tensor" else
                         "" if kind.endswith("?") else "Scalar")
            concrete.append(causal if name == "is_causal" else "" if kind.startswith("Tensor") else "0")
        return dims, types, concrete

    causal, full = op_cost(op, *signature("True")), op_cost(op, *signature("False"))
    assert causal is not None and full is not None
    assert 2 * causal.flops == full.flops and causal.bytes_accessed == full.bytes_accessed


def test_flash_attn_ops_take_batch_sequence_heads_dim() -> None:
    """flash-attention's ops (flash_attn_interface.py): q, k, v as (B, N, H, d); _flash_attn_forward(q, k, v,
    dropout_p, softmax_scale, causal, ...), _flash_attn_backward(dout, q, k, v, out, softmax_lse, dq, dk, dv,
    dropout_p, softmax_scale, causal, ...). They cost what the aten ops do on the (B, H, N, d) tensors."""
    bhnd, bnhd = [2, 4, 6, 8], [2, 6, 4, 8]

    def aten(backward: bool, causal: str) -> OpCost | None:
        name = "aten::_scaled_dot_product_flash_attention_for_cpu" + ("_backward" if backward else "")
        if backward:
            dims = [bhnd] * 5 + [[2, 4, 6], [], [], [], []]
            return op_cost(name, dims, ["float"] * 6 + ["Scalar", "Scalar", "", ""],
                           [""] * 6 + ["0.", causal, "", ""])
        return op_cost(name, [bhnd] * 3 + [[]] * 4, ["float"] * 3 + ["Scalar", "Scalar", "", ""],
                       ["", "", "", "0.", causal, "", ""])

    for causal in ("True", "False"):
        forward = op_cost("flash_attn::_flash_attn_forward", [bnhd] * 3 + [[]] * 8, ["float"] * 3 + ["Scalar"] * 8,
                          ["", "", "", "0.", "0.125", causal, "-1", "-1", "0.", "", "False"])
        assert forward is not None and forward == aten(False, causal)
        backward = op_cost("flash_attn::_flash_attn_backward", [bnhd] * 5 + [[2, 4, 6]] + [bnhd] * 3 + [[]] * 9,
                           ["float"] * 9 + ["Scalar"] * 9,
                           [""] * 9 + ["0.", "0.125", causal, "-1", "-1", "0.", "", "False", ""])
        assert backward is not None and backward == aten(True, causal)


# Elementwise, reductions, softmax, embedding, normalisation

UNARY = ["relu", "exp", "neg", "sigmoid", "tanh", "rsqrt", "sqrt", "abs", "sin", "cos", "reciprocal", "silu", "gelu"]
shapes = st.lists(st.integers(1, 5), min_size=1, max_size=3)


@needs_torch
@SOME
@given(name=st.sampled_from(UNARY), shape=shapes, dtype=st.sampled_from(["float32", "bfloat16", "float64"]),
       inplace=st.booleans())
def test_unary_bytes_are_the_tensors(name: str, shape: list[int], dtype: str, inplace: bool) -> None:
    x = tensor(*shape, dtype=dtype)
    function = getattr(F, name) if name in ("silu", "gelu") else getattr(torch, name)
    if inplace:
        assume(name not in ("silu", "gelu"))
        call, op = (lambda: getattr(x.clone(), f"{name}_")()), f"aten::{name}_"
    else:
        call, op = (lambda: function(x)), f"aten::{name}"
    cost = priced(call, op)
    assert cost.flops == x.numel()
    assert cost.bytes_accessed == nbytes(x, call())
    assert (cost.rule, cost.precision) == ("unary", PRECISION[dtype])


@needs_torch
def test_copy_reads_the_source_and_writes_the_destination() -> None:
    source, destination = tensor(3, 4, dtype="bfloat16"), torch.empty(3, 4)
    cost = priced(lambda: destination.copy_(source), "aten::copy_")
    assert cost.bytes_accessed == nbytes(source, destination)


@st.composite
def broadcastable(draw: st.DrawFn) -> tuple[list[int], list[int]]:
    """A shape and one that broadcasts against it (ones and leading dimensions dropped)."""
    shape = draw(shapes)
    other = [draw(st.sampled_from([size, 1])) for size in shape][draw(st.integers(0, len(shape) - 1)):]
    return (shape, other) if draw(st.booleans()) else (other, shape)


@needs_torch
@SOME
@given(name=st.sampled_from(["add", "sub", "mul", "div", "eq", "maximum"]), pair=broadcastable(),
       dtypes=st.tuples(*[st.sampled_from(["float32", "bfloat16", "float64", "int32", "int64"])] * 2),
       other=st.sampled_from(["tensor", "python float", "python int"]))
def test_binary_bytes_are_the_tensors(name: str, pair: tuple[list[int], list[int]], dtypes: tuple[str, str],
                                      other: str) -> None:
    x = (tensor(*pair[0]) * 10).to(getattr(torch, dtypes[0]))
    if other == "tensor":
        y: Any = (tensor(*pair[1]) * 10 + 20).to(getattr(torch, dtypes[1]))  # no zero divisor
    else:
        assume(name != "maximum")
        y = 2.5 if other == "python float" else 3
    cost = priced(lambda: getattr(torch, name)(x, y), f"aten::{name}")
    out = getattr(torch, name)(x, y)
    assert cost.flops == out.numel()
    assert cost.bytes_accessed == nbytes(x, out, *([y] if other == "tensor" else []))
    assert cost.rule == "binary"


@needs_torch
@FEW
@given(name=st.sampled_from(["add_", "mul_", "sub_", "div_"]), pair=broadcastable(),
       dtype=st.sampled_from(["float32", "bfloat16"]))
def test_inplace_binary_writes_self(name: str, pair: tuple[list[int], list[int]], dtype: str) -> None:
    shape, other = pair
    assume(torch.broadcast_shapes(shape, other) == tuple(shape))
    x, y = tensor(*shape, dtype=dtype), tensor(*other) + 20  # a float other: self keeps its dtype
    cost = priced(lambda: getattr(x.clone(), name)(y), f"aten::{name}")
    assert cost.bytes_accessed == nbytes(x, y, x)


REDUCTIONS = ["sum", "mean", "amax", "amin", "std", "var", "logsumexp", "linalg_vector_norm"]


@needs_torch
@SOME
@pytest.mark.filterwarnings("ignore:.*degrees of freedom")  # std and var of one element
@given(name=st.sampled_from(REDUCTIONS), shape=shapes, data=st.data(), keepdim=st.booleans())
def test_reduction_bytes_are_the_tensors(name: str, shape: list[int], data: st.DataObject, keepdim: bool) -> None:
    x = tensor(*shape)
    function = torch.linalg.vector_norm if name == "linalg_vector_norm" else getattr(torch, name)
    dims = data.draw(st.lists(st.integers(-len(shape), len(shape) - 1), unique_by=lambda d: d % len(shape),
                              min_size=1 if name == "logsumexp" else 0, max_size=len(shape)))
    if not dims and data.draw(st.booleans(), label="no dim argument"):
        assume(name not in ("logsumexp", "amax", "amin"))
        call = partial(function, x)
    else:
        call = partial(function, x, dim=dims, keepdim=keepdim)
    cost = priced(call, f"aten::{name}")
    assert cost.flops == x.numel()
    assert cost.bytes_accessed == nbytes(x, call())
    assert cost.rule == "reduction"


@needs_torch
@FEW
@given(shape=shapes, data=st.data(), keepdim=st.booleans())
def test_max_over_a_dim_and_cumsum(shape: list[int], data: st.DataObject, keepdim: bool) -> None:
    x = tensor(*shape)
    dim = data.draw(st.integers(-len(shape), len(shape) - 1))
    values = torch.max(x, dim, keepdim).values
    assert priced(lambda: torch.max(x, dim, keepdim), "aten::max").bytes_accessed == nbytes(x, values)
    assert priced(lambda: torch.max(x), "aten::max").bytes_accessed == nbytes(x, torch.max(x))
    assert priced(lambda: torch.cumsum(x, dim), "aten::cumsum").bytes_accessed == 2 * nbytes(x)
    # max(self, other) is elementwise: not a reduction
    (call,) = recorded(lambda: torch.max(x, x), "aten::max")
    assert op_cost("aten::max", *call) is None


@needs_torch
def test_softmax_and_its_backward() -> None:
    x = tensor(4, 8, dtype="bfloat16").requires_grad_()
    y = torch.softmax(x, -1, dtype=torch.float32)
    cost = priced(lambda: torch.softmax(x, -1, dtype=torch.float32), "aten::softmax")
    assert (cost.flops, cost.bytes_accessed, cost.precision) == (5 * x.numel(), nbytes(x, y), "bf16")
    assert priced(lambda: torch.log_softmax(x.float(), 1), "aten::_log_softmax").bytes_accessed == nbytes(y, y)
    grad = torch.randn_like(y)
    (call,) = recorded(lambda: y.backward(grad, retain_graph=True), "aten::_softmax_backward_data")
    backward = op_cost("aten::_softmax_backward_data", *call)
    assert backward is not None and (backward.flops, backward.bytes_accessed) == (4 * y.numel(), nbytes(grad, y, y))
    # The input gradient has the forward input's dtype (input_dtype, a ScalarType number: 15 is bfloat16).
    dims, types, concrete = call
    half = op_cost("aten::_softmax_backward_data", dims, types, [*concrete[:3], "15"])
    assert half is not None and backward.bytes_accessed - half.bytes_accessed == y.numel() * 2


@needs_torch
def test_embedding_moves_the_rows_it_gathers() -> None:
    weight, indices = tensor(50, 6, dtype="bfloat16"), torch.randint(0, 50, (3, 7))
    cost = priced(lambda: F.embedding(indices, weight), "aten::embedding")
    out = F.embedding(indices, weight)
    assert (cost.flops, cost.bytes_accessed, cost.precision) == (0, nbytes(indices, out, out), "bf16")


@needs_torch
@pytest.mark.parametrize("name", ["aten::fill_", "aten::zero_"])
def test_fill_writes_its_tensor_once(name: str) -> None:
    x = tensor(9, 33, dtype="float16")
    cost = priced(lambda: x.fill_(2.0) if name == "aten::fill_" else x.zero_(), name)
    assert (cost.flops, cost.bytes_accessed, cost.rule, cost.precision) == (0, nbytes(x), "fill", "fp16")


@needs_torch
def test_normalisation_reads_the_weight_and_bias_it_is_given() -> None:
    """Presence comes from the recorded types (TraceLens takes every norm as affine with a bias)."""
    x, size = tensor(6, 5, 8), 8

    def layer_norm(weight: bool, bias: bool) -> OpCost:
        w, b = (tensor(size) if weight else None), (tensor(size) if bias else None)
        return priced(lambda: F.layer_norm(x, (size,), w, b), "aten::native_layer_norm")

    plain = layer_norm(False, False)
    assert plain.bytes_accessed >= nbytes(x, x)
    assert layer_norm(True, False).bytes_accessed - plain.bytes_accessed == size * 4
    assert layer_norm(True, True).bytes_accessed - plain.bytes_accessed == 2 * size * 4
    for op in ("aten::rms_norm", "aten::_fused_rms_norm"):
        weighted = priced(lambda: F.rms_norm(x, (size,), tensor(size)), op)
        bare = priced(lambda: F.rms_norm(x, (size,)), op)
        assert weighted.bytes_accessed - bare.bytes_accessed == size * 4
        assert bare.bytes_accessed == nbytes(x, x)

    def batch_norm(training: bool) -> OpCost:
        stats = torch.zeros(5), torch.ones(5)
        weight, bias = tensor(5), tensor(5)
        return priced(lambda: F.batch_norm(x, *stats, weight, bias, training=training), "aten::native_batch_norm")

    # In training the batch statistics are computed (3 FLOPs an element) and the running ones written.
    assert batch_norm(True).flops - batch_norm(False).flops == 3 * x.numel()
    assert batch_norm(True).bytes_accessed - batch_norm(False).bytes_accessed == 2 * 5 * 4


@needs_torch
def test_normalisation_backwards_read_their_recorded_arguments() -> None:
    x = tensor(4, 6, 5).requires_grad_()
    weight, bias = tensor(6).requires_grad_(), tensor(6).requires_grad_()
    runs = {"aten::native_layer_norm_backward": F.layer_norm(x, (6, 5)),
            "aten::native_batch_norm_backward": F.batch_norm(x, None, None, weight, bias, training=True),
            "aten::native_group_norm_backward": F.group_norm(x, 3, weight, bias)}
    for op, out in runs.items():
        cost = priced(lambda out=out: out.backward(torch.randn_like(out), retain_graph=True), op)
        # At least grad_out and the input read and the input gradient written.
        assert cost.rule == "norm_backward" and cost.bytes_accessed >= 3 * nbytes(x), op
        assert cost.flops >= 4 * x.numel(), op


# The real traces


def _cpu_ops(path: Path) -> list[dict[str, Any]]:
    with gzip.open(path) as f:
        trace = json.load(f)
    return [e for e in trace["traceEvents"] if e.get("cat") == "cpu_op" and "Input Dims" in e.get("args", {})]


def _signature(event: dict[str, Any]) -> Signature:
    args = event["args"]
    return args["Input Dims"], args["Input type"], args.get("Concrete Inputs")


@pytest.mark.parametrize("path", [H100, MI300], ids=lambda p: p.name)
def test_every_gemm_and_attention_of_the_real_traces_gets_a_cost(path: Path) -> None:
    heavy = {"gemm", "scaled_gemm", "conv", "conv_backward", "attention", "attention_backward"}
    ops = [e for e in _cpu_ops(path) if RULES.get(e["name"]) in heavy]
    unpriced = [(e["name"], _signature(e)) for e in ops if op_cost(e["name"], *_signature(e)) is None]
    assert unpriced == []
    assert {RULES[e["name"]] for e in ops} >= {"gemm", "attention"}


@needs_torch
@pytest.mark.parametrize("path", [H100, MI300], ids=lambda p: p.name)
def test_real_traces_agree_with_pytorchs_formulas(path: Path) -> None:
    """The FLOPs of the traces' GEMMs and attention, against the formulas of PyTorch's counter on the same shapes."""
    checked = Counter()
    for event in _cpu_ops(path):
        name, (dims, types, concrete) = event["name"], _signature(event)
        cost = op_cost(name, dims, types, concrete)
        if name == "aten::mm":
            assert cost is not None and cost.flops == flop_counter.mm_flop(dims[0], dims[1])
        elif name == "aten::addmm":
            m, n = dims[1][0], dims[2][1]
            assert cost is not None and cost.flops == flop_counter.addmm_flop(*dims[:3]) + m * n
        elif name == "aten::bmm":
            assert cost is not None and cost.flops == flop_counter.bmm_flop(dims[0], dims[1])
        elif name == "aten::_scaled_dot_product_flash_attention":
            full = flop_counter.sdpa_flop_count(*dims[:3])
            assert cost is not None and cost.flops == (full // 2 if concrete[4] == "True" else full)
            assert cost.bytes_accessed == 4 * prod(dims[0]) * 2  # Q, K, V and the output: bf16, all (B, H, N, d)
        else:
            continue
        assert cost.precision == {"c10::BFloat16": "bf16", "float": "fp32"}[types[1]], (name, types)
        checked[name] += 1
    assert checked["aten::mm"] and checked["aten::_scaled_dot_product_flash_attention"]


def test_the_readme_mm_of_the_h100_trace() -> None:
    matches = [e for e in _cpu_ops(H100) if e["name"] == "aten::mm" and e["args"]["Input Dims"] == [[8944, 1024],
                                                                                                   [1024, 2816]]]
    assert matches
    cost = op_cost("aten::mm", *_signature(matches[0]))
    assert cost is not None
    assert cost.flops == 2 * 8944 * 1024 * 2816
    assert cost.bytes_accessed == (8944 * 1024 + 1024 * 2816 + 8944 * 2816) * 2
    assert (cost.rule, cost.precision) == ("gemm", "bf16")


def test_a_composite_gemm_costs_what_its_one_gemm_child_does() -> None:
    """aten::linear and aten::matmul of the H100 trace against the addmm, mm or bmm each runs (by time containment
    on its thread): the caller may price either."""
    ops = sorted(_cpu_ops(H100), key=lambda e: (e["tid"], e["ts"], -e["dur"]))
    pairs = 0
    for i, parent in enumerate(ops):
        if parent["name"] not in ("aten::linear", "aten::matmul"):
            continue
        end = parent["ts"] + parent["dur"]
        inside = [e for e in ops[i + 1:i + 40] if e["tid"] == parent["tid"] and e["ts"] + e["dur"] <= end]
        gemms = [e for e in inside if e["name"] in ("aten::addmm", "aten::mm", "aten::bmm")]
        assert len(gemms) == 1, parent
        composite, gemm = op_cost(parent["name"], *_signature(parent)), op_cost(gemms[0]["name"], *_signature(gemms[0]))
        assert composite is not None and gemm is not None and composite.composite and not gemm.composite
        assert dataclasses.replace(composite, composite=False) == gemm
        pairs += 1
    assert pairs > 100


def test_op_costs_is_op_cost_over_json_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    ops = _cpu_ops(H100)
    columns = [[e["name"] for e in ops]] + [[json.dumps(e["args"].get(key)) for e in ops]
                                            for key in ("Input Dims", "Input type", "Concrete Inputs")]
    expected = [op_cost(e["name"], *_signature(e)) for e in ops]
    assert sum(c is not None for c in expected) > 1000
    loads = Counter()
    real_loads = json.loads

    def counting_loads(text: str) -> Any:
        loads[text] += 1
        return real_loads(text)

    monkeypatch.setattr(torch_costs.json, "loads", counting_loads)
    assert op_costs(*columns) == expected
    signatures = {row for row in zip(*columns, strict=True) if row[0] in RULES}
    assert sum(loads.values()) <= 3 * len(signatures) < len(ops)


# Arguments that fit no rule


@pytest.mark.parametrize("name", ["aten::cat", "aten::view", "ProfilerStep#1", "aten::no_such_op",
                                  "aten::scaled_dot_product_attention", "aten::_flash_attention_forward"])
def test_ops_without_a_rule_get_none(name: str) -> None:
    assert name not in RULES
    assert op_cost(name, [[2, 3], [3, 4]], ["float", "float"], ["", ""]) is None
    assert op_costs([name], ["[[2, 3]]"], ['["float"]'], ['[""]']) == [None]


MM = ([[2, 3], [3, 4]], ["float", "float"], ["", ""])


@pytest.mark.parametrize(("name", "dims", "types", "concrete"), [
    ("aten::mm", None, MM[1], MM[2]),  # no shapes recorded
    ("aten::mm", MM[0], None, MM[2]),
    ("aten::mm", [[2, 3]], ["float"], [""]),  # wrong arity
    ("aten::mm", MM[0], ["float"], MM[2]),  # lists of different lengths
    ("aten::mm", [[2, 3], [4, 5]], MM[1], MM[2]),  # inner dimensions differ
    ("aten::mm", [[2, 3], [3, -4]], MM[1], MM[2]),
    ("aten::mm", [[2, 3], [3, "4"]], MM[1], MM[2]),
    ("aten::mm", [[2, 3], [[3, 4]]], MM[1], MM[2]),
    ("aten::mm", MM[0], ["c10::complex<float>"] * 2, MM[2]),  # unknown dtype
    ("aten::mm", MM[0], ["Scalar", "float"], MM[2]),
    ("aten::mm", "[[2, 3], [3, 4]]", MM[1], MM[2]),  # text, not parsed
    ("aten::addmm", [[4], [2, 3], [3, 4], [], []], ["float"] * 3 + ["Scalar"] * 2, None),  # fine without concrete
    ("aten::addmm", [[5], [2, 3], [3, 4], [], []], ["float"] * 3 + ["Scalar"] * 2, None),  # bias does not broadcast
    ("aten::_scaled_dot_product_flash_attention", [[1, 2, 5, 8]] * 3 + [[]] * 4, ["c10::BFloat16"] * 3 + ["Scalar"] * 4,
     None),  # is_causal unknown
    ("aten::_scaled_dot_product_flash_attention", [[1, 2, 5, 8], [1, 2, 6, 8], [1, 2, 6, 8]] + [[]] * 4,
     ["c10::BFloat16"] * 3 + ["Scalar"] * 4, ["", "", "", "0.", "True", "False", ""]),  # causal, N_q != N_kv
    ("aten::_scaled_dot_product_flash_attention", [[1, 2, 5, 8], [1, 2, 5, 4], [1, 2, 5, 8]] + [[]] * 4,
     ["c10::BFloat16"] * 3 + ["Scalar"] * 4, ["", "", "", "0.", "False", "False", ""]),  # d_q != d_k
    ("aten::convolution", [[1, 2, 5, 5], [3, 2, 3, 3], [], [], [], [], [], [], []],
     ["float", "float", "", "ScalarList", "ScalarList", "ScalarList", "Scalar", "ScalarList", "Scalar"],
     ["", "", "", "[0, 1]", "[0, 0]", "[1, 1]", "False", "[0, 0]", "1"]),  # stride 0
    ("aten::convolution", [[1, 2, 5, 5], [3, 2, 7, 7], [], [], [], [], [], [], []],
     ["float", "float", "", "ScalarList", "ScalarList", "ScalarList", "Scalar", "ScalarList", "Scalar"],
     ["", "", "", "[1, 1]", "[0, 0]", "[1, 1]", "False", "[0, 0]", "1"]),  # kernel wider than the input
    ("aten::convolution", [[1, 2, 5, 5], [3, 1, 3, 3], [], [], [], [], [], [], []],
     ["float", "float", "", "ScalarList", "ScalarList", "ScalarList", "Scalar", "ScalarList", "Scalar"],
     ["", "", "", "[1, 1]", "[0, 0]", "[1, 1]", "False", "[0, 0]", "1"]),  # channels do not match groups
    ("aten::conv2d", [[1, 2, 5, 5], [3, 2, 3, 3], [], [], [], [], []],
     ["float", "float", "", "ScalarList", "ScalarList", "ScalarList", "Scalar"],
     ["", "", "", "[1, 1]", "same", "[1, 1]", "1"]),  # string padding
    ("aten::sum", [[2, 3], [], [], []], ["float", "ScalarList", "Scalar", ""], ["", "[2]", "False", ""]),  # dim range
    ("aten::sum", [[2, 3], [], [], []], ["float", "ScalarList", "Scalar", ""], None),  # dim unknown
])
def test_arguments_that_do_not_fit_get_none(name: str, dims: Any, types: Any, concrete: Any) -> None:
    cost = op_cost(name, dims, types, concrete)
    fits = name == "aten::addmm" and dims[0] == [4]
    assert (cost is not None) == fits


def test_malformed_json_gets_none() -> None:
    good = ("[[2, 3], [3, 4]]", '["float", "float"]', '["", ""]')
    rows = [good, ("[[2, 3], [3, 4]", *good[1:]), (good[0], "not json", good[2]), (*good[:2], "{}"),
            ("{\"a\": 1}", *good[1:]), (None, *good[1:]), (good[0], good[1], None)]
    costs = op_costs(["aten::mm"] * len(rows), *zip(*rows, strict=True))
    assert costs[0] is not None and costs[0].flops == 2 * 2 * 3 * 4
    assert costs[1:6] == [None] * 5
    assert costs[6] == costs[0]  # a GEMM needs no concrete inputs


def test_precision_is_the_math_operands_class() -> None:
    def mm(dtype: str) -> str | None:
        cost = op_cost("aten::mm", MM[0], [dtype, dtype], MM[2])
        return cost.precision if cost is not None else None

    assert [mm(t) for t in ("c10::BFloat16", "float", "c10::Half", "double", "c10::Float8_e4m3fn", "signed char",
                            "int")] == ["bf16", "fp32", "fp16", "fp64", "fp8", "int8", "int"]
    # fp8 wins whatever the order; otherwise the first floating operand's
    cost = op_cost("aten::mul", [[4], [4]], ["float", "c10::Float8_e5m2"], ["", ""])
    assert cost is not None and cost.precision == "fp8"
    cost = op_cost("aten::add", [[4], [4], []], ["long int", "c10::BFloat16", "Scalar"], ["", "", "1"])
    assert cost is not None and cost.precision == "bf16"


ANY_TEXT = st.sampled_from(["", "True", "False", "[1, 1]", "[]", "0", "-1", "2", "[0, 2]", "15", "0.125", "same",
                            "[True, True, False]", "[True, False]", "nan", "9" * 5000, "[1,", "x"])
ANY_TYPE = st.sampled_from(["float", "c10::BFloat16", "long int", "int", "bool", "c10::Float8_e4m3fn", "Scalar",
                            "ScalarList", "TensorList", "", "c10::complex<float>"])
ANY_DIMS = st.one_of(st.lists(st.integers(-2, 9), max_size=5), st.just([[2, 3], [3]]), st.just(None), st.just("[2]"))


@settings(max_examples=400, deadline=None)
@given(name=st.sampled_from(sorted(RULES)), data=st.data())
def test_any_arguments_give_a_cost_or_none_never_an_error(name: str, data: st.DataObject) -> None:
    count = data.draw(st.integers(0, 18))
    dims = data.draw(st.lists(ANY_DIMS, min_size=count, max_size=count))
    types = data.draw(st.lists(ANY_TYPE, min_size=count, max_size=count))
    concrete = data.draw(st.one_of(st.none(), st.lists(ANY_TEXT, min_size=count, max_size=count)))
    cost = op_cost(name, dims, types, concrete)
    assert cost is None or (cost.flops >= 0 and cost.bytes_accessed >= 0 and cost.rule == RULES[name])

