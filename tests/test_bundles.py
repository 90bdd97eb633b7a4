"""The bundles the kernels take (native/bundles.py): declared types, and the errors a wrong field gives."""

import importlib
import pkgutil

import numpy as np
import pytest

import ingest._native as native
from ingest._native import bundles
from ingest._native.batch import PieceSource
from ingest._native.dsl import Program
from ingest._native.protobuf_parts import DecodeOptions

I8 = np.zeros(4, np.int64)
M8 = np.zeros((2, 3), np.int64)
F4 = np.zeros(4, np.float32)
MF4 = np.zeros((2, 1), np.float32)
U1 = np.zeros(5, np.uint8)


def piece_source(**changes):
    fields = dict(
        sp_offsets=(M8, M8),
        from_dsl=(np.zeros(1, np.bool_),),
        dense=(MF4,),
        refers=(I8,),
        keys=I8,
        hkeys=I8,
        values=F4,
        dsl_keys=I8,
        dsl_values=F4,
        labels=MF4,
        timestamps=I8,
        sid_bytes=U1,
        sid_offsets=I8,
    )
    return PieceSource(**{**fields, **changes})


def all_bundles():
    for info in pkgutil.iter_modules(native.__path__):
        module = importlib.import_module(f"ingest._native.{info.name}")
        for value in vars(module).values():
            if isinstance(value, type) and hasattr(value, "types") and value.__module__ == module.__name__:
                yield value


def test_every_bundle_declares_a_type_per_field_and_names_its_module():
    found = list(all_bundles())
    assert len(found) >= 28
    for cls in found:
        assert list(cls.types) == list(cls._fields), cls.__name__
        module = importlib.import_module(cls.__module__)
        assert getattr(module, cls.__name__) is cls  # numba's cache pickles the type by this name


def test_a_right_bundle_is_returned_unchanged():
    arrays = piece_source()
    assert arrays.checked() is arrays
    read_only = np.frombuffer(b"abcde", np.uint8)
    assert piece_source(sid_bytes=read_only).checked().sid_bytes is read_only
    assert DecodeOptions(np.bool_(True), np.int64(7), False, 1).checked().max_record == 7


@pytest.mark.parametrize(
    "changes, message",
    [
        (
            {"keys": I8.astype(np.int32)},
            "PieceSource.keys: expected a C-contiguous int64 array of 1 dimension, "
            "got a C-contiguous int32 array of shape (4,)",
        ),
        (
            {"keys": M8},
            "PieceSource.keys: expected a C-contiguous int64 array of 1 dimension, got a C-contiguous int64",
        ),
        (
            {"keys": I8[::2]},
            "PieceSource.keys: expected a C-contiguous int64 array of 1 dimension, got a strided int64",
        ),
        ({"labels": [[1.0]]}, "PieceSource.labels: expected a C-contiguous float32 array of 2 dimensions, got list"),
        ({"sp_offsets": ()}, "PieceSource.sp_offsets: expected a non-empty tuple of a C-contiguous int64 array of 2"),
        ({"sp_offsets": M8}, "PieceSource.sp_offsets: expected a non-empty tuple of a C-contiguous int64 array of 2"),
        ({"sp_offsets": (M8, M8.T)}, "PieceSource.sp_offsets: item 1: expected a C-contiguous int64 array of 2"),
    ],
)
def test_a_wrong_array_names_the_bundle_the_field_and_both_types(changes, message):
    with pytest.raises(TypeError) as caught:
        piece_source(**changes).checked()
    assert str(caught.value).startswith(message)


@pytest.mark.parametrize(
    "bad, message",
    [
        (DecodeOptions(True, 1.5, False, 1), "DecodeOptions.max_record: expected int, got float 1.5"),
        (DecodeOptions(True, True, False, 1), "DecodeOptions.max_record: expected int, got bool True"),
        (DecodeOptions(1, 8, False, 1), "DecodeOptions.simple: expected bool, got int 1"),
        (Program(M8, np.zeros(1), np.float64(2), 3), "Program.out_reg: expected int, got float64 2.0"),
    ],
)
def test_a_wrong_scalar_names_the_field(bad, message):
    with pytest.raises(TypeError, match=message.replace(".", r"\.")):
        bad.checked()


def test_plain_gives_the_fields_as_a_plain_tuple():
    arrays = piece_source()
    plain = arrays.plain()
    assert type(plain) is tuple  # numba types a plain tuple in C, a namedtuple in Python
    assert len(plain) == len(PieceSource._fields)
    assert all(a is b for a, b in zip(plain, arrays))


def test_args_give_the_fields_as_a_plain_tuple_checked_when_debugging(monkeypatch):
    fields = tuple(piece_source())
    wrong = tuple(piece_source(keys=I8.astype(np.int32)))
    monkeypatch.setattr(bundles, "CHECK_EVERY_BATCH", False)
    got = PieceSource.args(*fields)
    assert type(got) is tuple and all(a is b for a, b in zip(got, fields))
    assert PieceSource.args(*wrong)[4].dtype == np.int32  # not checked
    monkeypatch.setattr(bundles, "CHECK_EVERY_BATCH", True)
    got = PieceSource.args(*fields)
    assert type(got) is tuple and all(a is b for a, b in zip(got, fields))
    with pytest.raises(TypeError, match="PieceSource.keys"):
        PieceSource.args(*wrong)


def test_per_batch_checks_follow_the_setting(monkeypatch):
    wrong = piece_source(keys=I8.astype(np.int32))
    monkeypatch.setattr(bundles, "CHECK_EVERY_BATCH", False)
    assert wrong.checked_when_debugging() is wrong
    monkeypatch.setattr(bundles, "CHECK_EVERY_BATCH", True)
    with pytest.raises(TypeError, match="PieceSource.keys"):
        wrong.checked_when_debugging()


def test_an_unreadable_type_is_refused_where_the_bundle_is_declared():
    with pytest.raises(ValueError, match="field keys: cannot read the type 'int64'"):
        bundles.bundle("Odd", keys="int64")
    with pytest.raises(ValueError, match=r"field keys: cannot read the type '\(i8\[:\]'"):
        bundles.bundle("Odd", keys="(i8[:]")
