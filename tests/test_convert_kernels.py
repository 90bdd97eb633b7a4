"""The conversion kernels against pure-Python twins on generated samples (FORMATS.md 1 and 2, decisions.md
"Conversion"): ``encode_groups`` (text -> pb/spb) read back with the protobuf library, ``identical_features``
(``--aux auto``) and ``write_text_rows`` (pb/spb -> text) read back by a twin of the text format."""

import re
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ingest import sample_pb2 as pb
from ingest._native import numbers
from ingest.blocks import Block, Table
from ingest.convert import _Identical, _TextWriter
from ingest.features import Schema, make_feature
from ingest.formats import encoding
from ingest.formats.encoding import RecordEncoder

from naive import INT_RE, SPECIAL_RE
from pbwire import unframe

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
F32_MAX = float(np.finfo(np.float32).max)

# -- generated samples ---------------------------------------------------------------------------

_keys = st.one_of(st.integers(INT64_MIN, INT64_MAX), st.integers(-3, 300))
_specials = [1.0, 1.0, 0.0, -0.0, -1.0, 0.1, 2.5, float("nan"), float("inf"), -float("inf"), F32_MAX, 1e-45, 1e-8]
_f32 = st.one_of(st.floats(width=32), st.sampled_from(_specials)).map(np.float32)
_ts = st.one_of(st.just(0), st.integers(INT64_MIN, INT64_MAX), st.integers(0, 2**40), st.sampled_from([-1, 1]))
_pairs = st.lists(st.tuples(_keys, _f32), max_size=4)
# sample ids: any bytes but | and newline (FORMATS.md 1); protobuf gives back a str when they are UTF-8, else bytes
_any_sid = st.lists(st.integers(0, 255).filter(lambda b: b not in b"|\n"), max_size=4).map(bytes)
_sid = st.one_of(
    _any_sid, st.text(st.characters(exclude_characters="|\n", exclude_categories=("Cs",)), max_size=4).map(str.encode)
)


def _vector(width):
    zero = st.sampled_from([0.0, -0.0]).map(np.float32)
    return st.lists(st.one_of(_f32, zero), min_size=width, max_size=width)


def _features(draw, sparse, dense):
    """Drawn content of the features named: ``{"sparse": {name: [(key, value)]}, "dense": {name: [floats]}}``."""
    return {"sparse": {n: draw(_pairs) for n in sparse}, "dense": {n: draw(_vector(w)) for n, w in dense.items()}}


def _sample(draw, sid_bytes, label_count, sparse, dense):
    s = _features(draw, sparse, dense)
    s.update(sid=draw(sid_bytes), labels=draw(st.lists(_f32, min_size=label_count, max_size=label_count)), ts=draw(_ts))
    return s


_GAP_KEY, _GAP_VALUE = -77777, 12345.0  # spare room between feature regions: a kernel reading past a row shows it


def _table(rows, sparse, dense, keys, values, refer=None):
    """A Table of ``rows`` (drawn features) whose sparse regions are appended to the lists ``keys``/``values``:
    one region per feature with garbage before it, as the parsers leave spare room between regions."""
    offsets = np.zeros((len(sparse), len(rows) + 1), np.int64)
    for f, name in enumerate(sparse):
        keys += [_GAP_KEY] * 3
        values += [_GAP_VALUE] * 3
        offsets[f, 0] = len(keys)
        for r, row in enumerate(rows):
            for k, v in row["sparse"][name]:
                keys.append(k)
                values.append(v)
            offsets[f, r + 1] = len(keys)
    columns = tuple(
        np.array([row["dense"][n] for row in rows], np.float32).reshape(len(rows), w) for n, w in dense.items()
    )
    return Table(len(rows), offsets, columns, refer)


def _block(tables, samples, group_sizes, keys, values, label_count):
    sids = [s["sid"] for s in samples]
    return Block(
        tables=tuple(tables),
        group_offsets=np.cumsum([0, *group_sizes]).astype(np.int64),
        sp_keys=np.array(keys, np.int64),
        sp_hkeys=None,
        sp_values=np.array(values, np.float32),
        labels=np.array([s["labels"] for s in samples], np.float32).reshape(len(samples), label_count),
        timestamps=np.array([s["ts"] for s in samples], np.int64),
        sid_bytes=np.frombuffer(b"".join(sids), np.uint8).copy(),
        sid_offsets=np.cumsum([0, *map(len, sids)]).astype(np.int64),
    )


def _text_block(groups, sparse, dense, label_count):
    """A Block of one table, as text input gives it, holding ``groups`` (lists of drawn samples)."""
    samples = [s for g in groups for s in g]
    keys, values = [], []
    table = _table(samples, sparse, dense, keys, values)
    return _block([table], samples, [len(g) for g in groups], keys, values, label_count)


def _raw(sid):
    return sid.encode() if isinstance(sid, str) else sid


def _bits(x):
    """A float32 as its exact value for comparison: its bits, or "nan" (a NaN's payload is not kept by float())."""
    x = np.float32(x)
    return "nan" if np.isnan(x) else int(x.view(np.uint32))


def _same_float(x, y):
    """Floats that read back alike: the same bits (-0.0 is not 0.0); a NaN is like nothing."""
    return not np.isnan(x) and not np.isnan(y) and _bits(x) == _bits(y)


def _written(x):
    """A dense element a writer must write: any but +0.0, what an absent vector reads back as."""
    return _bits(x) != 0


def _same(a, b):
    """Equal contents of two samples, floats compared by ``_same_float``."""
    for name, pairs in a["sparse"].items():
        other = b["sparse"][name]
        if len(pairs) != len(other) or any(
            k1 != k2 or not _same_float(v1, v2) for (k1, v1), (k2, v2) in zip(pairs, other)
        ):
            return False
    return all(all(_same_float(x, y) for x, y in zip(vec, b["dense"][name])) for name, vec in a["dense"].items())


def _of(sample, names):
    """The content of the features ``names`` of ``sample``."""
    return {
        "sparse": {n: v for n, v in sample["sparse"].items() if n in names},
        "dense": {n: v for n, v in sample["dense"].items() if n in names},
    }


# -- text -> pb/spb: encode_groups ----------------------------------------------------------------

ENC_SPARSE = ["a", "u", "ü" + "x" * 130]  # 132 bytes: the name's length takes two varint bytes
ENC_DENSE = {"d": 3, "e": 1}
ENC_SCHEMA = Schema(
    [make_feature(n, "sparse") for n in ENC_SPARSE] + [make_feature(n, "dense", nvec=w) for n, w in ENC_DENSE.items()],
    1,
)


@st.composite
def _encode_input(draw):
    """``(aux names, label count, groups)``: a group's samples take their aux content from a small pool, so that
    equal aux lines are common, and sample ids are all empty in some groups."""
    aux = draw(st.sets(st.sampled_from([*ENC_SPARSE, *ENC_DENSE])))
    label_count = draw(st.integers(0, 2))
    aux_sparse = [n for n in ENC_SPARSE if n in aux]
    aux_dense = {n: w for n, w in ENC_DENSE.items() if n in aux}
    main_sparse = [n for n in ENC_SPARSE if n not in aux]
    main_dense = {n: w for n, w in ENC_DENSE.items() if n not in aux}
    pool = [_features(draw, aux_sparse, aux_dense) for _ in range(draw(st.integers(1, 10)))]
    groups = []
    for _ in range(draw(st.integers(1, 4))):
        sids = _sid if draw(st.booleans()) else st.just(b"")
        group = []
        for _ in range(draw(st.integers(1, 12))):
            s = _sample(draw, sids, label_count, main_sparse, main_dense)
            shared = pool[draw(st.integers(0, len(pool) - 1))]
            s["sparse"].update(shared["sparse"])
            s["dense"].update(shared["dense"])
            group.append(s)
        groups.append(group)
    return aux, label_count, groups


def _encode(groups, aux, label_count, simple, buffer=None):
    """The records ``RecordEncoder`` writes for ``groups`` (one bytes string a part), with an out buffer of
    ``buffer`` bytes to begin with when given."""
    blk = _text_block(groups, ENC_SPARSE, ENC_DENSE, label_count)
    encoder = RecordEncoder(Schema(ENC_SCHEMA.specs, label_count), aux, simple)
    with pytest.MonkeyPatch.context() as mp:
        if buffer is not None:  # encode() starts at max(64 KiB, block bytes): a small one makes the kernel stop early
            mp.setattr(encoding, "max", lambda *_: buffer, raising=False)
        return [part.tobytes() for part in encoder.encode(blk)]


def _fields(buf):
    """``(field number, wire type, payload)`` of each field of a serialized message."""
    pos = 0

    def varint():
        nonlocal pos
        shift = value = 0
        while True:
            b = buf[pos]
            pos += 1
            value |= (b & 0x7F) << shift
            shift += 7
            if b < 0x80:
                return value

    while pos < len(buf):
        key = varint()
        number, wt = key >> 3, key & 7
        if wt == 0:
            yield number, wt, varint()
        elif wt == 2:
            n = varint()
            yield number, wt, buf[pos : pos + n]
            pos += n
        else:
            size = {1: 8, 5: 4}[wt]
            yield number, wt, buf[pos : pos + size]
            pos += size


# where the messages nest (field number -> message), and the repeated floats decisions.md says are packed
_NESTED = {
    "group": {2: "label", 3: "table"},
    "simple": {2: "label", 3: "line"},
    "table": {1: "line"},
    "line": {1: "feature"},
    "feature": {3: "value"},
}
_PACKED = {("label", 1), ("value", 3)}


def _assert_packed(buf, kind):
    """Labels and dense vectors are written packed (decisions.md, text -> pb), at every depth of the record."""
    for number, wt, payload in _fields(buf):
        if (kind, number) in _PACKED:
            assert wt == 2, (kind, number)
        if number in _NESTED.get(kind, {}) and wt == 2:
            _assert_packed(payload, _NESTED[kind][number])


def _read_line(line):
    """What a FeatureLine holds, as FORMATS.md 2 reads it: ``({name: [(key, value bits)]}, {name: [bits]})``.

    Checks on the way what FORMATS.md and decisions.md fix: every key present and no high key (text has none),
    a value only when it is not 1.0, a dense feature as one FeatureValue of its width, not when all zero."""
    sparse, dense = {}, {}
    for feat in line.features:
        assert feat.HasField("type") and feat.HasField("name")
        if feat.type == pb.kSparse:
            assert feat.name in ENC_SPARSE
            for v in feat.values:
                assert v.HasField("key") and not v.HasField("hkey") and not v.vector
                assert not v.HasField("value") or np.float32(v.value) != 1.0  # a value of 1.0 is left out
                sparse.setdefault(feat.name, []).append((v.key, _bits(v.value if v.HasField("value") else 1.0)))
        else:
            assert feat.type == pb.kDense and feat.name not in dense
            [v] = feat.values
            assert len(v.vector) == ENC_DENSE[feat.name] and any(_written(x) for x in v.vector)
            dense[feat.name] = [_bits(x) for x in v.vector]
    assert not line.reserve
    return sparse, dense


def _expected_line(content):
    """``_read_line``'s reading of a line holding ``content``: empty rows and vectors of +0.0 are absent."""
    sparse = {n: [(k, _bits(v)) for k, v in pairs] for n, pairs in content["sparse"].items() if pairs}
    dense = {n: [_bits(x) for x in vec] for n, vec in content["dense"].items() if any(map(_written, vec))}
    return sparse, dense


def _aux_lines(group, aux):
    """Twin of decisions.md, text -> pb: a sample refers to an aux line of equal content among the group's last 8
    distinct lines, or adds a line of its own.  Returns the lines' contents and each sample's refer."""
    lines, refer = [], []
    for s in group:
        content = _of(s, aux)
        match = next((d for d in range(len(lines) - 1, len(lines) - 9, -1) if d >= 0 and _same(lines[d], content)), -1)
        if match < 0:
            lines.append(content)
            match = len(lines) - 1
        refer.append(match)
    return lines, refer


def _labels_of(label, label_count):
    assert len(label.values) == label_count
    return [_bits(x) for x in label.values]


def _check_group(msg, group, aux, label_count):
    """One SampleGroup against the samples it was written from, value by value."""
    n = len(group)
    if any(s["sid"] for s in group):  # written when any sample of the group has one
        assert [_raw(x) for x in msg.sample_ids] == [s["sid"] for s in group]
    else:
        assert len(msg.sample_ids) == 0
    assert [_labels_of(lab, label_count) for lab in msg.labels] == [[_bits(x) for x in s["labels"]] for s in group]
    assert len(msg.props) == 0
    if msg.extensions:  # one per sample, "timestamp" as a decimal string; none at all reads back as 0
        assert [dict(e.extension) for e in msg.extensions] == [{"timestamp": str(s["ts"])} for s in group]
    else:
        assert all(s["ts"] == 0 for s in group)
    lines, refer = _aux_lines(group, aux) if aux else ([], [0] * n)
    assert len(msg.feature_tables) == (2 if aux else 1)
    table0 = msg.feature_tables[0].feature_lines
    assert len(table0) == n
    main = set(ENC_SPARSE) | set(ENC_DENSE)
    main -= aux
    for s, line, r in zip(group, table0, refer):
        assert line.HasField("refer") == (r != 0)  # refer 0 is left out
        assert line.refer == r
        assert _read_line(line) == _expected_line(_of(s, main))
    if aux:
        table1 = msg.feature_tables[1].feature_lines
        assert len(table1) == len(lines)
        for line, content in zip(table1, lines):
            assert not line.HasField("refer")
            assert _read_line(line) == _expected_line(content)


def _check_simple(msg, s, label_count):
    """One SampleSimple against its sample: every feature on its one line, whatever is aux."""
    assert msg.HasField("sample_id") and msg.HasField("label") and msg.HasField("feature_line")
    assert _raw(msg.sample_id) == s["sid"]
    assert _labels_of(msg.label, label_count) == [_bits(x) for x in s["labels"]]
    assert not msg.feature_line.HasField("refer")
    assert _read_line(msg.feature_line) == _expected_line(s)


def _check_records(parts, groups, aux, label_count, simple):
    messages = []
    for part in parts:  # every part holds whole records: the writer appends parts as they come
        messages += unframe(part)
    want = [[s] for g in groups for s in g] if simple else groups
    assert len(messages) == len(want)
    for raw, group in zip(messages, want):
        _assert_packed(raw, "simple" if simple else "group")
        if simple:
            _check_simple(pb.SampleSimple.FromString(raw), group[0], label_count)
        else:
            _check_group(pb.SampleGroup.FromString(raw), group, aux, label_count)


@settings(max_examples=250, deadline=None)
@given(_encode_input(), st.booleans(), st.sampled_from([None, None, 1, 60, 400]))
def test_encode_groups_matches_protobuf_reading(data, simple, buffer):
    """Every record RecordEncoder writes (pb: one SampleGroup a group, aux features once per distinct line; spb: one
    SampleSimple a sample), parsed by the protobuf library, holds the sample ids, labels, timestamps, ids, values,
    vectors and refers of the generated samples, bit for bit, with decisions.md's canonical choices; also when a
    small out buffer makes the kernel stop at group boundaries."""
    aux, label_count, groups = data
    parts = _encode(groups, aux, label_count, simple, buffer)
    _check_records(parts, groups, aux, label_count, simple)


def _plain(sparse, dense, sid=b"", labels=(), ts=0):
    return {"sid": sid, "labels": list(labels), "ts": ts, "sparse": sparse, "dense": dense}


def test_aux_lines_are_shared_within_the_last_8_distinct():
    """A sample shares an equal aux line 8 distinct lines back, not 9 (decisions.md's look-back), and the twin
    agrees."""
    for back, want in ((8, [0, 1, 2, 3, 4, 5, 6, 7, 0]), (9, [0, 1, 2, 3, 4, 5, 6, 7, 8, 9])):
        contents = [*range(back), 0]
        group = [
            _plain(
                {"a": [(1, np.float32(1))], "u": [(c, np.float32(0.5))], ENC_SPARSE[2]: []},
                {"d": [0.0] * 3, "e": [0.0]},
            )
            for c in contents
        ]
        [raw] = unframe(b"".join(_encode([group], {"u"}, 0, False)))
        msg = pb.SampleGroup.FromString(raw)
        assert [line.refer for line in msg.feature_tables[0].feature_lines] == want
        assert [[v.key for v in line.features[0].values] for line in msg.feature_tables[1].feature_lines] == [
            [c] for c in contents[: max(want) + 1]
        ]
        _check_group(msg, group, {"u"}, 0)


def test_large_group_takes_long_varints_and_a_larger_buffer():
    """A group of ~6,000 ids (a record over 64 KiB, lines over 16 KiB: three-byte lengths) is written whole, the
    buffer grown, and reads back value by value."""
    rng = np.random.default_rng(7)
    big = [(int(k), np.float32(v)) for k, v in zip(rng.integers(INT64_MIN, INT64_MAX, 3000), rng.normal(size=3000))]
    group = [
        _plain(
            {"a": big[i::2], "u": big[:1500], ENC_SPARSE[2]: [(i, np.float32(1))]},
            {"d": [np.float32(i), 0.0, 0.0], "e": [0.0]},
            sid=b"s%d" % i,
            labels=[1.0],
            ts=i,
        )
        for i in range(2)
    ]
    for simple in (False, True):
        parts = _encode([group], {"u"}, 1, simple)
        assert sum(map(len, parts)) > 1 << 16
        _check_records(parts, [group], {"u"}, 1, simple)


# -- --aux auto: identical_features ---------------------------------------------------------------

ID_SPARSE = ["a", "b"]
ID_DENSE = {"d": 2}
ID_SCHEMA = Schema([make_feature(n, "sparse") for n in ID_SPARSE] + [make_feature("d", "dense", nvec=2)], 1)
_few_pairs = st.sampled_from([[], [(1, 1.0)], [(1, 2.0)], [(2, 1.0)], [(1, 1.0), (2, 1.0)], [(1, float("nan"))]])
_few_vectors = st.sampled_from([[0.0, 0.0], [-0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [float("nan"), 0.0]])


@st.composite
def _identical_input(draw):
    """Blocks of groups whose samples draw each feature from a handful of contents: equal ones are common."""
    blocks = []
    for _ in range(draw(st.integers(1, 3))):
        groups = []
        for _ in range(draw(st.integers(1, 4))):
            group = []
            for _ in range(draw(st.integers(1, 4))):
                sparse = {n: [(k, np.float32(v)) for k, v in draw(_few_pairs)] for n in ID_SPARSE}
                group.append(_plain(sparse, {"d": [np.float32(x) for x in draw(_few_vectors)]}))
            groups.append(group)
        blocks.append(groups)
    return blocks


def _identical_twin(blocks):
    """Twin of ``choose_aux``: which features differ between two samples of a group, and which qualify: they have
    values (ids, or a vector not all zero) in a multi-sample group and never differ inside one."""
    names = [*ID_SPARSE, *ID_DENSE]
    differs = dict.fromkeys(names, False)
    present = dict.fromkeys(names, False)
    for groups in blocks:
        for group in groups:
            if len(group) < 2:
                continue
            for name in names:
                rows = [_of(s, {name}) for s in group]
                differs[name] |= not all(_same(rows[0], r) for r in rows[1:])
                present[name] |= any(
                    s["sparse"][name] if name in ID_SPARSE else any(map(_written, s["dense"][name])) for s in group
                )
    return [differs[n] for n in names], [n for n in names if present[n] and not differs[n]]


@settings(max_examples=300, deadline=None)
@given(_identical_input())
def test_identical_features_matches_twin(blocks):
    """``--aux auto``'s choice over several blocks (the kernel accumulates call after call) is the twin's: the same
    features differ, the same ones qualify."""
    identical = _Identical(ID_SCHEMA)
    for groups in blocks:
        identical.add(_text_block(groups, ID_SPARSE, ID_DENSE, 0))
    want_differs, want_names = _identical_twin(blocks)
    assert identical.differs.tolist() == want_differs
    assert identical.names() == want_names


# -- pb/spb -> text: write_text_rows --------------------------------------------------------------

# tables 0, 1 and 2 (aux of aux), declared table by table as a scan of pb input finds them
TW_SPARSE = {"a": 0, "b": 0, "u": 1, "w": 2}
TW_DENSE = {"d": (2, 0), "e": (1, 1)}


def _tw_schema(label_count):
    specs = [make_feature(n, "sparse", table=t) for n, t in TW_SPARSE.items()]
    specs += [make_feature(n, "dense", nvec=w, table=t) for n, (w, t) in TW_DENSE.items()]
    return Schema(sorted(specs, key=lambda s: s.table), label_count)


def _in_table(t):
    return [n for n, tt in TW_SPARSE.items() if tt == t], {n: w for n, (w, tt) in TW_DENSE.items() if tt == t}


@st.composite
def _decoded_blocks(draw):
    """``(label count, blocks)``: each block as pb decoding gives it, ``(groups, aux lines of table 1 with their
    refers into table 2, lines of table 2)``, a sample giving its ``refer`` into table 1."""
    label_count = draw(st.integers(0, 2))
    blocks = []
    for _ in range(draw(st.integers(1, 3))):
        lines2 = [_features(draw, *_in_table(2)) for _ in range(draw(st.integers(1, 3)))]
        lines1 = [_features(draw, *_in_table(1)) for _ in range(draw(st.integers(1, 4)))]
        for line in lines1:
            line["refer"] = draw(st.integers(0, len(lines2) - 1))
        groups = []
        for _ in range(draw(st.integers(1, 4))):
            group = []
            for _ in range(draw(st.integers(1, 4))):
                s = _sample(draw, _sid, label_count, *_in_table(0))
                s["refer"] = draw(st.integers(0, len(lines1) - 1))
                group.append(s)
            groups.append(group)
        blocks.append((groups, lines1, lines2))
    return label_count, blocks


def _decoded_block(groups, lines1, lines2, label_count):
    samples = [s for g in groups for s in g]
    keys, values = [], []
    tables = [
        _table(samples, *_in_table(0), keys, values, np.array([s["refer"] for s in samples], np.int64)),
        _table(lines1, *_in_table(1), keys, values, np.array([x["refer"] for x in lines1], np.int64)),
        _table(lines2, *_in_table(2), keys, values),
    ]
    return _block(tables, samples, [len(g) for g in groups], keys, values, label_count)


def _expected_rows(blocks):
    """Twin of decisions.md, pb/spb -> text: per sample its sample id, group id (the group's number over the output,
    empty for a one-sample group), its features with those of its aux lines (name -> content), labels and
    timestamp."""
    rows, number = [], 0
    for groups, lines1, lines2 in blocks:
        for group in groups:
            for s in group:
                line1 = lines1[s["refer"]]
                line2 = lines2[line1["refer"]]
                feats = {}
                for src in (s, line1, line2):
                    feats.update(src["sparse"])
                    feats.update(src["dense"])
                gid = b"%d" % number if len(group) > 1 else b""
                rows.append((s["sid"], gid, feats, s["labels"], s["ts"]))
            number += 1
    return rows


# decisions.md, text format: [+-](digits[.digits]|.digits)[e[+-]digits], or inf / infinity / nan in any case
_FLOAT_RE = re.compile(rb"[+-]?([0-9]+(\.[0-9]+)?|\.[0-9]+)([eE][+-]?[0-9]+)?\Z")
_TO_INF = Fraction(2**128) - Fraction(2**103)  # halfway from the largest float32 to 2**128: rounds (to even) to inf


def _read_f32(tok):
    """The float32 a decimal token stands for: the nearest one, ties to even, beyond the range ±inf."""
    if SPECIAL_RE.match(tok):
        return np.float32(float(tok))
    assert _FLOAT_RE.match(tok), tok
    exact = Fraction(tok.decode())
    neg = tok.startswith(b"-")
    if abs(exact) >= _TO_INF:
        return np.float32(-np.inf if neg else np.inf)
    guess = np.float32(min(max(float(exact), -F32_MAX), F32_MAX))  # float64 first: at most one float32 off
    with np.errstate(over="ignore"):  # the largest float32's next is inf, left out below
        near = [guess, np.nextafter(guess, np.float32(np.inf)), np.nextafter(guess, np.float32(-np.inf))]
    best = min(
        (c for c in near if np.isfinite(c)), key=lambda c: (abs(Fraction(float(c)) - exact), c.view(np.uint32) & 1)
    )
    return np.float32(-0.0) if best == 0 and neg else best


def _digits(mantissa):
    """Significant digits of a decimal mantissa (sign, point and the zeros around them left out)."""
    return len(mantissa.lstrip(b"+-").replace(b".", b"").strip(b"0")) or 1


def _float_value(tok):
    """The float32 bits of a float token of the kernel's, which must be spelled in the fewest significant digits that
    read back as the same float32 (decisions.md, pb/spb -> text), by the twin and by ingest's own text reader."""
    x = _read_f32(tok)
    back, status = numbers.scan_float(np.frombuffer(tok, np.uint8), 0, len(tok))
    assert status == numbers.OK and _bits(np.float32(back)) == _bits(x), (tok, back)
    if np.isfinite(x) and x != 0:
        shortest = np.format_float_scientific(x, unique=True).split("e")[0].encode()
        assert _digits(re.split(rb"[eE]", tok)[0]) == _digits(shortest), (tok, shortest)
    return _bits(x)


def _parse_text_line(line, label_count):
    """A text line read as FORMATS.md 1 says: ``(sid, gid, {name: content}, labels, ts)``, contents as bits; also
    the order of the sparse names (aux features follow the main ones)."""
    fields = line.split(b"|")
    assert len(fields) in (5, 6)
    sid, gid, sparse, dense, labels = fields[:5]
    feats = {n: [] for n in TW_SPARSE}
    feats.update({n: [_bits(0.0)] * w for n, (w, _) in TW_DENSE.items()})  # absent: empty, zero
    order = []
    for entry in sparse.split(b";") if sparse else []:
        name, toks = entry.split(b"@")
        order.append(name.decode())
        for tok in toks.split(b","):
            key, sep, value = tok.partition(b":")
            assert INT_RE.match(key), tok
            feats[name.decode()] += [(int(key), _float_value(value) if sep else _bits(1.0))]
    seen_dense = set()
    for entry in dense.split(b";") if dense else []:
        name, toks = entry.split(b"@")
        assert name not in seen_dense  # a dense feature repeated is an error
        seen_dense.add(name)
        feats[name.decode()] = [_float_value(tok) for tok in toks.split(b",")]
        assert len(feats[name.decode()]) == TW_DENSE[name.decode()][0]
    labels = [_float_value(tok) for tok in labels.split(b",")] if labels else []
    assert len(labels) == label_count
    ts = fields[5] if len(fields) == 6 else b""
    assert not ts or INT_RE.match(ts)
    return (sid, gid, feats, labels, int(ts or 0)), order


def _expected_line_values(row):
    sid, gid, feats, labels, ts = row
    values = {}
    for name, content in feats.items():
        if name in TW_SPARSE:
            values[name] = [(k, _bits(v)) for k, v in content]
        elif any(map(_written, content)):
            values[name] = [_bits(x) for x in content]
        else:  # a vector of +0.0 may be left out: it reads back the same
            values[name] = [_bits(0.0)] * len(content)
    return sid, gid, values, [_bits(x) for x in labels], ts


def _write_text(blocks, label_count, buffer=None):
    """The text ``_TextWriter`` writes for decoded ``blocks`` as ``_records_to_text`` drives it (group numbers
    running on from block to block), with an out buffer of ``buffer`` bytes to begin with when given."""
    writer = _TextWriter(_tw_schema(label_count))
    if buffer is not None:  # a small buffer makes the kernel stop before a line that might not fit
        writer.out = np.empty(buffer, np.uint8)
    writes, group = [], 0
    for groups, lines1, lines2 in blocks:
        group += writer.write(
            _decoded_block(groups, lines1, lines2, label_count), group, lambda a: writes.append(a.tobytes())
        )
    assert all(w.endswith(b"\n") for w in writes)  # whole lines in every write
    return b"".join(writes)


@settings(max_examples=250, deadline=None)
@given(_decoded_blocks(), st.sampled_from([None, None, 1, 80, 500]))
def test_write_text_rows_matches_twin(data, buffer):
    """Every line the text writer gives decoded pb blocks (three tables, aux lines reached through refer) reads back
    as the twin's sample: sample id, group number, ids, values, vectors, labels and timestamp, floats bit for bit
    and each in the fewest significant digits; aux features after the main ones; also with a small buffer."""
    label_count, blocks = data
    text = _write_text(blocks, label_count, buffer)
    want = _expected_rows(blocks)
    lines = text.split(b"\n")
    assert lines.pop() == b"" and len(lines) == len(want)
    for line, row in zip(lines, want):
        got, order = _parse_text_line(line, label_count)
        assert got == _expected_line_values(row)
        tables = [TW_SPARSE[n] for n in order]
        assert tables == sorted(tables) and len(set(order)) == len(order)
        assert set(order) == {n for n in TW_SPARSE if row[2][n]}  # every sparse feature with ids, none without


@pytest.mark.parametrize(
    "value",
    [1.0, 0.1, 1 / 3, 16777216.0, 1e-45, 1.1754944e-38, 3.4028235e38, 1e-7, 1.5e-8, 1e15, 9.999999e15, 1e16, -2.5, 0.3],
)
def test_float_spelling_reads_back_in_fewest_digits(value):
    """Values of note (powers of ten, the exponent form's edges, subnormals, float32's extremes) as a sparse value, a
    dense element and a label read back bit for bit in the fewest digits."""
    x = np.float32(value)
    s = _plain({"a": [(5, x)], "b": []}, {"d": [x, x]}, sid=b"s", labels=[x], ts=0)
    s["refer"] = 0
    empty1 = {"sparse": {"u": []}, "dense": {"e": [np.float32(0)]}, "refer": 0}
    empty2 = {"sparse": {"w": []}, "dense": {}}
    blocks = [([[s]], [empty1], [empty2])]
    [line] = _write_text(blocks, 1).splitlines()
    got, _ = _parse_text_line(line, 1)
    assert got == (
        b"s",
        b"",
        {"a": [(5, _bits(x))], "b": [], "u": [], "w": [], "d": [_bits(x)] * 2, "e": [0]},
        [_bits(x)],
        0,
    )
