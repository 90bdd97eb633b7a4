"""The feature DSL: the kernel against the pure-Python twin, XDL's worked cases, cross64, errors, conf files."""

import dataclasses
import math
import re

import numpy as np
import pytest
from hypothesis import given, strategies as st

import ingest
from ingest import sample_pb2 as pb
from ingest._native.dsl import SHAPE_ANY, SHAPE_CROSS, SHAPE_CROSS3, SHAPE_LEAF, SHAPE_MATCH
from ingest.dsl.compiler import MAX_DEPTH, MAX_PARTS
from ingest.dsl.stage import dsl_stage
from ingest.errors import DslError, DslLimitError
from ingest.features import FeatureSpec, Schema, make_feature

from conftest import flatten
from dsl_twin import cross64 as twin_cross64, evaluate, render
from pbwire import frame, group_records

# features of the generated data: sparse a, b, c and dense d (width 3) per sample; sparse u and
# dense e (width 2) on the aux line a sample refers to
SPARSE0 = ("a", "b", "c")
AUX_TABLE = {"a": 0, "b": 0, "c": 0, "d": 0, "u": 1, "e": 1}
WIDTH = {"d": 3, "e": 2}

# published test vectors of cross64 (docs/dsl.md)
CROSS64_VECTORS = [
    (0, 0, 2598789274482403935),
    (1, 2, 291940170188633529),
    (2, 1, 8737326102237630251),
    (-1, 0, 2461230878022469052),
    (2**63 - 1, -(2**63), 2722747965676189055),
    (123456789, 987654321, 7895786312483830334),
]


@pytest.mark.parametrize("a,b,want", CROSS64_VECTORS)
def test_cross64_vectors(a, b, want):
    assert ingest.dsl.cross64(a, b) == want
    assert twin_cross64(a, b) == want


@given(a=st.integers(-(2**63), 2**63 - 1), b=st.integers(-(2**63), 2**63 - 1))
def test_cross64_matches_twin(a, b):
    got = ingest.dsl.cross64(a, b)
    assert got == twin_cross64(a, b) and 0 <= got < 2**63


# -- generated expressions over generated samples ----------------------------------------------------

_pairs = st.lists(st.tuples(st.integers(-3, 6), st.floats(-4, 4, width=32)), max_size=4)
_vector = st.lists(st.floats(-4, 4, width=32), min_size=1, max_size=1)
_leaf = st.sampled_from(sorted(AUX_TABLE))
_unary = st.sampled_from(["log", "value", "sum", "count", "avg", "max", "min", "logsum", "logavg", "logmax", "logmin"])


def _extend(inner):
    return st.one_of(
        st.tuples(st.sampled_from(["cartesian", "match", "intersection"]), inner, inner),
        st.tuples(st.sampled_from(["cartesian", "match"]), inner, inner, inner),
        st.tuples(_unary, inner),
        st.tuples(st.just("hash"), inner, st.integers(1, 1000)),
        st.builds(
            lambda a, bounds: ("bucketize", a, *sorted(bounds)),
            inner,
            st.lists(st.floats(-4, 4, width=16), min_size=1, max_size=12),
        ),
        st.tuples(st.sampled_from(["cosine", "dot"]), inner, inner),
    )


_expr = st.recursive(_leaf, _extend, max_leaves=4)


@st.composite
def _groups(draw, pairs=_pairs):
    groups = []
    for _ in range(draw(st.integers(1, 4))):
        aux = [
            {"u": draw(pairs), "e": [draw(st.floats(-4, 4, width=32)) for _ in range(2)]}
            for _ in range(draw(st.integers(1, 2)))
        ]
        samples = []
        for _ in range(draw(st.integers(1, 3))):
            s = {n: draw(pairs) for n in SPARSE0}
            s["d"] = [draw(st.floats(-4, 4, width=32)) for _ in range(3)]
            s["refer"] = draw(st.integers(0, len(aux) - 1))
            samples.append(s)
        groups.append((samples, aux))
    return groups


def _write(path, groups):
    path.write_bytes(group_records(groups, ("a", "b", "c", "d"), ("u", "e"), dense=WIDTH))


def _raw_reader(path):
    reader = ingest.DataReader("dsl", [str(path)], file_type="pb").label_count(1).batch_size(3)
    for name, table in AUX_TABLE.items():
        if name in WIDTH:
            reader.feature(name, "dense", table=table, nvec=WIDTH[name])
        else:
            reader.feature(name, "sparse", table=table)
    return reader


def _close(got, want):
    """Keys equal; values equal as float32, up to an ulp of the float64 log; NaN equals NaN."""
    if [k for k, _ in got] != [k for k, _ in want]:
        return False
    g = np.array([v for _, v in got], np.float64)
    w = np.array([v for _, v in want], np.float32).astype(np.float64)
    return bool(np.all(np.isclose(g, w, rtol=1e-6, atol=1e-9, equal_nan=True)))


@given(groups=_groups(), exprs=st.lists(_expr, min_size=1, max_size=3), as_dense=st.booleans(), on_aux=st.booleans())
def test_kernel_matches_twin(tmp_path, groups, exprs, as_dense, on_aux):
    """Every function, nested, over table-0 and aux inputs, against the pure-Python evaluator."""
    _check_against_twin(tmp_path, groups, exprs, as_dense, on_aux)


# the plans the kernel runs with no registers (native/dsl.py, SHAPE_*): a sparse input crossed with or matched
# against another, crossed with two others, or read as it is; an input is a declared feature or a part computed per
# aux line
_direct_input = st.one_of(
    st.sampled_from(["a", "b", "c", "u"]), st.tuples(st.sampled_from(["logsum", "count"]), st.just("u"))
)
_direct = st.one_of(
    st.tuples(st.just("cartesian"), _direct_input, _direct_input),
    st.tuples(st.just("cartesian"), _direct_input, _direct_input, _direct_input),
    st.tuples(st.just("match"), _direct_input, _direct_input),
    _direct_input,
)


# few keys, so that an id repeats within a row and across features; some with a high word
_close_pairs = st.lists(
    st.tuples(st.sampled_from([0, 0, 0, 5]), st.integers(0, 3), st.floats(-4, 4, width=32)), max_size=4
)


@given(groups=_groups(_close_pairs), exprs=st.lists(_direct, min_size=1, max_size=3), on_aux=st.booleans())
def test_direct_plans_match_twin(tmp_path, groups, exprs, on_aux):
    _check_against_twin(tmp_path, groups, exprs, False, on_aux)


def test_common_ctr_features_compile_to_direct_plans():
    """Crosses of two or three inputs, matches of two, and the samples' read of a part computed per aux line, run
    without the registers (their speed, not their values: the twin tests check those); other plans run through
    them."""
    reader = _raw_reader("unused.pb")
    exprs = {
        "au": "cartesian(a, u)",
        "ab": "match(a, b)",
        "lu": "logsum(u)",
        "h": "hash(a, 10)",
        "abu": "cartesian(a, b, u)",
        "abuc": "cartesian(a, b, u, c)",
    }
    for name, text in exprs.items():
        reader.feature(name, "sparse", dsl=text)
    stage = dsl_stage(reader.schema)
    shapes = dict(zip((plan.name for plan in stage.plans), stage._fused.shape.tolist()))
    direct = {"au": SHAPE_CROSS, "ab": SHAPE_MATCH, "lu": SHAPE_LEAF, "abu": SHAPE_CROSS3}  # lu: logsum(u)'s samples
    assert shapes == {**{name: SHAPE_ANY for name in shapes}, **direct}
    assert set(shapes) == {"au", "ab", "lu:0", "lu", "h", "abu", "abuc"}  # lu:0: the sum and log per aux line


def _check_against_twin(tmp_path, groups, exprs, as_dense, on_aux):
    path = tmp_path / "g.pb"
    _write(path, groups)
    reader = _raw_reader(path)
    declared = {}
    for i, expr in enumerate(exprs):
        name = f"x{i}"
        text = render(expr)
        aux_only = all(AUX_TABLE[n] == 1 for n in _leaves(expr))
        if as_dense and i == 0:  # an aggregate is one value per row: it may be a dense feature
            expr = ("sum", expr)
            text = render(expr)
            reader.feature(name, "dense", nvec=1, dsl=text)
        else:
            reader.feature(name, "sparse", dsl=text, table=1 if on_aux and aux_only else 0)
        declared[name] = expr
    got = [s for b in reader.startup().read_all() for s in flatten(b)]
    samples = [_high_words_crossed(dict(s, **aux[s["refer"]])) for ss, aux in groups for s in ss]
    assert len(got) == len(samples)
    for g, s in zip(got, samples):
        for name, expr in declared.items():
            want = evaluate(expr, s)
            if name in g["dense"]:
                assert _close(list(enumerate(g["dense"][name])), [(0, want[0][1])]), (render(expr), s)
            else:
                assert _close(g["sparse"][name], want), (render(expr), s, g["sparse"][name], want)


def _high_words_crossed(sample):
    """A sample as the twin takes it: an id ``(hkey, key, value)`` enters as ``(cross64(hkey, key), value)``, and
    ``(key, value)`` as it is."""
    return {
        name: [(twin_cross64(e[0], e[1]) if e[0] else e[1], e[2]) if len(e) == 3 else e for e in got]
        if name in AUX_TABLE and name not in WIDTH
        else got
        for name, got in sample.items()
    }


def _leaves(expr):
    if isinstance(expr, str):
        return [expr]
    if isinstance(expr, tuple):
        return [n for a in expr[1:] for n in _leaves(a)]
    return []


# -- worked cases -------------------------------------------------------------------------------------


def _text_reader(tmp_path, line, *sparse):
    path = tmp_path / "s.txt"
    path.write_text(line + "\n")
    reader = ingest.DataReader("dsl", [str(path)]).label_count(1)
    for name in sparse:
        reader.feature(name, "sparse", serialized=True)
    return reader


def test_xdl_worked_case(tmp_path):
    """min(max(sum(match(ad_cate_id, log(nick_cate_pv_14))))) gives one pair: key 0 and the sum of two products."""
    reader = _text_reader(
        tmp_path,
        "s|g|ad_cate_id@2:0.1,0:0.2,5:0.3;nick_cate_pv_14@0:0.1,1:0.2,2:0.3,3:0.4||1",
        "ad_cate_id",
        "nick_cate_pv_14",
    )
    expr = "min(max(sum(match(ad_cate_id, log(nick_cate_pv_14)))))"
    reader.feature("x", "sparse", serialized=True, dsl=expr)
    reader.feature("x_dense", "dense", nvec=1, dsl=expr)
    [batch] = reader.startup().read_all()
    f32 = lambda v: float(np.float32(v))  # noqa: E731 - the parsed inputs are float32
    want = f32(0.1) * math.log(f32(0.3) + 1e-8) + f32(0.2) * math.log(f32(0.1) + 1e-8)
    assert batch["x"].ids.tolist() == [0]
    assert batch["x"].values[0] == np.float32(want)
    assert abs(want - (0.1 * math.log(0.3 + 1e-8) + 0.2 * math.log(0.1 + 1e-8))) < 1e-7
    assert batch["x_dense"][0, 0] == np.float32(want)


def test_cartesian_of_three_nests_left_to_right(tmp_path):
    # 20 samples of 60 pairs each: the result outgrows the output the stage starts with (2 pairs a row and 64)
    line = "s{i}|g{i}|a@1:1,2:2,3:3,4:4;b@10:1,20:1,30:1,40:1,50:0.5;c@7:1,8:2,9:-1||1"
    reader = _text_reader(tmp_path, "\n".join(line.format(i=i) for i in range(20)), "a", "b", "c")
    reader.feature("abc", "sparse", serialized=True, dsl="cartesian(a, b, c)")
    [batch] = reader.startup().read_all()
    a = [(1, 1.0), (2, 2.0), (3, 3.0), (4, 4.0)]
    b = [(10, 1.0), (20, 1.0), (30, 1.0), (40, 1.0), (50, 0.5)]
    c = [(7, 1.0), (8, 2.0), (9, -1.0)]
    want = [(twin_cross64(twin_cross64(ka, kb), kc), va * vb * vc) for ka, va in a for kb, vb in b for kc, vc in c]
    assert len(want) == 60
    assert batch["abc"].offsets.tolist()[:21] == list(range(0, 1201, 60))
    assert batch["abc"].ids.tolist() == [k for k, _ in want] * 20
    assert batch["abc"].values.tolist() == [v for _, v in want] * 20


def test_plans_run_together_keep_their_own_registers_constants_and_results(tmp_path):
    """Every plan of a reader runs in one kernel call over one register file, constant table and result pool:
    each plan's constants, registers and results stay its own, and a feature reads an earlier one's result."""
    reader = _text_reader(tmp_path, "s|g|a@1:0.5,2:1.5,3:2.5;b@4:3.0,5:-1.0||1", "a", "b")
    reader.feature("ba", "sparse", serialized=True, dsl="bucketize(a, 1, 2)")
    reader.feature("bb", "sparse", serialized=True, dsl="bucketize(b, 0, 2.5, 10)")
    reader.feature("sb", "sparse", serialized=True, dsl="sum(bb)")
    reader.feature("x", "sparse", serialized=True, dsl="cartesian(ba, b)")
    [batch] = reader.startup().read_all()
    assert batch["ba"].ids.tolist() == [0, 1, 2] and batch["ba"].values.tolist() == [1.0, 1.0, 1.0]
    assert batch["bb"].ids.tolist() == [2, 0]
    assert batch["sb"].ids.tolist() == [0] and batch["sb"].values.tolist() == [2.0]
    assert batch["x"].ids.tolist() == [twin_cross64(ka, kb) for ka in (0, 1, 2) for kb in (4, 5)]
    assert batch["x"].values.tolist() == [3.0, -1.0] * 3


def test_high_words_enter_as_crossed_keys(tmp_path):
    g = pb.SampleGroup()
    g.labels.add().values.append(1)
    f = g.feature_tables.add().feature_lines.add().features.add(type=pb.kSparse, name="a")
    f.values.add(key=5, hkey=7)
    f.values.add(key=6)
    path = tmp_path / "h.pb"
    path.write_bytes(frame([g.SerializeToString()]))
    reader = ingest.DataReader("h", [str(path)], file_type="pb").feature("a", "sparse")
    reader.feature("h", "sparse", serialized=True, dsl="hash(a, 1000)")
    [batch] = reader.startup().read_all()
    assert batch["h"].ids.tolist() == [twin_cross64(twin_cross64(7, 5), 0) % 1000, twin_cross64(6, 0) % 1000]


def test_aux_only_expression_is_computed_per_aux_line(tmp_path):
    """An aggregate over an aux feature, declared on table 1, has one row per aux line; on table 0, one per sample."""
    groups = [
        (
            [{"a": [], "b": [], "c": [], "d": [0, 0, 0], "refer": r} for r in (0, 0, 1)],
            [{"u": [(1, 2.0), (2, 3.0)], "e": [1, 1]}, {"u": [(5, 1.0)], "e": [0, 0]}],
        )
    ]
    path = tmp_path / "aux.pb"
    _write(path, groups)
    reader = _raw_reader(path).batch_size(8)
    reader.feature("su_aux", "sparse", table=1, serialized=True, dsl="sum(u)")
    reader.feature("su", "sparse", serialized=True, dsl="cartesian(sum(u), a)")
    reader.feature("su0", "sparse", serialized=True, dsl="sum(u)")
    [batch] = reader.startup().read_all()
    assert batch.table_rows[1] == 3  # two aux lines and the padding row
    assert batch["su_aux"].values.tolist() == [5.0, 1.0]
    assert batch["su_aux"].offsets.tolist() == [0, 1, 2, 2]
    assert batch["su0"].values.tolist() == [5.0, 5.0, 1.0]
    assert batch["su"].values.tolist() == []


_ELEVEN = ",".join(map(str, range(11)))


@pytest.mark.parametrize(
    "features,expr,pairs",
    [
        ("a@1,2,3,4;b@1,2,3,4", "cartesian(a, b)", 16),
        ("a@1,2,3,4;b@1,2,3,4", "cartesian(a, log(b))", 16),  # through the registers: the same checks, in turn
        ("a@1,2;b@1,2,3;c@1,2,3,4", "cartesian(a, b, c)", 24),  # each input and a x b pass, the whole does not
        ("a@1,2;b@1,2,3,4,5,6;c@1", "cartesian(a, b, c)", 12),  # a x b is checked before c is read
        (f"a@1;b@1;c@{_ELEVEN}", "cartesian(a, b, c)", 11),
        (f"a@{_ELEVEN};b@1", "match(a, b)", 11),
        (f"a@{_ELEVEN};b@1", "match(a, log(b))", 11),
    ],
)
def test_result_too_large_is_a_located_error(tmp_path, monkeypatch, features, expr, pairs):
    monkeypatch.setattr(ingest.dsl.stage, "MAX_PAIRS_PER_ROW", 10)
    reader = _text_reader(tmp_path, f"s7|g|{features}||1", "a", "b", "c")
    reader.feature("ab", "sparse", dsl=expr)
    with pytest.raises(DslLimitError) as exc:
        reader.startup().read_all()
    assert "'ab'" in str(exc.value) and f" {pairs} pairs" in str(exc.value) and "'s7'" in str(exc.value)
    assert exc.value.source.endswith("s.txt")


# -- errors at feature() time --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "expr,column,says",
    [
        ("cartesain(a, b)", 1, "unknown function 'cartesain'"),
        ("cartesian(a, zz)", 14, "unknown feature 'zz'"),
        ("log(a, b)", 1, "log() takes 1 argument, got 2"),
        ("cartesian(a)", 1, "takes at least 2 arguments"),
        ("cartesian(a,", 13, "unexpected end of the expression"),
        ("match(a b)", 9, "unexpected 'b'"),
        ("hash(a, 2.5)", 9, "whole number of buckets"),
        ("hash(a, b)", 9, "takes numbers after its first argument"),
        ("bucketize(a, 3, 1)", 17, "must not decrease"),
        ("log(3)", 5, "a number where a feature"),
        ("sum(log(x))", 9, "refers to 'x' itself"),
        ("hash(a, 0)", 9, "whole number of buckets from 1 to 2**63 - 1 (9223372036854775807), got 0"),
        ("hash(a, 1e400)", 9, "whole number of buckets from 1 to 2**63 - 1 (9223372036854775807), got 1e400"),
        ("hash(a, 1e19)", 9, "whole number of buckets from 1 to 2**63 - 1 (9223372036854775807), got 1e19"),
        ("hash(a, 9223372036854775808)", 9, "got 9223372036854775808"),  # 2**63: beyond int64
        ("bucketize(a, 1, 1e400)", 17, "1e400 is beyond the range of float64"),
        ("bucketize(a, -1e400)", 14, "-1e400 is beyond the range of float64"),
    ],
)
def test_errors_show_a_caret(expr, column, says):
    reader = ingest.DataReader("e", ["unused.txt"]).feature("a", "sparse").feature("b", "sparse")
    with pytest.raises(DslError) as exc:
        reader.feature("x", "sparse", dsl=expr)
    msg = str(exc.value)
    assert says in msg, msg
    assert exc.value.column == column
    line, caret = msg.splitlines()[-2:]
    assert line.strip() == expr and caret.index("^") - line.index(expr) == column - 1


def test_declaration_errors():
    reader = ingest.DataReader("e", ["unused.txt"]).feature("a", "sparse").feature("u", "sparse", table=1)
    with pytest.raises(DslError, match="one value per row"):
        reader.feature("x", "dense", nvec=1, dsl="log(a)")
    with pytest.raises(ingest.ConfigError, match="nvec"):
        reader.feature("x", "dense", nvec=2, dsl="sum(a)")
    with pytest.raises(DslError, match="shallowest table"):
        reader.feature("x", "sparse", table=1, dsl="cartesian(a, u)")
    with pytest.raises(ingest.ConfigError, match="cutoff"):
        reader.feature("x", "sparse", cutoff=2, dsl="log(a)")
    reader.feature("y", "sparse", dsl="log(a)")
    reader.feature("z", "sparse", dsl="cartesian(y, u)")  # DSL features may use earlier ones


# -- XDL's conf files ------------------------------------------------------------------------------------


def test_load_feature_conf(tmp_path):
    conf = tmp_path / "features.conf"
    conf.write_text(
        "# crosses\n"
        "Name=ab ; Type=KV ; Expr=cartesian(a, b)\n"
        "\u3000Name=\u3000s\u3000;Type=Numeric;Expr=sum(ab)\u3000\n"
        "\n"
        "Name=later;Type=ID;Expr=match(early, a)\n"
        "Name=early;Type=ID;Expr=value(b)\n",
        encoding="utf-8",
    )
    specs = ingest.load_feature_conf(str(conf))
    assert [(s.name, s.type.value, s.nvec, s.dsl) for s in specs] == [
        ("ab", "sparse", 0, "cartesian(a, b)"),
        ("s", "dense", 1, "sum(ab)"),
        ("early", "sparse", 0, "value(b)"),
        ("later", "sparse", 0, "match(early, a)"),
    ]
    path = tmp_path / "s.txt"
    path.write_text("s|g|a@1:2,2:1;b@2:5||1\n")
    reader = ingest.DataReader("c", [str(path)]).feature("a", "sparse").feature("b", "sparse").features(specs)
    [batch] = reader.startup().read_all()
    assert batch["s"][0, 0] == 15.0
    assert batch["later"].values.tolist() == [5.0]


@pytest.mark.parametrize(
    "text,says",
    [
        ("Name=x;Type=KV;Expr=log(y)\nName=y;Type=KV;Expr=log(x)\n", "a cycle"),
        ("Name=x;Type=Float;Expr=log(a)\n", "Type='Float'"),
        ("Name=x;Expr=log(a)\n", "missing Type="),
        ("Name=x;Type=KV;Expr=log(a\n", "features.conf:1"),
    ],
)
def test_conf_errors(tmp_path, text, says):
    conf = tmp_path / "features.conf"
    conf.write_text(text)
    with pytest.raises(ingest.ConfigError) as exc:
        ingest.load_feature_conf(str(conf))
    assert says in str(exc.value)


def test_conf_dsl_errors_keep_their_attributes_and_say_the_file_and_line(tmp_path):
    conf = tmp_path / "features.conf"
    conf.write_text("# crosses\nName=x;Type=KV;Expr=cartesian(a b)\n")
    with pytest.raises(DslError) as exc:
        ingest.load_feature_conf(str(conf))
    first, line, caret = str(exc.value).splitlines()
    assert first == f"{conf}:2: feature 'x': syntax error at column 13: unexpected 'b'; an expression is a " + (
        "feature name or function(expression, ...)"
    )
    assert (exc.value.feature, exc.value.expression, exc.value.column) == ("x", "cartesian(a b)", 13)
    assert (exc.value.source, exc.value.line) == (str(conf), 2)
    assert line.strip() == "cartesian(a b)" and caret.index("^") - line.index("c") == 12


def test_a_conf_feature_refused_where_it_is_declared_names_its_file_and_line(tmp_path):
    """A conf file's features are checked against the reader's when declared (``reader.features``): the error
    about one names its entry, as an error of the file itself does."""
    conf = tmp_path / "features.conf"
    conf.write_text("# crosses\nName=ab;Type=KV;Expr=cartesian(a, b)\n\nName=az;Type=KV;Expr=cartesian(a, zz)\n")
    specs = ingest.load_feature_conf(str(conf))
    assert [s.origin for s in specs] == [(str(conf), 2), (str(conf), 4)]
    assert specs[0] == make_feature("ab", "sparse", dsl="cartesian(a, b)")  # where it came from is not what it is
    assert make_feature(**dataclasses.asdict(specs[1])).origin == (str(conf), 4)  # as compile-ahead remakes specs
    reader = ingest.DataReader("c", ["unused.txt"]).feature("a", "sparse").feature("b", "sparse")
    with pytest.raises(DslError) as exc:
        reader.features(specs)
    first, line, caret = str(exc.value).splitlines()
    assert first == f"{conf}:4: feature 'az': unknown feature 'zz': declare it before the features using it"
    assert (exc.value.feature, exc.value.expression, exc.value.column) == ("az", "cartesian(a, zz)", 14)
    assert (exc.value.source, exc.value.line) == (str(conf), 4)
    assert [s.name for s in reader.schema.specs] == ["a", "b", "ab"]  # the entries before it are declared
    reader = ingest.DataReader("c", ["unused.txt"]).feature("a", "sparse").feature("ab", "sparse")
    with pytest.raises(ingest.ConfigError) as exc:
        reader.features(specs[:1])
    assert type(exc.value) is ingest.ConfigError and str(exc.value).startswith(f"{conf}:2: ")
    unfiled = dataclasses.replace(specs[1], origin=None)  # a spec of no file: the error as feature() raises it
    with pytest.raises(DslError) as exc:
        ingest.DataReader("c", ["unused.txt"]).feature("a", "sparse").features([unfiled])
    assert str(exc.value).startswith("feature 'az': unknown feature 'zz'") and exc.value.source is None


def test_a_conf_file_that_is_not_utf8_is_a_config_error_at_its_byte(tmp_path):
    conf = tmp_path / "features.conf"
    conf.write_bytes(b"Name=ok;Type=KV;Expr=log(a)\r\nName=\xe9t\xe9;Type=KV;Expr=log(a)\n")
    with pytest.raises(ingest.ConfigError) as exc:
        ingest.load_feature_conf(str(conf))
    assert type(exc.value) is ingest.ConfigError
    assert str(exc.value) == (
        f"{conf}:2: byte 34: b'\\xe9' is not UTF-8 (invalid continuation byte); a conf file is UTF-8 text"
    )


def test_conf_entries_in_a_chain_longer_than_the_recursion_limit_come_in_dependency_order(tmp_path):
    conf = tmp_path / "features.conf"
    chain = "".join(f"Name=f{i};Type=KV;Expr=value(f{i + 1})\n" for i in range(2000))
    conf.write_text(chain + "Name=f2000;Type=KV;Expr=log(a)\n")
    specs = ingest.load_feature_conf(str(conf))
    assert [s.name for s in specs] == [f"f{i}" for i in range(2000, -1, -1)]
    conf.write_text(chain + "Name=f2000;Type=KV;Expr=value(f0)\n")  # the same chain closed into a cycle
    with pytest.raises(DslError) as exc:
        ingest.load_feature_conf(str(conf))
    assert str(exc.value).startswith(f"{conf}:2001: feature 'f2000': 'f0' depends on 'f2000' (a cycle)")
    assert (exc.value.feature, exc.value.expression, exc.value.column) == ("f2000", "value(f0)", 7)


# -- numbers, limits and names of the plans --------------------------------------------------------------


def test_hash_takes_any_bucket_count_up_to_int64_max_exactly(tmp_path):
    """Buckets are taken as written, not through a float: 2**63 - 1 is not rounded to 2**63, which int64 lacks."""
    reader = _text_reader(tmp_path, "s|g|a@5,6||1", "a")
    reader.feature("h", "sparse", serialized=True, dsl="hash(a, 9223372036854775807)")
    reader.feature("h3", "sparse", serialized=True, dsl="hash(a, 3e0)")  # a whole number written as a float
    [batch] = reader.startup().read_all()
    assert batch["h"].ids.tolist() == [twin_cross64(k, 0) % (2**63 - 1) for k in (5, 6)]
    assert batch["h3"].ids.tolist() == [twin_cross64(k, 0) % 3 for k in (5, 6)]


def test_calls_nested_deeper_than_the_limit_are_refused_at_the_first_too_deep():
    reader = ingest.DataReader("e", ["unused.txt"]).feature("a", "sparse")
    reader.feature("ok", "sparse", dsl="log(" * MAX_DEPTH + "a" + ")" * MAX_DEPTH)
    deep = "log(" * 400 + "a" + ")" * 400
    with pytest.raises(DslError) as exc:
        reader.feature("x", "sparse", dsl=deep)
    assert f"nests deeper than {MAX_DEPTH} levels" in str(exc.value)
    assert (exc.value.feature, exc.value.expression) == ("x", deep)
    assert exc.value.column == 4 * (MAX_DEPTH + 1)  # the parenthesis opening level MAX_DEPTH + 1


@pytest.mark.parametrize(
    "step,levels,column",
    [
        ("value({p})", 2, 7),  # a call and the DSL feature it names: two levels a feature
        ("{p}", 1, 1),  # a DSL feature that is another's name: one level a feature
    ],
)
def test_a_chain_of_dsl_features_deeper_than_the_limit_is_refused(step, levels, column):
    """Each DSL feature names the one before (substituted in); d0 = cartesian(a, b) is one level."""
    reader = ingest.DataReader("e", ["unused.txt"]).feature("a", "sparse").feature("b", "sparse")
    reader.feature("d0", "sparse", dsl="cartesian(a, b)")
    with pytest.raises(DslError) as exc:
        for i in range(1, 2000):
            reader.feature(f"d{i}", "sparse", dsl=step.format(p=f"d{i - 1}"))
    refused = (MAX_DEPTH - 1) // levels + 1  # d_i is 1 + levels * i deep
    assert exc.value.feature == f"d{refused}" and exc.value.column == column
    assert exc.value.expression == step.format(p=f"d{refused - 1}")
    assert f"with the DSL features it names substituted in, the expression nests deeper than {MAX_DEPTH}" in str(
        exc.value
    )
    assert [s.name for s in reader.schema.specs][-1] == f"d{refused - 1}"


def test_a_chain_of_dsl_features_that_doubles_is_refused_past_the_size_limit():
    """d_i = cartesian(d_i-1, d_i-1) has 3 + 2 * parts(d_i-1) parts (a named DSL feature is one more), 6 * 2^i - 3:
    d13 has 49,149, d14 98,301."""
    reader = ingest.DataReader("e", ["unused.txt"]).feature("a", "sparse").feature("b", "sparse")
    reader.feature("d0", "sparse", dsl="cartesian(a, b)")
    for i in range(1, 14):
        reader.feature(f"d{i}", "sparse", dsl=f"cartesian(d{i - 1}, d{i - 1})")
    with pytest.raises(DslError) as exc:
        reader.feature("d14", "sparse", dsl="cartesian(d13, d13)")
    assert f"substituted in, the expression has more than {MAX_PARTS:,} parts" in str(exc.value)
    assert (exc.value.feature, exc.value.column) == ("d14", 16)  # the second d13 goes over


def test_an_expression_of_more_parts_than_the_limit_is_refused_at_the_part_beyond():
    bounds = [str(i) for i in range(MAX_PARTS)]
    expr = f"bucketize(a, {', '.join(bounds)})"
    reader = ingest.DataReader("e", ["unused.txt"]).feature("a", "sparse")
    with pytest.raises(DslError) as exc:
        reader.feature("x", "sparse", dsl=expr)
    assert f"the expression has more than {MAX_PARTS:,} parts" in str(exc.value)
    # bucketize and a are parts 1 and 2: the boundary MAX_PARTS - 2 (from 0) is one too many
    assert exc.value.column == expr.index(f" {MAX_PARTS - 2},") + 2


def test_bucketize_of_thousands_of_boundaries_counts_those_at_or_below_each_value(tmp_path):
    """The kernel bisects the boundaries: a value's bucket is the number of boundaries <= it (repeated boundaries
    each count; a NaN is below every boundary), as the twin counts them one by one."""
    bounds = sorted(float(b) for b in np.random.default_rng(7).integers(-3000, 3000, 5000) / 4)
    values = [-1e9, bounds[0], bounds[0] - 0.125, 0.0, -0.0, bounds[2500], bounds[-1], 1e9, 37.3]
    line = "s|g|a@" + ",".join(f"{i}:{v!r}" for i, v in enumerate(values)) + ",99:nan||1"
    reader = _text_reader(tmp_path, line, "a")
    reader.feature("b", "sparse", serialized=True, dsl=f"bucketize(a, {', '.join(map(repr, bounds))})")
    [batch] = reader.startup().read_all()
    want = [sum(1 for b in bounds if b <= v) for v in values] + [0]
    assert batch["b"].ids.tolist() == want
    assert want[:3] == [0, bounds.count(bounds[0]), 0] and want[-3] == 5000


def _aux_groups():
    return [
        (
            [{"a": [(7, 1.0)], "b": [(8, 2.0)], "c": [], "d": [0, 0, 0], "refer": r} for r in (0, 0, 1)],
            [{"u": [(1, 2.0), (2, 3.0)], "e": [1, 1]}, {"u": [(5, 1.0)], "e": [0, 0]}],
        )
    ]


def test_no_feature_takes_the_name_of_a_part_computed_per_aux_line(tmp_path):
    """A hidden plan is named "<feature>:<n>", which no feature name can be: a feature "x#0" and x's hidden plan
    "x:0" are two plans, each read by its own leaves (one name for both made a leaf read out of bounds)."""
    path = tmp_path / "aux.pb"
    _write(path, _aux_groups())
    results = []
    for other in ("y", "x#0"):
        reader = _raw_reader(path).batch_size(8)
        reader.feature(other, "sparse", serialized=True, dsl="cartesian(a, b)")
        reader.feature("x", "sparse", serialized=True, dsl="cartesian(a, logsum(u))")
        stage = dsl_stage(reader.schema)
        assert [(p.name, p.table, p.hidden) for p in stage.plans] == [
            (other, 0, False),
            ("x:0", 1, True),
            ("x", 0, False),
        ]
        assert [leaf[:2] for leaf in stage.plans[2].leaves] == [("a", 0), ("x:0", 1)]
        [batch] = reader.startup().read_all()
        results.append((batch["x"].ids.tolist(), batch["x"].values.tolist(), batch[other].ids.tolist()))
    assert results[0] == results[1]
    # a's (7, 1.0) crossed with the logsum of its sample's aux line: key 0, ln(5) twice then ln(1)
    assert results[0][0] == [twin_cross64(7, 0)] * 3
    assert np.allclose(results[0][1], [math.log(5.0 + 1e-8)] * 2 + [math.log(1.0 + 1e-8)])
    assert results[0][2] == [twin_cross64(7, 8)] * 3
    with pytest.raises(ingest.ConfigError, match=re.escape("'x:0': expected a non-empty string without | @ ; , :")):
        _raw_reader(path).feature("x:0", "sparse")


def test_plans_of_one_name_are_refused_before_any_block_is_read():
    """FeatureSpecs made by hand skip make_feature's check of names: the stage refuses two plans of one name rather
    than let a leaf read the wrong table's rows."""
    specs = [
        FeatureSpec("a", ingest.features.sparse),
        FeatureSpec("u", ingest.features.sparse, table=1),
        FeatureSpec("x:0", ingest.features.sparse, dsl="cartesian(a, a)"),
        FeatureSpec("x", ingest.features.sparse, dsl="cartesian(a, logsum(u))"),
    ]
    with pytest.raises(ingest.ConfigError, match="DSL plan 'x:0': the name of another plan"):
        dsl_stage(Schema(specs, 1))
