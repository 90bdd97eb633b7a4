"""A Kerberos-secured HDFS (scripts/services.sh start --kerberos): hdfs-native logs in from a keytab named by
INGEST_HDFS_PRINCIPAL / INGEST_HDFS_KEYTAB, or takes the ticket of the default cache; without either, reading or
writing is a SourceError at once that says what to do."""

import os
import subprocess
import sys
import time
import uuid

import pytest

import ingest
from ingest import synthetic
from ingest.errors import ConfigError, SourceError
from ingest.sources.filesystems import url_to_fs

from conftest import read_synthetic


@pytest.fixture
def secured(kerberos_hdfs, monkeypatch, tmp_path):
    """A client of the secured cluster with no credentials yet: its HADOOP_CONF_DIR (SASL on data transfer), its
    krb5.conf, and an empty ticket cache of its own, so that no ticket of the user's is taken."""
    monkeypatch.setenv("HADOOP_CONF_DIR", kerberos_hdfs["HDFS_KERBEROS_CONF_DIR"])
    monkeypatch.setenv("KRB5_CONFIG", kerberos_hdfs["KRB5_CONFIG"])
    monkeypatch.setenv("KRB5CCNAME", f"FILE:{tmp_path / 'krb5cc'}")
    monkeypatch.delenv("INGEST_HDFS_PRINCIPAL", raising=False)
    monkeypatch.delenv("INGEST_HDFS_KEYTAB", raising=False)
    return kerberos_hdfs


def _log_in_with_keytab(monkeypatch, env):
    monkeypatch.setenv("INGEST_HDFS_PRINCIPAL", env["HDFS_KERBEROS_PRINCIPAL"])
    monkeypatch.setenv("INGEST_HDFS_KEYTAB", env["HDFS_KERBEROS_KEYTAB"])


@pytest.fixture(scope="module")
def local_parts(tmp_path_factory):
    local = tmp_path_factory.mktemp("krb-src")
    (local / "parts").mkdir()
    synthetic.write(local / "parts" / "a.txt", 3000, seed=1)
    synthetic.write(local / "parts" / "b.txt", 2000, seed=2)
    return local


def test_keytab_login_writes_and_reads_the_same_samples_as_local_files(secured, monkeypatch, local_parts):
    _log_in_with_keytab(monkeypatch, secured)
    root = f"{secured['HDFS_KERBEROS_URL']}/krb-{uuid.uuid4().hex[:8]}"
    fs, path = url_to_fs(root)
    fs.mkdir(path)
    fs.put(str(local_parts / "parts"), f"{path}/parts", recursive=True)
    # the files are the keytab's principal's, so the NameNode took that identity
    assert fs.info(f"{path}/parts/a.txt")["owner"] == secured["HDFS_KERBEROS_PRINCIPAL"].split("@")[0]

    want = read_synthetic([local_parts / "parts"])
    assert len(want) == 5000
    assert read_synthetic([f"{root}/parts"]) == want
    assert read_synthetic([f"{root}/parts/*.txt"], threads=2, unit_bytes=64 << 10) == want  # byte ranges

    # writing: convert from the secured HDFS to it, then read back what was written
    out = f"{root}/out/a.pb.zst"
    ingest.convert([f"{root}/parts/a.txt"], out, log=lambda *_: None)
    assert read_synthetic([out], "pb") == read_synthetic([local_parts / "parts" / "a.txt"])


def test_without_a_ticket_reading_and_writing_are_a_clear_error_at_once(secured, local_parts):
    url = secured["HDFS_KERBEROS_URL"]
    namenode = url.removeprefix("hdfs://")
    t0 = time.monotonic()
    with pytest.raises(SourceError, match=f"NameNode {namenode} wants Kerberos") as read_error:
        ingest.DataReader("h", [f"{url}/anything.txt"]).feature("item", "sparse").startup()
    with pytest.raises(SourceError, match=f"NameNode {namenode} wants Kerberos") as write_error:
        ingest.convert([str(local_parts / "parts" / "a.txt")], f"{url}/out/a.pb", log=lambda *_: None)
    assert time.monotonic() - t0 < 10
    for error in (read_error.value, write_error.value):
        message = str(error)
        assert "No Kerberos credentials available" in message  # GSSAPI's own cause
        assert "kinit" in message and "INGEST_HDFS_PRINCIPAL and INGEST_HDFS_KEYTAB" in message


def test_a_ticket_in_the_default_cache_is_used_without_a_keytab(secured, tmp_path, local_parts):
    """What `kinit -kt` does, done by hdfs-native itself (no kinit needed here): log in from the keytab into a
    file cache; then a client with no settings but KRB5CCNAME reads with that ticket."""
    from hdfs_native import Client

    cache = os.environ["KRB5CCNAME"]
    root = f"/krb-{uuid.uuid4().hex[:8]}"
    kinit = Client(
        secured["HDFS_KERBEROS_URL"],
        kerberos_principal=secured["HDFS_KERBEROS_PRINCIPAL"],
        kerberos_keytab=secured["HDFS_KERBEROS_KEYTAB"],
        kerberos_cache=cache,
    )
    with kinit.create(f"{root}/b.txt") as f:
        f.write((local_parts / "parts" / "b.txt").read_bytes())
    assert os.path.getsize(cache.removeprefix("FILE:")) > 0

    assert read_synthetic([f"{secured['HDFS_KERBEROS_URL']}{root}/b.txt"]) == read_synthetic(
        [local_parts / "parts" / "b.txt"]
    )


def test_the_convert_command_logs_in_from_the_keytab_of_the_environment(secured, monkeypatch, local_parts):
    """Settings through the environment reach every process: `ingest convert` in a new one."""
    _log_in_with_keytab(monkeypatch, secured)
    out = f"{secured['HDFS_KERBEROS_URL']}/krb-{uuid.uuid4().hex[:8]}/b.pb"
    src = str(local_parts / "parts" / "b.txt")
    run = subprocess.run(
        [sys.executable, "-c", "import sys; from ingest.cli.main import main; sys.exit(main())", "convert", src, out],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert read_synthetic([out], "pb") == read_synthetic([src])


def test_keytab_settings_are_checked_before_use(secured, monkeypatch, tmp_path):
    url = f"{secured['HDFS_KERBEROS_URL']}/x.txt"
    monkeypatch.setenv("INGEST_HDFS_KEYTAB", secured["HDFS_KERBEROS_KEYTAB"])
    with pytest.raises(ConfigError, match="set INGEST_HDFS_PRINCIPAL too"):
        url_to_fs(url)
    monkeypatch.setenv("INGEST_HDFS_PRINCIPAL", secured["HDFS_KERBEROS_PRINCIPAL"])
    monkeypatch.setenv("INGEST_HDFS_KEYTAB", str(tmp_path / "missing.keytab"))
    with pytest.raises(ConfigError, match="missing.keytab: expected a readable keytab file"):
        url_to_fs(url)
    # a principal the keytab has no key of: the NameNode is named, and what GSSAPI said
    monkeypatch.setenv("INGEST_HDFS_KEYTAB", secured["HDFS_KERBEROS_KEYTAB"])
    monkeypatch.setenv("INGEST_HDFS_PRINCIPAL", "someone-else@" + secured["HDFS_KERBEROS_PRINCIPAL"].split("@")[1])
    with pytest.raises(SourceError, match="wants Kerberos and this client could not log in"):
        url_to_fs(url)
