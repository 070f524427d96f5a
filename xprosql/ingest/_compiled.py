"""When a file is decoded by the numba-compiled decoders, and saying so before they compile.

Both decoders of each format give the same tables; the compiled ones are three times faster per
byte but cost a fixed price in each process: loading their machine code from numba's cache
(about 0.7 s of CPU), or compiling it on the first run after an install (8-10 s of one core). So a
process that has not loaded them yet decodes a file below :data:`COMPILED_MIN_BYTES` without them,
and switches once it has decoded that much (a batch worker pays the price once, for many files).
A compilation is announced on stderr before it starts. ``XPROSQL_COMPILED=always`` or ``never``
overrides the choice (``XPROSQL_PURE_PYTHON`` is ``never``).

Example:
    >>> use_compiled("xspace", 900_000)      # doctest: +SKIP
    False
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from typing import Literal

__all__ = ["COMPILED_MIN_BYTES", "Format", "available", "use_compiled"]

Format = Literal["xspace", "kineto"]

# Measured crossovers of one process's CPU time, cached machine code (benchmarks/RESULTS.md, "whole
# process"): XSpace about 4 MB of file, Kineto about 1.5 MB of (gzipped) file.
COMPILED_MIN_BYTES: dict[str, int] = {"xspace": 4 << 20, "kineto": 3 << 19}
_MODULES: dict[str, str] = {"xspace": "xprosql.ingest._xspace_numba", "kineto": "xprosql.ingest._kineto_scan"}
_LABELS: dict[str, str] = {"xspace": "XSpace decoder", "kineto": "Kineto JSON scanner"}
# What compiling each takes on one core of the 2-core benchmark machine (benchmarks/RESULTS.md, "first run").
_COMPILE_SECONDS: dict[str, int] = {"xspace": 8, "kineto": 10}

_loaded: set[str] = set()
_decoded_without: dict[str, int] = {}


def available() -> bool:
    """True when the compiled decoders can run: numba is installed and not switched off."""
    if os.environ.get("XPROSQL_PURE_PYTHON") or os.environ.get("XPROSQL_COMPILED") == "never":
        return False
    return importlib.util.find_spec("numba") is not None


def use_compiled(kind: Format, size: int, *, needed: bool = False) -> bool:
    """Whether to decode a ``kind`` file of ``size`` bytes with the compiled decoder (announcing a compile).

    ``needed``: only the compiled decoder can do it (a mapped file, decoded a chunk at a time)."""
    if not available():
        return False
    done = _decoded_without.get(kind, 0)
    small = done + size < COMPILED_MIN_BYTES[kind]
    if kind not in _loaded and not needed and os.environ.get("XPROSQL_COMPILED") != "always" and small:
        _decoded_without[kind] = done + size
        return False
    if kind not in _loaded:
        _loaded.add(kind)
        _announce_compile(kind)
    return True


def _announce_compile(kind: str) -> None:
    # numba writes an index file per compiled function into its cache; without one it compiles.
    module = importlib.import_module(_MODULES[kind])
    try:
        missing = [name for name, value in vars(module).items()
                   if getattr(value, "_cache", None) is not None and not os.path.exists(value._cache._cache_file._index_path)]
    except AttributeError:  # a numba whose cache we cannot read: say nothing rather than guess
        return
    if missing:
        print(f"xprosql: compiling the {_LABELS[kind]} with numba ({len(missing)} functions); this happens once per "
              f"install and takes about {_COMPILE_SECONDS[kind]} s; files under {COMPILED_MIN_BYTES[kind] / 2**20:g} MB never wait for it",
              file=sys.stderr, flush=True)
