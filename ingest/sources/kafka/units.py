"""Kafka's work units: one per partition, from a start offset up to an end offset (or forever), and the
``reader.kafka(...)`` options they are planned by."""

import urllib.parse
from dataclasses import dataclass

from ...errors import ConfigError
from ..base import Unit
from .fetch import check_direct
from .security import security_settings
from .stream import KafkaStream

__all__ = ["KafkaOptions", "PartitionSpan", "parse_kafka_url", "partition_unit"]


class KafkaOptions:
    """``reader.kafka(...)`` settings: where each partition starts and ends, and consumer settings (security
    settings completed from the environment or a file, passwords kept as ``Secret``s: security.py)."""

    def __init__(self, group_id=None, start="earliest", until="caught_up", client="direct", **consumer_config):
        if client not in ("direct", "kafka-python"):
            raise ConfigError(
                f"kafka(client={client!r}): expected 'direct' (ingest's fetch path) or 'kafka-python' "
                f"(kafka-python's KafkaConsumer)"
            )
        consumer_config = security_settings(consumer_config)
        if client == "direct":
            check_direct(consumer_config)
        if group_id is not None and (not isinstance(group_id, str) or not group_id):
            raise ConfigError(f"kafka(group_id=<{type(group_id).__name__}>): expected a non-empty string")
        if start not in ("earliest", "latest") and (isinstance(start, bool) or not isinstance(start, int)):
            raise ConfigError(f"kafka(start={start!r}): expected 'earliest', 'latest' or a timestamp in ms")
        if until not in ("caught_up", "forever"):
            raise ConfigError(
                f"kafka(until={until!r}): expected 'caught_up' (stop at the end offsets seen at startup) or 'forever'"
            )
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


@dataclass(frozen=True)
class PartitionSpan(Unit):
    """Partition ``partition`` of ``topic`` from offset ``first`` up to ``last`` (exclusive; None: forever), read
    with ``client`` and consumer settings ``config``.  A resume position is ``(message offset, byte in message)``;
    the stream starts at 0 wherever it resumes.  ``lease`` is set for a consumer group member's partitions: the
    group may end the span at any message boundary."""

    index: int
    url: str
    brokers: tuple
    topic: str
    partition: int
    first: int
    last: int | None
    client: str
    config: tuple
    resume: object = None
    lease: object = None

    start = 0  # not a byte range
    end = None
    size = None

    def ident(self):
        return [self.index, self.url]  # end offsets move between runs

    def resume_refused(self, position):
        if isinstance(position, list) and len(position) == 2:
            return None
        return f"[message offset, byte in message] of {self.url}"

    def open(self):
        return KafkaStream(self)


def partition_unit(index, netloc, tp, start, end, options, resume=None):
    """The work unit reading partition ``tp`` from offset ``start`` up to ``end`` (None: forever)."""
    return PartitionSpan(
        index,
        f"kafka://{netloc}/{tp.topic}:{tp.partition}",
        tuple(netloc.split(",")),
        tp.topic,
        tp.partition,
        start,
        end,
        options.client,
        tuple(sorted(options.config.items())),
        resume,
    )
