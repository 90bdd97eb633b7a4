"""The kernels that find what input holds (native/scan.py, ``scan_record_names``) and ``fixed_width_rows`` against
pure-Python twins written from FORMATS.md, on generated input.

The twins are the ``_twin_*`` functions below; they import nothing from ingest (the pb twin decodes with the protobuf
library).  The kernels are driven as ``ingest.discover`` drives them: tables from ``build_name_table``, rebuilt after
every new name, the scan resumed where the kernel says.
"""

import itertools
import random
import struct
import types

import numpy as np
from google.protobuf.message import DecodeError
from hypothesis import given, settings, strategies as st

from ingest import discover, sample_pb2 as pb
from ingest._native.batch import fixed_width_rows
from ingest._native.names import build_name_table
from ingest._native.protobuf import scan_record_names
from ingest._native.scan import last_newline, scan_names
from ingest.batch import Batch
from ingest.sources.plan import plan_paths

from pbwire import encode, frame, length_delimited, tag

_NO_LABELS = [1 << 30, -1]  # labels_seen before any line or record: (fewest, most)


# --- fixed_width_rows: item r of a blob in row r, zero-padded ---------------------------------------------------


def _twin_rows(items, width):
    return [list(item) + [0] * (width - len(item)) for item in items]


def _blob(items, lead=b""):
    """``(blob, offsets)`` of ``items`` one after the other, after ``lead`` (bytes no item holds)."""
    blob = np.frombuffer(lead + b"".join(items), np.uint8).copy()
    offsets = np.cumsum([len(lead)] + [len(x) for x in items], dtype=np.int64)
    return blob, offsets


_ITEMS = st.lists(st.binary(max_size=6), max_size=6)  # NUL bytes included: ids may hold any byte


@settings(max_examples=150, deadline=None)
@given(items=_ITEMS, lead=st.binary(max_size=3), extra=st.integers(0, 3))
def test_fixed_width_rows_matches_twin(items, lead, extra):
    """Row r is item r then zeros, over whatever the output held, with offsets not starting at 0 and rows wider
    than the longest item."""
    blob, offsets = _blob(items, lead)
    width = max(map(len, items), default=0) + extra
    out = np.full((len(items), width), 0xA5, np.uint8)  # garbage: a byte left unwritten shows
    fixed_width_rows(blob, offsets, out)
    assert out.tolist() == _twin_rows(items, width)


@settings(max_examples=100, deadline=None)
@given(items=_ITEMS)
def test_batch_sample_ids_are_the_ids_zero_padded(items):
    """``Batch.sample_ids`` (its caller): an ``S<longest, at least 1>`` array whose bytes are the padded ids."""
    blob, offsets = _blob(items)
    laid = types.SimpleNamespace(samples=lambda: (None, None, blob, offsets, ()))
    ids = Batch(len(items), laid, (), [len(items)]).sample_ids
    width = max([1, *map(len, items)])
    assert ids.dtype == np.dtype(f"S{width}") and ids.shape == (len(items),)
    assert ids.view(np.uint8).reshape(len(items), width).tolist() == _twin_rows(items, width)
    assert ids.tolist() == [x.rstrip(b"\0") for x in items]  # numpy's S drops trailing NULs, as documented


# --- text: scan_names and last_newline ------------------------------------------------------------------------


def _split_at(data, sep, at):
    """``(offset, piece)`` of each piece of ``data`` split at ``sep``; ``at`` is the offset of ``data[0]``."""
    out = []
    for piece in data.split(sep):
        out.append((at, piece))
        at += len(piece) + len(sep)
    return out


def _twin_text_lines(data, start, end):
    """``(offset, line)`` of the lines of ``data[start:end]``: split at ``\\n``, a ``\\r`` before it dropped (a
    range ending mid-line gives a last, partial line)."""
    return [(at, x[:-1] if x.endswith(b"\r") else x) for at, x in _split_at(data[start:end], b"\n", start)]


def _twin_named_entries(at, line):
    """``(kind, name start, name end, width)`` of each named entry of a line, sparse (kind 1) before dense (2).

    Entries are the ``;``-pieces of field 2 (sparse) and field 3 (dense); a name is what precedes an entry's first
    ``@`` (an entry without one has none), the width the ``,``-separated tokens after it.  No line is judged:
    names are taken whatever else is wrong with it (reading reports that)."""
    fields = _split_at(line, b"|", at)
    for kind, (field_at, field) in zip((1, 2), fields[2:4]):
        for entry_at, entry in _split_at(field, b";", field_at):
            name, has_at, rest = entry.partition(b"@")
            if has_at:
                yield kind, entry_at, entry_at + len(name), rest.count(b",") + 1


def _twin_label_count(line):
    """Labels of a line: the ``,``-pieces of field 4 (none when empty); None for a line without that field."""
    fields = line.split(b"|")
    if len(fields) < 5:
        return None
    return fields[4].count(b",") + 1 if fields[4] else 0


def _twin_scan_text(data, start, end, sparse, dense):
    """What discovering ``data[start:end]`` finds with the names ``sparse``/``dense`` known: each new name as
    ``(start of its line, kind, name start, name end, width of a dense one)``, and the (fewest, most) labels."""
    known = {1: {n.encode() for n in sparse}, 2: {n.encode() for n in dense}}
    steps, seen = [], list(_NO_LABELS)
    for at, line in _twin_text_lines(data, start, end):
        for kind, a, b, width in _twin_named_entries(at, line):
            if data[a:b] not in known[kind]:
                known[kind].add(data[a:b])
                steps.append((at, kind, a, b, width if kind == 2 else None))
        n = _twin_label_count(line)
        if n is not None:
            seen = [min(seen[0], n), max(seen[1], n)]
    return steps, seen


def _discover_text(buf, start, end, sparse, dense):
    """``scan_names`` driven as ``ingest.discover._scan_unit`` drives it, in ``_twin_scan_text``'s terms."""
    sparse, dense = list(sparse), list(dense)
    tables = [build_name_table(sparse), build_name_table(dense)]
    labels_seen = np.array(_NO_LABELS, np.int64)
    steps, pos = [], start
    while True:
        pos, kind, a, b, width = (int(v) for v in scan_names(buf, pos, end, *tables[0], *tables[1], labels_seen))
        if kind == 0:
            assert pos == end
            return steps, labels_seen.tolist()
        assert len(steps) < 50, "the kernel reports a name its table holds"
        steps.append((pos, kind, a, b, width if kind == 2 else None))
        name = bytes(buf[a:b]).decode()
        if kind == 1:
            sparse.append(name)
            tables[0] = build_name_table(sparse)
        else:
            dense.append(name)
            tables[1] = build_name_table(dense)


_TEXT_NAMES = ["a", "b", "ab", "ba", "é", ""]  # prefixes of each other, two UTF-8 bytes, empty (``@1``)
_TOKENS = st.sampled_from(["1", "-7:0.5", "42:", "x", ""])  # bad ones too: the scan does not read values
_FLOATS = st.sampled_from(["0.5", "1", "-2e3", "x", ""])
_ID = st.text("xy@;,:é ", max_size=4)  # sample and group ids may hold any byte but | and newline


def _entry(tokens):
    named = st.builds(lambda n, t: f"{n}@{','.join(t)}", st.sampled_from(_TEXT_NAMES), st.lists(tokens, min_size=1))
    # malformed: empty, no @, a comma before the @ (part of the name), two @, nothing but an @
    return st.one_of(named, named, st.sampled_from(["", "1:2", "a,b@1", "b@a@1", "@"]))


@st.composite
def _text_line(draw):
    fields = [
        draw(_ID),
        draw(_ID),
        ";".join(draw(st.lists(_entry(_TOKENS), max_size=3))),
        ";".join(draw(st.lists(_entry(_FLOATS), max_size=2))),
        ",".join(draw(st.lists(_FLOATS, max_size=3))),
        draw(st.sampled_from(["", "1544094136", "t@1"])),
        "q@1,2",  # a seventh field: too many, and no names are taken from it
    ]
    n = draw(st.sampled_from([5, 5, 5, 6, 6, 6, 1, 3, 4, 7]))
    return draw(st.sampled_from(["|".join(fields[:n])] * 4 + ["", "garbage@1;x"]))


@st.composite
def _text(draw):
    lines = draw(st.lists(_text_line(), max_size=6))
    ends = draw(st.lists(st.sampled_from(["\n", "\r\n"]), min_size=len(lines), max_size=len(lines)))
    text = "".join(x + e for x, e in zip(lines, ends))
    if text and draw(st.booleans()):
        text = text[: -len(ends[-1])]  # a last line without a newline
    return text.encode()


def _char_start(data, p):
    """``p`` moved forward to the start of a UTF-8 character: a name cut in two cannot be a table's ``str``."""
    while p < len(data) and data[p] & 0xC0 == 0x80:
        p += 1
    return p


_KNOWN_TEXT = st.lists(st.sampled_from(_TEXT_NAMES), unique=True, max_size=3)


@settings(max_examples=250, deadline=None)
@given(
    text=_text(),
    sparse=_KNOWN_TEXT,
    dense=_KNOWN_TEXT,
    cut=st.sampled_from(["whole", "anywhere", "after a comma"]),
    data=st.data(),
)
def test_scan_names_matches_twin(text, sparse, dense, cut, data):
    """Every name not known yet, in order, with its line, kind, place and dense width, and the fewest and most
    labels of a line, in the whole text or a ``start:end`` range that may start or end mid-line (or mid-vector:
    the width counts the floats before ``end`` only)."""
    start, end = 0, len(text)
    if cut != "whole":
        start = _char_start(text, data.draw(st.integers(0, len(text))))
        ends = [p for p in range(start, len(text) + 1) if cut == "anywhere" or text[p - 1 : p] == b","]
        end = _char_start(text, data.draw(st.sampled_from(ends or [len(text)])))
    buf = np.frombuffer(text, np.uint8).copy()
    assert _discover_text(buf, start, end, sparse, dense) == _twin_scan_text(text, start, end, sparse, dense)


def test_scan_names_worked_case():
    """A line per rule: ids holding ``@``, an unknown dense name after known sparse ones, a line of four fields,
    a ``\\r\\n`` end, a last line without a newline."""
    text = b"x@y|g@|a@1,2:3;b@4|d@1,2,3|1,0|7\nq|g|b@1|e@5|\r\nr|g|c@1|d@1\ns||a@1|e@1,2|1,2,3"
    got = _discover_text(np.frombuffer(text, np.uint8).copy(), 0, len(text), ["a", "b"], [])
    d, e, c = text.index(b"d@"), text.index(b"e@"), text.index(b"c@")
    want = [(0, 2, d, d + 1, 3), (text.index(b"q|"), 2, e, e + 1, 1), (text.index(b"r|"), 1, c, c + 1, None)]
    assert got == (want, [0, 3])
    assert got == _twin_scan_text(text, 0, len(text), ["a", "b"], [])
    cut = _discover_text(np.frombuffer(text, np.uint8).copy(), 0, d + 4, ["a", "b"], [])  # ends after "d@1,"
    assert cut == ([(0, 2, d, d + 1, 2)], list(_NO_LABELS))


@settings(max_examples=150, deadline=None)
@given(text=_text(), data=st.data())
def test_last_newline_matches_twin(text, data):
    """The last ``\\n`` of ``buf[:n]`` (-1 when none), never a byte at or past ``n``."""
    n = data.draw(st.integers(0, len(text)))
    assert last_newline(np.frombuffer(text, np.uint8).copy(), n) == text[:n].rfind(b"\n")


@settings(max_examples=60, deadline=None)
@given(text=_text(), chunk=st.sampled_from([8, 32, 1 << 10]))
def test_scan_text_features_of_a_file_matches_twin(tmp_path, monkeypatch, text, chunk):
    """Through ``ingest.discover`` (windows cut at ``last_newline``, grown for a long line): the names in order
    of appearance, the first width of each dense one, and the fewest and most labels."""
    monkeypatch.setattr(discover, "_SCAN_CHUNK", chunk)
    path = tmp_path / "in.txt"
    path.write_bytes(text)
    found = discover.scan_text_features(plan_paths([str(path)], splittable=False))
    steps, (lo, hi) = _twin_scan_text(text, 0, len(text), [], [])
    names = [(kind, text[a:b].decode(), width) for _, kind, a, b, width in steps]
    assert found.sparse == [(name, 0) for kind, name, _ in names if kind == 1]
    assert list(found.dense.items()) == [(name, (width, 0)) for kind, name, width in names if kind == 2]
    assert (found.label_count, found.max_labels) == ((lo, hi) if hi >= 0 else (0, 0))


# --- pb / spb: scan_record_names ------------------------------------------------------------------------------


def _twin_record_features(msg, simple):
    """``(name, kind, table, dense width)`` of each named feature of a parsed record, in table, line and feature
    order (a feature without a name cannot be declared).  A dense feature's floats are its one value's vector."""
    tables = [[msg.feature_line]] if simple else [t.feature_lines for t in msg.feature_tables]
    for table, lines in enumerate(tables):
        for line in lines:
            for f in line.features:
                if not f.HasField("name"):
                    continue
                if f.type == pb.kDense:
                    yield f.name, 2, table, len(f.values[0].vector) if f.values else 0
                else:
                    yield f.name, 1, table, None


def _twin_scan_records(framed, offsets, start, end, simple, known):
    """What discovering the whole records of ``framed[start:end]`` finds with ``known`` (``(kind, name, table)``):
    each new feature as ``(record offset, kind, name, table, dense width)``, a name seen again with another kind or
    table as kind 3 (which ends the scan), the (fewest, most) labels of a sample and where the whole records end.
    A record that protobuf does not decode is passed over."""
    known = {name: (kind, table) for kind, name, table in known}
    steps, seen, stop = [], list(_NO_LABELS), start
    for at in (p for p in offsets if p >= start):
        size = struct.unpack_from("<I", framed, at)[0]
        if at + 4 + size > end:
            break
        stop = at + 4 + size
        try:
            msg = (pb.SampleSimple if simple else pb.SampleGroup).FromString(framed[at + 4 : stop])
        except DecodeError:
            continue
        for name, kind, table, width in _twin_record_features(msg, simple):
            if name not in known:
                known[name] = (kind, table)
                steps.append((at, kind, name, table, width))
            elif known[name] != (kind, table):
                return steps + [(at, 3, name, table, None)], None, None
        for n in [len(msg.label.values)] if simple else [len(x.values) for x in msg.labels]:
            seen = [min(seen[0], n), max(seen[1], n)]
    return steps, seen, stop


def _discover_records(buf, start, end, simple, known):
    """``scan_record_names`` driven as ``ingest.discover._scan_records_unit`` drives it (stopping at a conflict,
    where discover raises), in ``_twin_scan_records``' terms."""
    features = list(known)
    labels_seen = np.array(_NO_LABELS, np.int64)
    found = np.zeros(5, np.int64)
    steps, pos = [], start
    while True:
        tables = (
            build_name_table([f[1] for f in features]),
            np.array([f[0] for f in features], np.int64),
            np.array([f[2] for f in features], np.int64),
        )
        pos = int(scan_record_names(buf, pos, end, simple, *tables[0], tables[1], tables[2], labels_seen, found))
        kind, a, b, table, width = (int(v) for v in found)
        if kind == 0:
            return steps, labels_seen.tolist(), pos
        assert len(steps) < 50, "the kernel reports a feature its table holds"
        name = bytes(buf[a:b]).decode()
        steps.append((pos, kind, name, table, width if kind == 2 else None))
        if kind == 3:
            return steps, None, None
        features.append((kind, name, table))


# per table, the names it uses; "x" takes either type in any table, which makes conflicts
_PB_NAMES = (("s", "sa", "d", "é", "", "x"), ("u", "e", "x"), ("v", "x"))
_PB_DENSE = {"d", "e"}
_F32 = st.sampled_from([0.0, 1.0, -2.5, 3e38])


@st.composite
def _feature(draw, table):
    name = draw(st.sampled_from(_PB_NAMES[table] + (None,)))  # None: a feature without a name
    dense = name in _PB_DENSE or (name == "x" and draw(st.booleans()))
    f = pb.Feature(type=pb.kDense if dense else pb.kSparse)
    if name is not None:
        f.name = name
    if dense:
        f.values.add().vector.extend(draw(st.lists(_F32, max_size=4)))
    for key in [] if dense else draw(st.lists(st.integers(-(2**63), 2**63 - 1), max_size=3)):
        v = f.values.add(key=key)
        if draw(st.booleans()):
            v.value, v.hkey = draw(_F32), draw(st.integers(0, 2**63 - 1))
    return f


@st.composite
def _group(draw):
    g = pb.SampleGroup()
    for _ in range(draw(st.integers(0, 3))):
        g.labels.add().values.extend(draw(st.lists(_F32, max_size=3)))
    if g.labels and draw(st.booleans()):
        g.sample_ids.extend(draw(st.lists(st.text("ab@", max_size=3), min_size=len(g.labels), max_size=len(g.labels))))
    for _ in range(draw(st.integers(0, 2))):  # props are Labels too, but not the labels
        g.props.add().values.extend(draw(st.lists(_F32, max_size=4)))
    if draw(st.booleans()):
        g.extensions.add().extension["timestamp"] = "1544094136"
    for t in range(draw(st.sampled_from([0, 1, 2, 3, 3]))):
        table = g.feature_tables.add()
        for _ in range(draw(st.sampled_from([0, 1, 2, 2]))):
            line = table.feature_lines.add(refer=draw(st.integers(0, 3)))
            line.features.extend(draw(st.lists(_feature(t), max_size=3)))
    return g


@st.composite
def _simple(draw):
    s = pb.SampleSimple(sample_id=draw(st.text("ab@", max_size=3)))
    s.label.SetInParent()  # required, even without values
    s.label.values.extend(draw(st.lists(_F32, max_size=3)))
    s.feature_line.SetInParent()
    s.feature_line.features.extend(draw(st.lists(_feature(0), max_size=4)))
    return s


# bytes that make a record undecodable from its first field on: wire type 6, a stray end-group, an overlong field
_CORRUPT_HEAD = [b"\x0e", b"\x0c", b"\x12\xff\xff\xff\x0f"]
_KNOWN_PB = st.lists(
    st.tuples(st.sampled_from([1, 2]), st.sampled_from(sorted(set(sum(_PB_NAMES, ())))), st.integers(0, 2)),
    unique_by=lambda f: f[1],
    max_size=3,
)


@settings(max_examples=200, deadline=None)
@given(
    simple=st.booleans(),
    seed=st.integers(0, 2**32),
    known=st.one_of(st.just([]), _KNOWN_PB),
    data=st.data(),
)
def test_scan_record_names_matches_protobuf(simple, seed, known, data):
    """Whatever the encoding variant (packed or not, fields interleaved, unknown fields), each new feature in order
    with its record, kind, table and dense width, a conflict with a known feature, the fewest and most labels of a
    sample and the end of the last whole record: what the records parsed by protobuf hold.  Records undecodable
    from their start are passed over; the range may start at any record and end anywhere."""
    rng = random.Random(seed)
    messages = data.draw(st.lists(_simple() if simple else _group(), min_size=1, max_size=5))
    records = [data.draw(st.sampled_from([b""] * 4 + _CORRUPT_HEAD)) + encode(m, rng, unknown=0.3) for m in messages]
    framed = frame(records)
    offsets = list(itertools.accumulate([4 + len(r) for r in records[:-1]], initial=0))
    start = data.draw(st.one_of(st.just(0), st.sampled_from(offsets + [len(framed)])))
    end = data.draw(st.one_of(st.just(len(framed)), st.integers(start, len(framed))))
    buf = np.frombuffer(framed, np.uint8).copy()
    got = _discover_records(buf, start, end, simple, known)
    assert got == _twin_scan_records(framed, offsets, start, end, simple, known)


def test_scan_record_names_worked_case():
    """A group with a dense feature in table 0 and a sparse one in table 1, then the sparse one in table 0."""
    g = pb.SampleGroup()
    g.labels.add().values.extend([1.0, 0.0])
    g.labels.add().values.extend([1.0])
    line = g.feature_tables.add().feature_lines.add()
    line.features.add(type=pb.kDense, name="d").values.add().vector.extend([1, 2, 3])
    g.feature_tables.add().feature_lines.add().features.add(type=pb.kSparse, name="u").values.add(key=5)
    h = pb.SampleGroup()
    h.labels.add()
    h.feature_tables.add().feature_lines.add().features.add(type=pb.kSparse, name="u").values.add(key=5)
    records = [g.SerializeToString(), h.SerializeToString()]
    framed = frame(records)
    second = 4 + len(records[0])
    got = _discover_records(np.frombuffer(framed, np.uint8).copy(), 0, len(framed), False, [])
    assert got == ([(0, 2, "d", 0, 3), (0, 1, "u", 1, None), (second, 3, "u", 0, None)], None, None)
    got = _discover_records(np.frombuffer(framed, np.uint8).copy(), 0, second, False, [])
    assert got == ([(0, 2, "d", 0, 3), (0, 1, "u", 1, None)], [1, 2], second)


def test_scan_record_names_counts_a_split_simple_label_once():
    """A SampleSimple whose label comes as two fields: protobuf merges a message field given twice, so its one
    sample has 2 labels (the reader's decoder merges them too); the scan must not see two samples of 1 label."""
    value = struct.pack("<f", 1.0)
    label = length_delimited(2, tag(1, 5) + value)
    record = length_delimited(1, b"s") + label + label + length_delimited(3, b"")
    msg = pb.SampleSimple.FromString(record)
    assert msg.IsInitialized() and len(msg.label.values) == 2
    framed = frame([record])
    got = _discover_records(np.frombuffer(framed, np.uint8).copy(), 0, len(framed), True, [])
    assert got == ([], [2, 2], len(framed))
