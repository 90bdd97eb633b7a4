"""The bounded queues between threads: the pipeline's stages, and a source's read-ahead."""

import queue

__all__ = ["BoundedQueue", "Handover"]


class BoundedQueue:
    """A bounded FIFO whose ``put`` and ``get`` run in C: two ``queue.SimpleQueue``, the items and one token per
    free place.  ``queue.Queue`` runs its locking in Python, a few microseconds under the GIL a call, and a
    batch passes one on its way from a parse worker to the consumer while the other workers want the GIL
    (at 2 threads on pb they were a tenth of the time the pipeline's threads held it).

    Raises ``queue.Full`` and ``queue.Empty`` as ``queue.Queue`` does.
    """

    def __init__(self, maxsize):
        if maxsize < 1:
            raise ValueError(f"maxsize={maxsize}: expected at least 1")
        self._items = queue.SimpleQueue()
        self._free = queue.SimpleQueue()
        for _ in range(maxsize):
            self._free.put(None)

    def put(self, item, timeout=None):
        try:
            self._free.get(timeout=timeout)
        except queue.Empty:
            raise queue.Full from None
        self._items.put(item)

    def put_unless(self, item, stop, poll=0.05):
        """Put ``item``, waiting for a free place until the Event ``stop`` is set (checked every ``poll``
        seconds, so a stopped reader never hangs on a full queue); whether it was put.  A free place is taken at
        once, without a look at ``stop`` (what a stopped reader's queues hold is never taken): the common case, in C
        calls only."""
        wait = None  # the first try does not wait
        while True:
            try:
                self._free.get(wait is not None, wait)
                break
            except queue.Empty:
                if stop.is_set():
                    return False
                wait = poll
        self._items.put(item)
        return True

    def get(self, timeout=None):
        item = self._items.get(timeout=timeout)
        self._free.put(None)
        return item

    def get_nowait(self):
        item = self._items.get_nowait()
        self._free.put(None)
        return item


class Handover:
    """The batches a parse worker built, held until it calls ``release()`` and then given, in order, to ``deliver``
    (the runner's: it puts a list of items on the consumer's queue and says whether all were taken).  A worker
    releases them just before it reads and parses its next block, so that the consumer, woken then, runs its Python
    while the worker runs kernels that release the GIL.  Put as each batch was built, a batch woke the consumer into
    a worker still holding the GIL, and each then waited for the other's Python.  The consumer takes the batches of
    a block without sleeping in between.  At most ``most`` items wait (the consumer's queue holds as many: a block
    of many small batches goes ``most`` at a time)."""

    def __init__(self, deliver, most):
        self._deliver = deliver
        self._most = most
        self._held = []

    def deliver(self, items):
        """Hold ``items`` until the next ``release()``, and deliver the last ones at the end; False once an item is
        refused (the reader stops).  When ``items`` raises, what it gave before goes first."""
        try:
            for item in items:
                self._held.append(item)
                if len(self._held) >= self._most and not self.release():
                    return False
        except BaseException:
            self.release()
            raise
        return self.release()

    def release(self):
        """Deliver the items held; False once one is refused."""
        held, self._held = self._held, []
        return self._deliver(held)
