"""Kafka over TLS and SASL with the direct client, against the secured listeners of scripts/services.sh: the same
samples as the files, credentials from code, the environment or a file, failures that say which broker and why
(quickly, once), and a password that shows nowhere."""

import json
import logging
import pickle
import subprocess
import time
import uuid

import pytest
from kafka import KafkaAdminClient
from kafka.admin import NewTopic

import ingest
from ingest import synthetic
from ingest.errors import ConfigError, SourceError
from ingest.produce import produce

from conftest import ROOT, flatten, make_reader, read_synthetic, take_with_state, text_groups

PARTITIONS = 3


def _sasl(secure, mechanism="SCRAM-SHA-512", protocol="SASL_SSL", **changes):
    """Settings of the SASL user, kafka-python's names."""
    settings = {
        "security_protocol": protocol,
        "sasl_mechanism": mechanism,
        "sasl_plain_username": secure["KAFKA_SASL_USER"],
        "sasl_plain_password": secure["KAFKA_SASL_PASSWORD"],
    }
    if protocol == "SASL_SSL":
        settings["ssl_cafile"] = secure["KAFKA_CA_FILE"]
    return {**settings, **changes}


def _tls(secure):
    """Settings of the SSL listener: the client certificate is the SASL user."""
    return {
        "security_protocol": "SSL",
        "ssl_cafile": secure["KAFKA_CA_FILE"],
        "ssl_certfile": secure["KAFKA_SSL_CERTFILE"],
        "ssl_keyfile": secure["KAFKA_SSL_KEYFILE"],
    }


def _url(secure, topic, listener="KAFKA_SECURE_BOOTSTRAP"):
    return f"kafka://{secure[listener]}/{topic}"


def _new_topic(secure, partitions=PARTITIONS):
    """A new topic the SASL user may use, created by that user over SASL_SSL (the ACLs allow it)."""
    name = f"{secure['KAFKA_SECURE_TOPIC_PREFIX']}{uuid.uuid4().hex[:8]}"
    admin = KafkaAdminClient(bootstrap_servers=secure["KAFKA_SECURE_BOOTSTRAP"], **_sasl(secure))
    admin.create_topics([NewTopic(name, partitions, 1)])
    admin.close()
    return name


@pytest.fixture(scope="module")
def secure_topic(secure_kafka, tmp_path_factory):
    """``(topic, text file)``: 3000 synthetic samples sent by ``ingest.produce`` over SASL_SSL (SCRAM-SHA-512)."""
    text = tmp_path_factory.mktemp("secure") / "s.txt"
    synthetic.write(text, 3000, seed=7)
    topic = _new_topic(secure_kafka)
    produce([str(text)], _url(secure_kafka, topic), message_bytes=20000, log=lambda *_: None, **_sasl(secure_kafka))
    return topic, text


def _samples(url, file_type="txt", **kafka):
    """Every sample of a topic, as ``read_synthetic`` gives those of a file, read with these kafka() settings."""
    reader = make_reader([url], file_type=file_type, batch_size=(256,), threads=(2,))
    return sorted((s["sid"], str(s)) for b in synthetic.declare(reader).kafka(**kafka).startup() for s in flatten(b))


def _reader(url, state=True, **kafka):
    reader = ingest.DataReader("k", [url], enable_state=state).batch_size(50).threads(2)
    return synthetic.declare(reader).kafka(**kafka)


@pytest.mark.parametrize(
    "listener, protocol, mechanism",
    [
        ("KAFKA_SECURE_BOOTSTRAP", "SASL_SSL", "SCRAM-SHA-512"),
        ("KAFKA_SECURE_BOOTSTRAP", "SASL_SSL", "SCRAM-SHA-256"),
        ("KAFKA_SECURE_BOOTSTRAP", "SASL_SSL", "PLAIN"),
        ("KAFKA_SASL_BOOTSTRAP", "SASL_PLAINTEXT", "SCRAM-SHA-512"),
        ("KAFKA_SSL_BOOTSTRAP", "SSL", None),
    ],
)
def test_same_samples_over_every_protocol_as_from_the_file(secure_kafka, secure_topic, listener, protocol, mechanism):
    topic, text = secure_topic
    kafka = _tls(secure_kafka) if protocol == "SSL" else _sasl(secure_kafka, mechanism, protocol)
    assert _samples(_url(secure_kafka, topic, listener), **kafka) == read_synthetic([str(text)])


def test_ssl_check_hostname_false_takes_a_host_the_certificate_does_not_name(secure_kafka, secure_topic):
    """The certificate still has to be the CA's: only the name goes unchecked (as kafka-python's setting)."""
    topic, text = secure_topic
    address = "127.0.0.1:" + secure_kafka["KAFKA_SECURE_BOOTSTRAP"].rpartition(":")[2]
    url = f"kafka://{address}/{topic}"
    assert _samples(url, **_sasl(secure_kafka, ssl_check_hostname=False)) == read_synthetic([str(text)])
    with pytest.raises(SourceError, match="certificate verify failed|does not verify"):
        _samples(url, **_sasl(secure_kafka, ssl_check_hostname=False, ssl_cafile=secure_kafka["KAFKA_SSL_CERTFILE"]))


def test_an_ssl_context_of_the_callers_is_used_as_is(secure_kafka, secure_topic):
    import ssl

    topic, text = secure_topic
    context = ssl.create_default_context(cafile=secure_kafka["KAFKA_CA_FILE"])
    settings = {k: v for k, v in _sasl(secure_kafka).items() if k != "ssl_cafile"}
    assert _samples(_url(secure_kafka, topic), ssl_context=context, **settings) == read_synthetic([str(text)])


def test_same_samples_from_the_plain_listener_hdfs_and_the_file(services, secure_topic):
    from ingest.sources.filesystems import url_to_fs

    topic, text = secure_topic
    want = read_synthetic([str(text)])
    assert len(want) == 3000
    assert read_synthetic([f"kafka://{services['KAFKA_BOOTSTRAP']}/{topic}"], threads=2) == want
    hdfs = f"{services['HDFS_URL']}/secure-kafka/{uuid.uuid4().hex[:8]}.txt"
    fs, path = url_to_fs(hdfs)
    fs.put(str(text), path)
    assert read_synthetic([hdfs], threads=2) == want


def test_fixed_partitions_resume_exactly(secure_kafka, secure_topic):
    """Partitions named in the URL, a state taken mid-partition, a reader restored from it: every sample once."""
    topic, text = secure_topic
    url = _url(secure_kafka, f"{topic}:0,1,2")
    first, state = take_with_state(_reader(url, **_sasl(secure_kafka)), 7)
    rest, _ = take_with_state(_reader(url, **_sasl(secure_kafka)).restore(state), None)
    assert len(first) == 350
    assert sorted(first + rest) == read_synthetic([str(text)])


def test_group_members_resume_where_the_last_left(secure_kafka, secure_topic):
    """A consumer group's member (its membership kafka-python's, over SASL_SSL too) commits what it delivered; the
    next member goes on exactly there."""
    topic, text = secure_topic
    group = f"{secure_kafka['KAFKA_SECURE_TOPIC_PREFIX']}g-{uuid.uuid4().hex[:8]}"

    def member(n):
        reader = synthetic.declare(ingest.DataReader("k", [_url(secure_kafka, topic)]).batch_size(50).threads(2))
        got = []
        with reader.kafka(group_id=group, **_sasl(secure_kafka)).startup():
            for i, batch in enumerate(reader):
                got.extend((s["sid"], str(s)) for s in flatten(batch))
                if i + 1 == n:
                    break
        return got

    first = member(9)
    rest = member(None)
    assert len(first) == 450
    assert sorted(first + rest) == read_synthetic([str(text)])


def test_broker_restart_mid_read_loses_and_repeats_nothing(secure_kafka, tmp_path):
    """Reconnecting after a broker restart authenticates again (SASL_SSL, SCRAM) and goes on where it was."""
    text = tmp_path / "r.txt"
    synthetic.write(text, 20000, seed=10)
    topic = _new_topic(secure_kafka)
    url = _url(secure_kafka, topic)
    produce([str(text)], url, message_bytes=20000, log=lambda *_: None, **_sasl(secure_kafka))
    reader = synthetic.declare(ingest.DataReader("k", [url]).batch_size(64).prefetch(1))
    reader.kafka(max_partition_fetch_bytes=64 << 10, fetch_max_bytes=64 << 10, **_sasl(secure_kafka))
    got = []
    for i, batch in enumerate(reader.startup()):
        got.extend((s["sid"], str(s)) for s in flatten(batch))
        if i == 3:  # the workers are blocked on full queues, part-way through the partitions
            read_before = reader.stats()["bytes"]
            script = str(ROOT / "scripts" / "services.sh")
            subprocess.run([script, "restart-kafka"], check=True, capture_output=True)
    assert read_before < 0.8 * reader.stats()["bytes"]
    assert sorted(got) == read_synthetic([str(text)])


def test_produce_and_convert_take_credentials_from_the_environment(secure_kafka, tmp_path, monkeypatch, capsys):
    """``ingest produce`` and ``ingest convert ... kafka://`` (which has no security options of its own) find the
    settings in INGEST_KAFKA_* variables, and so does a reader given none in code."""
    from ingest.cli import main as ingest_main

    for name, value in _sasl(secure_kafka, "SCRAM-SHA-256").items():
        monkeypatch.setenv(f"INGEST_KAFKA_{name.upper()}", value)
    text = tmp_path / "p.txt"
    synthetic.write(text, 500, seed=8)  # convert sends 1 MiB messages, the broker's largest
    produced, converted = _new_topic(secure_kafka), _new_topic(secure_kafka)
    args = ["produce", str(text), _url(secure_kafka, produced), "--message-bytes", "20000", "--json"]
    assert ingest_main.main(args) in (0, None)
    assert json.loads(capsys.readouterr().out)["partitions"] == [0, 1, 2]
    assert ingest_main.main(["convert", str(text), _url(secure_kafka, converted)]) in (0, None)
    want = read_synthetic([str(text)])
    assert _samples(_url(secure_kafka, produced)) == want
    assert _samples(_url(secure_kafka, converted), "pb") == want


def test_credentials_from_a_file(secure_kafka, secure_topic, tmp_path, monkeypatch):
    """A file of setting=value lines, named by security_file= or INGEST_KAFKA_SECURITY_FILE; arguments win."""
    topic, text = secure_topic
    path = tmp_path / "kafka.properties"
    lines = [
        f"{k.replace('_', '.')}={v}" if k == "security_protocol" else f"{k}={v}" for k, v in _sasl(secure_kafka).items()
    ]
    path.write_text("# the SASL user\n\n" + "\n".join(lines) + "\n")
    want = read_synthetic([str(text)])
    assert _samples(_url(secure_kafka, topic), security_file=str(path)) == want
    monkeypatch.setenv("INGEST_KAFKA_SECURITY_FILE", str(path))
    assert _samples(_url(secure_kafka, topic)) == want
    with pytest.raises(SourceError, match="authentication of user 'ingest' failed"):
        _samples(_url(secure_kafka, topic), sasl_plain_password="not-it")
    path.write_text("sasl_plain_pasword=x\n")
    with pytest.raises(ConfigError, match=r"line 1: .*'sasl_plain_pasword'"):
        ingest.DataReader("k", []).kafka(security_file=str(path))


WRONG = "Wr0ng-pa55word-" + uuid.uuid4().hex


def _failures(secure, topic):
    """``{case: (url, settings, what the error says)}`` of every way the secured listeners refuse a client."""
    bootstrap = secure["KAFKA_SECURE_BOOTSTRAP"]
    address = "127.0.0.1:" + bootstrap.rpartition(":")[2]
    forbidden = f"not-{secure['KAFKA_SECURE_TOPIC_PREFIX']}{uuid.uuid4().hex[:8]}"
    return {
        "wrong password": (_url(secure, topic), _sasl(secure, sasl_plain_password=WRONG), "authentication of user"),
        "wrong PLAIN password": (
            _url(secure, topic),
            _sasl(secure, "PLAIN", sasl_plain_password=WRONG),
            "Invalid username or password",
        ),
        "unknown user": (_url(secure, topic), _sasl(secure, sasl_plain_username="nobody"), "user 'nobody' failed"),
        "host not in the certificate": (
            f"kafka://{address}/{topic}",
            _sasl(secure),
            f"kafka broker {address}: TLS: .*mismatch",
        ),
        "topic not permitted": (_url(secure, forbidden), _sasl(secure), f"not authorize.*{forbidden}"),
    }


@pytest.mark.parametrize(
    "case",
    ["wrong password", "wrong PLAIN password", "unknown user", "host not in the certificate", "topic not permitted"],
)
@pytest.mark.parametrize("how", ["partitions", "group", "produce"])
def test_refusals_are_source_errors_naming_broker_and_cause(secure_kafka, secure_topic, tmp_path, case, how):
    """Each refusal is a SourceError at once (no retry), naming the broker and the cause, never the password; for a
    reader of fixed partitions, a consumer group's member and ``ingest.produce``."""
    url, settings, cause = _failures(secure_kafka, secure_topic[0])[case]
    t0 = time.monotonic()
    with pytest.raises(SourceError, match=cause) as caught:
        if how == "produce":
            produce([str(secure_topic[1])], url, log=lambda *_: None, **settings)
        else:
            group = {"group_id": f"{secure_kafka['KAFKA_SECURE_TOPIC_PREFIX']}g"} if how == "group" else {}
            _reader(url if how == "group" else f"{url}:0", state=not group, **group, **settings).startup().read_all()
    assert time.monotonic() - t0 < 15
    message = str(caught.value)
    assert "kafka://" in message or "kafka broker" in message
    assert secure_kafka["KAFKA_SECURE_BOOTSTRAP"] in message or "127.0.0.1" in message
    assert WRONG not in message and secure_kafka["KAFKA_SASL_PASSWORD"] not in message


def test_the_password_shows_nowhere(secure_kafka, secure_topic, tmp_path, caplog):
    """Not in repr(reader), its options, stats(), the timeline, state(), nor any log line (DEBUG included, ingest's
    and kafka-python's), for a fixed assignment and a group member; pickled readers still carry it."""
    topic, _ = secure_topic
    password = secure_kafka["KAFKA_SASL_PASSWORD"]
    caplog.set_level(logging.DEBUG)
    timeline = tmp_path / "run.json"
    reader = _reader(_url(secure_kafka, f"{topic}:0,1,2"), **_sasl(secure_kafka, "PLAIN")).timeline(str(timeline))
    pickled = pickle.dumps(reader)
    shown = [repr(reader), repr(vars(reader)), repr(pickle.loads(pickled)._options)]
    with reader.startup():
        for i, _ in enumerate(reader):
            if i == 3:
                shown += [reader.state().decode(), repr(reader.stats())]
                break
    group = f"{secure_kafka['KAFKA_SECURE_TOPIC_PREFIX']}g-{uuid.uuid4().hex[:8]}"
    member = synthetic.declare(ingest.DataReader("k", [_url(secure_kafka, topic)]).batch_size(50))
    with member.kafka(group_id=group, **_sasl(secure_kafka, "PLAIN")).startup():
        for i, _ in enumerate(member):
            if i == 3:
                shown.append(repr(member.stats()))
                break
    shown += [timeline.read_text(), caplog.text, repr([r.__dict__ for r in caplog.records])]
    assert len(caplog.records) > 10
    for text in shown:
        assert password not in text
    assert password.encode() in pickled  # worker processes need it


def test_settings_that_do_not_go_together_are_config_errors(secure_kafka):
    password = secure_kafka["KAFKA_SASL_PASSWORD"]
    cases = {
        "sasl_mechanism needed": {"security_protocol": "SASL_SSL", "sasl_plain_password": password},
        "sasl_plain_username": {
            "security_protocol": "SASL_SSL",
            "sasl_mechanism": "PLAIN",
            "sasl_plain_password": password,
        },
        "expected one of PLAINTEXT": {"security_protocol": "TLS", "sasl_plain_password": password},
        "ssl_cafile=.*no such file": {"security_protocol": "SSL", "ssl_cafile": "/nonexistent/ca.pem"},
        "client='kafka-python'": {"security_protocol": "SASL_SSL", "sasl_mechanism": "OAUTHBEARER"},
    }
    for why, settings in cases.items():
        with pytest.raises(ConfigError, match=why) as caught:
            ingest.DataReader("k", []).kafka(**settings)
        assert password not in str(caught.value)


@pytest.fixture(scope="module")
def transactional_topic(secure_kafka, tmp_path_factory):
    """``(topic, committed file, every-message file)``: two transactional producers (one gzip) over SASL_SSL
    interleave transactions on 2 partitions, a third of them aborted, beside plain messages; the last
    transaction stays open.  The committed file holds the samples of the committed transactions and the plain
    messages, the other those of every message."""
    from kafka import KafkaProducer

    local = tmp_path_factory.mktemp("transactions")
    text = local / "all.txt"
    synthetic.write(text, 3000, seed=9)
    messages = [b"".join(g) for g in zip(*[iter(text_groups(text.read_bytes()))] * 3)]  # 107 messages
    topic = _new_topic(secure_kafka, partitions=2)
    settings = {"bootstrap_servers": secure_kafka["KAFKA_SECURE_BOOTSTRAP"], **_sasl(secure_kafka)}
    prefix = secure_kafka["KAFKA_SECURE_TOPIC_PREFIX"]
    producers = [
        KafkaProducer(transactional_id=f"{prefix}tx-{uuid.uuid4().hex[:8]}", **codec, **settings)
        for codec in ({}, {"compression_type": "gzip"})
    ]
    plain = KafkaProducer(acks="all", **settings)
    for p in producers:
        p.init_transactions()
    committed, k = [], 0
    for t in range(12):
        p = producers[t % 2]
        p.begin_transaction()
        chunk = messages[k : k + 6]
        k += 6
        for i, m in enumerate(chunk):
            p.send(topic, value=m, partition=i % 2)
            if i == 2:  # the other producer's plain neighbour between this transaction's records
                plain.send(topic, value=messages[k], partition=t % 2).get()
                committed.append(messages[k])
                k += 1
        p.flush()
        if t % 3 == 1:
            p.abort_transaction()
        else:
            p.commit_transaction()
            committed.extend(chunk)
    open_one = producers[0]
    open_one.begin_transaction()
    for i, m in enumerate(messages[k : k + 4]):
        open_one.send(topic, value=m, partition=i % 2)
    open_one.flush()
    plain.close()
    files = local / "committed.txt", local / "every.txt"
    files[0].write_bytes(b"".join(committed))
    files[1].write_bytes(b"".join(messages[: k + 4]))
    yield topic, *files
    open_one.abort_transaction()
    for p in producers:
        p.close()


@pytest.mark.parametrize("fetch_bytes", [16 << 20, 50_000])
def test_read_committed_delivers_committed_transactions_only(secure_kafka, transactional_topic, fetch_bytes):
    """Aborted transactions' records never come, whether their batches are plain or gzip, whole in one fetch or
    begun in an earlier one; reading stops at the last stable offset (before the open transaction);
    read_uncommitted delivers every record."""
    topic, committed, every = transactional_topic
    url = _url(secure_kafka, topic)
    settings = {**_sasl(secure_kafka), "max_partition_fetch_bytes": fetch_bytes}
    want = read_synthetic([str(committed)])
    assert 0 < len(want) < len(read_synthetic([str(every)]))
    assert _samples(url, isolation_level="read_committed", **settings) == want
    assert _samples(url, **settings) == read_synthetic([str(every)])
    assert _samples(url, isolation_level="read_committed", client="kafka-python", **settings) == want
