"""kill -9 at random points: the samples delivered before the last saved state, plus those delivered after
restoring it, are the input exactly (local files, HDFS, Kafka; text and pb; 1 and 2 threads; split groups).

Each trial runs tests/killrun.py, kills it with SIGKILL at a random moment ``KILLS`` times (each run
restoring the state the previous one saved), then lets a last run finish.  ``INGEST_KILL_TRIALS`` sets
the trials per configuration (default 2).
"""

import json
import os
import random
import subprocess
import sys
import time
import uuid
from collections import Counter

import pytest

import ingest
from ingest import synthetic
from ingest.sources.filesystems import url_to_fs
from conftest import ROOT, flatten

TRIALS = int(os.environ.get("INGEST_KILL_TRIALS", "2"))
KILLS = 2
KILLRUN = str(ROOT / "tests" / "killrun.py")
SAMPLES = 3000


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    local = tmp_path_factory.mktemp("kill")
    text = local / "k.txt"
    synthetic.write(text, SAMPLES, seed=11)
    aux = ingest.convert([str(text)], str(local / "k.pb"), aux="auto", log=lambda *_: None)["aux"]
    reader = synthetic.declare(ingest.DataReader("all", [str(text)]))
    want = Counter(s["sid"].decode() for b in reader.startup() for s in flatten(b))
    assert len(want) == SAMPLES and set(want.values()) == {1}
    return {"txt": text, "pb": local / "k.pb", "aux": aux, "want": want, "dir": local}


def _state_batches(url):
    fs, path = url_to_fs(url)
    if not fs.exists(path):
        return 0
    with fs.open(path, "rb") as f:
        return json.loads(f.read())["batches"]


def _trial(cfg, rng):
    """Sample ids delivered over KILLS killed runs and a last complete one, as a Counter."""
    delivered = Counter()
    covered = 0  # batches the saved state covered before this run
    for attempt in range(KILLS + 1):
        proc = subprocess.Popen(
            [sys.executable, KILLRUN, json.dumps(cfg)], stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        if attempt < KILLS:
            first = proc.stdout.readline()  # started and delivering
            time.sleep(rng.uniform(0, 0.7))
            proc.kill()
            out = first + proc.stdout.read()
            err = proc.stderr.read()
            proc.wait()
        else:
            out, err = proc.communicate(timeout=300)
            assert proc.returncode == 0, err.decode()[-3000:]
        lines = out.decode().split("\n")
        if attempt < KILLS and proc.returncode not in (-9, 0):
            raise AssertionError(f"killrun failed ({proc.returncode}):\n{err.decode()[-3000:]}")
        saved = _state_batches(cfg["state"])
        for line in lines[: saved - covered]:
            assert line != "END"
            delivered.update(line.split())
        covered = saved
        if "END" in lines:
            break
    return delivered


def _check(cfg, want, seed):
    rng = random.Random(seed)
    for t in range(TRIALS):
        cfg = {**cfg, "state": cfg["state_dir"] + f"/state-{uuid.uuid4().hex[:6]}"}
        got = _trial(cfg, rng)
        lost = want - got
        extra = got - want
        assert not lost and not extra, (
            f"trial {t} of {cfg}: {sum(lost.values())} samples lost, {sum(extra.values())} delivered twice or unknown"
        )


def _cfg(paths, file_type, threads, aux, state_dir):
    return {
        "paths": paths,
        "file_type": file_type,
        "threads": threads,
        "aux": list(aux) if file_type == "pb" else [],
        "state_dir": state_dir,
        "every": 3,
        "batch_size": 32,
        "sleep": 0.01,
    }


@pytest.mark.parametrize("file_type,threads", [("txt", 1), ("txt", 2), ("pb", 1), ("pb", 2)])
def test_kill_local(data, file_type, threads):
    cfg = _cfg([str(data[file_type])], file_type, threads, data["aux"], str(data["dir"]))
    _check(cfg, data["want"], seed=hash((file_type, threads)) & 0xFFFF)


@pytest.fixture(scope="module")
def hdfs_data(services, data):
    root = f"{services['HDFS_URL']}/kill-{uuid.uuid4().hex[:8]}"
    fs, path = url_to_fs(root)
    fs.mkdir(path)
    for name in ("txt", "pb"):
        fs.put(str(data[name]), f"{path}/{data[name].name}")
    return root


@pytest.mark.parametrize("file_type,threads", [("txt", 1), ("pb", 2)])
def test_kill_hdfs(data, hdfs_data, file_type, threads):
    """Input and saved states on HDFS; byte ranges (unit_bytes is automatic: several per file)."""
    cfg = _cfg([f"{hdfs_data}/{data[file_type].name}"], file_type, threads, data["aux"], hdfs_data)
    _check(cfg, data["want"], seed=7)


@pytest.fixture(scope="module")
def kafka_topics(services, data):
    from ingest.produce import produce
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic

    bootstrap = services["KAFKA_BOOTSTRAP"]
    topics = {}
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    for name in ("txt", "pb"):
        topic = f"kill-{name}-{uuid.uuid4().hex[:8]}"
        admin.create_topics([NewTopic(topic, 3, 1)])
        url = f"kafka://{bootstrap}/{topic}"
        produce([str(data[name])], url, message_bytes=20000, log=lambda *_: None)
        topics[name] = url
    admin.close()
    return topics


@pytest.mark.parametrize("file_type,threads", [("txt", 2), ("pb", 1)])
def test_kill_kafka(data, kafka_topics, file_type, threads):
    cfg = _cfg([kafka_topics[file_type]], file_type, threads, data["aux"], str(data["dir"]))
    _check(cfg, data["want"], seed=5)
