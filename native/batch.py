"""Kernels that build batches from blocks: row-range copies, aux-table ranges, indicators."""
from numba import njit

from .jit import helper


@njit(nogil=True, cache=True)
def copy_sparse_ranges(src_offsets, src_keys, src_hkeys, src_values, dsl_keys, dsl_values, from_dsl, lo, hi,
                       nranges, row0, pair, key_base, value_base, dst_offsets, dst_keys, dst_pairs, dst_values):
    """Append rows ``lo[g]:hi[g]`` (g < nranges) of every sparse feature of a table at row ``row0``.

    ``dst_offsets[f]`` (int64 ``[R + 1]``) holds row offsets local to feature ``f``;
    ``dst_offsets[f, row0]`` must already be set.  Feature ``f`` writes its values at
    ``value_base[f] + local offset``, and its ids at ``key_base[f] + local offset`` either
    into ``dst_pairs`` as ``(hkey, key)`` when ``pair[f]`` or into ``dst_keys``.
    ``src_hkeys`` of length 0 means all high words are 0.  Features with ``from_dsl[f]``
    (when it is not empty) are read from ``dsl_keys``/``dsl_values``, high words 0.
    Returns the next free row.
    """
    has_hkeys = len(src_hkeys) > 0
    row = row0
    for g in range(nranges):
        r0 = lo[g]
        r1 = hi[g]
        for f in range(src_offsets.shape[0]):
            s0 = src_offsets[f, r0]
            s1 = src_offsets[f, r1]
            cur = dst_offsets[f, row]
            vb = value_base[f] + cur
            kb = key_base[f] + cur
            dsl = len(from_dsl) > 0 and from_dsl[f]
            keys = dsl_keys if dsl else src_keys
            values = dsl_values if dsl else src_values
            for i in range(s1 - s0):
                dst_values[vb + i] = values[s0 + i]
            if pair[f]:
                for i in range(s1 - s0):
                    dst_pairs[kb + i, 0] = src_hkeys[s0 + i] if has_hkeys and not dsl else 0
                    dst_pairs[kb + i, 1] = keys[s0 + i]
            else:
                for i in range(s1 - s0):
                    dst_keys[kb + i] = keys[s0 + i]
            for r in range(r0, r1):
                dst_offsets[f, row + r - r0 + 1] = cur + src_offsets[f, r + 1] - s0
        row += r1 - r0
    return row


@njit(nogil=True, cache=True)
def copy_dense_ranges(src, lo, hi, nranges, dst, row0):
    """Append rows ``lo[g]:hi[g]`` of a dense matrix at row ``row0`` of ``dst``; returns the next row."""
    row = row0
    for g in range(nranges):
        for r in range(lo[g], hi[g]):
            for c in range(src.shape[1]):
                dst[row, c] = src[r, c]
            row += 1
    return row


@njit(nogil=True, cache=True)
def group_ranges(group_offsets, r0, r1, lo, hi):
    """Cut rows ``r0:r1`` of table 0 at group starts into ``lo``/``hi``; returns the number of ranges."""
    g = 0
    lo_g = r0
    # first group start after r0
    k = 0
    while k < len(group_offsets) and group_offsets[k] <= r0:
        k += 1
    while k < len(group_offsets) and group_offsets[k] < r1:
        lo[g] = lo_g
        hi[g] = group_offsets[k]
        g += 1
        lo_g = group_offsets[k]
        k += 1
    lo[g] = lo_g
    hi[g] = r1
    return g + 1


@njit(nogil=True, cache=True)
def refer_ranges(refer, lo, hi, nranges, next_lo, next_hi):
    """For each range of rows, the contiguous range of next-table rows its rows refer to (0:0 when empty)."""
    for g in range(nranges):
        if hi[g] <= lo[g]:
            next_lo[g] = 0
            next_hi[g] = 0
            continue
        m = refer[lo[g]]
        x = m
        for r in range(lo[g] + 1, hi[g]):
            v = refer[r]
            if v < m:
                m = v
            if v > x:
                x = v
        next_lo[g] = m
        next_hi[g] = x + 1


@njit(nogil=True, cache=True)
def write_indicators(refer, lo, hi, next_lo, next_hi, nranges, out, row0, packed0):
    """Indicators of rows ``lo[g]:hi[g]``: packed next-table rows before the range's + refer - min refer.

    ``row0`` is the first output row, ``packed0`` the next-table rows already packed in
    the batch.  Returns ``(next row, next packed)``.
    """
    row = row0
    packed = packed0
    for g in range(nranges):
        for r in range(lo[g], hi[g]):
            out[row] = packed + refer[r] - next_lo[g]
            row += 1
        packed += next_hi[g] - next_lo[g]
    return row, packed


@njit(nogil=True, cache=True)
def fixed_width_rows(blob, offsets, out):
    """Write item ``r`` of a blob (``blob[offsets[r]:offsets[r+1]]``) into row ``r`` of ``out``, zero-padded."""
    for r in range(out.shape[0]):
        a = offsets[r]
        n = offsets[r + 1] - a
        for k in range(n):
            out[r, k] = blob[a + k]
        for k in range(n, out.shape[1]):
            out[r, k] = 0


@helper
def count_ranges(offsets, lo, hi, nranges, counts):
    """Add to ``counts[f]`` the values of feature ``f`` in rows ``lo[g]:hi[g]`` (g < nranges)."""
    for f in range(offsets.shape[0]):
        c = 0
        for g in range(nranges):
            c += offsets[f, hi[g]] - offsets[f, lo[g]]
        counts[f] += c


@helper
def feature_bases(counts, pair, key_base, value_base):
    """Where each feature's ids and values go in a table's arrays; returns ``(keys, pairs, values)`` totals.

    Values of every feature share one array; ids go to the ``(hkey, key)`` pairs array when
    ``pair[f]``, else to the keys array.
    """
    nk = npair = nv = 0
    for f in range(len(counts)):
        value_base[f] = nv
        nv += counts[f]
        if pair[f]:
            key_base[f] = npair
            npair += counts[f]
        else:
            key_base[f] = nk
            nk += counts[f]
    return nk, npair, nv
