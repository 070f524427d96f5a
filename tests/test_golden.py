"""Golden rows per SQL module on the real samples (``tests/golden``; see ``tests/golden.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import cohort_parameters
from golden import GOLDEN, differences, golden_text, module_rows

import xprosql
from xprosql.engine.library import library

MODULES = list(library().modules)


@pytest.fixture(scope="module")
def run(samples_warehouse: Path) -> xprosql.Run:
    return xprosql.load(samples_warehouse)


def test_every_module_has_a_golden_file() -> None:
    assert sorted(p.stem for p in GOLDEN.glob("*.csv")) == sorted(MODULES)


# Over every sample each, the rules and the graph modules take minutes: slow, as their own tests (CI runs them).
_SLOW_AREAS = ("diagnose.", "critical_path.", "names.")


@pytest.mark.parametrize("module_id", [pytest.param(m, marks=pytest.mark.slow) if m.startswith(_SLOW_AREAS) else m
                                       for m in MODULES])
def test_module_rows_equal_the_golden_file(run: xprosql.Run, samples_warehouse: Path, module_id: str) -> None:
    arguments = cohort_parameters(run) if module_id.startswith("fleet.compare") else {}
    actual = golden_text(module_rows(run, module_id, arguments), samples_warehouse)
    expected = (GOLDEN / f"{module_id}.csv").read_text()
    assert differences(expected, actual) == [], "regenerate with `python tests/golden.py` if the change is meant"


def test_a_changed_value_is_a_difference() -> None:
    text = "# rows: 2\n# sums: {\"x\": 3.0}\nname,x\na,1.0\nb,2.0\n"
    assert differences(text, text) == []
    assert differences(text, text.replace("b,2.0", "b,2.5")) == ["kept row 1: x: '2.0' != '2.5'"]
    assert differences(text, text.replace("1.0", "1.0000000000001")) == []
    assert differences(text, text.replace("# rows: 2", "# rows: 3")) == ["rows: 2 != 3"]
