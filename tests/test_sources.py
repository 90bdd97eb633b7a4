"""Sources as plug-ins: the registry by URL scheme, a third party's source found through its entry point and read
like files, units that identify themselves in a state."""

import io
from dataclasses import dataclass

import pytest

from conftest import SAMPLES, make_reader, read_samples
from ingest import ConfigError, DataError, SourceError
from ingest.sources import FileRange, Source, Unit, UnitStream, plan_paths, register, scheme_of, source_for
from ingest.sources import registry
from ingest.sources.files import FileSource
from ingest.sources.kafka import KafkaSource, PartitionSpan

ADS = SAMPLES / "ads.txt"


def test_scheme_picks_the_source():
    assert scheme_of("data/x.txt") == "file" and scheme_of("HDFS://nn/x") == "hdfs"
    assert scheme_of("kafka://b/t") == "kafka"
    assert isinstance(source_for("kafka://b:9092/t"), KafkaSource)
    for url in ("x.txt", "file:///x.txt", "hdfs://nn:8020/x", "memory://x", "s3://bucket/x"):
        assert isinstance(source_for(url), FileSource), url  # fsspec serves every scheme without a source
    assert "kafka" in registry.schemes()


def test_file_units_identify_their_bytes():
    units = plan_paths([ADS, ADS], splittable=True, unit_bytes=1 << 19)
    assert [u.index for u in units] == list(range(len(units))) and all(isinstance(u, FileRange) for u in units)
    assert units[0].ident() == [0, str(ADS), 0, units[0].end, ADS.stat().st_size, None]
    with units[1].open() as f:  # a byte range opens at the file's start: the format aligns it to its groups
        assert f.read(100) == ADS.read_bytes()[:100] and not f.live and f.describe(5) == str(ADS)


def test_local_files_read_alike_by_path_url_and_relative_path(tmp_path, monkeypatch):
    """Local files are opened with Python's ``open`` (fsspec opens every other URL): the same file named by its
    path, its ``file://`` URL and a path relative to the working directory gives the same samples, and a file gone
    between planning and opening is a SourceError naming it."""
    data = tmp_path / "ads.txt"
    data.write_bytes(ADS.read_bytes())
    monkeypatch.chdir(tmp_path)

    def samples(path):
        return read_samples(make_reader([path], sparse=("item", "user"), label_count=2, batch_size=100))

    expected = samples(str(ADS))
    assert samples(str(data)) == samples(f"file://{data}") == samples("ads.txt") == expected
    units = plan_paths([str(data)], splittable=True)
    data.unlink()
    with pytest.raises(SourceError, match="ads.txt: cannot open") as err:
        units[0].open()
    assert err.value.source == str(data)


def test_partition_spans_identify_by_url_only():
    """A partition's end offset moves between runs: a state still resumes the same plan."""
    a = PartitionSpan(3, "kafka://b:9092/t:1", ("b:9092",), "t", 1, 0, 10, "direct", ())
    b = PartitionSpan(3, "kafka://b:9092/t:1", ("b:9092",), "t", 1, 0, 99, "direct", ())
    assert a.ident() == b.ident() == [3, "kafka://b:9092/t:1"] and a.aligned and a.stream_start == 0


@dataclass(frozen=True)
class MemoryUnit(Unit):
    index: int
    url: str
    data: bytes
    resume: object = None
    start = 0
    end = None
    size = None

    def open(self):
        return MemoryStream(self)


class MemoryStream(UnitStream):
    """Bytes held in memory; errors name the record's number as a third party's source might."""

    def __init__(self, unit):
        super().__init__(unit.url)
        self._f = io.BytesIO(unit.data[unit.resume[0] if unit.resume else 0 :])

    def readinto(self, b):
        return self._f.readinto(b)

    def describe(self, pos):
        return f"{self.url} (byte {pos} in memory)"


STORE = {}  # name -> bytes: what mem://name reads


class MemorySource(Source):
    """``mem://name``: one unit per name, the bytes of ``STORE[name]``."""

    def plan(self, urls, *, splittable, compression, task_num, unit_bytes, options, first_index):
        missing = [u for u in urls if u[len("mem://") :] not in STORE]
        if missing:
            raise SourceError(f"{missing[0]}: no such name in memory", source=missing[0])
        return [MemoryUnit(first_index + i, u, STORE[u[len("mem://") :]]) for i, u in enumerate(urls)]


@pytest.fixture
def memory_source(tmp_path, monkeypatch):
    """``MemorySource`` installed as a third party would: a distribution on sys.path whose entry point in the
    ``ingest.sources`` group names it."""
    dist = tmp_path / "ingest_memory-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: ingest-memory\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(f"[{registry.ENTRY_POINTS}]\nmem = test_sources:MemorySource\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    registry._registered.cache_clear()
    registry._load.cache_clear()
    STORE.clear()
    yield STORE
    registry._registered.cache_clear()
    registry._load.cache_clear()


def test_a_third_party_source_reads_like_files(memory_source):
    memory_source["ads"] = ADS.read_bytes()
    assert type(source_for("mem://ads")).__name__ == "MemorySource" and "mem" in registry.schemes()
    expected = read_samples(make_reader([str(ADS)], sparse=("item", "user"), label_count=2, batch_size=100))
    got = read_samples(make_reader(["mem://ads", str(ADS)], sparse=("item", "user"), label_count=2, batch_size=100))
    assert got == expected + expected


def test_a_third_party_source_resumes_exactly(memory_source):
    memory_source["ads"] = ADS.read_bytes()
    reader = make_reader(["mem://ads"], sparse=("item",), label_count=2, batch_size=64, enable_state=True).startup()
    first = [next(reader) for _ in range(3)]
    state = reader.state()
    reader.shutdown()
    rest = read_samples(make_reader(["mem://ads"], sparse=("item",), label_count=2, batch_size=64).restore(state))
    whole = read_samples(make_reader(["mem://ads"], sparse=("item",), label_count=2, batch_size=64))
    assert sum(b.size for b in first) + len(rest) == len(whole) and rest == whole[-len(rest) :]


def test_errors_of_a_third_party_source_name_it(memory_source):
    memory_source["bad"] = b"not a sample line\n"
    with pytest.raises(DataError) as err:
        read_samples(make_reader(["mem://bad"], sparse=("item",)))
    assert "mem://bad (byte 0 in memory)" in str(err.value)
    with pytest.raises(SourceError, match="mem://nothing: no such name"):
        read_samples(make_reader(["mem://nothing"], sparse=("item",)))


def test_register_refuses_to_take_a_scheme_over(monkeypatch):
    table = {"kafka": "ingest.sources.kafka:KafkaSource"}  # a registry of this test's own
    monkeypatch.setattr(registry, "_registered", lambda: table)
    with pytest.raises(ConfigError, match="registered for kafka:// already"):
        register("kafka", MemorySource)
    register("kafka", MemorySource, clobber=True)  # clears the loaded sources
    assert isinstance(source_for("kafka://b/t"), MemorySource)
    registry._load.cache_clear()  # the next test loads ingest's own again


def test_files_take_no_options():
    with pytest.raises(ConfigError, match="takes no options"):
        source_for("x.txt").options(anything=1)
