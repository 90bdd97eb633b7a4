"""Work done ahead of its reader on a thread of its own: decompression, HDFS reads, Kafka fetches.

The producing call blocks in C (socket reads, zstd) with the GIL released, so it overlaps with the
parse worker that takes its results.
"""

import threading

from ..queues import BoundedQueue

__all__ = ["Ahead"]

_END = object()


class Ahead:
    """Calls ``produce(stop)`` on a thread, up to ``depth`` results ahead of ``take()``.

    ``produce`` returns the next item, or ``None`` at the end.  An exception it raises reaches
    ``take()`` in order.  ``stop`` is an Event set by ``close()``: ``produce`` may wait on it.
    """

    def __init__(self, produce, depth=2, name="ingest-ahead"):
        self.stop = threading.Event()
        self._produce = produce
        self._queue = BoundedQueue(depth)
        self._ended = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self):
        try:
            while not self.stop.is_set():
                item = self._produce(self.stop)
                self._put(_END if item is None else item)
                if item is None:
                    return
        except BaseException as exc:  # noqa: BLE001 - handed to the reading thread
            self._put(exc)

    def _put(self, item):
        self._queue.put_unless(item, self.stop)

    def take(self, timeout=None):
        """The next item; None at the end (and after); ``queue.Empty`` when none came within ``timeout``."""
        if self._ended:
            return None
        item = self._queue.get(timeout=timeout)
        if item is _END or isinstance(item, BaseException):
            self._ended = True
        if isinstance(item, BaseException):
            raise item
        return None if item is _END else item

    def close(self):
        self.stop.set()
        self._thread.join()
        # the producer is most often a method of this Ahead's owner (a ReadAhead's ``_read_chunk``): without the
        # cycle, the owner and what it holds (decompressed frames, results not taken) go when the owner is dropped,
        # not when the garbage collector comes round
        self._produce = None
