"""A bounded, reproducible, resumable shuffle of sample groups: ``reader.shuffle(seed, buffer=n)``.

The groups of each epoch, in input order, are cut into windows of ``n`` groups (the last one of an epoch may
hold fewer); each window is delivered in the order of a permutation drawn from ``(seed, epoch, window)``.
So the order depends on the seed and the input only, and a reader state taken in the middle of a window is
the position where the window starts plus how many of its rows, in shuffled order, were delivered: a
restored reader reads the window again, draws the same permutation and passes over those rows.  Memory is
the window's groups (the blocks holding them), never more.

The stage sits between the block stream (in input order: ``deterministic``) and ``cut_batches``: it yields one
``Shuffled`` piece per window, a block of the window's groups in shuffled order; ``batch_marks`` says what a
batch of it delivers (``Marks.window``).
"""

import dataclasses
from dataclasses import dataclass

import numpy as np

from ..errors import StateError
from ..ops.blocks import concat_blocks, take_ranges
from .progress import Marks

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
    """A window's groups in shuffled order (``block``), to be delivered from row ``r0`` (rows before it went out
    before a restore) to ``r1``, its end."""

    block: object
    r0: int
    r1: int
    window: Window


def batch_marks(taken):
    """What a batch delivers whose rows came from the ``Shuffled`` pieces ``taken``, as ``(piece, end row)``
    in batch order: every window it ends (a small one may start and end in the batch) counts whole, and the
    last one as far as the batch goes."""
    marks = Marks()
    reached = {}
    for piece, r in taken:
        reached[piece.window.number, piece.window.epoch] = (piece.window, r)  # a window block's rows, in order
    for w, delivered in reached.values():
        if delivered >= w.rows:
            # the next window, none of it delivered: its number seeds its order, also after a restore
            marks = Marks(dict(w.end), marks.done + w.start_done + w.end_done, window=(w.epoch, w.number + 1, 0))
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
            if skip >= window.rows:  # state() holds the next window once a window is delivered whole
                raise StateError(
                    f"the reader state says {skip} samples of window {number} of epoch {epoch} were delivered, "
                    f"and it has {window.rows} (was the state edited, or the input?)"
                )
        order = np.random.default_rng([self.seed, epoch, number]).permutation(len(pending))
        yield Shuffled(_gathered(pending, order), skip, window.rows, window)


def _gathered(pending, order):
    """One block of the groups ``pending`` (``(block, first row, end row)``, in input order) in the order
    ``order``: the blocks joined, then their rows taken in that order (numpy and kernel copies, no Python per
    group)."""
    blocks, base = [], {}
    for blk, _, _ in pending:
        if id(blk) not in base:
            base[id(blk)] = sum(b.nrows for b in blocks)
            blocks.append(blk)
    offset = np.array([base[id(blk)] for blk, _, _ in pending], np.int64)
    starts = np.array([a for _, a, _ in pending], np.int64) + offset
    ends = np.array([b for _, _, b in pending], np.int64) + offset
    return dataclasses.replace(take_ranges(concat_blocks(blocks), starts[order], ends[order]), skip=0)
