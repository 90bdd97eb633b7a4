"""Kernels that build batches from blocks: row-range copies, aux-table ranges, indicators."""

import numpy as np

from .bundles import bundle
from .index import _u
from .jit import brief, helper, inline, kernel
from .parts import (
    BIG,
    KEYS,
    LABELS,
    LAYOUT,
    OFFSETS,
    PAIRS,
    SID_BYTES,
    SID_OFFSETS,
    SMALL,
    TIMESTAMPS,
    VALUES,
    dense_part,
    indicators_part,
    part,
    samples_part,
    vector,
)
from .unique import unique_ids_of_batch, unique_sizes

# The bundles ``copy_pieces`` takes, as plain tuples (``plain()``, bundles.py): one argument each.
# A block's arrays: per table (tuples) its sparse offsets, which features the DSL made, its dense matrices and its
# refers; its ids, high ids and values, and the DSL's; its labels, timestamps and sample ids.
PieceSource = bundle(
    "PieceSource",
    sp_offsets="(i8[:, :])",
    from_dsl="(b1[:])",
    dense="(f4[:, :])",
    refers="(i8[:])",
    keys="i8[:]",
    hkeys="i8[:]",
    values="f4[:]",
    dsl_keys="i8[:]",
    dsl_values="f4[:]",
    labels="f4[:, :]",
    timestamps="i8[:]",
    sid_bytes="u1[:]",
    sid_offsets="i8[:]",
)
# The fields of a PieceSource that measure_piece reads, by position (numba indexes a plain tuple by constants)
_SP_OFFSETS, _REFERS, _SID_OFFSETS = (PieceSource._fields.index(f) for f in ("sp_offsets", "refers", "sid_offsets"))
# Where a batch's features go: per sparse feature whether its ids are (hkey, key) pairs and where its ids and
# values start; per dense matrix its table.
FeaturePlaces = bundle("FeaturePlaces", pair="b1[:]", key_base="i8[:]", value_base="i8[:]", dense_table="i8[:]")
# A batch's one buffer and where its arrays lie in it (``batch_layout``'s ``meta``); the kernels view them there
# (``part``), so Python makes no array of a batch until its consumer asks for one.
BatchBuffer = bundle("BatchBuffer", buf="u1[:]", meta="i8[:]")


@helper
def copy_sparse_ranges(src, lo, hi, nranges, row0, places, dst):
    """Append rows ``lo[g]:hi[g]`` (g < nranges) of every sparse feature of a table at row ``row0``.

    ``src`` is ``(src_offsets, src_keys, src_hkeys, src_values, dsl_keys, dsl_values, from_dsl)``, ``places``
    ``(pair, key_base, value_base)`` of the table's features, ``dst`` ``(dst_offsets, dst_keys, dst_pairs,
    dst_values)``.  ``dst_offsets[f]`` (int64 ``[R + 1]``) holds row offsets local to feature ``f``;
    ``dst_offsets[f, row0]`` must already be set.  Feature ``f`` writes its values at
    ``value_base[f] + local offset``, and its ids at ``key_base[f] + local offset`` either
    into ``dst_pairs`` as ``(hkey, key)`` when ``pair[f]`` or into ``dst_keys``.
    ``src_hkeys`` of length 0 means all high words are 0.  Features with ``from_dsl[f]``
    (when it is not empty) are read from ``dsl_keys``/``dsl_values``, high words 0.
    Returns the next free row.
    """
    src_offsets, src_keys, src_hkeys, src_values, dsl_keys, dsl_values, from_dsl = src
    pair, key_base, value_base = places
    dst_offsets, dst_keys, dst_pairs, dst_values = dst
    has_hkeys = len(src_hkeys) > 0
    row = row0
    # Every loop runs over views sliced first: indexing with an offset (dst[b + i] = src[a + i]) kept
    # LLVM from vectorising the copies, 4-7x slower per id.
    for g in range(nranges):
        r0 = lo[g]
        r1 = hi[g]
        for f in range(src_offsets.shape[0]):
            s0 = src_offsets[f, r0]
            s1 = src_offsets[f, r1]
            n = s1 - s0
            cur = dst_offsets[f, row]
            dsl = len(from_dsl) > 0 and from_dsl[f]
            keys = (dsl_keys if dsl else src_keys)[s0:s1]
            out_values = dst_values[value_base[f] + cur : value_base[f] + cur + n]
            in_values = (dsl_values if dsl else src_values)[s0:s1]
            for i in range(n):
                out_values[i] = in_values[i]
            kb = key_base[f] + cur
            if pair[f]:
                out = dst_pairs[kb : kb + n]
                if has_hkeys and not dsl:
                    hkeys = src_hkeys[s0:s1]
                    for i in range(n):
                        out[i, 0] = hkeys[i]
                        out[i, 1] = keys[i]
                else:
                    for i in range(n):
                        out[i, 0] = 0
                        out[i, 1] = keys[i]
            else:
                out_keys = dst_keys[kb : kb + n]
                for i in range(n):
                    out_keys[i] = keys[i]
            out_offsets = dst_offsets[f][row + 1 : row + 1 + r1 - r0]
            in_offsets = src_offsets[f][r0 + 1 : r1 + 1]
            shift = cur - s0
            for r in range(r1 - r0):
                out_offsets[r] = in_offsets[r] + shift
        row += r1 - r0
    return row


@helper
def copy_dense_ranges(src, lo, hi, nranges, dst, row0):
    """Append rows ``lo[g]:hi[g]`` of a dense matrix at row ``row0`` of ``dst``; returns the next row."""
    row = row0
    for g in range(nranges):
        n = hi[g] - lo[g]
        out = dst[row : row + n]
        src_rows = src[lo[g] : hi[g]]
        for r in range(n):
            for c in range(src.shape[1]):
                out[r, c] = src_rows[r, c]
        row += n
    return row


@helper
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


@helper
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


@helper
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


@kernel
def fixed_width_rows(blob, offsets, out):
    """Write item ``r`` of a blob (``blob[offsets[r]:offsets[r+1]]``) into row ``r`` of ``out``, zero-padded."""
    for r in range(out.shape[0]):
        a = offsets[r]
        n = offsets[r + 1] - a
        for k in range(n):
            out[r, k] = blob[a + k]
        for k in range(n, out.shape[1]):
            out[r, k] = 0


@inline
def _place(meta, k, at, rows, columns, itemsize):
    """Part ``k`` of ``rows`` x ``columns`` items at byte ``at``; returns the 64-byte boundary after it."""
    meta[3 * k] = at
    meta[3 * k + 1] = rows
    meta[3 * k + 2] = columns
    return at + ((rows * columns * itemsize + 63) & -64)


@brief
def batch_layout(counts, pair, rows, pad_to, sid_bytes, table_features, dense_table, dense_width, labels, unique, out):
    """Where every array of a batch lies in its one buffer; returns ``(bytes, samples, ids)``.

    ``rows`` (per table, as ``measure_piece`` added them up) become the batch's: when ``pad_to`` is above the samples,
    table 0 gets ``pad_to`` rows and every aux table one more, the empty row padded rows point at.  Fills ``out``,
    ``(key_base, value_base, meta)``: ``feature_bases``'s, and per part its byte offset, rows and columns (1 for a
    vector) in ``meta[3k:3k + 3]``, in ``batch_part_kinds``' order: keys, pairs, values; the offsets
    ``[table_features[t], rows + 1]`` of each table; each dense matrix ``[rows of dense_table[d], dense_width[d]]``;
    the indicators of every table but the last; labels ``[rows, labels]``, timestamps, ``sid_bytes[0]`` sample id
    bytes and their offsets; with ``unique``, ``unique_ids_of_batch``'s outputs.
    """
    key_base, value_base, meta = out
    n = rows[0]
    if pad_to > n:
        for t in range(len(rows)):
            rows[t] += 1
        rows[0] = pad_to
    nk, npair, nv = feature_bases(counts, pair, key_base, value_base)
    at = _place(meta, KEYS, 0, nk, 1, 8)
    at = _place(meta, PAIRS, at, npair, 2, 8)
    at = _place(meta, VALUES, at, nv, 1, 4)
    tables = len(rows)
    ndense = len(dense_table)
    for t in range(tables):
        at = _place(meta, OFFSETS + t, at, table_features[t], rows[t] + 1, 8)
    for d in range(ndense):
        at = _place(meta, dense_part(tables, d), at, rows[dense_table[d]], dense_width[d], 4)
    for t in range(tables - 1):
        at = _place(meta, indicators_part(tables, ndense, t), at, rows[t], 1, 4)
    k = samples_part(tables, ndense)
    at = _place(meta, k + LABELS, at, rows[0], labels, 4)
    at = _place(meta, k + TIMESTAMPS, at, rows[0], 1, 8)
    at = _place(meta, k + SID_BYTES, at, sid_bytes[0], 1, 1)
    at = _place(meta, k + SID_OFFSETS, at, n + 1, 1, 8)
    if unique:  # the last three parts (unique_part)
        u = k + SID_OFFSETS + 1
        big, small, layout = unique_sizes(nk, npair, len(counts))
        at = _place(meta, u + BIG, at, big, 1, 8)
        at = _place(meta, u + SMALL, at, small, 1, 4)
        at = _place(meta, u + LAYOUT, at, layout, 1, 8)
    return at, n, nk + npair


def batch_part_kinds(tables, dense, unique):
    """``(dtype, matrix)`` of each part ``batch_layout`` places, in its order (``parts``), for ``tables`` tables and
    ``dense`` dense matrices."""
    i8, f4, i4, u1 = (np.dtype(t) for t in (np.int64, np.float32, np.int32, np.uint8))
    kinds = [(i8, False), (i8, True), (f4, False)] + [(i8, True)] * tables + [(f4, True)] * dense
    kinds += [(i4, False)] * (tables - 1) + [(f4, True), (i8, False), (u1, False), (i8, False)]
    return kinds + ([(i8, False), (i4, False), (i8, False)] if unique else [])


@inline
def feature_bases(counts, pair, key_base, value_base):
    """Where each feature's ids and values go in a batch's arrays; returns ``(keys, pairs, values)`` totals.

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


@helper
def merge_adjacent(ranges, m):
    """Merge each group's ranges ``ranges[t, :, g]`` (g < m) into the previous group's where they follow them
    in every aux table, as consecutive groups with their own aux rows do; returns the ranges left.  The
    rows a piece takes, and the indicators to them, are the same: the copies just run over fewer ranges
    (a synthetic pb piece had ~90 groups, each with one aux row, and its aux features were copied a group
    at a time)."""
    tables = ranges.shape[0]
    k = 0
    for g in range(1, m):
        follows = True
        for t in range(1, tables):
            if ranges[t, 0, g] != ranges[t, 1, k]:
                follows = False
                break
        if not follows:  # a range of its own
            k += 1
            for t in range(tables):
                ranges[t, 0, k] = ranges[t, 0, g]
        for t in range(tables):
            ranges[t, 1, k] = ranges[t, 1, g]
    return k + 1 if m > 0 else 0


@brief
def measure_piece(group_offsets, src, r0, r1, room, c0, counts, rows, sid_bytes):
    """Plan the piece of rows ``r0:r1`` of table 0 of a block (``src``, its ``PieceSource``, and its
    ``group_offsets``), for a batch, in ``ranges = room[:, :, c0:]``; returns ``m``.

    ``ranges[t, 0, g]:ranges[t, 1, g]`` (g < m) are the rows of table t the piece takes: one range per group (or
    run of groups, ``merge_adjacent``) when there are aux tables (``refers[k]``, the row of table k + 1 each row
    of table k refers to), else the one range ``r0:r1``: ``room`` (int64 ``[tables, 2, columns]``, the caller's
    scratch) needs ``max(r1 - r0, 1)`` columns from ``c0`` on.  Adds the piece's sizes: to ``counts`` the values of
    every sparse feature (tables in order, ``sp_offsets[t]`` theirs), to ``rows[t]`` the rows of table t and to
    ``sid_bytes[0]`` its sample id bytes.
    """
    sp_offsets, refers, sid_offsets = src[_SP_OFFSETS], src[_REFERS], src[_SID_OFFSETS]
    tables = len(sp_offsets)
    ranges = room[:, :, c0:]
    if tables == 1:
        m = 1
        ranges[0, 0, 0] = r0
        ranges[0, 1, 0] = r1
    else:
        m = group_ranges(group_offsets, r0, r1, ranges[0, 0], ranges[0, 1])
        for k in range(tables - 1):
            refer_ranges(refers[k], ranges[k, 0], ranges[k, 1], m, ranges[k + 1, 0], ranges[k + 1, 1])
        m = merge_adjacent(ranges, m)
    f0 = 0
    for t in range(tables):
        offsets = sp_offsets[t]
        lo = ranges[t, 0]
        hi = ranges[t, 1]
        for g in range(m):
            rows[t] += hi[g] - lo[g]
        for f in range(offsets.shape[0]):
            c = 0
            for g in range(m):
                c += offsets[f, hi[g]] - offsets[f, lo[g]]
            counts[f0 + f] += c
        f0 += offsets.shape[0]
    sid_bytes[0] += sid_offsets[r1] - sid_offsets[r0]
    return m


@kernel
def copy_pieces(first, second, plan, room, places, at, out, rows, pad, ids, ids_room):
    """Copy the one or two pieces of a batch into its arrays (``out``, a ``BatchBuffer`` that ``batch_layout`` laid
    out), its features placed by ``places``: piece ``i`` (``plan[i]``: ``r0, r1, c0, m``) is rows ``r0:r1`` of a
    block (``first``, then ``second``, as ``PieceSource``), planned by ``measure_piece`` (``m`` ranges in ``room`` from
    column ``c0``).  Then, when ``pad``, pad every table to its ``rows`` (``pad_batch``), and unless ``ids`` is None
    compute the batch's unique ids (``unique_ids_of_batch(ids, ids_room)``).  A batch of more pieces takes a call for
    each one or two of them, its last call padding it and computing its unique ids (``first`` as ``second`` too for
    one piece).

    Per table t of a block: ``sp_offsets[t]`` and ``from_dsl[t]`` (see ``copy_sparse_ranges``);
    dense matrix d belongs to table ``dense_table[d]``.  Sparse features are numbered over all
    tables in order: feature f's ids go to ``key_base[f]`` on in ``keys`` (``pairs`` when
    ``pair[f]``), its values to ``value_base[f]`` on in ``values``, its row offsets to row f of
    table t's offsets.  ``at`` (int64 [2T + 1]) says where a piece goes, and is advanced past it:
    ``at[t]`` is the next row of table t, ``at[T + k]`` the rows of table k + 1 packed so far (what
    ``indicators[k]`` counts from), ``at[2T]`` the sample id bytes written.

    One call a batch: a call into a kernel gives up the GIL, and its return queues for it behind the other parse
    workers.  The copy is written once, in a loop over the pieces (numba types the two sources as one), so a cold
    start compiles it once.
    """
    pair, key_base, value_base, dense_table = places
    buf, meta = out
    tables = len(rows)
    ndense = len(dense_table)
    keys = vector(buf, meta, KEYS, np.int64)
    pairs = part(buf, meta, PAIRS, np.int64)
    values = vector(buf, meta, VALUES, np.float32)
    samples_at = samples_part(tables, ndense)
    labels = part(buf, meta, samples_at + LABELS, np.float32)
    timestamps = vector(buf, meta, samples_at + TIMESTAMPS, np.int64)
    sid_bytes = vector(buf, meta, samples_at + SID_BYTES, np.uint8)
    sid_offsets = vector(buf, meta, samples_at + SID_OFFSETS, np.int64)
    whole = np.empty((2, 1), np.int64)
    for piece in range(len(plan)):
        src = first if piece == 0 else second  # numba unifies their types (a read-only array with a writable one)
        r0, r1, c0, m = plan[piece, 0], plan[piece, 1], plan[piece, 2], plan[piece, 3]
        (
            sp_offsets,
            from_dsl,
            src_dense,
            refers,
            src_keys,
            src_hkeys,
            src_values,
            dsl_keys,
            dsl_values,
            src_labels,
            src_timestamps,
            src_sid_bytes,
            src_sid_offsets,
        ) = src
        ranges = room[:, :, c0:]
        row0 = at[0]
        # Table 0's rows are contiguous: one range copies them (its groups matter to the indicators only).
        whole[0, 0] = r0
        whole[1, 0] = r1
        f0 = 0
        for t in range(tables):
            nf = sp_offsets[t].shape[0]
            lo = whole[0] if t == 0 else ranges[t, 0]
            hi = whole[1] if t == 0 else ranges[t, 1]
            n = 1 if t == 0 else m
            row = at[t]
            offsets = part(buf, meta, OFFSETS + t, np.int64)
            if row == 0:
                offsets[:, 0] = 0
            f1 = f0 + nf
            at[t] = copy_sparse_ranges(
                (sp_offsets[t], src_keys, src_hkeys, src_values, dsl_keys, dsl_values, from_dsl[t]),
                lo,
                hi,
                n,
                row,
                (pair[f0:f1], key_base[f0:f1], value_base[f0:f1]),
                (offsets, keys, pairs, values),
            )
            for d in range(ndense):
                if dense_table[d] == t:
                    copy_dense_ranges(src_dense[d], lo, hi, n, part(buf, meta, dense_part(tables, d), np.float32), row)
            if t < tables - 1:
                _, packed = write_indicators(
                    refers[t],
                    ranges[t, 0],
                    ranges[t, 1],
                    ranges[t + 1, 0],
                    ranges[t + 1, 1],
                    m,
                    vector(buf, meta, indicators_part(tables, ndense, t), np.int32),
                    row,
                    at[tables + t],
                )
                at[tables + t] = packed
            f0 = f1
        # element loops, not slice assignments: a slice assignment compiles numpy's shape-mismatch error message,
        # seconds of a cold start; unsigned indices, which need no wraparound check, let LLVM vectorise them
        k = r1 - r0
        for r in range(k):
            for c in range(labels.shape[1]):
                labels[_u(row0 + r), _u(c)] = src_labels[_u(r0 + r), _u(c)]
            timestamps[_u(row0 + r)] = src_timestamps[_u(r0 + r)]
        a = src_sid_offsets[r0]
        b = src_sid_offsets[r1]
        s = at[2 * tables]
        for j in range(b - a):
            sid_bytes[_u(s + j)] = src_sid_bytes[_u(a + j)]
        if row0 == 0:
            sid_offsets[0] = 0
        for r in range(k):
            sid_offsets[_u(row0 + r + 1)] = src_sid_offsets[_u(r0 + r + 1)] - a + s
        at[2 * tables] = s + b - a
    if pad:
        pad_batch(at, rows, buf, meta, dense_table)
    if ids is not None:
        unique_ids_of_batch(ids, ids_room)


@kernel
def pad_batch(at, rows, buf, meta, dense_table):
    """Rows ``at[t]:rows[t]`` of every table of a batch (``buf``, ``meta``), after the pieces: empty sparse rows, zero
    dense rows and labels, and indicators pointing at the next table's last row (the empty row padding adds)."""
    tables = len(rows)
    ndense = len(dense_table)
    for t in range(tables):
        row = at[t]
        o = part(buf, meta, OFFSETS + t, np.int64)
        for f in range(o.shape[0]):
            o[f, row + 1 : rows[t] + 1] = o[f, row]
        for d in range(ndense):
            if dense_table[d] == t:
                part(buf, meta, dense_part(tables, d), np.float32)[row:] = 0
        if t < tables - 1:
            vector(buf, meta, indicators_part(tables, ndense, t), np.int32)[row:] = rows[t + 1] - 1
    samples_at = samples_part(tables, ndense)
    part(buf, meta, samples_at + LABELS, np.float32)[at[0] :] = 0
    vector(buf, meta, samples_at + TIMESTAMPS, np.int64)[at[0] :] = 0


@brief
def row_lengths(offsets, out):
    """``out[f * R + r] = offsets[f, r + 1] - offsets[f, r]``: the rows' lengths of every feature of a C-contiguous
    ``[F, R + 1]`` offsets matrix, one after the other (a KeyedJaggedTensor's lengths), in one pass LLVM
    vectorizes: numpy's 2-D difference took five times as long."""
    rows = offsets.shape[1] - 1
    flat = offsets.reshape(offsets.size)
    for f in range(offsets.shape[0]):
        src, dst = f * (rows + 1), f * rows
        for r in range(rows):
            out[_u(dst + r)] = flat[_u(src + r + 1)] - flat[_u(src + r)]
