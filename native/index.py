"""Unsigned indexing for byte scans.

numba wraps negative indices (``a[-1]``) with a compare and a branch on every signed
index; an unsigned index skips that, which made the byte loops of the text kernel up to
twice as fast.  Kernels write ``buf[_u(i)]`` where ``i`` is known to be >= 0.
"""

import numpy as np

from .jit import inline


@inline
def _u(i):
    return np.uint64(i)
