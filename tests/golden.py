"""Golden rows of every SQL module on the real samples of tests/data: what they are and how they are made.

A golden file ``tests/golden/<module id>.csv`` holds, for the module run with its default parameters
(cohorts for the fleet comparisons: ``conftest.cohort_parameters``) over a warehouse of every sample:

* ``# rows: N``: the row count;
* ``# sums: {...}``: the sum of every numeric column over all rows (so every row counts, not only
  those kept);
* the kept rows as CSV: all of them when there are at most ``KEPT_ROWS``, else an even sample, after
  sorting by every column. Nested values are JSON; paths are relative to the repository.

Regenerate after a deliberate change, then review the diff (``git diff tests/golden``)::

    python tests/golden.py [MODULE_ID_PREFIX ...]       # e.g. diagnose. (default: every module)
"""

from __future__ import annotations

import io
import json
import math
import sys
import tempfile
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa

import xprosql
from xprosql.engine.library import library

GOLDEN = Path(__file__).resolve().parent / "golden"
REPOSITORY = Path(__file__).resolve().parents[1]
KEPT_ROWS = 60
_REL_TOL = 1e-9


def module_rows(run: xprosql.Run, module_id: str, arguments: dict[str, Any]) -> pa.Table:
    """The rows of a module: a public one as users run it, a private one by its text."""
    if library().modules[module_id].private:
        return run.sql(*library().runnable(module_id)).arrow()
    return run.analysis(module_id, **arguments).arrow()


def _plain(table: pa.Table, warehouse: Path) -> pl.DataFrame:
    """Strings, numbers and booleans only: nested values as JSON, paths without this machine's folders."""
    columns: dict[str, pl.Series] = {}
    for name, column in zip(table.column_names, table.columns):
        kind = column.type
        if pa.types.is_dictionary(kind):
            column, kind = column.cast(pa.string()), pa.string()
        if pa.types.is_nested(kind) or pa.types.is_binary(kind):
            values = [None if v is None else json.dumps(v, sort_keys=True, default=str) for v in column.to_pylist()]
            columns[name] = pl.Series(name, values, pl.String)
            continue
        series = pl.Series(name, column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column)
        if series.dtype == pl.String:
            series = series.str.replace_all(str(warehouse), "<warehouse>", literal=True).str.replace_all(
                str(REPOSITORY) + "/", "", literal=True)
        elif series.dtype.is_temporal():
            series = series.cast(pl.String)
        columns[name] = series
    return pl.DataFrame(columns)


def _without_ingest_times(frame: pl.DataFrame) -> pl.DataFrame:
    """When each run of the tests ingested the profiles differs: ``ingested_at`` and the times of rows whose clock it
    is (``clock = 'ingested'``: profiles without a date of their own, fleet.snapshots) read ``<ingested>``."""
    if "ingested_at" not in frame.columns:
        return frame
    frame = frame.with_columns(pl.lit("<ingested>").alias("ingested_at"))
    if "clock" not in frame.columns:
        return frame
    ingested = pl.col("clock") == "ingested"
    timed = [c for c in ("time_ns", "end_ns", "started_at") if c in frame.columns]
    return frame.with_columns(pl.when(ingested).then(pl.lit("<ingested>")).otherwise(pl.col(c).cast(pl.String)).alias(c)
                              for c in timed)


def golden_text(table: pa.Table, warehouse: Path) -> str:
    """The golden file's text for the rows of one module."""
    frame = _without_ingest_times(_plain(table, warehouse))
    numeric = [c for c, t in frame.schema.items() if t.is_numeric()]
    # fsum: the correctly rounded sum, whatever the rows' order (keys near 2^60 of both signs cancel)
    sums = {c: math.fsum(frame[c].cast(pl.Float64).drop_nulls().to_list()) for c in numeric}
    ordered = frame.sort(pl.all(), nulls_last=True) if frame.width else frame
    step = max(1, math.ceil(ordered.height / KEPT_ROWS))
    kept = ordered.gather_every(step) if ordered.height else ordered
    out = io.StringIO()
    out.write(f"# rows: {frame.height}\n# sums: {json.dumps(sums, sort_keys=True)}\n")
    out.write(kept.write_csv(float_precision=None) if kept.width else "\n")
    return out.getvalue()


def _parse(text: str) -> tuple[int, dict[str, float], list[list[str | None]], list[str]]:
    lines = text.split("\n", 2)
    rows = int(lines[0].removeprefix("# rows: "))
    sums = json.loads(lines[1].removeprefix("# sums: "))
    body = lines[2]
    if not body.strip():
        return rows, sums, [], []
    frame = pl.read_csv(io.StringIO(body), infer_schema=False)
    return rows, sums, [list(r) for r in frame.iter_rows()], frame.columns


def _close(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return a is b
    try:
        x, y = float(a), float(b)
    except ValueError:
        return a == b
    return x == y or (math.isnan(x) and math.isnan(y)) or math.isclose(x, y, rel_tol=_REL_TOL, abs_tol=1e-12)


def differences(expected: str, actual: str) -> list[str]:
    """What differs between two golden texts (floats equal within 1e-9 relative)."""
    e_rows, e_sums, e_kept, e_columns = _parse(expected)
    a_rows, a_sums, a_kept, a_columns = _parse(actual)
    found = []
    if e_columns != a_columns:
        found.append(f"columns: {e_columns} != {a_columns}")
    if e_rows != a_rows:
        found.append(f"rows: {e_rows} != {a_rows}")
    for column in sorted(set(e_sums) | set(a_sums)):
        if not _close(e_sums.get(column), a_sums.get(column)):
            found.append(f"sum of {column}: {e_sums.get(column)} != {a_sums.get(column)}")
    if len(e_kept) != len(a_kept):
        found.append(f"kept rows: {len(e_kept)} != {len(a_kept)}")
    for index, (e, a) in enumerate(zip(e_kept, a_kept)):
        bad = [f"{c}: {x!r} != {y!r}" for c, x, y in zip(e_columns, e, a) if not _close(x, y)]
        if bad:
            found.append(f"kept row {index}: " + "; ".join(bad[:5]))
    return found[:20]


def regenerate(prefixes: tuple[str, ...] = ("",)) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from conftest import ALL_SAMPLES, cohort_parameters

    GOLDEN.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder) / "run"
        report = xprosql.ingest(ALL_SAMPLES, into=root, compact=False)
        assert report.ok, str(report)
        with xprosql.load(root) as run:
            for module_id in library().modules:
                if not module_id.startswith(prefixes):
                    continue
                arguments = cohort_parameters(run) if module_id.startswith("fleet.compare") else {}
                text = golden_text(module_rows(run, module_id, arguments), root)
                (GOLDEN / f"{module_id}.csv").write_text(text)
                print(f"{module_id}: {text.splitlines()[0]}")


if __name__ == "__main__":
    regenerate(tuple(sys.argv[1:]) or ("",))
