"""What a Kineto trace says about itself: its host, its devices, and whether it is a Kineto trace at all.

Real input only: the samples of tests/data/kineto, a trace PyTorch's profiler writes here on the
CPU (``tensorboard_trace_handler``), and the files ``jax.profiler.trace`` writes on the CPU; each
program runs in a subprocess so that the test process imports neither torch nor jax. Where a case
needs a trace no real file is, the test edits a real one and says so.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest
from conftest import TEST_DATA

import xprosql
from xprosql.errors import IngestError
from xprosql.ingest import _kineto_columnar, _kineto_reference, find_profiles, profile_id_of
from xprosql.ingest.kineto import load_trace

KINETO = TEST_DATA / "kineto"
TRACES = sorted(KINETO.glob("*.json.gz"))

_TORCH_PROGRAM = textwrap.dedent(
    """
    import socket
    import sys

    import torch
    from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=0, warmup=1, active=2),
                 on_trace_ready=tensorboard_trace_handler(sys.argv[1])) as prof:
        for _ in range(4):
            x = torch.randn(64, 64)
            (x @ x).relu().sum()
            prof.step()
    print(socket.gethostname())
    """
)

_JAX_PROGRAM = textwrap.dedent(
    """
    import sys

    import jax
    import jax.numpy as jnp

    f = jax.jit(lambda a: jnp.tanh(a @ a))
    x = jnp.ones((64, 64))
    f(x).block_until_ready()
    with jax.profiler.trace(sys.argv[1], create_perfetto_trace=True):
        f(x).block_until_ready()
    """
)


def _run(program: str, out: Path, *, module: str) -> str:
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not installed: cannot generate its profile here")
    env = dict(os.environ, JAX_PLATFORMS="cpu", CUDA_VISIBLE_DEVICES="")
    done = subprocess.run([sys.executable, "-c", program, str(out)], env=env, capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-4000:]
    return done.stdout.strip()


@pytest.fixture(scope="module")
def torch_traces(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[Path], str]:
    """The traces torch.profiler's tensorboard_trace_handler wrote here, and this machine's host name."""
    out = tmp_path_factory.mktemp("torch") / "tb"
    hostname = _run(_TORCH_PROGRAM, out, module="torch")
    traces = sorted(out.glob("*.pt.trace.json"))
    assert traces, f"torch wrote no trace into {out}"
    return traces, hostname


@pytest.fixture(scope="module")
def jax_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A jax.profiler.trace run directory: <host>.xplane.pb, <host>.trace.json.gz and perfetto_trace.json.gz."""
    logdir = tmp_path_factory.mktemp("jax") / "log"
    _run(_JAX_PROGRAM, logdir, module="jax")
    (run,) = logdir.glob("plugins/profile/*")
    names = sorted(p.name for p in run.iterdir())
    assert "perfetto_trace.json.gz" in names and any(n.endswith(".trace.json.gz") for n in names), names
    return run


def _raw(path: Path) -> dict:
    data = path.read_bytes()
    return json.loads(gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data)


def _tables(batches) -> dict[str, pa.Table]:
    grouped: dict[str, list[pa.RecordBatch]] = {}
    for table, batch in batches:
        grouped.setdefault(table, []).append(batch)
    return {name: pa.Table.from_batches(parts).combine_chunks() for name, parts in grouped.items()}


def _both_paths(data: bytes, source: str) -> tuple[dict[str, pa.Table], dict[str, pa.Table]]:
    trace, events = load_trace(data, source)
    return (_tables(_kineto_columnar.decode(data, source)),
            _tables(_kineto_reference.decode_events(trace, events, source)))


# --- the host -------------------------------------------------------------------------------------------------

def test_host_is_the_host_name_the_trace_carries(torch_traces: tuple[list[Path], str], tmp_path: Path) -> None:
    traces, hostname = torch_traces
    raw = _raw(traces[0])
    assert raw["host_name"] == hostname  # what PyTorch writes: the machine's name, also the file name's start
    report = xprosql.ingest(traces, into=tmp_path / "run")
    assert report.ok, str(report)
    hosts = xprosql.load(tmp_path / "run").sql("SELECT DISTINCT host FROM profiles").rows()
    assert hosts == [(hostname,)]
    assert traces[0].name.removesuffix(".json") != hostname  # the file name alone would not say it


def test_host_falls_back_to_the_file_name(tmp_path: Path) -> None:
    # No sample carries host_name: each is named after its file.
    trace = KINETO / "cpu_only.json.gz"
    assert "host_name" not in _raw(trace)
    assert xprosql.ingest(trace, into=tmp_path / "run").ok
    assert xprosql.load(tmp_path / "run").sql("SELECT host FROM profiles").rows() == [("cpu_only",)]


def test_host_of_a_tensorboard_file_name_without_host_name(torch_traces: tuple[list[Path], str],
                                                           tmp_path: Path) -> None:
    # Edited by hand: a real trace less its host_name, as older PyTorch versions wrote them (no real file here
    # lacks it); the handler's file name <host>_<pid>.<ns>.pt.trace.json still names the host.
    traces, hostname = torch_traces
    raw = _raw(traces[0])
    del raw["host_name"]
    path = tmp_path / "logs" / traces[0].name
    path.parent.mkdir()
    path.write_text(json.dumps(raw))
    assert xprosql.ingest(path, into=tmp_path / "run").ok
    assert xprosql.load(tmp_path / "run").sql("SELECT host FROM profiles").rows() == [(hostname,)]


# --- devices: only processes that are devices -------------------------------------------------------------------

@pytest.fixture(scope="module")
def samples_run(samples_warehouse: Path) -> xprosql.Run:
    return xprosql.load(samples_warehouse)


@pytest.mark.parametrize("trace", TRACES, ids=[t.name.split(".")[0] for t in TRACES])
def test_devices_are_gpus_and_host_processes_only(samples_run: xprosql.Run, trace: Path) -> None:
    raw = _raw(trace)
    events = raw["traceEvents"]
    pid = profile_id_of(trace.read_bytes())
    devices = samples_run.sql("SELECT plane_id, name, kind FROM devices WHERE profile_id = $p", {"p": pid}).rows()
    assert {kind for _, _, kind in devices} <= {"gpu", "host"}
    assert not {"Spans", "Traces", ""} & {name for _, name, _ in devices}
    # Counted from the JSON: a device per GPU (deviceProperties or GPU activity), per process with events.
    gpu_cats = {"kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation", "cuda_sync"}
    gpus = {p["id"] for p in raw.get("deviceProperties") or []} | {e["pid"] for e in events if e.get("cat") in gpu_cats}
    processes = {e["pid"] for e in events if e.get("ph") != "M" and isinstance(e.get("pid"), int)} - gpus
    assert sorted(plane for plane, _, kind in devices if kind == "gpu") == sorted(gpus)
    assert sorted(plane for plane, _, kind in devices if kind == "host") == sorted(processes)


@pytest.mark.parametrize("trace", TRACES, ids=[t.name.split(".")[0] for t in TRACES])
def test_kineto_spans_are_kept_on_the_host(samples_run: xprosql.Run, trace: Path) -> None:
    """Kineto's string pids ("Spans", "Traces", "") hold its own spans and markers: events on the host's tracks."""
    own = [e for e in _raw(trace)["traceEvents"] if e.get("ph") in ("X", "i") and isinstance(e.get("pid"), str)]
    assert own or trace.name.startswith("b200"), "all samples but b200's have Kineto's 'PyTorch Profiler (0)' span"
    pid = profile_id_of(trace.read_bytes())
    rows = samples_run.sql(
        """SELECT e.name, t.name, t.display_name, d.kind, d.name FROM events e
           JOIN tracks t USING (profile_id, device_id, track_id) JOIN devices d USING (profile_id, device_id)
           WHERE profile_id = $p AND t.display_name IS NOT NULL""", {"p": pid}).rows()
    expected = Counter((e["name"], e["tid"] or e["pid"] or "Kineto", e["pid"]) for e in own)
    assert Counter(row[:3] for row in rows) == expected
    assert {row[3:] for row in rows} == ({("host", "/host:CPU")} if own else set())
    if any(e.get("pid") == "Spans" and e.get("name") == "process_sort_index" for e in _raw(trace)["traceEvents"]):
        sort = samples_run.sql("SELECT DISTINCT sort_index FROM tracks WHERE profile_id = $p AND display_name = 'Spans'",
                               {"p": pid}).rows()
        assert sort == [(536870912,)]  # Kineto's process_sort_index of "Spans": on its tracks


@pytest.mark.parametrize("trace", TRACES, ids=[t.name.split(".")[0] for t in TRACES])
def test_metadata_of_processes_that_are_no_device_is_counted(samples_run: xprosql.Run, trace: Path) -> None:
    raw = _raw(trace)
    events = raw["traceEvents"]
    devices = ({p["id"] for p in raw.get("deviceProperties") or []} | {e.get("pid") for e in events if e.get("ph") != "M"}
               | {e.get("pid") for e in events if e.get("ph") == "M" and e.get("name") == "thread_name"})
    expected = sum(1 for e in events if e.get("ph") == "M" and e.get("pid") not in devices)
    pid = profile_id_of(trace.read_bytes())
    dropped, reasons = samples_run.sql("SELECT dropped_events, drop_reasons FROM profiles WHERE profile_id = $p",
                                       {"p": pid}).rows()[0]
    assert dropped == expected
    assert reasons == ([f"{expected} M events of processes without events or deviceProperties: no device "
                        "(such as Kineto's labels of GPU slots)"] if expected else [])


def test_the_h100_trace_has_one_gpu_and_one_host(samples_run: xprosql.Run) -> None:
    # Kineto labels 16 GPU slots ("GPU 0" ... "GPU 15"); the trace has one GPU (deviceProperties, kernels).
    pid = profile_id_of((KINETO / "h100_qwen1.5_0.5b.json.gz").read_bytes())
    rows = samples_run.sql("SELECT name, kind FROM devices WHERE profile_id = $p ORDER BY device_id", {"p": pid}).rows()
    assert rows == [("/device:GPU:0", "gpu"), ("/host:CPU", "host")]


def test_a_torch_trace_decodes_alike_on_both_paths(torch_traces: tuple[list[Path], str]) -> None:
    traces, hostname = torch_traces
    for trace in traces:
        columnar, reference = _both_paths(trace.read_bytes(), str(trace))
        assert list(columnar) == list(reference)
        for name, table in reference.items():
            assert columnar[name].equals(table), (trace.name, name)
        assert columnar["profiles"]["host"].to_pylist() == [hostname]
        assert columnar["devices"]["name"].to_pylist() == ["/host:CPU"]
        own = [e for e in _raw(trace)["traceEvents"] if e.get("ph") in ("X", "i")]
        assert columnar["events"].num_rows == len(own)  # Kineto's spans included, none lost


# --- XProf's trace JSON is not a Kineto trace -------------------------------------------------------------------

def test_xprof_trace_json_named_explicitly_fails_saying_what_to_ingest(jax_run: Path, tmp_path: Path) -> None:
    (xplane,) = jax_run.glob("*.xplane.pb")
    host_trace = jax_run / xplane.name.replace(".xplane.pb", ".trace.json.gz")
    for path, wanted in ((host_trace, xplane.name), (jax_run / "perfetto_trace.json.gz", "*.xplane.pb")):
        report = xprosql.ingest(path, into=tmp_path / "run")
        assert not report.ingested and len(report.failed) == 1, str(report)
        failed_path, reason = report.failed[0]
        assert failed_path == str(path)
        assert "XProf" in reason and "not a PyTorch/Kineto trace" in reason and f"ingest the {wanted}" in reason
        # Both decoders refuse it alike (the columnar scan may leave the file to the reference path).
        data = path.read_bytes()
        try:
            list(_kineto_columnar.decode(data, str(path)))
        except _kineto_columnar.Irregular:
            pass
        except IngestError as exc:
            assert exc.problem == reason
        else:
            raise AssertionError(f"{path.name} decoded as a Kineto trace")
        trace, events = load_trace(data, str(path))
        with pytest.raises(IngestError) as refused:
            list(_kineto_reference.decode_events(trace, events, str(path)))
        assert refused.value.problem == reason


def test_a_directory_walk_takes_the_xplane_not_its_trace_json(jax_run: Path, tmp_path: Path) -> None:
    logdir = jax_run.parents[2]
    assert [p.name for p in find_profiles(logdir)] == [p.name for p in jax_run.glob("*.xplane.pb")]
    report = xprosql.ingest(logdir, into=tmp_path / "run")
    assert report.ok and len(report.ingested) == 1, str(report)
    assert xprosql.load(tmp_path / "run").sql("SELECT format FROM profiles").rows() == [("xspace",)]
    # Without its .xplane.pb the JSON is found, and fails saying why.
    alone = tmp_path / "alone"
    alone.mkdir()
    shutil.copy(jax_run / "perfetto_trace.json.gz", alone)
    report = xprosql.ingest(alone, into=tmp_path / "run2")
    assert [path for path, _ in report.failed] == [str(alone / "perfetto_trace.json.gz")]
    assert "XProf" in report.failed[0][1]


def test_kineto_traces_are_not_taken_for_xprof(samples_run: xprosql.Run) -> None:
    assert samples_run.sql("SELECT count(*) FROM profiles WHERE format = 'kineto'").rows() == [(len(TRACES),)]
