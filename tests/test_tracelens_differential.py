"""Differential test: framework_ops against TraceLens's op perf model on real PyTorch GPU traces.

The oracle is TraceLens's published formulas, reimplemented here from its source (AMD-AGI/TraceLens,
``TraceLens/PerfModel/perf_model.py``: ``GEMM.flops_func`` / ``bytes_func``, ``aten_mm``, ``aten_addmm``,
``aten_bmm``, ``SDPA.flops_func`` / ``bytes_func``, ``aten__scaled_dot_product_flash_attention``) rather
than installed: TraceLens is not on PyPI and pulls in its own pandas stack. It reads the raw trace JSON
and builds its own tree (a stack per thread), independently of xprosql's ingest and SQL: each op's kernel
time is the union of the GPU activities launched in its subtree (TraceLens's op kernel time).
"""

from __future__ import annotations

import gzip
import json
import math
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from conftest import TEST_DATA

import xprosql
from xprosql.ingest import profile_id_of

TRACES = ["h100_qwen1.5_0.5b.json.gz", "mi300_torch_compile_triton.json.gz"]
_BPE = {"c10::BFloat16": 2, "c10::Half": 2, "float": 4, "double": 8}


def _tracelens_cost(event: dict[str, Any]) -> tuple[float, float] | None:
    """(FLOPs, bytes) of one call by TraceLens's perf model, for the GEMM and SDPA ops these traces hold."""
    name, args = event["name"], event["args"]
    dims, types = args.get("Input Dims"), args.get("Input type")
    if name == "aten::mm":
        (m, k), (_, n) = dims[0], dims[1]
        return 2 * m * n * k, (m * k + k * n + m * n) * _BPE[types[0]]
    if name == "aten::addmm":  # bias assumed 1 x N (TraceLens's comment)
        (m, k), (_, n) = dims[1], dims[2]
        return 2 * m * n * k + m * n, (m * k + k * n + m * n + n) * _BPE[types[1]]
    if name == "aten::bmm":
        (b, m, k), (_, _, n) = dims[0], dims[1]
        return b * 2 * m * n * k, b * (m * k + k * n + m * n) * _BPE[types[0]]
    if name == "aten::_scaled_dot_product_flash_attention":
        (b, h_q, n_q, d_qk), (_, h_kv, n_kv, _), (_, _, _, d_v) = dims[0], dims[1], dims[2]
        flops = b * h_q * (2 * n_q * n_kv * d_qk) + b * h_q * (2 * n_q * d_v * n_kv)
        if args["Concrete Inputs"][4].lower() == "true":
            flops /= 2
        elements = b * n_q * h_q * d_qk + b * n_kv * h_kv * d_qk + b * n_kv * h_kv * d_v + b * n_q * h_q * d_v
        return flops, elements * 2  # TraceLens's default bytes per element
    return None


def _union_us(intervals: list[tuple[float, float]]) -> float:
    total, end = 0.0, -math.inf
    for s, e in sorted(intervals):
        if s > end:
            total += e - s
            end = e
        elif e > end:
            total += e - end
            end = e
    return total


def _oracle(path: Path) -> dict[tuple[str, str, str], dict[str, float]]:
    """Per (op, Input Dims, Input type): calls, FLOPs, bytes, kernel time (ps) and GPU activities of TraceLens's
    modelled ops."""
    events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    gpu: dict[int, list[tuple[float, float]]] = defaultdict(list)
    for e in events:
        if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
            gpu[e["args"]["correlation"]].append((e["ts"], e["ts"] + e["dur"]))
    per_thread: dict[tuple[Any, Any], list[dict[str, Any]]] = defaultdict(list)
    for e in events:
        if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "cuda_runtime", "cuda_driver"):
            per_thread[(e["pid"], e["tid"])].append(e)
    rows: dict[tuple[str, str, str], dict[str, float]] = defaultdict(lambda: defaultdict(float))

    def finish(op: dict[str, Any], launched: list[tuple[float, float]]) -> None:
        cost = _tracelens_cost(op)
        if cost is not None:
            row = rows[(op["name"], json.dumps(op["args"]["Input Dims"]), json.dumps(op["args"]["Input type"]))]
            row["calls"] += 1
            row["flops"] += cost[0]
            row["bytes"] += cost[1]
            row["kernel_time_ps"] += _union_us(launched) * 1e6
            row["kernels"] += len(launched)

    for thread_events in per_thread.values():
        thread_events.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack: list[tuple[dict[str, Any], list[tuple[float, float]]]] = []
        for e in [*thread_events, None]:
            until = math.inf if e is None else e["ts"]
            while stack and stack[-1][0]["ts"] + stack[-1][0]["dur"] <= until:
                op, launched = stack.pop()
                if stack:
                    stack[-1][1].extend(launched)
                finish(op, launched)
            if e is None:
                break
            if e["cat"] == "cpu_op":
                stack.append((e, []))
            elif stack:  # a launch: its GPU activities belong to the innermost op, and so to every op around it
                stack[-1][1].extend(gpu.get(e["args"].get("correlation"), []))
    return rows


@pytest.fixture(scope="module")
def run(samples_warehouse: Path) -> xprosql.Run:
    return xprosql.load(samples_warehouse)


@pytest.mark.parametrize("trace", TRACES)
def test_gemm_and_attention_costs_and_kernel_times_equal_tracelens(run: xprosql.Run, trace: str) -> None:
    expected = _oracle(TEST_DATA / "kineto" / trace)
    assert {name for name, _, _ in expected} >= {"aten::mm", "aten::_scaled_dot_product_flash_attention"}
    pid = profile_id_of((TEST_DATA / "kineto" / trace).read_bytes())
    ours = run.framework_ops(profiles=[pid]).pl()
    by_key = {}
    for row in ours.iter_rows(named=True):
        if row["op"] in {name for name, _, _ in expected}:
            dims = json.dumps(json.loads(row["input_shapes"]))
            by_key[(row["op"], dims, json.dumps(json.loads(row["input_dtypes"])))] = row
    assert set(by_key) == set(expected)
    for key, want in expected.items():
        got = by_key[key]
        assert got["occurrences"] == want["calls"], key
        assert got["flops"] == want["flops"], key
        assert got["bytes_accessed"] == want["bytes"], key
        assert got["kernel_time_ps"] == pytest.approx(want["kernel_time_ps"], rel=0.005), key
        assert got["kernels"] == want["kernels"], key
        assert got["cost_source"] == "shapes"
