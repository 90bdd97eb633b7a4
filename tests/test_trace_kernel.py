"""The kernel that writes trace records (native/trace.py) against its twin, the protobuf library's serialization of
the same ``Record``: the same bytes, whatever the writes a record is made of, their layouts and the room left."""

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from ingest import trace_pb2
from ingest._native.trace import DERIVED, ITEM_BYTES, encode_columns
from ingest.trace.columns import DTYPES, TYPES, column_of
from ingest.trace.writer import _padded

_arrays = st.sampled_from(list(TYPES)).flatmap(
    lambda dt: hnp.arrays(dt, hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=5))
)
_steps = st.integers(-(2**63), 2**63 - 1)
_SENTINEL = 0xEE


def _columns(arrays, derive):
    """The kernel's ``layout`` and ``datas`` of ``arrays``, as the writer builds them; the first dimension
    ``DERIVED`` where ``derive`` and the data can give it."""
    layout, datas = [len(arrays)], []
    for a, d in zip(arrays, derive):
        code, shape, data = column_of("k", a)
        shape = (DERIVED, *shape[1:]) if d and shape and math.prod(shape[1:]) else shape
        layout += (code, len(shape), *shape)
        datas.append(data)
    return np.array(layout, np.int64), _padded(datas)


def _twin(gstep, lstep, arrays, timestamp):
    """The Record the protobuf library serializes."""
    columns = [
        trace_pb2.Column(dtype=TYPES[a.dtype], shape=a.shape, data=np.ascontiguousarray(a).tobytes()) for a in arrays
    ]
    return trace_pb2.Record(gstep=gstep, lstep=lstep, column=columns, timestamp=timestamp).SerializeToString()


@settings(max_examples=200, deadline=None)
@given(st.lists(_arrays, min_size=1, max_size=9), _steps, _steps, _steps, st.data())
def test_a_record_in_several_writes_is_what_protobuf_serializes(arrays, gstep, lstep, timestamp, data):
    """Columns written by one to three calls (a reader's hook, then a trainer's), after other bytes of the chunk:
    after each call, the u32 LE length and the library's bytes of the record so far, nothing else touched."""
    cuts = sorted(data.draw(st.lists(st.integers(1, len(arrays)), max_size=2)))
    writes = [(a, b) for a, b in zip([0, *cuts], [*cuts, len(arrays)]) if b > a]
    derive = data.draw(st.lists(st.booleans(), min_size=len(arrays), max_size=len(arrays)))
    start = data.draw(st.integers(0, 9))
    out = np.full(
        start + 4 + len(_twin(gstep, lstep, arrays, timestamp)) + data.draw(st.integers(0, 9)), _SENTINEL, np.uint8
    )
    end = start
    for i, (a, b) in enumerate(writes):
        end = encode_columns(out, end, start if i else -1, gstep, lstep, timestamp, *_columns(arrays[a:b], derive[a:b]))
        want = _twin(gstep, lstep, arrays[:b], timestamp)
        assert bytes(out[start:end]) == len(want).to_bytes(4, "little") + want
        assert (out[:start] == _SENTINEL).all() and (out[end:] == _SENTINEL).all()


@settings(max_examples=200, deadline=None)
@given(st.lists(_arrays, min_size=1, max_size=5), _steps, _steps, _steps, st.integers(0, 300), st.booleans())
def test_without_room_nothing_is_written_and_the_need_is_exact(arrays, gstep, lstep, timestamp, room, extend):
    """The kernel returns minus the bytes it needs past the end, exactly what it writes when it has them."""
    first = _twin(gstep, lstep, arrays[:1], timestamp)
    whole = _twin(gstep, lstep, arrays, timestamp)
    out = np.full(room + (4 + len(first) if extend else 0), _SENTINEL, np.uint8)
    pos, record, new = 0, -1, arrays
    if extend:  # a record of the first array, then the others added to it
        pos = encode_columns(out, 0, -1, gstep, lstep, timestamp, *_columns(arrays[:1], [False]))
        record, new = 0, arrays[1:]
    before = out.copy()
    need = 4 + len(whole) - pos
    got = encode_columns(out, pos, record, gstep, lstep, timestamp, *_columns(new, [False] * len(new)))
    if room < need:
        assert got == -need and (out == before).all()
    else:
        assert got == pos + need and bytes(out[:got]) == len(whole).to_bytes(4, "little") + whole


def test_the_kernels_item_sizes_are_the_formats():
    """The kernel's bytes per item of each Type (for a ``DERIVED`` first dimension) are those of its numpy dtype."""
    assert ITEM_BYTES.tolist() == [DTYPES[code].itemsize for code in range(len(DTYPES))]
