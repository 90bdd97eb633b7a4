"""Sparse CSR columns of a table, from what the parse kernels write.

The text and pb parsers write each sparse feature's values straight into a region of its own
(``Columns``), sized by ``region_room``; ``region_offsets`` makes the table's offsets of where its
rows end (and applies cutoffs).
"""

import numpy as np

from .bundles import bundle
from .jit import brief, kernel

# The sparse columns of a chunk: ids, high ids (length 0 when the format has none), values (the pb decoder writes
# them as their float32 bits), and per feature where its region starts, is filled up to and ends.
Columns = bundle("Columns", keys="i8[:]", hkeys="i8[:]", values="f4[:]", first="i8[:]", cur="i8[:]", lim="i8[:]")


@kernel
def region_offsets(first, ends, feats, nrows, cutoff, keys, hkeys, values, offsets):
    """Fill ``offsets`` (int64 ``[F_t, nrows + 1]``) of one table from columns written in regions.

    Feature ``j`` of the table (``feats[j]`` among all sparse features) has its values in row
    order from ``first[feats[j]]`` of ``keys``/``hkeys``/``values``, and its row ``r`` ends at
    ``ends[r, feats[j]]``.  A row keeps at most ``abs(cutoff[j])`` values when that is not 0: the first ones
    when it is positive, the last when negative, moved down in place, so the kept ones of the feature stay
    contiguous from ``first``.
    ``hkeys`` of length 0 means no high keys are kept.
    """
    with_h = len(hkeys) > 0
    for j in range(len(feats)):
        f = feats[j]
        offsets[j, 0] = first[f]
        cut = cutoff[j]
        if cut == 0:
            for r in range(nrows):
                offsets[j, r + 1] = ends[r, f]
            continue
        lim = abs(cut)
        w = first[f]
        a = first[f]
        for r in range(nrows):
            b = ends[r, f]
            n = min(b - a, lim)
            src = a if cut > 0 else b - n
            if src != w:  # the first rows that lose nothing are already in place
                for i in range(n):
                    keys[w + i] = keys[src + i]
                    values[w + i] = values[src + i]
                if with_h:
                    for i in range(n):
                        hkeys[w + i] = hkeys[src + i]
            w += n
            offsets[j, r + 1] = w
            a = b


@brief
def region_room(ids, seen_bytes, filled, value_bytes, floor, spare, first, cur, lim):
    """Size each sparse feature's region for decoding ``filled`` bytes: ``first[f]:lim[f]``, ``cur`` set to
    ``first``; returns the ids all regions hold.  Feature ``f`` gets its ``ids[f]`` of the ``seen_bytes``
    decoded so far scaled to ``filled`` bytes, a fifth more and ``spare``, at least ``floor[f]``; before any
    byte is decoded, an even share of the most ``filled`` bytes hold (a value takes ``value_bytes`` or more).
    One call instead of a few numpy operations: after a chunk's decoding has been through the caches, each
    of those took ~5-20 us."""
    n = len(ids)
    scale = 1.2 * filled / seen_bytes if seen_bytes else 0.0
    even = filled // (value_bytes * max(n, 1))
    total = 0
    for f in range(n):
        room = (np.int64(ids[f] * scale) if seen_bytes else even) + spare
        room = max(room, floor[f])
        first[f] = total
        cur[f] = total
        total += room
        lim[f] = total
    return total


@brief
def region_decoded(ids, first, cur, floor, consumed):
    """Count the ids a chunk's decoding wrote (``cur - first``) into ``ids``; a chunk that decoded anything
    clears the floors of ``region_room``."""
    for f in range(len(ids)):
        ids[f] += cur[f] - first[f]
        if consumed:
            floor[f] = 0
