"""Feature-name lookup inside kernels: an open-addressing table over name bytes.

Built once per reader in Python (``build_name_table``), probed per feature entry in the
parse kernels (``lookup_name``) without creating a Python object.
"""

import numpy as np

from .bundles import bundle
from .index import _u
from .jit import helper, inline

# what build_name_table returns, passed to the kernels as one argument
NameTable = bundle("NameTable", slots="i4[:]", names="u1[:]", offsets="i8[:]")

_FNV_OFFSET = np.uint64(0xCBF29CE484222325)
_FNV_PRIME = np.uint64(0x100000001B3)


@helper
def fnv1a(buf, i, end):
    """64-bit FNV-1a hash of ``buf[i:end]``."""
    h = _FNV_OFFSET
    for k in range(i, end):
        h = (h ^ np.uint64(buf[_u(k)])) * _FNV_PRIME
    return h


@helper
def lookup_name(buf, i, end, slots, names, name_offsets):
    """Index of the name ``buf[i:end]`` in the table, or -1 when it is not declared."""
    mask = np.uint64(len(slots) - 1)
    s = fnv1a(buf, i, end) & mask
    while True:
        f = slots[s]
        if f < 0:
            return -1
        if is_name(buf, i, end, f, names, name_offsets):
            return f
        s = (s + np.uint64(1)) & mask


@inline
def is_name(buf, i, end, f, names, name_offsets):
    """Whether ``buf[i:end]`` is name ``f`` of the table."""
    a = name_offsets[f]
    n = end - i
    if name_offsets[f + 1] - a != n:
        return False
    for k in range(n):
        if names[_u(a + k)] != buf[_u(i + k)]:
            return False
    return True


def build_name_table(names):
    """Return the ``NameTable`` ``(slots, names_blob, name_offsets)`` of the given list of names (str).

    ``slots`` is int32, a power of two at least 4x the number of names, -1 where empty;
    name ``j`` is ``names_blob[name_offsets[j]:name_offsets[j+1]]`` (UTF-8).
    """
    encoded = [n.encode("utf-8") for n in names]
    size = 8
    while size < 4 * max(len(encoded), 1):
        size *= 2
    slots = np.full(size, -1, dtype=np.int32)
    blob = np.frombuffer(b"".join(encoded), dtype=np.uint8).copy()
    offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([len(e) for e in encoded])
    for j, e in enumerate(encoded):
        arr = np.frombuffer(e, dtype=np.uint8)
        s = int(fnv1a(arr, 0, len(arr))) & (size - 1)
        while slots[s] >= 0:
            s = (s + 1) & (size - 1)
        slots[s] = j
    return NameTable(slots, blob, offsets).checked()
