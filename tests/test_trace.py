"""Trace files (XDL's format): round trips, rollover, .meta, XDL's own recipe, errors, the reader hook, the timeline."""

import ast
import json
import os
import struct
import subprocess
import sys
import time
import uuid

import numpy as np
import pytest
from google.protobuf import descriptor_pb2
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import ingest
from ingest import synthetic, trace, trace_pb2
from ingest.cli import main as ingest_main
from ingest.pipeline.timeline import Timeline, events, timeline_files
from conftest import ROOT, make_reader

DTYPES = [np.int8, np.int16, np.int32, np.int64, np.float32, np.float64, np.bool_, np.uint8]


def _records(path):
    return list(trace.read(path))


def _messages(path):
    """The length-prefixed messages of a file, split with nothing but struct: ``[(offset, bytes)]``."""
    data = open(path, "rb").read()
    out, at = [], 0
    while at < len(data):
        (n,) = struct.unpack("<I", data[at : at + 4])
        out.append((at, data[at + 4 : at + 4 + n]))
        at += 4 + n
    assert at == len(data)
    return out


def test_generated_code_matches_schema(tmp_path):
    """ingest/trace_pb2.py is what protoc makes of schemas/trace.proto (run scripts/gen-protos after edits)."""
    subprocess.run(
        [sys.executable, "-m", "grpc_tools.protoc", f"-I{ROOT / 'schemas'}", f"--python_out={tmp_path}", "trace.proto"],
        check=True,
        cwd=ROOT / "schemas",
    )
    tree = ast.parse((tmp_path / "trace_pb2.py").read_text())
    fresh = next(
        node.args[0].value
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "AddSerializedFile"
    )
    assert fresh == trace_pb2.DESCRIPTOR.serialized_pb


def test_schema_is_xdls_field_for_field():
    """FORMATS.md section 8: package, messages, field numbers and enum values."""
    d = trace_pb2.DESCRIPTOR
    assert (
        d.package == "xdl.proto" and descriptor_pb2.FileDescriptorProto.FromString(d.serialized_pb).syntax == "proto3"
    )
    fields = {m: {f.name: f.number for f in d.message_types_by_name[m].fields} for m in d.message_types_by_name}
    assert fields == {
        "Header": {"key": 1},
        "Column": {"dtype": 1, "shape": 2, "data": 3},
        "Record": {"gstep": 1, "lstep": 2, "column": 3, "timestamp": 4},
        "Meta": {
            "lstep_begin": 1,
            "lstep_end": 2,
            "gstep_begin": 3,
            "gstep_end": 4,
            "timestamp_begin": 5,
            "timestamp_end": 6,
        },
    }
    assert {v.name: v.number for v in d.enum_types_by_name["Type"].values} == {
        "Int8": 0, "Int16": 1, "Int32": 2, "Int64": 3, "Float": 4, "Double": 5, "Bool": 6, "Byte": 7,
    }  # fmt: skip


_arrays = st.sampled_from(DTYPES).flatmap(
    lambda dt: hnp.arrays(dt, hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4))
)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(_arrays, min_size=1, max_size=3), min_size=1, max_size=4), st.data())
def test_every_dtype_and_shape_round_trips(tmp_path_factory, steps, data):
    """Arrays of every dtype of the format, 0 to 3 dimensions, empty ones too, read back equal."""
    keys = [f"k{i}" for i in range(len(steps[0]))]
    steps = [[data.draw(_arrays) if i >= len(s) else s[i] for i in range(len(keys))] for s in steps]
    out = tmp_path_factory.mktemp("rt")
    with trace.TraceWriter(out, name="rt", rank=3) as w:
        for n, arrays in enumerate(steps):
            w.write(n, 10 * n, dict(zip(keys, arrays)))
    got = _records(out)
    assert [r[:3] for r in got] == [(tuple(keys), n, 10 * n) for n in range(len(steps))]
    for (_, _, _, _, values), arrays in zip(got, steps):
        for key, want in zip(keys, arrays):
            assert values[key].dtype == want.dtype and values[key].shape == want.shape
            assert np.array_equal(values[key], want, equal_nan=want.dtype.kind == "f")


def test_bytes_torch_and_scalars_are_accepted(tmp_path):
    torch = pytest.importorskip("torch")
    with trace.TraceWriter(tmp_path) as w:
        w.write(0, 0, {"b": b"abc", "s": np.array([b"ab", b"c"]), "t": torch.arange(4.0), "x": 2.5, "n": 7})
    (_, _, _, _, v) = _records(tmp_path)[0]
    assert v["b"].tolist() == [97, 98, 99] and v["b"].dtype == np.uint8
    assert v["s"].tolist() == [[97, 98], [99, 0]]  # fixed-width bytes: one more axis of their width
    assert v["t"].dtype == np.float32 and v["t"].tolist() == [0.0, 1.0, 2.0, 3.0]
    assert v["x"].shape == () and v["x"] == 2.5 and v["n"].dtype == np.int64 and v["n"] == 7


def test_big_endian_arrays_are_written_little_endian(tmp_path):
    with trace.TraceWriter(tmp_path) as w:
        w.write(0, 0, {"a": np.arange(3, dtype=">i4")})
    assert _records(tmp_path)[0][4]["a"].tolist() == [0, 1, 2]
    record = trace_pb2.Record.FromString(_messages(tmp_path / "train.trace.0.0")[1][1])
    assert record.column[0].data == b"\0\0\0\0\1\0\0\0\2\0\0\0"


@pytest.mark.parametrize(
    "value, what",
    [(np.zeros(2, np.uint16), "uint16"), (np.zeros(2, np.float16), "float16"), (np.array(["x"]), "<U1")],
)
def test_an_unsupported_dtype_is_an_error_at_write(tmp_path, value, what):
    with trace.TraceWriter(tmp_path) as w:
        with pytest.raises(ingest.ConfigError, match=f"trace key 'bad': dtype {what} is not in the trace format"):
            w.write(0, 0, {"bad": value})


def test_other_keys_later_are_an_error(tmp_path):
    with trace.TraceWriter(tmp_path) as w:
        w.write(0, 0, {"a": np.zeros(1), "b": np.zeros(1)})
        with pytest.raises(ingest.ConfigError, match=r"trace key 'c' at lstep 1: not in the trace's keys \['a', 'b'\]"):
            w.write(1, 1, {"c": np.zeros(1)})
        w.write(2, 2, {"a": np.zeros(1)})
        with pytest.raises(ingest.ConfigError, match=r"record of lstep 2 holds keys \['a'\], the trace's are"):
            w.write(3, 3, {"a": np.zeros(1), "b": np.zeros(1)})
    assert [r[1] for r in _records(tmp_path)] == [0]


def test_writes_of_one_step_make_one_record_and_add_joins_it(tmp_path):
    with trace.TraceWriter(tmp_path) as w:
        for step in range(3):
            w.write(step, 100 + step, {"ids": np.arange(step + 1)})
            w.add({"loss": np.float32(step / 2)})
        with pytest.raises(ingest.ConfigError, match="trace key 'loss' written twice for lstep 2"):
            w.add({"loss": np.float32(0)})
        with pytest.raises(ingest.ConfigError, match="this step was written with gstep 102"):
            w.write(2, 7, {})
    got = _records(tmp_path)
    assert [(r[0], r[1], r[2]) for r in got] == [(("ids", "loss"), s, 100 + s) for s in range(3)]
    assert [r[4]["loss"].item() for r in got] == [0.0, 0.5, 1.0]
    assert [r[4]["ids"].tolist() for r in got] == [[0], [0, 1], [0, 1, 2]]


def test_arrays_are_traced_as_they_were_at_write(tmp_path):
    """A write encodes its arrays before it returns: an array changed in place afterwards (a buffer the trainer
    reuses, a tensor updated) is traced as it was written."""
    buffer = np.zeros(4, np.float32)
    with trace.TraceWriter(tmp_path) as w:
        for step in range(3):
            buffer[:] = step
            w.write(step, step, {"x": buffer})
            buffer[:] = -1
    assert [r[4]["x"].tolist() for r in _records(tmp_path)] == [[0.0] * 4, [1.0] * 4, [2.0] * 4]


def test_keys_in_another_order_are_written_in_the_headers(tmp_path):
    """Every record's columns follow the Header, whatever order a step's writes name its keys in."""
    with trace.TraceWriter(tmp_path) as w:
        w.write(0, 0, {"a": np.arange(2), "b": np.float32(1)})
        w.write(1, 1, {"b": np.float32(2)})
        w.add({"a": np.arange(3)})
    first, second = _messages(tmp_path / "train.trace.0.0")[1:]
    records = [trace_pb2.Record.FromString(m) for _, m in (first, second)]
    assert [len(r.column[0].shape) for r in records] == [1, 1] and [r.column[1].dtype for r in records] == [4, 4]
    assert [r[4]["a"].tolist() for r in _records(tmp_path)] == [[0, 1], [0, 1, 2]]
    assert records[1].SerializeToString() == second[1]


def test_records_larger_than_a_chunk_and_records_growing_past_one(tmp_path):
    """Records are encoded into ~1 MiB chunks: a record larger than one, and one whose later write does not fit
    in what is left of the chunk (it moves to the next), are written whole, every other record intact."""
    rng = np.random.default_rng(1)
    steps = [(rng.integers(0, 2**40, n), rng.random(m)) for n, m in [(10, 5), (300_000, 1), (100_000, 90_000)] * 3]
    with trace.TraceWriter(tmp_path) as w:
        for step, (ids, extra) in enumerate(steps):
            w.write(step, step, {"ids": ids})
            w.add({"extra": extra})
    got = _records(tmp_path)
    assert [r[1] for r in got] == list(range(len(steps)))
    for r, (ids, extra) in zip(got, steps):
        assert np.array_equal(r[4]["ids"], ids) and np.array_equal(r[4]["extra"], extra)


def test_the_reader_hooks_arrays_are_checked_when_debugging(tmp_path):
    """write_fixed trusts the layout the first batch gave; under INGEST_CHECK_KERNEL_ARGS=1 (set for the tests)
    arrays unlike it are a TypeError naming the key, and a fixed layout with other keys takes write's checks."""
    with trace.TraceWriter(tmp_path) as w:
        values = {"ids": np.arange(4), "labels": np.zeros((4, 2), np.float32)}
        w.write(0, 0, values)
        fixed = w.fixed(values)
        assert fixed is not None and w.fixed({"x": np.zeros((3, 0))}) is None and w.fixed({"x": 1.0}) is None
        w.write_fixed(1, 1, fixed, [np.arange(7), np.ones((7, 2), np.float32)])
        with pytest.raises(
            TypeError, match=r"trace key 'labels': expected a C-contiguous float32 array of shape \(n, \*\(2,\)\)"
        ):
            w.write_fixed(2, 2, fixed, [np.arange(3), np.ones((3, 3), np.float32)])
        other = w.fixed({"ids": np.arange(2), "more": np.arange(2)})
        with pytest.raises(ingest.ConfigError, match="trace key 'more' at lstep 3: not in the trace's keys"):
            w.write_fixed(3, 3, other, [np.arange(2), np.arange(2)])
    got = _records(tmp_path)
    assert [r[4]["ids"].tolist() for r in got] == [[0, 1, 2, 3], list(range(7))]
    assert got[1][4]["labels"].shape == (7, 2)


def test_rollover_never_splits_a_record_and_every_file_starts_with_the_header(tmp_path):
    """Files are cut where the next record would pass max_file_mb; sizes follow exactly from the records'."""
    rng = np.random.default_rng(0)
    sizes = rng.integers(0, 200, 200)  # records of up to 1.7 kB
    limit_mb = 2000 / (1 << 20)
    with trace.TraceWriter(tmp_path, max_file_mb=limit_mb) as w:
        for step, n in enumerate(sizes):
            w.write(step, step, {"ids": np.arange(n, dtype=np.int64)})
        w.write(200, 200, {"ids": np.arange(400, dtype=np.int64)})  # alone larger than a file: a file of its own
    files = w.files
    assert len(files) > 10 and files == [str(tmp_path / f"train.trace.0.{i}") for i in range(len(files))]
    header = trace_pb2.Header(key=["ids"]).SerializeToString()
    steps = []
    for path in files:
        messages = _messages(path)
        assert messages[0] == (0, header)
        body = [trace_pb2.Record.FromString(m) for _, m in messages[1:]]
        assert body, "no file holds the Header alone"
        size = os.path.getsize(path)
        first = body[0].lstep
        if size > 2000:
            assert len(body) == 1 and first == 200
        else:  # the next record would not have fitted
            nxt = first + len(body)
            if nxt <= 200:
                extra = (
                    4
                    + len(trace_pb2.Record(lstep=nxt, gstep=nxt).SerializeToString())
                    + 2
                    + 8 * (sizes[nxt] if nxt < 200 else 400)
                )
                assert size + extra > 2000
        steps += [r.lstep for r in body]
    assert steps == list(range(201))


def test_a_record_exactly_filling_a_file_stays_in_it(tmp_path):
    """max_file_mb is a bound the file may reach: header + 2 records of exactly that size make one file."""
    with trace.TraceWriter(tmp_path / "one") as w:
        w.write(1, 1, {"a": np.ones(4, np.int64)})
    header = 4 + len(trace_pb2.Header(key=["a"]).SerializeToString())
    record = os.path.getsize(tmp_path / "one" / "train.trace.0.0") - header
    with trace.TraceWriter(tmp_path / "two", max_file_mb=(header + 2 * record) / (1 << 20)) as w:
        for step in range(1, 6):  # steps of one varint byte: records of one size
            w.write(step, step, {"a": np.ones(4, np.int64)})
    assert [os.path.getsize(p) for p in w.files] == [header + 2 * record, header + 2 * record, header + record]
    assert [[r[1] for r in _records(p)] for p in w.files] == [[1, 2], [3, 4], [5]]


def test_meta_holds_each_files_ranges(tmp_path):
    with trace.TraceWriter(tmp_path, name="m", rank=1, mode="eval", max_file_mb=0.002) as w:
        for step in range(40):
            w.write(step, 1000 - step, {"x": np.arange(30)})
        files = list(w.files)
    assert len(files) >= 3
    for path in files:
        got = [r for r in _records(path)]
        m = trace.meta(path)
        assert trace.meta(f"{path}.meta") == m
        assert (m.lstep_begin, m.lstep_end) == (min(r[1] for r in got), max(r[1] for r in got))
        assert (m.gstep_begin, m.gstep_end) == (min(r[2] for r in got), max(r[2] for r in got))
        assert (m.timestamp_begin, m.timestamp_end) == (min(r[3] for r in got), max(r[3] for r in got))
        assert abs(m.timestamp_begin - time.time() * 1000) < 600_000


def test_flush_writes_the_current_files_meta_and_a_new_writer_continues_the_index(tmp_path):
    w = trace.TraceWriter(tmp_path)
    w.write(0, 0, {"a": np.zeros(1)})
    w.write(1, 1, {"a": np.zeros(1)})
    w.flush()
    assert (
        trace.meta(tmp_path / "train.trace.0.0").lstep_begin,
        trace.meta(tmp_path / "train.trace.0.0").lstep_end,
    ) == (
        0,
        1,
    )
    assert [r[1] for r in _records(tmp_path)] == [0, 1]
    w.close()
    with trace.TraceWriter(tmp_path) as again:
        again.write(2, 2, {"a": np.zeros(1)})
    assert again.files == [str(tmp_path / "train.trace.0.1")]
    assert [r[1] for r in _records(tmp_path)] == [0, 1, 2]


def test_files_read_with_struct_and_the_classes_of_trace_proto(tmp_path):
    """XDL's recipe, in a process that imports nothing of ingest: read a u32 LE length and that many bytes,
    the first message a Header, every next one a Record; columns are numpy.frombuffer of their data."""
    out = tmp_path / "trace"
    with trace.TraceWriter(out, max_file_mb=0.001) as w:
        for step in range(12):
            w.write(step, step + 5, {"ids": np.arange(step * 7, dtype=np.int64), "y": np.ones((2, 2), np.float32)})
    gen = tmp_path / "gen"
    gen.mkdir()
    subprocess.run(
        [sys.executable, "-m", "grpc_tools.protoc", f"-I{ROOT / 'schemas'}", f"--python_out={gen}", "trace.proto"],
        check=True,
        cwd=ROOT / "schemas",
    )
    recipe = f"""
import glob, json, struct, sys
sys.path.insert(0, {str(gen)!r})
import trace_pb2
out = []
for path in sorted(glob.glob({str(out)!r} + "/train.trace.0.*"), key=lambda p: (p.endswith(".meta"), p)):
    if path.endswith(".meta"):
        continue
    with open(path, "rb") as f:
        header = trace_pb2.Header()
        header.ParseFromString(f.read(struct.unpack("<I", f.read(4))[0]))
        while True:
            size = f.read(4)
            if not size:
                break
            record = trace_pb2.Record()
            record.ParseFromString(f.read(struct.unpack("<I", size)[0]))
            out.append([list(header.key), record.lstep, record.gstep,
                        [[c.dtype, list(c.shape), c.data.hex()] for c in record.column]])
assert "ingest" not in sys.modules
print(json.dumps(out))
"""
    done = subprocess.run([sys.executable, "-c", recipe], capture_output=True, text=True, check=True)
    theirs = json.loads(done.stdout)
    ours = [
        [
            list(k),
            lstep,
            gstep,
            [[3 if v.dtype == np.int64 else 4, list(v.shape), v.tobytes().hex()] for v in a.values()],
        ]
        for k, lstep, gstep, _, a in _records(out)
    ]
    assert len(ours) == 12 and theirs == ours


# -- filters -------------------------------------------------------------------------------------------------


def test_filters_every_step_range_and_summary(tmp_path):
    with trace.TraceWriter(tmp_path, every=3, steps=(100, 112), summary={"ids": np.unique}) as w:
        for step in range(20):
            w.write(step, 100 + step, {"ids": np.array([step, 1, step, 1])})
    got = _records(tmp_path)
    assert [r[1] for r in got] == [0, 3, 6, 9]  # lstep % 3 == 0 and 100 <= gstep < 112
    assert [r[4]["ids"].tolist() for r in got] == [[0, 1], [1, 3], [1, 6], [1, 9]]


def test_time_window(tmp_path):
    now = time.time()
    with trace.TraceWriter(tmp_path / "past", window=(None, now - 60)) as w:
        w.write(0, 0, {"a": np.zeros(1)})
    with trace.TraceWriter(tmp_path / "now", window=(now - 60, now + 600)) as w:
        w.write(0, 0, {"a": np.zeros(1)})
    assert w.files and not list((tmp_path / "past").iterdir())
    assert len(_records(tmp_path / "now")) == 1


@pytest.mark.parametrize(
    "options, message",
    [
        ({"every": 0}, r"TraceWriter\(every=0\): expected an int >= 1"),
        ({"steps": 5}, r"steps=5: expected \(begin, end\)"),
        ({"window": ("a", None)}, r"window='a': expected unix seconds or a datetime"),
        ({"summary": {"x": 3}}, r"expected a function of an array"),
        ({"max_file_mb": 0}, r"max_file_mb=0"),
        ({"name": "a/b"}, r"name='a/b'"),
    ],
)
def test_bad_options_are_config_errors(tmp_path, options, message):
    with pytest.raises(ingest.ConfigError, match=message):
        trace.TraceWriter(tmp_path, **options)


def test_a_failing_summary_and_an_unknown_summary_key_are_errors(tmp_path):
    def boom(a):
        raise RuntimeError("no")

    with trace.TraceWriter(tmp_path, summary={"a": boom}) as w:
        with pytest.raises(ingest.ConfigError, match=r"summary of key 'a' \('boom'\) failed at lstep 0: no"):
            w.write(0, 0, {"a": np.zeros(1)})
    with trace.TraceWriter(tmp_path / "2", summary={"typo": np.unique}) as w:
        w.write(0, 0, {"a": np.zeros(1)})
        with pytest.raises(ingest.ConfigError, match=r"names keys \['typo'\] that the records lack"):
            w.flush()


# -- the writer thread's errors ---------------------------------------------------------------------------


def test_an_error_of_the_writer_thread_surfaces_at_the_next_call_and_never_hangs(tmp_path):
    w = trace.TraceWriter(tmp_path, queue_depth=2)
    (tmp_path / "train.trace.0.0").mkdir()  # the first data file cannot be opened
    w.write(0, 0, {"a": np.zeros(1)})
    with pytest.raises(ingest.SourceError, match=r"trace .*train.trace.0.0: cannot write") as info:
        for step in range(1, 1000):  # more than the queue holds: the thread keeps taking after its error
            w.write(step, step, {"a": np.zeros(1)})
        w.flush()
    assert isinstance(info.value.__cause__, OSError)
    with pytest.raises(ingest.SourceError):
        w.flush()
    w.close()  # raised before: not again


def test_close_raises_an_error_not_raised_before(tmp_path):
    w = trace.TraceWriter(tmp_path)
    (tmp_path / "train.trace.0.0").mkdir()
    w.write(0, 0, {"a": np.zeros(1)})
    with pytest.raises(ingest.SourceError, match="cannot write"):
        w.close()
    with pytest.raises(ingest.ConfigError, match="the writer is closed"):
        w.write(1, 1, {"a": np.zeros(1)})


# -- reading back: located errors -----------------------------------------------------------------------------


@pytest.fixture
def three_records(tmp_path):
    with trace.TraceWriter(tmp_path) as w:
        for step in range(3):
            w.write(step, step, {"a": np.arange(5, dtype=np.int32)})
    path = tmp_path / "train.trace.0.0"
    return path, _messages(path)


def test_a_file_cut_inside_a_record_names_the_record_and_its_offset(three_records):
    path, messages = three_records
    at = messages[2][0]
    path.write_bytes(path.read_bytes()[: at + 10])
    with pytest.raises(trace.TraceFileError) as info:
        _records(path)
    e = info.value
    assert (e.source, e.record, e.offset) == (str(path), 2, at)
    assert "runs past the end of the file" in str(e) and "cut short" in e.expected
    assert isinstance(e, ingest.DataError)


def test_a_file_cut_inside_a_length_prefix(three_records):
    path, messages = three_records
    at = messages[3][0]
    path.write_bytes(path.read_bytes()[: at + 2])
    with pytest.raises(trace.TraceFileError, match=rf"record 3, byte {at}: file ends inside a length prefix"):
        _records(path)


def test_a_corrupt_record_and_a_corrupt_column(three_records):
    path, messages = three_records
    data = bytearray(path.read_bytes())
    at = messages[1][0]
    data[at + 4] = 0xFF  # a tag of wire type 7
    path.write_bytes(bytes(data))
    with pytest.raises(trace.TraceFileError, match=rf"record 1, byte {at}: message does not decode"):
        _records(path)
    bad = trace_pb2.Record(lstep=1, column=[trace_pb2.Column(dtype=2, shape=[5], data=b"\0" * 19)])
    body = bad.SerializeToString()
    head = path.read_bytes()[: messages[1][0]]
    path.write_bytes(head + struct.pack("<I", len(body)) + body)
    with pytest.raises(
        trace.TraceFileError, match=r"column 'a': '19 data bytes for shape \[5\] of int32, expected 20'"
    ):
        _records(path)


def test_missing_files_and_meta_are_source_errors(tmp_path):
    with pytest.raises(ingest.SourceError, match="no such trace file or folder"):
        _records(tmp_path / "nothing")
    with pytest.raises(ingest.SourceError, match="no trace files there"):
        _records(str(tmp_path / "*.7"))
    with pytest.raises(ingest.SourceError, match="no such .meta file"):
        trace.meta(tmp_path / "x")


def test_globs_and_folders_read_in_index_order(tmp_path):
    with trace.TraceWriter(tmp_path, max_file_mb=0.0005) as w:
        for step in range(30):
            w.write(step, step, {"a": np.arange(20)})
    assert len(w.files) > 10  # index 10 sorts after 9, not after 1
    want = list(range(30))
    assert [r[1] for r in _records(tmp_path)] == want
    assert [r[1] for r in _records(str(tmp_path / "train.trace.0.*"))] == want
    assert [r[1] for r in _records(w.files)] == want


# -- the command line ------------------------------------------------------------------------------------------


def test_cli_show_and_to_parquet(tmp_path, capsys):
    pq = pytest.importorskip("pyarrow.parquet")
    with trace.TraceWriter(tmp_path / "t", max_file_mb=0.001) as w:
        for step in range(6):
            w.write(
                step,
                50 + step,
                {
                    "labels": np.full((2, 2), step, np.float32),
                    "sample_ids": np.frombuffer(f"s{step}as{step}b".encode(), np.uint8),
                    "sample_ids.offsets": np.array([0, 3, 6]),
                    "loss": np.float64(step / 4),
                },
            )
    assert ingest_main.main(["trace", "show", str(tmp_path / "t"), "--step", "53", "--key", "sample_ids"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("lstep 3  gstep 53  ")
    assert out[1].split() == ["sample_ids", "bytes", "[6]", "2", "ids", '["s3a",', '"s3b"]']
    assert len(out) == 2
    assert ingest_main.main(["trace", "show", str(tmp_path / "t"), "--key", "nope"]) == 2
    assert "no key 'nope' in the trace" in capsys.readouterr().err
    table_path = tmp_path / "t.parquet"
    assert ingest_main.main(["trace", "to-parquet", str(tmp_path / "t"), str(table_path)]) == 0
    table = pq.read_table(table_path).to_pydict()
    assert table["lstep"] == list(range(6)) and table["gstep"] == list(range(50, 56))
    assert table["labels"][2] == [[2.0, 2.0], [2.0, 2.0]]
    assert table["sample_ids"][4] == [b"s4a", b"s4b"]
    assert table["sample_ids.offsets"][4] == [0, 3, 6]
    assert table["loss"] == [s / 4 for s in range(6)]


def test_cli_show_of_a_cut_file_is_a_one_line_located_error(tmp_path, capsys):
    with trace.TraceWriter(tmp_path) as w:
        w.write(0, 0, {"a": np.arange(5)})
    path = tmp_path / "train.trace.0.0"
    path.write_bytes(path.read_bytes()[:-3])
    assert ingest_main.main(["trace", "show", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"ingest trace show: {path}, record 1, byte ") and "\n" not in err


# -- the reader's hook -----------------------------------------------------------------------------------------


def _traced_reader(path, writer, **options):
    reader = synthetic.declare(make_reader([path], batch_size=(100,), **options))
    return reader.trace(writer, arrays=("labels", "item.ids", "cate.ids"))


def _batch_values(batch):
    return {
        "labels": batch.labels.copy(),
        "item.ids": batch["item"].ids.copy(),
        "cate.ids": batch["cate"].ids.copy(),
        "sample_ids": batch.sid_bytes.copy(),
        "sample_ids.offsets": batch.sid_offsets.copy(),
    }


def _same(got, want):
    assert list(got) == list(want)
    for key in want:
        assert got[key].dtype == want[key].dtype and np.array_equal(got[key], want[key]), key


def test_reader_hook_with_two_threads_writes_every_batch_taken(tmp_path, synthetic_file):
    with trace.TraceWriter(tmp_path / "t") as w:
        reader = _traced_reader(synthetic_file, w, threads=(2,)).startup()
        with reader:
            batches = [_batch_values(b) for b in reader]
    got = _records(tmp_path / "t")
    assert len(batches) == 30 and [(r[1], r[2]) for r in got] == [(n, n) for n in range(30)]
    assert got[0][0] == ("labels", "item.ids", "cate.ids", "sample_ids", "sample_ids.offsets")
    for record, want in zip(got, batches):
        _same(record[4], want)


def test_reader_hook_every_and_global_step_and_the_trainers_own_tensors(tmp_path, synthetic_file):
    with trace.TraceWriter(tmp_path / "t") as w:
        reader = _traced_reader(synthetic_file, w).startup()
        reader.set_global_step(1000)
        with reader:
            for n, batch in enumerate(reader):
                w.add({"loss": np.float32(n)})
                if n == 9:
                    reader.set_global_step(5000)
    got = _records(tmp_path / "t")
    assert [(r[1], r[2]) for r in got] == [(n, 1000 + n) for n in range(10)] + [(n, 4990 + n) for n in range(10, 30)]
    assert [r[4]["loss"].item() for r in got] == list(range(30))
    with trace.TraceWriter(tmp_path / "e") as w:
        reader = synthetic.declare(make_reader([synthetic_file], batch_size=(100,)))
        reader.trace(w, arrays=("labels",), every=7).startup()
        with reader:
            reader.read_all()
    assert [r[1] for r in _records(tmp_path / "e")] == [0, 7, 14, 21, 28]


def test_reader_hook_of_an_unknown_array_names_the_ones_there(tmp_path, synthetic_file):
    with trace.TraceWriter(tmp_path) as w:
        reader = synthetic.declare(make_reader([synthetic_file], batch_size=(100,))).trace(w, arrays=("itme.ids",))
        with reader.startup(), pytest.raises(ingest.ConfigError, match=r"no array 'itme.ids'; it has \[.*'item.ids'"):
            next(reader)
    with pytest.raises(ingest.ConfigError, match="cannot be pickled"):
        import pickle

        pickle.dumps(reader)


@pytest.mark.parametrize("threads", [1, 2])
def test_a_restored_reader_traces_the_steps_after_the_restore(tmp_path, synthetic_file, threads):
    """Exact resume: the first reader takes 12 batches and saves its state; the restored one traces steps 12 on,
    into new files of the same folder; together every step once, with the batches' own samples."""
    out = tmp_path / "t"
    delivered = {}
    with trace.TraceWriter(out) as w:
        reader = _traced_reader(synthetic_file, w, threads=(threads,), enable_state=True).startup()
        with reader:
            for n, batch in enumerate(reader):
                delivered[n] = _batch_values(batch)
                if n == 11:
                    break
            state = reader.state()
    with trace.TraceWriter(out) as w:
        reader = _traced_reader(synthetic_file, w, threads=(threads,)).restore(state).startup()
        with reader:
            for n, batch in enumerate(reader, 12):
                delivered[n] = _batch_values(batch)
    assert sorted(p.name for p in out.iterdir() if not p.name.endswith(".meta")) == [
        "train.trace.0.0",
        "train.trace.0.1",
    ]
    got = _records(out)
    assert [r[1] for r in got] == list(range(30)) == sorted(delivered)
    for record in got:
        _same(record[4], delivered[record[1]])
    ids = b"".join(r[4]["sample_ids"].tobytes() for r in got)
    offsets = [r[4]["sample_ids.offsets"] for r in got]
    assert sum(len(o) - 1 for o in offsets) == 3000
    assert len(ids) == sum(int(o[-1]) for o in offsets)


# -- HDFS -----------------------------------------------------------------------------------------------------


def test_trace_files_on_hdfs(services, tmp_path):
    from ingest.sources.filesystems import url_to_fs

    root = f"{services['HDFS_URL']}/trace-{uuid.uuid4().hex[:8]}"
    with trace.TraceWriter(root, max_file_mb=0.001) as w:
        for step in range(20):
            w.write(step, 7 * step, {"ids": np.arange(step * 10, dtype=np.int64), "y": np.float32(step)})
    assert len(w.files) > 3 and all(f.startswith(root) for f in w.files)
    got = _records(root)
    assert [(r[1], r[2]) for r in got] == [(s, 7 * s) for s in range(20)]
    assert all(np.array_equal(r[4]["ids"], np.arange(r[1] * 10)) for r in got)
    m = trace.meta(w.files[-1])
    assert m.lstep_end == 19 and m.gstep_end == 133
    fs, path = url_to_fs(root)
    names = sorted(p.rsplit("/", 1)[1] for p in fs.ls(path, detail=False))
    assert names == sorted([f"train.trace.0.{i}" for i in range(len(w.files))] + [
        f"train.trace.0.{i}.meta" for i in range(len(w.files))
    ])  # fmt: skip
    assert ingest_main.main(["trace", "to-parquet", root, str(tmp_path / "h.parquet")]) == 0
    fs.rm(path, recursive=True)


# -- the timeline ---------------------------------------------------------------------------------------------


def test_the_timeline_streams_rolls_over_and_keeps_no_events(tmp_path, synthetic_file):
    """An endless reader (epochs(0)) with a timeline of small files: every span is in the files, each file
    complete JSON with the thread names, and the Timeline holds no event."""
    path = tmp_path / "run.json"
    reader = synthetic.declare(make_reader([synthetic_file], batch_size=(100,), threads=(2,), epochs=(0,)))
    reader.timeline(path, max_file_mb=0.01).startup()
    timeline = reader._stats.timeline
    with reader:
        for n, _ in enumerate(reader):
            if n == 299:  # 10 epochs
                break
        assert timeline.written >= 600  # a wait and a batch per batch, and the chunks'
        assert set(vars(timeline)) == {
            "path", "_max_bytes", "_lock", "_threads", "_named", "_origin", "_pid", "_files", "_index", "_size",
            "_first", "written",
        }  # fmt: skip
    files = timeline_files(path)
    assert len(files) > 5 and files[:2] == [str(path), str(tmp_path / "run.1.json")]
    spans = 0
    for name in files:
        assert os.path.getsize(name) <= 0.01 * (1 << 20)
        file_events = json.loads(open(name).read())  # each file is a whole JSON array
        names = {e["tid"]: e["args"]["name"] for e in file_events if e["ph"] == "M"}
        assert {names[e["tid"]] for e in file_events if e["ph"] == "X"} <= set(names.values())
        spans += sum(e["ph"] == "X" for e in file_events)
    assert spans == timeline.written == sum(e["ph"] == "X" for e in events(path))
    assert sum(e["name"] == "wait" for e in events(path)) >= 300


def test_a_timeline_cut_short_reads_back(tmp_path):
    path = tmp_path / "t.json"
    timeline = Timeline(path)
    for k in range(50):
        timeline.span("x", k, k + 0.5, {"k": k})
    timeline._files.flush()  # what a crash leaves: written so far, no closing bracket
    text = path.read_text()
    assert text.startswith("[\n") and not text.rstrip().endswith("]")
    assert [e["args"]["k"] for e in events(path) if e["ph"] == "X"] == list(range(50))
    cut = tmp_path / "cut.json"
    cut.write_text(text[:-7])  # the last event cut
    assert [e["args"]["k"] for e in events(cut) if e["ph"] == "X"] == list(range(49))
    timeline.close()
    assert len(json.loads(path.read_text())) == 51
