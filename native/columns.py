"""What a chunk's Block keeps of what the parse kernels write: sparse CSR columns, and the rest of its rows.

The text and pb parsers write each sparse feature's values straight into a region of its own
(``Columns``), sized by ``region_room``, and where each row of it ends.  Everything else a parser writes into its
reused scratch (``ChunkRows``).  ``trim_rows`` makes every table's offsets of where its rows end (applying cutoffs)
and copies the rest into arrays of the Block's own (``BlockParts``), in one call a chunk.
"""

import numpy as np

from .bundles import bundle
from .index import _u
from .jit import brief, helper, kernel

# The sparse columns of a chunk: ids, high ids (length 0 when the format has none), values (the pb decoder writes
# them as their float32 bits), and per feature where its region starts, is filled up to and ends.
Columns = bundle("Columns", keys="i8[:]", hkeys="i8[:]", values="f4[:]", first="i8[:]", cur="i8[:]", lim="i8[:]")
# The rest of a chunk's rows, in a parser's scratch (more rows than the chunk's): where each row of each sparse
# feature's region ends (``ends[row, f]``, f among the chunk's sparse features); per table its rows, refers (the
# row of the next table each row refers to) and dense columns; labels, timestamps, sample ids and their offsets,
# where each group starts and its position in the source.  Text fills table 0 only.
ChunkRows = bundle(
    "ChunkRows",
    ends="i8[:, :]",
    tab_rows="i8[:]",
    refer="i8[:, :]",
    dense="f4[:, :, :]",
    labels="f4[:, :]",
    timestamps="i8[:]",
    sid_bytes="u1[:]",
    sid_off="i8[:]",
    group_start="i8[:]",
    group_pos="i8[:]",
)
# What a format's Blocks keep, the same for every chunk: per sparse feature of the block, in table order, its index
# among the chunk's sparse features and its cutoff; how many each table has; per dense feature, in table order, its
# table, first column and width.
KeptLayout = bundle("KeptLayout", sparse="i8[:]", cutoff="i8[:]", table_features="i8[:]", dense="i8[:, :]")
# What a chunk's Block keeps of its ``ChunkRows``, in arrays of the block's sizes (``trim_rows`` fills them): every
# table's sparse offsets ``[F_t, rows_t + 1]``, one after the other in ``offsets`` (table t's from ``offsets_at[t]``),
# every dense feature's columns over its table's rows, one after the other in ``dense`` (feature k's from
# ``dense_at[k]``),
# every table's refer but the last one's in ``refer`` (table t's from ``refer_at[t]``), labels, timestamps, sample
# ids, the group offsets and the groups' positions in the source.  Flat arrays, not tuples: a kernel compiles once
# per tuple length, and these lengths are the schema's.
BlockParts = bundle(
    "BlockParts",
    offsets="i8[:]",
    offsets_at="i8[:]",
    dense="f4[:]",
    dense_at="i8[:]",
    refer="i8[:]",
    refer_at="i8[:]",
    labels="f4[:, :]",
    timestamps="i8[:]",
    sid_bytes="u1[:]",
    sid_offsets="i8[:]",
    group_offsets="i8[:]",
    group_pos="i8[:]",
)


@helper
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


@kernel
def trim_rows(rows, cols, high, layout, start, out):
    """Make what a chunk's Block keeps of ``rows`` (``ChunkRows``, as the parser left them) and ``cols`` (its
    ``Columns``; ``high``: keep their high ids) into ``out`` (``BlockParts``, sized by the front end from the rows
    of each table, samples, groups and sample-id bytes), as ``layout`` (``KeptLayout``) says: every table's sparse
    offsets (``region_offsets``); dense feature ``k``, ``dense[k, 2]`` columns from column ``dense[k, 1]`` of table
    ``dense[k, 0]``, row by row; the refer of every table but the last; labels, timestamps, sample ids and their
    offsets; the group offsets (ending at the sample count) and the groups' positions plus ``start``.  One call
    without the GIL where numpy took a dozen, each a few microseconds of Python a chunk (a text chunk's strided
    dense copies ~35 us), and a call per table made the offsets.  Unsigned indices let LLVM vectorise the
    copies."""
    ends, tab_rows, refer, dense, labels, timestamps, sid_bytes, sid_off, group_start, group_pos = rows
    keys, hkeys, values, first, _, _ = cols
    sparse, cutoff, table_features, dense_cols = layout
    (
        out_offsets,
        offsets_at,
        out_dense,
        dense_at,
        out_refer,
        refer_at,
        out_labels,
        out_timestamps,
        out_sid_bytes,
        out_sid_offsets,
        out_group_offsets,
        out_group_pos,
    ) = out
    f0 = 0
    for t in range(len(table_features)):
        nf, n, at = table_features[t], tab_rows[t], offsets_at[t]
        offsets = out_offsets[at : at + nf * (n + 1)].reshape((nf, n + 1))
        kept_h = hkeys if high else hkeys[:0]
        region_offsets(first, ends, sparse[f0 : f0 + nf], n, cutoff[f0 : f0 + nf], keys, kept_h, values, offsets)
        f0 += nf
    for k in range(dense_cols.shape[0]):
        t, b, w = dense_cols[k, 0], dense_cols[k, 1], dense_cols[k, 2]
        at = dense_at[k]
        for r in range(tab_rows[t]):
            for c in range(w):
                out_dense[_u(at + r * w + c)] = dense[_u(t), _u(r), _u(b + c)]
    for t in range(len(tab_rows) - 1):
        at = refer_at[t]
        for r in range(tab_rows[t]):
            out_refer[_u(at + r)] = refer[_u(t), _u(r)]
    nrows = len(out_timestamps)
    for r in range(nrows):
        for c in range(out_labels.shape[1]):
            out_labels[_u(r), _u(c)] = labels[_u(r), _u(c)]
        out_timestamps[_u(r)] = timestamps[_u(r)]
    for i in range(len(out_sid_bytes)):
        out_sid_bytes[_u(i)] = sid_bytes[_u(i)]
    for r in range(nrows + 1):
        out_sid_offsets[_u(r)] = sid_off[_u(r)]
    ngroups = len(out_group_pos)
    for g in range(ngroups):
        out_group_offsets[_u(g)] = group_start[_u(g)]
        out_group_pos[_u(g)] = group_pos[_u(g)] + start
    out_group_offsets[_u(ngroups)] = nrows
