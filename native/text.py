"""Kernels of the text sample format (docs/formats.md, text samples).

``parse_text_chunk`` reads whole lines of one chunk of one work unit: the ids and values of each
declared sparse feature straight into its region of the block's columns (``columns.Columns``, as
the pb decoder does; ``ends[row, f]`` is where each row of feature ``f`` ends there), and dense rows,
labels, timestamps, sample-id bytes and group starts into scratch arrays.

Chunks end at group boundaries: unless ``final`` is set, the group that was still open
when the bytes ran out is held back (``consumed`` points at its first line) so that it is
parsed whole with the next chunk.  A kernel that runs out of scratch space stops at the
last group boundary too and says so; the caller grows the scratch when not even one group
fitted.
"""

import numpy as np

from .bundles import bundle
from .index import _u
from .jit import helper, inline, kernel
from .names import is_name, lookup_name
from .numbers import (
    OVERFLOW,
    _load8,
    _lowest_flag,
    _zero_bytes,
    scan_float_until,
    scan_int64,
    scan_int64_prefix,
)

# status returned by parse_text_chunk
DONE = 0
FULL = 1
STOPPED_AT_ERROR = 2

# error codes (columns of the error table)
TOO_FEW_FIELDS = 1
TOO_MANY_FIELDS = 2
MISSING_AT = 3
BAD_KEY = 4
KEY_OVERFLOW = 5
BAD_VALUE = 6
EMPTY_TOKEN = 7
BAD_DENSE = 8
DENSE_WIDTH = 9
DENSE_REPEATED = 10
BAD_LABEL = 11
TOO_FEW_LABELS = 12
BAD_TIMESTAMP = 13
_NO_ROOM = -1

# fields of a line
F_LINE = -1
F_SAMPLE_ID = 0
F_GROUP_ID = 1
F_SPARSE = 2
F_DENSE = 3
F_LABELS = 4
F_TIMESTAMP = 5

# columns of the error table
E_CODE, E_LINE, E_LINE_START, E_BAD_START, E_BAD_END, E_FIELD, E_FEATURE = range(7)
ERROR_COLUMNS = 7

_PIPE, _NL, _CR, _AT, _SEMI, _COMMA, _COLON = 124, 10, 13, 64, 59, 44, 58
_GUESSED_ENTRIES = 64  # sparse or dense entries of a line whose feature the next line guesses (_entry_name)
_NL8 = np.uint64(0x0A0A0A0A0A0A0A0A)
_PIPE8 = np.uint64(0x7C7C7C7C7C7C7C7C)

# The bundles ``parse_text_chunk`` takes (namedtuples: one argument each).
# Scalars of a run: whether the first bad line ends the call, the labels a sample must have, the most lines a group
# may have.
TextOptions = bundle("TextOptions", stop_on_error="bool", label_count="int", max_group_size="int")
# Where dense features go (features.DenseLayout): per feature its vectors, first element and first output column and
# width, per element its column.
DenseColumns = bundle(
    "DenseColumns",
    nvec="i8[:]",
    elem_base="i8[:]",
    elem_col="i8[:]",
    out_base="i8[:]",
    out_width="i8[:]",
)
# What a chunk is parsed into besides the sparse columns: where each row of each sparse feature ends in them, dense
# rows, labels, timestamps, sample ids, group starts, the error table; ``dn_seen`` is per-line scratch.
TextOutputs = bundle(
    "TextOutputs",
    ends="i8[:, :]",
    dense="f4[:, :]",
    labels="f4[:, :]",
    timestamps="i8[:]",
    sid_bytes="u1[:]",
    sid_off="i8[:]",
    group_start="i8[:]",
    group_pos="i8[:]",
    errors="i8[:, :]",
    dn_seen="b1[:]",
)


@inline
def _entry_name(buf, q, b, guess, j, slots, names, name_off):
    """``(feature, at)`` of the entry at ``q``: its name's index in the table (-1: undeclared) and the position of
    its ``@`` (else of the ``;`` or ``b`` that ends the entry).  Lines of a file mostly name the same features in
    the same order, so the name of the ``j``-th entry of the previous line (``guess[j]``) is tried first; only a
    miss scans for the ``@`` and hashes the name."""
    if j < len(guess):
        g = guess[j]
        if g >= 0:
            at = q + name_off[g + 1] - name_off[g]
            if at < b and buf[_u(at)] == _AT and is_name(buf, q, at, g, names, name_off):
                return g, at
    at = q
    while at < b and buf[_u(at)] != _AT and buf[_u(at)] != _SEMI:
        at += 1
    if at == b or buf[_u(at)] == _SEMI:
        return -1, at
    f = lookup_name(buf, q, at, slots, names, name_off)
    if j < len(guess):
        guess[j] = f
    return f, at


@helper
def _parse_sparse_field(buf, a, b, slots, names, name_off, guess, keys, values, cur, lim):
    """Append the ids and values of declared features in ``buf[a:b]`` to their regions (``cur[f]`` is the next
    free place of feature ``f``'s, ``lim[f]`` its end); ``guess`` holds the features the previous line named,
    entry by entry (``_entry_name``).

    Returns ``(code, bad_start, bad_end, feature)``; code 0 is success.
    """
    q = a
    if q == b:
        return 0, 0, 0, -1
    j = 0
    while True:
        f, at = _entry_name(buf, q, b, guess, j, slots, names, name_off)
        j += 1
        if at == b or buf[_u(at)] == _SEMI:
            return MISSING_AT, q, at, -1
        e = at + 1
        if f < 0:  # undeclared: skip without looking at the tokens
            while e < b and buf[_u(e)] != _SEMI:
                e += 1
        else:
            t = at + 1
            w = cur[f]  # kept in a register for the entry: a store to keys may alias cur for the compiler
            room = lim[f]
            while True:
                key, k, st = scan_int64_prefix(buf, t, b)
                val = 1.0
                if st == 0 and k < b and buf[_u(k)] == _COLON:
                    vs = k + 1
                    val, k, st = scan_float_until(buf, vs, b, _COMMA, _SEMI)
                    if st != 0:
                        return BAD_VALUE, vs, k, f
                elif st != 0 or (k < b and buf[_u(k)] != _COMMA and buf[_u(k)] != _SEMI):
                    te = k
                    while te < b and buf[_u(te)] != _COMMA and buf[_u(te)] != _SEMI:
                        te += 1
                    if te == t:
                        return EMPTY_TOKEN, t, te, f
                    return (KEY_OVERFLOW if st == OVERFLOW else BAD_KEY), t, te, f
                if w >= room:
                    return _NO_ROOM, 0, 0, f
                keys[w] = key
                values[w] = val
                w += 1
                if k >= b or buf[_u(k)] == _SEMI:
                    e = k
                    break
                t = k + 1
            cur[f] = w
        if e >= b:
            break
        q = e + 1
    return 0, 0, 0, -1


@helper
def _parse_dense_field(buf, a, b, slots, names, name_off, guess, nvec, elem_base, elem_col, row, seen):
    """Write declared dense vectors of ``buf[a:b]`` into ``row`` (masked columns); ``guess`` as for the sparse field.

    Returns ``(code, bad_start, bad_end, feature)``.
    """
    q = a
    if q == b:
        return 0, 0, 0, -1
    j = 0
    while True:
        d, at = _entry_name(buf, q, b, guess, j, slots, names, name_off)
        j += 1
        if at == b or buf[_u(at)] == _SEMI:
            return MISSING_AT, q, at, -1
        e = at + 1
        if d < 0:
            while e < b and buf[_u(e)] != _SEMI:
                e += 1
        else:
            if seen[d]:
                return DENSE_REPEATED, q, at, d
            seen[d] = True
            j = 0
            t = at + 1
            while True:
                v, te, st = scan_float_until(buf, t, b, _COMMA, _SEMI)
                if st != 0:
                    return BAD_DENSE, t, te, d
                if j < nvec[d]:
                    col = elem_col[elem_base[d] + j]
                    if col >= 0:
                        row[col] = v
                j += 1
                if te >= b or buf[_u(te)] == _SEMI:
                    e = te
                    break
                t = te + 1
            if j != nvec[d]:
                return DENSE_WIDTH, at + 1, e, d
        if e >= b:
            break
        q = e + 1
    return 0, 0, 0, -1


@helper
def _parse_labels(buf, a, b, row, label_count):
    """Returns ``(code, bad_start, bad_end)``; labels past ``label_count`` are checked, not kept."""
    n = 0
    if a < b:
        t = a
        while True:
            v, te, st = scan_float_until(buf, t, b, _COMMA, _COMMA)
            if st != 0:
                return BAD_LABEL, t, te
            if n < label_count:
                row[n] = v
            n += 1
            if te >= b:
                break
            t = te + 1
    if n < label_count:
        return TOO_FEW_LABELS, a, b
    return 0, 0, 0


@inline
def _line_end(buf, pos, end, pipes):
    """``(nl, npipe)``: the position of the first newline at or after ``pos`` (``end`` when none), and the number
    of ``|`` before it, the first six of them noted in ``pipes``.  Eight bytes at a time: a word with neither costs
    a load and a few operations (a byte at a time this pass took a third of the kernel)."""
    npipe = 0
    p = pos
    while p + 8 <= end:
        x = _load8(buf, p)
        flags = _zero_bytes(x ^ _NL8) | _zero_bytes(x ^ _PIPE8)
        while flags != 0:
            at = p + _lowest_flag(flags)
            c = buf[_u(at)]
            if c == _NL:
                return at, npipe
            if c == _PIPE:
                if npipe < 6:
                    pipes[npipe] = at
                npipe += 1
            flags &= flags - np.uint64(1)
        p += 8
    while p < end:
        c = buf[_u(p)]
        if c == _NL:
            break
        if c == _PIPE:
            if npipe < 6:
                pipes[npipe] = p
            npipe += 1
        p += 1
    return p, npipe


@helper
def _same_bytes(buf, a0, a1, b0, b1):
    if a1 - a0 != b1 - b0:
        return False
    for k in range(a1 - a0):
        if buf[_u(a0 + k)] != buf[_u(b0 + k)]:
            return False
    return True


@helper
def _rewind(first, cur, ends, rows):
    """Drop what the sparse regions took past row ``rows - 1``: the rows of an unfinished group, or of a bad line."""
    for f in range(len(cur)):
        cur[f] = ends[rows - 1, f] if rows > 0 else first[f]


@kernel
def parse_text_chunk(buf, start, end, final, options, sp_table, dn_table, dense_columns, cols, out):
    """Parse the whole lines of ``buf[start:end]`` into the sparse regions of ``cols`` and the scratch arrays.

    Returns ``(status, consumed, lines, nrows, ngroups, full, nsid, nerr)``: the byte
    position after the last line taken, lines taken (blank ones included), rows, groups
    (``group_start[:ngroups]`` are their first rows, ``group_pos[:ngroups]`` the positions
    in ``buf`` of their first lines), the sparse feature whose region was too small for the next
    line (-1: none), sample-id bytes and errors (rows of ``errors``) produced.  Rows of lines that
    fail are rolled back; the error is recorded and, with ``stop_on_error``, parsing stops right
    before that line.  ``cols.cur`` is left where the rows taken end.
    """
    stop_on_error, label_count, max_group_size = options
    sp_slots, sp_names, sp_name_off = sp_table
    dn_slots, dn_names, dn_name_off = dn_table
    dn_nvec, dn_elem_base, dn_elem_col, dn_out_base, dn_out_width = dense_columns
    keys, _, values, first, cur, lim = cols
    (
        ends,
        dense,
        labels,
        timestamps,
        sid_bytes,
        sid_off,
        group_start,
        group_pos,
        errors,
        dn_seen,
    ) = out
    row_cap = len(timestamps)
    sid_cap = len(sid_bytes)
    err_cap = errors.shape[0]
    n_dense = len(dn_nvec)

    pos = start
    line = 0
    nrows = 0
    ngroups = 0
    nsid = 0
    nerr = 0
    prev_gid_s = -1  # group id of the previous non-blank line
    prev_gid_e = -1
    group_lines = 0
    # state at the start of the open group: where a chunk may end
    c_pos = start
    c_line = 0
    c_rows = 0
    c_groups = 0
    c_sid = 0
    c_err = 0
    pipes = np.empty(6, dtype=np.int64)
    sp_guess = np.full(_GUESSED_ENTRIES, -1, dtype=np.int32)
    dn_guess = np.full(_GUESSED_ENTRIES, -1, dtype=np.int32)
    sid_off[0] = 0

    while pos < end:
        nl, npipe = _line_end(buf, pos, end, pipes)
        if nl == end and not final:
            break  # partial last line: it goes with the held-back group
        next_pos = nl + 1 if nl < end else end
        line_end = nl
        if line_end > pos and buf[_u(line_end - 1)] == _CR:
            line_end -= 1
        if line_end == pos:  # blank line: not a sample, does not break a group
            pos = next_pos
            line += 1
            continue

        if npipe >= 2:
            gid_s = pipes[0] + 1
            gid_e = pipes[1]
        else:
            gid_s = pos
            gid_e = pos  # unreadable group id: the line is a group of its own
        new_group = (
            prev_gid_s < 0
            or gid_e == gid_s
            or prev_gid_e == prev_gid_s
            or group_lines >= max_group_size
            or not _same_bytes(buf, gid_s, gid_e, prev_gid_s, prev_gid_e)
        )
        if new_group:
            if ngroups > 0 and group_start[ngroups - 1] == nrows:
                ngroups -= 1  # the previous group lost all its lines to errors
            c_pos = pos
            c_line = line
            c_rows = nrows
            c_groups = ngroups
            c_sid = nsid
            c_err = nerr
            group_start[ngroups] = nrows
            group_pos[ngroups] = pos
            ngroups += 1
            group_lines = 0
        group_lines += 1
        prev_gid_s = gid_s
        prev_gid_e = gid_e

        if nrows >= row_cap or nsid + (pipes[0] - pos if npipe > 0 else 0) > sid_cap:
            _rewind(first, cur, ends, c_rows)
            return FULL, c_pos, c_line, c_rows, c_groups, -1, c_sid, c_err

        # parse the line into row nrows
        code = 0
        bad_s = pos
        bad_e = line_end
        field = F_LINE
        feat = -1
        if npipe < 4:
            code = TOO_FEW_FIELDS
        elif npipe > 5:
            code = TOO_MANY_FIELDS
            bad_s = pipes[5]
        if code == 0:
            field = F_SPARSE
            code, bad_s, bad_e, feat = _parse_sparse_field(
                buf, pipes[1] + 1, pipes[2], sp_slots, sp_names, sp_name_off, sp_guess, keys, values, cur, lim
            )
            if code == _NO_ROOM:
                _rewind(first, cur, ends, c_rows)
                return FULL, c_pos, c_line, c_rows, c_groups, feat, c_sid, c_err
        if code == 0:
            field = F_DENSE
            for d in range(n_dense):
                dn_seen[d] = False
            code, bad_s, bad_e, feat = _parse_dense_field(
                buf,
                pipes[2] + 1,
                pipes[3],
                dn_slots,
                dn_names,
                dn_name_off,
                dn_guess,
                dn_nvec,
                dn_elem_base,
                dn_elem_col,
                dense[nrows],
                dn_seen,
            )
        if code == 0:
            field = F_LABELS
            lab_end = pipes[4] if npipe == 5 else line_end
            code, bad_s, bad_e = _parse_labels(buf, pipes[3] + 1, lab_end, labels[nrows], label_count)
        if code == 0:
            field = F_TIMESTAMP
            ts = np.int64(0)
            if npipe == 5 and pipes[4] + 1 < line_end:
                ts, st = scan_int64(buf, pipes[4] + 1, line_end)
                if st != 0:
                    code = BAD_TIMESTAMP
                    bad_s = pipes[4] + 1
                    bad_e = line_end
            timestamps[nrows] = ts

        if code != 0:
            if nerr >= err_cap:
                _rewind(first, cur, ends, c_rows)
                return FULL, c_pos, c_line, c_rows, c_groups, -1, c_sid, c_err
            errors[nerr, E_CODE] = code
            errors[nerr, E_LINE] = line
            errors[nerr, E_LINE_START] = pos
            errors[nerr, E_BAD_START] = bad_s
            errors[nerr, E_BAD_END] = bad_e
            errors[nerr, E_FIELD] = field
            errors[nerr, E_FEATURE] = feat
            nerr += 1
            _rewind(first, cur, ends, nrows)
            if stop_on_error:
                if group_start[ngroups - 1] == nrows:
                    ngroups -= 1
                return STOPPED_AT_ERROR, pos, line, nrows, ngroups, -1, nsid, nerr
        else:
            for d in range(n_dense):
                if not dn_seen[d]:
                    base = dn_out_base[d]
                    for k in range(dn_out_width[d]):
                        dense[nrows, base + k] = 0.0
            sid_len = pipes[0] - pos
            for k in range(sid_len):
                sid_bytes[nsid + k] = buf[_u(pos + k)]
            nsid += sid_len
            for f in range(len(cur)):
                ends[nrows, f] = cur[f]
            nrows += 1
            sid_off[nrows] = nsid
        pos = next_pos
        line += 1

    if pos >= end and final:
        if ngroups > 0 and group_start[ngroups - 1] == nrows:
            ngroups -= 1
        return DONE, end, line, nrows, ngroups, -1, nsid, nerr
    _rewind(first, cur, ends, c_rows)
    return DONE, c_pos, c_line, c_rows, c_groups, -1, c_sid, c_err
