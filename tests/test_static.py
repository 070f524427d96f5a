"""The linter and the type checker, as part of the test command (configured in pyproject.toml)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[1]


def _tool(name: str) -> str:
    found = shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name)
    assert found, f"{name} is missing: it comes with the test extra (pip install '.[test]')"
    return found


def test_ruff_finds_nothing() -> None:
    done = subprocess.run([_tool("ruff"), "check", "xprosql", "tests", "benchmarks"], cwd=REPOSITORY,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_mypy_finds_nothing() -> None:
    done = subprocess.run([_tool("mypy"), "--no-error-summary"], cwd=REPOSITORY, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_package_is_marked_typed() -> None:
    assert (REPOSITORY / "xprosql" / "py.typed").is_file()
