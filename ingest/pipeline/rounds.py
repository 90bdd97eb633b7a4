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

import numpy as np

from ..ops.blocks import concat_blocks, take_rows

__all__ = ["GroupRelease", "Rounds"]

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
    def admit(self, groups, stop, serve):
        """Let in up to ``groups`` groups: as many as the gate has room for (all without a limit), counted live at once,
        so two workers never both take the last places; waits while it is closed, handing recirculated blocks that
        come meanwhile to ``serve`` (so closed gates never starve the loop).  None when ``stop`` is set."""
        while True:
            with self.cond:
                while not self.recirculated and self.closed and not stop.is_set():
                    self.cond.wait(_POLL)
                if stop.is_set():
                    return None
                blk = self.recirculated.popleft() if self.recirculated else None
                if blk is None:
                    if self.limit is not None:
                        groups = min(groups, self.limit - self.live)
                    self.live += groups
                    self.outside += groups
                    if self.limit is not None and self.live >= self.limit:
                        self.closed = True
                    return groups
            if not serve(blk):
                return None

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


class GroupRelease:
    """Hands the groups whose last sample is in a batch back to the rounds, once (the next iteration or
    ``batch.release()``): with ``keep_sample`` as one block that goes through the ops again."""

    def __init__(self, rounds, pieces):
        self.rounds = rounds
        self._pending = [pieces]  # popped once: a trainer's batch.release() may race the loader's next()

    def __call__(self):
        try:
            pieces = self._pending.pop()
        except IndexError:
            return
        if not pieces:
            return
        groups, used = 0, []
        for blk, r0, r1 in pieces:
            ends = blk.group_offsets[1:]
            ga, gb = np.searchsorted(ends, [r0, r1], side="right")
            if gb > ga:
                groups += int(gb - ga)
                if self.rounds.keep:
                    rows = np.zeros(blk.nrows, np.bool_)
                    rows[blk.group_offsets[ga] : blk.group_offsets[gb]] = True
                    used.append(take_rows(blk.parsed, rows))
        self.rounds.released(groups, concat_blocks(used) if used else None)
