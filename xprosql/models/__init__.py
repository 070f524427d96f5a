"""Table schemas of the warehouse and hardware peak models."""

from xprosql.models.tables import TABLES, column_unit, table_schema

__all__ = ["TABLES", "column_unit", "table_schema"]
