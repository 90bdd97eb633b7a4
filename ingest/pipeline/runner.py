"""The running pipeline: parse workers, the batcher thread and the bounded queues between them.

Workers turn work units into Blocks (the parse kernels release the GIL, so threads run in
parallel).  By default each worker also cuts its own Blocks into Batches and computes their
unique ids, so one thread's work stays on one core; when it stops, the pieces of its
unfinished batch wait for the others', and the last worker to stop cuts them all, in worker
order, into full batches and one short one.  Where the batches must follow one block stream
(``deterministic``, ``keep_sample`` / ``pause``, a consumer group, live Kafka partitions) the
workers queue their Blocks to one batcher thread instead; with unique ids, one more thread
computes them, batch by batch, while the batcher builds the next.  The consumer takes Batches
from a bounded prefetch queue.  Every blocking put or get wakes up regularly to check the stop
flag, so ``close()`` never hangs, whatever the consumer does.
"""

import contextlib
import dataclasses
import itertools
import queue
import threading
import time

import numpy as np

from ..batch import Batch
from ..errors import IngestError, ReaderClosedError
from ..formats.base import ReadClock
from ..ops.blocks import concat_blocks, take_rows
from .batcher import FLUSH, cut_batches
from .progress import Marks
from ..queues import BoundedQueue
from ..sources.base import Delivery

__all__ = ["Pipeline", "PipelineDelivery"]

_POLL = 0.05
_ROUNDS_POLL = 0.005  # the batcher looks this often whether a round or pass has ended


class _Marker:
    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return self.name


_WORKER_DONE = _Marker("WORKER_DONE")


@dataclasses.dataclass(frozen=True)
class _UnitDone:
    """Follows the last block of a unit in its worker's queue."""

    key: tuple


@dataclasses.dataclass(frozen=True)
class _Delivered:
    """Units completed with no batch to carry them (a flush with nothing pending): applied, not handed out."""

    marks: Marks


@dataclasses.dataclass(frozen=True)
class _End:
    """The end of the stream, with the units completed after the last batch was built."""

    marks: Marks


class _GroupRelease:
    """Hands the groups whose last sample is in a batch back to the rounds, once (the next iteration or
    ``batch.release()``): with ``keep_sample`` as one block that goes through the ops again."""

    def __init__(self, rounds, pieces):
        self.rounds = rounds
        self.pieces = pieces

    def __call__(self):
        pieces, self.pieces = self.pieces, None
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


class Pipeline:
    """Threads and queues of one reader run.

    Parameters
    ----------
    units : list of Unit (ingest.sources)
        This shard's units, in order; repeated ``epochs`` times (0 = forever), in an order
        shuffled per epoch when ``shuffle`` is a seed.
    progress : Progress or None
        A restored state: delivered units are passed over, partial ones resume.
    fmt : format front end with ``read_unit(unit, stop)``
    ops, dsl : callable or None
        Block -> Block, run by the parse worker on each block: the user's ops, then the DSL stage.
    rounds : Rounds or None
        ``keep_sample`` / ``pause``: the admission gate and the recirculation of used groups.
    builder : BatchBuilder
    threads : int
    deterministic : bool
        Blocks reach the batcher in unit order (worker ``w`` parses units ``w, w+T, ...``);
        otherwise in arrival order, units handed to whichever worker is free.
    live : bool
        The units never end (Kafka partitions read ``until="forever"``).
    unit_source : object with ``next_unit(stop)`` or None
        Units that come while reading (a Kafka consumer group's partitions) instead of ``units``, in
        arrival order; ``flush()`` delivers what they left in the partial batch.
    coverage : Coverage or None
        Shown every block read (after the ops, before the DSL) and every unit completed.
    group_shuffle : shuffle.GroupShuffle or None
        Shuffles the groups of the block stream, which then follows the input order (as ``deterministic``).
    """

    def __init__(
        self,
        units,
        epochs,
        fmt,
        builder,
        *,
        threads,
        deterministic,
        split_group,
        drop_last,
        on_skip,
        stats,
        ops=None,
        dsl=None,
        rounds=None,
        prefetch=4,
        queue_blocks=4,
        shuffle=None,
        progress=None,
        unit_source=None,
        live=False,
        coverage=None,
        group_shuffle=None,
    ):
        self.units = units
        self.group_shuffle = group_shuffle
        self.coverage = coverage
        self.unit_source = unit_source
        self.epochs = epochs
        self.shuffle = shuffle
        self.progress = progress
        self.fmt = fmt
        self.ops = ops
        self.dsl = dsl
        self.rounds = rounds
        self._handed = None  # the batch the consumer holds (rounds: released on the next call)
        self.builder = builder
        self.threads = threads
        self.deterministic = deterministic or group_shuffle is not None
        self.split_group = split_group
        self.drop_last = drop_last
        self.on_skip = on_skip
        self.stats = stats
        self.stop = threading.Event()
        self._handing = threading.Lock()  # a batch handed over and its marks applied, or refused after close()
        # Parse workers batch their own blocks unless the batches must follow one block stream: the order of a
        # one-thread read, the groups the rounds count packed, the partial batch a group member flushes, or
        # live units (each worker's batch would wait for its own partition's messages).
        self.worker_batches = not (self.deterministic or rounds is not None or unit_source is not None or live)
        nq = 0 if self.worker_batches else threads if self.deterministic else 1
        self.block_queues = [BoundedQueue(queue_blocks * (1 if self.deterministic else threads)) for _ in range(nq)]
        self.out = BoundedQueue(prefetch)
        # with unique ids and a batcher thread: its batches on their way to the unique-id thread
        self.built = BoundedQueue(2) if builder.unique and not self.worker_batches else None
        self.batched = self.out if self.built is None else self.built  # where batches go once cut
        self._rests = {}  # worker -> (pieces of its unfinished batch, units completed since its last batch)
        self._rests_lock = threading.Lock()
        self._unit_lock = threading.Lock()
        self._unit_iter = self._sequence()
        self._threads = []
        self.finished = False

    def _sequence(self):
        """``(epoch, unit)`` in reading order; a unit that resumes carries its resume point."""
        first = self.progress.epoch if self.progress is not None else 0
        epochs = itertools.count(first) if self.epochs == 0 else range(first, self.epochs)
        for epoch in epochs:
            if not self.units:
                return
            order = self.units
            if self.shuffle is not None:
                order = [self.units[i] for i in np.random.default_rng([self.shuffle, epoch]).permutation(len(order))]
            for unit in order:
                if self.progress is not None:
                    if self.progress.delivered(epoch, unit.index):
                        continue
                    resume = self.progress.resume(epoch, unit.index)
                    if resume is not None:
                        unit = dataclasses.replace(unit, resume=resume)
                yield epoch, unit

    def start(self):
        work = self._work_batches if self.worker_batches else self._work
        for w in range(self.threads):
            self._threads.append(threading.Thread(target=work, args=(w,), name=f"ingest-parse-{w}", daemon=True))
        if not self.worker_batches:
            self._threads.append(threading.Thread(target=self._batch_loop, name="ingest-batcher", daemon=True))
        if self.built is not None:
            self._threads.append(threading.Thread(target=self._unique_loop, name="ingest-unique", daemon=True))
        for t in self._threads:
            t.start()

    # -- queues that never block past a stop -------------------------------------------
    def _put(self, q, item):
        return q.put_unless(item, self.stop, _POLL)

    def _get(self, q, rounds=None):
        """The next item; with ``rounds``, FLUSH when nothing can come before the consumer releases a batch."""
        poll = _POLL if rounds is None else _ROUNDS_POLL
        while True:
            try:
                return q.get(timeout=poll)
            except queue.Empty:
                if self.stop.is_set():
                    raise ReaderClosedError("the reader was shut down") from None
                if rounds is not None and rounds.starved():
                    return FLUSH

    def flush(self):
        """Deliver the partial batch now (with the units completed so far) rather than when more input fills
        it: a consumer group member draining revoked partitions.  Only with one batcher thread, as a consumer
        group has (``worker_batches`` off, ``deterministic`` off)."""
        self._put(self.block_queues[0], FLUSH)

    # -- workers -------------------------------------------------------------------------
    def _units_for(self, w):
        if self.unit_source is not None:
            return self._arriving_units()
        if self.deterministic:
            return itertools.islice(self._sequence(), w, None, self.threads)
        return self._shared_units()

    def _arriving_units(self):
        while (unit := self.unit_source.next_unit(self.stop)) is not None:
            yield 0, unit

    def _shared_units(self):
        while True:
            with self._unit_lock:
                unit = next(self._unit_iter, None)
            if unit is None:
                return
            yield unit

    def _stream(self, w, q=None):
        """Worker ``w``'s blocks, through the ops and the DSL, each unit's followed by ``_UnitDone``.  ``q`` is
        the queue that recirculated blocks go to straight while the gate of ``pause`` is closed."""
        for epoch, unit in self._units_for(w):
            if self.stop.is_set():
                return
            key = (epoch, unit.index)
            skip = unit.resume[1] if unit.resume is not None else 0
            clock = ReadClock()
            with contextlib.closing(self.fmt.read_unit(unit, self.stop, clock)) as blocks:
                t0 = time.perf_counter()
                for blk in blocks:  # the format reads and parses in next()
                    blk.unit = key
                    self._read_parse(t0, unit, blk.nbytes, blk.nrows, clock)
                    for part in self._admitted(blk, q):
                        part, skip = self._prepared(part, skip, epoch)
                        yield part
                    t0 = time.perf_counter()
                self._read_parse(t0, unit, 0, 0, clock)
            self.stats.add(units=1)
            if self.coverage is not None:
                self.coverage.unit_done(epoch)
            yield _UnitDone(key)
        if self.rounds is not None:
            self.rounds.out_of_input()
            while self.rounds.keep:  # used groups come back until the ops drop them all
                blk = self.rounds.next_recirculated(self.stop)
                if blk is None:
                    return
                yield self._prepared(blk)[0]

    def _work(self, w):
        """A parse worker that hands its blocks to the batcher thread."""
        q = self.block_queues[w if self.deterministic else 0]
        try:
            with contextlib.closing(self._stream(w, q)) as items:
                for item in items:
                    if not self._put(q, item):
                        return
        except BaseException as exc:  # travels to the consumer in stream order
            self._put(q, exc)
        finally:
            self._put(q, _WORKER_DONE)

    def _work_batches(self, w):
        """A parse worker that builds batches of its own blocks, unique ids included; what is left of its
        last batch is cut again, with every other worker's, by the last worker to finish."""
        done, rest = [], []
        try:
            with contextlib.closing(self._stream(w)) as items:
                batches = cut_batches(
                    self._noting_units(items, done),
                    self.builder,
                    split_group=self.split_group,
                    on_skip=self.on_skip,
                    rest=rest,
                )
                if not self._deliver(batches, done):
                    return
            with self._rests_lock:
                self._rests[w] = (rest, done)
                last = len(self._rests) == self.threads
            if last:
                self._cut_rests()
        except BaseException as exc:
            self._put(self.out, exc)

    def _cut_rests(self):
        """The workers' unfinished batches, in worker order: full batches, then the one short batch."""
        done = []

        def pieces():
            for w in range(self.threads):
                rest, completed = self._rests.pop(w)
                yield from rest
                done.extend(completed)  # units whose last rows are in the pieces just taken, or earlier

        batches = cut_batches(pieces(), self.builder, split_group=self.split_group, drop_last=self.drop_last)
        if self._deliver(batches, done):
            self._put(self.out, _End(Marks(done=list(done))))

    @staticmethod
    def _noting_units(items, done):
        """The blocks of a worker's stream; the units it completes go to the list ``done``."""
        for item in items:
            if isinstance(item, _UnitDone):
                done.append(item.key)
            else:
                yield item

    def _admitted(self, blk, q):
        """The parts of a fresh block as the gate of ``pause`` lets them in (whole, without it)."""
        if self.rounds is None:
            yield blk
            return
        while blk is not None:
            room = self.rounds.room(self.stop, lambda used: self._put(q, self._prepared(used)[0]))
            if room == 0:
                return
            groups = len(blk.group_offsets) - 1
            if room is None or groups <= room:
                self.rounds.admit(groups)
                yield blk
                return
            cut = int(blk.group_offsets[room])
            head = np.zeros(blk.nrows, np.bool_)
            head[:cut] = True
            self.rounds.admit(room)
            yield take_rows(blk, head)
            blk = take_rows(blk, ~head)

    def _prepared(self, blk, skip=0, epoch=None):
        """Run the ops and the DSL on a block (read in ``epoch``, None for a recirculated one).  Returns (the
        block, the rows of ``skip`` left for the next block: all of them when the ops left this one empty)."""
        t0 = time.perf_counter()
        if self.ops is not None:
            groups = len(blk.group_offsets) - 1
            blk = self.ops(blk)
            if self.rounds is not None:
                self.rounds.dropped(groups - (len(blk.group_offsets) - 1))
        if skip and blk.nrows:  # rows the ops keep, as delivered before the restore
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

    def _read_parse(self, t0, unit, nbytes, rows, clock):
        """Count the time since ``t0``: what ``clock`` spent reading as read, the rest as parse."""
        t1 = time.perf_counter()
        read = min(clock.take(), t1 - t0)
        self.stats.stage("read", t0, t0 + read)
        self.stats.stage("parse", t0 + read, t1, unit=unit.url, offset=unit.start, bytes=nbytes, rows=rows)

    # -- batcher ---------------------------------------------------------------------------
    def _blocks(self, done):
        """The blocks in stream order; units completed go to the list ``done``."""
        if self.deterministic:
            seq = 0
            while True:
                item = self._get(self.block_queues[seq % self.threads])
                if isinstance(item, _UnitDone):
                    done.append(item.key)
                    seq += 1
                elif item is _WORKER_DONE:
                    return
                elif isinstance(item, BaseException):
                    raise item
                else:
                    yield item
        else:
            workers = 0
            while workers < self.threads:
                item = self._get(self.block_queues[0], self.rounds)
                if item is FLUSH:  # from the rounds, or flush()
                    yield item
                    continue
                if item is _WORKER_DONE:
                    workers += 1
                elif isinstance(item, _UnitDone):
                    done.append(item.key)
                elif isinstance(item, BaseException):
                    raise item
                else:
                    yield item

    def _batch_loop(self):
        done = []
        try:
            stream = self._blocks(done)
            delivered = done
            if self.group_shuffle is not None:  # the shuffle's windows say which units their batches complete
                stream, delivered = self.group_shuffle(stream, done), []
            batches = cut_batches(
                stream,
                self.builder,
                split_group=self.split_group,
                drop_last=self.drop_last,
                on_skip=self.on_skip,
                rounds=self.rounds,
                build=self.builder.assemble,
            )
            if self._deliver(batches, delivered):
                self._put(self.batched, _End(Marks(done=list(done))))
        except ReaderClosedError:
            pass
        except BaseException as exc:
            self._put(self.batched, exc)

    def _deliver(self, batches, done):
        """Hand ``batches`` on (to the unique-id thread when there is one); each carries the units in ``done``,
        which have all their samples in it or earlier ones.  False once the reader stops."""
        for batch in batches:  # the builder counts its own time
            if batch is FLUSH:  # nothing was pending: the units completed travel alone
                if done and not self._put(self.batched, _Delivered(Marks(done=list(done)))):
                    return False
                done.clear()
                continue
            batch.marks.done += done
            done.clear()
            self.stats.add(batches=1)
            if not self._put(self.batched, batch):
                return False
        return True

    def _unique_loop(self):
        """Complete the batcher's batches with their unique ids, in order; everything else passes through."""
        try:
            while True:
                item = self._get(self.built)
                if isinstance(item, Batch):
                    self.builder.add_unique(item)
                if not self._put(self.out, item) or isinstance(item, (_End, BaseException)):
                    return
        except ReaderClosedError:
            pass
        except BaseException as exc:
            self._put(self.out, exc)

    # -- consumer --------------------------------------------------------------------------
    def next_batch(self):
        """The next Batch; raises StopIteration at the end, or the pipeline's error."""
        if self.finished:
            raise StopIteration
        if self._handed is not None:
            self._handed.release_groups()
            self._handed = None
        t0 = time.perf_counter()
        item = self._get(self.out)
        while isinstance(item, _Delivered):
            if self.progress is not None:
                self.progress.apply(item.marks, batch=False)
            item = self._get(self.out)
        self.stats.stage("wait", t0, time.perf_counter())
        if isinstance(item, _End):
            self.finished = True
            self.close()
            if self.progress is not None:
                self.progress.apply(item.marks, batch=False)
            raise StopIteration
        if isinstance(item, BaseException):
            self.finished = True
            self.close()
            if isinstance(item, IngestError):
                raise item
            raise IngestError(f"reader pipeline failed: {item!r}") from item
        with self._handing:
            if self.stop.is_set():  # closed meanwhile: what close() left in progress (a group's commit) excludes it
                raise ReaderClosedError("the reader was shut down")
            if self.progress is not None:
                self.progress.apply(item.marks, item.size)
        if self.rounds is not None:
            item.release_groups = _GroupRelease(self.rounds, item.pieces)
            self._handed = item
        return item

    def close(self, timeout=10.0):
        """Stop every thread and wait for them; safe to call twice.  No batch is handed over once it returns."""
        self.stop.set()
        with self._handing:  # a batch being handed over has its marks applied before progress is read
            pass
        for q in self.block_queues + [self.out] + ([self.built] if self.built is not None else []):
            with contextlib.suppress(queue.Empty):
                while True:
                    q.get_nowait()
        deadline = time.monotonic() + timeout
        for t in self._threads:
            if t is not threading.current_thread():
                t.join(max(0.0, deadline - time.monotonic()))
        return all(not t.is_alive() for t in self._threads)


class PipelineDelivery(Delivery):
    """The ``Delivery`` a unit source that assigns units (a consumer group member) gets of a running pipeline:
    its progress over the units' indices (one epoch), its flush and whether it stops."""

    def __init__(self, pipeline):
        self._pipeline = pipeline
        self._progress = pipeline.progress

    def delivered(self, index):
        return self._progress.delivered(0, index)

    def resume(self, index):
        return self._progress.resume(0, index)

    def forget(self, index):
        self._progress.forget(0, index)

    def flush(self):
        self._pipeline.flush()

    def stopped(self):
        return self._pipeline.stop.is_set()
