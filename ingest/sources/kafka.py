"""Kafka topics (docs/formats.md, remote inputs): one work unit per partition, its messages read as one byte stream.

``kafka://broker1:9092,broker2:9092/topic[:partition[,partition]]``.  Each message carries
one or more whole records of the reader's ``file_type`` (text lines ending in a newline,
or length-prefixed protobuf records), so a partition's messages, concatenated, read like
a file.  The offsets a unit reads are fixed when the reader starts: from the earliest
offset (or the latest, or the first at a timestamp, or the consumer group's committed
position) up to the end offset seen then.

A position inside a partition is ``(message offset, byte in message)``: the reader state
keeps these, and commits them to the consumer group as the offset plus metadata
``ingest:<byte in message>:<samples of that group delivered>`` (plain consumers see the offset).
"""
import collections
import io
import urllib.parse

import numpy as np

from .._native.kafka import gather
from ..errors import ConfigError, SourceError
from .ahead import Ahead
from .kafka_fetch import Cluster, check_direct, fetcher

__all__ = ["is_kafka", "kafka_units", "KafkaStream", "KafkaOptions", "parse_kafka_url", "KafkaGroup"]

POLL_MS = 500


def is_kafka(url):
    return isinstance(url, str) and url.startswith("kafka://")


class KafkaOptions:
    """``reader.kafka(...)`` settings: where each partition starts and ends, and consumer settings."""

    def __init__(self, group_id=None, start="earliest", until="caught_up", client="direct", **consumer_config):
        if client not in ("direct", "kafka-python"):
            raise ConfigError(f"kafka(client={client!r}): expected 'direct' (ingest's fetch path) or 'kafka-python' "
                              f"(kafka-python's KafkaConsumer)")
        if client == "direct":
            check_direct(consumer_config)
        if group_id is not None and (not isinstance(group_id, str) or not group_id):
            raise ConfigError(f"kafka(group_id={group_id!r}): expected a non-empty string")
        if start not in ("earliest", "latest") and (isinstance(start, bool) or not isinstance(start, int)):
            raise ConfigError(f"kafka(start={start!r}): expected 'earliest', 'latest' or a timestamp in ms")
        if until not in ("caught_up", "forever"):
            raise ConfigError(f"kafka(until={until!r}): expected 'caught_up' (stop at the end offsets seen at "
                              f"startup) or 'forever'")
        self.group_id = group_id
        self.start = start
        self.until = until
        self.client = client
        self.config = consumer_config

    def __eq__(self, other):
        return isinstance(other, KafkaOptions) and vars(self) == vars(other)

    __hash__ = None  # type: ignore[assignment]  # equal by value, so not hashable


def parse_kafka_url(url):
    """``(brokers, topic, partitions or None)`` of a kafka:// URL."""
    parts = urllib.parse.urlsplit(url)
    topic, _, partitions = parts.path.lstrip("/").partition(":")
    if not parts.netloc or not topic or "/" in topic:
        raise ConfigError(f"{url}: expected kafka://broker[:port][,broker...]/topic[:partition[,partition]]")
    try:
        chosen = sorted({int(p) for p in partitions.split(",")}) if partitions else None
    except ValueError:
        raise ConfigError(f"{url}: partitions must be integers, as in kafka://broker/topic:0,2") from None
    return parts.netloc.split(","), topic, chosen


# fetches large enough that a partition streams at the parser's speed; an offset the broker no longer has
# (retention) is an error, never a silent jump to another offset
_FETCH = {"max_partition_fetch_bytes": 16 << 20, "fetch_max_bytes": 64 << 20, "auto_offset_reset": "none"}


def consumer(brokers, config):
    from kafka import KafkaConsumer
    from kafka.errors import KafkaError
    try:
        return KafkaConsumer(bootstrap_servers=brokers, enable_auto_commit=False, **{**_FETCH, **config})
    except KafkaError as exc:
        raise SourceError(f"kafka://{','.join(brokers)}: cannot connect: {exc}", source=",".join(brokers)) from exc


def kafka_units(url, options, first_index):
    """The work units of a kafka:// URL: ``WorkUnit``s whose ``position`` is ``(start offset, end offset (None:
    forever), client, consumer settings)``."""
    from kafka import TopicPartition
    brokers, topic, chosen = parse_kafka_url(url)
    planner = Cluster(brokers, options.config) if options.client == "direct" else consumer(brokers, options.config)
    try:
        known = topic_partitions(planner, topic, url)
        missing = sorted(set(chosen or ()) - known)
        if missing:
            raise SourceError(f"{url}: topic {topic!r} has no partition {missing} (it has {sorted(known)})",
                              source=url)
        tps = [TopicPartition(topic, p) for p in (chosen or sorted(known))]
        ends = planner.end_offsets(tps)
        starts = plan_offsets(planner, tps, options.start, ends)
        resume = {}
        if options.group_id is not None:  # the group's committed positions win
            group = KafkaGroup(brokers, options)
            try:
                for tp in tps:
                    committed = committed_position(group.consumer, tp)
                    if committed is not None:
                        starts[tp], resume[tp] = committed
            finally:
                group.close()
    finally:
        planner.close()
    netloc = ",".join(brokers)
    forever = options.until == "forever"
    return [partition_unit(first_index + i, netloc, tp, starts[tp], None if forever else ends[tp], options,
                           resume.get(tp))
            for i, tp in enumerate(tps)]


def topic_partitions(planner, topic, url):
    """The partition numbers of ``topic``; a SourceError when the brokers have no such topic."""
    known = planner.partitions_for_topic(topic)
    if not known:
        raise SourceError(f"{url}: no topic {topic!r} on the brokers", source=url)
    return known


def partition_unit(index, netloc, tp, start, end, options, resume=None):
    """The work unit reading partition ``tp`` from offset ``start`` up to ``end`` (None: forever)."""
    from .files import WorkUnit
    return WorkUnit(index, f"kafka://{netloc}/{tp.topic}:{tp.partition}", 0, None, None, None,
                    position=(start, end, options.client, tuple(sorted(options.config.items()))), resume=resume)


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
        within, rows = (int(v) for v in meta[len(_META):].split(":"))
        if within or rows:
            return committed.offset, ((committed.offset, within), rows)
    return committed.offset, None


class KafkaGroup:
    """The consumer group of ``kafka(group_id=...)`` with a fixed assignment: its committed positions
    (``committed_position(group.consumer, tp)``) and commits of the reader's (a consumer of the group that
    never subscribes)."""

    def __init__(self, brokers, options):
        self.consumer = consumer(brokers, {**options.config, "group_id": options.group_id})

    def commit(self, positions):
        """``positions``: ``{(topic, partition): (offset, within, rows)}``."""
        from kafka import TopicPartition
        from kafka.structs import OffsetAndMetadata
        self.consumer.commit({TopicPartition(t, p): OffsetAndMetadata(o, commit_metadata(w, r), -1)
                              for (t, p), (o, w, r) in positions.items()})

    def close(self):
        self.consumer.close()


def kafka_positions(units, progress):
    """``{(topic, partition): (offset, within, rows)}``: how far each Kafka unit was delivered (in the current
    epoch, or to its end when the last epoch finished it); units not started yet are left out."""
    out = {}
    for u in units:
        if not is_kafka(u.url):
            continue
        _, topic, [partition] = parse_kafka_url(u.url)
        where = progress.resume(progress.epoch, u.index)
        if where is not None:
            (offset, within), rows = where
            out[topic, partition] = (offset, within, rows)
        elif progress.delivered(progress.epoch, u.index) or progress.epoch > 0:  # read to its end offset
            out[topic, partition] = (u.position[1], 0, 0)
    return out


class KafkaStream(io.RawIOBase):
    """The messages of one partition from offset ``start`` up to ``end`` (exclusive; None: forever), as bytes.

    A stream without end is *live*: a read returns what has arrived when no message comes within a
    poll, and ``at_boundary()`` tells the parser that the bytes so far end with a whole message (whole
    groups or records), so it need not hold the last group back.  It ends when ``stop`` is set.
    """

    def __init__(self, unit):
        super().__init__()
        brokers, topic, [partition] = parse_kafka_url(unit.url)
        self._next, self._end, client, config = unit.position
        self._url = unit.url
        self._chunks = collections.deque()  # Messages fetched and not read to their end
        self._message = 0                   # the next byte to read: message and byte in the first chunk
        self._byte = 0
        if unit.resume is not None:         # the first message was delivered up to a byte
            (self._next, self._byte), _ = unit.resume
        self._read = 0                      # stream position of the next byte
        self._tail = -self._byte            # stream position where the next fetched message starts
        self._starts = np.zeros(0, np.int64)   # stream position where each message read starts
        self._offsets = np.zeros(0, np.int64)  # and its offset
        self.live = self._end is None
        self.stop = None  # threading.Event, set by the reader (read_unit)
        self._lease = unit.lease            # a consumer group's partition: it may end at any message boundary
        self._after = self._next            # the offset after the last message read whole
        self._cut = False
        self._fetch = self._ahead = None
        if self.live or self._next < self._end:
            self._fetch = fetcher(self._url, brokers, topic, partition, client, dict(config))
            self._ahead = Ahead(self._fetch_next, depth=2, name="ingest-kafka-fetch")

    def _fetch_next(self, stop):
        """The Messages of the next fetch (a list, empty when a live stream got nothing within a poll);
        None at the end offset."""
        if not self.live and self._next >= self._end:
            return None
        got, self._next = self._fetch.fetch(self._next, self._end, POLL_MS, stop)
        return got

    def readable(self):
        return True

    def _fill(self, waiting=True):
        """Take fetched messages into ``_chunks``; False at the end offset, or (unless ``waiting``) when a
        live stream has nothing new within a poll."""
        while not self._chunks:
            if self._ahead is None or self.stop is not None and self.stop.is_set() or self._cut:
                return False
            got = self._ahead.take()
            if got is None:
                return False
            if not got and self._byte == 0 and self._lease is not None and self._lease.should_stop(caught_up=True):
                self._cut = True
                return False
            for messages in got:
                starts = self._tail + np.cumsum(messages.lens) - messages.lens
                self._tail += int(messages.lens.sum())
                self._starts = np.concatenate([self._starts, starts])
                self._offsets = np.concatenate([self._offsets, messages.offsets])
                self._chunks.append(messages)
            if not self._chunks and not waiting:
                return False
        return True

    def at_boundary(self):
        return self.live and not self._chunks

    def locate(self, pos):
        """Where stream position ``pos`` is, in Kafka's terms (for error messages)."""
        i = max(0, int(np.searchsorted(self._starts, pos, side="right")) - 1)
        if not len(self._starts):
            return f"byte {pos} of the partition stream"
        return f"message offset {self._offsets[i]}, byte {pos - self._starts[i]} of the message"

    def messages(self, start, end):
        """``(stream positions, offsets)`` of the messages from the one holding ``start`` to the one holding
        ``end``; earlier ones are forgotten (blocks come in stream order)."""
        first = max(0, int(np.searchsorted(self._starts, start, side="right")) - 1)
        last = int(np.searchsorted(self._starts, end, side="right"))
        out = (self._starts[first:last].copy(), self._offsets[first:last].copy())
        self._starts, self._offsets = self._starts[first:], self._offsets[first:]
        return out

    def readinto(self, b):
        out = np.frombuffer(memoryview(b).cast("B"), np.uint8)
        n = 0
        while n < len(out):
            if self._byte == 0 and self._lease is not None and (self._cut or self._lease.should_stop(caught_up=False)):
                self._cut = True  # at a message boundary: the stream ends here
                break
            if not self._chunks and not self._fill(waiting=n == 0):
                break
            m = self._chunks[0]
            self._message, self._byte, filled = gather(m.buf, m.starts, m.lens, self._message, self._byte, out, n)
            self._read += filled - n
            n = filled
            if self._message:
                self._after = int(m.offsets[self._message - 1]) + 1
            if self._message == len(m.starts):
                self._chunks.popleft()
                self._message = self._byte = 0
        return n

    def close(self):
        if self._ahead is not None:
            self._ahead.close()
            self._fetch.close()
            self._ahead = self._fetch = None
        if self._lease is not None and not self.closed:
            self._lease.stopped(self._after)
        super().close()
