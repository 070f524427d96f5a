"""Python entry points of the analyses, written against :class:`xprosql.engine.Engine`.

Each module takes an engine (``run.engine`` of a :class:`xprosql.Run`, or one made directly) and
returns a :class:`xprosql.Result`: :mod:`~xprosql.queries.roofline` (with a Polars twin and a chart),
:mod:`~xprosql.queries.bottlenecks`, :mod:`~xprosql.queries.hta`, :mod:`~xprosql.queries.utilization`,
and :mod:`~xprosql.queries.fleet`. What the SQL library holds: :func:`xprosql.analyses`.
"""
