"""Kernels that build batches from blocks: row-range copies of sparse features, fixed-width sample ids."""
from numba import njit


@njit(nogil=True, cache=True)
def copy_sparse_rows(src_offsets, src_keys, src_hkeys, src_values, r0, r1, row0,
                     pair, key_base, value_base, dst_offsets, dst_keys, dst_pairs, dst_values):
    """Append rows ``r0:r1`` of every sparse feature of a block to a batch at row ``row0``.

    ``dst_offsets[f]`` (int64 ``[R + 1]``) holds row offsets local to feature ``f``;
    ``dst_offsets[f, row0]`` must already be set.  Feature ``f`` writes its values at
    ``value_base[f] + local offset``, and its ids at ``key_base[f] + local offset`` either
    into ``dst_pairs`` as ``(hkey, key)`` when ``pair[f]`` or into ``dst_keys``.
    ``src_hkeys`` of length 0 means all high words are 0.
    """
    has_hkeys = len(src_hkeys) > 0
    for f in range(src_offsets.shape[0]):
        s0 = src_offsets[f, r0]
        s1 = src_offsets[f, r1]
        cur = dst_offsets[f, row0]
        vb = value_base[f] + cur
        kb = key_base[f] + cur
        for i in range(s1 - s0):
            dst_values[vb + i] = src_values[s0 + i]
        if pair[f]:
            for i in range(s1 - s0):
                dst_pairs[kb + i, 0] = src_hkeys[s0 + i] if has_hkeys else 0
                dst_pairs[kb + i, 1] = src_keys[s0 + i]
        else:
            for i in range(s1 - s0):
                dst_keys[kb + i] = src_keys[s0 + i]
        for r in range(r0, r1):
            dst_offsets[f, row0 + r - r0 + 1] = cur + src_offsets[f, r + 1] - s0


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
