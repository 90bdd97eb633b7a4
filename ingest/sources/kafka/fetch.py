"""Fetching one partition's messages, as runs of values in one buffer (``Messages``).

``DirectFetch`` (the default) sends Fetch requests to the partition's leader over a socket of its
own: the response lands in one buffer (``recv_into``), kafka-python's protocol classes encode the
request and decode the response fields, and the record batches are walked by a numba kernel
(``native/kafka.py``) with no Python object per message; CRCs are checked per batch by ``crc32c``.
kafka-python's ``KafkaConsumer`` makes a Python object per message and copies each value about five
times: on a 2-core machine it moved 110-200 MB/s where this moves 1.1-1.6 GB/s (docs/decisions.md).

Connections are ``cluster.py``'s (TLS and SASL PLAIN / SCRAM as configured); with
``isolation_level="read_committed"`` the batches of aborted transactions are passed over as Kafka's own
consumer does.  ``ConsumerFetch`` goes through ``KafkaConsumer`` (``kafka(client="kafka-python")``): for
what the direct path does not speak (SASL GSSAPI, OAUTHBEARER).
"""

import struct
import time
from typing import NamedTuple

import numpy as np

from ..._native import kafka as kernels
from ...errors import ConfigError, SourceError
from .cluster import ISOLATION, Cluster
from .security import MECHANISMS, direct_speaks, reveal

__all__ = ["Messages", "DirectFetch", "ConsumerFetch", "fetcher", "consumer", "check_direct"]

FETCH_VERSION = 12  # the last Fetch that names topics (13+ use topic ids); Kafka 2.7 to 4.x
_TRANSACTIONAL, _CONTROL = 0x10, 0x20  # bits of a record batch's attributes
RETRY_FOR_S = 120  # how long an unreachable leader is retried (a broker restart) before a SourceError
_BACKOFF_S = (0.05, 1.0)


class _BatchHeader(NamedTuple):
    """The fields of a record batch's header that the Python side needs (for compressed batches and errors)."""

    base: int
    stop: int  # the byte after the batch
    attributes: int
    next_offset: int  # base + last offset delta + 1
    count: int  # type: ignore[assignment]  # a field, not tuple.count
    producer: int

    @classmethod
    def at(cls, buf, p):
        base, length = struct.unpack_from(">qi", buf, p)
        attributes, last_delta = struct.unpack_from(">hi", buf, p + 21)
        producer = struct.unpack_from(">q", buf, p + 43)[0]
        count = struct.unpack_from(">i", buf, p + 57)[0]
        return cls(base, p + 12 + length, attributes, base + last_delta + 1, count, producer)


def _aborted_batches(buf, aborted):
    """``{position: (stop, next offset)}`` of the whole record batches in ``buf`` that belong to the aborted
    transactions a read_committed fetch lists (``(producer_id, first_offset)``s), their abort markers
    included: a producer's batches are aborted from its transaction's first offset up to its marker (as
    Kafka's own consumer reads them)."""
    starts = sorted((t.first_offset, t.producer_id) for t in aborted)
    ongoing, i, p, out = set(), 0, 0, {}
    while p + kernels.BATCH_HEADER <= len(buf):
        h = _BatchHeader.at(buf, p)
        if h.stop > len(buf):
            break
        if h.attributes & _TRANSACTIONAL:
            while i < len(starts) and starts[i][0] < h.next_offset:
                ongoing.add(starts[i][1])
                i += 1
            if h.producer in ongoing:
                if h.attributes & _CONTROL:  # the abort marker ends the transaction
                    ongoing.discard(h.producer)
                out[p] = (h.stop, h.next_offset)
        p = h.stop
    return out


class Messages(NamedTuple):
    """Message values ``buf[starts[i]:starts[i] + lens[i]]`` at ``offsets[i]``."""

    buf: np.ndarray
    offsets: np.ndarray
    starts: np.ndarray
    lens: np.ndarray


def fetcher(url, brokers, topic, partition, client, config):
    """The fetcher of a kafka:// unit: ``client`` as in ``reader.kafka(client=...)``, ``config`` the consumer
    settings."""
    if client == "kafka-python":
        return ConsumerFetch(url, brokers, topic, partition, config)
    return DirectFetch(url, brokers, topic, partition, config)


def check_direct(config):
    """ConfigError for consumer settings the direct client cannot honour."""
    if not direct_speaks(config):
        raise ConfigError(
            f"kafka(sasl_mechanism={config['sasl_mechanism']!r}): the direct client speaks SASL "
            f"{', '.join(MECHANISMS)}; pass client='kafka-python' for the others"
        )
    if config.get("isolation_level", "read_uncommitted") not in ISOLATION:
        raise ConfigError(
            f"kafka(isolation_level={config['isolation_level']!r}): expected 'read_uncommitted' or 'read_committed'"
        )


def _decompress(codec, data):
    """The records of a compressed batch: Kafka's codec numbers 1 gzip, 2 snappy (xerial framing), 3 lz4
    (frames), 4 zstd.  lz4 goes through pyarrow, so kafka-python's optional lz4 package is not needed."""
    import gzip

    import pyarrow as pa
    from kafka import codec as kafka_codec

    if codec == 1:
        return gzip.decompress(data)
    if codec == 3:
        return pa.CompressedInputStream(pa.BufferReader(data.tobytes()), "lz4").read()
    if codec == 4:
        return kafka_codec.zstd_decode(data.tobytes())
    if codec == 2:
        if not kafka_codec.has_snappy():
            raise ValueError("snappy batches need python-snappy (pip install python-snappy)")
        return kafka_codec.snappy_decode(data.tobytes())
    raise ValueError(f"unknown compression codec {codec}")


class DirectFetch:
    """Fetches of one partition from its leader, reconnecting (and finding the leader again) on failure."""

    def __init__(self, url, brokers, topic, partition, config):
        self.url = url
        self.brokers = brokers
        self.topic = topic
        self.partition = partition
        self.check_crcs = config.get("check_crcs", True)
        self.partition_bytes = config.get("max_partition_fetch_bytes", 16 << 20)
        self.max_bytes = config.get("fetch_max_bytes", 64 << 20)
        self.cluster = Cluster(brokers, config)
        self.conn = None
        self.out = [np.empty(1 << 16, np.int64) for _ in range(3)]  # offsets, starts, lens of a fetch
        self.checks = np.empty((1 << 12, 3), np.int64)  # CRC range and value of each batch

    def fetch(self, offset, end, wait_ms, stop=None):
        """``(list of Messages, next offset)`` of one fetch from ``offset`` (messages before ``end``, if
        given): empty when nothing arrived within ``wait_ms``."""
        from kafka.errors import for_code
        from kafka.protocol.consumer.fetch import FetchRequest, FetchResponse

        deadline = time.monotonic() + RETRY_FOR_S
        backoff = _BACKOFF_S[0]
        while True:
            failure = None
            try:
                if self.conn is None:
                    self.conn = self.cluster.connect(*self._leader(), self.cluster.timeout_s + wait_ms / 1000)
                part = FetchRequest.FetchTopic.FetchPartition(
                    partition=self.partition,
                    current_leader_epoch=-1,
                    fetch_offset=offset,
                    last_fetched_epoch=-1,
                    log_start_offset=-1,
                    partition_max_bytes=self.partition_bytes,
                )
                request = FetchRequest(
                    replica_id=-1,
                    max_wait_ms=wait_ms,
                    min_bytes=1,
                    max_bytes=self.max_bytes,
                    isolation_level=self.cluster.isolation,
                    session_id=0,
                    session_epoch=-1,
                    topics=[FetchRequest.FetchTopic(topic=self.topic, partitions=[part])],
                    forgotten_topics_data=[],
                    rack_id="",
                )
                response = self.conn.call(request, FetchResponse, FETCH_VERSION)
                [data] = response.responses[0].partitions
                code = response.error_code or data.error_code
            except SourceError:  # refused for good (TLS, SASL, ACLs): retrying cannot help
                raise
            except (OSError, ValueError, struct.error) as exc:  # refused, reset, timed out, cut short
                failure = f"{type(exc).__name__}: {exc}"
            else:
                if code == 0:
                    return self._messages(data.records, offset, end, data.aborted_transactions)
                error = for_code(code)
                if error.__name__ == "OffsetOutOfRangeError":
                    raise SourceError(
                        f"{self.url}: cannot fetch from offset {offset}: the broker holds offsets "
                        f"{data.log_start_offset} to {data.high_watermark} (retention deleted the "
                        f"others?)",
                        source=self.url,
                    )
                if not error.retriable:
                    raise SourceError(
                        f"{self.url}: cannot fetch from offset {offset}: {error.__name__}", source=self.url
                    )
                failure = error.__name__
            self.close()  # find the leader again
            if time.monotonic() > deadline:
                raise SourceError(
                    f"{self.url}: cannot fetch from offset {offset} for {RETRY_FOR_S} s: {failure}", source=self.url
                )
            if stop is None:
                time.sleep(backoff)
            elif stop.wait(backoff):
                return [], offset
            backoff = min(2 * backoff, _BACKOFF_S[1])

    def _leader(self):
        leader = (self.cluster.leaders(self.topic) or {}).get(self.partition)
        if leader is None:
            raise OSError(f"no leader for {self.topic}:{self.partition}")
        return leader

    def _messages(self, records, first, end, aborted=None):
        """The messages of a fetch's record batches: one ``Messages`` per run of uncompressed batches and
        one per compressed batch, without the batches of ``aborted`` transactions (read_committed); and the
        offset to fetch next."""
        buf = np.frombuffer(records or b"", np.uint8)
        last = np.iinfo(np.int64).max if end is None else end
        skips = _aborted_batches(buf, aborted) if aborted else {}
        out, p, next_offset = [], 0, first
        while True:
            limit = min((at for at in skips if at >= p), default=len(buf))  # the kernel stops before a skip
            status, k, n, at, batch_next = kernels.scan_batches(
                buf[:limit], p, next_offset, last, *self.out, self.checks
            )
            if self.check_crcs:
                self._check(buf, self.checks[:n])
            if k:
                out.append(Messages(buf, *(a[:k].copy() for a in self.out)))
            next_offset = max(next_offset, batch_next)
            if status == kernels.DONE and at == limit and limit in skips:
                at, skipped_next = skips[limit]
                next_offset = max(next_offset, skipped_next)
            elif status == kernels.DONE:
                if at == 0 and len(buf):
                    raise SourceError(
                        f"{self.url}: the record batch at offset {first} is larger than "
                        f"max_partition_fetch_bytes ({self.partition_bytes}) or cut short",
                        source=self.url,
                    )
                return out, next_offset
            elif status == kernels.FULL:
                self.out = [np.empty(2 * len(a), np.int64) for a in self.out]
                self.checks = np.empty((2 * len(self.checks), 3), np.int64)
            elif status == kernels.COMPRESSED:
                batch, next_offset = self._decompressed(buf, at, next_offset, last)
                if batch is not None:
                    out.append(batch)
                at = _BatchHeader.at(buf, at).stop
            else:
                what = {
                    kernels.BAD_MAGIC: "a record batch of message format v0/v1",
                    kernels.MALFORMED: "a malformed record batch",
                }[status]
                raise SourceError(
                    f"{self.url}: {what} at offset {struct.unpack_from('>q', buf, at)[0]}", source=self.url
                )
            p = at

    def _check(self, buf, checks):
        import crc32c

        view = memoryview(buf)
        for start, stop, expected in checks.tolist():
            if crc32c.crc32c(view[start:stop]) != expected:
                base = struct.unpack_from(">q", buf, start - 21)[0]  # a CRC covers the batch from its attributes
                raise SourceError(
                    f"{self.url}: the record batch at offset {base} does not match its CRC (corrupt on "
                    f"the broker or in transit)",
                    source=self.url,
                )

    def _decompressed(self, buf, at, first, last):
        """The messages of the compressed batch at ``at`` (None when none is in range), and the next offset."""
        h = _BatchHeader.at(buf, at)
        next_offset = max(first, h.next_offset)
        if h.attributes & _CONTROL:  # transaction markers
            return None, next_offset
        try:
            records = np.frombuffer(_decompress(h.attributes & 7, buf[at + kernels.BATCH_HEADER : h.stop]), np.uint8)
        except Exception as exc:  # noqa: BLE001 - any codec's failure on bad bytes
            raise SourceError(
                f"{self.url}: the compressed record batch at offset {h.base} does not decompress: {exc}",
                source=self.url,
            ) from exc
        arrays = [np.empty(h.count, np.int64) for _ in range(3)]
        k = kernels.walk_records(records, 0, len(records), h.base, h.count, first, last, *arrays, 0)
        if k < 0:
            raise SourceError(f"{self.url}: a malformed compressed record batch at offset {h.base}", source=self.url)
        return (Messages(records, *(a[:k] for a in arrays)) if k else None), next_offset

    def close(self):
        if self.conn is not None:
            self.conn.close()
            self.conn = None


class ConsumerFetch:
    """Fetches through kafka-python's ``KafkaConsumer`` (one object and several copies per message)."""

    def __init__(self, url, brokers, topic, partition, config):
        from kafka import TopicPartition

        self.url = url
        self.tp = TopicPartition(topic, partition)
        self.consumer = consumer(brokers, config)
        self.consumer.assign([self.tp])
        self.sought = None

    def fetch(self, offset, end, wait_ms, stop=None):
        from kafka.errors import KafkaError

        if self.sought != offset:
            self.consumer.seek(self.tp, offset)
        try:
            got = self.consumer.poll(timeout_ms=wait_ms, max_records=1000).get(self.tp, ())
        except KafkaError as exc:
            raise SourceError(f"{self.url}: cannot fetch from offset {offset}: {exc}", source=self.url) from exc
        got = [m for m in got if end is None or m.offset < end]
        if not got:  # the position may still move: past aborted records and markers (read_committed)
            self.sought = self.consumer.position(self.tp)
            return [], self.sought if end is None else min(self.sought, end)
        values = [m.value or b"" for m in got]
        lens = np.fromiter(map(len, values), np.int64, len(values))
        starts = np.zeros(len(values), np.int64)
        np.cumsum(lens[:-1], out=starts[1:])
        self.sought = got[-1].offset + 1
        return (
            [
                Messages(
                    np.frombuffer(b"".join(values), np.uint8),
                    np.fromiter((m.offset for m in got), np.int64, len(got)),
                    starts,
                    lens,
                )
            ],
            self.sought,
        )

    def close(self):
        self.consumer.close()


# fetches large enough that a partition streams at the parser's speed; an offset the broker no longer has
# (retention) is an error, never a silent jump to another offset
_FETCH = {"max_partition_fetch_bytes": 16 << 20, "fetch_max_bytes": 64 << 20, "auto_offset_reset": "none"}


def consumer(brokers, config):
    from kafka import KafkaConsumer
    from kafka.errors import KafkaError

    try:
        return KafkaConsumer(bootstrap_servers=brokers, enable_auto_commit=False, **{**_FETCH, **reveal(config)})
    except KafkaError as exc:
        raise SourceError(f"kafka://{','.join(brokers)}: cannot connect: {exc}", source=",".join(brokers)) from exc
