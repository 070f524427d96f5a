"""The analysis engine: the SQL library, connections over a snapshot, how an analysis runs, its result.

Layers, each importing only those before it: :mod:`~xprosql.engine.library` (the modules of
``sql/``), :mod:`~xprosql.engine.functions` (SQL functions every connection has),
:mod:`~xprosql.engine.connection` (the one place views are made), :mod:`~xprosql.engine.result`,
:mod:`~xprosql.engine.executor` (:class:`Engine`), :mod:`~xprosql.engine.dask` (a backend).
:mod:`xprosql.queries` is written against :class:`Engine`; :class:`xprosql.Run` is the facade.
"""

from __future__ import annotations

from xprosql.engine.executor import Engine, derive_stored_tables, profiles_where
from xprosql.engine.library import Column, Module, Parameter, library
from xprosql.engine.result import Result

__all__ = [
    "Column", "Engine", "Module", "Parameter", "Result", "derive_stored_tables", "library", "profiles_where",
]
