"""Decoding one length-prefixed record (a ``SampleGroup``, or a ``SampleSimple``) into the chunk's columns:
the heart of ``protobuf.decode_chunk`` (whose module says how the columns are laid out)."""

import numpy as np

from .index import _u
from .jit import helper
from .protobuf_codes import (
    MALFORMED,
    WRONG_WIRE_TYPE,
    MISSING_REQUIRED,
    MISSING_KEY,
    TYPE_MISMATCH,
    DENSE_VALUES,
    DENSE_WIDTH,
    DENSE_REPEATED,
    TOO_FEW_LABELS,
    LINE_COUNT,
    SAMPLE_ID_COUNT,
    BAD_ENUM,
    S_FULL_FEATURE,
    S_NSID,
    S_NROWS,
    S_ANY_HKEY,
    REGION_FULL,
    SPARSE,
    DENSE,
)
from .protobuf_parts import _declared, _fail, _finish_group, _timestamp
from .protobuf_wire import _f32, _len_field, _skip, _tag, _u32, _varint

_ONE_BITS = np.uint32(0x3F800000)  # float32 1.0, the value of a sparse value without one


@helper
def _decode_record(buf, a, b, simple, label_count, name_table, layout, cols, rows, scratch):
    """One record: a ``SampleGroup``, or a ``SampleSimple`` when ``simple``.  Returns 0 or an error code.

    Everything per line, feature and value is decoded in this one function, with only
    tiny inline helpers: numba increfs every array passed to a called function, and
    those atomic operations cost more than decoding a feature.  The top-level fields
    are walked first (sample ids, labels, timestamps, and the span of every line), then
    the lines.  ``feat[c]`` is (kind, index in its kind, table) of declared feature c,
    ``dn_feat[d]`` (nvec, first element of ``dn_elem_col``) of dense feature d, and sparse
    feature f's column is laid out by ``first``, ``cur``, ``lim`` and ``ends`` (see the module);
    ``tab_feats[tab_feat_off[k]:tab_feat_off[k + 1]]`` are the sparse features of table k.  Values
    are written as their float32 bits (``val_bits``), as they come on the wire.  High keys are
    written only once a value of the chunk has one (``hk_live``): until then the chunk has
    none, and its ``hkeys`` are not read.  A value with no room left returns ``REGION_FULL``.
    """
    slots, names, name_off = name_table
    feat, dn_feat, dn_elem_col, tab_feats, tab_feat_off = layout
    keys, hkeys, val_bits, first, cur, lim = cols
    ends, refer, tab_rows, dense, labels, timestamps, sid_bytes, sid_off, group_start, _group_pos, _errors, st = rows
    spans, dn_seen, vec, bits, lines0, guess = scratch
    ntables = tab_rows.shape[0]
    row0 = st[S_NROWS]
    for k in range(ntables):
        lines0[k] = tab_rows[k]
    nlabels = 0
    nsid = 0
    next_table = 0
    next_ext = 0
    nspans = 0
    seen = 0  # SampleSimple: bit j set when required field j + 1 was present
    if simple:
        for c in range(labels.shape[1]):
            labels[row0, c] = 0.0
    # -- top-level fields ----------------------------------------------------------------
    p = a
    while p < b:
        fpos = p
        field, wt, p = _tag(buf, p, b)
        if p < 0:
            return _fail(st, MALFORMED, fpos, 0, -1, -1, 0)
        top = 3 if simple else 5
        if field < 1 or field > top:
            p = _skip(buf, p, b, wt, field)
            if p < 0:
                return _fail(st, MALFORMED, fpos, 0, -1, -1, 0)
            continue
        if wt != 2:
            return _fail(st, WRONG_WIRE_TYPE, fpos, 0, -1, -1, wt)
        fa, fb = _len_field(buf, p, b)
        if fa < 0:
            return _fail(st, MALFORMED, fpos, 0, -1, -1, 0)
        p = fb
        if simple:
            seen |= 1 << (field - 1)
        if field == 1:
            if simple:  # a string: the last occurrence wins
                nsid = 0
                st[S_NSID] = sid_off[row0]
            s0 = st[S_NSID]
            for k in range(fb - fa):
                sid_bytes[s0 + k] = buf[_u(fa + k)]
            st[S_NSID] = s0 + fb - fa
            nsid += 1
            sid_off[row0 + nsid] = st[S_NSID]
        elif field == 2:
            if simple:  # messages merge: label values append
                row = row0
                count = nlabels
            else:
                row = row0 + nlabels
                count = 0
                for c in range(labels.shape[1]):
                    labels[row, c] = 0.0
            q = fa
            while q < fb:
                lpos = q
                lf, lw, q = _tag(buf, q, fb)
                if q < 0:
                    return _fail(st, MALFORMED, lpos, 0, -1, -1, 0)
                if lf == 1 and lw == 5:
                    if q + 4 > fb:
                        return _fail(st, MALFORMED, lpos, 0, -1, -1, 0)
                    if count < labels.shape[1]:
                        labels[row, count] = _f32(buf, q, bits)
                    count += 1
                    q += 4
                elif lf == 1 and lw == 2:
                    va, vb = _len_field(buf, q, fb)
                    if va < 0 or (vb - va) % 4 != 0:
                        return _fail(st, MALFORMED, lpos, 0, -1, -1, 0)
                    for v in range(va, vb, 4):
                        if count < labels.shape[1]:
                            labels[row, count] = _f32(buf, v, bits)
                        count += 1
                    q = vb
                elif lf == 1:
                    return _fail(st, WRONG_WIRE_TYPE, lpos, 0, -1, -1, lw)
                else:
                    q = _skip(buf, q, fb, lw, lf)
                    if q < 0:
                        return _fail(st, MALFORMED, lpos, 0, -1, -1, 0)
            if simple:
                nlabels = count
            else:
                if count < label_count:
                    return _fail(st, TOO_FEW_LABELS, fpos, 0, nlabels, -1, count)
                nlabels += 1
        elif field == 3 and simple:
            spans[nspans, 0] = 0
            spans[nspans, 1] = fa
            spans[nspans, 2] = fb
            nspans += 1
        elif field == 3:
            k = next_table
            next_table += 1
            if k >= ntables:
                continue
            q = fa
            while q < fb:
                lpos = q
                lf, lw, q = _tag(buf, q, fb)
                if q < 0:
                    return _fail(st, MALFORMED, lpos, k, -1, -1, 0)
                if lf != 1:
                    q = _skip(buf, q, fb, lw, lf)
                    if q < 0:
                        return _fail(st, MALFORMED, lpos, k, -1, -1, 0)
                    continue
                if lw != 2:
                    return _fail(st, WRONG_WIRE_TYPE, lpos, k, -1, -1, lw)
                la, lb = _len_field(buf, q, fb)
                if la < 0:
                    return _fail(st, MALFORMED, lpos, k, -1, -1, 0)
                spans[nspans, 0] = k
                spans[nspans, 1] = la
                spans[nspans, 2] = lb
                nspans += 1
                q = lb
        elif field == 5:
            ts, err = _timestamp(buf, fa, fb, st)
            if err:
                return err
            timestamps[row0 + next_ext] = ts
            next_ext += 1
        # SampleGroup.props (4) is not used
    if simple:
        if seen != 7:
            missing = 1 if not seen & 1 else (2 if not seen & 2 else 3)
            return _fail(st, MISSING_REQUIRED, a, -1, -1, -1, missing)
        if nlabels < label_count:
            return _fail(st, TOO_FEW_LABELS, a, 0, 0, -1, nlabels)
        nlabels = 1
    # -- the lines -------------------------------------------------------------------------
    hk_live = st[S_ANY_HKEY] != 0
    for i in range(nspans):
        k = spans[i, 0]
        if simple:  # every feature_line occurrence merges into the sample's one line
            row = tab_rows[0]
            fresh = i == 0
        else:
            row = tab_rows[k]
            fresh = True
        line = row - lines0[k]
        if fresh:
            refer[k, row] = 0
            for c in range(dense.shape[2]):
                dense[k, row, c] = 0.0
            for d in range(len(dn_seen)):
                dn_seen[d] = False
            nth = 0  # Feature entries of the line so far
        lb = spans[i, 2]
        p = spans[i, 1]
        while p < lb:
            fpos = p
            field, wt, p = _tag(buf, p, lb)
            if p < 0:
                return _fail(st, MALFORMED, fpos, k, line, -1, 0)
            if field == 2:
                if wt != 0:
                    return _fail(st, WRONG_WIRE_TYPE, fpos, k, line, -1, wt)
                v, p = _varint(buf, p, lb)
                refer[k, row] = np.int64(np.int32(np.int64(v)))  # int32 on the wire
                if p < 0:
                    return _fail(st, MALFORMED, fpos, k, line, -1, 0)
                continue
            if field == 3:  # reserve
                if wt != 0 and wt != 2:
                    return _fail(st, WRONG_WIRE_TYPE, fpos, k, line, -1, wt)
            if field != 1:
                p = _skip(buf, p, lb, wt, field)
                if p < 0:
                    return _fail(st, MALFORMED, fpos, k, line, -1, 0)
                continue
            if wt != 2:
                return _fail(st, WRONG_WIRE_TYPE, fpos, k, line, -1, wt)
            fa, fb = _len_field(buf, p, lb)
            if fa < 0:
                return _fail(st, MALFORMED, fpos, k, line, -1, 0)
            p = fb
            nth += 1
            # the canonical shape of a declared sparse Feature, in one pass: type (08 01),
            # name (12 n ...), then only values each of exactly key (08 ...) and maybe value
            # (15 ....).  Anything else rolls its tokens back and takes the general path below,
            # which alone decides what the bytes mean and which error they are.
            if (
                fa + 4 <= fb
                and buf[_u(fa)] == 0x08
                and buf[_u(fa + 1)] == 1
                and buf[_u(fa + 2)] == 0x12
                and buf[_u(fa + 3)] < 0x80
                and fa + 4 + np.int64(buf[_u(fa + 3)]) <= fb
            ):
                na = fa + 4
                nb = na + np.int64(buf[_u(fa + 3)])
                code = _declared(buf, na, nb, slots, names, name_off, guess, k, nth)
                if code >= 0 and feat[code, 2] == k and feat[code, 0] == SPARSE:
                    fi = feat[code, 1]
                    t = cur[fi]  # committed when the whole entry took the canonical shape
                    room = lim[fi]
                    q = nb
                    while q < fb:
                        if buf[_u(q)] != 0x1A or q + 1 >= fb:
                            break
                        va = q + 2
                        vb = va + np.int64(buf[_u(q + 1)])
                        if buf[_u(q + 1)] >= 0x80 or vb > fb or va >= vb or buf[_u(va)] != 0x08:
                            break
                        v, r = _varint(buf, va + 1, vb)
                        if r < 0:
                            break
                        vbits = _ONE_BITS
                        if r + 5 == vb and buf[_u(r)] == 0x15:
                            vbits = _u32(buf, r + 1)
                        elif r != vb:
                            break
                        if t >= room:
                            st[S_FULL_FEATURE] = fi
                            return REGION_FULL
                        keys[_u(t)] = np.int64(v)
                        if hk_live:
                            hkeys[_u(t)] = 0
                        val_bits[_u(t)] = vbits
                        t += 1
                        q = vb
                    if q == fb:
                        cur[fi] = t
                        continue
            # a Feature: first its type and name, which may come after the values
            ftype = np.int64(-1)
            na = -1
            nb = -1
            nvals = 0
            q = fa
            while q < fb:
                qpos = q
                f1, w1, q = _tag(buf, q, fb)
                if q < 0:
                    return _fail(st, MALFORMED, qpos, k, line, -1, 0)
                if f1 == 1:
                    if w1 != 0:
                        return _fail(st, WRONG_WIRE_TYPE, qpos, k, line, -1, w1)
                    v, q = _varint(buf, q, fb)
                    ftype = np.int64(v)
                elif f1 == 2 or f1 == 3:
                    if w1 != 2:
                        return _fail(st, WRONG_WIRE_TYPE, qpos, k, line, -1, w1)
                    xa, xb = _len_field(buf, q, fb)
                    if f1 == 2:
                        na, nb = xa, xb
                    else:
                        nvals += 1
                    q = xb
                else:
                    q = _skip(buf, q, fb, w1, f1)
                if q < 0:
                    return _fail(st, MALFORMED, qpos, k, line, -1, 0)
            if ftype == -1:
                return _fail(st, MISSING_REQUIRED, fa, k, line, -1, 1)
            if ftype != 1 and ftype != 2:
                return _fail(st, BAD_ENUM, fa, k, line, -1, ftype)
            if na < 0:
                continue  # no name: cannot be a declared feature
            code = _declared(buf, na, nb, slots, names, name_off, guess, k, nth)
            if code < 0 or feat[code, 2] != k:
                continue
            kind = feat[code, 0]
            if (kind == SPARSE) != (ftype == 1):
                return _fail(st, TYPE_MISMATCH, na, k, line, code, ftype)
            fi = feat[code, 1]
            if kind == DENSE:
                if nvals != 1:
                    return _fail(st, DENSE_VALUES, fa, k, line, code, nvals)
                if dn_seen[fi]:
                    return _fail(st, DENSE_REPEATED, na, k, line, code, 0)
                dn_seen[fi] = True
            # then its values
            q = fa
            while q < fb:
                f1, w1, q = _tag(buf, q, fb)
                if f1 != 3:  # checked in the first pass
                    if w1 == 0:
                        _, q = _varint(buf, q, fb)
                    elif w1 == 2:
                        _, q = _len_field(buf, q, fb)
                    else:
                        q = _skip(buf, q, fb, w1, f1)
                    continue
                va, vb = _len_field(buf, q, fb)
                q = vb
                key = np.int64(0)
                hkey = np.int64(0)
                vbits = _ONE_BITS
                has_key = False
                nvec = 0
                r = va
                # the common shape first: key (tag 0x08), then maybe value (tag 0x15); the loop
                # below takes whatever follows, in order, so the meaning is unchanged
                if r < vb and buf[_u(r)] == 0x08:
                    v, after = _varint(buf, r + 1, vb)
                    if after > 0:
                        key = np.int64(v)
                        has_key = True
                        r = after
                        if r + 5 <= vb and buf[_u(r)] == 0x15:
                            vbits = _u32(buf, r + 1)
                            r += 5
                while r < vb:
                    rpos = r
                    f2, w2, r = _tag(buf, r, vb)
                    if r < 0:
                        return _fail(st, MALFORMED, rpos, k, line, code, 0)
                    if f2 == 1 or f2 == 4:
                        if w2 != 0:
                            return _fail(st, WRONG_WIRE_TYPE, rpos, k, line, code, w2)
                        v, r = _varint(buf, r, vb)
                        if f2 == 1:
                            key = np.int64(v)
                            has_key = True
                        else:
                            hkey = np.int64(v)
                    elif f2 == 2:
                        if w2 != 5:
                            return _fail(st, WRONG_WIRE_TYPE, rpos, k, line, code, w2)
                        if r + 4 > vb:
                            return _fail(st, MALFORMED, rpos, k, line, code, 0)
                        vbits = _u32(buf, r)
                        r += 4
                    elif f2 == 3:
                        if w2 == 5:
                            if r + 4 > vb:
                                return _fail(st, MALFORMED, rpos, k, line, code, 0)
                            if kind == DENSE and nvec < len(vec):
                                vec[nvec] = _f32(buf, r, bits)
                            nvec += 1
                            r += 4
                        elif w2 == 2:
                            xa, xb = _len_field(buf, r, vb)
                            if xa < 0 or (xb - xa) % 4 != 0:
                                return _fail(st, MALFORMED, rpos, k, line, code, 0)
                            if kind == DENSE:
                                for x in range(xa, xb, 4):
                                    if nvec < len(vec):
                                        vec[nvec] = _f32(buf, x, bits)
                                    nvec += 1
                            r = xb
                        else:
                            return _fail(st, WRONG_WIRE_TYPE, rpos, k, line, code, w2)
                    else:
                        r = _skip(buf, r, vb, w2, f2)
                    if r < 0:
                        return _fail(st, MALFORMED, rpos, k, line, code, 0)
                if kind == DENSE:
                    width = dn_feat[fi, 0]
                    if nvec != width:
                        return _fail(st, DENSE_WIDTH, va, k, line, code, nvec)
                    base = dn_feat[fi, 1]
                    for j in range(width):
                        col = dn_elem_col[base + j]
                        if col >= 0:
                            dense[k, row, col] = vec[j]
                else:
                    if not has_key:
                        return _fail(st, MISSING_KEY, va, k, line, code, 0)
                    if hkey != 0 and not hk_live:  # the chunk's first high key: earlier values had none
                        for g in range(len(cur)):
                            for t in range(first[g], cur[g]):
                                hkeys[t] = 0
                        hk_live = True
                    t = cur[fi]
                    if t >= lim[fi]:
                        st[S_FULL_FEATURE] = fi
                        return REGION_FULL
                    keys[t] = key
                    hkeys[t] = hkey
                    val_bits[t] = vbits
                    cur[fi] = t + 1
        for j in range(tab_feat_off[k], tab_feat_off[k + 1]):  # where the row ends in each of its columns
            g = tab_feats[j]
            ends[row, g] = cur[g]
        if hk_live:
            st[S_ANY_HKEY] = 1
        if not simple:
            tab_rows[k] = row + 1
    if simple:
        tab_rows[0] += 1
        sid_off[row0 + 1] = st[S_NSID]
        timestamps[row0] = 0
        return _finish_group(
            1, lines0, tab_feats, tab_feat_off, cur, (ends, refer, tab_rows, dense, group_start, st), a
        )
    # -- checks of a group -----------------------------------------------------------------------
    n = nlabels
    if tab_rows[0] - lines0[0] != n:
        return _fail(st, LINE_COUNT, a, 0, -1, -1, tab_rows[0] - lines0[0])
    if nsid != 0 and nsid != n:
        return _fail(st, SAMPLE_ID_COUNT, a, 0, -1, -1, nsid)
    if nsid == 0:
        for r in range(n):
            sid_off[row0 + r + 1] = st[S_NSID]
    for r in range(next_ext, n):
        timestamps[row0 + r] = 0
    if n == 0:
        return -1  # an empty group: nothing to deliver, rolled back quietly
    return _finish_group(n, lines0, tab_feats, tab_feat_off, cur, (ends, refer, tab_rows, dense, group_start, st), a)
