"""The parts of a batch's one buffer, as ``batch.batch_layout`` places them and describes them in its ``meta`` (per
part: byte offset, rows, columns): keys, pairs, values, the offsets of each table, the dense matrices, the
indicators of every table but the last, labels, timestamps, sample id bytes and their offsets, and with unique ids
their three outputs.  The kernels view the parts in the buffer, so Python makes no array of a batch until its
consumer asks for one."""

from .jit import inline, viewing

KEYS, PAIRS, VALUES, OFFSETS = 0, 1, 2, 3  # OFFSETS + t: table t's


@inline
def dense_part(tables, d):
    return OFFSETS + tables + d


@inline
def indicators_part(tables, dense, t):
    return OFFSETS + tables + dense + t


@inline
def samples_part(tables, dense):
    """The labels' part; timestamps, sample id bytes and their offsets follow."""
    return OFFSETS + tables + dense + tables - 1


@inline
def unique_part(meta):
    """The first of the unique-id outputs (big, small, layout), the last three parts."""
    return len(meta) // 3 - 3


@viewing
def part(buf, meta, k, dtype):
    """Part ``k`` as a ``[rows, columns]`` array of ``dtype`` (from a part on, the buffer's length is a multiple of
    64 bytes)."""
    at = meta[3 * k]
    rows = meta[3 * k + 1]
    columns = meta[3 * k + 2]
    return buf[at:].view(dtype)[: rows * columns].reshape((rows, columns))


@viewing
def vector(buf, meta, k, dtype):
    """Part ``k`` as a vector (its columns are 1) of ``dtype``."""
    return buf[meta[3 * k] :].view(dtype)[: meta[3 * k + 1]]
