"""numba kernels of ingest, installed as ``ingest._native``: arrays and scalars in, arrays out.

Every kernel is ``@njit(nogil=True, cache=True)``; the public wrappers that validate
inputs live in the ``ingest`` package.
"""
