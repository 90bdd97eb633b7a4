"""Kafka topics (FORMATS.md section 6): one work unit per partition, its messages read as one byte stream.

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
import io
import urllib.parse

import numpy as np

from ..errors import ConfigError, SourceError

__all__ = ["is_kafka", "kafka_units", "KafkaStream", "KafkaOptions", "parse_kafka_url", "KafkaGroup"]

POLL_MS = 500


def is_kafka(url):
    return isinstance(url, str) and url.startswith("kafka://")


class KafkaOptions:
    """``reader.kafka(...)`` settings: where each partition starts and ends, and consumer settings."""

    def __init__(self, group_id=None, start="earliest", until="caught_up", **consumer_config):
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
        self.config = consumer_config


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


def _consumer(brokers, config):
    from kafka import KafkaConsumer
    from kafka.errors import KafkaError
    try:
        return KafkaConsumer(bootstrap_servers=brokers, enable_auto_commit=False, **{**_FETCH, **config})
    except KafkaError as exc:
        raise SourceError(f"kafka://{','.join(brokers)}: cannot connect: {exc}", source=",".join(brokers)) from exc


def kafka_units(url, options, first_index):
    """The work units of a kafka:// URL: ``WorkUnit``s whose ``position`` is ``(start offset, end offset,
    consumer settings)``."""
    from kafka import TopicPartition

    from .files import WorkUnit
    brokers, topic, chosen = parse_kafka_url(url)
    consumer = _consumer(brokers, options.config)
    try:
        known = consumer.partitions_for_topic(topic)
        if not known:
            raise SourceError(f"{url}: no topic {topic!r} on the brokers", source=url)
        missing = sorted(set(chosen or ()) - known)
        if missing:
            raise SourceError(f"{url}: topic {topic!r} has no partition {missing} (it has {sorted(known)})",
                              source=url)
        tps = [TopicPartition(topic, p) for p in (chosen or sorted(known))]
        ends = consumer.end_offsets(tps)
        if options.start == "earliest":
            starts = consumer.beginning_offsets(tps)
        elif options.start == "latest":
            starts = ends
        else:
            found = consumer.offsets_for_times({tp: options.start for tp in tps})
            starts = {tp: (found[tp].offset if found[tp] is not None else ends[tp]) for tp in tps}
        resume = {}
        if options.group_id is not None:  # the group's committed positions win
            group = KafkaGroup(brokers, options)
            try:
                for tp in tps:
                    committed = group.committed(tp)
                    if committed is not None:
                        starts[tp], resume[tp] = committed
            finally:
                group.close()
    finally:
        consumer.close()
    netloc = ",".join(brokers)
    forever = options.until == "forever"
    return [WorkUnit(first_index + i, f"kafka://{netloc}/{topic}:{tp.partition}", 0, None, None, None,
                     position=(starts[tp], None if forever else ends[tp], tuple(sorted(options.config.items()))),
                     resume=resume.get(tp))
            for i, tp in enumerate(tps)]


_META = "ingest:"


def _from_commit(committed):
    """(start offset, resume point or None) of a committed OffsetAndMetadata."""
    meta = committed.metadata or ""
    if meta.startswith(_META):
        within, rows = (int(v) for v in meta[len(_META):].split(":"))
        if within or rows:
            return committed.offset, ((committed.offset, within), rows)
    return committed.offset, None


class KafkaGroup:
    """The consumer group of ``kafka(group_id=...)``: its committed positions, and commits of the reader's
    (a consumer of the group that never subscribes)."""

    def __init__(self, brokers, options):
        self.consumer = _consumer(brokers, {**options.config, "group_id": options.group_id})

    def committed(self, tp):
        """(start offset, resume point or None) committed for a partition, or None."""
        got = self.consumer.committed(tp, metadata=True)
        return _from_commit(got) if got is not None and got.offset >= 0 else None

    def commit(self, positions):
        """``positions``: ``{(topic, partition): (offset, within, rows)}``."""
        from kafka import TopicPartition
        from kafka.structs import OffsetAndMetadata
        self.consumer.commit({TopicPartition(t, p): OffsetAndMetadata(o, f"{_META}{w}:{r}", -1)
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
        from kafka import TopicPartition
        super().__init__()
        brokers, topic, [partition] = parse_kafka_url(unit.url)
        self._next, self._end, config = unit.position
        self._within = 0  # bytes of the first message delivered before a restore
        if unit.resume is not None:
            (self._next, self._within), _ = unit.resume
        self._tp = TopicPartition(topic, partition)
        self._url = unit.url
        self._consumer = None
        self._pending = memoryview(b"")
        self._messages = []
        self._read = 0          # stream position of the next byte
        self._starts = []       # stream position where each message read starts (the first may be < 0)
        self._offsets = []      # and its offset
        self.live = self._end is None
        self.stop = None  # threading.Event, set by the reader (read_unit)
        if self.live or self._next < self._end:
            self._consumer = _consumer(brokers, dict(config))
            self._consumer.assign([self._tp])
            self._consumer.seek(self._tp, self._next)

    def readable(self):
        return True

    def _fill(self, waiting=True):
        """Take the next message's bytes into ``_pending``; False at the end offset, or (unless ``waiting``)
        when a live stream has nothing new within a poll."""
        from kafka.errors import KafkaError
        while not self._messages:
            if not self.live and self._next >= self._end:
                return False
            if self.stop is not None and self.stop.is_set():
                return False
            try:
                got = self._consumer.poll(timeout_ms=POLL_MS, max_records=1000)
            except KafkaError as exc:
                raise SourceError(f"{self._url}: cannot fetch from offset {self._next}: {exc}",
                                  source=self._url) from exc
            self._messages = [m for m in got.get(self._tp, ()) if self.live or m.offset < self._end]
            self._messages.reverse()
            if not self._messages and not waiting:
                return False
        message = self._messages.pop()
        self._next = message.offset + 1
        self._pending = memoryview(message.value or b"")[self._within:]
        self._starts.append(self._read - self._within)
        self._offsets.append(message.offset)
        self._within = 0
        return True

    def at_boundary(self):
        return self.live and not self._pending

    def locate(self, pos):
        """Where stream position ``pos`` is, in Kafka's terms (for error messages)."""
        i = max(0, int(np.searchsorted(self._starts, pos, side="right")) - 1)
        if not self._starts:
            return f"byte {pos} of the partition stream"
        return f"message offset {self._offsets[i]}, byte {pos - self._starts[i]} of the message"

    def messages(self, start, end):
        """``(stream positions, offsets)`` of the messages from the one holding ``start`` to the one holding
        ``end``; earlier ones are forgotten (blocks come in stream order)."""
        first = max(0, int(np.searchsorted(self._starts, start, side="right")) - 1)
        last = int(np.searchsorted(self._starts, end, side="right"))
        out = (np.array(self._starts[first:last], np.int64), np.array(self._offsets[first:last], np.int64))
        del self._starts[:first], self._offsets[:first]
        return out

    def readinto(self, b):
        view = memoryview(b).cast("B")
        n = 0
        while n < len(view):
            if not self._pending and not self._fill(waiting=n == 0):
                break
            k = min(len(view) - n, len(self._pending))
            view[n:n + k] = self._pending[:k]
            self._pending = self._pending[k:]
            n += k
            self._read += k
        return n

    def close(self):
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
        super().close()
