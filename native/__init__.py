"""numba kernels of ingest, installed as ``ingest._native``: arrays and scalars in, arrays out.

Every kernel is compiled with a decorator of ``jit.py`` (``kernel`` for the top-level ones) and cached on disk;
the public wrappers that validate inputs live in the ``ingest`` package.
"""
