"""What the consumer has been handed, per work unit: the reader state of ``enable_state=True``.

A unit of an epoch is *done* once every sample of it was delivered, *partial* while a
prefix of it was: its position is the start of the group holding the next undelivered
sample and how many samples of that group were delivered.  Units of an epoch are
delivered in any order (several parse threads), so done units are kept per epoch from the
first epoch with anything undelivered on.  Every batch carries the marks of what it
delivers (``Marks``); the reader applies them when it hands the batch out.
"""

import threading
from dataclasses import dataclass, field

__all__ = ["Marks", "Progress"]


@dataclass
class Marks:
    """What one batch (or the end of the stream) delivers.

    ``positions``: ``{(epoch, unit index): (position, rows)}`` after its last sample of each
    unit; ``done``: the units whose every sample has now been delivered.  With a shuffle buffer
    (``shuffle.GroupShuffle``) the positions are those where the batch's window starts, and ``window`` is
    ``(epoch, window, rows of it delivered)``; once the window is all delivered, the next one's with 0 rows (the
    positions are then where it ends); None without a shuffle buffer."""

    positions: dict = field(default_factory=dict)
    done: list = field(default_factory=list)
    window: object = None


class Progress:
    """Delivered work of one reader: epoch floor, done units, partial positions, counts."""

    def __init__(self, units, epoch=0, done=None, partial=None, batches=0, samples=0, window=None):
        self.units = units  # unit indices of this shard
        self.window = window  # the shuffle window under way: (epoch, window, rows delivered)
        self.epoch = epoch  # first epoch with an undelivered unit
        self.done = done or {}  # epoch -> set of unit indices
        self.partial = partial or {}  # (epoch, unit index) -> (position, rows)
        self.batches = batches
        self.samples = samples
        self._lock = threading.Lock()  # state() may be taken from another thread than the consumer's

    def apply(self, marks, samples=0, batch=True):
        with self._lock:
            for key, where in marks.positions.items():
                if key[1] not in self.done.get(key[0], ()):
                    self.partial[key] = where
            for key in marks.done:
                self.done.setdefault(key[0], set()).add(key[1])
                self.partial.pop(key, None)
            if marks.window is not None:
                self.window = marks.window
            while self.units and len(self.done.get(self.epoch, ())) >= len(self.units):
                del self.done[self.epoch]
                self.epoch += 1
            self.batches += batch
            self.samples += samples

    def snapshot(self):
        """A copy, consistent even while the consumer's thread applies marks."""
        with self._lock:
            return Progress(
                self.units,
                self.epoch,
                {e: set(s) for e, s in self.done.items()},
                dict(self.partial),
                self.batches,
                self.samples,
                self.window,
            )

    def delivered(self, epoch, index):
        """Whether every sample of the unit in that epoch was delivered."""
        return self.where(epoch, index)[0]

    def where(self, epoch, index):
        """``(delivered(epoch, index), resume(epoch, index))`` read at once: between two calls the consumer may hand
        out the unit's last sample, and the unit would look undelivered with no position, to be read again."""
        with self._lock:  # apply() drops an epoch's done units, then moves the epoch on
            return epoch < self.epoch or index in self.done.get(epoch, ()), self.partial.get((epoch, index))

    def forget(self, epoch, index):
        """Drop a done unit that nobody will ask about again (a Kafka group member's finished leases)."""
        with self._lock:
            self.done.get(epoch, set()).discard(index)

    def resume(self, epoch, index):
        """``(position, rows)`` where the unit of that epoch continues, or None to read it from its start."""
        with self._lock:
            return self.partial.get((epoch, index))

    def to_json(self):
        out = {
            "epoch": self.epoch,
            "done": {str(e): _ranges(sorted(s)) for e, s in sorted(self.done.items())},
            "partial": [[e, u, _plain(pos), rows] for (e, u), (pos, rows) in sorted(self.partial.items())],
            "batches": self.batches,
            "samples": self.samples,
        }
        if self.window is not None:
            out["window"] = list(self.window)
        return out

    @classmethod
    def from_json(cls, units, obj):
        done = {int(e): {u for a, b in r for u in range(a, b)} for e, r in obj["done"].items()}
        partial = {(e, u): (tuple(pos) if isinstance(pos, list) else pos, rows) for e, u, pos, rows in obj["partial"]}
        window = tuple(obj["window"]) if obj.get("window") else None
        return cls(units, obj["epoch"], done, partial, obj["batches"], obj["samples"], window)


def _plain(pos):
    return list(pos) if isinstance(pos, tuple) else pos


def _ranges(sorted_ints):
    """``[[a, b), ...]`` runs of consecutive integers: a job with 100k files keeps a short state."""
    out = []
    for u in sorted_ints:
        if out and out[-1][1] == u:
            out[-1][1] = u + 1
        else:
            out.append([u, u + 1])
    return out
