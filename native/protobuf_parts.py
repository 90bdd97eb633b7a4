"""The pieces of decoding a record: the feature names a line is likely to hold, a failure noted in the state,
the ``timestamp`` extension, a line without features, the end of a group; and the bundles of arrays the decoding
kernels take (namedtuples: one argument each, unpacked at the top of a kernel into the names its body uses)."""

import collections

import numpy as np

from .bundles import bundle
from .index import _u
from .jit import helper, inline
from .names import is_name, lookup_name
from .numbers import OK, scan_int64
from .protobuf_codes import (
    MALFORMED,
    BAD_REFER,
    BAD_TIMESTAMP,
    S_NROWS,
    S_NGROUPS,
    S_POS,
    S_TABLE,
    S_LINE,
    S_FEATURE,
    S_GOT,
)
from .protobuf_wire import _len_field, _skip, _tag

_TIMESTAMP = np.frombuffer(b"timestamp", np.uint8).copy()

# Scalars of a decoding run: ``spb`` records, the longest record accepted, whether the first bad record ends the
# call, the labels a sample must have.
DecodeOptions = bundle("DecodeOptions", simple="bool", max_record="int", stop_on_error="bool", label_count="int")
# Where the declared features go: per feature (kind, index in its kind, table); per dense feature (nvec, first
# element of ``dn_elem_col``); per table, its sparse features ``tab_feats[tab_feat_off[k]:tab_feat_off[k + 1]]``.
FeatureLayout = bundle(
    "FeatureLayout",
    feat="i8[:, :]",
    dn_feat="i8[:, :]",
    dn_elem_col="i8[:]",
    tab_feats="i8[:]",
    tab_feat_off="i8[:]",
)
# Everything else a chunk's records are decoded into, and the error table and state of the call.
Rows = bundle(
    "Rows",
    ends="i8[:, :]",
    refer="i8[:, :]",
    tab_rows="i8[:]",
    dense="f4[:, :, :]",
    labels="f4[:, :]",
    timestamps="i8[:]",
    sid_bytes="u1[:]",
    sid_off="i8[:]",
    group_start="i8[:]",
    group_pos="i8[:]",
    errors="i8[:, :]",
    st="i8[:]",
)
# A record's scratch, made once per call: its lines' spans, the dense features seen in a line, one dense vector,
# float32 bit casting, each table's lines before the record, the names guessed per position of a line.
RecordScratch = collections.namedtuple("RecordScratch", ["spans", "dn_seen", "vec", "bits", "lines0", "guess"])


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
def _finish_group(n, lines0, tab_feats, tab_feat_off, cur, out, pos):
    """Checks after a group's fields: aux tables it lacks get one empty line, refers become block rows.  ``out``:
    the arrays of ``Rows`` it writes (the whole bundles at its two call sites doubled LLVM's time on the decoder)."""
    ends, refer, tab_rows, dense, group_start, st = out
    ntables = tab_rows.shape[0]
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
