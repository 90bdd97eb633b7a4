"""Protobuf wire-format primitives over a byte buffer: varints, tags, fixed 32-bit values, length-delimited
fields, skipping a field of any wire type.  Each returns the position after what it read (-1: truncated or
malformed), so that callers stay free of exceptions."""

import numpy as np

from .index import _u
from .jit import helper, inline
from .numbers import _HIGH_BITS, _LOW_SEVENS, _load8, _lowest_flag


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
            low = stops & (~stops + np.uint64(1))  # the first stop bit, 1 << (8k + 7)
            k = _lowest_flag(low)
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
    return (
        np.uint32(buf[_u(p)])
        | (np.uint32(buf[_u(p + 1)]) << np.uint32(8))
        | (np.uint32(buf[_u(p + 2)]) << np.uint32(16))
        | (np.uint32(buf[_u(p + 3)]) << np.uint32(24))
    )


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
