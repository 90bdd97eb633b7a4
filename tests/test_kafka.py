"""Reading Kafka topics from a real broker (scripts/services.sh): the same samples as the files they came from."""

import contextlib
import hashlib
import json
import logging
import signal
import struct
import subprocess
import sys
import threading
import time
import uuid

import pytest
from kafka import KafkaAdminClient, KafkaProducer
from kafka.admin import NewTopic

import ingest
from ingest import synthetic
from ingest.errors import ConfigError, SourceError

from conftest import ROOT, flatten, read_synthetic, take_with_state, text_groups

PARTITIONS = 3


def _topic(bootstrap, messages, **producer_config):
    """A new topic of PARTITIONS partitions holding ``messages`` (partition, bytes), in order."""
    name = f"it-{uuid.uuid4().hex[:8]}"
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics([NewTopic(name, PARTITIONS, 1)])
    admin.close()
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", **producer_config)
    for partition, value in messages:
        producer.send(name, value=value, partition=partition)
    producer.flush()
    producer.close()
    return name


def _records(data):
    out, pos = [], 0
    while pos < len(data):
        n = struct.unpack_from("<I", data, pos)[0]
        out.append(data[pos : pos + 4 + n])
        pos += 4 + n
    return out


@pytest.fixture(scope="module")
def source(services, tmp_path_factory):
    """``(bootstrap, text topic, pb topic, local text file, local pb file)``."""
    bootstrap = services["KAFKA_BOOTSTRAP"]
    local = tmp_path_factory.mktemp("kafka-src")
    text = local / "s.txt"
    synthetic.write(text, 3000, seed=3)
    pb = local / "s.pb"
    ingest.convert([str(text)], str(pb), log=lambda *_: None)
    groups = text_groups(text.read_bytes())
    # a few groups per message, messages spread over the partitions
    messages = [b"".join(groups[i : i + 3]) for i in range(0, len(groups), 3)]
    text_topic = _topic(bootstrap, [(k % PARTITIONS, m) for k, m in enumerate(messages)])
    records = _records(pb.read_bytes())
    messages = [b"".join(records[i : i + 2]) for i in range(0, len(records), 2)]
    pb_topic = _topic(bootstrap, [(k % PARTITIONS, m) for k, m in enumerate(messages)])
    return bootstrap, text_topic, pb_topic, text, pb


def test_same_samples_as_the_files(source):
    bootstrap, text_topic, pb_topic, text, pb = source
    want = read_synthetic([str(text)])
    assert len(want) == 3000
    assert read_synthetic([f"kafka://{bootstrap}/{text_topic}"], threads=2) == want
    assert read_synthetic([f"kafka://{bootstrap}/{pb_topic}"], "pb") == read_synthetic([str(pb)], "pb")


def test_both_clients_read_the_same(source):
    """client="kafka-python" (KafkaConsumer) gives what the direct fetch path gives."""
    bootstrap, text_topic, pb_topic, text, pb = source
    for topic, file_type, path in ((text_topic, "txt", text), (pb_topic, "pb", pb)):
        reader = synthetic.declare(ingest.DataReader("k", [f"kafka://{bootstrap}/{topic}"], file_type=file_type))
        got = sorted((s["sid"], str(s)) for b in reader.kafka(client="kafka-python").startup() for s in flatten(b))
        assert got == read_synthetic([str(path)], file_type)


@pytest.mark.parametrize("codec", ["gzip", "lz4", "zstd"])
def test_compressed_topics(services, source, codec):
    """Record batches compressed by the producer are decompressed batch by batch (several messages each)."""
    _, _, _, text, _ = source
    groups = text_groups(text.read_bytes())
    topic = _topic(
        services["KAFKA_BOOTSTRAP"],
        [(k % PARTITIONS, g) for k, g in enumerate(groups)],
        compression_type=codec,
        linger_ms=50,
    )
    assert read_synthetic([f"kafka://{services['KAFKA_BOOTSTRAP']}/{topic}"], threads=2) == read_synthetic([str(text)])


def test_shards_cover_every_sample_once(source):
    bootstrap, text_topic, _, text, _ = source
    url = f"kafka://{bootstrap}/{text_topic}"
    shards = [read_synthetic([url], shard=(i, 3)) for i in range(3)]
    assert all(shards) and sorted(s for part in shards for s in part) == read_synthetic([str(text)])
    assert read_synthetic([f"{url}:0,2"]) == sorted(shards[0] + shards[2])  # partitions named in the URL


def test_latest_reads_nothing_already_there(source):
    bootstrap, text_topic, _, _, _ = source
    reader = ingest.DataReader("k", [f"kafka://{bootstrap}/{text_topic}"]).feature("item", "sparse")
    assert reader.kafka(start="latest").startup().read_all() == []


def test_errors(source):
    bootstrap, text_topic, _, _, _ = source
    with pytest.raises(SourceError, match="no topic"):
        ingest.DataReader("k", [f"kafka://{bootstrap}/no-such-topic"]).feature("item", "sparse").startup()
    with pytest.raises(SourceError, match=r"no partition \[7\]"):
        ingest.DataReader("k", [f"kafka://{bootstrap}/{text_topic}:7"]).feature("item", "sparse").startup()
    with pytest.raises(ConfigError, match="group_id"):
        ingest.DataReader("k", []).kafka(group_id="")
    with pytest.raises(ConfigError, match="client='kafka-python'"):
        ingest.DataReader("k", []).kafka(security_protocol="SASL_SSL", sasl_mechanism="GSSAPI")
    with pytest.raises(ConfigError, match="expected 'direct'"):
        ingest.DataReader("k", []).kafka(client="librdkafka")
    forever = ingest.DataReader("k", [f"kafka://{bootstrap}/{text_topic}"]).feature("item", "sparse").threads(2)
    with pytest.raises(ConfigError, match=r"3 partitions and threads\(2\)"):
        forever.kafka(until="forever").startup()


def test_group_membership_refuses_what_needs_fixed_units(source, tmp_path):
    """What cannot be combined with joining a consumer group is a ConfigError naming it, before any thread starts."""
    bootstrap, text_topic, _, text, _ = source
    url = f"kafka://{bootstrap}/{text_topic}"

    def member(paths=(url,), **options):
        return ingest.DataReader("k", list(paths), **options).feature("item", "sparse").kafka(group_id="g")

    refused = {
        "reads files too": member([url, str(text)]),
        "shard": member().shard(0, 2),
        "commits": member(enable_state=True),
        "fixed set of units": member().deterministic(True),
        "name partitions": member([url, f"{url}:1"]),
    }
    for why, reader in refused.items():
        with pytest.raises(ConfigError, match=why):
            reader.startup()
    plain = ingest.DataReader("k", [str(text)], enable_state=True).feature("item", "sparse").startup()
    with pytest.raises(ConfigError, match="commits"):
        member().restore(plain.state()).startup()
    plain.shutdown()
    with pytest.raises(ConfigError, match="fixed set of units"):
        member().epochs(2).startup()
    with pytest.raises(ConfigError, match="commit\\(\\) needs"):
        ingest.DataReader("k", [url]).feature("item", "sparse").startup().commit()


def test_produce_then_read_back(services, tmp_path, capsys):
    """``ingest produce`` writes whole groups (text) or records (pb) per message; reading the topic gives the file."""
    from ingest.cli import main as ingest_main

    bootstrap = services["KAFKA_BOOTSTRAP"]
    text = tmp_path / "p.txt"
    synthetic.write(text, 2000, seed=4)
    pb = tmp_path / "p.pb"
    ingest.convert([str(text)], str(pb), log=lambda *_: None)
    for path, file_type in ((text, "txt"), (pb, "pb")):
        topic = _topic(bootstrap, [])
        url = f"kafka://{bootstrap}/{topic}"
        assert ingest_main.main(["produce", str(path), url, "--message-bytes", "20000", "--json"]) in (0, None)
        summary = json.loads(capsys.readouterr().out)
        assert summary["messages"] > 10 and summary["partitions"] == [0, 1, 2]
        assert read_synthetic([url], file_type, threads=2) == read_synthetic([str(path)], file_type)


def _long_topic(bootstrap, tmp_path):
    """``(text file, topic)``: 20,000 synthetic samples, two groups per message spread over the partitions
    (long enough for a reader to be part-way through it when something happens)."""
    text = tmp_path / "r.txt"
    synthetic.write(text, 20000, seed=5)
    groups = text_groups(text.read_bytes())
    return text, _topic(
        bootstrap, [(k % PARTITIONS, b"".join(groups[i : i + 2])) for k, i in enumerate(range(0, len(groups), 2))]
    )


@pytest.mark.parametrize("membership, down_s", [("fixed", 0), ("group", 0), ("group", 9)])
def test_broker_restart_mid_read_loses_and_repeats_nothing(services, tmp_path, membership, down_s):
    """The broker is stopped and started again (same data) while a reader is part-way through a topic: with its
    partitions fixed, and as the only member of a consumer group (whose coordinator restarts with the broker),
    also with the broker down longer than the group's session (6 s): the restarted coordinator reloads the
    group, and the member goes on in its generation."""
    bootstrap = services["KAFKA_BOOTSTRAP"]
    text, topic = _long_topic(bootstrap, tmp_path)
    reader = ingest.DataReader("k", [f"kafka://{bootstrap}/{topic}"]).batch_size(64).prefetch(1)
    group = (
        {"group_id": f"g-{uuid.uuid4().hex[:8]}", "session_timeout_ms": 6000, "heartbeat_interval_ms": 500}
        if membership == "group"
        else {}
    )
    synthetic.declare(reader).kafka(max_partition_fetch_bytes=64 << 10, fetch_max_bytes=64 << 10, **group)
    got = []
    for i, batch in enumerate(reader.startup()):
        got.extend((s["sid"], str(s)) for s in flatten(batch))
        if i == 3:  # the workers are blocked on full queues, part-way through the partitions
            read_before = reader.stats()["bytes"]
            subprocess.run(
                [str(ROOT / "scripts" / "services.sh"), "restart-kafka", str(down_s)], check=True, capture_output=True
            )
    assert read_before < 0.8 * reader.stats()["bytes"]  # most of the topic was read after the restart
    assert len(got) == 20000
    assert sorted(got) == read_synthetic([str(text)])


# A group member in a process of its own, printing "sample id, digest of the sample" per sample delivered.
_MEMBER = """
import hashlib, sys
sys.path.insert(0, sys.argv[3])
import ingest
from ingest import synthetic
from conftest import flatten
reader = synthetic.declare(ingest.DataReader("m", [sys.argv[1]]).batch_size(64).prefetch(1)).kafka(
    group_id=sys.argv[2], session_timeout_ms=6000, heartbeat_interval_ms=500,
    max_partition_fetch_bytes=64 << 10, fetch_max_bytes=64 << 10)
with reader.startup():
    for batch in reader:
        for s in flatten(batch):
            print(s["sid"].hex(), hashlib.sha1(str(s).encode()).hexdigest())
        sys.stdout.flush()  # blocks while the test does not read: the reader is ahead of the consumer
"""


def test_a_member_whose_session_expired_goes_on_where_it_stopped(services, tmp_path):
    """A member's process stalls (SIGSTOP) for longer than its session: the group drops it, and when it runs
    again kafka-python reports its partitions lost.  It cuts them, drains what it read ahead to the consumer,
    commits as no member (the group is empty meanwhile) and joins again from there: every sample once."""
    bootstrap = services["KAFKA_BOOTSTRAP"]
    text, topic = _long_topic(bootstrap, tmp_path)
    # Unbuffered: communicate() reads the pipe itself, so lines a buffered readline() had read ahead would be lost.
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            _MEMBER,
            f"kafka://{bootstrap}/{topic}",
            f"g-{uuid.uuid4().hex[:8]}",
            str(ROOT / "tests"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        bufsize=0,
    )
    try:
        delivered = [child.stdout.readline().decode() for _ in range(3000)]
        child.send_signal(signal.SIGSTOP)
        time.sleep(10)
        child.send_signal(signal.SIGCONT)
        out, err = (part.decode() for part in child.communicate(timeout=120))
    finally:
        child.kill()
    delivered += out.splitlines(keepends=True)
    assert child.returncode == 0, err
    # the session did expire (a warning): kafka-python reports the partitions lost, or, on a loaded machine, the
    # membership watchdog (12 s without settling) replaces the consumer first; either way the member goes on
    assert "dropped this reader" in err or "the membership did not settle" in err
    expected = sorted(
        f"{sid.hex()} {hashlib.sha1(sample.encode()).hexdigest()}\n" for sid, sample in read_synthetic([str(text)])
    )
    assert sorted(delivered) == expected


def _wrapped_consumers(monkeypatch, wrap):
    """Group members whose real kafka-python consumers go through ``wrap(consumer, n)`` (n: the consumer's
    number, from 0) as they are made; returns the list of them."""
    from ingest.sources.kafka import group as kafka_group

    made = []
    real = kafka_group.consumer

    def consumer(brokers, settings):
        member = real(brokers, settings)
        wrap(member, len(made))
        made.append(member)
        return member

    monkeypatch.setattr(kafka_group, "consumer", consumer)
    return made


def _stalling_consumers(monkeypatch, stall):
    """Group members whose kafka-python consumers report a rebalance that never ends once ``stall(n)`` (n: the
    consumer's number, from 0) says so, as kafka-python 3.0 did when it sent no SyncGroup after a join; the
    group itself stays settled.  The stuck limit is a quarter of the session (2.5 s with 10 s; the drain of the
    stuck consumer's revocation may take 4 sessions, a rebalance's half of one)."""
    from kafka.structs import MemberState
    from ingest.sources.kafka import group as kafka_group

    def wrap(member, n):
        metadata = member.group_metadata
        member.group_metadata = lambda: metadata()._replace(state=MemberState.REBALANCING) if stall(n) else metadata()

    monkeypatch.setattr(kafka_group, "_STUCK_SESSIONS", 0.25)
    return _wrapped_consumers(monkeypatch, wrap)


def test_a_stuck_membership_is_replaced(services, tmp_path, monkeypatch, caplog):
    """A member whose consumer stops settling mid-read closes it (revoking, draining and committing what it
    held) and joins with a new one, which goes on from that commit: every sample once."""
    bootstrap = services["KAFKA_BOOTSTRAP"]
    text, topic = _long_topic(bootstrap, tmp_path)
    stalled = threading.Event()
    made = _stalling_consumers(monkeypatch, lambda n: n == 0 and stalled.is_set())
    reader = ingest.DataReader("k", [f"kafka://{bootstrap}/{topic}"]).batch_size(64).prefetch(1)
    synthetic.declare(reader).kafka(
        group_id=f"g-{uuid.uuid4().hex[:8]}",
        session_timeout_ms=10000,
        heartbeat_interval_ms=500,
        max_partition_fetch_bytes=64 << 10,
        fetch_max_bytes=64 << 10,
    )
    got = []
    with caplog.at_level(logging.WARNING, logger="ingest"), reader.startup():
        for i, batch in enumerate(reader):
            got.extend((s["sid"], str(s)) for s in flatten(batch))
            if i == 3:
                stalled.set()
            time.sleep(0.01)  # the reader stays part-way through the topic until the stuck limit passes
    assert len(made) == 2 and "rejoining with a new consumer" in caplog.text
    assert sorted(got) == read_synthetic([str(text)])


def test_a_membership_that_never_settles_fails_the_reader(services, source, monkeypatch):
    """After 4 consumers in a row whose membership did not settle, the reader fails rather than wait for ever."""
    bootstrap, text_topic, _, _, _ = source
    made = _stalling_consumers(monkeypatch, lambda n: True)
    reader = ingest.DataReader("k", [f"kafka://{bootstrap}/{text_topic}"]).batch_size(50)
    synthetic.declare(reader).kafka(
        group_id=f"g-{uuid.uuid4().hex[:8]}", session_timeout_ms=10000, heartbeat_interval_ms=500
    )
    got = []
    with pytest.raises(SourceError, match="the membership did not settle in 4 consumers in a row"):
        with reader.startup():
            for batch in reader:
                got.extend(s["sid"] for s in flatten(batch))
    assert len(made) == 4
    assert len(got) == len(set(got))  # what was delivered before the failure, once


def test_a_poll_that_fails_while_a_broker_restarts_is_retried(services, tmp_path, monkeypatch):
    """kafka-python 3 lets a failed metadata refresh out of ``poll()`` while the broker restarts (seen in CI):
    the member retries the poll rather than fail the reader, and every sample arrives once."""
    from kafka.errors import KafkaConnectionError

    bootstrap = services["KAFKA_BOOTSTRAP"]
    text, topic = _long_topic(bootstrap, tmp_path)
    failing = threading.Event()
    failures = []

    def wrap(member, n):
        poll = member.poll

        def flaky_poll(**kwargs):
            if failing.is_set() and len(failures) < 5:
                failures.append(1)
                raise KafkaConnectionError("111 ECONNREFUSED")
            return poll(**kwargs)

        member.poll = flaky_poll

    _wrapped_consumers(monkeypatch, wrap)
    reader = ingest.DataReader("k", [f"kafka://{bootstrap}/{topic}"]).batch_size(64).prefetch(1)
    synthetic.declare(reader).kafka(
        group_id=f"g-{uuid.uuid4().hex[:8]}",
        session_timeout_ms=6000,
        heartbeat_interval_ms=500,
        max_partition_fetch_bytes=64 << 10,
        fetch_max_bytes=64 << 10,
    )
    got = []
    with reader.startup():
        for i, batch in enumerate(reader):
            got.extend((s["sid"], str(s)) for s in flatten(batch))
            if i == 3:
                failing.set()
    assert len(failures) == 5
    assert sorted(got) == read_synthetic([str(text)])


def _kafka_reader(url, file_type="txt", **kafka):
    reader = ingest.DataReader("k", [url], file_type=file_type, enable_state=True).batch_size(50).threads(2)
    return synthetic.declare(reader).kafka(**kafka)


def test_restore_mid_partition(source):
    """The state holds (message offset, byte in message) per partition; a restored reader goes on from there."""
    bootstrap, text_topic, pb_topic, text, pb = source
    for topic, file_type, path in ((text_topic, "txt", text), (pb_topic, "pb", pb)):
        url = f"kafka://{bootstrap}/{topic}"
        first, state = take_with_state(_kafka_reader(url, file_type), 7)
        partial = json.loads(state)["partial"]
        assert partial and all(isinstance(pos, list) and len(pos) == 2 for _, _, pos, _ in partial)
        rest, _ = take_with_state(_kafka_reader(url, file_type).restore(state), None)
        assert len(first) == 350
        assert sorted(first + rest) == read_synthetic([str(path)], file_type)


def _member_take(reader, n):
    """Samples of the first ``n`` batches (all when None) of a group member, which commits as it shuts down."""
    got = []
    with reader.startup():
        for i, batch in enumerate(reader):
            got.extend((s["sid"], str(s)) for s in flatten(batch))
            if i + 1 == n:
                break
    return got


def test_group_member_resumes_where_the_last_one_left(source):
    """A reader of a consumer group (group_id on a topic URL) is assigned every partition when alone; it commits
    what it delivered when it leaves, and the next member goes on exactly there; plain Kafka consumers of the
    group see the offsets."""
    from kafka import KafkaConsumer, TopicPartition

    bootstrap, text_topic, _, text, _ = source
    url = f"kafka://{bootstrap}/{text_topic}"
    group = f"g-{uuid.uuid4().hex[:8]}"

    def member():
        return synthetic.declare(ingest.DataReader("k", [url]).batch_size(50).threads(2)).kafka(group_id=group)

    first = _member_take(member(), 9)
    second = _member_take(member(), 4)
    rest = _member_take(member(), None)
    assert len(first) == 450 and len(second) == 200
    assert sorted(first + second + rest) == read_synthetic([str(text)])
    plain = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    tps = [TopicPartition(text_topic, p) for p in range(PARTITIONS)]
    assert {tp: plain.committed(tp) for tp in tps} == plain.end_offsets(tps)  # all read
    plain.close()
    assert _member_take(member(), None) == []


@pytest.mark.parametrize("assignor", ["cooperative-sticky", "range"])
def test_group_members_share_partitions_across_rebalances(services, source, assignor, caplog):
    """Two members of a group read a topic while it is being written: the second one's arrival moves a partition
    (its stream cut at a message boundary, drained and committed before it moves; with the eager range assignor
    every partition is revoked and assigned again), and the first one has more partitions than threads (they
    take turns).  What they deliver, and then what a third member reads from their commits, is every sample
    exactly once; at least once where a member stalled on a loaded machine, was replaced and had its commit
    refused (a warning: what it delivered since its last commit is delivered again, docs/state.md)."""
    from kafka.coordinator.assignors.range import RangePartitionAssignor

    strategy = {"range": {"partition_assignment_strategy": (RangePartitionAssignor,)}}.get(assignor, {})
    bootstrap = services["KAFKA_BOOTSTRAP"]
    _, _, _, text, _ = source
    groups = text_groups(text.read_bytes())
    topic = _topic(bootstrap, [])
    url = f"kafka://{bootstrap}/{topic}"
    group = f"g-{uuid.uuid4().hex[:8]}"
    got = {"a": [], "b": []}
    readers = {}
    lock = threading.Lock()

    def member(name, threads, **kafka):  # a short session: a member whose membership stops settling rejoins sooner
        reader = synthetic.declare(ingest.DataReader(name, [url]).batch_size(50).threads(threads))
        return reader.kafka(group_id=group, heartbeat_interval_ms=200, session_timeout_ms=6000, **strategy, **kafka)

    failed = []

    def live(name, threads):
        try:
            readers[name] = member(name, threads, until="forever").startup()
            with contextlib.suppress(ingest.ReaderClosedError):
                for batch in readers[name]:
                    with lock:
                        got[name].extend((s["sid"], str(s)) for s in flatten(batch))
        except BaseException as exc:  # shown by the assertion below, instead of a thread dying unseen
            failed.append(f"{name}: {exc!r}")

    def total():
        with lock:
            return len(got["a"]) + len(got["b"])

    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    a = threading.Thread(target=live, args=("a", 2), daemon=True)
    a.start()
    b = threading.Thread(target=live, args=("b", 1), daemon=True)
    assert len(groups) > 250
    for m, group_lines in enumerate(groups):  # a group per message, for ~3 s; b joins after ~0.6 s
        producer.send(topic, value=group_lines, partition=m % PARTITIONS)
        if m % 10 == 0:
            producer.flush()
            time.sleep(0.1)
        if m == 60:
            b.start()
        if m > 60 and not got["b"]:  # on a loaded machine the rebalance can take seconds: the writing waits
            time.sleep(0.05)
    producer.close()
    everything = read_synthetic([str(text)])
    deadline = time.monotonic() + 90
    # each member holds back its partial batch, under 50 samples: wait until fewer than 100 are missing
    while total() <= len(everything) - 100 and time.monotonic() < deadline:
        time.sleep(0.2)
    for reader in readers.values():
        reader.shutdown()  # commits what was delivered; a partial batch of each is still held back
    a.join(10)
    b.join(10)
    assert not failed
    assert got["a"] and got["b"]
    rest = _member_take(member("c", 2), None)
    delivered = got["a"] + got["b"] + rest
    if any("may be delivered again" in record.getMessage() for record in caplog.records):
        assert set(delivered) == set(everything)
    else:
        assert len(rest) < 100
        assert sorted(delivered) == everything


def test_until_forever_delivers_messages_as_they_arrive(services):
    """until="forever": the reader waits for new messages and delivers each message's groups without
    waiting for the next one; shutdown() ends it."""
    bootstrap = services["KAFKA_BOOTSTRAP"]
    lines = [f"s{i}|g{i // 2}|a@{i}||1\n".encode() for i in range(40)]
    topic = _topic(bootstrap, [(0, b"".join(lines[:10]))])
    reader = ingest.DataReader("k", [f"kafka://{bootstrap}/{topic}:0"]).feature("a", "sparse", serialized=True)
    reader.batch_size(10).kafka(until="forever").startup()
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    got = []
    with reader:
        for batch in reader:
            got.extend(bytes(s) for s in batch.sample_ids.tolist())
            if len(got) == 10:  # the rest arrives while the reader waits
                for k in range(10, 40, 6):
                    producer.send(topic, value=b"".join(lines[k : k + 6]), partition=0)
                producer.flush()
            if len(got) == 40:
                break
    producer.close()
    assert got == [f"s{i}".encode() for i in range(40)]


def test_until_forever_fills_a_batch_from_every_partition(services):
    """Live partitions keep one batcher: a batch takes samples from both partitions' parse workers, where
    workers cutting their own batches would each wait for more of their own partition."""
    bootstrap = services["KAFKA_BOOTSTRAP"]
    topic = _topic(
        bootstrap, [(p, b"".join(f"p{p}s{i}|p{p}g{i}|a@{i}||1\n".encode() for i in range(5))) for p in (0, 1)]
    )
    reader = ingest.DataReader("k", [f"kafka://{bootstrap}/{topic}:0,1"]).feature("a", "sparse", serialized=True)
    reader.batch_size(10).threads(2).kafka(until="forever").startup()
    got = []
    with reader:
        taker = threading.Thread(target=lambda: got.append(next(reader)), daemon=True)
        taker.start()
        taker.join(30)  # a batch each worker waits to fill alone would never come
    assert got, "no batch from the two partitions' 10 samples"
    assert sorted(bytes(s) for s in got[0].sample_ids.tolist()) == sorted(
        f"p{p}s{i}".encode() for p in (0, 1) for i in range(5)
    )


def test_errors_name_the_message(services):
    bootstrap = services["KAFKA_BOOTSTRAP"]
    topic = _topic(bootstrap, [(0, b"a|g|x@1||1\n"), (0, b"b|g|x@1||1\nc|h|x@oops||1\n")])
    reader = ingest.DataReader("k", [f"kafka://{bootstrap}/{topic}:0"]).feature("x", "sparse")
    with pytest.raises(ingest.TextParseError) as info:
        reader.startup().read_all()
    assert f"kafka://{bootstrap}/{topic}:0 (message offset 1, byte 17 of the message)" in str(info.value)
    assert info.value.line == 3


def test_convert_to_a_topic(services, tmp_path, capsys):
    """``ingest convert FILE kafka://.../topic --to pb``: the topic then reads as the converted file."""
    from ingest.cli import main as ingest_main

    bootstrap = services["KAFKA_BOOTSTRAP"]
    text = tmp_path / "c.txt"
    synthetic.write(text, 1500, seed=6)
    topic = _topic(bootstrap, [])
    url = f"kafka://{bootstrap}/{topic}"
    assert ingest_main.main(["convert", str(text), url, "--to", "pb", "--aux", "auto"]) in (0, None)
    capsys.readouterr()
    local = tmp_path / "c.pb"
    aux = ingest.convert([str(text)], str(local), aux="auto", log=lambda *_: None)["aux"]
    assert aux
    assert read_synthetic([url], "pb", aux=aux) == read_synthetic([str(local)], "pb", aux=aux)
    assert len(read_synthetic([url], "pb", aux=aux)) == 1500


def test_offsets_gone_from_the_broker_are_an_error(services):
    """A restored position the broker deleted (retention) is a SourceError naming it, not a silent jump."""
    from kafka.structs import TopicPartition as TP

    bootstrap = services["KAFKA_BOOTSTRAP"]
    lines = [f"s{i}|g{i}|a@{i}||1\n".encode() for i in range(30)]
    topic = _topic(bootstrap, [(0, line) for line in lines])
    url = f"kafka://{bootstrap}/{topic}:0"
    reader = ingest.DataReader("k", [url], enable_state=True).feature("a", "sparse").batch_size(5)
    first, state = take_with_state(reader, 1)
    assert [s for s, _ in first] == [f"s{i}".encode() for i in range(5)]
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.delete_records({TP(topic, 0): 20})
    admin.close()
    again = ingest.DataReader("k", [url]).feature("a", "sparse").batch_size(5).restore(state)
    with pytest.raises(SourceError, match=f"{topic}:0: cannot fetch from offset 5"):
        again.startup().read_all()


def test_a_lease_cut_before_reading_ends_where_it_began():
    """A group member's lease that resumed inside a message (rows of it delivered) and was cut before reading
    on ends at that resume point, so its commit and its continuation keep the rows; once it read on, it ends at
    the message boundary it reached."""
    from kafka import TopicPartition
    from ingest.sources.kafka import KafkaOptions, partition_unit
    from ingest.sources.kafka.group import Lease

    tp = TopicPartition("t", 2)
    resume = ((102, 0), 7)
    lease = Lease(None, tp, 1)
    lease.unit = partition_unit(0, "b:9092", tp, 102, None, KafkaOptions(), resume)
    lease.end = 102
    assert lease.resume_at_end == resume
    lease.end = 103
    assert lease.resume_at_end is None
    plain = Lease(None, tp, 1)
    plain.unit = partition_unit(0, "b:9092", tp, 102, None, KafkaOptions())
    plain.end = 102
    assert plain.resume_at_end is None


def test_bench_and_inspect_read_a_topic_as_they_read_files(source, capsys):
    """kafka:// URLs are sources like any other in the commands: features found, every sample read."""
    from ingest.cli import bench, main as ingest_main

    bootstrap, text_topic, pb_topic, text, pb = source
    for topic, fmt in ((text_topic, "txt"), (pb_topic, "pb")):
        url = f"kafka://{bootstrap}/{topic}"
        assert bench.main([url, "--format", fmt, "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["samples"] == 3000
        assert ingest_main.main(["inspect", url, "--format", fmt, "-n", "1", "--json"]) == 0
        info = json.loads(capsys.readouterr().out)
        local = ingest.inspect(str(text if fmt == "txt" else pb), 1)
        assert info["files"] == PARTITIONS and info["samples"] == 3000
        assert info["tables"] == local["tables"] and info["label_count"] == local["label_count"]
    assert ingest_main.main(["inspect", f"kafka://{bootstrap}/{text_topic}"]) == 2
    assert "cannot tell the sample format from the name; give --format" in capsys.readouterr().err
