"""The text kernels against the pure-Python twins of tests/naive.py on generated input."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ingest._native import numbers as N
from ingest.features import Schema, make_feature
from ingest.formats.base import Room
from ingest.formats.text import TextFormat
from ingest.sources import FileRange

import naive
from regions import fill_columns_with_garbage, room_to_spare


@pytest.fixture(autouse=True)
def _columns_of_garbage(monkeypatch):
    fill_columns_with_garbage(monkeypatch)


_int_tokens = st.one_of(
    st.integers(-(2**63), 2**63 - 1).map(str),
    st.integers(-(2**70), 2**70).map(str),
    st.sampled_from(
        [
            "0",
            "-0",
            "+5",
            "007",
            "-",
            "+",
            "",
            "1x",
            "--1",
            "9223372036854775807",
            "9223372036854775808",
            "-9223372036854775808",
            "-9223372036854775809",
            "000000000000000000000000042",
            "1 ",
            " 1",
        ]
    ),
)
_float_tokens = st.one_of(
    st.floats(allow_nan=False, width=32).map(repr),
    st.floats(allow_nan=False, allow_infinity=False).map(lambda x: f"{x:.6g}"),
    st.floats(-1e6, 1e6).map(lambda x: f"{x:.4f}"),
    st.integers(-(10**6), 10**6).map(str),
    st.sampled_from(
        [
            "1",
            "1.",
            ".5",
            "-.5",
            "+2.5",
            "1e5",
            "1E-5",
            "2.5e+3",
            "inf",
            "-Infinity",
            "NaN",
            "nan",
            "",
            ".",
            "e5",
            "1e",
            "1.2.3",
            "0x10",
            "1_0",
            "12345678901234567890.5",
            "0.000000000000000000000000001234",
            "3.4e39",
            "1e-50",
            "-0.0",
            "5e-324",
        ]
    ),
)


def _as_array(text):
    return np.frombuffer(text.encode(), np.uint8).copy()


def _same_float(got, want):
    with np.errstate(over="ignore"):
        got, want = np.float32(got), np.float32(want)
    if np.isnan(want):
        return bool(np.isnan(got))
    if got == want:
        return True
    # beyond 15 digits or 1e±22 the kernel is within a few float64 ulps: at most 1 float32 ulp apart
    return bool(np.nextafter(want, got) == got)


@given(_int_tokens)
def test_int_scanners_match_python_int(tok):
    arr = _as_array(tok)
    want = naive.parse_int(tok.encode())
    value, status = N.scan_int64(arr, 0, len(arr))
    pvalue, stop, pstatus = N.scan_int64_prefix(arr, 0, len(arr))
    if want == "bad":
        assert status == N.BAD
        assert pstatus != N.OK or stop < len(arr)
    elif want == "overflow":
        assert status == N.OVERFLOW
        assert pstatus == N.OVERFLOW and stop == len(arr)
    else:
        assert (value, status) == (want, N.OK)
        assert (pvalue, stop, pstatus) == (want, len(arr), N.OK)


@given(_float_tokens, st.sampled_from([",", ";", ""]))
def test_float_scanners_match_python_float(tok, delim):
    arr = _as_array(tok + delim)
    n = len(tok)
    want = naive.parse_float(tok.encode())
    value, status = N.scan_float(arr, 0, n)
    uvalue, stop, ustatus = N.scan_float_until(arr, 0, len(arr), ord(","), ord(";"))
    if want is None:
        assert status == N.BAD
        if "," not in tok and ";" not in tok:
            assert ustatus == N.BAD
    else:
        assert status == N.OK and _same_float(value, want), (tok, value, want)
        assert ustatus == N.OK and stop == n and _same_float(uvalue, want), (tok, uvalue, want)


# -- whole lines ------------------------------------------------------------------------------
SPARSE_NAMES = ["a", "b", "c"]
DENSE_NAMES = {"d": 3, "e": 1}

_keys = st.one_of(st.integers(-(2**63), 2**63 - 1).map(str), _int_tokens)
_token = st.one_of(
    _keys,
    st.tuples(_keys, _float_tokens).map(lambda kv: f"{kv[0]}:{kv[1]}"),
    st.integers(0, 10**12).map(str),
)
_sparse_entry = st.tuples(st.sampled_from(SPARSE_NAMES + ["zz", ""]), st.lists(_token, min_size=0, max_size=4)).map(
    lambda e: f"{e[0]}@{','.join(e[1])}"
)
_sparse_field = st.one_of(
    st.lists(_sparse_entry, max_size=4).map(";".join),
    st.sampled_from(["a", "a@1;", ";", "a@1;;b@2", "@"]),
)
_dense_entry = st.tuples(st.sampled_from(list(DENSE_NAMES) + ["zz"]), st.integers(0, 4)).flatmap(
    lambda e: st.lists(_float_tokens, min_size=e[1], max_size=e[1]).map(lambda v: f"{e[0]}@{','.join(v)}")
)
_dense_field = st.one_of(
    st.lists(_dense_entry, max_size=3).map(";".join),
    st.tuples(st.sampled_from(list(DENSE_NAMES)), st.integers(0, 4)).map(
        lambda e: f"{e[0]}@" + ",".join(["0.5"] * e[1])
    ),
)
_labels = st.lists(st.one_of(st.sampled_from(["0", "1", "1.0", "0.0"]), _float_tokens), max_size=3).map(",".join)
_ts = st.one_of(st.integers(0, 2**40).map(str), st.sampled_from(["", "-3", "x1", "99999999999999999999"]))
_line = st.tuples(
    st.text("abc_1}\x0b", max_size=12),  # "}" and "\x0b" sit one bit from "|" and "\n": the 8-byte scan checks them
    st.sampled_from(["", "g1", "g1", "g2", "}g"]),
    _sparse_field,
    _dense_field,
    _labels,
    _ts,
    st.sampled_from([6, 6, 6, 5, 4, 7]),
).map(lambda f: "|".join([*f[:5], f[5], "x"][: f[6]]))
_lines = st.lists(st.one_of(_line, _line, _line, st.sampled_from(["", "\r", "junk", "a|g1"])), max_size=25)


def _declared(cutoffs, mask):
    sparse = {n: c for n, c in zip(SPARSE_NAMES, cutoffs)}
    dense = {"d": (3, mask), "e": (1, None)}
    return sparse, dense


def _kernel_samples(tmp_path, data, sparse, dense, label_count, max_group_size, chunk_bytes, spare=Room.SPARE):
    specs = [make_feature(n, "sparse", cutoff=c) for n, c in sparse.items()]
    specs += [make_feature(n, "dense", nvec=nvec, mask=mask) for n, (nvec, mask) in dense.items()]
    errors = []
    fmt = TextFormat(
        Schema(specs, label_count), max_group_size=max_group_size, on_skip=errors.append, chunk_bytes=chunk_bytes
    )
    path = tmp_path / "lines.txt"
    path.write_bytes(data)
    with room_to_spare(spare):
        blocks = list(fmt.read_unit(FileRange(0, str(path), 0, None, len(data), None)))
    samples = []
    for blk in blocks:
        starts = set(blk.group_offsets[:-1].tolist())
        for r in range(blk.nrows):
            s = {
                "sid": blk.sid_bytes[blk.sid_offsets[r] : blk.sid_offsets[r + 1]].tobytes(),
                "sparse": {},
                "dense": {},
                "labels": blk.labels[r].tolist(),
                "ts": int(blk.timestamps[r]),
                "new_group": r in starts,
            }
            for f, spec in enumerate(specs[: len(sparse)]):
                a, b = blk.tables[0].sp_offsets[f, r], blk.tables[0].sp_offsets[f, r + 1]
                s["sparse"][spec.name] = list(zip(blk.sp_keys[a:b].tolist(), blk.sp_values[a:b].tolist()))
            for d, spec in enumerate(specs[len(sparse) :]):
                s["dense"][spec.name] = blk.tables[0].dense[d][r].tolist()
            samples.append(s)
    return samples, [(e.line, e.kind, e.field) for e in errors]


def _assert_same_samples(got, want):
    assert len(got) == len(want)
    prev_group = None
    for g, w in zip(got, want):
        assert g["sid"] == w["sid"]
        assert g["ts"] == w["ts"]
        assert g["new_group"] == (w["group"] != prev_group)
        prev_group = w["group"]
        assert len(g["labels"]) == len(w["labels"])
        assert all(_same_float(a, b) for a, b in zip(g["labels"], w["labels"]))
        for name, pairs in w["sparse"].items():
            assert [k for k, _ in g["sparse"][name]] == [k for k, _ in pairs]
            assert all(_same_float(a, b) for (_, a), (_, b) in zip(g["sparse"][name], pairs))
        for name, vals in w["dense"].items():
            assert len(g["dense"][name]) == len(vals)
            assert all(_same_float(a, b) for a, b in zip(g["dense"][name], vals))


@given(
    lines=_lines,
    crlf=st.booleans(),
    last_newline=st.booleans(),
    cutoffs=st.lists(st.integers(-3, 3), min_size=3, max_size=3),
    mask=st.sampled_from([None, "101", "010"]),
    label_count=st.integers(0, 2),
    max_group_size=st.sampled_from([1, 2, 3, 8192]),
    chunk_bytes=st.sampled_from([16, 64, 1 << 20]),
    spare=st.sampled_from([0, Room.SPARE]),
)
def test_text_parser_matches_twin(
    tmp_path, lines, crlf, last_newline, cutoffs, mask, label_count, max_group_size, chunk_bytes, spare
):
    """Values, groups and errors of the kernel path equal the twin's, whatever the chunking, and however short the
    sparse regions of a chunk are."""
    end = "\r\n" if crlf else "\n"
    data = end.join(lines).encode() + (end.encode() if last_newline and lines else b"")
    sparse, dense = _declared(cutoffs, mask)
    want, want_errors = naive.parse_text(data, sparse, dense, label_count, max_group_size)
    got, got_errors = _kernel_samples(tmp_path, data, sparse, dense, label_count, max_group_size, chunk_bytes, spare)
    _assert_same_samples(got, want)
    assert got_errors == want_errors


def test_regions_too_small_cut_blocks_short_and_lose_nothing(tmp_path):
    """A feature whose share of the ids grows past what the unit had so far fills its region of a chunk before the
    chunk ends: the block is cut short there (a FULL), and the next one goes on from that sample."""

    def ids(i, n):
        return ",".join(str(i * 100 + k) for k in range(n))

    many = [(1, 20) if i < 100 else (20, 1) for i in range(200)]  # ids of a and b: b's share first, then a's
    lines = [f"s{i}|g{i}|a@{ids(i, na)};b@{ids(i, nb)}||1" for i, (na, nb) in enumerate(many)]
    data = ("\n".join(lines) + "\n").encode()
    sparse, dense = {"a": 0, "b": 0}, {}
    want, want_errors = naive.parse_text(data, sparse, dense, 1)
    blocks = {}
    for spare in (0, Room.SPARE):
        got, got_errors = _kernel_samples(tmp_path, data, sparse, dense, 1, 8192, 4096, spare)
        _assert_same_samples(got, want)
        assert got_errors == want_errors == []
        fmt = TextFormat(Schema([make_feature(n, "sparse") for n in sparse], 1), chunk_bytes=4096)
        with room_to_spare(spare):
            unit = FileRange(0, str(tmp_path / "lines.txt"), 0, None, len(data), None)
            blocks[spare] = len(list(fmt.read_unit(unit)))
    assert blocks[0] > blocks[Room.SPARE]  # not vacuous: without room to spare, blocks were cut short
