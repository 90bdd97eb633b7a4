"""``keep_sample`` and ``pause``: XDL's iterative loop, with exact accounting instead of timeouts.

A group is *live* from the moment a parse worker admits it until an op drops it (with
``keep_sample``) or the consumer is done with the batch holding its last sample (without).
With ``keep_sample`` a group the consumer is done with goes back through the ops (it is
*recirculated*) instead of leaving.  ``pause(n)`` closes the admission gate once ``n``
groups are live: with ``wait_exactly`` until every one has left (whole rounds), else until
fewer than ``n`` are live (a window of at most ``n`` groups).

*Outside* counts the live groups the batcher has not packed yet (in workers, queues or
waiting to be recirculated).  When it is 0 and no fresh group can come (the gate is
closed, or every worker has run out of input), the batcher delivers its partial batch:
nothing else could ever complete it (XDL waited 60 s there, or forever).
"""

import collections
import threading

__all__ = ["Rounds"]

_POLL = 0.05


class Rounds:
    def __init__(self, keep, limit=None, wait_exactly=False, threads=1):
        self.keep = keep
        self.limit = limit
        self.wait_exactly = wait_exactly
        self.threads = threads
        self.live = 0
        self.outside = 0
        self.closed = False
        self.workers_out_of_input = 0
        self.recirculated = collections.deque()
        self.cond = threading.Condition()

    def _changed(self):
        """After ``live`` went down: reopen the gate when the rule allows; wake everyone waiting."""
        if self.limit is not None and self.closed:
            self.closed = self.live > 0 if self.wait_exactly else self.live >= self.limit
        self.cond.notify_all()

    # -- parse workers ------------------------------------------------------------------
    def room(self, stop, serve):
        """Groups the gate lets in now (None without a limit), waiting while it is closed; recirculated blocks
        that come meanwhile are handed to ``serve`` (so closed gates never starve the loop).  Returns 0 when
        ``stop`` is set."""
        while True:
            with self.cond:
                while not self.recirculated and self.closed and not stop.is_set():
                    self.cond.wait(_POLL)
                if stop.is_set():
                    return 0
                blk = self.recirculated.popleft() if self.recirculated else None
                if blk is None:
                    return None if self.limit is None else self.limit - self.live
            if not serve(blk):
                return 0

    def admit(self, groups):
        with self.cond:
            self.live += groups
            self.outside += groups
            if self.limit is not None and self.live >= self.limit:
                self.closed = True

    def dropped(self, groups):
        """The ops dropped ``groups`` live groups."""
        if groups:
            with self.cond:
                self.live -= groups
                self.outside -= groups
                self._changed()

    def out_of_input(self):
        with self.cond:
            self.workers_out_of_input += 1
            self.cond.notify_all()

    def next_recirculated(self, stop):
        """A recirculated block for a worker with no input left; None once no group is live (the end)."""
        with self.cond:
            while not self.recirculated and self.live > 0 and not stop.is_set():
                self.cond.wait(_POLL)
            return self.recirculated.popleft() if self.recirculated and not stop.is_set() else None

    # -- batcher -------------------------------------------------------------------------
    def packed(self, groups):
        if groups:
            with self.cond:
                self.outside -= groups

    def starved(self):
        """Whether nothing can reach the batcher before the consumer is done with what it holds."""
        with self.cond:
            return self.outside == 0 and self.live > 0 and (self.closed or self.workers_out_of_input == self.threads)

    # -- consumer --------------------------------------------------------------------------
    def released(self, groups, blk=None):
        """The consumer is done with ``groups`` groups; with ``keep`` they come back as ``blk``."""
        if not groups:
            return
        with self.cond:
            if self.keep:
                self.outside += groups
                self.recirculated.append(blk)
                self.cond.notify_all()
            else:
                self.live -= groups
                self._changed()
