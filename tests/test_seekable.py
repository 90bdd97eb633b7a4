"""zstd files of frames that begin at sample groups: written by convert, cut into work units by the reader."""

import gc
import io
import re
import struct
import threading
import time
from collections import Counter

import numpy as np
import pytest
import zstandard

import ingest
from ingest import synthetic
from ingest.convert import convert
from ingest.formats.protobuf import ProtobufFormat
from ingest.pipeline.stages import UnitDone, UnitStart, read_units
from ingest.pipeline.stats import Stats
from ingest.pool import BufferPool
from ingest.sources import FileRange, compression, expand_paths, plan_units, seekable
from ingest.sources.files import source as file_source
from ingest.sources.files.source import open_file
from ingest.sources.compression import FrameReader
from ingest.sources.seekable import FramedZstdWriter, frame_table, group_frames
from conftest import flatten, make_reader, read_synthetic

QUIET = {"log": lambda *a: None}
FRAME = 64 << 10  # frames of the tests' files: convert writes ~300 KB of pb at a time, so a frame holds one write


@pytest.fixture(scope="module")
def files(tmp_path_factory, synthetic_file):
    out = tmp_path_factory.mktemp("seekable")
    aux = convert([str(synthetic_file)], str(out / "ads.pb"), aux="auto", **QUIET)["aux"]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(seekable, "FRAME_BYTES", FRAME)
        convert([str(synthetic_file)], str(out / "ads.pb.zst"), aux=aux, **QUIET)
        convert([str(out / "ads.pb")], str(out / "back.txt.zst"), **QUIET)
    return {"pb": out / "ads.pb", "zst": out / "ads.pb.zst", "txt.zst": out / "back.txt.zst", "aux": aux}


def _framed(writes, frame_bytes):
    out = io.BytesIO()
    writer = FramedZstdWriter(out, 2, frame_bytes)
    for data in writes:
        writer.write(data)
    writer.close()
    return out.getvalue()


def test_frames_begin_at_writes_and_the_seek_table_finds_them():
    writes = [bytes([k]) * (100 + 37 * k) for k in range(60)]
    data = _framed(writes, 1000)
    whole = b"".join(writes)
    # any zstd decoder reads the file: the mark and the seek table are skippable frames
    assert zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data), read_across_frames=True).read() == whole
    frames = group_frames(io.BytesIO(data), len(data))
    boundaries = {0}
    for w in writes:
        boundaries.add(max(boundaries) + len(w))
    assert len(frames) > 5 and frames[0] == (0, 0) and frames[-1][1] == len(whole)
    assert all(d in boundaries for _, d in frames)  # a frame begins where a write did
    for (c0, d0), (c1, d1) in zip(frames, frames[1:]):  # each frame decompresses alone to its bytes
        assert zstandard.ZstdDecompressor().decompressobj().decompress(data[c0:c1]) == whole[d0:d1]
    # the seek table is zstd's Seekable Format: frame count, descriptor, magic at the end
    count, descriptor, magic = struct.unpack("<IBI", data[-9:])
    assert (count, descriptor, magic) == (len(frames), 0, 0x8F92EAB1)  # the data frames and the mark


def test_files_without_the_mark_or_a_table_that_adds_up_are_not_cut(tmp_path):
    data = _framed([b"x" * 5000] * 10, 1000)
    assert group_frames(io.BytesIO(data), len(data)) is not None
    plain = zstandard.ZstdCompressor().compress(b"x" * 50000)
    assert group_frames(io.BytesIO(plain), len(plain)) is None
    table_at = _table_at(data)
    mark = len(seekable.MARK) + 8
    # another tool's seekable file: the same frames and a table, no mark
    other = data[: table_at - mark] + _table_without_mark(data, table_at, mark)
    assert zstandard.ZstdDecompressor().stream_reader(io.BytesIO(other), read_across_frames=True).read() == b"x" * 50000
    assert group_frames(io.BytesIO(other), len(other)) is None
    (tmp_path / "other.zst").write_bytes(other)  # read by its table's frames all the same
    assert _unit_bytes(tmp_path / "other.zst") == b"x" * 50000
    for damaged in (data + b"\0", b"\0" + data, data[:-1], data[:5]):
        assert group_frames(io.BytesIO(damaged), len(damaged)) is None


def _unit_bytes(path):
    """What the reader's stream of ``path`` (a .zst file, one unit) gives."""
    size = path.stat().st_size
    with open_file(FileRange(0, str(path), 0, None, size, "zstd")) as stream:
        return stream.read()


def _decompressions(monkeypatch):
    """The decompressed size of every frame ``FrameReader`` decompresses from now on, in a list."""
    decompress, calls = FrameReader._decompress, []
    monkeypatch.setattr(FrameReader, "_decompress", lambda self, c, d: calls.append(d) or decompress(self, c, d))
    return calls


def test_the_frames_of_a_seek_table_are_decompressed_one_call_each_and_read_out_in_any_slices(tmp_path, monkeypatch):
    writes = [bytes([k]) * (100 + 37 * k) for k in range(60)]
    data, whole = _framed(writes, 1000), b"".join(writes)
    sizes = frame_table(io.BytesIO(data), len(data))
    for n in (1, 7, 1000, 4096, 1 << 20):
        reader, out = FrameReader(io.BytesIO(data), sizes), []
        while len(chunk := reader.read(n)):
            assert 0 < len(chunk) <= n
            out.append(bytes(chunk))
        assert b"".join(out) == whole
    calls = _decompressions(monkeypatch)
    path = tmp_path / "framed.zst"
    path.write_bytes(data)
    assert _unit_bytes(path) == whole
    assert calls == [d for _, d in sizes] and len(calls) > 5  # every frame, the mark's (empty) too


def test_a_resumed_unit_passes_over_the_frames_before_its_position_undecompressed(tmp_path, monkeypatch):
    writes = [bytes([k]) * (100 + 37 * k) for k in range(60)]
    data, whole = _framed(writes, 1000), b"".join(writes)
    path = tmp_path / "framed.zst"
    path.write_bytes(data)
    starts = [d for _, d in group_frames(io.BytesIO(data), len(data))]
    calls = _decompressions(monkeypatch)
    for position in (0, 1, starts[3] - 1, starts[3], starts[3] + 5, len(whole) - 1):
        calls.clear()
        unit = FileRange(0, str(path), 0, None, len(data), "zstd", resume=(position,))
        with open_file(unit) as stream:
            assert stream.read() == whole[position:]
        first = max(k for k, start in enumerate(starts) if start <= position)  # the frame the position is in
        assert len(calls) == len(starts) - first  # that frame, the ones after it and the mark's


def test_a_closed_unit_holds_no_frame_buffer(files, monkeypatch):
    """A unit's frames go back to the pool when its stream closes, not when the garbage collector finds the
    read-ahead's cycle (its thread refers to it): else each pass over a file leased frames anew, and the pool grew
    with the passes. A reader that ends, or is shut down early, lets go of the pool's free frames."""
    pool = BufferPool()
    monkeypatch.setattr(compression, "_FRAME_BUFFERS", pool)
    reader = synthetic.declare(make_reader([files["zst"]], file_type="pb", epochs=(4,)), aux=files["aux"])
    gc.disable()
    try:
        read = sum(batch.size for batch in reader.startup())
        held = pool.in_use()
    finally:
        gc.enable()
    assert read == 4 * 3000 and pool.allocated > 0 and held == 0 and pool.held_bytes() == 0
    reader = synthetic.declare(make_reader([files["zst"]], file_type="pb", threads=2), aux=files["aux"])
    next(reader.startup())
    assert pool.held_bytes() > 0
    reader.shutdown()
    assert pool.held_bytes() == 0


def test_a_seek_table_that_does_not_fit_its_frames_is_an_error_never_other_bytes(tmp_path):
    data = _framed([bytes([k]) * 3000 for k in range(10)], 5000)
    sizes = frame_table(io.BytesIO(data), len(data))
    table_at = _table_at(data)
    (c0, d0), (c1, d1) = sizes[:2]
    # a frame's size off by one either way fails that frame; a byte of the next frame given to it fails the next
    for entries, failed_at in (
        ([(c0, d0 + 1), (c1, d1)], 0),
        ([(c0, d0 - 1), (c1, d1)], 0),
        ([(c0 + 1, d0), (c1 - 1, d1)], d0),
    ):
        lying = bytearray(data)
        lying[table_at + 8 : table_at + 24] = struct.pack("<IIII", *entries[0], *entries[1])
        path = tmp_path / "lying.zst"
        path.write_bytes(bytes(lying))
        assert frame_table(io.BytesIO(lying), len(lying)) is not None  # it adds up: the frames tell
        with pytest.raises(ingest.SourceError, match=rf"lying.zst: cannot read bytes {failed_at}-\d+ of the stream"):
            _unit_bytes(path)


def _table_at(data):
    """Where the seek table of framed ``data`` begins: its skippable frame's 8-byte header, then 8 bytes an entry
    (compressed, decompressed size), then the 9-byte footer that counts them."""
    return len(data) - (8 + 8 * struct.unpack("<I", data[-9:-5])[0] + 9)


def _table_without_mark(data, table_at, mark):
    count = struct.unpack("<I", data[-9:-5])[0]
    entries = data[table_at + 8 : table_at + 8 + 8 * (count - 1)]
    body = entries + struct.pack("<IBI", count - 1, 0, 0x8F92EAB1)
    return struct.pack("<II", 0x184D2A5E, len(body)) + body


def test_convert_cuts_pb_zst_into_units_of_frames_that_read_like_the_plain_pb(files):
    units = plan_units(expand_paths([str(files["zst"])]), unit_bytes=30_000)
    assert len(units) >= 4 and all(u.compression == "zstd" and u.aligned for u in units)
    assert units[0].start == 0 and all(a.end == b.start for a, b in zip(units, units[1:]))
    assert [u.origin for u in units] == sorted({u.origin for u in units})
    aux = files["aux"]
    want = read_synthetic([files["pb"]], "pb", aux)
    assert read_synthetic([files["zst"]], "pb", aux, unit_bytes=(30_000,), threads=(2,)) == want
    assert read_synthetic([files["zst"]], "pb", aux, unit_bytes=(30_000,), threads=(0,)) == want

    def ordered(path, **options):
        reader = synthetic.declare(make_reader([path], file_type="pb", batch_size=(256,), **options), aux=aux)
        return [(s["sid"], str(s)) for b in reader.startup() for s in flatten(b)]

    plain = ordered(files["pb"])
    assert ordered(files["zst"], unit_bytes=(30_000,), threads=(2,), deterministic=(True,)) == plain
    reader = synthetic.declare(make_reader([files["zst"]], file_type="pb", unit_bytes=(30_000,)), aux=aux)
    list(reader.startup())
    assert reader.stats()["units"] == len(units)


def test_a_reader_alone_reads_a_framed_file_as_one_unit_and_shards_cut_it_in_runs_of_8_mib(tmp_path, monkeypatch):
    """One unit keeps two cores busy (parsing, and decompression ahead); shards need runs to share the file out,
    and a run's fixed costs (a thread, its first chunk) call for runs of MIN_RUN at least unless unit_bytes says
    otherwise."""
    from ingest.sources.files import source

    noise = np.random.default_rng(0).integers(0, 256, 3 << 20, np.uint8).tobytes()  # 3 MB that do not compress
    path = tmp_path / "noise.pb.zst"
    path.write_bytes(_framed([noise[k : k + (64 << 10)] for k in range(0, len(noise), 64 << 10)], 64 << 10))
    found = expand_paths([str(path)])
    runs = plan_units(found, unit_bytes=1 << 20)
    assert len(runs) == 3 and all(b.start - a.start >= 1 << 20 for a, b in zip(runs, runs[1:]))
    assert len(plan_units(found)) == 1 and len(plan_units(found, task_num=2)) == 1  # under the 8 MiB floor
    monkeypatch.setattr(source, "MIN_RUN", 0)
    assert len(plan_units(found)) == 1
    assert [(u.start, u.end) for u in plan_units(found, task_num=2)] == [(u.start, u.end) for u in runs]


def test_text_written_by_convert_stays_one_unit(files):
    """Its writes end inside groups: text outputs are one frame, read as one unit."""
    [unit] = plan_units(expand_paths([str(files["txt.zst"])]), unit_bytes=10_000)
    assert unit.end is None and unit.start == 0


def test_shards_of_one_framed_file_cover_it_exactly_once(files):
    aux = files["aux"]
    whole = Counter(read_synthetic([files["pb"]], "pb", aux))
    parts = [read_synthetic([files["zst"]], "pb", aux, shard=(i, 3), unit_bytes=(30_000,)) for i in range(3)]
    assert all(len(p) > 500 for p in parts)
    assert Counter(s for p in parts for s in p) == whole


def _damaged(files, tmp_path, at, data):
    """The framed file with ``data`` written over its bytes from ``at`` on, and the unit that holds them."""
    packed = bytearray(files["zst"].read_bytes())
    units = plan_units([(str(files["zst"]), len(packed))], unit_bytes=30_000)
    hit = units[len(units) // 2]
    at = at(hit)
    packed[at : at + len(data)] = data
    path = tmp_path / "bad.pb.zst"
    path.write_bytes(bytes(packed))
    return path, units, hit


def _error_of(path, aux, exc, **options):
    reader = synthetic.declare(make_reader([path], file_type="pb", **options), aux=aux)
    with pytest.raises(exc) as err:
        list(reader.startup())
    return err.value


def test_a_corrupt_frame_names_the_decompressed_bytes_of_the_whole_file(files, tmp_path):
    path, units, hit = _damaged(files, tmp_path, lambda u: u.start, b"\0\0\0\0")  # the frame's magic number
    err = _error_of(path, files["aux"], ingest.SourceError, unit_bytes=(30_000,))
    first = int(re.search(r"cannot read bytes (\d+)-\d+ of the stream", str(err)).group(1))
    assert str(path) in str(err) and first == hit.origin > 0


@pytest.mark.parametrize("threads", [0, 2])
def test_a_seek_table_that_gives_a_frame_0_bytes_is_an_error_not_a_lost_frame(files, tmp_path, threads):
    """A unit passes over the frames before where it starts by their sizes in the table: one of 0 bytes, at a
    unit's start, was passed over unread (its samples lost, no error)."""
    packed = bytearray(files["zst"].read_bytes())
    middle = len(frame_table(io.BytesIO(packed), len(packed))) // 2
    struct.pack_into("<I", packed, _table_at(packed) + 8 + 8 * middle + 4, 0)  # its decompressed size: 0 bytes
    path = tmp_path / "zero.pb.zst"
    path.write_bytes(bytes(packed))
    err = _error_of(path, files["aux"], ingest.SourceError, unit_bytes=(30_000,), threads=threads)
    assert str(path) in str(err) and "holds more than the 0 bytes its seek table gives" in str(err)


def test_a_record_a_corrupt_frame_garbles_is_named_as_a_read_of_the_whole_file_names_it(files, tmp_path):
    """Record numbers count from the file's start, whichever unit meets the record."""
    path, _, hit = _damaged(files, tmp_path, lambda u: (u.start + u.end) // 2, b"\x55" * 40)
    cut = _error_of(path, files["aux"], ingest.DataError, unit_bytes=(30_000,))
    whole = _error_of(path, files["aux"], ingest.DataError)
    assert cut.offset > hit.origin and str(cut) == str(whole) and "record" in str(cut)


def test_a_reader_stopped_early_leaves_no_unit_opened_ahead(files, monkeypatch):
    """The next unit of a framed file opens while the current one is read; shutdown closes both (and the autouse
    fixture checks that no read-ahead thread is left)."""
    opened = []
    real_init = file_source.ReadAhead.__init__

    def init(self, *args, **kwargs):
        opened.append(self)
        real_init(self, *args, **kwargs)

    monkeypatch.setattr(file_source.ReadAhead, "__init__", init)
    reader = synthetic.declare(
        make_reader([files["zst"]], file_type="pb", unit_bytes=(30_000,), batch_size=(64,)), aux=files["aux"]
    )
    next(iter(reader.startup()))
    deadline = time.monotonic() + 10
    while len(opened) < 2 and time.monotonic() < deadline:  # the unit read, and the next one opened ahead
        time.sleep(0.01)
    assert len(opened) >= 2 and not opened[-1].closed
    reader.shutdown()
    assert all(f.closed for f in opened)


def test_a_unit_opened_ahead_raises_its_error_in_its_turn(files, tmp_path):
    """The second unit cannot open: the first one's blocks all come, then its error."""
    schema = synthetic.declare(make_reader([files["pb"]], file_type="pb"), aux=files["aux"]).schema
    [good] = plan_units(expand_paths([str(files["zst"])]))
    missing = FileRange(1, str(tmp_path / "gone.pb.zst"), 0, None, 10, "zstd")
    items = []
    with pytest.raises(ingest.SourceError, match="gone.pb.zst"):
        for item in read_units([(0, good), (0, missing)], ProtobufFormat(schema), threading.Event(), Stats(), True):
            items.append(item)
    assert isinstance(items[0], UnitStart) and isinstance(items[-2], UnitDone) and items[-1] == UnitStart((0, 1), 0)
    assert sum(item.nrows for item in items[1:-2]) == 3000


def test_only_a_unit_that_opens_ahead_takes_the_next_with_it(files):
    """A Kafka partition never ends: taking the unit after it early would keep that unit from every other
    worker.  A compressed file's unit ends, and takes the next with it."""
    from ingest.pipeline.stages import _opened_ahead

    plain = FileRange(0, str(files["pb"]), 0, None, None, None)
    [framed] = plan_units(expand_paths([str(files["zst"])]))
    taken = []

    def units():
        for k, unit in enumerate([plain, plain, framed, plain]):
            taken.append(k)
            yield 0, unit

    pairs = _opened_ahead(units())
    assert next(pairs)[2] is None and taken == [0]
    assert next(pairs)[2] is None and taken == [0, 1]
    _, unit, opened = next(pairs)
    assert unit is framed and taken == [0, 1, 2, 3]
    opened.close()
    assert next(pairs)[1] is plain
    pairs.close()
