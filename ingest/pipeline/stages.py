"""The stages of the pipeline: each a generator from an iterator of items to an iterator of items, with no
thread or queue of its own (the runners in ``runner.py`` compose them and put threads and queues between them).

A parse worker's stream: ``read_units`` (units -> Blocks, each unit's between a ``UnitStart`` and a
``UnitDone``), ``admitted`` (the gate of ``pause``), ``prepared`` (the user's ops and the DSL), then
``recirculated`` (``keep_sample``'s used groups once the input ends).  Towards the consumer: ``noting_units``
(the units completed, aside), ``batcher.cut_batches`` (Blocks -> Batches), ``marked`` (each Batch carries the
units it completes) and ``with_unique_ids``.
"""

import contextlib
import dataclasses
import threading
import time

import numpy as np

from ..batch import Batch
from ..errors import StateError
from ..formats.base import ReadClock
from ..ops.blocks import take_rows
from .batcher import FLUSH
from .progress import Marks

__all__ = [
    "UnitStart",
    "UnitDone",
    "Delivered",
    "Prepare",
    "read_units",
    "admitted",
    "prepared",
    "recirculated",
    "noting_units",
    "marked",
    "with_unique_ids",
]


@dataclasses.dataclass(frozen=True)
class UnitStart:
    """Comes before the first block of a unit: its key ``(epoch, index)`` and the rows its blocks start with
    that were delivered before a restore (``skip``)."""

    key: tuple
    skip: int


@dataclasses.dataclass(frozen=True)
class UnitDone:
    """Follows the last block of a unit."""

    key: tuple


@dataclasses.dataclass(frozen=True)
class Delivered:
    """Units completed with no batch to carry them (a flush with nothing pending): applied, not handed out."""

    marks: Marks


def read_units(units, fmt, stop, stats, ahead=False, before_read=None):
    """The Blocks of ``units`` (``(epoch, unit)`` pairs) as ``fmt`` reads and parses them, each unit's between
    its ``UnitStart`` and ``UnitDone``; the time spent in ``fmt`` goes to ``stats`` as read and parse.  With
    ``ahead`` (no other worker would read the next unit sooner), units whose streams work ahead of their reader
    (``Unit.opens_ahead``) are opened early (``_opened_ahead``).  ``before_read()``, when given, is called each
    time the later stages are done with a block, before ``fmt`` reads and parses the next one."""
    pairs = _opened_ahead(units) if ahead else ((epoch, unit, None) for epoch, unit in units)
    for epoch, unit, opened in pairs:
        try:
            if stop.is_set():
                return
            key = (epoch, unit.index)
            yield UnitStart(key, unit.resume[1] if unit.resume is not None else 0)
            clock = ReadClock()
            with contextlib.closing(fmt.read_unit(unit, stop, clock, opened)) as blocks:
                t0 = time.perf_counter()
                for blk in blocks:  # the format reads and parses in next()
                    blk.unit = key
                    _read_parse(stats, t0, unit, blk.nbytes, blk.nrows, clock)
                    yield blk
                    if before_read is not None:
                        before_read()
                    t0 = time.perf_counter()  # what the later stages did with the block is not parsing
                _read_parse(stats, t0, unit, 0, 0, clock)
            stats.add(units=1)
            yield UnitDone(key)
        finally:
            if opened is not None:
                opened.close()


class Opened:
    """A unit's stream opened before its turn (``open()``, from any thread, once), or the error opening it raised
    (raised at its turn)."""

    def __init__(self, unit):
        self._unit = unit
        self._lock = threading.Lock()
        self._done = False
        self._stream = self._error = None

    def open(self):
        with self._lock:
            if self._done:
                return
            self._done = True
            try:
                self._stream = self._unit.open()
            except Exception as exc:  # noqa: BLE001 - the unit's own error, raised when it is read
                self._error = exc

    def stream(self):
        self.open()
        if self._error is not None:
            raise self._error
        return self._stream

    def when_read(self, callback):
        """``callback()`` once the opened stream's work ahead is done (``UnitStream.when_read``)."""
        self.open()
        if self._stream is None:
            callback()
        else:
            self._stream.when_read(callback)

    def close(self):
        with self._lock:
            self._done = True
            stream = self._stream
        if stream is not None:
            stream.close()


def _opened_ahead(units):
    """``(epoch, unit, opened)``: ``opened`` is the unit's ``Opened`` when it opens ahead (else None).  The unit
    after one that opens ahead is taken with it and opened as soon as that one has read ahead to its end; the
    unit after any other is taken at its turn (a Kafka partition never ends: another worker must get the next)."""
    units = iter(units)
    pending = None  # the next (epoch, unit, opened), taken ahead
    try:
        while True:
            if pending is None:
                taken = next(units, None)
                if taken is None:
                    return
                pending = (*taken, _opened(taken[1]))
                if pending[2] is not None:
                    pending[2].open()
            epoch, unit, its = pending
            pending = None  # handed out: read_units closes it
            if its is not None and (taken := next(units, None)) is not None:
                pending = (*taken, _opened(taken[1]))
                if pending[2] is not None:
                    its.when_read(pending[2].open)
            yield epoch, unit, its
    finally:
        if pending is not None and pending[2] is not None:
            pending[2].close()


def _opened(unit):
    return Opened(unit) if unit.opens_ahead else None


def _read_parse(stats, t0, unit, nbytes, rows, clock):
    """Count the time since ``t0``: what ``clock`` spent reading as read, the rest as parse."""
    t1 = time.perf_counter()
    read = min(clock.take(), t1 - t0)
    stats.stage("read", t0, t0 + read)
    stats.stage("parse", t0 + read, t1, unit=unit.url, offset=unit.start, bytes=nbytes, rows=rows)


def admitted(items, rounds, stop, recirculate):
    """The Blocks of ``items`` as the gate of ``pause`` (``rounds``) lets them in: whole, or cut at a group
    boundary when it has room for some of their groups only.  While it is closed, used groups that come back
    go to ``recirculate``."""
    for item in items:
        if isinstance(item, (UnitStart, UnitDone)):
            yield item
            continue
        blk = item
        while blk is not None:
            groups = len(blk.group_offsets) - 1
            admitted_groups = rounds.admit(groups, stop, recirculate)
            if admitted_groups is None:  # stopped: the rest of this block is not admitted
                break
            if admitted_groups == groups:
                yield blk
                break
            cut = int(blk.group_offsets[admitted_groups])
            head = np.zeros(blk.nrows, np.bool_)
            head[:cut] = True
            yield take_rows(blk, head)
            blk = take_rows(blk, ~head)


@dataclasses.dataclass(frozen=True)
class Prepare:
    """The user's ops, then the DSL, on one Block (``Stages``' of those names)."""

    ops: object
    dsl: object
    rounds: object
    coverage: object
    stats: object

    def __call__(self, blk, skip=0, epoch=None):
        """Run the ops and the DSL on a block (read in ``epoch``, None for a recirculated one).  Returns (the
        block, the rows of ``skip`` left for the next block: all of them when the ops left this one empty)."""
        t0 = time.perf_counter()
        if self.ops is not None:
            groups = len(blk.group_offsets) - 1
            blk = self.ops(blk)
            if self.rounds is not None:
                self.rounds.dropped(groups - (len(blk.group_offsets) - 1))
        if skip and blk.nrows:  # rows the ops keep, as delivered before the restore
            group = int(blk.group_offsets[1])
            if skip >= group:  # state() counts rows of the group holding the next sample: fewer than it has
                raise StateError(
                    f"{blk.source}: the reader state says {skip} samples of the group at byte "
                    f"{blk.position(0)[0]} were delivered, and it has {group} (was the state edited, or the input?)"
                )
            blk.skip, skip = skip, 0
        parsed = blk
        if epoch is not None and self.coverage is not None:
            self.coverage.add(epoch, blk)
        if self.dsl is not None:
            blk = self.dsl(blk)
        if self.ops is not None or self.dsl is not None:
            self.stats.stage("ops", t0, time.perf_counter(), rows=blk.nrows)
        if self.rounds is not None and self.rounds.keep:
            blk.parsed = parsed  # what goes through the ops again
        self.stats.add(bytes=blk.nbytes, samples=blk.nrows, groups=len(blk.group_offsets) - 1, blocks=1)
        return blk, skip


def prepared(items, prepare):
    """``prepare`` (a ``Prepare``) run on every Block of ``items``; a ``UnitStart`` is taken here (the rows to
    skip of a restored unit), a ``UnitDone`` is shown to the coverage and passed on."""
    skip, epoch = 0, None
    for item in items:
        if isinstance(item, UnitStart):
            epoch, skip = item.key[0], item.skip
        elif isinstance(item, UnitDone):
            if prepare.coverage is not None:
                prepare.coverage.unit_done(item.key[0])
            yield item
        else:
            blk, skip = prepare(item, skip, epoch)
            yield blk


def recirculated(items, rounds, stop, prepare):
    """``items``, then, once they end, the used groups ``keep_sample`` sends through the ops again until the ops
    drop them all (``rounds``)."""
    yield from items
    if stop.is_set():
        return
    rounds.out_of_input()
    while rounds.keep:
        blk = rounds.next_recirculated(stop)
        if blk is None:
            return
        yield prepare(blk)[0]


def noting_units(items, done):
    """The Blocks (and FLUSH) of ``items``; the keys of the units they complete go to the list ``done``."""
    for item in items:
        if isinstance(item, UnitDone):
            done.append(item.key)
        else:
            yield item


def marked(batches, done, stats):
    """Each Batch of ``batches`` carrying the units in ``done`` (which have all their samples in it or earlier
    ones); a FLUSH with nothing pending becomes ``Delivered`` of the units completed, when there are some."""
    for batch in batches:  # the builder counts its own time
        if batch is FLUSH:
            if done:
                yield Delivered(Marks(done=list(done)))
            done.clear()
            continue
        batch.marks.done += done
        done.clear()
        stats.add(batches=1)
        yield batch


def with_unique_ids(items, builder):
    """The Batches of ``items`` completed with their unique ids (``builder.add_unique``); anything else as it is."""
    for item in items:
        if isinstance(item, Batch):
            builder.add_unique(item)
        yield item
