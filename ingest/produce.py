"""``ingest produce``: write sample files to a Kafka topic, whole groups or records per message.

A message carries whole sample groups (text: cut only where the group id changes, the
same alignment as byte-range work units) or whole length-prefixed records (pb, spb), about
``message_bytes`` each, sent round-robin over the topic's partitions (or those named in
the URL), so that ``kafka://`` readers see exactly the samples of the files.
"""

import numpy as np

from .formats import format_of
from .errors import ConfigError, SourceError
from .formats import FileType
from .formats.protobuf import DEFAULT_MAX_RECORD_BYTES, record_starts
from .formats.text import group_start_at_or_after
from .sources import expand_paths
from .sources.compression import infer_compression
from .sources.filesystems import open_url
from .sources.kafka import Cluster, direct_speaks, parse_kafka_url, reveal, security_settings
from .sources.registry import scheme_of

__all__ = ["is_topic", "produce"]


def is_topic(url):
    """Whether ``url`` names a Kafka topic that ``produce`` writes to."""
    return scheme_of(url) == "kafka"


def _cuts(f, size, ftype, message_bytes):
    """Start offsets of the messages of one file, then ``size``."""
    if ftype is FileType.txt:
        cuts = [0]
        while cuts[-1] < size:
            cuts.append(group_start_at_or_after(f, cuts[-1] + message_bytes, size))
        return cuts
    starts = record_starts(f, size, DEFAULT_MAX_RECORD_BYTES)
    cuts, target = [0], message_bytes
    for at in np.searchsorted(starts, np.arange(message_bytes, size, message_bytes)):
        if at < len(starts) and starts[at] > cuts[-1] and starts[at] >= target:
            cuts.append(int(starts[at]))
            target = cuts[-1] + message_bytes
    return cuts + [size]


def produce(inputs, url, file_type=None, message_bytes=1 << 20, log=print, progress=None, **producer_config):
    """Send the samples of ``inputs`` (uncompressed sample files) to the topic of ``url``.

    Returns ``{"messages": ..., "bytes": ..., "partitions": [...]}``.  ``progress.update(n)`` (a tqdm bar) is told
    of the bytes sent, and its ``total`` set to the input bytes, when given.
    """
    from kafka import KafkaProducer
    from kafka.errors import KafkaError

    brokers, topic, chosen = parse_kafka_url(url)
    files = expand_paths(inputs)
    for path, _ in files:
        if infer_compression(path) is not None:
            raise ConfigError(f"{path}: ingest produce reads uncompressed files (messages hold whole groups)")
    settings = {"acks": "all", "max_request_size": max(2 * message_bytes, 1 << 20)}
    settings.update(security_settings(producer_config))
    if direct_speaks(settings):  # fails fast where kafka-python would retry: refused TLS or SASL, ACLs
        Cluster(brokers, settings).partitions_for_topic(topic)
    try:
        producer = KafkaProducer(bootstrap_servers=brokers, **reveal(settings))
        partitions = chosen or sorted(producer.partitions_for(topic))
    except KafkaError as exc:
        raise SourceError(f"{url}: cannot produce: {exc}", source=url) from exc
    sent = nbytes = 0
    pending = []
    if progress is not None:
        progress.total = sum(size or 0 for _, size in files)
    try:
        for path, size in files:
            ftype = format_of(path, file_type)
            with open_url(path, "rb") as f:
                cuts = _cuts(f, size, ftype, message_bytes)
                for a, b in zip(cuts, cuts[1:]):
                    f.seek(a)
                    value = f.read(b - a)
                    if ftype is FileType.txt and not value.endswith(b"\n"):
                        value += b"\n"  # the next message must not continue this line
                    pending.append(producer.send(topic, value=value, partition=partitions[sent % len(partitions)]))
                    sent += 1
                    nbytes += len(value)
                    if progress is not None:
                        progress.update(b - a)
            log(f"{path}: {len(cuts) - 1} messages")
        producer.flush()
        for future in pending:  # a message the broker refused (too large, not authorized) fails here
            future.get()
    except KafkaError as exc:
        raise SourceError(f"{url}: cannot produce: {exc}", source=url) from exc
    finally:
        producer.close()
    return {"messages": sent, "bytes": nbytes, "partitions": partitions}
