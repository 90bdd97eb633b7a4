"""Shared fixtures and helpers: paths to sample files, readers, flattening batches to samples."""

import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, settings

# Every bundle a kernel takes is type-checked, the per-batch ones too (native/bundles.py), in subprocesses too.
os.environ.setdefault("INGEST_CHECK_KERNEL_ARGS", "1")

import ingest  # noqa: E402
from ingest._native import bundles  # noqa: E402

# pytest imports ingest before this file, for the filterwarnings of pyproject.toml: the flag was read without it
bundles.CHECK_EVERY_BATCH = os.environ["INGEST_CHECK_KERNEL_ARGS"] == "1"
from ingest import synthetic  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "samples"
# XDL's own sample files (from its public repository) are not shipped: tests that read them find them here
XDL = Path(os.environ.get("INGEST_XDL_DATA", ROOT.parent / "shared" / "data" / "xdl"))


def xdl(name):
    """The path of XDL's sample file ``name``; the test is skipped, saying what to set, where it is absent."""
    path = XDL / name
    if not path.exists():
        pytest.skip(
            f"XDL's sample file {name} is not in {XDL}: set INGEST_XDL_DATA to the folder holding "
            f"XDL's sample files (sample.txt, sample2.txt, tdm.dat, tdm_serving_sample.dat, zlib_test_data)"
        )
    return path


def sample_file(source):
    """A parametrized input: a Path of the project's, or ``("xdl", name)`` for one of XDL's (``xdl()``)."""
    return xdl(source[1]) if isinstance(source, tuple) else source


settings.register_profile(
    "default",
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
settings.register_profile(
    "thorough",
    max_examples=5000,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


def make_reader(paths, sparse=(), dense=None, label_count=1, file_type="txt", enable_state=False, **options):
    """A started-later reader with the given features; ``options`` are method -> argument."""
    reader = ingest.DataReader(
        "test", paths=[str(p) for p in paths], file_type=file_type, enable_state=enable_state
    ).label_count(label_count)
    for name in sparse:
        reader.feature(name=name, type=ingest.features.sparse, serialized=True)
    for name, nvec in (dense or {}).items():
        reader.feature(name=name, type=ingest.features.dense, nvec=nvec)
    for method, arg in options.items():
        getattr(reader, method)(*arg) if isinstance(arg, tuple) else getattr(reader, method)(arg)
    return reader


def read_synthetic(paths, file_type="txt", aux=(), **options):
    """Every synthetic sample of ``paths`` (all features declared) as sorted (sample id, flattened sample) pairs.

    Comparable across sources and thread counts: the order of delivery is left out.
    """
    reader = synthetic.declare(make_reader(paths, file_type=file_type, batch_size=(256,), **options), aux=aux)
    return sorted((s["sid"], str(s)) for b in reader.startup() for s in flatten(b))


def read_samples(reader):
    """Start the reader and flatten every batch into per-sample dicts (padding left out)."""
    reader.startup()
    out = []
    with reader:
        for batch in reader:
            batch.validate()
            out.extend(flatten(batch))
    return out


def flatten(batch):
    """Per-sample dicts of a batch; aux-table features are reached through the indicators.

    A sparse id is its key, or ``(hkey, key)`` when the high word is not 0.
    """
    samples = []
    for r in range(batch.size):
        s = {
            "sid": batch.sample_id(r),
            "labels": batch.labels[r].tolist(),
            "ts": int(batch.timestamps[r]),
            "sparse": {},
            "dense": {},
        }
        rows = [r]
        for ind in batch.indicators:
            rows.append(int(ind[rows[-1]]))
        for name in batch:
            feat = batch[name]
            row = rows[batch.table_of(name)]
            if isinstance(feat, ingest.SparseFeature):
                a, b = feat.offsets[row], feat.offsets[row + 1]
                ids = feat.ids[a:b]
                if ids.ndim == 2:
                    keys = [int(k) if h == 0 else (int(h), int(k)) for h, k in ids.tolist()]
                else:
                    keys = ids.tolist()
                s["sparse"][name] = list(zip(keys, feat.values[a:b].tolist()))
            else:
                s["dense"][name] = feat[row].tolist()
        samples.append(s)
    return samples


def as_plain(samples):
    """Twin samples (numpy floats) in the same plain form as ``flatten``."""
    out = []
    for s in samples:
        out.append(
            {
                "sid": s["sid"],
                "labels": [float(v) for v in s["labels"]],
                "ts": s["ts"],
                "sparse": {n: [(k, float(v)) for k, v in p] for n, p in s["sparse"].items()},
                "dense": {n: [float(v) for v in vals] for n, vals in s["dense"].items()},
            }
        )
    return out


def text_groups(text):
    """The lines of a text sample file (bytes), one bytes string per sample group."""
    groups = []
    for line in text.splitlines(keepends=True):
        gid = line.split(b"|", 2)[1]
        if groups and groups[-1][0] == gid:
            groups[-1][1].append(line)
        else:
            groups.append((gid, [line]))
    return [b"".join(lines) for _, lines in groups]


def take_with_state(reader, n):
    """``(samples, state)``: ``(sample id, str(sample))`` of the first ``n`` batches of ``reader`` (all when None),
    then its state; the reader is shut down."""
    got = []
    for i, batch in enumerate(reader.startup()):
        got.extend((s["sid"], str(s)) for s in flatten(batch))
        if i + 1 == n:
            break
    state = reader.state()
    reader.shutdown()
    return got, state


def key_of(sample):
    """A hashable form of a sample, for multiset comparisons."""
    return (
        sample["sid"],
        tuple(sample["labels"]),
        sample["ts"],
        tuple((n, tuple(p)) for n, p in sorted(sample["sparse"].items())),
        tuple((n, tuple(v)) for n, v in sorted(sample["dense"].items())),
    )


@pytest.fixture(scope="session")
def synthetic_file(tmp_path_factory):
    """3000 synthetic ads samples (about 4 MB)."""
    from ingest import synthetic

    path = tmp_path_factory.mktemp("synthetic") / "ads.txt"
    synthetic.write(path, 3000, seed=1)
    return path


@pytest.fixture(autouse=True)
def _no_thread_left_behind():
    import threading

    yield
    alive = [t.name for t in threading.enumerate() if t.name.startswith("ingest-")]
    for _ in range(100):
        if not alive:
            break
        import time

        time.sleep(0.05)
        alive = [t.name for t in threading.enumerate() if t.name.startswith("ingest-")]
    assert not alive, f"threads left running: {alive}"


np.set_printoptions(linewidth=120)


@pytest.fixture(scope="session")
def services():
    """``{"KAFKA_BOOTSTRAP": ..., "HDFS_URL": ..., "WEBHDFS_URL": ..., "HADOOP_CONF_DIR": ...}`` of real
    services on 127.0.0.1.

    CI starts them (``scripts/services.sh start`` in ``.ci/run``) and exports the addresses;
    otherwise this fixture starts them for the session, exports their addresses to the environment (so that
    the processes tests start use them too) and stops them when pytest exits.
    """
    names = ("KAFKA_BOOTSTRAP", "HDFS_URL", "WEBHDFS_URL", "HADOOP_CONF_DIR")
    if all(n in os.environ for n in names):
        yield {n: os.environ[n] for n in names}
        return
    script = str(ROOT / "scripts" / "services.sh")
    was_running = subprocess.run([script, "status"], capture_output=True).returncode == 0
    done = subprocess.run([script, "start"], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, f"scripts/services.sh start failed:\n{done.stderr[-3000:]}"
    found = dict(line.split("=", 1) for line in done.stdout.split() if "=" in line)
    addresses = {n: found[n] for n in names}
    saved = {n: os.environ.get(n) for n in names}
    os.environ.update(addresses)
    try:
        yield addresses
    finally:
        for n, value in saved.items():
            if value is None:
                os.environ.pop(n, None)
            else:
                os.environ[n] = value
        if not was_running:
            subprocess.run([script, "stop"], capture_output=True)


SECURE_KAFKA = (
    "KAFKA_SECURE_BOOTSTRAP",
    "KAFKA_SASL_BOOTSTRAP",
    "KAFKA_SSL_BOOTSTRAP",
    "KAFKA_CA_FILE",
    "KAFKA_SSL_CERTFILE",
    "KAFKA_SSL_KEYFILE",
    "KAFKA_SASL_USER",
    "KAFKA_SASL_PASSWORD",
    "KAFKA_SECURE_TOPIC_PREFIX",
)


@pytest.fixture(scope="session")
def secure_kafka(services):
    """The secured listeners of the broker of ``services`` (scripts/services.sh: addresses, CA, client
    certificate, SASL user and password, the topic prefix its ACLs allow), from the environment, else from
    ``scripts/services.sh status`` (a shell that exported only the plain services' addresses)."""
    if all(n in os.environ for n in SECURE_KAFKA):
        return {n: os.environ[n] for n in SECURE_KAFKA}
    done = subprocess.run([str(ROOT / "scripts" / "services.sh"), "status"], capture_output=True, text=True)
    found = dict(line.split("=", 1) for line in done.stdout.split() if "=" in line)
    missing = [n for n in SECURE_KAFKA if n not in found]
    assert not missing, f"scripts/services.sh status gives no {missing}:\n{done.stderr[-2000:]}"
    return {n: found[n] for n in SECURE_KAFKA}


KERBEROS_HDFS = (
    "HDFS_KERBEROS_URL",
    "HDFS_KERBEROS_CONF_DIR",
    "KRB5_CONFIG",
    "HDFS_KERBEROS_PRINCIPAL",
    "HDFS_KERBEROS_KEYTAB",
)


@pytest.fixture(scope="session")
def kerberos_hdfs(services):
    """The Kerberos-secured HDFS of ``scripts/services.sh start --kerberos`` (its URL, its clients'
    HADOOP_CONF_DIR, a krb5.conf naming its KDC, a client principal and its keytab), from the environment (CI
    starts it in ``.ci/run``), else started here: ``start --kerberos`` leaves the running services alone and adds
    it, and ``services.sh stop`` (the ``services`` fixture's, when it started them) stops it with the others."""
    if all(n in os.environ for n in KERBEROS_HDFS):
        return {n: os.environ[n] for n in KERBEROS_HDFS}
    done = subprocess.run(
        [str(ROOT / "scripts" / "services.sh"), "start", "--kerberos"], capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, f"scripts/services.sh start --kerberos failed:\n{done.stderr[-3000:]}"
    found = dict(line.split("=", 1) for line in done.stdout.split() if "=" in line)
    missing = [n for n in KERBEROS_HDFS if n not in found]
    assert not missing, f"scripts/services.sh start --kerberos gives no {missing}:\n{done.stderr[-2000:]}"
    return {n: found[n] for n in KERBEROS_HDFS}
