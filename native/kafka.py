"""Kernels of the Kafka fetch path: record batches (message format v2) walked straight from a fetch
response's bytes, and message values gathered into a reader's buffer.

A fetch response holds whole record batches, possibly followed by a truncated one (the broker
cuts at the fetch size).  A batch is ``base offset (int64), length (int32), leader epoch (int32),
magic (int8, 2), crc (uint32, CRC-32C of the bytes from the attributes to the batch end),
attributes (int16), last offset delta (int32), timestamps, producer fields, record count
(int32)`` and then its records, each ``length, attributes, timestamp delta, offset delta, key,
value, headers`` in zigzag varints.  Compressed batches (attribute bits 0-2) are reported to the
caller, which decompresses their records and walks them with ``walk_records``.  The CRCs are left to
the caller too (the ``crc32c`` package uses the CPU's CRC instruction: 8 GB/s, 7x a table-driven
kernel here); ``scan_batches`` lists the byte range and expected value of each batch's.
"""

import numpy as np

from .index import _u
from .jit import helper, kernel
from .protobuf import _varint

# status of scan_batches
DONE = 0  # every whole batch walked; the rest (if any) is a truncated batch
COMPRESSED = 1  # stopped after listing a compressed batch (at the returned position): decompress, walk, go on
FULL = 2  # the output arrays cannot take the next batch: grow them and go on
BAD_MAGIC = 3  # a batch of message format v0/v1 (not produced by Kafka >= 0.11 clients)
MALFORMED = 4  # a record runs past its batch, or its lengths do not add up

BATCH_HEADER = 61  # bytes before the first record
_CONTROL = 0x20  # attribute bit of transaction markers: no user records


@helper
def _be(buf, p, n):
    """The big-endian unsigned integer of ``n`` bytes at ``p``."""
    v = np.int64(0)
    for i in range(n):
        v = (v << 8) | np.int64(buf[_u(p + i)])
    return v


@helper
def _signed(v, bits):
    return v - (np.int64(1) << bits) if v >= (np.int64(1) << (bits - 1)) else v


@helper
def _zigzag(buf, p, end):
    """``(value, next p)`` of a zigzag varint; next p is -1 when malformed."""
    raw, p = _varint(buf, p, end)
    return np.int64(raw >> np.uint64(1)) ^ -np.int64(raw & np.uint64(1)), p


@helper
def walk_records(buf, p, end, base_offset, count, first, last, offsets, starts, lens, k):
    """Append the records of a batch (``count`` records in ``buf[p:end]``) whose offsets are in
    ``[first, last)`` to ``offsets``/``starts``/``lens`` from index ``k`` (value start and length; a null
    value is empty).  Returns the new ``k``, or -1 when the records are malformed."""
    for _ in range(count):
        size, p = _zigzag(buf, p, end)
        if p < 0 or size < 0 or p + size > end:
            return -1
        stop = p + size
        q = p + 1  # attributes (unused)
        _, q = _zigzag(buf, q, stop)  # timestamp delta
        if q < 0:
            return -1
        delta, q = _zigzag(buf, q, stop)
        if q < 0:
            return -1
        key_len, q = _zigzag(buf, q, stop)
        if q < 0 or q + max(key_len, 0) > stop:
            return -1
        q += max(key_len, 0)
        value_len, q = _zigzag(buf, q, stop)
        if q < 0 or q + max(value_len, 0) > stop:
            return -1
        offset = base_offset + delta
        if first <= offset < last:
            offsets[k] = offset
            starts[k] = q
            lens[k] = max(value_len, 0)
            k += 1
        p = stop  # headers are not read
    return k


@kernel
def scan_batches(buf, p, first, last, offsets, starts, lens, checks):
    """Walk the record batches of a fetch response from byte ``p``, appending the records whose offsets
    are in ``[first, last)`` to ``offsets``/``starts``/``lens`` and each batch's CRC range and expected
    value to ``checks`` (rows ``from, to, crc``).

    Returns ``(status, records, batches, p, next_offset)``: rows appended, the position of the batch
    where it stopped (after the compressed one listed last; after the last whole one when done), and
    the offset after the last whole batch walked (``first`` when none).
    """
    end = len(buf)
    k = 0
    n = 0
    next_offset = first
    while p + 17 <= end:
        if buf[_u(p + 16)] != 2:
            return BAD_MAGIC, k, n, p, next_offset
        length = _be(buf, p + 8, 4)
        stop = p + 12 + length
        if p + BATCH_HEADER > end or stop > end:
            break  # the truncated batch that ends a fetch
        base = _be(buf, p, 8)
        attributes = _be(buf, p + 21, 2)
        last_delta = _signed(_be(buf, p + 23, 4), 32)
        count = _signed(_be(buf, p + 57, 4), 32)
        compressed = attributes & 0x7 != 0
        # an uncompressed record takes at least a byte (a compressed batch's count is checked on its records)
        if length < BATCH_HEADER - 12 or count < 0 or not compressed and count > stop - p - BATCH_HEADER:
            return MALFORMED, k, n, p, next_offset
        if n == len(checks) or not compressed and k + count > len(offsets):
            return FULL, k, n, p, next_offset
        checks[n, 0] = p + 21
        checks[n, 1] = stop
        checks[n, 2] = _be(buf, p + 17, 4)
        n += 1
        if compressed:
            return COMPRESSED, k, n, p, next_offset
        if not attributes & _CONTROL:
            k = walk_records(buf, p + BATCH_HEADER, stop, base, count, first, last, offsets, starts, lens, k)
            if k < 0:
                return MALFORMED, 0, n, p, next_offset
        next_offset = max(next_offset, base + last_delta + 1)
        p = stop
    return DONE, k, n, p, next_offset


@kernel
def gather(buf, starts, lens, i, within, out, n):
    """Copy message values into ``out[n:]`` from message ``i``, byte ``within``, until ``out`` is full or
    the messages end.  Returns ``(i, within, n)`` after the copy."""
    while i < len(starts) and n < len(out):
        take = min(lens[i] - within, len(out) - n)
        src = starts[i] + within
        # not a slice assignment, which compiles numpy's shape-mismatch error message; unsigned indices (no
        # wraparound for negative ones) let LLVM make the loop a memcpy: 18 GB/s here, 0.7 with signed ones
        for k in range(take):
            out[_u(n + k)] = buf[_u(src + k)]
        n += take
        within += take
        if within == lens[i]:
            i += 1
            within = 0
    return i, within, n
