"""Which files the numba-compiled decoders decode (xprosql/ingest/_compiled.py): chosen per file, and a
file under the crossover never waits for a compilation (issue 30, item 2)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from xprosql.ingest import _compiled

DATA = Path(__file__).parent / "data"
needs_numba = pytest.mark.skipif(importlib.util.find_spec("numba") is None, reason="numba is not installed")


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    """A process that has loaded no compiled decoder and decoded nothing yet, with the choice left to xprosql."""
    monkeypatch.setattr(_compiled, "_loaded", set())
    monkeypatch.setattr(_compiled, "_not_cached", set())
    monkeypatch.setattr(_compiled, "_decoded_without", {})
    monkeypatch.delenv("XPROSQL_COMPILED", raising=False)
    monkeypatch.delenv("XPROSQL_PURE_PYTHON", raising=False)


@needs_numba
@pytest.mark.usefixtures("fresh")
def test_small_files_never_compile(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(_compiled, "_missing", lambda kind: ["fill"])  # nothing cached: it would compile
    assert not any(_compiled.use_compiled("xspace", 3 << 20, source=f"{i}.xplane.pb") for i in range(10))
    assert capsys.readouterr().err == ""


@needs_numba
@pytest.mark.usefixtures("fresh")
def test_small_files_compile_once_going_without_cost_as_much(monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(_compiled, "_missing", lambda kind: ["fill"])  # nothing cached: it would compile
    size = 3 << 20
    before = -(-_compiled.COMPILE_AFTER_BYTES["xspace"] // size) - 1  # files decoded without it
    assert not any(_compiled.use_compiled("xspace", size, source=f"{i}.xplane.pb") for i in range(before))
    assert capsys.readouterr().err == ""
    assert _compiled.use_compiled("xspace", size, source="next.xplane.pb")
    err = capsys.readouterr().err
    assert "compiling the XSpace decoder with numba (1 functions) to decode next.xplane.pb (3.0 MB)" in err
    assert f"this process decoded {(before + 1) * 3} MB of smaller XSpace files without it" in err
    assert not _compiled.use_compiled("kineto", 1 << 20)  # per format


@needs_numba
@pytest.mark.usefixtures("fresh")
def test_small_files_load_cached_code_once_they_repay_it(monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(_compiled, "_missing", lambda kind: [])  # machine code cached: loading costs ~0.7 s
    choices = [_compiled.use_compiled("kineto", 1 << 19) for _ in range(5)]
    assert choices == [False, False, True, True, True]  # 1.5 MB decoded without it, then with it
    assert capsys.readouterr().err == ""


@needs_numba
@pytest.mark.usefixtures("fresh")
def test_a_large_file_compiles_and_says_which(monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(_compiled, "_missing", lambda kind: ["fill", "layout"])
    assert not _compiled.use_compiled("xspace", 1 << 20, source="small.xplane.pb")
    assert _compiled.use_compiled("xspace", 5 << 20, source="big.xplane.pb")
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "compiling the XSpace decoder with numba (2 functions) to decode big.xplane.pb (5.0 MB)" in err
    assert "XSpace files under 4 MB wait for it only after 76 MB of them" in err
    assert _compiled.use_compiled("xspace", 1 << 10)  # loaded now: small files use it too, silently
    assert capsys.readouterr().err == ""


@needs_numba
def test_a_batch_of_small_samples_compiles_nothing(tmp_path: Path) -> None:
    """Samples whose sizes add up past both crossovers (4.4 MB of XSpace, 2 MB of Kineto), every file under
    its own, as a first ingest after an install: an empty numba cache stays empty, and nothing is announced."""
    kineto = [DATA / "kineto" / f"{name}.json.gz" for name in ("a100_nccl_rank0", "b200_eager_nccl_rank0", "h100_qwen1.5_0.5b")]
    assert sum(path.stat().st_size for path in kineto) > _compiled.COMPILED_MIN_BYTES["kineto"]
    assert sum(path.stat().st_size for path in (DATA / "xspace").glob("*.xplane.pb")) > _compiled.COMPILED_MIN_BYTES["xspace"]
    cache = tmp_path / "numba"
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache)}
    env.pop("XPROSQL_COMPILED", None)
    env.pop("XPROSQL_PURE_PYTHON", None)
    done = subprocess.run([sys.executable, "-m", "xprosql.cli", "ingest", str(DATA / "xspace"), *map(str, kineto),
                           "--into", str(tmp_path / "run"), "--quiet", "--compact", "never"],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "7 ingested" in done.stdout + done.stderr
    assert "compiling" not in done.stderr
    assert not cache.exists() or not any(path.is_file() for path in cache.rglob("*"))


@needs_numba
@pytest.mark.parametrize("kineto", ["a100_nccl_rank0", "cpu_only"])
def test_one_compiled_decode_caches_the_whole_decoder(tmp_path: Path, kineto: str) -> None:
    """After one file of each format decoded by the compiled decoders on an empty numba cache, the next process
    finds their machine code cached: small files then load it. A function compiled only for some inputs and left
    uncached made every later process decode small Kineto traces without the scanner, 3x slower: the string
    table's growth (the samples never outgrow its first room) and the float fix-up (the CPU-only trace has no float
    the scan must fix) are compiled on demand instead."""
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "numba"), "XPROSQL_COMPILED": "always"}
    env.pop("XPROSQL_PURE_PYTHON", None)
    samples = [DATA / "kineto" / f"{kineto}.json.gz", DATA / "xspace" / "tpu_v6e_inference.xplane.pb"]
    done = subprocess.run([sys.executable, "-m", "xprosql.cli", "ingest", *map(str, samples), "--into",
                           str(tmp_path / "run"), "--quiet", "--compact", "never"],
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("compiling the") == 2
    check = ("from xprosql.ingest import _compiled\n"
             "print({kind: _compiled._missing(kind) for kind in _compiled._MODULES})")
    missing = subprocess.run([sys.executable, "-c", check], env=env, capture_output=True, text=True, timeout=120)
    assert missing.returncode == 0, missing.stderr
    assert missing.stdout.strip() == "{'xspace': [], 'kineto': []}"


@needs_numba
@pytest.mark.skipif(importlib.util.find_spec("scipy") is None, reason="SciPy is not installed: nothing to leave out")
def test_the_compiled_decoders_leave_scipy_linear_algebra_out(tmp_path: Path) -> None:
    """numba's first compiled function imports ``numba.np.arraymath``, whose check for BLAS imported ``scipy.linalg``
    (0.15 s and 27 MB in every process decoding with the compiled decoders); ``xprosql._numba`` answers it without
    SciPy. The file decodes with the compiled decoder, ``scipy.linalg`` stays out, numba's own check is back."""
    code = ("import sys\n"
            "import xprosql\n"
            "from xprosql.ingest import _compiled\n"
            f"xprosql.ingest({str(DATA / 'xspace' / 'tpu_v6e_inference.xplane.pb')!r}, into={str(tmp_path / 'run')!r}, "
            "compact=False)\n"
            "import numba.np.arraymath as arraymath, numba.np.linalg as linalg\n"
            "print(sorted(_compiled._loaded), 'scipy.linalg' in sys.modules, arraymath.ensure_blas is linalg.ensure_blas)\n")
    env = {**os.environ, "XPROSQL_COMPILED": "always"}
    env.pop("XPROSQL_PURE_PYTHON", None)
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['xspace'] False True"
