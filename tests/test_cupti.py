"""Live CUPTI capture: the recorder, its trace format, and how it behaves without a GPU."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

import xprosql
from xprosql import cupti
from xprosql.cli import main

HAS_CUPTI = importlib.util.find_spec("cupti") is not None

# CUpti_ActivityKind values of the kinds the recorder maps (cupti.ActivityKind in cupti-python 13).
KINDS = {"MEMCPY": 1, "MEMSET": 2, "KERNEL": 3, "DRIVER": 4, "RUNTIME": 5, "MARKER": 12,
         "CONCURRENT_KERNEL": 10, "SYNCHRONIZATION": 38}


def _records() -> list[SimpleNamespace]:
    """Activity records shaped as cupti-python delivers them (field names from the CUPTI docs).

    Hand-built: no GPU here to record real ones; the device check records real ones.
    """
    t0 = 1_790_000_000_000_000_000
    kernel = dict(kind=10, device_id=0, context_id=1, stream_id=7, correlation_id=11, name="_Z6scalePfi",
                  grid_x=80, grid_y=1, grid_z=1, block_x=256, block_y=1, block_z=1, registers_per_thread=16,
                  static_shared_memory=0, dynamic_shared_memory=1024, graph_id=0, graph_node_id=0)
    return [
        SimpleNamespace(kind=5, cbid=211, start=t0, end=t0 + 4_000, process_id=42, thread_id=43, correlation_id=11),
        SimpleNamespace(**kernel, start=t0 + 6_000, end=t0 + 26_000),
        SimpleNamespace(kind=5, cbid=41, start=t0 + 30_000, end=t0 + 31_000, process_id=42, thread_id=43,
                        correlation_id=12),
        SimpleNamespace(kind=1, copy_kind=2, src_kind=3, dst_kind=1, bytes=4096, device_id=0, context_id=1,
                        stream_id=7, correlation_id=12, start=t0 + 32_000, end=t0 + 35_500),
        SimpleNamespace(kind=2, memory_kind=3, bytes=512, value=0, device_id=0, context_id=1, stream_id=7,
                        correlation_id=13, start=t0 + 36_000, end=t0 + 36_700),
        SimpleNamespace(kind=38, type=3, context_id=1, stream_id=7, correlation_id=14, cuda_event_id=0,
                        start=t0 + 37_000, end=t0 + 39_000),
        SimpleNamespace(kind=12, timestamp=t0 + 1_000, name="step 0", id=1),
        SimpleNamespace(kind=99, start=t0, end=t0),  # a kind the recorder does not map
    ]


def test_recording_ingests_into_the_gpu_tables(tmp_path: Path) -> None:
    import gzip
    import json

    trace = cupti.records_to_trace(_records(), kinds=KINDS, host="gpuhost", pid=42)
    path = tmp_path / "gpuhost.42.cupti.json.gz"
    path.write_bytes(gzip.compress(json.dumps(trace).encode()))
    assert trace[cupti.RECORDER_KEY]["skipped_record_kinds"] == {"99": 1}

    assert xprosql.ingest(path, into=tmp_path / "run").ok
    run = xprosql.load(tmp_path / "run")
    assert run.sql("SELECT format, host FROM profiles").rows() == [("cupti", "gpuhost")]
    kernel = run.sql(
        "SELECT k.name, k.dur_ps, stream_id, grid_x, block_x, registers_per_thread, shared_memory_bytes, a.name "
        "FROM kernels k JOIN api_calls a USING (profile_id, correlation_id)").rows()
    assert kernel == [("_Z6scalePfi", 20_000_000, 7, 80, 256, 16, 1024, "runtime_api_cbid_211")]
    copies = run.sql("SELECT kind, bytes, src_kind, dst_kind, dur_ps FROM memcpys ORDER BY start_ps").rows()
    assert copies == [("DtoH", 4096, "Device", "Pageable", 3_500_000), ("memset", 512, None, "Device", 700_000)]
    assert run.sql("SELECT name FROM events WHERE category = 'cuda_sync'").rows() == [("Stream Sync",)]
    assert run.sql("SELECT min(start_ps) FROM events").rows() == [(0,)]


@pytest.mark.skipif(HAS_CUPTI, reason="cupti-python is installed: the no-GPU behaviour is not observable here")
def test_without_cupti_importing_works_and_recording_says_why(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(cupti.CuptiUnavailableError, match="cupti-python is not importable"):
        with cupti.record(tmp_path):
            pass
    assert not any(tmp_path.iterdir())
    script = tmp_path / "train.py"
    script.write_text("print('training')\n")
    assert main(["record", "--into", str(tmp_path / "run"), "--", sys.executable, str(script)]) == 2
    assert "cupti-python is not importable" in capsys.readouterr().err


@pytest.mark.skipif(not HAS_CUPTI, reason="needs cupti-python and an NVIDIA GPU (the device check runs it)")
def test_live_capture_of_a_cuda_program(tmp_path: Path) -> None:
    cp = pytest.importorskip("cupy", reason="the live capture test drives the GPU with CuPy")
    with cupti.record(tmp_path / "raw") as recording:
        x = cp.arange(1 << 20, dtype=cp.float32)
        (x * 2).sum().get()
    assert recording.counts.get("kernel", 0) >= 1 and recording.path is not None
    report = xprosql.ingest(recording.path, into=tmp_path / "run")
    assert report.ok
    run = xprosql.load(tmp_path / "run")
    assert run.sql("SELECT count(*) FROM kernels").rows()[0][0] == recording.counts["kernel"]
