"""Kafka as a source (docs/formats.md, remote inputs): ``kafka://broker1:9092,broker2:9092/topic[:partition,...]``,
one work unit per partition, its messages read as one byte stream; consumer groups with exact commits."""

from .cluster import Cluster
from .offsets import KafkaGroup
from .security import Secret, direct_speaks, reveal, security_settings
from .source import KafkaSource, kafka_units
from .stream import KafkaStream
from .units import KafkaOptions, PartitionSpan, parse_kafka_url, partition_unit

__all__ = [
    "Cluster",
    "Secret",
    "direct_speaks",
    "reveal",
    "security_settings",
    "KafkaGroup",
    "KafkaOptions",
    "KafkaSource",
    "KafkaStream",
    "PartitionSpan",
    "kafka_units",
    "parse_kafka_url",
    "partition_unit",
]
