"""Kernels that write blocks as protobuf records (``ingest convert`` to pb and spb, ``produce``).

``encode_groups`` writes the sample groups of a block as length-prefixed ``SampleGroup`` records with
structured compression (aux features once per distinct aux line of a group) or as ``SampleSimple`` records.
Sizes of nested messages are computed before writing, so every length prefix is minimal.  Text output is
``text_write.py``'s, the scan of text input for its features ``scan.py``'s.
"""

import numpy as np

from .bundles import bundle
from .index import _u
from .jit import helper, inline, kernel
from .numbers import same_float, written_float
from .text_write import _int_digits, _put_bytes, _put_int_text

# side of a line: the features it carries
MAIN = 0
AUX = 1
ALL = 2

# how many earlier distinct aux lines of a group a sample's aux content is compared with
_AUX_LOOKBACK = 8

_TIMESTAMP_ENTRY_KEY = np.frombuffer(b"\x0a\x09timestamp", np.uint8).copy()

# The arrays of ``encode_groups``, bundled by where they come from: numba passes a namedtuple's fields as it passes
# separate arguments, so the bundles cost nothing in the kernels.
# Per sample, what a record holds besides its lines: group bounds, labels, timestamps, sample ids (blob, offsets).
SampleColumns = bundle(
    "SampleColumns",
    group_offsets="i8[:]",
    labels="f4[:, :]",
    timestamps="i8[:]",
    sid_bytes="u1[:]",
    sid_off="i8[:]",
)
# A block's feature values: sparse ids ``keys[offsets[f, r]:offsets[f, r + 1]]`` with ``values``, dense rows.
FeatureColumns = bundle("FeatureColumns", offsets="i8[:, :]", keys="i8[:]", values="f4[:]", dense="f4[:, :]")
# Per feature of the schema, sparse then dense: aux or not, Feature header (blob, offsets), dense columns.
EncodeLayout = bundle(
    "EncodeLayout",
    sp_aux="b1[:]",
    sp_hdr="u1[:]",
    sp_hdr_off="i8[:]",
    dn_base="i8[:]",
    dn_width="i8[:]",
    dn_aux="b1[:]",
    dn_hdr="u1[:]",
    dn_hdr_off="i8[:]",
)
# Scratch: each row's aux line (``refer``), the distinct aux lines, line sizes, sparse body sizes per line.
EncodeScratch = bundle("EncodeScratch", refer="i8[:]", distinct="i8[:]", line_size="i8[:]", bodies="i8[:, :]")


@inline
def _vlen(x):
    """Bytes of the varint of ``x`` (an int64, negative ones taking 10)."""
    u = np.uint64(x)
    n = 1
    while u >= np.uint64(0x80):
        u >>= np.uint64(7)
        n += 1
    return n


@inline
def _put_varint(out, p, x):
    u = np.uint64(x)
    while u >= np.uint64(0x80):
        out[_u(p)] = np.uint8((u & np.uint64(0x7F)) | np.uint64(0x80))
        u >>= np.uint64(7)
        p += 1
    out[_u(p)] = np.uint8(u)
    return p + 1


@inline
def _put_f32(out, p, v, bits):
    """Write float32 ``v`` little-endian; ``bits`` is ``(f, f.view(uint32))`` of one float32 (a cheap bit cast)."""
    bits[0][0] = v
    x = bits[1][0]
    out[_u(p)] = np.uint8(x & np.uint32(0xFF))
    out[_u(p + 1)] = np.uint8((x >> np.uint32(8)) & np.uint32(0xFF))
    out[_u(p + 2)] = np.uint8((x >> np.uint32(16)) & np.uint32(0xFF))
    out[_u(p + 3)] = np.uint8(x >> np.uint32(24))
    return p + 4


@inline
def _entry(body):
    """Size of a length-delimited field (one-byte tag) with a body of ``body`` bytes."""
    return 1 + _vlen(body) + body


_NO_HKEYS = np.empty(0, np.int64)  # text input has no high keys


@helper
def _value_size(key, hkey, value):
    """Size of one sparse ``FeatureValue`` body: key, value unless 1.0, hkey unless 0."""
    return 1 + _vlen(key) + (5 if value != 1.0 else 0) + (1 + _vlen(hkey) if hkey != 0 else 0)


@helper
def sparse_body(f, r, offsets, keys, hkeys, values, hdr_off):
    """Body size of sparse feature ``f`` of row ``r``; 0 when the row has no value (``hkeys`` empty: all 0)."""
    a = offsets[f, r]
    b = offsets[f, r + 1]
    if a == b:
        return 0
    size = hdr_off[f + 1] - hdr_off[f]
    with_h = len(hkeys) > 0
    for i in range(a, b):
        size += _entry(_value_size(keys[i], hkeys[i] if with_h else 0, values[i]))
    return size


@helper
def write_sparse_feature(out, p, f, r, body, offsets, keys, hkeys, values, hdr, hdr_off, bits):
    """Sparse feature ``f`` of row ``r`` as a ``FeatureLine.features`` entry of ``body`` bytes (``sparse_body``):
    its header (name, type), then one ``Feature.values`` entry per id."""
    out[_u(p)] = 0x0A  # FeatureLine.features
    p = _put_varint(out, p + 1, body)
    p = _put_bytes(out, p, hdr, hdr_off[f], hdr_off[f + 1])
    with_h = len(hkeys) > 0
    for i in range(offsets[f, r], offsets[f, r + 1]):
        h = hkeys[i] if with_h else 0
        out[_u(p)] = 0x1A  # Feature.values
        p = _put_varint(out, p + 1, _value_size(keys[i], h, values[i]))
        out[_u(p)] = 0x08  # FeatureValue.key
        p = _put_varint(out, p + 1, keys[i])
        if values[i] != 1.0:
            out[_u(p)] = 0x15  # FeatureValue.value (fixed32)
            p = _put_f32(out, p + 1, values[i], bits)
        if h != 0:
            out[_u(p)] = 0x20  # FeatureValue.hkey
            p = _put_varint(out, p + 1, h)
    return p


@helper
def _dense_present(d, r, dense, dn_base, dn_width):
    for c in range(dn_base[d], dn_base[d] + dn_width[d]):
        if written_float(dense[r, c]):
            return True
    return False


@helper
def _dense_body(d, dn_width, hdr_off):
    vec = 4 * dn_width[d]
    return hdr_off[d + 1] - hdr_off[d] + _entry(_entry(vec))


@helper
def _line_size(r, side, refer, features, layout, bodies, slot):
    """Size of the line of row ``r`` with the features of ``side``; keeps each sparse body size in ``bodies[slot]``."""
    offsets, keys, values, dense = features.offsets, features.keys, features.values, features.dense
    sp_aux, sp_hdr_off, dn_aux, dn_hdr_off = layout.sp_aux, layout.sp_hdr_off, layout.dn_aux, layout.dn_hdr_off
    dn_base, dn_width = layout.dn_base, layout.dn_width
    size = 0
    for f in range(offsets.shape[0]):
        if side == ALL or sp_aux[f] == (side == AUX):
            body = sparse_body(f, r, offsets, keys, _NO_HKEYS, values, sp_hdr_off)
            bodies[slot, f] = body
            if body:
                size += _entry(body)
    for d in range(len(dn_width)):
        if (side == ALL or dn_aux[d] == (side == AUX)) and _dense_present(d, r, dense, dn_base, dn_width):
            size += _entry(_dense_body(d, dn_width, dn_hdr_off))
    if refer != 0:
        size += 1 + _vlen(refer)
    return size


@helper
def write_timestamp_ext(out, p, ts):
    """One ``SampleGroup.extensions`` entry holding the map entry ``timestamp -> "<ts>"``."""
    out[_u(p)] = 0x2A  # SampleGroup.extensions
    p = _put_varint(out, p + 1, _ext_body(ts))
    out[_u(p)] = 0x0A  # Extensions.extension (a map entry)
    p = _put_varint(out, p + 1, len(_TIMESTAMP_ENTRY_KEY) + _entry(_int_digits(ts)))
    p = _put_bytes(out, p, _TIMESTAMP_ENTRY_KEY, 0, len(_TIMESTAMP_ENTRY_KEY))
    out[_u(p)] = 0x12  # entry value
    p = _put_varint(out, p + 1, _int_digits(ts))
    return _put_int_text(out, p, ts)


@helper
def write_dense_feature(out, p, d, r, dense, dn_base, dn_width, dn_hdr, dn_hdr_off, bits):
    """Dense feature ``d`` of row ``r`` as a ``FeatureLine.features`` entry: one FeatureValue holding the vector."""
    vec = 4 * dn_width[d]
    out[_u(p)] = 0x0A
    p = _put_varint(out, p + 1, _dense_body(d, dn_width, dn_hdr_off))
    p = _put_bytes(out, p, dn_hdr, dn_hdr_off[d], dn_hdr_off[d + 1])
    out[_u(p)] = 0x1A
    p = _put_varint(out, p + 1, _entry(vec))
    out[_u(p)] = 0x1A  # FeatureValue.vector, packed
    p = _put_varint(out, p + 1, vec)
    for c in range(dn_base[d], dn_base[d] + dn_width[d]):
        p = _put_f32(out, p, dense[r, c], bits)
    return p


@helper
def _write_line(out, p, r, side, refer, features, layout, bits, bodies, slot):
    """Write the line sized by ``_line_size`` (same row, side and slot)."""
    offsets, keys, values, dense = features.offsets, features.keys, features.values, features.dense
    sp_aux, sp_hdr, sp_hdr_off = layout.sp_aux, layout.sp_hdr, layout.sp_hdr_off
    dn_base, dn_width, dn_aux = layout.dn_base, layout.dn_width, layout.dn_aux
    dn_hdr, dn_hdr_off = layout.dn_hdr, layout.dn_hdr_off
    for f in range(offsets.shape[0]):
        if side == ALL or sp_aux[f] == (side == AUX):
            if bodies[slot, f]:
                p = write_sparse_feature(
                    out, p, f, r, bodies[slot, f], offsets, keys, _NO_HKEYS, values, sp_hdr, sp_hdr_off, bits
                )
    for d in range(len(dn_width)):
        if (side == ALL or dn_aux[d] == (side == AUX)) and _dense_present(d, r, dense, dn_base, dn_width):
            p = write_dense_feature(out, p, d, r, dense, dn_base, dn_width, dn_hdr, dn_hdr_off, bits)
    if refer != 0:
        out[_u(p)] = 0x10  # FeatureLine.refer
        p = _put_varint(out, p + 1, refer)
    return p


@helper
def _same_aux(r1, r2, offsets, keys, values, sp_aux, dense, dn_base, dn_width, dn_aux):
    for f in range(offsets.shape[0]):
        if not sp_aux[f]:
            continue
        a1 = offsets[f, r1]
        a2 = offsets[f, r2]
        n = offsets[f, r1 + 1] - a1
        if offsets[f, r2 + 1] - a2 != n:
            return False
        for i in range(n):
            if keys[a1 + i] != keys[a2 + i] or not same_float(values[a1 + i], values[a2 + i]):
                return False
    for d in range(len(dn_width)):
        if dn_aux[d]:
            for c in range(dn_base[d], dn_base[d] + dn_width[d]):
                if not same_float(dense[r1, c], dense[r2, c]):
                    return False
    return True


@helper
def _labels_body(label_count):
    return _entry(4 * label_count) if label_count > 0 else 0


@helper
def _write_labels(out, p, labels, r, bits):
    n = labels.shape[1]
    out[_u(p)] = 0x12  # labels / label
    p = _put_varint(out, p + 1, _labels_body(n))
    if n > 0:
        out[_u(p)] = 0x0A  # Label.values, packed
        p = _put_varint(out, p + 1, 4 * n)
        for c in range(n):
            p = _put_f32(out, p, labels[r, c], bits)
    return p


@helper
def _ext_body(ts):
    entry = len(_TIMESTAMP_ENTRY_KEY) + _entry(_int_digits(ts))
    return _entry(entry)


@kernel
def encode_groups(g0, simple, samples, features, layout, scratch, out, out_pos):
    """Write groups ``g0..`` as length-prefixed records (``simple``: ``SampleSimple`` ones) into ``out[out_pos:]``.

    Returns ``(next group, out_pos)``: it stops early, at a group boundary, when the next
    record would not fit in ``out``.  In ``scratch``, ``refer`` and ``distinct`` hold the rows of the
    largest group, ``line_size`` and ``bodies`` (``[2 * rows, sparse features]``) twice that.
    """
    group_offsets, labels, timestamps = samples.group_offsets, samples.labels, samples.timestamps
    sid_bytes, sid_off = samples.sid_bytes, samples.sid_off
    sp_aux, dn_aux = layout.sp_aux, layout.dn_aux
    refer, distinct, line_size, bodies = scratch.refer, scratch.distinct, scratch.line_size, scratch.bodies
    offsets, keys, values, dense = features.offsets, features.keys, features.values, features.dense
    dn_base, dn_width = layout.dn_base, layout.dn_width
    one = np.zeros(1, np.float32)
    bits = (one, one.view(np.uint32))
    ngroups = len(group_offsets) - 1
    has_aux = False
    for f in range(len(sp_aux)):
        has_aux |= sp_aux[f]
    for d in range(len(dn_aux)):
        has_aux |= dn_aux[d]
    has_aux = has_aux and not simple
    label_body = _labels_body(labels.shape[1])
    g = g0
    while g < ngroups:
        r0 = group_offsets[g]
        r1 = group_offsets[g + 1]
        if simple:
            # one SampleSimple per row
            need = 0
            for r in range(r0, r1):
                ls = _line_size(r, ALL, 0, features, layout, bodies, r - r0)
                line_size[r - r0] = ls
                need += 4 + _entry(sid_off[r + 1] - sid_off[r]) + _entry(label_body) + _entry(ls)
            if out_pos + need > len(out):
                return g, out_pos
            for r in range(r0, r1):
                ls = line_size[r - r0]
                body = _entry(sid_off[r + 1] - sid_off[r]) + _entry(label_body) + _entry(ls)
                p = out_pos
                for k in range(4):
                    out[_u(p + k)] = np.uint8((body >> (8 * k)) & 0xFF)
                p += 4
                out[_u(p)] = 0x0A  # sample_id
                p = _put_varint(out, p + 1, sid_off[r + 1] - sid_off[r])
                p = _put_bytes(out, p, sid_bytes, sid_off[r], sid_off[r + 1])
                p = _write_labels(out, p, labels, r, bits)
                out[_u(p)] = 0x1A  # feature_line
                p = _put_varint(out, p + 1, ls)
                p = _write_line(out, p, r, ALL, 0, features, layout, bits, bodies, r - r0)
                out_pos = p
            g += 1
            continue
        # aux lines: a sample refers to an earlier distinct aux line of equal content, or adds one
        ndist = 0
        if has_aux:
            for r in range(r0, r1):
                match = -1
                for d in range(ndist - 1, max(-1, ndist - 1 - _AUX_LOOKBACK), -1):
                    if _same_aux(distinct[d], r, offsets, keys, values, sp_aux, dense, dn_base, dn_width, dn_aux):
                        match = d
                        break
                if match < 0:
                    distinct[ndist] = r
                    match = ndist
                    ndist += 1
                refer[r - r0] = match
        table0 = 0
        for r in range(r0, r1):
            ls = _line_size(r, MAIN, refer[r - r0] if has_aux else 0, features, layout, bodies, r - r0)
            line_size[r - r0] = ls
            table0 += _entry(ls)
        table1 = 0
        n = r1 - r0
        for d in range(ndist):  # aux lines keep their sizes after the group's rows
            aux_size = _line_size(distinct[d], AUX, 0, features, layout, bodies, n + d)
            line_size[n + d] = aux_size
            table1 += _entry(aux_size)
        any_sid = sid_off[r1] > sid_off[r0]
        any_ts = False
        for r in range(r0, r1):
            any_ts |= timestamps[r] != 0
        body = (r1 - r0) * _entry(label_body) + _entry(table0) + (_entry(table1) if has_aux else 0)
        for r in range(r0, r1):
            if any_sid:
                body += _entry(sid_off[r + 1] - sid_off[r])
            if any_ts:
                body += _entry(_ext_body(timestamps[r]))
        if out_pos + 4 + body > len(out):
            return g, out_pos
        p = out_pos
        for k in range(4):
            out[_u(p + k)] = np.uint8((body >> (8 * k)) & 0xFF)
        p += 4
        if any_sid:
            for r in range(r0, r1):
                out[_u(p)] = 0x0A  # sample_ids
                p = _put_varint(out, p + 1, sid_off[r + 1] - sid_off[r])
                p = _put_bytes(out, p, sid_bytes, sid_off[r], sid_off[r + 1])
        for r in range(r0, r1):
            p = _write_labels(out, p, labels, r, bits)
        out[_u(p)] = 0x1A  # feature_tables[0]
        p = _put_varint(out, p + 1, table0)
        for r in range(r0, r1):
            out[_u(p)] = 0x0A  # feature_lines
            p = _put_varint(out, p + 1, line_size[r - r0])
            p = _write_line(out, p, r, MAIN, refer[r - r0] if has_aux else 0, features, layout, bits, bodies, r - r0)
        if has_aux:
            out[_u(p)] = 0x1A  # feature_tables[1]
            p = _put_varint(out, p + 1, table1)
            for d in range(ndist):
                r = distinct[d]
                out[_u(p)] = 0x0A
                p = _put_varint(out, p + 1, line_size[n + d])
                p = _write_line(out, p, r, AUX, 0, features, layout, bits, bodies, n + d)
        if any_ts:
            for r in range(r0, r1):
                p = write_timestamp_ext(out, p, timestamps[r])
        out_pos = p
        g += 1
    return g, out_pos


@helper
def identical_features(group_offsets, offsets, keys, values, dense, dn_base, dn_width, differs, present):
    """Mark features that differ between two samples of a group, and those with values in a multi-sample group.

    ``differs`` and ``present`` are indexed sparse features first, then dense ones, and
    accumulate over calls (one per block of the leading sample).
    """
    nsp = offsets.shape[0]
    for g in range(len(group_offsets) - 1):
        r0 = group_offsets[g]
        r1 = group_offsets[g + 1]
        if r1 - r0 < 2:
            continue
        for f in range(nsp):
            if differs[f]:
                continue
            a0 = offsets[f, r0]
            n0 = offsets[f, r0 + 1] - a0
            if n0 > 0:
                present[f] = True
            for r in range(r0 + 1, r1):
                a = offsets[f, r]
                if offsets[f, r + 1] - a != n0:
                    differs[f] = True
                    break
                for i in range(n0):
                    if keys[a + i] != keys[a0 + i] or not same_float(values[a + i], values[a0 + i]):
                        differs[f] = True
                        break
                if differs[f]:
                    break
        for d in range(len(dn_width)):
            j = nsp + d
            if differs[j]:
                continue
            for c in range(dn_base[d], dn_base[d] + dn_width[d]):
                if written_float(dense[r0, c]):
                    present[j] = True
                for r in range(r0 + 1, r1):
                    if not same_float(dense[r, c], dense[r0, c]):
                        differs[j] = True
