"""Ingest's own connections to Kafka brokers (TLS and SASL as configured, security.py) and the requests
that plan a read and commit a consumer group's positions: metadata (partitions, leaders), offsets, commits.

kafka-python's protocol classes encode the requests and decode the responses.
"""

import socket
import struct
import time

import numpy as np

from ...errors import SourceError
from .security import SECURITY_SETTINGS, secure, tls_context

__all__ = ["Cluster", "ISOLATION"]

METADATA_VERSION = 8
ISOLATION = {"read_uncommitted": 0, "read_committed": 1}  # the isolation_level of Fetch and ListOffsets
_TOPIC_AUTHORIZATION_FAILED = 29


class _Connection:
    """One socket to a broker, TLS and SASL as ``config`` says (``tls``: its SSLContext): framed requests
    out, framed responses into a reused buffer."""

    def __init__(self, host, port, timeout_s, client_id, tls=None, config=None):
        self.sock = socket.create_connection((host, port), timeout=timeout_s)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.client_id = client_id
        self.correlation = 0
        self.buf = np.empty(1 << 20, np.uint8)
        if tls is not None or config:
            try:
                secure(self, host, port, tls, config or {})
            except BaseException:
                self.sock.close()
                raise

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


class _LeaderNotReady(Exception):
    """A partition's leader is not elected yet or moved: ``error``, the ``SourceError`` if it lasts."""

    def __init__(self, error):
        super().__init__(str(error))
        self.error = error


class Cluster:
    """What the brokers say of a topic, asked over ingest's own connections: partitions and their leaders,
    and offsets.  Its methods are named as ``KafkaConsumer``'s, which plans the units of the
    kafka-python client (and spends ~0.1 s probing the broker's API versions first)."""

    def __init__(self, brokers, config):
        self.brokers = brokers
        self.timeout_s = config.get("request_timeout_ms", 30000) / 1000
        self.client_id = config.get("client_id", "ingest")
        self.isolation = ISOLATION[config.get("isolation_level", "read_uncommitted")]
        # ssl_context: an SSLContext of the caller's, as kafka-python takes it (it does not pickle)
        self.security = {k: v for k, v in config.items() if k in SECURITY_SETTINGS or k == "ssl_context"}
        self.tls = tls_context(self.security)

    def connect(self, host, port, timeout_s=None):
        return _Connection(host, port, timeout_s or self.timeout_s, self.client_id, self.tls, self.security)

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
            if t.name == topic and t.error_code == _TOPIC_AUTHORIZATION_FAILED:
                raise SourceError(
                    f"kafka://{','.join(self.brokers)}/{topic}: the broker does not authorize this client for "
                    f"topic {topic!r} (TopicAuthorizationFailedError; ACLs)",
                    source=topic,
                )
            if t.name == topic and t.error_code == 0:
                return {p.partition_index: nodes.get(p.leader_id) if p.error_code == 0 else None for p in t.partitions}
        return None

    def partitions_for_topic(self, topic):
        try:
            leaders = self.leaders(topic)
        except SourceError:  # refused for good (TLS, SASL, ACLs): already says which broker and why
            raise
        except OSError as exc:
            raise SourceError(
                f"kafka://{','.join(self.brokers)}: cannot connect: {exc}", source=",".join(self.brokers)
            ) from exc
        return set(leaders) if leaders else None

    def _list(self, tps, timestamp):
        """``{tp: offset or None}``: the first offset at or after ``timestamp`` (-2: earliest, -1: latest);
        one request per leader.  A partition without a leader yet, or whose leader moved (a retriable error:
        a topic just created, a broker restarting), is asked again with fresh leaders, backing off, for up to
        ``request_timeout_ms``; then its error is raised."""
        deadline = time.monotonic() + self.timeout_s
        wait = 0.05
        while True:
            try:
                return self._list_once(tps, timestamp)
            except _LeaderNotReady as exc:
                if time.monotonic() + wait > deadline:
                    raise exc.error from None
                time.sleep(wait)
                wait = min(2 * wait, 1.0)

    def _list_once(self, tps, timestamp):
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
            url = f"kafka://{','.join(self.brokers)}/{tp.topic}:{tp.partition}"
            raise _LeaderNotReady(SourceError(f"{url}: no leader", source=tp.topic))
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
                leader,
                ListOffsetsRequest(replica_id=-1, isolation_level=self.isolation, topics=topics),
                ListOffsetsResponse,
                4,
            )
            for t in got.topics:
                for answer in t.partitions:
                    if answer.error_code:
                        error = for_code(answer.error_code)
                        failed = SourceError(
                            f"kafka://{','.join(self.brokers)}/{t.name}:{answer.partition_index}: "
                            f"cannot list offsets: {error.__name__}",
                            source=t.name,
                        )
                        raise _LeaderNotReady(failed) if error.retriable else failed
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
            except SourceError:
                raise
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
