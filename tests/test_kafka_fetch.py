"""The Kafka fetch path without a broker (native/kafka.py, DirectFetch._messages): record batches written by
kafka-python's own builder, walked by the kernels, against kafka-python's reader and a Python walker;
compression, control batches, CRCs, errors, growth of the output arrays, and ``gather``."""

import struct
from types import SimpleNamespace

import crc32c
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from kafka import codec
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from kafka.record.legacy_records import LegacyRecordBatchBuilder

from ingest._native import kafka as K
from ingest.errors import SourceError
from ingest.sources.kafka import fetch as kafka_fetch
from ingest.sources.kafka.fetch import DirectFetch

URL = "kafka://broker:9092/t:0"
INT64_MAX = np.iinfo(np.int64).max
GZIP, SNAPPY, LZ4, ZSTD = 1, 2, 3, 4
# codecs kafka-python can write here (the reader's own decoders: gzip, pyarrow's lz4, zstandard, python-snappy)
WRITABLE = [
    c
    for c, ok in (
        (GZIP, codec.has_gzip()),
        (SNAPPY, codec.has_snappy()),
        (LZ4, codec.has_lz4()),
        (ZSTD, codec.has_zstd()),
    )
    if ok
]
DECODE = {GZIP: codec.gzip_decode, SNAPPY: codec.snappy_decode, LZ4: codec.lz4_decode, ZSTD: codec.zstd_decode}
CODECS = [
    pytest.param(
        c,
        id=name,
        marks=pytest.mark.skipif(
            c not in WRITABLE, reason=f"{name}: kafka-python finds no library to write it (pip install {lib})"
        ),
    )
    for c, name, lib in (
        (GZIP, "gzip", "-"),
        (SNAPPY, "snappy", "python-snappy"),
        (LZ4, "lz4", "lz4"),
        (ZSTD, "zstd", "zstandard"),
    )
]


# -- batches written by kafka-python -------------------------------------------------------------------------
def batch(base, records, compression=0, transactional=False, same_time=False):
    """The bytes of a v2 batch at offset ``base`` holding ``records`` (offset delta, key, value, headers),
    written by kafka-python's producer-side builder (which sends it uncompressed when compressing does not
    pay)."""
    b = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=compression,
        is_transactional=transactional,
        producer_id=7 if transactional else -1,
        producer_epoch=0 if transactional else -1,
        base_sequence=0 if transactional else -1,
        batch_size=1 << 30,
    )
    for delta, key, value, headers in records:
        assert b.append(
            delta, timestamp=1_700_000_000_000 + (0 if same_time else delta), key=key, value=value, headers=headers
        )
    raw = bytearray(b.build())
    struct.pack_into(">q", raw, 0, base)  # the broker's part; outside the CRC
    return raw


def patched(raw, attributes=None, last_delta=None, count=None, magic=None, length=None):
    """``raw`` with header fields replaced and the CRC recomputed, as a writer of such a batch would."""
    raw = bytearray(raw)
    for fmt, at, value in (
        (">h", 21, attributes),
        (">i", 23, last_delta),
        (">i", 57, count),
        (">b", 16, magic),
        (">i", 8, length),
    ):
        if value is not None:
            struct.pack_into(fmt, raw, at, value)
    struct.pack_into(">I", raw, 17, crc32c.crc32c(bytes(raw[21:])))
    return raw


def control_batch(base, commit=True):
    """A transaction marker: a transactional batch with the control bit, one control record."""
    raw = batch(base, [(0, struct.pack(">hh", 0, int(commit)), struct.pack(">hi", 0, 3), [])], transactional=True)
    return patched(raw, attributes=0x30)


def attributes_of(raw):
    return struct.unpack_from(">h", raw, 21)[0]


def fetcher(check_crcs=True, rows=1 << 16, checks=1 << 12):
    """A DirectFetch with no connection, as ``_messages`` uses it (output arrays of ``rows`` and ``checks``)."""
    f = object.__new__(DirectFetch)
    f.url = URL
    f.check_crcs = check_crcs
    f.partition_bytes = 1 << 20
    f.out = [np.empty(rows, np.int64) for _ in range(3)]
    f.checks = np.empty((checks, 3), np.int64)
    return f


def values_of(messages):
    """``[(offset, value)]`` of a list of Messages."""
    return [
        (int(o), bytes(m.buf[s : s + n]))
        for m in messages
        for o, s, n in zip(m.offsets.tolist(), m.starts.tolist(), m.lens.tolist())
    ]


# -- the twin: a Python walker of batch headers, kafka-python's reader for the records ----------------------
class Batch(SimpleNamespace):
    """One whole batch: ``start``/``stop`` byte positions, ``base``, ``next_offset``, ``crc``, ``count``,
    ``compression``, ``control`` and ``records`` ([(offset, value)], none for a control batch)."""


def batches_of(data, p=0):
    """The whole batches of ``data`` from byte ``p``, and the position after the last."""
    out = []
    while p + 12 <= len(data):
        length = struct.unpack_from(">i", data, p + 8)[0]
        if p + 12 + length > len(data):
            break
        rb = DefaultRecordBatch(bytes(data[p : p + 12 + length]))
        assert rb.magic == 2
        records = [] if rb.is_control_batch else [(r.offset, r.value or b"") for r in rb]
        out.append(
            Batch(
                start=p,
                stop=p + 12 + length,
                base=rb.base_offset,
                next_offset=rb.next_offset,
                crc=rb.crc,
                count=rb.records_count,
                compression=rb.compression_type,
                control=rb.is_control_batch,
                records=records,
            )
        )
        p += 12 + length
    return out, p


def scan_twin(data, p, first, last, rows, nchecks):
    """What ``scan_batches`` gives: ``(status, [(offset, value)], [(crc from, to, crc)], p, next offset)``."""
    batches, end = batches_of(data, p)
    records, checks, next_offset = [], [], first
    for b in batches:
        if len(checks) == nchecks or not b.compression and len(records) + b.count > rows:  # compressed: not here
            return K.FULL, records, checks, b.start, next_offset
        checks.append((b.start + 21, b.stop, b.crc))
        if b.compression:
            return K.COMPRESSED, records, checks, b.start, next_offset
        records += [r for r in b.records if first <= r[0] < last]
        next_offset = max(next_offset, b.next_offset)
    return K.DONE, records, checks, end, next_offset


def messages_twin(data, first, end):
    """What ``_messages`` gives: ``([[(offset, value)] per Messages], next offset)``, one Messages per run of
    uncompressed batches and one per compressed batch (none without messages in range); None when the
    response holds bytes but no whole batch."""
    batches, _ = batches_of(data)
    if data and not batches:
        return None
    last = INT64_MAX if end is None else end
    chunks, run, next_offset = [], [], first
    for b in batches:
        got = [r for r in b.records if first <= r[0] < last]
        if b.compression:
            chunks += [c for c in (run, got) if c]
            run = []
        else:
            run += got
        next_offset = max(next_offset, b.next_offset)
    return chunks + ([run] if run else []), next_offset


# -- generated fetch responses -------------------------------------------------------------------------------
_key = st.one_of(st.none(), st.binary(max_size=8))
_value = st.one_of(
    st.none(), st.just(b""), st.binary(max_size=40), st.sampled_from([b"a" * 64, b"abc" * 30, bytes(200)])
)  # compressible, so batches do compress
_headers = st.lists(st.tuples(st.text(max_size=4), st.one_of(st.none(), st.binary(max_size=6))), max_size=2)


@st.composite
def responses(draw, codecs=(), min_batches=0):
    """``(record bytes, first, end)``: whole v2 batches at increasing offsets (data batches, some
    transactional, some compressed with ``codecs``, with gaps in their offsets left by compaction; batches of
    40-300 empty values; control batches; empty batches), maybe a batch cut short after them, and the bounds
    of a fetch."""
    data = bytearray()
    start = offset = draw(st.integers(0, 1 << 40))
    for _ in range(draw(st.integers(min_batches, 5))):
        offset += draw(st.integers(0, 3))
        kind = draw(st.sampled_from(["data"] * 5 + ["control", "empty", "many"]))
        if kind == "many":
            raw = batch(
                offset,
                [(d, None, draw(st.sampled_from([None, b""])), []) for d in range(draw(st.integers(40, 300)))],
                draw(st.sampled_from([0] + list(codecs))),
            )
        elif kind == "control":
            raw = control_batch(offset, draw(st.booleans()))
        elif kind == "empty":
            raw = patched(batch(offset, []), last_delta=draw(st.integers(-1, 3)))
        else:
            first_delta = draw(st.sampled_from([0, 0, 0, 1, 5]))
            gaps = draw(st.lists(st.sampled_from([1, 1, 1, 2, 7]), max_size=7))
            deltas = np.cumsum([first_delta] + gaps).tolist()
            raw = batch(
                offset,
                [(d, draw(_key), draw(_value), draw(_headers)) for d in deltas],
                draw(st.sampled_from([0] + list(codecs))),
                draw(st.booleans()),
            )
            tail = draw(st.sampled_from([0, 0, 2]))  # records at the end removed by compaction
            if tail:
                raw = patched(raw, last_delta=deltas[-1] + tail)
        data += raw
        offset += struct.unpack_from(">i", raw, 23)[0] + 1
    if draw(st.booleans()):  # the batch the broker cut at the fetch size
        raw = batch(offset, [(0, None, draw(_value), []), (1, b"k", b"v" * 30, [])])
        data += raw[: draw(st.integers(1, len(raw) - 1))]
    first = draw(st.integers(max(0, start - 2), offset + 2))
    end = draw(st.one_of(st.none(), st.integers(max(0, start - 2), offset + 2)))
    return bytes(data), first, end


# -- scan_batches and walk_records -------------------------------------------------------------------------
@settings(max_examples=150, deadline=None)
@given(responses(codecs=WRITABLE), st.sampled_from([0, 1, 3, 1024]), st.sampled_from([0, 1, 2, 64]))
def test_scan_batches_matches_the_walker(case, rows, nchecks):
    """Status, messages (offset, value bytes), CRC ranges, stop position and next offset of each call, walking
    on after compressed batches as the caller does; FULL exactly when a batch's records or its CRC row do not fit."""
    data, first, end = case
    last = INT64_MAX if end is None else end
    buf = np.frombuffer(data, np.uint8)
    p = 0
    while True:
        offsets, starts, lens = (np.full(rows, -7, np.int64) for _ in range(3))
        checks = np.full((nchecks, 3), -7, np.int64)
        status, k, n, at, next_offset = K.scan_batches(buf, p, first, last, offsets, starts, lens, checks)
        got = [
            (o, bytes(data[s : s + m])) for o, s, m in zip(offsets[:k].tolist(), starts[:k].tolist(), lens[:k].tolist())
        ]
        assert (status, got, [tuple(c) for c in checks[:n].tolist()], at, next_offset) == scan_twin(
            data, p, first, last, rows, nchecks
        )
        if status != K.COMPRESSED:
            break
        p = at + 12 + struct.unpack_from(">i", data, at + 8)[0]


@settings(max_examples=100, deadline=None)
@given(responses(codecs=WRITABLE, min_batches=1))
def test_walk_records_of_decompressed_batches(case):
    """walk_records over the decompressed records of each batch: kafka-python's offsets and values in range."""
    data, first, end = case
    last = INT64_MAX if end is None else end
    for b in batches_of(data)[0]:
        if b.control:
            continue
        payload = data[b.start + K.BATCH_HEADER : b.stop]
        if b.compression:
            payload = DECODE[b.compression](payload)
        records = np.frombuffer(payload, np.uint8)
        arrays = [np.full(b.count, -7, np.int64) for _ in range(3)]
        k = K.walk_records(records, 0, len(records), b.base, b.count, first, last, *arrays, 0)
        assert [(o, bytes(records[s : s + n])) for o, s, n in zip(*(a[:k].tolist() for a in arrays))] == [
            r for r in b.records if first <= r[0] < last
        ]


# -- DirectFetch._messages ---------------------------------------------------------------------------------
def drain(messages, size):
    """The values of ``messages`` read through ``gather`` ``size`` bytes at a time, as the reader does."""
    out, got = np.empty(size, np.uint8), bytearray()
    for m in messages:
        i = within = 0
        while i < len(m.starts):
            i, within, n = K.gather(m.buf, m.starts, m.lens, i, within, out, 0)
            got += out[:n].tobytes()
    return bytes(got)


@settings(max_examples=150, deadline=None)
@given(
    responses(codecs=WRITABLE),
    st.sampled_from([1, 2, 5, 1 << 16]),
    st.sampled_from([1, 2, 1 << 12]),
    st.integers(1, 50),
)
def test_messages_match_kafka_python(case, rows, nchecks, size):
    """Offsets and values of every message in range, in order, and the next offset, as kafka-python reads them;
    one Messages per run of uncompressed batches and per compressed batch (when the arrays need not grow);
    a response with bytes but no whole batch is a SourceError."""
    data, first, end = case
    want = messages_twin(data, first, end)
    f = fetcher(rows=rows, checks=nchecks)
    if want is None:
        with pytest.raises(SourceError, match=f"batch at offset {first} is larger than max_partition_fetch_bytes"):
            f._messages(data, first, end)
        return
    got, next_offset = f._messages(data, first, end)
    chunks, want_next = want
    assert next_offset == want_next
    assert values_of(got) == [r for c in chunks for r in c]
    assert all(len(m.offsets) == len(m.starts) == len(m.lens) > 0 for m in got)
    if rows == 1 << 16 and nchecks == 1 << 12:
        assert [values_of([m]) for m in got] == chunks
    assert drain(got, size) == b"".join(v for c in chunks for _, v in c)


@pytest.mark.skipif(
    ZSTD not in WRITABLE, reason="zstd: kafka-python finds no library to write it (pip install zstandard)"
)
def test_a_compressed_batch_of_more_records_than_bytes():
    """70000 empty values, zstd: the record count is over the batch's bytes (0.85 bytes a record) and over the
    initial 65536 rows; every offset comes back, with an empty value."""
    data = batch(5, [(i, None, b"", []) for i in range(70000)], ZSTD, same_time=True)
    assert attributes_of(data) & 7 == ZSTD and len(data) - K.BATCH_HEADER < 70000
    got, next_offset = fetcher()._messages(data, 0, None)
    assert next_offset == 70005 and all((m.lens == 0).all() for m in got)
    assert np.concatenate([m.offsets for m in got]).tolist() == list(range(5, 70005))


@pytest.mark.parametrize("compression", CODECS)
def test_compressed_batches_among_uncompressed(compression):
    """A compressed batch between uncompressed ones: its values decompressed, in its own Messages, in order."""
    values = [b"x" * 50, None, b"", b"header-less " * 8, bytes(range(256))]
    data = (
        batch(10, [(0, b"k", b"first", []), (1, None, b"second", [("h", b"v")])])
        + batch(12, [(i, None, v, []) for i, v in enumerate(values)], compression)
        + batch(20, [(0, None, b"after", [])])
    )
    assert attributes_of(data[batches_of(data)[0][1].start :]) & 7 == compression
    got, next_offset = fetcher()._messages(data, 10, None)
    assert [values_of([m]) for m in got] == [
        [(10, b"first"), (11, b"second")],
        [(12 + i, v or b"") for i, v in enumerate(values)],
        [(20, b"after")],
    ]
    assert next_offset == 21
    got, next_offset = fetcher()._messages(data, 14, 16)  # bounds inside the compressed batch
    assert values_of(got) == [(14, b""), (15, b"header-less " * 8)] and next_offset == 21


@settings(max_examples=50, deadline=None)
@given(responses(codecs=WRITABLE, min_batches=1), st.sampled_from([False, True]))
def test_the_same_bytes_read_twice_by_one_fetcher(case, check_crcs):
    """A fetcher reused (arrays kept, maybe grown): the Messages of a first fetch are not changed by the next."""
    data, first, end = case
    want = messages_twin(data, first, end)
    f = fetcher(check_crcs, rows=2, checks=1)
    got, _ = f._messages(data, first, end)
    before = values_of(got)
    other, _ = f._messages(batch(0, [(i, None, b"other", []) for i in range(9)]), 0, None)
    assert values_of(other) == [(i, b"other") for i in range(9)]
    assert values_of(got) == before == [r for c in want[0] for r in c]


def test_control_batches_give_no_messages_but_advance():
    """Transaction markers (control bit 0x20) are passed over, and the next offset moves past them."""
    data = batch(0, [(0, None, b"a", []), (1, None, b"b", [])], transactional=True) + control_batch(2)
    got, next_offset = fetcher()._messages(data, 0, None)
    assert values_of(got) == [(0, b"a"), (1, b"b")] and next_offset == 3
    got, next_offset = fetcher()._messages(control_batch(5, commit=False) + control_batch(9), 5, None)
    assert got == [] and next_offset == 10
    marker = control_batch(3)
    assert attributes_of(marker) == 0x30 and DefaultRecordBatch(marker).is_control_batch
    got, next_offset = fetcher()._messages(patched(marker, attributes=0x31), 0, None)  # not decompressed
    assert got == [] and next_offset == 4


def test_empty_response_and_offsets_before_first():
    """No bytes: no messages, the next offset is ``first``; a batch wholly before ``first`` only advances it."""
    assert fetcher()._messages(b"", 7, None) == ([], 7)
    assert fetcher()._messages(None, 7, None) == ([], 7)
    data = batch(0, [(0, None, b"a", []), (1, None, b"b", [])])
    assert fetcher()._messages(data, 5, None) == ([], 5)
    got, next_offset = fetcher()._messages(data, 1, None)
    assert values_of(got) == [(1, b"b")] and next_offset == 2


# -- errors ------------------------------------------------------------------------------------------------
def two_batches(compression=0):
    """Two batches at offsets 100 and 200; the second holds value ``b"\\x11" * 24`` (uncompressed, or
    compressed together with its other records)."""
    second = batch(200, [(0, None, b"\x11" * 24, []), (1, None, b"z" * 60, [])], compression)
    return batch(100, [(0, b"k", b"first", [])]) + second, len(batch(100, [(0, b"k", b"first", [])]))


@pytest.mark.parametrize("compression", [pytest.param(0, id="none")] + CODECS)
def test_a_changed_byte_is_a_crc_error_naming_the_batch(compression):
    """A byte changed after the batch was written: a SourceError naming the CRC and the batch's offset."""
    data, at = two_batches(compression)
    bad = bytearray(data)
    i = data.find(b"\x11" * 24) if not compression else len(data) - 3
    assert i > at
    bad[i] ^= 0x40
    with pytest.raises(SourceError, match="the record batch at offset 200 does not match its CRC"):
        fetcher()._messages(bytes(bad), 100, None)


def test_without_check_crcs_the_changed_bytes_pass():
    """check_crcs=False: the same changed bytes are read as they are."""
    data, _ = two_batches()
    bad = bytearray(data)
    bad[data.find(b"\x11" * 24) + 5] = ord("Q")
    got, next_offset = fetcher(check_crcs=False)._messages(bytes(bad), 100, None)
    assert values_of(got) == [(100, b"first"), (200, b"\x11" * 5 + b"Q" + b"\x11" * 18), (201, b"z" * 60)]
    assert next_offset == 202


@settings(max_examples=100, deadline=None)
@given(responses(codecs=WRITABLE, min_batches=1), st.data())
def test_any_changed_byte_under_the_crc_is_caught(case, data):
    """Any byte changed in a whole batch's CRC range is a CRC error naming that batch, whatever batches come
    before it (a changed record count: test_a_corrupted_record_count_does_not_grow_the_arrays)."""
    raw, first, end = case
    batches, _ = batches_of(raw)
    b = data.draw(st.sampled_from(batches))
    i = data.draw(st.sampled_from([j for j in range(b.start + 21, b.stop) if not b.start + 57 <= j < b.start + 61]))
    bad = bytearray(raw)
    bad[i] ^= data.draw(st.integers(1, 255))
    with pytest.raises(SourceError, match=f"the record batch at offset {b.base} does not match its CRC"):
        fetcher()._messages(bytes(bad), first, end)


def test_message_format_v1_is_an_error():
    """A batch with magic 1 (after a good one), and a real v1 message set: SourceError "message format v0/v1"."""
    data, at = two_batches()
    with pytest.raises(SourceError, match="a record batch of message format v0/v1 at offset 200"):
        fetcher()._messages(data[:at] + patched(data[at:], magic=1), 100, None)
    legacy = LegacyRecordBatchBuilder(magic=1, compression_type=0, batch_size=1 << 20)
    legacy.append(0, timestamp=1_700_000_000_000, key=None, value=b"an old-format message, 40 bytes long..")
    raw = bytearray(legacy.build())
    struct.pack_into(">q", raw, 0, 42)
    with pytest.raises(SourceError, match="message format v0/v1 at offset 42"):
        fetcher()._messages(bytes(raw), 42, None)


def test_a_small_v1_message_is_a_format_error():
    """A lone v1 message of a few bytes is named as message format v0/v1 too."""
    legacy = LegacyRecordBatchBuilder(magic=1, compression_type=0, batch_size=1 << 20)
    legacy.append(0, timestamp=1_700_000_000_000, key=None, value=b"hello")
    with pytest.raises(SourceError, match="message format v0/v1"):
        fetcher()._messages(bytes(legacy.build()), 0, None)


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 200), st.integers(0, 1 << 40))
def test_a_first_batch_cut_short_names_max_partition_fetch_bytes(cut, first):
    """Bytes but no whole batch: the first batch is over max_partition_fetch_bytes (or cut short)."""
    raw = batch(first, [(0, None, b"v" * 150, [])])
    with pytest.raises(
        SourceError,
        match=rf"batch at offset {first} is larger than max_partition_fetch_bytes "
        r"\(1048576\) or cut short",
    ):
        fetcher()._messages(bytes(raw[: min(cut, len(raw) - 1)]), first, None)


def test_malformed_batches():
    """Records that run past their batch, a length shorter than a batch header, a negative count: SourceError
    "malformed" naming the batch's offset (CRCs recomputed, so that the walk finds it)."""
    data, at = two_batches()
    second = data[at:]
    for bad in (patched(second, count=3), patched(second, count=-1)):
        with pytest.raises(SourceError, match="a malformed record batch at offset 200"):
            fetcher()._messages(data[:at] + bad, 100, None)
    with pytest.raises(SourceError, match="a malformed record batch at offset 200"):
        fetcher()._messages(data[:at] + patched(second, length=40), 100, None)
    unpatched = bytearray(second)  # the count changed, the CRC not: a CRC error, or malformed without the check
    struct.pack_into(">i", unpatched, 57, 3)
    with pytest.raises(SourceError, match="batch at offset 200 does not match its CRC"):
        fetcher()._messages(data[:at] + unpatched, 100, None)
    with pytest.raises(SourceError, match="a malformed record batch at offset 200"):
        fetcher(check_crcs=False)._messages(data[:at] + unpatched, 100, None)


@pytest.mark.skipif(GZIP not in WRITABLE, reason="needs kafka-python's gzip writer")
def test_compressed_batches_that_do_not_read():
    """A compressed batch whose count is more than its records, whose payload is not of its codec, or whose
    codec is unknown (5): SourceError naming the batch's offset."""
    data, at = two_batches(GZIP)
    second = data[at:]
    assert attributes_of(second) & 7 == GZIP
    with pytest.raises(SourceError, match="malformed compressed record batch at offset 200"):
        fetcher()._messages(data[:at] + patched(second, count=3), 100, None)
    plain, at = two_batches()
    for attributes in (GZIP, ZSTD, 5, 7):
        with pytest.raises(SourceError, match="compressed record batch at offset 200 does not decompress"):
            fetcher()._messages(plain[:at] + patched(plain[at:], attributes=attributes), 100, None)


def test_snappy_without_python_snappy_is_a_source_error(monkeypatch):
    """A snappy batch when python-snappy is missing: a SourceError that says what to install."""
    monkeypatch.setattr(codec, "has_snappy", lambda: False)
    plain, at = two_batches()
    with pytest.raises(SourceError, match="offset 200 does not decompress: .*python-snappy"):
        fetcher()._messages(plain[:at] + patched(plain[at:], attributes=SNAPPY), 100, None)


# -- growth of the output arrays ----------------------------------------------------------------------------
def test_more_records_than_the_output_arrays():
    """A batch of 70000 records (over the initial 65536 rows, at the start of a response) and seven of 10000
    after it: every offset and value comes back."""
    b = DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, 1 << 30)
    for i in range(70000):
        b.append(i, 0, None, i.to_bytes(3, "big"), [])
    big = bytes(b.build())
    small = batch(0, [(i, None, i.to_bytes(3, "big"), []) for i in range(10000)])
    parts = [big]
    for j in range(7):
        struct.pack_into(">q", small, 0, 70000 + 10000 * j)
        parts.append(bytes(small))
    got, next_offset = fetcher()._messages(b"".join(parts), 0, None)
    offsets = np.concatenate([m.offsets for m in got])
    assert next_offset == 140000 and offsets.tolist() == list(range(140000))
    assert all((m.lens == 3).all() for m in got)
    values = np.concatenate([m.buf[m.starts[:, None] + np.arange(3)] for m in got]).astype(np.int64)
    assert (
        (values[:, 0] << 16) + (values[:, 1] << 8) + values[:, 2]
        == np.concatenate([np.arange(70000)] + [np.arange(10000)] * 7)
    ).all()


def test_more_batches_than_the_crc_rows():
    """5000 one-record batches (over the initial 4096 CRC rows): all read, and a CRC error in batch 4500 is
    still caught."""
    one = batch(0, [(0, None, b"v", [])])
    parts = []
    for j in range(5000):
        struct.pack_into(">q", one, 0, 3 * j)
        parts.append(bytes(one))
    data = b"".join(parts)
    got, next_offset = fetcher()._messages(data, 0, None)
    assert values_of(got) == [(3 * j, b"v") for j in range(5000)] and next_offset == 3 * 4999 + 1
    bad = bytearray(data)
    bad[4501 * len(one) - 3] ^= 1
    with pytest.raises(SourceError, match=f"batch at offset {3 * 4500} does not match its CRC"):
        fetcher()._messages(bytes(bad), 0, None)


def test_a_corrupted_record_count_does_not_grow_the_arrays():
    """A byte changed in the record count is a CRC error, without arrays sized by the bad count."""
    raw = batch(0, [(0, None, b"hello", [])])
    raw[58] ^= 0x20  # count 1 -> 2 ** 21 + 1
    f = fetcher()
    with pytest.raises(SourceError, match="does not match its CRC|malformed"):
        f._messages(bytes(raw), 0, None)
    assert len(f.out[0]) == 1 << 16


# -- errors that are not the network's are not retried -----------------------------------------------------
def test_a_bad_batch_is_not_retried(monkeypatch):
    """A fetch response with a corrupt batch is a SourceError at once, not reconnects for RETRY_FOR_S."""
    data, _ = two_batches()
    bad = bytearray(data)
    bad[-5] ^= 1
    calls = []

    class Conn:
        def call(self, request, response_class, version):
            calls.append(version)
            part = SimpleNamespace(error_code=0, records=bytes(bad), aborted_transactions=None)
            return SimpleNamespace(error_code=0, responses=[SimpleNamespace(partitions=[part])])

        def close(self):
            pass

    f = fetcher()
    f.topic, f.partition, f.max_bytes, f.conn = "t", 0, 1 << 20, Conn()
    f.cluster = SimpleNamespace(
        timeout_s=1.0, isolation=0, connect=lambda *_: Conn(), leaders=lambda _: {0: ("broker", 9092)}
    )
    monkeypatch.setattr(kafka_fetch, "RETRY_FOR_S", 0.3)
    with pytest.raises(
        SourceError, match="^kafka://broker:9092/t:0: the record batch at offset 200 does not match its CRC"
    ):
        f.fetch(100, None, 10)
    assert len(calls) == 1


# -- gather -------------------------------------------------------------------------------------------------
def gather_twin(values, i, within, out, n):
    """Byte by byte: the values from message ``i``, byte ``within``, into ``out[n:]``; a message whose last
    byte was copied is passed, and so are empty ones while ``out`` has room."""
    out = bytearray(out)
    while i < len(values) and n < len(out):
        if within == len(values[i]):
            i, within = i + 1, 0
            continue
        out[n] = values[i][within]
        n, within = n + 1, within + 1
    if i < len(values) and within and within == len(values[i]):
        i, within = i + 1, 0
    return (i, within, n), bytes(out)


@st.composite
def gather_cases(draw):
    lens = draw(st.lists(st.sampled_from([0, 0, 1, 2, 3, 7]), max_size=8))
    size = sum(lens) + draw(st.integers(0, 8))
    buf = draw(st.binary(min_size=size, max_size=size))
    starts = [draw(st.integers(0, size - n)) for n in lens]
    i = draw(st.integers(0, len(lens)))
    within = draw(st.integers(0, lens[i] - 1)) if i < len(lens) and lens[i] else 0
    out = draw(st.binary(max_size=24))
    return buf, starts, lens, i, within, out, draw(st.integers(0, len(out)))


@settings(max_examples=300, deadline=None)
@given(gather_cases())
def test_gather_matches_twin(case):
    """Position after the copy (message, byte, bytes out) and every byte of ``out``, untouched ones included."""
    buf, starts, lens, i, within, out, n = case
    arr = np.frombuffer(out, np.uint8).copy()
    got = K.gather(
        np.frombuffer(buf, np.uint8), np.array(starts, np.int64), np.array(lens, np.int64), i, within, arr, n
    )
    want, want_out = gather_twin([buf[s : s + m] for s, m in zip(starts, lens)], i, within, out, n)
    assert tuple(int(x) for x in got) == want and arr.tobytes() == want_out


def test_commits_from_two_threads_never_overlap_in_the_consumer(monkeypatch):
    """``reader.state()`` on a checkpoint thread and ``save_state_every`` on the consumer's both commit a fixed
    assignment's positions: kafka-python's consumer is not thread-safe, so its ``commit`` runs one at a time."""
    import threading
    import time

    from ingest.sources.kafka import offsets

    class Consumer:
        def __init__(self):
            self.inside, self.overlaps, self.commits = 0, 0, []

        def commit(self, positions):
            self.inside += 1
            self.overlaps += self.inside > 1
            time.sleep(0.001)
            self.commits.append(positions)
            self.inside -= 1

    made = Consumer()
    monkeypatch.setattr(offsets, "consumer", lambda brokers, config: made)
    group = offsets.KafkaGroup(["127.0.0.1:9"], SimpleNamespace(config={}, group_id="g"))
    start = threading.Barrier(2)

    def commits(k):
        start.wait()
        for n in range(50):
            group.commit({("t", k): (n, 0, 0)})

    threads = [threading.Thread(target=commits, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert made.overlaps == 0 and len(made.commits) == 100
    last = {tp.partition: meta.offset for positions in made.commits for tp, meta in positions.items()}
    assert last == {0: 49, 1: 49}
