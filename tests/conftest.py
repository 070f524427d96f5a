"""Shared fixtures: the real profiles in tests/data (see its README) and warehouses built from them."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

import pytest

import xprosql

# The real profiles the tests read, copied into the repository with their licences: a clone tests itself.
TEST_DATA = Path(__file__).resolve().parent / "data"
TPU_SAMPLE = TEST_DATA / "xspace" / "tpu_v6e_inference.xplane.pb"
GPU_SAMPLE = TEST_DATA / "xspace" / "gpu_v100_tf_bert.xplane.pb"
XSPACE_SAMPLES = {"tpu": TPU_SAMPLE, "gpu": GPU_SAMPLE}


def tree_digest(root: Path) -> dict[str, str]:
    """Every file below root with its content hash: equal digests mean byte-for-byte equal trees."""
    if not root.exists():
        return {}
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "<dir>"
        for p in sorted(root.rglob("*"))
    }


@pytest.fixture(scope="session")
def xspace_warehouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One warehouse holding both real XSpace samples."""
    root = tmp_path_factory.mktemp("wh") / "run"
    report = xprosql.ingest(list(XSPACE_SAMPLES.values()), into=root)
    assert report.ok, str(report)
    return root


@pytest.fixture(scope="session")
def jax_cpu_profile(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real XSpace written by JAX on this machine's CPU (skips without jax)."""
    from jax_profiles import jax_available, make_jax_cpu_profile

    if not jax_available():
        pytest.skip("jax is not installed (test extra): cannot generate a JAX CPU profile")
    return make_jax_cpu_profile(tmp_path_factory.mktemp("jaxlog"))


def analysis_text(name: str) -> str:
    """The runnable SQL of an analysis or a private module of the library (includes expanded)."""
    from xprosql.engine.library import library

    return library().text(library().module(name, private=True).id)


def bound_parameters(name: str, params: dict | None = None) -> dict:
    """``params`` completed with the module's defaults, only those its text uses (as the engine passes them)."""
    from xprosql.engine.library import library

    return library().runnable(library().module(name, private=True).id, params)[1]


# Every real profile of tests/data: the input of the catalogue contract and the golden tests.
ALL_SAMPLES = sorted([*(TEST_DATA / "xspace").glob("*.xplane.pb"), *(TEST_DATA / "kineto").glob("*.json.gz")])


@pytest.fixture(scope="session")
def samples_warehouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One warehouse holding every real sample of tests/data, unpacked."""
    assert len(ALL_SAMPLES) >= 15, f"real samples missing from {TEST_DATA}"
    root = tmp_path_factory.mktemp("samples") / "run"
    report = xprosql.ingest(ALL_SAMPLES, into=root, compact=False)
    assert report.ok and len(report.ingested) == len(ALL_SAMPLES), str(report)
    return root


def cohort_parameters(run: xprosql.Run) -> dict[str, list[str]]:
    """Two cohorts for the fleet comparisons: the XSpace profiles against the Kineto ones."""
    ids = dict(run.sql("SELECT format, list(profile_id ORDER BY profile_id) FROM profiles GROUP BY 1").rows())
    return {"baseline": ids["xspace"], "candidate": ids["kineto"]}


# Profiles as users bring them, generated on this machine (tests/wild_profiles.py): one warehouse each.
def _generated_warehouse(factory: pytest.TempPathFactory, name: str, make: Callable[[Path], Path | list[Path]],
                         files: int | None = None) -> Path:
    """A warehouse of what a wild_profiles generator writes (``files``: how many it must write)."""
    folder = factory.mktemp(name)
    written = make(folder / "log")
    traces = written if isinstance(written, list) else [written]
    report = xprosql.ingest(traces, into=folder / "run")
    assert report.ok and len(report.ingested) == len(traces) == (files or len(traces)), str(report)
    return folder / "run"


@pytest.fixture(scope="session")
def jax_sharded_warehouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """JAX on 8 host CPU devices with shard_map collectives, ingested."""
    from wild_profiles import make_jax_sharded_profile

    return _generated_warehouse(tmp_path_factory, "sharded", make_jax_sharded_profile)


@pytest.fixture(scope="session")
def gloo_ddp_warehouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Both ranks of a 2-rank PyTorch DDP run on gloo, ingested."""
    from wild_profiles import make_gloo_ddp_profiles

    return _generated_warehouse(tmp_path_factory, "gloo", make_gloo_ddp_profiles, files=2)


@pytest.fixture(scope="session")
def torch_training_warehouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small MLP's SGD training profiled by PyTorch on the CPU (record_shapes=True), ingested."""
    from wild_profiles import make_torch_training_profile

    return _generated_warehouse(tmp_path_factory, "torch_training", make_torch_training_profile)
