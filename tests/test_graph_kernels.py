"""Kernels replayed by CUDA/HIP graphs (sql/names/graph_kernels.sql, graph_launches.sql): their launch, and the op
and names that produced them where the capture is recorded (TraceLens's capture-merge).

Real data: one vLLM run on ROCm (tests/data/graphs): the trace recorded while it captured its HIP graph, and the
trace of a hipGraphLaunch replaying it. Every expectation comes from an independent walk over the raw JSON of the
two files. Two variants are hand-made from those files, because no real file shows them: the replay with two nodes
swapped in GPU order (matched by name, not in order), and the capture without the `kernel` arg that ROCm records and
CUDA Kineto traces lack (matched by position alone).
"""

from __future__ import annotations

import gzip
import itertools
import json
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from conftest import TEST_DATA

import xprosql

pytestmark = pytest.mark.slow  # ingests the 131k-event capture trace (about 5 s)

GRAPHS = TEST_DATA / "graphs"
CAPTURE = GRAPHS / "vllm_graph_capture_rank0.json.gz"
EXECUTION = GRAPHS / "vllm_graph_execution.json.gz"
_LAUNCH = re.compile(r"LaunchKernel|LaunchCooperativeKernel|Memcpy|Memset")


def _events(path: Path) -> list[dict[str, Any]]:
    return json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]


def _replayed(events: list[dict[str, Any]]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The graph launch and the GPU work with its correlation, in GPU order."""
    launch = next(e for e in events if e.get("cat") == "cuda_runtime" and "GraphLaunch" in e["name"])
    nodes = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
             and e.get("args", {}).get("correlation") == launch["args"]["correlation"]]
    return launch, sorted(nodes, key=lambda e: e["ts"])


def _walk_capture(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The launches of the capturing process between StreamBeginCapture and StreamEndCapture on its thread, each
    with the innermost and outermost cpu_op and the names (annotations, nn.Modules) around it on its own thread."""
    runtime = [e for e in events if e.get("cat") == "cuda_runtime" and e.get("ph") == "X"]
    begin = next(e for e in runtime if "StreamBeginCapture" in e["name"])
    end = min((e for e in runtime if "StreamEndCapture" in e["name"] and e["tid"] == begin["tid"] and e["ts"] > begin["ts"]),
              key=lambda e: e["ts"])
    process = [e for e in events if e.get("ph") == "X" and e.get("pid") == begin["pid"]]
    ops = [e for e in process if e.get("cat") == "cpu_op"]
    names = [e for e in process if e.get("cat") == "user_annotation"
             or (e.get("cat") == "python_function" and e["name"].startswith("nn.Module: "))]
    launches = sorted((e for e in runtime if e["pid"] == begin["pid"] and begin["ts"] < e["ts"] < end["ts"]
                       and _LAUNCH.search(e["name"]) and "Graph" not in e["name"]), key=lambda e: e["ts"])
    walked = []
    for launch in launches:
        around = sorted((o for o in ops if o["tid"] == launch["tid"] and o["ts"] <= launch["ts"]
                         and launch["ts"] + launch["dur"] <= o["ts"] + o["dur"]), key=lambda o: (o["ts"], -o["dur"]))
        path = sorted((n for n in names if n["tid"] == launch["tid"] and n["ts"] <= launch["ts"] < n["ts"] + n["dur"]),
                      key=lambda n: (n["ts"], -n["dur"]))
        kind = "memset" if "Memset" in launch["name"] else "memcpy" if "Memcpy" in launch["name"] else "kernel"
        walked.append({
            "match_name": launch["args"].get("kernel") if kind == "kernel" else kind,
            "innermost_op": around[-1]["name"] if around else None,
            "input_shapes": json.dumps(around[-1]["args"].get("Input Dims"), separators=(", ", ": ")) if around else None,
            "outermost_op": around[0]["name"] if around else None,
            "path": "/".join(n["name"].removeprefix("nn.Module: ") for n in path) or None,
        })
    return walked


def _expected_matches(nodes: list[dict[str, Any]], captured: list[dict[str, Any]]) -> list[tuple[str, int | None]]:
    """(match, index of the captured launch) per node: the k-th node of a name is the k-th captured launch of it."""
    by_name: dict[str, list[int]] = defaultdict(list)
    for index, launch in enumerate(captured):
        by_name[launch["match_name"]].append(index)
    seen: dict[str, int] = defaultdict(int)
    out: list[tuple[str, int | None]] = []
    for position, node in enumerate(nodes):
        name = "memcpy" if node["cat"] == "gpu_memcpy" else "memset" if node["cat"] == "gpu_memset" else node["name"]
        k = seen[name]
        seen[name] += 1
        if k < len(by_name[name]):
            index = by_name[name][k]
            out.append(("order" if index == position else "name", index))
        else:
            out.append(("unmatched", None))
    return out


def _warehouse(tmp_path: Path, files: list[Path]) -> xprosql.Run:
    report = xprosql.ingest(files, into=tmp_path / "run")
    assert report.ok, str(report)
    return xprosql.load(tmp_path / "run")


@pytest.fixture(scope="module")
def graph_run(tmp_path_factory: pytest.TempPathFactory) -> xprosql.Run:
    return _warehouse(tmp_path_factory.mktemp("graphs"), [CAPTURE, EXECUTION])


def test_replayed_kernels_have_their_launch_and_the_ops_of_their_capture(graph_run: xprosql.Run) -> None:
    execution, capture = _events(EXECUTION), _events(CAPTURE)
    launch, nodes = _replayed(execution)
    captured = _walk_capture(capture)
    expected = _expected_matches(nodes, captured)
    assert len(nodes) == 421 and sum(1 for e in execution if e.get("cat") == "kernel") == 425  # 4 launched one by one

    rows = graph_run.graph_kernels().pl()
    assert rows.height == len(nodes)
    # Every node has the graph launch: the hipGraphLaunch of the raw trace, by name and start.
    launch_row = graph_run.sql("SELECT a.name, a.start_ps, p.start_ns FROM api_calls a JOIN profiles p USING (profile_id) "
                               "WHERE a.event_id = $e AND p.source_path LIKE '%execution%'",
                               {"e": int(rows["launch_event_id"][0])}).rows()
    assert rows["launch_event_id"].n_unique() == 1 and launch_row[0][0] == launch["name"] == "hipGraphLaunch"
    assert set(rows["launch_name"]) == {"hipGraphLaunch"} and set(rows["launch_index"]) == {0}
    # Node by node, in GPU order: name, duration, and what its captured launch says.
    assert rows["name"].to_list() == [n["name"] for n in nodes]
    assert rows["dur_ps"].to_list() == [round(n["dur"] * 1e6) for n in nodes]
    assert rows["match"].to_list() == [m for m, _ in expected]
    for field in ("innermost_op", "outermost_op", "path", "input_shapes"):
        want = [captured[i][field] if i is not None else None for _, i in expected]
        assert rows[field].to_list() == want, field

    summary = graph_run.graph_launches().pl().row(0, named=True)
    attributed = sum(1 for m, _ in expected if m in ("order", "name"))
    assert summary["nodes"] == len(nodes) and summary["attributed"] == attributed
    assert summary["matched_order"] == sum(1 for m, _ in expected if m == "order")
    assert summary["attributed_share"] == pytest.approx(attributed / len(nodes))
    assert summary["gpu_time_ps"] == sum(round(n["dur"] * 1e6) for n in nodes)
    assert summary["unmatched"] + summary["no_capture"] == len(nodes) - attributed


def test_without_the_capture_the_kernels_keep_their_launch(graph_run: xprosql.Run) -> None:
    execution_id = graph_run.sql("SELECT profile_id FROM profiles WHERE source_path LIKE '%execution%'").rows()[0][0]
    rows = graph_run.graph_kernels(profiles=[execution_id]).pl()
    _, nodes = _replayed(_events(EXECUTION))
    assert rows.height == len(nodes) and set(rows["match"]) == {"no_capture"}
    assert rows["launch_event_id"].null_count() == 0 and rows["innermost_op"].null_count() == rows.height
    summary = graph_run.graph_launches(profiles=[execution_id]).pl().row(0, named=True)
    assert summary["attributed"] == 0 and summary["no_capture"] == len(nodes) and summary["attributed_share"] == 0


def _rewrite(source: Path, target: Path, change: Any) -> Path:
    trace = json.loads(gzip.decompress(source.read_bytes()))
    change(trace["traceEvents"])
    target.write_bytes(gzip.compress(json.dumps(trace).encode()))
    return target


def test_nodes_out_of_capture_order_match_by_name(tmp_path: Path) -> None:
    """Hand-made from the real replay: two nodes of different names swap places in GPU order."""
    def swap(events: list[dict[str, Any]]) -> None:
        _, nodes = _replayed(events)
        a, b = next((x, y) for x, y in itertools.pairwise(nodes) if x["name"] != y["name"])
        a["ts"], b["ts"] = b["ts"], a["ts"]

    swapped = _rewrite(EXECUTION, tmp_path / "vllm_graph_execution_swapped.json.gz", swap)
    run = _warehouse(tmp_path, [CAPTURE, swapped])
    _, nodes = _replayed(_events(swapped))
    expected = _expected_matches(nodes, _walk_capture(_events(CAPTURE)))
    rows = run.graph_kernels().pl()
    assert rows["match"].to_list() == [m for m, _ in expected]
    assert rows.filter(pl.col("match") == "name").height == 2 == sum(1 for m, _ in expected if m == "name")


def test_a_capture_without_kernel_names_matches_by_position(tmp_path: Path) -> None:
    """Hand-made from the real capture: its launches lose the `kernel` arg, as CUDA Kineto traces record them."""
    def strip(events: list[dict[str, Any]]) -> None:
        for e in events:
            if e.get("cat") == "cuda_runtime":
                e.get("args", {}).pop("kernel", None)

    unnamed = _rewrite(CAPTURE, tmp_path / "vllm_graph_capture_unnamed.json.gz", strip)
    run = _warehouse(tmp_path, [unnamed, EXECUTION])
    rows = run.graph_kernels().pl()
    captured = _walk_capture(_events(CAPTURE))
    _, nodes = _replayed(_events(EXECUTION))
    assert len(captured) == len(nodes)
    assert set(rows["match"]) == {"position"}
    assert rows["innermost_op"].to_list() == [c["innermost_op"] for c in captured]
