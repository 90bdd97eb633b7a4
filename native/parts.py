"""The parts of a batch's one buffer, as ``batch.batch_layout`` places them and describes them in its ``meta`` (per
part: byte offset, rows, columns): keys, pairs, values, the offsets of each table, the dense matrices, the
indicators of every table but the last, labels, timestamps, sample id bytes and their offsets, and with unique ids
their three outputs.  The kernels view the parts in the buffer, so Python makes no array of a batch until its
consumer asks for one."""

from .jit import inline, viewing

KEYS, PAIRS, VALUES, OFFSETS = 0, 1, 2, 3  # OFFSETS + t: table t's
# from samples_part on: labels, timestamps, sample id bytes and their offsets; from unique_part on: big, small, layout
LABELS, TIMESTAMPS, SID_BYTES, SID_OFFSETS = 0, 1, 2, 3
BIG, SMALL, LAYOUT = 0, 1, 2


@inline
def dense_part(tables, d):
    return OFFSETS + tables + d


@inline
def indicators_part(tables, dense, t):
    return OFFSETS + tables + dense + t


@inline
def samples_part(tables, dense):
    """The first of the samples' parts (``LABELS`` ... ``SID_OFFSETS`` from it)."""
    return OFFSETS + tables + dense + tables - 1


@inline
def unique_part(meta):
    """The first of the unique-id outputs (``BIG``, ``SMALL``, ``LAYOUT`` from it), the last three parts."""
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
