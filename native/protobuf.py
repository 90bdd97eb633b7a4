"""Kernels of the protobuf sample formats (docs/formats.md, protobuf samples): wire-format decoding.

``decode_chunk`` walks length-prefixed records (``SampleGroup`` for ``pb``, ``SampleSimple``
for ``spb``) straight from the bytes, with no protobuf object: per table it records the
lines (``refer``, dense row), per sample the labels, timestamp and sample id, and writes
every sparse value of a declared feature straight into that feature's column.

The columns: each sparse feature has a region of the chunk's ``keys``/``hkeys``/``values``
(``first[f]:lim[f]``, sized by the front end from the ids seen so far) that its values fill
in row order (``cur[f]`` is the next free place), and ``ends[row, f]`` is where each row of its
table ends.  So a chunk's ids are written once, where the block keeps them, with no token
stream to lay out afterwards (that pass moved every id through memory twice more).  A record
that would overflow a region is left for the next call (status FULL).

It decodes as any protobuf parser does: fields in any order, repeated scalars packed or
not, unknown fields (groups included) skipped, the last value of a repeated optional
scalar kept.  A record that breaks the wire format or the schema's rules is rolled back
whole and reported in the error table; the next record is found by its length prefix.
"""
import numpy as np
from numba import njit

from .index import _u
from .jit import helper, inline
from .names import is_name, lookup_name
from .numbers import OK, _load8, scan_int64

# status of decode_chunk
DONE = 0
FULL = 1              # scratch full: a block of what was decoded, then call again
STOPPED_AT_ERROR = 2  # stop_on_error and a bad record: records before it were kept
UNFRAMED = 3          # a record length that cannot be trusted: the rest of the input is lost

# error codes
TRUNCATED = 1
TOO_LONG = 2
MALFORMED = 3
WRONG_WIRE_TYPE = 4
MISSING_REQUIRED = 5
MISSING_KEY = 6
TYPE_MISMATCH = 7
DENSE_VALUES = 8
DENSE_WIDTH = 9
DENSE_REPEATED = 10
TOO_FEW_LABELS = 11
LINE_COUNT = 12
SAMPLE_ID_COUNT = 13
BAD_REFER = 14
BAD_TIMESTAMP = 15
BAD_ENUM = 16

# columns of the error table
E_CODE = 0
E_RECORD = 1      # record index within the chunk
E_RECORD_POS = 2  # buffer position of the record's length prefix
E_POS = 3         # buffer position of the offending bytes
E_TABLE = 4
E_LINE = 5        # line within the group's table
E_FEATURE = 6     # declared feature (index in the name table) or -1
E_GOT = 7         # the count or value found
ERROR_COLUMNS = 8

# slots of the state array shared by the decoding functions
S_FULL_FEATURE = 0  # the sparse feature whose region a FULL status ran out of, or -1
S_NSID = 1
S_NROWS = 2
S_NGROUPS = 3
S_ANY_HKEY = 4
S_POS = 5
S_TABLE = 6
S_LINE = 7
S_FEATURE = 8
S_GOT = 9
STATE_SLOTS = 10

REGION_FULL = -2  # _decode_record: a value found its feature's region full (rolled back, status FULL)

# kinds of declared features
SPARSE = 0
DENSE = 1

_ONE_BITS = np.uint32(0x3F800000)  # float32 1.0, the value of a sparse value without one
_TIMESTAMP = np.frombuffer(b"timestamp", np.uint8).copy()


_HIGH_BITS = np.uint64(0x8080808080808080)
_LOW_SEVENS = np.uint64(0x7F7F7F7F7F7F7F7F)
_BYTE_INDEX = np.uint64(0x0001020304050607)  # (1 << 8k) * this >> 56 == k


@inline
def _varint(buf, p, end):
    """``(value, next p)``; next p is -1 when the varint runs past ``end`` or over 10 bytes.

    One-byte varints take the first branch; up to eight bytes are decoded from one 64-bit
    load (the first byte without a continuation bit ends it; its 7-bit groups are packed
    in three pairwise steps); longer ones (negative numbers) go byte by byte.  The load is
    bounded by the buffer, not by ``end``: a short field (a key with no weight after it)
    takes it too, and a stop found past ``end`` is the same error the byte loop finds.
    """
    if p < end:
        b = buf[_u(p)]
        if b < 0x80:
            return np.uint64(b), p + 1
    if p + 8 <= len(buf):
        x = _load8(buf, p)
        stops = ~x & _HIGH_BITS
        if stops != 0:
            low = stops & (~stops + np.uint64(1))     # the first stop bit, 1 << (8k + 7)
            k = np.int64(((low >> np.uint64(7)) * _BYTE_INDEX) >> np.uint64(56))
            if p + k + 1 > end:
                return np.uint64(0), -1
            x &= ((low << np.uint64(1)) - np.uint64(1)) & _LOW_SEVENS
            # pack the 7-bit groups pairwise: bytes into 14 bits, pairs into 28, halves into 56
            x = (x & np.uint64(0x007F007F007F007F)) | ((x >> np.uint64(1)) & np.uint64(0x3F803F803F803F80))
            x = (x & np.uint64(0x00003FFF00003FFF)) | ((x >> np.uint64(2)) & np.uint64(0x0FFFC0000FFFC000))
            x = (x & np.uint64(0x000000000FFFFFFF)) | ((x >> np.uint64(4)) & np.uint64(0x00FFFFFFF0000000))
            return x, p + k + 1
    x = np.uint64(0)
    shift = np.uint64(0)
    while p < end and shift < 64:
        b = buf[_u(p)]
        p += 1
        x |= np.uint64(b & 0x7F) << shift
        if b < 0x80:
            return x, p
        shift += np.uint64(7)
    return x, -1


@inline
def _tag(buf, p, end):
    """``(field number, wire type, next p)`` of the tag at ``p``; next p is -1 when malformed."""
    tag, p = _varint(buf, p, end)
    return np.int64(tag >> np.uint64(3)), np.int64(tag & np.uint64(7)), p


@inline
def _u32(buf, p):
    return (np.uint32(buf[_u(p)]) | (np.uint32(buf[_u(p + 1)]) << np.uint32(8))
            | (np.uint32(buf[_u(p + 2)]) << np.uint32(16)) | (np.uint32(buf[_u(p + 3)]) << np.uint32(24)))


@inline
def _f32(buf, p, bits):
    """The little-endian float32 at ``buf[p:p+4]``; ``bits`` is ``(f, f.view(uint32))`` of one float32.

    Going through one shared pair of views is the cheap bit cast: a view made per call
    costs more than the whole rest of decoding a value.
    """
    bits[1][0] = _u32(buf, p)
    return bits[0][0]


@inline
def _len_field(buf, p, end):
    """``(start, stop)`` of a length-delimited value at ``p``; start is -1 when malformed."""
    n, p = _varint(buf, p, end)
    if p < 0 or n > np.uint64(end - p):
        return -1, -1
    return p, p + np.int64(n)


@helper
def _skip(buf, p, end, wt, field):
    """Position after the value of a field of wire type ``wt``, or -1 when malformed."""
    if wt == 0:
        _, p = _varint(buf, p, end)
        return p
    if wt == 1:
        return p + 8 if p + 8 <= end else -1
    if wt == 2:
        _, stop = _len_field(buf, p, end)
        return stop
    if wt == 5:
        return p + 4 if p + 4 <= end else -1
    if wt == 3:  # a group: skip fields up to its end-group tag (nested groups included)
        depth = 1
        stack_field = field
        while p < end:
            f, w, p = _tag(buf, p, end)
            if p < 0:
                return -1
            if w == 4:
                depth -= 1
                if depth == 0:
                    return p if f == stack_field else -1
                continue
            if w == 3:
                depth += 1
                continue
            p = _skip(buf, p, end, w, f)
            if p < 0:
                return -1
        return -1
    return -1


_GUESSES = 64  # Feature entries of a line whose names are remembered (``_declared``)


@inline
def _declared(buf, na, nb, slots, names, name_off, guess, k, nth):
    """``lookup_name`` of a line's ``nth`` Feature entry (counted from 1) in table ``k``.

    Lines of a file mostly name the same features in the same order, so the feature found at
    this place of the previous line is tried first: one comparison instead of a hash and a probe.
    """
    if nth <= _GUESSES:
        g = guess[k, nth - 1]
        if g >= 0 and is_name(buf, na, nb, g, names, name_off):
            return g
    code = lookup_name(buf, na, nb, slots, names, name_off)
    if nth <= _GUESSES:
        guess[k, nth - 1] = code
    return code


@helper
def _fail(st, code, pos, table, line, feature, got):
    st[S_POS] = pos
    st[S_TABLE] = table
    st[S_LINE] = line
    st[S_FEATURE] = feature
    st[S_GOT] = got
    return code


@helper
def _timestamp(buf, a, b, st):
    """The ``timestamp`` entry of an ``Extensions`` message: ``(value, error code)``; 0 when absent."""
    ts = np.int64(0)
    p = a
    while p < b:
        fpos = p
        field, wt, p = _tag(buf, p, b)
        if p < 0:
            return ts, _fail(st, MALFORMED, fpos, 0, -1, -1, 0)
        if field != 1 or wt != 2:
            p = _skip(buf, p, b, wt, field)
            if p < 0:
                return ts, _fail(st, MALFORMED, fpos, 0, -1, -1, 0)
            continue
        ea, eb = _len_field(buf, p, b)
        if ea < 0:
            return ts, _fail(st, MALFORMED, fpos, 0, -1, -1, 0)
        p = eb
        ka = kb = va = vb = -1
        q = ea
        while q < eb:
            f, w, q = _tag(buf, q, eb)
            if q < 0:
                return ts, _fail(st, MALFORMED, fpos, 0, -1, -1, 0)
            if (f == 1 or f == 2) and w == 2:
                s0, s1 = _len_field(buf, q, eb)
                if s0 < 0:
                    return ts, _fail(st, MALFORMED, fpos, 0, -1, -1, 0)
                if f == 1:
                    ka, kb = s0, s1
                else:
                    va, vb = s0, s1
                q = s1
            else:
                q = _skip(buf, q, eb, w, f)
                if q < 0:
                    return ts, _fail(st, MALFORMED, fpos, 0, -1, -1, 0)
        if ka >= 0 and kb - ka == len(_TIMESTAMP):
            same = True
            for k in range(kb - ka):
                if buf[_u(ka + k)] != _TIMESTAMP[k]:
                    same = False
            if same:
                if va < 0:
                    ts = np.int64(0)
                else:
                    v, status = scan_int64(buf, va, vb)
                    if status != OK:
                        return ts, _fail(st, BAD_TIMESTAMP, va, 0, -1, -1, 0)
                    ts = v
    return ts, 0


@helper
def _empty_line(table, row, cur, ends, tab_feats, tab_feat_off, refer, dense):
    """Add an empty line (only for lines a group lacks: the hot path does lines inline)."""
    for j in range(tab_feat_off[table], tab_feat_off[table + 1]):
        f = tab_feats[j]
        ends[row, f] = cur[f]
    refer[table, row] = 0
    for c in range(dense.shape[2]):
        dense[table, row, c] = 0.0


@helper
def _finish_group(n, lines0, tab_rows, ntables, cur, ends, tab_feats, tab_feat_off, refer, dense, group_start, st,
                  pos):
    """Checks after a group's fields: aux tables it lacks get one empty line, refers become block rows."""
    for k in range(1, ntables):
        if tab_rows[k] == lines0[k]:
            row = tab_rows[k]
            _empty_line(k, row, cur, ends, tab_feats, tab_feat_off, refer, dense)
            tab_rows[k] = row + 1
            for r in range(lines0[k - 1], tab_rows[k - 1]):
                refer[k - 1, r] = 0
    for k in range(ntables - 1):
        m = tab_rows[k + 1] - lines0[k + 1]
        for r in range(lines0[k], tab_rows[k]):
            v = refer[k, r]
            if v < 0 or v >= m:
                return _fail(st, BAD_REFER, pos, k, r - lines0[k], -1, v)
            refer[k, r] = lines0[k + 1] + v
    g = st[S_NGROUPS]
    group_start[g] = st[S_NROWS]
    st[S_NGROUPS] = g + 1
    st[S_NROWS] += n
    return 0


@helper
def _decode_record(buf, a, b, simple, label_count, slots, names, name_off, feat, dn_feat, dn_elem_col, keys,
                   hkeys, val_bits, first, cur, lim, ends, tab_feats, tab_feat_off, refer, tab_rows, dense, labels,
                   timestamps, sid_bytes, sid_off, group_start, spans, dn_seen, vec, bits, lines0, guess, st):
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
            if (fa + 4 <= fb and buf[_u(fa)] == 0x08 and buf[_u(fa + 1)] == 1 and buf[_u(fa + 2)] == 0x12
                    and buf[_u(fa + 3)] < 0x80 and fa + 4 + np.int64(buf[_u(fa + 3)]) <= fb):
                na = fa + 4
                nb = na + np.int64(buf[_u(fa + 3)])
                code = _declared(buf, na, nb, slots, names, name_off, guess, k, nth)
                if code >= 0 and feat[code, 2] == k and feat[code, 0] == SPARSE:
                    fi = feat[code, 1]
                    t = cur[fi]  # committed when the whole entry took the canonical shape
                    room = lim[fi]
                    q = nb
                    while q < fb:
                        if buf[_u(q)] != 0x1a or q + 1 >= fb:
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
        return _finish_group(1, lines0, tab_rows, ntables, cur, ends, tab_feats, tab_feat_off, refer, dense,
                             group_start, st, a)
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
    return _finish_group(n, lines0, tab_rows, ntables, cur, ends, tab_feats, tab_feat_off, refer, dense,
                         group_start, st, a)


@njit(nogil=True, cache=True)
def decode_chunk(buf, end, final, simple, max_record, stop_on_error, label_count,
                 slots, names, name_off, feat, dn_feat, dn_elem_col, tab_feats, tab_feat_off,
                 keys, hkeys, values, first, cur, lim, ends, refer, tab_rows, dense, labels,
                 timestamps, sid_bytes, sid_off, group_start, group_pos, errors, st):
    """Decode the whole records in ``buf[:end]``; ``group_pos`` gets each group's record position.

    Returns ``(status, consumed, records, nerr)``; counts of rows, groups and sample-id bytes
    are in ``st``, lines per table in ``tab_rows``, the sparse columns as the module says
    (``cur`` starts as a copy of ``first``).  Unless ``final``, a record cut by ``end`` is left
    for the next call (``consumed`` points at it).  A record is only started when the scratch
    can hold the most rows, labels and sample-id bytes it could produce, so the decoding
    functions need no bounds checks for those; when it cannot, or when a value finds its
    column's region full (``st[S_FULL_FEATURE]`` says which), the status is FULL.
    """
    ntables = tab_rows.shape[0]
    for k in range(ntables):
        tab_rows[k] = 0
    for k in range(STATE_SLOTS):
        st[k] = 0
    st[S_FULL_FEATURE] = -1
    sid_off[0] = 0
    one = np.zeros(1, np.float32)
    bits = (one, one.view(np.uint32))
    val_bits = values.view(np.uint32)
    guess = np.full((ntables, _GUESSES), -1, np.int64)
    widest = 1
    for d in range(len(dn_feat)):
        widest = max(widest, dn_feat[d, 0])
    vec = np.empty(widest, np.float32)
    dn_seen = np.zeros(len(dn_feat), np.bool_)
    spans = np.empty((refer.shape[1], 3), np.int64)
    lines0 = np.zeros(ntables, np.int64)
    saved = np.zeros(ntables, np.int64)
    saved_cur = np.empty_like(cur)
    pos = 0
    records = 0
    nerr = 0
    while True:
        if pos + 4 > end:
            if final and pos < end:
                _error_row(errors, nerr, TRUNCATED, records, pos, pos, -1, -1, -1, end - pos)
                return UNFRAMED, end, records, nerr + 1
            return DONE, pos, records, nerr
        length = np.int64(_u32(buf, pos))
        if length > max_record:
            _error_row(errors, nerr, TOO_LONG, records, pos, pos, -1, -1, -1, length)
            return UNFRAMED, end, records, nerr + 1
        a = pos + 4
        b = a + length
        if b > end:
            if final:
                _error_row(errors, nerr, TRUNCATED, records, pos, pos, -1, -1, -1, end - a)
                return UNFRAMED, end, records, nerr + 1
            return DONE, pos, records, nerr
        # worst case of one record: a line or label per 2 bytes
        if (st[S_NSID] + length > len(sid_bytes)
                or st[S_NROWS] + length // 2 + 2 > len(timestamps) or st[S_NGROUPS] + 2 > len(group_start)
                or nerr + 2 > len(errors)):
            return FULL, pos, records, nerr
        full = False
        for k in range(ntables):
            if tab_rows[k] + length // 2 + 2 > refer.shape[1]:
                full = True
        if full:
            return FULL, pos, records, nerr
        nsid = st[S_NSID]
        any_h = st[S_ANY_HKEY]
        for k in range(ntables):
            saved[k] = tab_rows[k]
        for f in range(len(cur)):  # loops, not slice copies: those compile numpy's shape-mismatch error message
            saved_cur[f] = cur[f]
        groups0 = st[S_NGROUPS]
        err = _decode_record(buf, a, b, simple, label_count, slots, names, name_off, feat, dn_feat, dn_elem_col, keys,
                             hkeys, val_bits, first, cur, lim, ends, tab_feats, tab_feat_off, refer, tab_rows, dense,
                             labels, timestamps, sid_bytes, sid_off, group_start, spans, dn_seen, vec, bits, lines0,
                             guess, st)
        if err != 0:
            st[S_NSID] = nsid
            st[S_ANY_HKEY] = any_h
            for k in range(ntables):
                tab_rows[k] = saved[k]
            for f in range(len(cur)):
                cur[f] = saved_cur[f]
            if err == REGION_FULL:
                return FULL, pos, records, nerr
            if err > 0:
                _error_row(errors, nerr, err, records, pos, st[S_POS], st[S_TABLE], st[S_LINE], st[S_FEATURE],
                           st[S_GOT])
                nerr += 1
                if stop_on_error:
                    return STOPPED_AT_ERROR, pos, records, nerr
        for g in range(groups0, st[S_NGROUPS]):
            group_pos[g] = pos
        pos = b
        records += 1


@helper
def frame_records(buf, filled, max_record, starts):
    """Starts of the whole length-prefixed records in ``buf[:filled]``, into ``starts``.

    Returns ``(count, position after the last whole record, bad)``; ``bad`` when the length
    at that position is above ``max_record`` (nothing after it can be framed).
    """
    p = 0
    k = 0
    while p + 4 <= filled:
        length = np.int64(_u32(buf, p))
        if length > max_record:
            return k, p, True
        if p + 4 + length > filled:
            break
        starts[k] = p
        k += 1
        p += 4 + length
    return k, p, False


@helper
def _error_row(errors, k, code, record, record_pos, pos, table, line, feature, got):
    errors[k, E_CODE] = code
    errors[k, E_RECORD] = record
    errors[k, E_RECORD_POS] = record_pos
    errors[k, E_POS] = pos
    errors[k, E_TABLE] = table
    errors[k, E_LINE] = line
    errors[k, E_FEATURE] = feature
    errors[k, E_GOT] = got


@helper
def _scan_line(buf, a, b, table, slots, names, name_off, known_kind, known_table, found):
    """First feature of a FeatureLine not in the table (or known with another table or type).

    Writes ``(kind, name start, name end, table, width)`` into ``found`` and returns True
    when there is one; kind 1 sparse, 2 dense, 3 a conflict with the known feature.
    """
    p = a
    while p < b:
        field, wt, p = _tag(buf, p, b)
        if p < 0:
            return False
        if field != 1 or wt != 2:
            p = _skip(buf, p, b, wt, field)
            if p < 0:
                return False
            continue
        fa, fb = _len_field(buf, p, b)
        if fa < 0:
            return False
        p = fb
        ftype = np.int64(0)
        na = nb = -1
        width = 0
        q = fa
        while q < fb:
            f, w, q = _tag(buf, q, fb)
            if q < 0:
                return False
            if f == 1 and w == 0:
                v, q = _varint(buf, q, fb)
                ftype = np.int64(v)
            elif f == 2 and w == 2:
                na, nb = _len_field(buf, q, fb)
                q = nb
            elif f == 3 and w == 2 and width == 0:
                va, vb = _len_field(buf, q, fb)
                if va < 0:
                    return False
                q = vb
                r = va
                while r < vb:  # count the vector's floats
                    vf, vw, r = _tag(buf, r, vb)
                    if r < 0:
                        return False
                    if vf == 3 and vw == 5:
                        width += 1
                    elif vf == 3 and vw == 2:
                        sa, sb = _len_field(buf, r, vb)
                        if sa < 0:
                            return False
                        width += (sb - sa) // 4
                    r = _skip(buf, r, vb, vw, vf) if not (vf == 3 and vw == 5) else r + 4
                    if r < 0:
                        return False
            else:
                q = _skip(buf, q, fb, w, f)
            if q < 0:
                return False
        if na < 0 or (ftype != 1 and ftype != 2):
            continue
        kind = 1 if ftype == 1 else 2
        code = lookup_name(buf, na, nb, slots, names, name_off)
        if code >= 0 and known_table[code] == table and known_kind[code] == kind:
            continue
        found[0] = 3 if code >= 0 else kind
        found[1] = na
        found[2] = nb
        found[3] = table
        found[4] = width
        return True
    return False


@helper
def scan_record_names(buf, start, end, simple, slots, names, name_off, known_kind, known_table, labels_seen, found):
    """Walk the whole records of ``buf[start:end]`` for the first feature the table does not know.

    Returns the position of the record holding it (``found`` says what it is, see
    ``_scan_line``), or the position after the last whole record when there is none
    (``found[0] == 0``).  ``labels_seen[0]``/``[1]`` keep the fewest and most label values
    of a sample.  Malformed records are passed over: reading them reports them.
    """
    found[0] = 0
    p = start
    while p + 4 <= end:
        length = np.int64(_u32(buf, p))
        a = p + 4
        b = a + length
        if b > end:
            return p
        q = a
        table = 0
        while q < b:
            field, wt, q = _tag(buf, q, b)
            if q < 0:
                break
            if wt != 2:
                q = _skip(buf, q, b, wt, field)
                if q < 0:
                    break
                continue
            fa, fb = _len_field(buf, q, b)
            if fa < 0:
                break
            q = fb
            if field == 2:  # labels (SampleGroup) or label (SampleSimple)
                n = 0
                r = fa
                while r < fb:
                    lf, lw, r = _tag(buf, r, fb)
                    if r < 0:
                        break
                    if lf == 1 and lw == 5:
                        n += 1
                    elif lf == 1 and lw == 2:
                        sa, sb = _len_field(buf, r, fb)
                        n += (sb - sa) // 4
                    r = r + 4 if (lf == 1 and lw == 5) else _skip(buf, r, fb, lw, lf)
                    if r < 0:
                        break
                if n < labels_seen[0]:
                    labels_seen[0] = n
                if n > labels_seen[1]:
                    labels_seen[1] = n
            elif field == 3 and simple:
                if _scan_line(buf, fa, fb, 0, slots, names, name_off, known_kind, known_table, found):
                    return p
            elif field == 3:
                r = fa
                while r < fb:
                    lf, lw, r = _tag(buf, r, fb)
                    if r < 0:
                        break
                    if lf == 1 and lw == 2:
                        la, lb = _len_field(buf, r, fb)
                        if la < 0:
                            break
                        if _scan_line(buf, la, lb, table, slots, names, name_off, known_kind, known_table, found):
                            return p
                        r = lb
                    else:
                        r = _skip(buf, r, fb, lw, lf)
                        if r < 0:
                            break
                table += 1
        p = b
    return p
