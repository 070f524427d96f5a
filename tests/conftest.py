"""Shared fixtures: the real profiles in tests/data (see its README) and warehouses built from them."""

from __future__ import annotations

import hashlib
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
