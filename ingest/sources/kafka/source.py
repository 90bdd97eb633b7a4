"""Kafka topics (docs/formats.md, remote inputs): one work unit per partition, its messages read as one byte stream.

``kafka://broker1:9092,broker2:9092/topic[:partition[,partition]]``.  Each message carries
one or more whole records of the reader's ``file_type`` (text lines ending in a newline,
or length-prefixed protobuf records), so a partition's messages, concatenated, read like
a file.  The offsets a unit reads are fixed when the reader starts: from the earliest
offset (or the latest, or the first at a timestamp, or the consumer group's committed
position) up to the end offset seen then."""

from ...errors import ConfigError, SourceError
from ..base import Source
from .cluster import Cluster
from .fetch import consumer
from .group import GroupMember
from .offsets import KafkaGroup, committed_position, kafka_positions, plan_offsets, topic_partitions
from .units import KafkaOptions, parse_kafka_url, partition_unit

__all__ = ["KafkaSource", "kafka_units"]


def kafka_units(url, options, first_index):
    """The ``PartitionSpan``s of a kafka:// URL, from where ``options`` (``KafkaOptions``) start each partition
    up to its end offset now (or forever)."""
    from kafka import TopicPartition

    brokers, topic, chosen = parse_kafka_url(url)
    planner = Cluster(brokers, options.config) if options.client == "direct" else consumer(brokers, options.config)
    try:
        known = topic_partitions(planner, topic, url)
        missing = sorted(set(chosen or ()) - known)
        if missing:
            raise SourceError(f"{url}: topic {topic!r} has no partition {missing} (it has {sorted(known)})", source=url)
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
    return [
        partition_unit(first_index + i, netloc, tp, starts[tp], None if forever else ends[tp], options, resume.get(tp))
        for i, tp in enumerate(tps)
    ]


class KafkaSource(Source):
    """``kafka://`` URLs: a topic's partitions (or those named), planned once, or assigned by a consumer group
    the reader joins (``kafka(group_id=...)`` on topic URLs)."""

    def options(self, **settings):
        return KafkaOptions(**settings)

    def plan(self, urls, *, splittable, compression, task_num, unit_bytes, options, first_index):
        units = []
        for url in urls:
            units.extend(kafka_units(url, options or KafkaOptions(), first_index + len(units)))
        return units

    def check(self, units, options, reader_options, name):
        if self.live(options) and len(units) > reader_options.threads:
            # a live partition holds its parse worker for good: with fewer workers, some would never be read
            raise ConfigError(
                f"reader {name!r}: kafka(until='forever') reads each partition on a parse thread of its "
                f"own; this reader has {len(units)} partitions and threads({reader_options.threads})"
            )

    def live(self, options):
        return options is not None and options.until == "forever"

    def member(self, urls, reader_options, name):
        o = reader_options
        kafka = o.sources.get("kafka") or KafkaOptions()
        topics = [parse_kafka_url(u) for u in urls if u.startswith("kafka://")]
        if kafka.group_id is None or not topics or all(parts is not None for _, _, parts in topics):
            return None
        why = None
        if any(parts is not None for _, _, parts in topics):
            why = "some kafka:// paths name partitions (a fixed assignment) and some do not (the group's)"
        elif len(topics) != len(urls):
            why = "it reads files too"
        elif len({tuple(brokers) for brokers, _, _ in topics}) > 1:
            why = "its topics are on different brokers"
        elif o.task[1] > 1:
            why = "shard() shares partitions out too; name the partitions in the URL for a fixed assignment"
        elif o.enable_state:
            why = (
                "enable_state / restore / save_state_every keep positions of a fixed assignment; a member's "
                "positions are the group's commits (reader.commit())"
            )
        elif o.deterministic or o.keep or o.pause is not None or o.epochs != 1 or o.shuffle is not None:
            why = "deterministic, keep_sample, pause, epochs and shuffle need a fixed set of units"
        elif kafka.client != "direct":
            why = "a member commits over ingest's own connections: it needs client='direct'"
        if why is not None:
            raise ConfigError(
                f"reader {name!r}: kafka(group_id={kafka.group_id!r}) on topic URLs joins the consumer group, but {why}"
            )
        brokers = topics[0][0]
        planner = Cluster(brokers, kafka.config)
        names = sorted({topic for _, topic, _ in topics})
        for topic in names:  # refused TLS, SASL or ACLs fail here, where kafka-python's membership would retry
            planner.partitions_for_topic(topic)
        return GroupMember(brokers, names, kafka, planner)

    def committer(self, units, options):
        if options is None or options.group_id is None or not units:
            return None
        return _Committer(units, KafkaGroup(list(units[0].brokers), options))

    def state_options(self, options):
        return {"kafka_start": (options or KafkaOptions()).start}


class _Committer:
    """Commits of a fixed assignment to the consumer group: how far each partition span was delivered."""

    def __init__(self, units, group):
        self._units = units
        self._group = group

    def commit(self, progress):
        self._group.commit(kafka_positions(self._units, progress))

    def close(self):
        self._group.close()
