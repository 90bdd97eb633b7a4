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

from .jit import helper, inline, kernel
from .names import lookup_name
from .protobuf_codes import *  # noqa: F403 - the codes are part of this module's interface (the front end's)
from .protobuf_codes import (
    DONE,
    FULL,
    STOPPED_AT_ERROR,
    UNFRAMED,
    TRUNCATED,
    TOO_LONG,
    E_CODE,
    E_RECORD,
    E_RECORD_POS,
    E_POS,
    E_TABLE,
    E_LINE,
    E_FEATURE,
    E_GOT,
    S_FULL_FEATURE,
    S_NSID,
    S_NROWS,
    S_NGROUPS,
    S_ANY_HKEY,
    S_POS,
    S_TABLE,
    S_LINE,
    S_FEATURE,
    S_GOT,
    STATE_SLOTS,
    REGION_FULL,
)
from .columns import Columns
from .protobuf_parts import _GUESSES, RecordScratch
from .protobuf_parts import DecodeOptions, FeatureLayout, Rows  # noqa: F401 - the front end builds these
from .protobuf_record import _decode_record
from .protobuf_wire import _len_field, _skip, _tag, _u32, _varint


@kernel
def decode_chunk(buf, end, final, options, name_table, layout, cols, rows):
    """Decode the whole records in ``buf[:end]``; ``group_pos`` gets each group's record position.

    Returns ``(status, consumed, records, nerr)``; counts of rows, groups and sample-id bytes
    are in ``st``, lines per table in ``tab_rows``, the sparse columns as the module says
    (``cur`` starts as a copy of ``first``).  Unless ``final``, a record cut by ``end`` is left
    for the next call (``consumed`` points at it).  A record is only started when the scratch
    can hold the most rows, labels and sample-id bytes it could produce, so the decoding
    functions need no bounds checks for those; when it cannot, or when a value finds its
    column's region full (``st[S_FULL_FEATURE]`` says which), the status is FULL.
    """
    simple, max_record, stop_on_error, label_count = options
    keys, hkeys, values, first, cur, lim = cols
    _, refer, tab_rows, _, _, timestamps, sid_bytes, sid_off, group_start, group_pos, errors, st = rows
    _, dn_feat, _, _, _ = layout
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
    bit_cols = Columns(keys, hkeys, val_bits, first, cur, lim)  # values as their bits, as they come on the wire
    scratch = RecordScratch(spans, dn_seen, vec, bits, lines0, guess)
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
        if (
            st[S_NSID] + length > len(sid_bytes)
            or st[S_NROWS] + length // 2 + 2 > len(timestamps)
            or st[S_NGROUPS] + 2 > len(group_start)
            or nerr + 2 > len(errors)
        ):
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
        err = _decode_record(buf, a, b, simple, label_count, name_table, layout, bit_cols, rows, scratch)
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
                _error_row(
                    errors, nerr, err, records, pos, st[S_POS], st[S_TABLE], st[S_LINE], st[S_FEATURE], st[S_GOT]
                )
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
    of a sample: each ``labels`` entry of a SampleGroup is a sample's, and a SampleSimple's ``label``
    fields merge into its one sample's, as protobuf merges a message field given twice.  Malformed
    records are passed over: reading them reports them.
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
        simple_labels = -1  # the label values of a SampleSimple so far (-1: no label field yet)
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
                if simple:
                    simple_labels = max(simple_labels, 0) + n
                else:
                    _seen_labels(labels_seen, n)
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
        if simple_labels >= 0:
            _seen_labels(labels_seen, simple_labels)
        p = b
    return p


@inline
def _seen_labels(labels_seen, n):
    if n < labels_seen[0]:
        labels_seen[0] = n
    if n > labels_seen[1]:
        labels_seen[1] = n
