"""Offsets in a partition: where a span starts by ``kafka(start=...)``, and the commits of a consumer group.

A position inside a partition is ``(message offset, byte in message)``: the reader state keeps these, and
commits them to the consumer group as the offset plus metadata ``ingest:<byte in message>:<samples of that group
delivered>`` (plain consumers see the offset).
"""

import threading

from ...errors import SourceError
from .fetch import consumer

__all__ = ["plan_offsets", "topic_partitions", "commit_metadata", "committed_position", "KafkaGroup", "kafka_positions"]


def topic_partitions(planner, topic, url):
    """The partition numbers of ``topic``; a SourceError when the brokers have no such topic."""
    known = planner.partitions_for_topic(topic)
    if not known:
        raise SourceError(f"{url}: no topic {topic!r} on the brokers", source=url)
    return known


def plan_offsets(planner, tps, start, ends=None):
    """``{tp: offset}`` where each partition starts by ``kafka(start=...)``: the earliest offset, the end
    offset (``ends`` when given), or the first offset at a timestamp (the end offset when none is that late)."""
    if start == "earliest":
        return planner.beginning_offsets(tps)
    ends = ends if ends is not None else planner.end_offsets(tps)
    if start == "latest":
        return {tp: ends[tp] for tp in tps}
    found = planner.offsets_for_times({tp: start for tp in tps})
    return {tp: (found[tp].offset if found[tp] is not None else ends[tp]) for tp in tps}


_META = "ingest:"


def commit_metadata(within, rows):
    """The metadata of a commit: where in the message at the committed offset delivery stopped."""
    return f"{_META}{within}:{rows}"


def committed_position(group_consumer, tp):
    """(start offset, resume point or None) committed to a consumer's group for a partition, or None."""
    committed = group_consumer.committed(tp, metadata=True)
    if committed is None or committed.offset < 0:
        return None
    meta = committed.metadata or ""
    if meta.startswith(_META):
        within, rows = (int(v) for v in meta[len(_META) :].split(":"))
        if within or rows:
            return committed.offset, ((committed.offset, within), rows)
    return committed.offset, None


class KafkaGroup:
    """The consumer group of ``kafka(group_id=...)`` with a fixed assignment: its committed positions
    (``committed_position(group.consumer, tp)``) and commits of the reader's (a consumer of the group that
    never subscribes)."""

    def __init__(self, brokers, options):
        self.consumer = consumer(brokers, {**options.config, "group_id": options.group_id})
        # state() may be taken on any thread while save_state_every() commits on the consumer's: kafka-python's
        # consumer is not thread-safe
        self._lock = threading.Lock()

    def commit(self, positions):
        """``positions``: ``{(topic, partition): (offset, within, rows)}``."""
        from kafka import TopicPartition
        from kafka.structs import OffsetAndMetadata

        offsets = {
            TopicPartition(t, p): OffsetAndMetadata(o, commit_metadata(w, r), -1)
            for (t, p), (o, w, r) in positions.items()
        }
        with self._lock:
            self.consumer.commit(offsets)

    def close(self):
        with self._lock:
            self.consumer.close()


def kafka_positions(units, progress):
    """``{(topic, partition): (offset, within, rows)}``: how far each Kafka unit was delivered (in the current
    epoch, or to its end when the last epoch finished it); units not started yet are left out."""
    out = {}
    for u in units:
        topic, partition = u.topic, u.partition
        where = progress.resume(progress.epoch, u.index)
        if where is not None:
            (offset, within), rows = where
            out[topic, partition] = (offset, within, rows)
        elif progress.delivered(progress.epoch, u.index) or progress.epoch > 0:  # read to its end offset
            out[topic, partition] = (u.last, 0, 0)
    return out
