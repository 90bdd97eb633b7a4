"""Membership of a Kafka consumer group: ``kafka(group_id=...)`` on ``kafka://brokers/topic`` URLs.

The group's coordinator shares the topics' partitions out among the readers of the group and moves them
as readers join and leave.  kafka-python's ``KafkaConsumer`` keeps the membership (joining, heartbeats,
rebalances, the cooperative-sticky assignor by default) but never fetches: every partition it is given
stays paused.  Each assigned partition becomes a work unit (a ``Lease``) that the parse workers read
with ingest's own fetch path.

When a rebalance takes a partition away, its stream is cut at the next message boundary; the reader
waits until the consumer has been handed every sample read before the cut, commits the cut, and only
then lets the partition go: its next owner starts where this reader stopped, so nothing is lost or
delivered twice across a rebalance (provided the consumer keeps taking batches during the drain, which
is bounded by half the session timeout, 4 sessions for a member the group dropped; past it the delivered
position is committed and a warning logged: what was still in flight may then be delivered twice).
Commits always mean "handed to the consumer": on revocation, at the end of the input, on
``reader.commit()`` and at ``shutdown()``.  A member the group dropped (its session expired) drains the
same way and commits as no member, which the coordinator takes only while the group has no member:
alone, it goes on exactly where it stopped.

With ``until="forever"`` a partition whose stream is caught up (or has held its thread for
``SLICE_S``) gives its parse thread up at a message boundary whenever another partition waits for one,
and goes on as a new lease at the back of the queue: any number of partitions share ``threads(n)``.
"""

import collections
import dataclasses
import logging
import threading
import time

from ...errors import SourceError
from .fetch import consumer
from .offsets import commit_metadata, committed_position, plan_offsets, topic_partitions
from .units import KafkaOptions, partition_unit

__all__ = ["GroupMember", "Lease"]

log = logging.getLogger(__name__)

SLICE_S = 5.0  # a live partition holds a thread at most this long while others wait
_POLL_MS = 100  # the membership thread's poll: how soon new assignments become units
_COMMIT_RETRY_S = 10.0
_REJOINS = 3  # consumers replaced in a row whose membership never settled: then the reader fails
_STUCK_SESSIONS = 2  # unsettled this many session timeouts (no drain of ours under way): a new consumer rejoins
_LOST_DRAIN_SESSIONS = 4  # a dropped member's drain: no rebalance waits on it, so it may take longer


class Lease:
    """One stretch of a partition read by this member, as the work unit ``unit``: from its start to
    ``end``, the offset after the last message its stream read (set when the stream closes)."""

    def __init__(self, member, tp, assignment):
        self.member = member
        self.tp = tp
        self.assignment = assignment  # which assignment of the partition to this member it reads for
        self.unit = None
        self.revoked = threading.Event()  # the partition was taken away: stop at the next message boundary
        self.taken_at = None  # when a parse worker took it
        self.end = None
        self.closed = threading.Event()

    def should_stop(self, caught_up):
        """Whether the stream ends at this message boundary: revoked, or (live) giving its thread up."""
        return self.revoked.is_set() or self.member.yield_thread(self, caught_up)

    def stopped(self, offset):
        """The stream closed after reading every message before ``offset``."""
        self.end = offset
        self.closed.set()
        self.member.lease_closed(self)

    @property
    def resume_at_end(self):
        """The resume point within the message at ``end``: the lease's own when its stream was cut before
        reading past it (the rows of that message it started after are still delivered), else None."""
        return self.unit.resume if self.end == self.unit.first else None


class GroupMember:
    """This reader in the consumer group ``options.group_id`` of ``topics``: hands out work units as partitions
    are assigned (``next_unit``), and cuts, drains and commits them as they are revoked.

    ``start(delivery)`` ties it to the reader's pipeline, whose ``Delivery`` (over the dynamic unit indices)
    tells what the consumer was handed."""

    def __init__(self, brokers, topics, options: KafkaOptions, planner):
        self.netloc = ",".join(brokers)
        self.url = f"kafka://{self.netloc}"
        self.brokers = brokers
        self.topics = topics
        self.options = options
        self.planner = planner  # offsets and commits over ingest's own connections (a Cluster)
        config = options.config
        session_s = config.get("session_timeout_ms", 45000) / 1000
        self.drain_s = session_s / 2  # a revocation holds the group's rebalance up meanwhile
        self.lost_drain_s = _LOST_DRAIN_SESSIONS * session_s
        self.stuck_s = _STUCK_SESSIONS * session_s
        self.delivery = None
        self._ends = {}  # caught_up: the end offsets seen at startup
        if options.until == "caught_up":
            self._ends = planner.end_offsets(self._all_partitions())
        self._cond = threading.Condition()
        self._queue: collections.deque = collections.deque()  # leases waiting for a parse worker
        self._chains: dict = {}  # tp -> its leases, oldest first, from the first not yet delivered
        self._added: list = []  # (partition, assignment) given by the listener, not yet made units
        self._owned: dict = {}  # partition -> its assignment (a number) while not revoked
        self._assignments = 0
        self._next_index = 0
        self._settled = False  # no rebalance under way since the last poll (callbacks included)
        self._settled_at = time.monotonic()  # when _settled was last True, or a drain of ours or a rejoin ended
        self._revoking = 0  # revocations under way (their drains hold the rebalance up)
        self._rejoining = False  # a stuck consumer is being replaced: its commits may be refused
        self._callbacks = 0  # rebalance callbacks so far
        self._error = None
        self._closing = threading.Event()
        self._commit_lock = threading.Lock()
        self._consumer = None
        self._thread = threading.Thread(target=self._run, name="ingest-kafka-group", daemon=True)

    def _all_partitions(self):
        from kafka import TopicPartition

        out = []
        for topic in self.topics:
            out.extend(TopicPartition(topic, p) for p in sorted(topic_partitions(self.planner, topic, self.url)))
        return out

    def start(self, delivery):
        self.delivery = delivery
        self._thread.start()

    # -- the membership thread ------------------------------------------------------------------
    def _subscribe(self):
        from kafka.coordinator.assignors.cooperative_sticky import CooperativeStickyAssignor

        settings = {
            "partition_assignment_strategy": (CooperativeStickyAssignor,),
            **self.options.config,
            "group_id": self.options.group_id,
            "auto_offset_reset": "earliest",
        }  # never fetches
        member = consumer(self.brokers, settings)
        for topic in self.topics:  # the first assignment then covers every partition
            member.partitions_for_topic(topic)
        member.subscribe(self.topics, listener=_listener(self))
        return member

    def _run(self):
        try:
            self._consumer = self._subscribe()
            rejoins = 0
            while not self._closing.is_set():
                self._poll()
                with self._cond:
                    seen = self._callbacks
                self._make_units()
                stable = self._consumer.group_metadata().state == "<stable>"
                with self._cond:
                    self._settled = stable and self._callbacks == seen
                    if self._settled:
                        self._settled_at = time.monotonic()
                        rejoins = 0
                    stuck = (
                        not self._settled and not self._revoking and time.monotonic() - self._settled_at > self.stuck_s
                    )
                    self._cond.notify_all()
                if stuck:
                    rejoins += 1
                    if rejoins > _REJOINS:
                        raise SourceError(
                            f"the membership did not settle in {_REJOINS + 1} consumers in a row, "
                            f"{self.stuck_s:.0f} s each",
                            source=self.url,
                        )
                    self._rejoin()
        except BaseException as exc:  # noqa: BLE001 - travels to the consumer through next_unit
            with self._cond:
                self._error = exc
                self._cond.notify_all()
        finally:
            if self._consumer is not None:
                try:
                    self.commit()
                    self._consumer.close()  # leaves the group (revoking what is left: committed again)
                except Exception as exc:  # noqa: BLE001 - the reader is stopping; nothing to hand the error to
                    log.warning("%s: leaving consumer group %r: %s", self.url, self.options.group_id, exc)

    def _poll(self):
        """One poll of the consumer: joins and rebalances run their callbacks within.  A retriable error is
        logged and the next poll retries: kafka-python 3 lets a failed metadata refresh out of ``poll()`` while
        a broker restarts.  If it lasts, the membership stops settling and ``_rejoin`` takes over."""
        from kafka.errors import KafkaError

        try:
            self._consumer.poll(timeout_ms=_POLL_MS)
        except KafkaError as exc:
            if not exc.retriable:
                raise
            log.info("%s: group %r: poll: %s; retrying", self.url, self.options.group_id, exc)
            self._closing.wait(_POLL_MS / 1000)

    def _rejoin(self):
        """Replace a consumer whose membership stopped settling (kafka-python 3.0 was seen to send no SyncGroup
        after a join, never heartbeating again): it leaves the group, revoking (draining, committing) what it
        held, and a new consumer joins."""
        log.warning(
            "%s: group %r: the membership did not settle for %.0f s; rejoining with a new consumer",
            self.url,
            self.options.group_id,
            self.stuck_s,
        )
        self._rejoining = True
        try:
            self._consumer.close(timeout_ms=1000 * self.drain_s)
        except Exception as exc:  # noqa: BLE001 - the old consumer is dropped either way
            log.warning("%s: group %r: closing the stuck consumer: %s", self.url, self.options.group_id, exc)
        finally:
            self._rejoining = False
        with self._cond:
            held = set(self._owned)
        if held:  # the close did not revoke them: not committed, they may be read again elsewhere
            self.revoke(held, lost=True)
        self._consumer = self._subscribe()
        with self._cond:
            self._settled_at = time.monotonic()

    def _make_units(self):
        """Leases for the partitions assigned since the last poll, from the group's committed positions
        (exact, when ingest committed them) or the reader's start."""
        with self._cond:
            added, self._added = self._added, []
        if not added:
            return
        starts = plan_offsets(self.planner, [tp for tp, _ in added], self.options.start)
        for tp, assignment in added:
            start, resume = committed_position(self._consumer, tp) or (starts[tp], None)
            end = None if self.options.until == "forever" else max(start, self._ends.get(tp, start))
            self._queue_lease(tp, assignment, partition_unit(0, self.netloc, tp, start, end, self.options, resume))

    def _queue_lease(self, tp, assignment, unit):
        with self._cond:
            # revoked meanwhile (and maybe assigned again: that assignment plans from the commit of this revocation)
            if self._owned.get(tp) != assignment:
                return
            lease = Lease(self, tp, assignment)
            lease.unit = dataclasses.replace(unit, index=self._next_index, lease=lease)
            self._next_index += 1
            chain = self._chains.setdefault(tp, [])
            while chain and self.delivery.delivered(chain[0].unit.index):  # delivered in order: forget them
                self.delivery.forget(chain.pop(0).unit.index)
            chain.append(lease)
            self._queue.append(lease)
            self._cond.notify_all()

    # -- the parse workers' side --------------------------------------------------------------------
    def next_unit(self, stop):
        """The next work unit for a parse worker; None when there is nothing more to read (``caught_up``: every
        partition of a settled assignment read to its end offset) or the reader stops."""
        with self._cond:
            while True:
                if self._error is not None:
                    raise SourceError(
                        f"{self.url}: consumer group {self.options.group_id!r}: {self._error}", source=self.url
                    ) from self._error
                if self._queue:
                    lease = self._queue.popleft()
                    lease.taken_at = time.monotonic()
                    return lease.unit
                if stop.is_set() or self._caught_up():
                    return None
                self._cond.wait(0.05)

    def _caught_up(self):
        """Every partition assigned in a settled generation was read to its end offset (under ``_cond``)."""
        if self.options.until == "forever" or self._added or not self._settled:
            return False
        return all(lease.closed.is_set() for chain in self._chains.values() for lease in chain)

    def yield_thread(self, lease, caught_up):
        """Whether a live stream gives its parse thread up to a partition waiting for one."""
        if self.options.until != "forever" or not self._queue:
            return False
        return caught_up or time.monotonic() - lease.taken_at > SLICE_S

    def lease_closed(self, lease):
        """A live lease that gave its thread up goes on as a new lease, at the back of the queue."""
        if (
            self.options.until == "forever"
            and not lease.revoked.is_set()
            and not self._closing.is_set()
            and not self.delivery.stopped()
        ):
            self._queue_lease(
                lease.tp,
                lease.assignment,
                dataclasses.replace(lease.unit, resume=lease.resume_at_end, first=lease.end, lease=None),
            )
        with self._cond:
            self._cond.notify_all()

    # -- revocation and commits -------------------------------------------------------------------
    def assign(self, tps):
        """Partitions given to this reader (on kafka-python's event loop): units at the next poll."""
        log.info("%s: group %r assigned %s", self.url, self.options.group_id, _names(tps))
        with self._cond:
            self._assignments += 1
            self._added.extend((tp, self._assignments) for tp in sorted(tps))
            self._owned.update((tp, self._assignments) for tp in tps)
            self._callbacks += 1
            self._settled = False

    def revoke(self, tps, lost=False):
        """Take partitions away (before they move; kafka-python's event loop waits): cut their streams, wait
        until the consumer was handed what was read before the cut, and commit it.  ``lost``: the group dropped
        this reader (its session expired while the process stalled, or a stuck consumer was closed), so the
        commit is one of no member, which the coordinator takes only while the group has no member (this
        reader was alone); else the partitions go on elsewhere from their last commit."""
        log.info("%s: group %r revoked %s%s", self.url, self.options.group_id, _names(tps), " (lost)" if lost else "")
        with self._cond:
            self._revoking += 1
            self._callbacks += 1
            self._settled = False
            for tp in tps:
                self._owned.pop(tp, None)
            leases = [lease for tp in tps for lease in self._chains.get(tp, ())]
            for lease in leases:
                lease.revoked.set()
            self._queue = collections.deque(lease for lease in self._queue if lease.tp not in tps)
            self._added = [(tp, n) for tp, n in self._added if tp not in tps]
        try:
            # No rebalance waits on a member the group dropped, or on one leaving a stuck membership.
            bound_s = self.lost_drain_s if lost or self._rejoining else self.drain_s
            self._drain_and_commit(tps, leases, as_member=not lost, bound_s=bound_s)
        finally:
            with self._cond:
                for tp in tps:
                    self._chains.pop(tp, None)
                self._revoking -= 1
                self._settled_at = time.monotonic()
                self._cond.notify_all()

    def _drain_and_commit(self, tps, leases, as_member, bound_s):
        drained = self._drain([lease for lease in leases if lease.taken_at is not None], bound_s)
        if not drained and not self.delivery.stopped():
            log.warning(
                "%s: partitions %s revoked from group %r: the consumer did not take the batches read "
                "before the cut within %.0f s; committing what it was handed (the rest may be "
                "delivered twice)",
                self.url,
                _names(tps),
                self.options.group_id,
                bound_s,
            )
        self._commit({tp: self._position(tp) for tp in tps if tp in self._chains}, as_member)

    def _drain(self, started, bound_s):
        """Wait until the consumer was handed every sample of the ``started`` leases (their streams cut); False
        when the reader stops or the drain takes longer than ``bound_s``."""
        deadline = time.monotonic() + bound_s
        if not self._wait(lambda: all(lease.closed.is_set() for lease in started), deadline):
            return False

        def delivered():
            return all(self.delivery.delivered(lease.unit.index) for lease in started)

        while not delivered():
            if self.delivery.stopped() or time.monotonic() > deadline:
                return False
            self.delivery.flush()  # the partial batch, and again until the units' completion came through
            self._wait(delivered, min(deadline, time.monotonic() + 0.2))
        return True

    def _wait(self, done, deadline):
        while not done():
            if self.delivery.stopped() or time.monotonic() > deadline:
                return False
            time.sleep(0.01)
        return True

    def _position(self, tp):
        """``(offset, byte in message, rows of that group)`` the consumer was handed up to in a partition."""
        chain = self._chains[tp]  # after a yield the previous lease may still be in flight
        for lease in chain:
            delivered, resume = self.delivery.where(lease.unit.index)
            if not delivered:
                return _flat(resume or lease.unit.resume, lease.unit.first)
        return _flat(chain[-1].resume_at_end, chain[-1].end)

    def commit(self):
        """Commit what the consumer was handed in every partition held."""
        with self._cond:
            positions = {tp: self._position(tp) for tp in self._chains}
        self._commit(positions)

    def _commit(self, positions, as_member=True):
        """Commit ``positions`` as this member; or, once the group dropped it (``as_member`` False, or a stuck
        consumer closed), as no member: the coordinator takes that while the group has no member either."""
        if not positions:
            return
        log.info(
            "%s: group %r: committing %s%s",
            self.url,
            self.options.group_id,  # offset+byte/rows
            ", ".join(f"{tp.topic}:{tp.partition}@{o}+{w}/{r}" for tp, (o, w, r) in sorted(positions.items())),
            "" if as_member else " (as no member)",
        )
        offsets = {tp: (o, commit_metadata(w, r)) for tp, (o, w, r) in positions.items()}
        with self._commit_lock:
            refused = "this reader was dropped from the group"
            if as_member:
                try:
                    self._commit_as_member(offsets, 1.0 if self._rejoining else _COMMIT_RETRY_S)
                    return
                except SourceError as exc:
                    if not self._rejoining:
                        raise
                    refused = exc
            try:
                failure = self.planner.commit(self.options.group_id, -1, "", offsets)
            except SourceError as again:
                failure = again
            if failure is not None:
                log.warning(
                    "%s: group %r: %s; a commit as no member: %s: the partitions go on from their last "
                    "commit, and what was delivered since may be delivered again",
                    self.url,
                    self.options.group_id,
                    refused,
                    failure,
                )

    def _commit_as_member(self, offsets, retry_s):
        deadline = time.monotonic() + retry_s
        while True:
            meta = self._consumer.group_metadata()
            failure = self.planner.commit(self.options.group_id, meta.generation_id, meta.member_id, offsets)
            if failure is None:
                return
            if time.monotonic() > deadline:
                raise SourceError(
                    f"{self.url}: cannot commit for group {self.options.group_id!r} for {retry_s:.0f} s: {failure}",
                    source=self.url,
                )
            time.sleep(0.1)

    def close(self):
        """Commit what the consumer was handed, leave the group and stop the membership thread."""
        self._closing.set()
        self._thread.join(30)


def _flat(resume, offset):
    """A resume point ``((offset, byte in message), rows)`` as ``(offset, byte, rows)``; None: the start of
    ``offset``."""
    if resume is None:
        return offset, 0, 0
    (at, within), rows = resume
    return at, within, rows


def _names(tps):
    return ", ".join(f"{tp.topic}:{tp.partition}" for tp in sorted(tps))


def _listener(member):
    """kafka-python's rebalance callbacks for ``member``.  They run on kafka-python's event loop, which also sends
    the heartbeats: a revocation's drain (up to ``drain_s``) runs on a thread of its own while the loop goes on."""
    from kafka import AsyncConsumerRebalanceListener

    async def off_loop(work, *args):
        done, failure = threading.Event(), []

        def run():
            try:
                work(*args)
            except BaseException as exc:  # noqa: BLE001 - re-raised on the event loop, where kafka-python reports it
                failure.append(exc)
            finally:
                done.set()

        threading.Thread(target=run, name="ingest-kafka-revoke", daemon=True).start()
        while not done.is_set():
            await member._consumer._net.sleep(0.01)  # kafka-python 3's event-loop sleep (there is no public one)
        if failure:
            raise failure[0]

    class Listener(AsyncConsumerRebalanceListener):
        async def on_partitions_assigned(self, assigned):
            member._consumer.pause(*assigned)  # the consumer never fetches: ingest's workers do
            member.assign(assigned)

        async def on_partitions_revoked(self, revoked):
            if revoked:
                await off_loop(member.revoke, set(revoked))

        async def on_partitions_lost(self, lost):
            if lost:
                log.warning(
                    "%s: consumer group %r dropped this reader (its session expired); partitions %s",
                    member.url,
                    member.options.group_id,
                    _names(lost),
                )
                await off_loop(member.revoke, set(lost), True)

    return Listener()
