"""Table schemas and their documentation."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from xprosql.models import TABLES, column_unit
from xprosql.models.tables import tables_markdown


def test_docs_table_reference_is_current() -> None:
    docs = Path(__file__).resolve().parents[1] / "docs" / "tables.md"
    assert docs.read_text() == tables_markdown()


def test_every_column_is_described_and_times_are_integer_ps() -> None:
    for name, schema in TABLES.items():
        for field in schema:
            assert (field.metadata or {}).get(b"description"), f"{name}.{field.name} has no description"
            if field.name.endswith("_ps"):
                assert field.type == pa.int64() and column_unit(name, field.name) == "ps", f"{name}.{field.name}"
