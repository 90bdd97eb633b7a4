"""The runners of the pipeline: the threads and bounded queues that compose the stages of ``stages.py``.

Workers turn work units into Blocks (the parse kernels release the GIL, so threads run in parallel).  Three
runners, one per topology (``runner_for`` picks):

- ``WorkerBatches`` (the default): each parse worker also cuts its own Blocks into Batches and computes their
  unique ids, so one thread's work stays on one core, and hands a block's batches over just before it reads
  the next (``queues.Handover``); when it stops, the pieces of its unfinished batch wait for the others', and
  the last worker to stop cuts them all, in worker order, into full batches and one short one.
- ``OneStream``: where the batches must follow one block stream (``deterministic``, ``keep_sample`` /
  ``pause``, a group shuffle, a consumer group, live Kafka partitions) the workers queue their Blocks to one
  batcher thread instead; with unique ids, one more thread computes them, batch by batch, while the batcher
  builds the next.
- ``InThread`` (``threads(0)``): no thread at all; the consumer's ``next()`` reads, parses and batches until a batch
  is complete.

The consumer takes Batches from a bounded prefetch queue (``InThread``: straight from the stages).  Every
blocking put or get wakes up regularly to check the stop flag, so ``close()`` never hangs, whatever the consumer
does.
"""

import contextlib
import dataclasses
import itertools
import queue
import threading
import time
from typing import Optional

import numpy as np

from ..errors import ConfigError, IngestError, ReaderClosedError
from .batcher import FLUSH, cut_batches
from .progress import Marks
from .rounds import GroupRelease
from .stages import (
    Delivered,
    Prepare,
    UnitDone,
    admitted,
    marked,
    noting_units,
    prepared,
    read_units,
    recirculated,
    with_unique_ids,
)
from ..queues import BoundedQueue, Handover
from ..sources.base import Delivery

__all__ = ["Flow", "InThread", "OneStream", "PipelineDelivery", "Stages", "WorkerBatches", "runner_for"]

_POLL = 0.05
# The consumer's queue holds this many batches a parse worker, unless the reader's prefetch(n) says otherwise.  With 4
# in all, 2 workers of free-threaded CPython found it full a tenth of the time: their Python no longer waits for the
# GIL, so both cores stay busy and the consumer waits for one (decisions.md, "The prefetch queue holds 8 batches").
PREFETCH_PER_THREAD = 8
_ROUNDS_POLL = 0.005  # the batcher looks this often whether a round or pass has ended


class _Marker:
    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return self.name


_WORKER_DONE = _Marker("WORKER_DONE")


@dataclasses.dataclass(frozen=True)
class _End:
    """The end of the stream, with the units completed after the last batch was built."""

    marks: Marks


@dataclasses.dataclass(frozen=True)
class Stages:
    """What the pipeline does to its input, stage by stage.

    fmt : format front end with ``read_unit(unit, stop, clock)``: reads and parses a unit into Blocks
    builder : BatchBuilder: cuts Blocks into Batches and computes their unique ids
    ops, dsl : callable or None
        Block -> Block, run by the parse worker on each block: the user's ops, then the DSL stage.
    rounds : Rounds or None
        ``keep_sample`` / ``pause``: the admission gate and the recirculation of used groups.
    coverage : Coverage or None
        Shown every block read (after the ops, before the DSL) and every unit completed.
    group_shuffle : shuffle.GroupShuffle or None
        Shuffles the groups of the block stream, which then follows the input order (as ``deterministic``).
    on_skip : callable or None
        Takes the groups too large for a batch when ``split_group`` is off (None: they raise).
    """

    fmt: object
    builder: object
    ops: object = None
    dsl: object = None
    rounds: object = None
    coverage: object = None
    group_shuffle: object = None
    on_skip: object = None


@dataclasses.dataclass(frozen=True)
class Flow:
    """How the pipeline runs its stages.

    threads : parse workers (0: none, the consumer's thread reads)
    epochs : passes over the units (0 = forever)
    deterministic : blocks reach the batcher in unit order (worker ``w`` parses units ``w, w+T, ...``);
        otherwise in arrival order, units handed to whichever worker is free
    split_group, drop_last : as the reader's options of those names
    prefetch : batches ready ahead of the consumer (``None``: ``PREFETCH_PER_THREAD`` a worker)
    queue_blocks : blocks a worker may have queued ahead of the batcher
    shuffle : a seed: the units in an order shuffled per epoch (None: in order)
    live : the units never end (Kafka partitions read ``until="forever"``)
    """

    threads: int
    epochs: int
    deterministic: bool
    split_group: bool
    drop_last: bool
    prefetch: Optional[int] = None
    queue_blocks: int = 4
    shuffle: object = None  # a seed
    live: bool = False

    @property
    def ahead(self):
        """Batches the consumer's queue holds."""
        return self.prefetch if self.prefetch is not None else PREFETCH_PER_THREAD * max(self.threads, 1)


class Runner:
    """What both topologies share: the parse workers' streams of Blocks, the consumer's queue, the stop flag,
    ``next_batch`` and ``close``.  A runner is made by ``runner_for`` and started once.

    Parameters
    ----------
    units : list of Unit (ingest.sources)
        This shard's units, in order; repeated ``flow.epochs`` times.
    stages : Stages
    flow : Flow
    stats : pipeline.stats.Stats
        Counts and stage times.
    progress : Progress or None
        A restored state: delivered units are passed over, partial ones resume.
    unit_source : object with ``next_unit(stop)`` or None
        Units that come while reading (a Kafka consumer group's partitions) instead of ``units``, in
        arrival order.
    """

    deterministic = False  # OneStream's may be True: worker w parses units w, w+T, ..., their blocks taken in turn

    def __init__(self, units, stages, flow, stats, progress=None, unit_source=None):
        self.units = units
        self.stages = stages
        self.flow = flow
        self.builder = stages.builder
        self.rounds = stages.rounds
        self.threads = flow.threads
        self.stats = stats
        self.progress = progress
        self.unit_source = unit_source
        self.prepare = Prepare(stages.ops, stages.dsl, stages.rounds, stages.coverage, stats)
        self.stop = threading.Event()
        self.out = BoundedQueue(flow.ahead)
        self._handing = threading.Lock()  # a batch handed over and its marks applied, or refused after close()
        self._handed = None  # the batch the consumer holds (rounds: released on the next call)
        self._unit_lock = threading.Lock()
        self._unit_iter = self._sequence()
        self._threads = []
        self.finished = False

    def _targets(self):
        """``(function, args, name)`` of each thread to start."""
        raise NotImplementedError

    def start(self):
        for target, args, name in self._targets():
            self._threads.append(threading.Thread(target=target, args=args, name=name, daemon=True))
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

    # -- a parse worker's stream ----------------------------------------------------------
    def _sequence(self):
        """``(epoch, unit)`` in reading order; a unit that resumes carries its resume point."""
        first = self.progress.epoch if self.progress is not None else 0
        epochs = itertools.count(first) if self.flow.epochs == 0 else range(first, self.flow.epochs)
        seed = self.flow.shuffle
        for epoch in epochs:
            if not self.units:
                return
            order = self.units
            if seed is not None:
                order = [self.units[i] for i in np.random.default_rng([seed, epoch]).permutation(len(order))]
            for unit in order:
                if self.progress is not None:
                    delivered, resume = self.progress.where(epoch, unit.index)
                    if delivered:
                        continue
                    if resume is not None:
                        unit = dataclasses.replace(unit, resume=resume)
                yield epoch, unit

    def _units_for(self, w):
        """The ``(epoch, unit)`` pairs worker ``w`` reads."""
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

    def _stream(self, w, q=None, before_read=None):
        """Worker ``w``'s Blocks through the ops and the DSL, each unit's followed by ``UnitDone``.  ``q`` is the
        queue that recirculated blocks go to straight while the gate of ``pause`` is closed; ``before_read`` is
        called before the worker reads and parses its next block (``read_units``)."""
        # a worker takes its next unit early only where no other worker could have read it sooner
        ahead = self.unit_source is None and (self.deterministic or self.threads <= 1)
        items = read_units(self._units_for(w), self.stages.fmt, self.stop, self.stats, ahead, before_read)
        if self.rounds is None:
            return prepared(items, self.prepare)
        items = admitted(items, self.rounds, self.stop, lambda used: self._put(q, self.prepare(used)[0]))
        return recirculated(prepared(items, self.prepare), self.rounds, self.stop, self.prepare)

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
        while isinstance(item, Delivered):
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
            item.release_groups = GroupRelease(self.rounds, item.pieces)
            self._handed = item
        return item

    def _queues(self):
        return [self.out]

    def close(self, timeout=10.0):
        """Stop every thread and wait for them; safe to call twice.  No batch is handed over once it returns."""
        self.stop.set()
        with self._handing:  # a batch being handed over has its marks applied before progress is read
            pass
        for q in self._queues():
            with contextlib.suppress(queue.Empty):
                while True:
                    q.get_nowait()
        deadline = time.monotonic() + timeout
        for t in self._threads:
            if t is not threading.current_thread():
                t.join(max(0.0, deadline - time.monotonic()))
        return all(not t.is_alive() for t in self._threads)

    def _one_stream_batches(self, blocks, done, build=None):
        """The Batches cut from one stream of Blocks (from ``marked``: each carries the units it completes, whose
        keys the stream puts in the list ``done``), made by ``build`` (default: the builder's ``build``)."""
        delivered = done
        if self.stages.group_shuffle is not None:  # the shuffle's windows say which units their batches complete
            blocks, delivered = self.stages.group_shuffle(blocks, done), []
        flow = self.flow
        batches = cut_batches(
            blocks,
            self.builder,
            split_group=flow.split_group,
            drop_last=flow.drop_last,
            on_skip=self.stages.on_skip,
            rounds=self.rounds,
            build=build,
        )
        return marked(batches, delivered, self.stats)

    def _deliver(self, items, q):
        """Put ``items`` (from ``marked``) on ``q``; False once the reader stops."""
        for item in items:
            if not self._put(q, item):
                return False
        return True


class WorkerBatches(Runner):
    """Each parse worker reads its share of the units (whichever are next) and cuts its own Blocks into Batches,
    unique ids included; what is left of its last batch is cut again, with every other worker's, by the last
    worker to finish, in worker order."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._rests = {}  # worker -> (pieces of its unfinished batch, units completed since its last batch)
        self._rests_lock = threading.Lock()

    def _targets(self):
        return [(self._work, (w,), f"ingest-parse-{w}") for w in range(self.threads)]

    def _work(self, w):
        done, rest = [], []
        flow = self.flow
        handover = Handover(lambda items: self._deliver(items, self.out), flow.ahead)
        try:
            with contextlib.closing(self._stream(w, before_read=handover.release)) as items:
                batches = cut_batches(
                    noting_units(items, done),
                    self.builder,
                    split_group=flow.split_group,
                    on_skip=self.stages.on_skip,
                    rest=rest,
                )
                if not handover.deliver(marked(batches, done, self.stats)):
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

        flow = self.flow
        batches = cut_batches(pieces(), self.builder, split_group=flow.split_group, drop_last=flow.drop_last)
        if self._deliver(marked(batches, done, self.stats), self.out):
            self._put(self.out, _End(Marks(done=list(done))))


class OneStream(Runner):
    """The parse workers queue their Blocks to one batcher thread, which cuts them into Batches in one stream
    (unit order when ``deterministic``: worker ``w`` parses units ``w, w+T, ...``; else arrival order); with
    unique ids, a third stage thread computes them while the batcher builds the next batch.  ``flush()``
    delivers the partial batch now (a consumer group member draining revoked partitions)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        flow = self.flow
        self.deterministic = flow.deterministic or self.stages.group_shuffle is not None
        nq = self.threads if self.deterministic else 1
        depth = flow.queue_blocks * (1 if self.deterministic else self.threads)
        self.block_queues = [BoundedQueue(depth) for _ in range(nq)]
        # with unique ids: the batcher's batches on their way to the unique-id thread
        self.built = BoundedQueue(2) if self.builder.unique else None
        self.batched = self.out if self.built is None else self.built  # where batches go once cut

    def _targets(self):
        targets = [(self._work, (w,), f"ingest-parse-{w}") for w in range(self.threads)]
        targets.append((self._batch_loop, (), "ingest-batcher"))
        if self.built is not None:
            targets.append((self._unique_loop, (), "ingest-unique"))
        return targets

    def _queues(self):
        return self.block_queues + [self.out] + ([self.built] if self.built is not None else [])

    def flush(self):
        """Deliver the partial batch now (with the units completed so far) rather than when more input fills
        it.  Only with one block queue, as a consumer group has (not ``deterministic``)."""
        self._put(self.block_queues[0], FLUSH)

    def _work(self, w):
        """A parse worker: its Blocks go to the batcher thread."""
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

    def _blocks(self, done):
        """The blocks in stream order; units completed go to the list ``done``."""
        if self.deterministic:
            seq = 0
            while True:
                item = self._get(self.block_queues[seq % self.threads])
                if isinstance(item, UnitDone):
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
                elif isinstance(item, UnitDone):
                    done.append(item.key)
                elif isinstance(item, BaseException):
                    raise item
                else:
                    yield item

    def _batch_loop(self):
        done = []
        try:
            batches = self._one_stream_batches(self._blocks(done), done, build=self.builder.assemble)
            if self._deliver(batches, self.batched):
                self._put(self.batched, _End(Marks(done=list(done))))
        except ReaderClosedError:
            pass
        except BaseException as exc:
            self._put(self.batched, exc)

    def _unique_loop(self):
        """Complete the batcher's batches with their unique ids, in order; everything else passes through."""

        def items():
            while True:
                item = self._get(self.built)
                yield item
                if isinstance(item, (_End, BaseException)):
                    return

        try:
            self._deliver(with_unique_ids(items(), self.builder), self.out)
        except ReaderClosedError:
            pass
        except BaseException as exc:
            self._put(self.out, exc)


def runner_for(units, stages, flow, stats, progress=None, unit_source=None):
    """The runner of ``stages`` as ``flow`` says: ``InThread`` with no parse thread, else ``WorkerBatches``
    unless the batches must follow one block stream (the order of a one-thread read, a group shuffle, the groups
    the rounds count packed, the partial batch a group member flushes, or live units, where each worker's batch
    would wait for its own partition's messages)."""
    if flow.threads == 0:
        needs = {
            "keep_sample / pause": stages.rounds is not None,  # its gate waits for the consumer, the reading thread
            "a Kafka consumer group": unit_source is not None,  # partitions come and go while the consumer reads
            'until="forever"': flow.live,  # one partition would hold the only reader forever
        }
        for what, used in needs.items():
            if used:
                raise ConfigError(
                    f"threads(0) reads in the consumer's thread, and {what} needs parse threads: threads(1)"
                )
        return InThread(units, stages, flow, stats, progress=progress)
    one_stream = (
        flow.deterministic
        or stages.group_shuffle is not None
        or stages.rounds is not None
        or unit_source is not None
        or flow.live
    )
    runner = OneStream if one_stream else WorkerBatches
    return runner(units, stages, flow, stats, progress=progress, unit_source=unit_source)


class InThread(Runner):
    """No thread of its own (``threads(0)``): each ``next_batch`` reads, parses and batches in the consumer's thread
    until a batch is complete, in input order.  Nothing is handed between threads: each hand-over wakes a sleeping
    thread or waits for the GIL, which cost more CPU a batch than its own Python (``bench_overhead.py``), and a
    process that is itself one of several workers (a ``DataLoader``'s, a Ray task's) has nothing to overlap."""

    def start(self):
        done = []
        self._items = self._ended(self._one_stream_batches(noting_units(self._stream(0), done), done), done)

    @staticmethod
    def _ended(items, done):
        yield from items
        yield _End(Marks(done=list(done)))

    def _get(self, q, rounds=None):
        """The next item of the stream (the pipeline's error as an item, as the threads queue theirs)."""
        if self.stop.is_set():
            raise ReaderClosedError("the reader was shut down")
        try:
            return next(self._items)
        except Exception as exc:
            return exc

    def close(self, timeout=10.0):
        self.stop.set()  # a next_batch running in another thread stops at its next chunk
        with contextlib.suppress(ValueError, AttributeError):  # running in that thread, or never started
            self._items.close()
        return super().close(timeout)


class PipelineDelivery(Delivery):
    """The ``Delivery`` a unit source that assigns units (a consumer group member) gets of a running pipeline:
    its progress over the units' indices (one epoch), its flush and whether it stops."""

    def __init__(self, pipeline):
        self._pipeline = pipeline
        self._progress = pipeline.progress

    def delivered(self, index):
        return self._progress.delivered(0, index)

    def where(self, index):
        return self._progress.where(0, index)

    def forget(self, index):
        self._progress.forget(0, index)

    def flush(self):
        self._pipeline.flush()

    def stopped(self):
        return self._pipeline.stop.is_set()
