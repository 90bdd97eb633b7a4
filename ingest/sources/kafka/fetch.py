"""Fetching one partition's messages, as runs of values in one buffer (``Messages``).

``DirectFetch`` (the default) sends Fetch requests to the partition's leader over a socket of its
own: the response lands in one buffer (``recv_into``), kafka-python's protocol classes encode the
request and decode the response fields, and the record batches are walked by a numba kernel
(``native/kafka.py``) with no Python object per message; CRCs are checked per batch by ``crc32c``.
kafka-python's ``KafkaConsumer`` makes a Python object per message and copies each value about five
times: on a 2-core machine it moved 110-200 MB/s where this moves 1.1-1.6 GB/s (docs/decisions.md).

``ConsumerFetch`` goes through ``KafkaConsumer`` (``kafka(client="kafka-python")``): for what the
direct path does not speak (TLS, SASL, ``read_committed``).
"""

import socket
import struct
import time
from typing import NamedTuple

import numpy as np

from ..._native import kafka as kernels
from ...errors import ConfigError, SourceError

__all__ = ["Messages", "Cluster", "DirectFetch", "ConsumerFetch", "fetcher", "consumer"]

FETCH_VERSION = 12  # the last Fetch that names topics (13+ use topic ids); Kafka 2.7 to 4.x
METADATA_VERSION = 8
RETRY_FOR_S = 120  # how long an unreachable leader is retried (a broker restart) before a SourceError
_BACKOFF_S = (0.05, 1.0)


class _BatchHeader(NamedTuple):
    """The fields of a record batch's header that the Python side needs (for compressed batches and errors)."""

    base: int
    stop: int  # the byte after the batch
    attributes: int
    next_offset: int  # base + last offset delta + 1
    count: int  # type: ignore[assignment]  # a field, not tuple.count

    @classmethod
    def at(cls, buf, p):
        base, length = struct.unpack_from(">qi", buf, p)
        attributes, last_delta = struct.unpack_from(">hi", buf, p + 21)
        count = struct.unpack_from(">i", buf, p + 57)[0]
        return cls(base, p + 12 + length, attributes, base + last_delta + 1, count)


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
    protocol = config.get("security_protocol", "PLAINTEXT")
    if protocol != "PLAINTEXT" or config.get("isolation_level", "read_uncommitted") != "read_uncommitted":
        raise ConfigError(
            f"kafka(security_protocol={protocol!r}, isolation_level="
            f"{config.get('isolation_level', 'read_uncommitted')!r}): the direct client speaks "
            f"PLAINTEXT and read_uncommitted only; pass client='kafka-python' for the others"
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


class _Connection:
    """One socket to a broker: framed requests out, framed responses into a reused buffer."""

    def __init__(self, host, port, timeout_s, client_id):
        self.sock = socket.create_connection((host, port), timeout=timeout_s)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.client_id = client_id
        self.correlation = 0
        self.buf = np.empty(1 << 20, np.uint8)

    def call(self, request, response_class, version):
        """The decoded response to ``request`` (its bytes are in ``buf`` until the next call)."""
        self.correlation += 1
        request.API_VERSION = version
        request.with_header(correlation_id=self.correlation, client_id=self.client_id)
        self.sock.sendall(request.encode(framed=True, header=True))
        size = struct.unpack(">i", self._receive(4))[0]
        if len(self.buf) < size:
            self.buf = np.empty(max(size, 2 * len(self.buf)), np.uint8)
        data = memoryview(self.buf)[:size]
        self._receive_into(data)
        if struct.unpack_from(">i", data)[0] != self.correlation:
            raise OSError("response out of order")
        pos = 4
        if response_class.flexible_version_q(version):  # response header v1 ends with its tagged fields
            if data[pos] != 0:
                raise OSError("tagged fields in a response header (none are defined)")
            pos += 1
        return response_class.decode(data[pos:], version=version)

    def _receive(self, n):
        out = bytearray(n)
        self._receive_into(memoryview(out))
        return out

    def _receive_into(self, view):
        got = 0
        while got < len(view):
            k = self.sock.recv_into(view[got:])
            if k == 0:
                raise OSError("connection closed by the broker")
            got += k

    def close(self):
        self.sock.close()


class Cluster:
    """What the brokers say of a topic, asked over ingest's own connections: partitions and their leaders,
    and offsets.  Its methods are named as ``KafkaConsumer``'s, which plans the units of the
    kafka-python client (and spends ~0.1 s probing the broker's API versions first)."""

    def __init__(self, brokers, config):
        self.brokers = brokers
        self.timeout_s = config.get("request_timeout_ms", 30000) / 1000
        self.client_id = config.get("client_id", "ingest")

    def connect(self, host, port, timeout_s=None):
        return _Connection(host, port, timeout_s or self.timeout_s, self.client_id)

    def leaders(self, topic):
        """``{partition: (host, port) of its leader, or None}``; None when the brokers know no such topic.
        OSError when no broker answers."""
        from kafka.protocol.metadata import MetadataRequest, MetadataResponse

        meta = self._any_broker(
            lambda conn: conn.call(
                MetadataRequest(
                    topics=[MetadataRequest.MetadataRequestTopic(name=topic)], allow_auto_topic_creation=False
                ),
                MetadataResponse,
                METADATA_VERSION,
            )
        )
        nodes = {b.node_id: (b.host, b.port) for b in meta.brokers}
        for t in meta.topics:
            if t.name == topic and t.error_code == 0:
                return {p.partition_index: nodes.get(p.leader_id) if p.error_code == 0 else None for p in t.partitions}
        return None

    def partitions_for_topic(self, topic):
        try:
            leaders = self.leaders(topic)
        except OSError as exc:
            raise SourceError(
                f"kafka://{','.join(self.brokers)}: cannot connect: {exc}", source=",".join(self.brokers)
            ) from exc
        return set(leaders) if leaders else None

    def _list(self, tps, timestamp):
        """``{tp: offset or None}``: the first offset at or after ``timestamp`` (-2: earliest, -1: latest);
        one request per leader."""
        from kafka import TopicPartition
        from kafka.errors import for_code
        from kafka.protocol.consumer.offsets import ListOffsetsRequest, ListOffsetsResponse

        by_leader = {}
        for topic in {tp.topic for tp in tps}:
            leaders = self.leaders(topic) or {}
            for tp in tps:
                if tp.topic == topic:
                    by_leader.setdefault(leaders.get(tp.partition), []).append(tp)
        if None in by_leader:
            tp = by_leader[None][0]
            raise SourceError(f"kafka://{','.join(self.brokers)}/{tp.topic}:{tp.partition}: no leader", source=tp.topic)
        out = {}
        for leader, asked in by_leader.items():
            topics = [
                ListOffsetsRequest.ListOffsetsTopic(
                    name=topic,
                    partitions=[
                        ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition(
                            partition_index=tp.partition, current_leader_epoch=-1, timestamp=timestamp
                        )
                        for tp in asked
                        if tp.topic == topic
                    ],
                )
                for topic in {tp.topic for tp in asked}
            ]
            got = self._ask(
                leader, ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=topics), ListOffsetsResponse, 4
            )
            for t in got.topics:
                for answer in t.partitions:
                    if answer.error_code:
                        raise SourceError(
                            f"kafka://{','.join(self.brokers)}/{t.name}:{answer.partition_index}: "
                            f"cannot list offsets: {for_code(answer.error_code).__name__}",
                            source=t.name,
                        )
                    out[TopicPartition(t.name, answer.partition_index)] = answer.offset if answer.offset >= 0 else None
        return out

    def end_offsets(self, tps):
        return self._list(tps, -1)

    def beginning_offsets(self, tps):
        return self._list(tps, -2)

    def offsets_for_times(self, times):
        from kafka.structs import OffsetAndTimestamp

        out = {}
        for t in set(times.values()):
            got = self._list([tp for tp in times if times[tp] == t], t)
            out.update({tp: None if o is None else OffsetAndTimestamp(o, t, -1) for tp, o in got.items()})
        return out

    def _ask(self, address, request, response_class, version):
        """The response of the broker at ``(host, port)`` to one request, over a connection of its own."""
        conn = self.connect(*address)
        try:
            return conn.call(request, response_class, version)
        finally:
            conn.close()

    def _any_broker(self, ask):
        """``ask(connection)`` answered by the first broker that takes a connection; OSError when none does."""
        problems = []
        for broker in self.brokers:
            host, _, port = broker.rpartition(":")
            try:
                conn = self.connect(host or broker, int(port or 9092))
            except OSError as exc:
                problems.append(f"{broker}: {exc}")
                continue
            try:
                return ask(conn)
            finally:
                conn.close()
        raise OSError("; ".join(problems))

    def commit(self, group, generation, member_id, offsets):
        """Commit ``{tp: (offset, metadata)}`` for the member ``member_id`` of ``generation`` of the consumer
        group: over a connection of ours, so that a rebalance listener (which runs on kafka-python's IO
        thread, where its blocking calls are refused) can commit before its partitions move.  Returns the
        name of a retriable error (the group is rebalancing, the coordinator moved), or None once committed."""
        from kafka.errors import for_code
        from kafka.protocol.consumer.group import OffsetCommitRequest, OffsetCommitResponse
        from kafka.protocol.metadata.find_coordinator import FindCoordinatorRequest, FindCoordinatorResponse

        found = self._any_broker(
            lambda conn: conn.call(
                FindCoordinatorRequest(key_type=0, coordinator_keys=[group]), FindCoordinatorResponse, 4
            ).coordinators[0]
        )
        if found.error_code:
            return for_code(found.error_code).__name__
        topic_class = OffsetCommitRequest.OffsetCommitRequestTopic
        topics = [
            topic_class(
                name=topic,
                partitions=[
                    topic_class.OffsetCommitRequestPartition(
                        partition_index=tp.partition,
                        committed_offset=offset,
                        committed_leader_epoch=-1,
                        committed_metadata=meta,
                    )
                    for tp, (offset, meta) in offsets.items()
                    if tp.topic == topic
                ],
            )
            for topic in sorted({tp.topic for tp in offsets})
        ]
        got = self._ask(
            (found.host, found.port),
            OffsetCommitRequest(
                group_id=group,
                generation_id_or_member_epoch=generation,
                member_id=member_id,
                group_instance_id=None,
                topics=topics,
            ),
            OffsetCommitResponse,
            8,
        )
        for t in got.topics:
            for answer in t.partitions:
                if answer.error_code:
                    error = for_code(answer.error_code)
                    if error.retriable or error.__name__ in ("RebalanceInProgressError", "IllegalGenerationError"):
                        return error.__name__
                    raise SourceError(
                        f"kafka://{','.join(self.brokers)}/{t.name}:{answer.partition_index}: cannot "
                        f"commit for group {group!r}: {error.__name__}",
                        source=t.name,
                    )
        return None

    def close(self):
        pass


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
                    isolation_level=0,
                    session_id=0,
                    session_epoch=-1,
                    topics=[FetchRequest.FetchTopic(topic=self.topic, partitions=[part])],
                    forgotten_topics_data=[],
                    rack_id="",
                )
                response = self.conn.call(request, FetchResponse, FETCH_VERSION)
                [data] = response.responses[0].partitions
                code = response.error_code or data.error_code
            except (OSError, ValueError, struct.error) as exc:  # refused, reset, timed out, cut short
                failure = f"{type(exc).__name__}: {exc}"
            else:
                if code == 0:
                    return self._messages(data.records, offset, end)
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

    def _messages(self, records, first, end):
        """The messages of a fetch's record batches: one ``Messages`` per run of uncompressed batches and
        one per compressed batch; and the offset to fetch next."""
        buf = np.frombuffer(records or b"", np.uint8)
        last = np.iinfo(np.int64).max if end is None else end
        out, p, next_offset = [], 0, first
        while True:
            status, k, n, at, batch_next = kernels.scan_batches(buf, p, next_offset, last, *self.out, self.checks)
            if self.check_crcs:
                self._check(buf, self.checks[:n])
            if k:
                out.append(Messages(buf, *(a[:k].copy() for a in self.out)))
            next_offset = max(next_offset, batch_next)
            if status == kernels.DONE:
                if at == 0 and len(buf):
                    raise SourceError(
                        f"{self.url}: the record batch at offset {first} is larger than "
                        f"max_partition_fetch_bytes ({self.partition_bytes}) or cut short",
                        source=self.url,
                    )
                return out, next_offset
            if status == kernels.FULL:
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
        if h.attributes & 0x20:  # transaction markers
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
        if not got:
            self.sought = offset
            return [], offset
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
        return KafkaConsumer(bootstrap_servers=brokers, enable_auto_commit=False, **{**_FETCH, **config})
    except KafkaError as exc:
        raise SourceError(f"kafka://{','.join(brokers)}: cannot connect: {exc}", source=",".join(brokers)) from exc
