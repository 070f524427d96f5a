"""numba as xprosql's compiled loops load it: without SciPy's linear algebra.

The first function numba compiles or loads from its cache in a process imports ``numba.np.arraymath``, which asks
at import whether SciPy's BLAS is there by importing ``scipy.linalg`` (when SciPy is installed, as JAX installs
it): 0.13-0.17 s and 0.25 s of CPU (its BLAS threads start) and 27 MB, in every process that decodes with the
compiled decoders, for loops that do no linear algebra. Importing ``arraymath`` here with that check answering
"no BLAS" leaves it out. What the answer changes: numba-compiled ``np.convolve`` / ``np.correlate`` use numba's
own inner product instead of BLAS's (the same results); ``np.dot`` and the rest of ``numba.np.linalg`` check for
BLAS when they compile, as before. A process that imported ``arraymath`` before xprosql keeps its own answer.

Example:
    >>> from xprosql._numba import njit       # instead of ``from numba import njit``   # doctest: +SKIP
"""

from __future__ import annotations

import importlib
import sys

__all__ = ["njit"]


def _arraymath_without_blas() -> None:
    if "numba.np.arraymath" in sys.modules:
        return
    linalg = importlib.import_module("numba.np.linalg")
    check = getattr(linalg, "ensure_blas")  # noqa: B009  (numba is untyped)

    def no_blas() -> None:
        raise ImportError("xprosql: numba's BLAS check skipped (xprosql._numba)")

    # arraymath binds ensure_blas by name when it is imported and calls it once then; the original is back after.
    setattr(linalg, "ensure_blas", no_blas)  # noqa: B010
    try:
        arraymath = importlib.import_module("numba.np.arraymath")
    finally:
        setattr(linalg, "ensure_blas", check)  # noqa: B010
    setattr(arraymath, "ensure_blas", check)  # noqa: B010


_arraymath_without_blas()

from numba import njit  # noqa: E402  (after arraymath is in)
