"""Sparse CSR columns of a table, from what the parse kernels write.

The text kernel emits one token per sparse value (feature, key, high key, value), the
tokens of a row contiguous, and says where each row's tokens are (``tok0[r]:tok1[r]``).
``count_rows`` lays out the columns of one table, ``fill_rows`` scatters the tokens.
The pb decoder writes each feature's values straight into a region of its own;
``region_offsets`` makes the table's offsets of where its rows end (and applies cutoffs).
"""

import numpy as np

from .index import _u
from .jit import brief, inline, kernel


@inline
def _run_end(tok_feat, t, t1):
    """End of the run of tokens of one feature that starts at ``t``: the values of a feature entry come
    together, so rows are laid out a run at a time rather than a token at a time."""
    fid = tok_feat[t]
    e = t + 1
    while e < t1 and tok_feat[e] == fid:
        e += 1
    return e


@kernel
def count_rows(tok_feat, tok0, tok1, nrows, feat_map, cutoff, base, offsets):
    """Fill ``offsets`` (int64 ``[F, nrows + 1]``, zeroed) for ``fill_rows``.

    ``feat_map[tok_feat[t]]`` is the column of a token in ``offsets`` (-1: not in this
    table).  Offsets are absolute positions from ``base`` into one feature-major array:
    feature ``f`` row ``r`` is ``offsets[f, r]:offsets[f, r + 1]`` and
    ``offsets[f, nrows] == offsets[f + 1, 0]``.  A row keeps at most ``abs(cutoff[f])``
    values of feature ``f`` when that is not 0.  Returns the end position.
    """
    nfeat = offsets.shape[0]
    for r in range(nrows):
        t = tok0[r]
        t1 = tok1[r]
        while t < t1:
            e = _run_end(tok_feat, t, t1)
            f = feat_map[tok_feat[t]]
            if f >= 0:
                offsets[f, r + 1] += e - t
            t = e
    for f in range(nfeat):
        lim = abs(cutoff[f])
        offsets[f, 0] = base
        for r in range(nrows):
            c = offsets[f, r + 1]
            if lim > 0 and c > lim:
                c = lim
            offsets[f, r + 1] = offsets[f, r] + c
        base = offsets[f, nrows]
    return base


@kernel
def fill_rows(tokens, tok0, tok1, nrows, feat_map, cutoff, offsets, keys, hkeys, values):
    """Scatter ``tokens`` (the arrays of their feature, key, high key and value) into ``keys``/``hkeys``/``values``
    laid out by ``count_rows``.

    A positive cutoff keeps the first values of a row, a negative one the last, both in
    input order.  ``hkeys`` (or ``tok_hkey``) of length 0 means no high keys are kept.
    """
    tok_feat, tok_key, tok_hkey, tok_val = tokens
    nfeat = offsets.shape[0]
    with_h = len(hkeys) > 0 and len(tok_hkey) > 0
    any_cut = False
    for f in range(nfeat):
        any_cut |= cutoff[f] != 0
    cursor = np.empty(nfeat, dtype=np.int64)
    seen = np.zeros(nfeat, dtype=np.int64)
    count = np.zeros(nfeat, dtype=np.int64)
    for r in range(nrows):
        t0 = tok0[r]
        t1 = tok1[r]
        if not any_cut:
            for f in range(nfeat):
                cursor[f] = offsets[f, r]
            t = t0
            while t < t1:
                e = _run_end(tok_feat, t, t1)
                f = feat_map[tok_feat[t]]
                if f >= 0:
                    o = cursor[f] - t
                    for j in range(t, e):  # a plain copy loop, which LLVM vectorizes
                        keys[_u(o + j)] = tok_key[_u(j)]
                        values[_u(o + j)] = tok_val[_u(j)]
                    if with_h:
                        for j in range(t, e):
                            hkeys[_u(o + j)] = tok_hkey[_u(j)]
                    cursor[f] = o + e
                t = e
            continue
        for f in range(nfeat):
            seen[f] = 0
            count[f] = 0
        for t in range(t0, t1):
            f = feat_map[tok_feat[t]]
            if f >= 0:
                count[f] += 1
        for t in range(t0, t1):
            f = feat_map[tok_feat[t]]
            if f < 0:
                continue
            i = seen[f]
            seen[f] += 1
            cut = cutoff[f]
            kept = offsets[f, r + 1] - offsets[f, r]
            if cut > 0:
                if i >= cut:
                    continue
                j = i
            elif cut < 0:
                # kept == min(count, -cut): the first count - kept values of the row are dropped
                j = i - (count[f] - kept)
                if j < 0:
                    continue
            else:
                j = i
            o = offsets[f, r] + j
            keys[o] = tok_key[t]
            values[o] = tok_val[t]
            if with_h:
                hkeys[o] = tok_hkey[t]


@kernel
def region_offsets(first, ends, feats, nrows, cutoff, keys, hkeys, values, offsets):
    """Fill ``offsets`` (int64 ``[F_t, nrows + 1]``) of one table from columns written in regions.

    Feature ``j`` of the table (``feats[j]`` among all sparse features) has its values in row
    order from ``first[feats[j]]`` of ``keys``/``hkeys``/``values``, and its row ``r`` ends at
    ``ends[r, feats[j]]``.  With a cutoff (``cutoff[j]`` as in ``count_rows``) a row's kept values
    are moved down in place, so the kept ones of the feature stay contiguous from ``first``.
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
def region_room(ids, seen_bytes, filled, floor, spare, first, cur, lim):
    """Size each sparse feature's region for decoding ``filled`` bytes: ``first[f]:lim[f]``, ``cur`` set to
    ``first``; returns the ids all regions hold.  Feature ``f`` gets its ``ids[f]`` of the ``seen_bytes``
    decoded so far scaled to ``filled`` bytes, a fifth more and ``spare``, at least ``floor[f]``; before any
    byte is decoded, an even share of the most ``filled`` bytes hold (a value takes 4 bytes or more).
    One call instead of a few numpy operations: after a chunk's decoding has been through the caches, each
    of those took ~5-20 us."""
    n = len(ids)
    scale = 1.2 * filled / seen_bytes if seen_bytes else 0.0
    even = filled // (4 * max(n, 1))
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
