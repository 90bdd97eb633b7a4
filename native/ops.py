"""Kernels of the op stage (``ingest.ops``): row selection, sample-id tags, buckets, groups as records.

Block surgery: ``kept_groups`` renumbers groups after rows were dropped, ``gather_csr``
copies chosen CSR rows of one table into a new pool.  ``listed_tags`` marks rows whose
sample-id tag is in a name table (``FilterOP``); ``bucket_ids`` turns dense rows into
bucket ids (``DenseToSparseOP``).

The Python-op slow path writes each group of a Block as one length-prefixed
``SampleGroup`` record, every table included (aux lines as ``feature_tables[1..]`` with
group-local ``refer``) and 128-bit ids (``hkey``) kept.  Sizes are computed first, then
every record is written in place: ``group_line_ranges`` and ``line_sizes`` per table,
``record_layout`` once, ``write_table`` per table, ``write_frames`` once; a table travels as
two bundles, its ``GroupLines`` and its ``TableHeaders``.  The wire
primitives (varints, floats, labels, the timestamp extension) are those of
``native/encode.py``, the conversion encoder.
"""

import numpy as np

from .bundles import bundle
from .batch import refer_ranges
from .encode import (
    _dense_body,
    _dense_present,
    _entry,
    _ext_body,
    _labels_body,
    _put_bytes,
    _put_varint,
    _vlen,
    _write_labels,
    sparse_body,
    write_dense_feature,
    write_sparse_feature,
    write_timestamp_ext,
)
from .index import _u
from .jit import helper
from .names import lookup_name


# -- block surgery ------------------------------------------------------------------------------
@helper
def kept_groups(group_offsets, keep_row, out_offsets, out_groups):
    """Groups after dropping the rows where ``keep_row`` is False; a group left empty is dropped.

    Writes the new ``group_offsets`` (``out_offsets[:G' + 1]``) and the old index of each
    kept group (``out_groups[:G']``); returns ``G'``.
    """
    ng = 0
    row = 0
    out_offsets[0] = 0
    for g in range(len(group_offsets) - 1):
        n = 0
        for r in range(group_offsets[g], group_offsets[g + 1]):
            n += keep_row[r]
        if n:
            row += n
            out_groups[ng] = g
            ng += 1
            out_offsets[ng] = row
    return ng


@helper
def gather_csr(offsets, rows, src, dst_offsets, dst):
    """Copy rows ``rows`` of every feature of ``offsets`` (``[F, n + 1]``) from ``src`` into ``dst``.

    ``dst_offsets`` (``[F, len(rows) + 1]``) is the layout of the copy, computed by the
    caller from the row lengths.
    """
    for f in range(offsets.shape[0]):
        for i in range(len(rows)):
            a = offsets[f, rows[i]]
            d = dst_offsets[f, i]
            for k in range(offsets[f, rows[i] + 1] - a):
                dst[d + k] = src[a + k]


# -- FilterOP -----------------------------------------------------------------------------------
@helper
def listed_tags(sid_bytes, sid_offsets, separator, slots, names, name_offsets, listed):
    """``listed[r]`` = the tag of sample ``r`` is in the name table; returns how many are.

    The tag is the sample id up to its first ``separator`` byte (the whole id without one);
    ``separator`` < 0 means the whole id.
    """
    count = 0
    for r in range(len(sid_offsets) - 1):
        a = sid_offsets[r]
        b = sid_offsets[r + 1]
        end = b
        if separator >= 0:
            for p in range(a, b):
                if sid_bytes[_u(p)] == separator:
                    end = p
                    break
        hit = lookup_name(sid_bytes, a, end, slots, names, name_offsets) >= 0
        listed[r] = hit
        count += hit
    return count


# -- DenseToSparseOP ----------------------------------------------------------------------------
@helper
def bucket_ids(dense, boundaries, positional, keys):
    """Bucket id of every element of ``dense`` (float32 ``[n, w]``) into ``keys[r * w + j]``.

    The bucket is the number of boundaries <= the value (boundaries ascending), so NaN falls
    in bucket 0, as in the DSL's ``bucketize``.  With ``positional`` the id is
    ``j * (len(boundaries) + 1) + bucket``, keeping elements of one vector apart.
    """
    nb = len(boundaries)
    w = dense.shape[1]
    for r in range(dense.shape[0]):
        for j in range(w):
            v = dense[r, j]
            lo = 0
            hi = nb
            while lo < hi:  # the first boundary > v
                mid = (lo + hi) >> 1
                if boundaries[mid] <= v:
                    lo = mid + 1
                else:
                    hi = mid
            keys[r * w + j] = j * (nb + 1) + lo if positional else lo


# -- groups as SampleGroup records (the Python-op slow path) ------------------------------------
# One table of a block, group by group: group g's lines are lo[g]:hi[g]; the CSR sparse columns
# (offsets [F, n + 1] into keys, hkeys, values; hkeys empty means all 0), the dense columns side by
# side ([n, width]), and each line's group-local refer (empty for the last table).
GroupLines = bundle(
    "GroupLines",
    lo="i8[:]",
    hi="i8[:]",
    offsets="i8[:, :]",
    keys="i8[:]",
    hkeys="i8[:]",
    values="f4[:]",
    dense="f4[:, :]",
    local_refer="i8[:]",
)
# How one table's features are written: the conversion encoder's Feature headers (bytes and offsets,
# sparse then dense) and where each dense feature starts in the dense columns and how wide it is.
TableHeaders = bundle(
    "TableHeaders",
    sp_hdr="u1[:]",
    sp_hdr_off="i8[:]",
    dn_hdr="u1[:]",
    dn_hdr_off="i8[:]",
    dn_base="i8[:]",
    dn_width="i8[:]",
)


@helper
def group_line_ranges(lo, hi, refer, next_lo, next_hi, local_refer):
    """The lines of the next table each group refers to, and each line's group-local ``refer``.

    ``lo[g]:hi[g]`` are group ``g``'s lines of this table, ``refer`` their rows of the next
    table (block numbering).  The group's next-table lines are ``min(refer)..max(refer)``
    (contiguous in a block); ``local_refer[r] = refer[r] - next_lo[g]`` is what the record stores.
    """
    refer_ranges(refer, lo, hi, len(lo), next_lo, next_hi)
    for g in range(len(lo)):
        for r in range(lo[g], hi[g]):
            local_refer[r] = refer[r] - next_lo[g]


@helper
def _line_body(r, offsets, keys, hkeys, values, sp_hdr_off, dense, dn_base, dn_width, dn_hdr_off, refer):
    size = 0
    for f in range(offsets.shape[0]):
        body = sparse_body(f, r, offsets, keys, hkeys, values, sp_hdr_off)
        if body:
            size += _entry(body)
    for d in range(len(dn_width)):
        if _dense_present(d, r, dense, dn_base, dn_width):
            size += _entry(_dense_body(d, dn_width, dn_hdr_off))
    if refer != 0:
        size += 1 + _vlen(refer)
    return size


@helper
def line_sizes(lines, headers, sizes, table_body):
    """Body size of every line of one table (``sizes[r]``) and of each group's ``FeatureTable``."""
    lo, hi, offsets, keys, hkeys, values, dense, local_refer = lines
    sp_hdr_off, dn_hdr_off = headers.sp_hdr_off, headers.dn_hdr_off
    dn_base, dn_width = headers.dn_base, headers.dn_width
    with_refer = len(local_refer) > 0
    for g in range(len(lo)):
        total = 0
        for r in range(lo[g], hi[g]):
            s = _line_body(
                r,
                offsets,
                keys,
                hkeys,
                values,
                sp_hdr_off,
                dense,
                dn_base,
                dn_width,
                dn_hdr_off,
                local_refer[r] if with_refer else 0,
            )
            sizes[r] = s
            total += _entry(s)
        table_body[g] = total


@helper
def _group_flags(r0, r1, sid_offsets, timestamps):
    """(any sample id, any timestamp) of rows ``r0:r1``: a group writes all of them or none."""
    any_ts = False
    for r in range(r0, r1):
        any_ts |= timestamps[r] != 0
    return sid_offsets[r1] > sid_offsets[r0], any_ts


@helper
def record_layout(group_offsets, sid_offsets, label_count, timestamps, table_body, rec_start, table_pos, ext_pos):
    """Where every record, table and extension block goes; returns the bytes of all records.

    ``table_body`` is ``[T, G]``; record ``g`` is ``out[rec_start[g]:rec_start[g + 1]]``
    (4-byte length first), its table ``t`` starts at ``table_pos[t, g]`` (at the tag) and its
    timestamp extensions at ``ext_pos[g]``.
    """
    label_body = _labels_body(label_count)
    pos = 0
    for g in range(len(group_offsets) - 1):
        r0 = group_offsets[g]
        r1 = group_offsets[g + 1]
        any_sid, any_ts = _group_flags(r0, r1, sid_offsets, timestamps)
        rec_start[g] = pos
        p = pos + 4 + (r1 - r0) * _entry(label_body)
        if any_sid:
            for r in range(r0, r1):
                p += _entry(sid_offsets[r + 1] - sid_offsets[r])
        for t in range(table_body.shape[0]):
            table_pos[t, g] = p
            p += _entry(table_body[t, g])
        ext_pos[g] = p
        if any_ts:
            for r in range(r0, r1):
                p += _entry(_ext_body(timestamps[r]))
        pos = p
    rec_start[len(group_offsets) - 1] = pos
    return pos


@helper
def write_table(lines, headers, table_pos, table_body, sizes, bits, out):
    """Write each group's ``FeatureTable`` of one table at ``table_pos[g]`` (sized by ``line_sizes``)."""
    lo, hi, offsets, keys, hkeys, values, dense, local_refer = lines
    sp_hdr, sp_hdr_off, dn_hdr, dn_hdr_off, dn_base, dn_width = headers
    with_refer = len(local_refer) > 0
    for g in range(len(lo)):
        p = table_pos[g]
        out[_u(p)] = 0x1A  # SampleGroup.feature_tables
        p = _put_varint(out, p + 1, table_body[g])
        for r in range(lo[g], hi[g]):
            out[_u(p)] = 0x0A  # FeatureTable.feature_lines
            p = _put_varint(out, p + 1, sizes[r])
            for f in range(offsets.shape[0]):
                body = sparse_body(f, r, offsets, keys, hkeys, values, sp_hdr_off)
                if body:
                    p = write_sparse_feature(out, p, f, r, body, offsets, keys, hkeys, values, sp_hdr, sp_hdr_off, bits)
            for d in range(len(dn_width)):
                if _dense_present(d, r, dense, dn_base, dn_width):
                    p = write_dense_feature(out, p, d, r, dense, dn_base, dn_width, dn_hdr, dn_hdr_off, bits)
            if with_refer and local_refer[r] != 0:
                out[_u(p)] = 0x10  # FeatureLine.refer
                p = _put_varint(out, p + 1, local_refer[r])


@helper
def write_frames(group_offsets, sid_bytes, sid_offsets, labels, timestamps, rec_start, ext_pos, bits, out):
    """Write each record's length, sample ids, labels and timestamp extensions (tables go between)."""
    for g in range(len(group_offsets) - 1):
        r0 = group_offsets[g]
        r1 = group_offsets[g + 1]
        any_sid, any_ts = _group_flags(r0, r1, sid_offsets, timestamps)
        p = rec_start[g]
        body = rec_start[g + 1] - p - 4
        for k in range(4):
            out[_u(p + k)] = np.uint8((body >> (8 * k)) & 0xFF)
        p += 4
        if any_sid:
            for r in range(r0, r1):
                out[_u(p)] = 0x0A  # SampleGroup.sample_ids
                p = _put_varint(out, p + 1, sid_offsets[r + 1] - sid_offsets[r])
                p = _put_bytes(out, p, sid_bytes, sid_offsets[r], sid_offsets[r + 1])
        for r in range(r0, r1):
            p = _write_labels(out, p, labels, r, bits)
        if any_ts:
            p = ext_pos[g]
            for r in range(r0, r1):
                p = write_timestamp_ext(out, p, timestamps[r])
