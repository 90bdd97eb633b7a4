"""A bounded, reproducible, resumable shuffle of sample groups: ``reader.shuffle(seed, buffer=n)``.

The groups of each epoch, in input order, are cut into windows of ``n`` groups (the last one of an epoch may
hold fewer); each window is delivered in the order of a permutation drawn from ``(seed, epoch, window)``.
So the order depends on the seed and the input only, and a reader state taken in the middle of a window is
the position where the window starts plus how many of its rows, in shuffled order, were delivered: a
restored reader reads the window again, draws the same permutation and passes over those rows.  Memory is
the window's groups (the blocks holding them), never more.

The stage sits between the block stream (in input order: ``deterministic``) and ``cut_batches``: it yields
``Shuffled`` pieces, one per group; ``batch_marks`` says what a batch of them delivers (``Marks.window``).
"""

from dataclasses import dataclass

import numpy as np

from .progress import WINDOW_DONE, Marks

__all__ = ["GroupShuffle", "Shuffled", "Window", "batch_marks"]


@dataclass
class Window:
    """One window of groups: where it starts and ends in the input, as reader-state marks."""

    epoch: int
    number: int
    rows: int
    start: dict  # {unit: (position, 0)} of its first group
    start_done: list  # units completed before it
    end: dict  # {unit: (position, 0)} after its last group
    end_done: list  # units completed before its end


@dataclass(frozen=True)
class Shuffled:
    """Rows ``r0:r1`` of ``block`` (one group, or what is left of it), the window's rows before them being
    ``before`` in shuffled order."""

    block: object
    r0: int
    r1: int
    window: Window
    before: int


def batch_marks(taken):
    """What a batch delivers whose rows came from the ``Shuffled`` pieces ``taken``, as ``(piece, end row)``
    in batch order: every window it ends (a small one may start and end in the batch) counts whole, and the
    last one as far as the batch goes."""
    marks = Marks()
    reached = {}
    for piece, r in taken:
        reached[piece.window.number, piece.window.epoch] = (piece.window, piece.before + r - piece.r0)
    for w, delivered in reached.values():
        if delivered >= w.rows:
            marks = Marks(dict(w.end), marks.done + w.start_done + w.end_done, window=WINDOW_DONE)
        else:
            marks = Marks(dict(w.start), marks.done + w.start_done, window=(w.epoch, w.number, delivered))
    return marks


class GroupShuffle:
    """The stage: ``groups`` a window, permutations from ``seed``; ``resume`` is ``Progress.window`` of a restored
    state, ``(epoch, window, rows delivered)``."""

    def __init__(self, groups, seed, resume=None):
        self.groups = groups
        self.seed = seed
        self.resume = resume

    def __call__(self, blocks, done):
        """The ``Shuffled`` pieces of ``blocks``; ``done`` is the list the stream appends completed units to."""
        pending = []  # (block, first row, end row) of the window's groups, in input order
        epoch = None
        number = 0
        start = start_done = None
        before_start, during = [], []  # units completed before the window's first group, and since
        seen = 0
        for blk in blocks:
            completed, seen = done[seen:], len(done)
            (during if pending else before_start).extend(completed)
            if blk.unit[0] != epoch:
                if pending:
                    yield from self._window(epoch, number, pending, start, start_done, during)
                    pending, during = [], []
                epoch = blk.unit[0]
                number = self.resume[1] if self.resume is not None and self.resume[0] == epoch else 0
            ends = blk.group_offsets
            first = int(np.searchsorted(ends, blk.skip, side="right")) - 1
            for g in range(first, len(ends) - 1):
                a, b = max(int(ends[g]), blk.skip), int(ends[g + 1])
                if not pending:
                    start, start_done, before_start = {blk.unit: blk.position(a)}, before_start, []
                pending.append((blk, a, b))
                if len(pending) == self.groups:
                    yield from self._window(epoch, number, pending, start, start_done, during)
                    pending, during = [], []
                    number += 1
        if pending:
            during.extend(done[seen:])
            yield from self._window(epoch, number, pending, start, start_done, during)

    def _window(self, epoch, number, pending, start, start_done, during):
        last, _, end_row = pending[-1]
        window = Window(
            epoch,
            number,
            sum(b - a for _, a, b in pending),
            start,
            start_done,
            {last.unit: last.position(end_row)},
            list(during),
        )
        skip = 0
        if self.resume is not None and self.resume[:2] == (epoch, number):
            skip, self.resume = self.resume[2], None  # delivered before the state was taken
        before = 0
        for k in np.random.default_rng([self.seed, epoch, number]).permutation(len(pending)):
            blk, a, b = pending[k]
            rows = b - a
            if before + rows > skip:
                cut = max(0, skip - before)  # a group the state cut: its first rows went out already
                yield Shuffled(blk, a + cut, b, window, before + cut)
            before += rows
