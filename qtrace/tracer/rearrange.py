"""NumPy's array rearrangements: flips, rotations, insertion and deletion, splits, diagonals.

Every function is built from recorded qtrace operations (nothing is evaluated behind the
caller's back), so it works inside ``qt.jit`` and is differentiated by ``qt.grad``.
``NUMPY_FUNCTIONS`` maps NumPy's functions to these (``__array_function__``),
``NUMPY_UFUNCS`` the NumPy ufuncs among them (``__array_ufunc__``).
"""

from __future__ import annotations

NUMPY_FUNCTIONS: dict = {}
NUMPY_UFUNCS: dict = {}

__all__: list[str] = []
