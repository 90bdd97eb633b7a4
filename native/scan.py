"""Kernels that find what text input holds before it is converted: every feature name (``scan_names``), so that
conversion declares every feature before reading and loses none, and where whole lines end."""

import numpy as np

from .index import _u
from .jit import helper
from .names import lookup_name

_PIPE, _NL, _AT, _SEMI, _COMMA = 124, 10, 64, 59, 44

_SPECIAL = np.zeros(256, np.uint8)  # bytes scan_names must look at
for _c in (_PIPE, _NL, _AT, _SEMI, _COMMA):
    _SPECIAL[_c] = 1


@helper
def scan_names(buf, start, end, sp_slots, sp_names, sp_off, dn_slots, dn_names, dn_off, labels_seen):
    """Find the first feature name in the lines of ``buf[start:end]`` that neither table knows.

    Returns ``(resume, kind, name_start, name_end, width)``: ``kind`` 0 when every name is
    known (``resume == end``), 1 for a sparse name, 2 for a dense one with ``width``
    floats; ``resume`` is the start of its line.  ``labels_seen[0]``/``[1]`` keep the
    fewest and most labels of a line.  One pass over the bytes, most of them only
    classified through a table; malformed lines are passed over (reading them reports them).
    """
    p = start
    while p < end:
        line = p
        field = 0
        entry = p  # start of the current sparse/dense entry
        named = False  # the entry's name was looked up
        labels_a = labels_b = -1
        commas = 0
        while p < end:
            c = buf[_u(p)]
            if _SPECIAL[c] == 0:
                p += 1
                continue
            if c == _NL:
                break
            if c == _PIPE:
                field += 1
                entry = p + 1
                named = False
                if field == 4:
                    labels_a = p + 1
                elif field == 5:
                    labels_b = p
            elif (field == 2 or field == 3) and not named:
                if c == _AT:
                    named = True
                    if field == 2:
                        known = lookup_name(buf, entry, p, sp_slots, sp_names, sp_off) >= 0
                    else:
                        known = lookup_name(buf, entry, p, dn_slots, dn_names, dn_off) >= 0
                    if not known:
                        width = 1
                        q = p + 1
                        while q < end and buf[_u(q)] != _SEMI and buf[_u(q)] != _PIPE and buf[_u(q)] != _NL:
                            width += buf[_u(q)] == _COMMA
                            q += 1
                        return line, field - 1, entry, p, width
                elif c == _SEMI:
                    entry = p + 1
            elif field == 2 or field == 3:
                if c == _SEMI:
                    entry = p + 1
                    named = False
            elif field == 4 and c == _COMMA:
                commas += 1
            p += 1
        if field >= 4:
            if labels_b < 0:
                labels_b = p if p == line or buf[_u(p - 1)] != 13 else p - 1
            n = 0 if labels_b <= labels_a else commas + 1
            if n < labels_seen[0]:
                labels_seen[0] = n
            if n > labels_seen[1]:
                labels_seen[1] = n
        p += 1
    return end, 0, 0, 0, 0


@helper
def last_newline(buf, n):
    """Index of the last ``\\n`` in ``buf[:n]``, or -1."""
    for p in range(n - 1, -1, -1):
        if buf[_u(p)] == _NL:
            return p
    return -1
