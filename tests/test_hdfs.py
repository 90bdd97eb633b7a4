"""Reading and writing through a real HDFS (scripts/services.sh): the same batches as local files."""

import os
import signal
import socket
import subprocess
import sys
import time
import uuid

import pytest

import ingest
from ingest import synthetic
from ingest.sources.filesystems import url_to_fs
from ingest.errors import ConfigError, SourceError
from ingest.sources import hdfs_client, seekable, use_hdfs_client
from ingest.sources import hdfs as hdfs_module
from ingest.sources.hdfs import webhdfs_address

from conftest import SAMPLES, read_synthetic, xdl


@pytest.fixture(scope="module")
def hdfs(services, tmp_path_factory):
    """``(url of a fresh HDFS directory holding the test files, local directory with the same files)``."""
    url = services["HDFS_URL"]
    local = tmp_path_factory.mktemp("hdfs-src")
    (local / "parts").mkdir()
    synthetic.write(local / "parts" / "a.txt", 3000, seed=1)
    synthetic.write(local / "parts" / "b.txt", 2000, seed=2)
    ingest.convert([str(local / "parts" / "a.txt")], str(local / "a.pb"), log=lambda *_: None)
    with pytest.MonkeyPatch.context() as patch:  # frames of about 300 KB of pb, so that shards cut it in runs
        patch.setattr(seekable, "FRAME_BYTES", 64 << 10)
        ingest.convert([str(local / "parts" / "a.txt")], str(local / "a.pb.zst"), log=lambda *_: None)
    root = f"{url}/it-{uuid.uuid4().hex[:8]}"
    fs, path = url_to_fs(root)
    fs.put(str(local), path, recursive=True)
    if not fs.exists(f"{path}/parts/a.txt"):  # fsspec puts a directory inside an existing one
        raise AssertionError(f"upload to {root} failed: {fs.ls(path)}")
    return root, local


def test_same_samples_as_local_files(hdfs):
    root, local = hdfs
    want = read_synthetic([local / "parts"])
    assert len(want) == 5000
    assert read_synthetic([f"{root}/parts"]) == want  # a directory
    assert read_synthetic([f"{root}/parts/*.txt"], threads=2, unit_bytes=64 << 10) == want  # a glob, byte ranges
    pb_local = read_synthetic([local / "a.pb"], "pb")
    assert len(pb_local) == 3000
    assert read_synthetic([f"{root}/a.pb"], "pb", threads=2, unit_bytes=64 << 10) == pb_local
    assert read_synthetic([f"{root}/a.pb.zst"], "pb", threads=2, unit_bytes=30_000) == pb_local  # runs of frames


def test_a_process_that_read_hdfs_can_fork(hdfs):
    """A child forked after reading HDFS (a DataLoader worker; Ray and ``subprocess`` with ``preexec_fn`` run
    fork handlers too) does not hang in fsspec's fork handler dropping the hdfs-native client it inherited."""
    root, _ = hdfs
    script = f"""
import os, subprocess, sys, threading
from ingest import synthetic
import ingest
reader = synthetic.declare(ingest.DataReader("r", [{root + "/parts/a.txt"!r}]).threads(2).unit_bytes(64 << 10))
read = sum(b.size for b in reader.startup())
child = threading.Thread(target=lambda: subprocess.run(["true"], preexec_fn=lambda: None), daemon=True)
child.start()
child.join(20)
print(read, "hangs" if child.is_alive() else "forked", flush=True)
os._exit(0)
"""
    run = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, _ = run.communicate(timeout=120)
    finally:
        try:
            os.killpg(run.pid, signal.SIGKILL)  # a hung child of it too
        except ProcessLookupError:
            pass
    assert out.split() == ["3000", "forked"]


def test_ranged_streams_in_small_pieces_read_the_same(hdfs, monkeypatch):
    """RangeStream asks for FIRST bytes after a seek, 4x more each next stream, and no further than a unit's
    end and PAST_END more until the reader goes on past that.  With both at 1 byte every unit reads through
    many streams and its last group runs past PAST_END: still the same samples."""
    from ingest.sources.files import RangeStream

    root, local = hdfs
    monkeypatch.setattr(RangeStream, "FIRST", 1)
    monkeypatch.setattr(RangeStream, "PAST_END", 1)
    assert read_synthetic([f"{root}/parts"], threads=2, unit_bytes=64 << 10) == read_synthetic([local / "parts"])
    pb_local = read_synthetic([local / "a.pb"], "pb")
    assert read_synthetic([f"{root}/a.pb"], "pb", threads=2, unit_bytes=64 << 10) == pb_local
    assert read_synthetic([f"{root}/a.pb.zst"], "pb", threads=2, unit_bytes=30_000) == pb_local


def test_shards_cover_every_sample_once(hdfs):
    root, _ = hdfs
    whole = read_synthetic([f"{root}/parts"])
    shards = [read_synthetic([f"{root}/parts"], shard=(i, 3), unit_bytes=64 << 10) for i in range(3)]
    assert sorted(s for part in shards for s in part) == whole
    assert all(shards)
    framed = [read_synthetic([f"{root}/a.pb.zst"], "pb", shard=(i, 3), unit_bytes=30_000) for i in range(3)]
    assert sorted(s for part in framed for s in part) == read_synthetic([f"{root}/a.pb"], "pb")
    assert all(framed)


def test_convert_writes_to_hdfs(hdfs):
    root, local = hdfs
    out = f"{root}/out/b.pb.zst"
    ingest.convert([f"{root}/parts/b.txt"], out, log=lambda *_: None)
    fs, path = url_to_fs(out)
    assert [p.rsplit("/", 1)[-1] for p in fs.ls(path.rsplit("/", 1)[0], detail=False)] == ["b.pb.zst"]
    assert len(read_synthetic([out], "pb")) == 2000


def test_missing_path_is_a_clear_error(hdfs):
    root, _ = hdfs
    with pytest.raises(SourceError, match="no such file"):
        ingest.DataReader("h", [f"{root}/nothing/here.txt"]).feature("item", "sparse").startup()


def test_refused_connection_is_a_clear_error_not_a_hang():
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    t0 = time.monotonic()
    with pytest.raises(SourceError, match=f"cannot connect to the HDFS NameNode at 127.0.0.1:{port}"):
        ingest.DataReader("h", [f"hdfs://127.0.0.1:{port}/x.txt"]).feature("item", "sparse").startup()
    assert time.monotonic() - t0 < 15


def test_xdl_sample_reads_the_same(hdfs):
    root, _ = hdfs
    fs, path = url_to_fs(root)
    tdm = xdl("tdm.dat")
    fs.put(str(tdm), f"{path}/tdm.dat")
    fs.put(str(SAMPLES / "ads.txt"), f"{path}/ads.txt")
    for name in ("tdm.dat", "ads.txt"):
        local = ingest.inspect(str(tdm if name == "tdm.dat" else SAMPLES / name), 3)
        remote = ingest.inspect(f"{root}/{name}", 3)
        for key in ("bytes", "tables", "groups", "samples", "first"):
            assert remote[key] == local[key], key


@pytest.fixture
def webhdfs(services, monkeypatch):
    """``hdfs://`` served by WebHDFS, found through $HADOOP_CONF_DIR/hdfs-site.xml (services.sh writes it)."""
    monkeypatch.setenv("HADOOP_CONF_DIR", services["HADOOP_CONF_DIR"])
    monkeypatch.delenv("INGEST_WEBHDFS_URL", raising=False)
    assert use_hdfs_client("webhdfs") == "webhdfs"
    yield
    use_hdfs_client()


def test_webhdfs_reads_and_writes_the_same(hdfs, webhdfs):
    """Without hdfs-native or libhdfs, the same hdfs:// URLs go through WebHDFS and give the same samples."""
    root, local = hdfs
    fs, _ = url_to_fs(root)
    assert type(fs).__name__ == "WebHdfsAsHdfs"
    want = read_synthetic([local / "parts"])
    assert read_synthetic([f"{root}/parts"]) == want
    assert read_synthetic([f"{root}/parts/*.txt"], threads=2, unit_bytes=64 << 10) == want
    shards = [read_synthetic([f"{root}/parts"], shard=(i, 3), unit_bytes=64 << 10) for i in range(3)]
    assert sorted(s for part in shards for s in part) == want and all(shards)
    pb_local = read_synthetic([local / "a.pb"], "pb")
    assert read_synthetic([f"{root}/a.pb"], "pb", threads=2, unit_bytes=64 << 10) == pb_local
    out = f"{root}/web-out/b.pb"
    ingest.convert([f"{root}/parts/b.txt"], out, log=lambda *_: None)
    assert [p.rsplit("/", 1)[-1] for p in fs.ls(fs._strip_protocol(f"{root}/web-out"))] == ["b.pb"]
    assert read_synthetic([out], "pb") == read_synthetic([local / "parts" / "b.txt"])
    with pytest.raises(SourceError, match="no such file"):
        ingest.DataReader("h", [f"{root}/nothing/here.txt"]).feature("item", "sparse").startup()


def test_the_hdfs_client_is_chosen_or_refused_clearly(monkeypatch):
    assert hdfs_client() == "native"  # installed with the test extras: the default
    with pytest.raises(ConfigError, match="expected auto or one of native, pyarrow, webhdfs"):
        use_hdfs_client("libhdfs")
    monkeypatch.delenv("ARROW_LIBHDFS_DIR", raising=False)
    monkeypatch.delenv("HADOOP_HOME", raising=False)
    with pytest.raises(ConfigError, match="libhdfs.so is not found"):
        use_hdfs_client("pyarrow")
    assert hdfs_client() == "native"  # a refused choice changes nothing
    # where neither hdfs-native nor libhdfs is there, auto falls back to WebHDFS
    monkeypatch.setattr(hdfs_module, "_missing", lambda client: None if client == "webhdfs" else "absent")
    try:
        assert use_hdfs_client() == "webhdfs"
        assert hdfs_module.filesystem_class().__name__ == "WebHdfsAsHdfs"
    finally:
        monkeypatch.undo()
        assert use_hdfs_client() == "native"


def test_webhdfs_address(monkeypatch, tmp_path):
    monkeypatch.delenv("INGEST_WEBHDFS_URL", raising=False)
    monkeypatch.setenv("HADOOP_CONF_DIR", str(tmp_path))
    assert webhdfs_address("nn1") == ("nn1", 9870)  # no hdfs-site.xml: Hadoop 3's default port
    (tmp_path / "hdfs-site.xml").write_text(
        "<configuration><property><name>dfs.namenode.http-address</name><value>0.0.0.0:50070</value>"
        "</property></configuration>"
    )
    assert webhdfs_address("nn1") == ("nn1", 50070)  # a wildcard host: the NameNode's own
    hits = hdfs_module._site_http_address.cache_info().hits
    assert webhdfs_address("nn2") == ("nn2", 50070)
    assert hdfs_module._site_http_address.cache_info().hits == hits + 1  # parsed once, not at every URL
    site = tmp_path / "hdfs-site.xml"
    site.write_text(site.read_text().replace("0.0.0.0:50070", "web1:9871"))
    os.utime(site, ns=(site.stat().st_atime_ns, site.stat().st_mtime_ns + 10**9))
    assert webhdfs_address("nn1") == ("web1", 9871)  # a changed file is read again
    monkeypatch.setenv("INGEST_WEBHDFS_URL", "http://gateway:14000")
    assert webhdfs_address("nn1") == ("gateway", 14000)
