"""Reused buffers (a batch's arrays, a trace writer's chunks): a pool of byte arrays handed out as typed views.

A buffer is free again as soon as nothing outside the pool refers to it: neither the batch
that leased it nor any array the consumer took from that batch (a numpy view keeps its
base alive).  So a batch's memory returns to the pool when the consumer drops the batch
(the next iteration, when the loop variable is rebound) or calls ``batch.release()``,
and a consumer that keeps a batch, or one array of it, keeps that memory intact: reuse can
never overwrite data still in use.  In steady state, batch building allocates no new
buffers (``allocated`` stops growing).
"""

import math
import sys
import threading
from collections import deque

import numpy as np

__all__ = ["BufferPool"]

_MIN_BYTES = 4096


def _refs_when_free():
    """References to a pooled buffer that nothing else holds, as ``lease`` counts them."""
    probe = deque([np.empty(1, np.uint8)])
    buf = probe.popleft()
    probe.append(buf)
    return sys.getrefcount(buf)


class BufferPool:
    """Buffers by size class (powers of two), each class a queue scanned oldest first."""

    def __init__(self):
        self._classes = {}
        self._lock = threading.Lock()
        self._free_refs = _refs_when_free()
        self.allocated = 0  # buffers created so far
        self.allocated_bytes = 0

    def lease_bytes(self, nbytes):
        """A pooled uint8 buffer of at least ``nbytes``: all of its size class (a power of two, at least 4 KiB),
        contents undefined."""
        size = max(_MIN_BYTES, 1 << (int(nbytes) - 1).bit_length())  # int: a kernel's count
        with self._lock:
            queue = self._classes.get(size)
            if queue is None:
                queue = self._classes[size] = deque()
            for _ in range(len(queue)):
                candidate = queue.popleft()
                queue.append(candidate)  # oldest first: the next lease looks at the next one
                if sys.getrefcount(candidate) == self._free_refs:
                    return candidate
                del candidate
            buf = np.empty(size, np.uint8)
            queue.append(buf)
            self.allocated += 1
            self.allocated_bytes += size
            return buf

    def trim(self):
        """Let go of every buffer nothing outside the pool refers to; returns the bytes let go."""
        freed = 0
        with self._lock:
            for queue in self._classes.values():
                for _ in range(len(queue)):
                    candidate = queue.popleft()
                    queue.append(candidate)  # counted as lease counts it: in the queue
                    if sys.getrefcount(candidate) == self._free_refs:
                        freed += queue.pop().nbytes
                    del candidate
        return freed

    def held_bytes(self):
        """Bytes of the buffers the pool holds, in use or not."""
        with self._lock:
            return sum(buf.nbytes for queue in self._classes.values() for buf in queue)

    def in_use(self):
        """How many of the pool's buffers something outside it still refers to."""
        with self._lock:
            return sum(sys.getrefcount(buf) > self._free_refs for queue in self._classes.values() for buf in queue)

    def lease(self, shape, dtype):
        """A C-contiguous array of ``shape`` and ``dtype`` over a pooled buffer (contents undefined)."""
        dtype = np.dtype(dtype)
        count = math.prod(shape) if isinstance(shape, tuple) else shape
        # one call: half the time of slicing, viewing and reshaping
        return np.ndarray(shape, dtype, self.lease_bytes(int(count) * dtype.itemsize))
