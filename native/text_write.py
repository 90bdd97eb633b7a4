"""Kernels that write samples as text lines (``write_text_rows``), floats in the fewest digits that read back
to the same float32; and the byte and integer writers the record encoder shares."""

import math

import numpy as np

from .bundles import bundle
from .index import _u
from .jit import helper, inline
from .numbers import scan_float, written_float

_PIPE, _NL, _AT, _SEMI, _COMMA = 124, 10, 64, 59, 44

# The arrays of ``write_text_rows``, bundled by where they come from: numba passes a namedtuple's fields as it
# passes separate arguments, so the bundles cost nothing in the kernel.
# A block's samples: sample ids (blob, offsets), group numbers, sparse ids ``keys[starts[f, r]:ends[f, r]]`` with
# ``values``, dense rows, labels and timestamps.
TextRows = bundle(
    "TextRows",
    sid_bytes="u1[:]",
    sid_off="i8[:]",
    gid="i8[:]",
    starts="i8[:, :]",
    ends="i8[:, :]",
    keys="i8[:]",
    values="f4[:]",
    dense="f4[:, :]",
    labels="f4[:, :]",
    timestamps="i8[:]",
)
# Per feature of the schema, sparse then dense: name (blob, offsets), and a dense feature's columns.
TextLayout = bundle(
    "TextLayout",
    sp_name="u1[:]",
    sp_name_off="i8[:]",
    dn_name="u1[:]",
    dn_name_off="i8[:]",
    dn_base="i8[:]",
    dn_width="i8[:]",
)


@inline
def _put_bytes(out, p, src, a, b):
    for k in range(b - a):
        out[_u(p + k)] = src[_u(a + k)]
    return p + b - a


@helper
def _int_digits(v):
    """Characters of ``v`` in base 10 (with its sign)."""
    n = 1 if v >= 0 else 2
    while v >= 10 or v <= -10:
        v = -(v // -10) if v < 0 else v // 10  # truncating, so INT64_MIN never overflows
        n += 1
    return n


@helper
def _put_int_text(out, p, v):
    n = _int_digits(v)
    q = p + n - 1
    if v < 0:
        out[_u(p)] = 45  # '-'
        while v != 0:
            out[_u(q)] = np.uint8(48 - v % -10)
            v = -(v // -10)
            q -= 1
        return p + n
    while True:
        out[_u(q)] = np.uint8(48 + v % 10)
        v //= 10
        q -= 1
        if v == 0:
            return p + n


_NAN_TEXT = np.frombuffer(b"nan", np.uint8).copy()
_INF_TEXT = np.frombuffer(b"inf", np.uint8).copy()


@helper
def _digits_text(out, p, m, n):
    """The ``n`` decimal digits of ``m`` (zero-padded on the left) at ``out[p:p+n]``."""
    for k in range(n - 1, -1, -1):
        out[_u(p + k)] = np.uint8(48 + m % 10)
        m //= 10
    return p + n


@helper
def _decimal_text(out, p, neg, m, n, s):
    """``-``? then ``m * 10**-s`` (``m`` of ``n`` digits, no trailing zero when ``s > 0``)."""
    if neg:
        out[_u(p)] = 45
        p += 1
    e = n - 1 - s  # decimal exponent of the first digit
    if e < -7 or e > 15:
        p = _digits_text(out, p, m, n)
        out[_u(p)] = 101  # 'e'
        return _put_int_text(out, p + 1, -s)
    if s <= 0:
        p = _digits_text(out, p, m, n)
        for _ in range(-s):
            out[_u(p)] = 48
            p += 1
        return p
    if s >= n:
        out[_u(p)] = 48
        out[_u(p + 1)] = 46
        p += 2
        for _ in range(s - n):
            out[_u(p)] = 48
            p += 1
        return _digits_text(out, p, m, n)
    head = n - s
    div = 1
    for _ in range(s):
        div *= 10
    p = _digits_text(out, p, m // div, head)
    out[_u(p)] = 46
    return _digits_text(out, p + 1, m % div, s)


@helper
def put_float_text(out, p, v):
    """Write float32 ``v`` in the fewest significant digits that ``scan_float`` reads back exactly."""
    f = np.float32(v)
    if f != f:
        return _put_bytes(out, p, _NAN_TEXT, 0, 3)
    neg = f < 0 or (f == 0 and math.copysign(1.0, f) < 0)
    if neg:
        out[_u(p)] = 45
    if f == 0:
        out[_u(p + neg)] = 48
        return p + neg + 1
    x = abs(np.float64(f))
    if x == np.inf:
        return _put_bytes(out, p + neg, _INF_TEXT, 0, 3)
    e = int(math.floor(math.log10(x)))
    for n in range(1, 10):
        s = n - 1 - e
        m = np.int64(round(x * 10.0**s) if s <= 300 else round(x * 10.0**300 * 10.0 ** (s - 300)))
        nd = n
        if m >= 10**n:  # x rounded up to the next power of ten
            m //= 10
            s -= 1
        while s > 0 and m % 10 == 0 and m > 0:
            m //= 10
            s -= 1
            nd -= 1
        if m == 0:
            continue
        q = _decimal_text(out, p, neg, m, nd, s)
        back, status = scan_float(out, p, q)
        if status == 0 and np.float32(back) == f:
            return q
    return q  # 9 significant digits always read back; not reached


@helper
def write_text_rows(r, nrows, rows, layout, out, pos):
    """Write samples ``r..nrows-1`` as text lines into ``out[pos:]``.

    Sample ``r``'s sparse feature ``f`` is ``keys[starts[f, r]:ends[f, r]]``; ``gid[r]`` is its
    group number, -1 for a group of its own (empty group id).  A value of 1.0 and a dense
    row of zeros are left out (they read back the same).  Returns ``(next row, pos)``,
    stopping when the next line might not fit.
    """
    sid_bytes, sid_off, gid, labels, timestamps = rows.sid_bytes, rows.sid_off, rows.gid, rows.labels, rows.timestamps
    starts, ends, keys, values, dense = rows.starts, rows.ends, rows.keys, rows.values, rows.dense
    sp_name, sp_name_off, dn_name, dn_name_off = layout.sp_name, layout.sp_name_off, layout.dn_name, layout.dn_name_off
    dn_base, dn_width = layout.dn_base, layout.dn_width
    nsp = starts.shape[0]
    while r < nrows:
        worst = sid_off[r + 1] - sid_off[r] + 64 + labels.shape[1] * 17
        for f in range(nsp):
            worst += sp_name_off[f + 1] - sp_name_off[f] + 2 + (ends[f, r] - starts[f, r]) * 40
        for d in range(len(dn_width)):
            worst += dn_name_off[d + 1] - dn_name_off[d] + 2 + dn_width[d] * 17
        if pos + worst > len(out):
            return r, pos
        p = _put_bytes(out, pos, sid_bytes, sid_off[r], sid_off[r + 1])
        out[_u(p)] = _PIPE
        p += 1
        if gid[r] >= 0:
            p = _put_int_text(out, p, gid[r])
        out[_u(p)] = _PIPE
        p += 1
        first = True
        for f in range(nsp):
            a = starts[f, r]
            b = ends[f, r]
            if a == b:
                continue
            if not first:
                out[_u(p)] = _SEMI
                p += 1
            first = False
            p = _put_bytes(out, p, sp_name, sp_name_off[f], sp_name_off[f + 1])
            out[_u(p)] = _AT
            p += 1
            for i in range(a, b):
                if i > a:
                    out[_u(p)] = _COMMA
                    p += 1
                p = _put_int_text(out, p, keys[i])
                if values[i] != 1.0:
                    out[_u(p)] = 58  # ':'
                    p = put_float_text(out, p + 1, values[i])
        out[_u(p)] = _PIPE
        p += 1
        first = True
        for d in range(len(dn_width)):
            c0 = dn_base[d]
            present = False
            for c in range(c0, c0 + dn_width[d]):
                present |= written_float(dense[r, c])
            if not present:
                continue
            if not first:
                out[_u(p)] = _SEMI
                p += 1
            first = False
            p = _put_bytes(out, p, dn_name, dn_name_off[d], dn_name_off[d + 1])
            out[_u(p)] = _AT
            p += 1
            for c in range(c0, c0 + dn_width[d]):
                if c > c0:
                    out[_u(p)] = _COMMA
                    p += 1
                p = put_float_text(out, p, dense[r, c])
        out[_u(p)] = _PIPE
        p += 1
        for c in range(labels.shape[1]):
            if c:
                out[_u(p)] = _COMMA
                p += 1
            p = put_float_text(out, p, labels[r, c])
        out[_u(p)] = _PIPE
        p += 1
        if timestamps[r] != 0:
            p = _put_int_text(out, p, timestamps[r])
        out[_u(p)] = _NL
        pos = p + 1
        r += 1
    return r, pos
