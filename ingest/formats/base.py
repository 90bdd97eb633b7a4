"""What every format front end shares: opening a work unit, and the read buffer it parses from."""
import numpy as np

from ..sources import open_unit, read_into

__all__ = ["UnitFormat", "refill", "grown"]


def refill(f, buf, filled, limit=None):
    """Read into ``buf[filled:]`` until it is full, holds ``limit`` bytes, or the stream ends.

    Returns ``(filled, eof)``.
    """
    stop = len(buf) if limit is None else min(len(buf), limit)
    while filled < stop:
        n = read_into(f, memoryview(buf)[filled:stop])
        if n == 0:
            return filled, True
        filled += n
    return filled, limit is not None and filled >= limit


class UnitFormat:
    """A front end turns work units into Blocks; subclasses implement ``_read(f, unit, stop)``."""

    splittable = False

    def read_unit(self, unit, stop=None):
        """Yield the Blocks of one work unit; skipped errors go to ``on_skip``, others raise."""
        f = open_unit(unit)
        try:
            yield from self._read(f, unit, stop)
        finally:
            f.close()

    def _read(self, f, unit, stop):
        raise NotImplementedError


def grown(buf, filled, need=0):
    """A buffer twice as large as ``buf`` (at least ``need`` bytes) starting with ``buf[:filled]``."""
    bigger = np.empty(max(2 * len(buf), need), np.uint8)
    bigger[:filled] = buf[:filled]
    return bigger
