"""When a file is decoded by the numba-compiled decoders, and saying so before they compile.

Both decoders of each format give the same tables; the compiled ones are about three times faster
per byte but cost a fixed price in each process: loading their machine code from numba's cache
(about 0.7 s of CPU), or compiling it on the first run after an install (8-10 s of one core). The
choice is made per file:

* a file of at least :data:`COMPILED_MIN_BYTES` (the crossover of one process's CPU time) is decoded
  by the compiled decoder, compiling it first when numba's cache has no machine code for it (said on
  stderr before it starts, naming the file);
* a smaller file is decoded without the compiled decoder, unless this process has already loaded
  it, or has already decoded a crossover's worth of small files of the format and finds the machine
  code cached (loading it then pays for itself on the files to come: a batch of small files on a
  warm cache), or has already decoded :data:`COMPILE_AFTER_BYTES` of small files of the format
  without it, which cost as much more as a compilation does (a batch of small files after an
  install; the first ingest of the bundled samples stays far below it and compiles nothing);
* ``XPROSQL_COMPILED=always`` or ``never`` overrides the choice (``XPROSQL_PURE_PYTHON`` is ``never``).

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

__all__ = ["COMPILED_MIN_BYTES", "COMPILE_AFTER_BYTES", "Format", "available", "use_compiled"]

Format = Literal["xspace", "kineto"]

# Measured crossovers of one process's CPU time, cached machine code (benchmarks/RESULTS.md, "whole
# process"): XSpace about 4 MB of file, Kineto about 1.5 MB of (gzipped) file.
COMPILED_MIN_BYTES: dict[str, int] = {"xspace": 4 << 20, "kineto": 3 << 19}
# Small files' bytes whose decoding without the compiled decoder cost as much more as compiling it does (so a batch
# pays at most twice what it would had it known its size): with it, the whole ingest of small XSpace files takes
# about 0.105 s less a MB of file, of Kineto traces 0.19 s (30 corpus files each, in one process, 3 Dec 2026);
# compiling takes 8 and 10 s.
COMPILE_AFTER_BYTES: dict[str, int] = {"xspace": 76 << 20, "kineto": 52 << 20}
_MODULES: dict[str, str] = {"xspace": "xprosql.ingest._xspace_numba", "kineto": "xprosql.ingest._kineto_scan"}
# Compiled functions only some files run (Kineto: a float the scan cannot read exactly, a string table that outgrows
# its first room), compiled on their first call (under half a second each): the decoder counts as cached without
# them, else a file that never needed one would keep every later process's small files off the compiled decoder.
_ON_DEMAND: dict[str, frozenset[str]] = {"xspace": frozenset(), "kineto": frozenset({"gather", "_table"})}
_LABELS: dict[str, str] = {"xspace": "XSpace decoder", "kineto": "Kineto JSON scanner"}
_FILES: dict[str, str] = {"xspace": "XSpace files", "kineto": "Kineto traces"}
# What compiling each takes on one core of the 2-core benchmark machine (benchmarks/RESULTS.md, "first run").
_COMPILE_SECONDS: dict[str, int] = {"xspace": 8, "kineto": 10}

_loaded: set[str] = set()
_not_cached: set[str] = set()
_decoded_without: dict[str, int] = {}


def available() -> bool:
    """True when the compiled decoders can run: numba is installed and not switched off."""
    if os.environ.get("XPROSQL_PURE_PYTHON") or os.environ.get("XPROSQL_COMPILED") == "never":
        return False
    return importlib.util.find_spec("numba") is not None


def use_compiled(kind: Format, size: int, *, needed: bool = False, source: str | None = None) -> bool:
    """Whether to decode the ``kind`` file ``source`` of ``size`` bytes with the compiled decoder (see the module).

    ``needed``: only the compiled decoder can do it (a mapped file, decoded a chunk at a time). A
    compilation this causes is announced on stderr first."""
    if not available():
        return False
    if kind in _loaded:
        return True
    forced = os.environ.get("XPROSQL_COMPILED") == "always"
    if forced or needed or size >= COMPILED_MIN_BYTES[kind]:
        why = "XPROSQL_COMPILED=always" if forced else "only the compiled decoder streams a mapped file" if needed else None
        _loaded.add(kind)
        _announce_compile(kind, size, source, why)
        return True
    # A small file: a cached decoder once enough bytes went without it, a compilation once as much time did.
    done = _decoded_without[kind] = _decoded_without.get(kind, 0) + size
    if done >= COMPILE_AFTER_BYTES[kind]:
        _loaded.add(kind)
        _announce_compile(kind, size, source, f"this process decoded {done / 2**20:.0f} MB of smaller {_FILES[kind]} "
                                              "without it, which cost as much more")
        return True
    if done < COMPILED_MIN_BYTES[kind] or kind in _not_cached:
        return False
    if not _missing(kind):
        _loaded.add(kind)
        return True
    _not_cached.add(kind)
    return False


def _missing(kind: Format) -> list[str] | None:
    """The compiled functions of the ``kind`` decoder numba's cache holds no valid machine code for (it would
    compile them on their first call), but those only some files run (:data:`_ON_DEMAND`); None when this
    numba's cache cannot be read (then assume all are missing)."""
    module = importlib.import_module(_MODULES[kind])
    try:
        # An index whose source stamp or numba version differs loads as empty: numba recompiles then.
        return [name for name, value in vars(module).items()
                if getattr(value, "_cache", None) is not None and name not in _ON_DEMAND[kind]
                and not value._cache._cache_file._load_index()]
    except (AttributeError, OSError):
        return None


def _announce_compile(kind: Format, size: int, source: str | None, why: str | None) -> None:
    missing = _missing(kind)
    if not missing:  # cached (or a numba whose cache we cannot read: say nothing rather than guess)
        return
    which = f"{source} ({size / 2**20:.1f} MB)" if source else f"a {size / 2**20:.1f} MB file"
    reason = f"; {why}" if why else (f"; {_FILES[kind]} under {COMPILED_MIN_BYTES[kind] / 2**20:g} MB wait for it only "
                                     f"after {COMPILE_AFTER_BYTES[kind] >> 20} MB of them")
    print(f"xprosql: compiling the {_LABELS[kind]} with numba ({len(missing)} functions) to decode {which}: once per "
          f"install, about {_COMPILE_SECONDS[kind]} s{reason}", file=sys.stderr, flush=True)
