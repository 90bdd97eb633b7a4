"""Number scanners over raw bytes: base-10 int64 and decimal floats; and the float comparisons of the writers.

Each scanner reads exactly the bytes ``buf[i:end]`` and reports whether they form one
number; nothing outside the range is read.  They are the only place that turns text into
numbers, shared by every text kernel.  The writers (pb and text) decide with ``same_float`` and
``written_float`` which floats read back alike, so that a conversion keeps every bit a reader sees.
"""

import math

import numpy as np

from .index import _u
from .jit import helper, inline

OK = 0
BAD = 1
OVERFLOW = 2

_INT64_MIN = np.int64(-9223372036854775808)
# acc * 10 - digit stays >= INT64_MIN while acc > this, or acc == this and digit <= 8
_NEG_LIMIT = np.int64(-922337203685477580)

# 10**k for k in 0..22 are exact in float64 (Clinger's fast path)
_EXACT_POW10 = np.array([10.0**k for k in range(23)], dtype=np.float64)


@inline
def same_float(a, b):
    """``a`` and ``b`` read back alike: equal, with the same sign (-0.0 is not 0.0); a NaN is like nothing."""
    return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)


@inline
def written_float(x):
    """A dense element a writer must write: not 0.0, what an absent vector reads back as (-0.0 is written)."""
    return x != 0.0 or math.copysign(1.0, x) < 0.0


@helper
def scan_int64(buf, i, end):
    """Parse ``buf[i:end]`` as ``[+-]digits``; returns ``(value, status)``."""
    if i >= end:
        return np.int64(0), BAD
    neg = False
    c = buf[_u(i)]
    if c == 45 or c == 43:  # '-' '+'
        neg = c == 45
        i += 1
        if i >= end:
            return np.int64(0), BAD
    acc = np.int64(0)  # accumulated as a negative number so INT64_MIN fits
    for k in range(i, end):
        d = np.int64(buf[_u(k)]) - 48
        if d < 0 or d > 9:
            return np.int64(0), BAD
        if acc < _NEG_LIMIT or (acc == _NEG_LIMIT and d > 8):
            return np.int64(0), OVERFLOW
        acc = acc * 10 - d
    if neg:
        return acc, OK
    if acc == _INT64_MIN:
        return np.int64(0), OVERFLOW
    return -acc, OK


@helper
def _lower(c):
    if 65 <= c <= 90:
        return c + 32
    return c


@helper
def _matches_word(buf, i, end, word):
    if end - i != len(word):
        return False
    for k in range(len(word)):
        if _lower(buf[_u(i + k)]) != word[k]:
            return False
    return True


_INF = np.frombuffer(b"inf", dtype=np.uint8).copy()
_INFINITY = np.frombuffer(b"infinity", dtype=np.uint8).copy()
_NAN = np.frombuffer(b"nan", dtype=np.uint8).copy()


@helper
def scan_float(buf, i, end):
    """Parse ``buf[i:end]`` as a decimal float; returns ``(float64 value, status)``.

    Accepted: ``[+-](digits[.digits]|.digits)[(e|E)[+-]digits]`` and ``inf``,
    ``infinity``, ``nan`` in any case, like ``strtod`` without hex floats.  Up to 18
    significant digits are kept (more only truncate); results with at most 15 digits
    and a power of ten within 1e±22 are correctly rounded (the common case), others are
    within a few float64 ulps, far below float32 resolution.
    """
    if i >= end:
        return 0.0, BAD
    neg = False
    c = buf[_u(i)]
    if c == 45 or c == 43:
        neg = c == 45
        i += 1
        if i >= end:
            return 0.0, BAD
    c = buf[_u(i)]
    if not (48 <= c <= 57) and c != 46:
        if _matches_word(buf, i, end, _INF) or _matches_word(buf, i, end, _INFINITY):
            return (-np.inf if neg else np.inf), OK
        if _matches_word(buf, i, end, _NAN):
            return np.nan, OK
        return 0.0, BAD
    mant = np.int64(0)
    ndig = 0  # significant digits kept in mant
    exp10 = 0
    seen_digit = False
    k = i
    while k < end and 48 <= buf[_u(k)] <= 57:
        seen_digit = True
        d = buf[_u(k)] - 48
        if ndig < 18:
            if mant != 0 or d != 0:
                mant = mant * 10 + d
                ndig += 1
        else:
            exp10 += 1
        k += 1
    if k < end and buf[_u(k)] == 46:
        k += 1
        while k < end and 48 <= buf[_u(k)] <= 57:
            seen_digit = True
            d = buf[_u(k)] - 48
            if ndig < 18:
                if mant != 0 or d != 0:
                    mant = mant * 10 + d
                    ndig += 1
                exp10 -= 1
            k += 1
    if not seen_digit:
        return 0.0, BAD
    if k < end and (buf[_u(k)] == 101 or buf[_u(k)] == 69):
        k += 1
        eneg = False
        if k < end and (buf[_u(k)] == 45 or buf[_u(k)] == 43):
            eneg = buf[_u(k)] == 45
            k += 1
        if k >= end:
            return 0.0, BAD
        e = 0
        while k < end and 48 <= buf[_u(k)] <= 57:
            if e < 100000:
                e = e * 10 + (np.int64(buf[_u(k)]) - 48)
            k += 1
        exp10 += -e if eneg else e
    if k != end:
        return 0.0, BAD
    if mant == 0:
        return (-0.0 if neg else 0.0), OK
    v = float(mant)
    if ndig <= 15 and -22 <= exp10 <= 22:
        if exp10 >= 0:
            v = v * _EXACT_POW10[exp10]
        else:
            v = v / _EXACT_POW10[-exp10]
    elif exp10 > 400:
        v = np.inf
    elif exp10 < -400:
        v = 0.0
    elif exp10 < -300:
        v = v * 10.0 ** (exp10 + 300) * 1e-300
    else:
        v = v * 10.0**exp10
    return (-v if neg else v), OK


_ZEROS8 = np.uint64(0x3030303030303030)
_HIGH_NIBBLES = np.uint64(0xF0F0F0F0F0F0F0F0)
_SIXES = np.uint64(0x0606060606060606)


@inline
def _load8(buf, k):
    """Bytes ``buf[k:k+8]`` as a little-endian uint64 (first byte lowest)."""
    v = np.uint64(0)
    for j in range(8):
        v |= np.uint64(buf[_u(k + j)]) << np.uint64(8 * j)
    return v


# Eight bytes at a time (SWAR): a word's bytes are flagged by their high bit.
_ONES8 = np.uint64(0x0101010101010101)
_HIGH_BITS = np.uint64(0x8080808080808080)
_LOW_SEVENS = np.uint64(0x7F7F7F7F7F7F7F7F)
_BYTE_INDEX = np.uint64(0x0001020304050607)  # (1 << 8k) * this >> 56 == k


@inline
def _zero_bytes(v):
    """The high bit of every zero byte of ``v`` set; the lowest is exact, a byte 0x01 above a zero one may be flagged
    too (the borrow), so callers check the bytes a flag points at."""
    return (v - _ONES8) & ~v & _HIGH_BITS


@inline
def _lowest_flag(flags):
    """Index (0-7) of the lowest byte whose high bit is set in ``flags`` (not 0)."""
    low = flags & (~flags + np.uint64(1))
    return np.int64(((low >> np.uint64(7)) * _BYTE_INDEX) >> np.uint64(56))


@inline
def _all_digits(v):
    # every byte in 0x30..0x39: high nibble 3, and adding 6 does not carry out of the low nibble
    return ((v & _HIGH_NIBBLES) == _ZEROS8) and (((v + _SIXES) & _HIGH_NIBBLES) == _ZEROS8)


@inline
def _eight_digits_value(v):
    """Value of eight ASCII digits packed by ``_load8``: pairs, then quads, then all eight."""
    d = v - _ZEROS8
    d = (d * np.uint64(10) + (d >> np.uint64(8))) & np.uint64(0x00FF00FF00FF00FF)
    d = (d * np.uint64(100) + (d >> np.uint64(16))) & np.uint64(0x0000FFFF0000FFFF)
    d = (d * np.uint64(10000) + (d >> np.uint64(32))) & np.uint64(0xFFFFFFFF)
    return np.int64(d)


@inline
def _accumulate_digits(buf, k, end, acc):
    """Append the decimal digits from ``k`` on to ``acc`` (wrapping past 18 digits: callers count
    digits and fall back to the careful scanners); returns ``(acc, first non-digit position)``."""
    while k < end:
        d = np.int64(buf[_u(k)]) - 48
        if d < 0 or d > 9:
            break
        acc = acc * 10 + d
        k += 1
    return acc, k


@inline
def scan_int64_prefix(buf, i, end):
    """Parse the longest ``[+-]digits`` prefix of ``buf[i:end]`` in one pass.

    Returns ``(value, stop, status)`` with ``stop`` the first byte not taken; the caller
    checks that a delimiter is there.  Status is BAD without digits, OVERFLOW past int64.
    """
    k = i
    neg = False
    if k < end and (buf[_u(k)] == 45 or buf[_u(k)] == 43):
        neg = buf[_u(k)] == 45
        k += 1
    d0 = k
    acc = np.int64(0)
    while k + 8 <= end:  # eight digits at a time (SWAR), the common case of long ids
        eight = _load8(buf, k)
        if not _all_digits(eight):
            break
        acc = acc * 100000000 + _eight_digits_value(eight)
        k += 8
    acc, k = _accumulate_digits(buf, k, end, acc)
    nd = k - d0
    if nd == 0:
        return acc, k, BAD
    if nd > 18:  # may overflow: the careful scanner decides
        v, st = scan_int64(buf, i, k)
        return v, k, st
    return (-acc if neg else acc), k, OK


@inline
def scan_float_until(buf, i, end, delim1, delim2):
    """Parse the float that runs from ``i`` to the first ``delim1``/``delim2`` or ``end``.

    Returns ``(value, stop, status)``, ``stop`` at the delimiter.  Plain decimals of up
    to 15 digits take one pass; anything else (exponents, long mantissas, inf, nan,
    garbage) is found the token end and handed to ``scan_float``.
    """
    k = i
    neg = False
    if k < end and buf[_u(k)] == 45:
        neg = True
        k += 1
    mant = np.int64(0)
    d0 = k
    mant, k = _accumulate_digits(buf, k, end, mant)
    nd = k - d0
    frac = 0
    if k < end and buf[_u(k)] == 46:
        k += 1
        f0 = k
        mant, k = _accumulate_digits(buf, k, end, mant)
        frac = k - f0
        nd += frac
    if 0 < nd <= 15 and (k == end or buf[_u(k)] == delim1 or buf[_u(k)] == delim2):
        v = float(mant)
        if frac:  # an integer value, the common weight of a count, skips the division
            v /= _EXACT_POW10[frac]
        return (-v if neg else v), k, OK
    while k < end and buf[_u(k)] != delim1 and buf[_u(k)] != delim2:
        k += 1
    v, st = scan_float(buf, i, k)
    return v, k, st
