"""Bundles: the namedtuples the kernels take, each field with the type the kernels are compiled for.

numba compiles a kernel once per combination of argument types.  An int32 array where the kernel expects int64, a
strided view where it expects a contiguous array, or a float where it expects an int would either compile another
specialization of a kernel (seconds, and then slower code) or fail deep inside numba's typing, naming neither the
bundle nor the field.  ``bundle.checked()`` says which field is wrong, before the kernel is called.

A field's type is written as numba writes it, shortened: ``"i8[:]"`` is a C-contiguous int64 array of one
dimension, ``"f4[:, :]"`` a float32 matrix, ``"(i8[:, :])"`` a tuple of such matrices (of any length, at least one),
``"int"``, ``"float"`` and ``"bool"`` scalars.  Every array must be C-contiguous: the kernels are compiled for that
layout only.  Read-only arrays are accepted (numba compiles them once more, as it must).

Bundles built once per reader or per work unit are checked where they are built (``checked()``).  Those built for
every chunk, block or batch from ingest's own arrays are checked only when ``INGEST_CHECK_KERNEL_ARGS=1``
(``checked_when_debugging()``), which the test suite sets: a check costs about 0.25 µs an array, 7 µs a pb batch
with unique ids.

The reader's kernels called for every chunk, block or batch (the parsers, ``trim_rows``, the DSL's ``run_plans``,
``copy_pieces``, the unique ids') take their bundles as plain tuples (``plain()``) and unpack them by position: numba
types a plain tuple's arrays in C, a namedtuple's in Python one field at a time, holding the GIL. A bundle built
once per reader, unit or scratch that only kernels read is kept as its plain tuple (``.checked().plain()``); one
built per call, or read by name in Python too, is converted at the call. In numba's dispatch, a piece's
copy call spends 2.4 µs with plain tuples against 5.4 with the bundles, a chunk's ``decode_chunk`` 2.0
against 5.2 and ``parse_text_chunk`` 2.1 against 7.2.
"""

import collections
import os
import re
import sys

import numpy as np

__all__ = ["bundle", "CHECK_EVERY_BATCH"]

CHECK_EVERY_BATCH = os.environ.get("INGEST_CHECK_KERNEL_ARGS") == "1"

_ARRAY = re.compile(r"^(\()?\s*([a-z]\d)\s*\[([:,\s]*)\]\s*(\))?$")
_SCALARS = {
    "int": ((int, np.integer), (bool, np.bool_)),  # a bool is an int to Python, not to the kernels
    "float": ((float, np.floating), ()),
    "bool": ((bool, np.bool_), ()),
}


class _Field:
    """How one field of a bundle is checked."""

    __slots__ = ("name", "text", "dtype", "ndim", "in_tuple", "scalar")

    def __init__(self, name, text):
        self.name, self.text = name, text
        self.scalar = _SCALARS.get(text)
        self.dtype = self.ndim = self.in_tuple = None
        if self.scalar is None:
            match = _ARRAY.match(text)
            if match is None or bool(match.group(1)) != bool(match.group(4)):
                raise ValueError(f"field {name}: cannot read the type {text!r}")
            self.in_tuple = bool(match.group(1))
            self.dtype = np.dtype(match.group(2))
            self.ndim = match.group(3).count(":")

    def problem(self, value):
        """What is wrong with ``value`` for this field, or None."""
        if self.scalar is not None:
            accepted, refused = self.scalar
            if isinstance(value, accepted) and not isinstance(value, refused):
                return None
            return f"expected {self.text}, got {type(value).__name__} {value}"
        if not self.in_tuple:
            return self._array_problem(value)
        if not isinstance(value, tuple) or not value:
            return f"expected a non-empty tuple of {self._array_text()}, got {_describe(value)}"
        for i, item in enumerate(value):
            wrong = self._array_problem(item)
            if wrong is not None:
                return f"item {i}: {wrong}"
        return None

    def _array_problem(self, value):
        if (
            isinstance(value, np.ndarray)
            and value.dtype == self.dtype
            and value.ndim == self.ndim
            and value.flags.c_contiguous
        ):
            return None
        return f"expected {self._array_text()}, got {_describe(value)}"

    def _array_text(self):
        return f"a C-contiguous {self.dtype} array of {self.ndim} dimension{'s' if self.ndim != 1 else ''}"


def _describe(value):
    if isinstance(value, np.ndarray):
        layout = "C-contiguous" if value.flags.c_contiguous else "strided"
        return f"a {layout} {value.dtype} array of shape {value.shape}"
    if isinstance(value, tuple):
        return f"a tuple of {len(value)}"
    return f"{type(value).__name__} {value}"


def _plain(self):
    return tuple(self)


def bundle(name, **fields):
    """A namedtuple type ``name`` with ``fields`` (name -> type, in order) and two methods that return the bundle
    itself after checking every field's type (``TypeError`` naming the bundle, the field, what was expected and
    what came): ``checked()``, and ``checked_when_debugging()`` that checks only under
    ``INGEST_CHECK_KERNEL_ARGS=1``; ``plain()``, its fields as a plain tuple; and ``args(*fields)``, a bundle's
    fields as the plain tuple a kernel takes, checked only under that setting (no namedtuple is made without it:
    for a bundle made per batch that no Python reads by name).  The type belongs to the calling module, so that
    numba's cache can name it."""
    module = sys._getframe(1).f_globals["__name__"]
    cls = collections.namedtuple(name, list(fields), module=module)
    checks = tuple(_Field(field, text) for field, text in fields.items())

    def checked(self):
        for check, value in zip(checks, self):
            wrong = check.problem(value)
            if wrong is not None:
                raise TypeError(f"{name}.{check.name}: {wrong}")
        return self

    def checked_when_debugging(self):
        return checked(self) if CHECK_EVERY_BATCH else self

    def args(*values):
        return tuple(checked(cls(*values))) if CHECK_EVERY_BATCH else values

    cls.checked = checked
    cls.checked_when_debugging = checked_when_debugging
    cls.plain = _plain
    cls.args = staticmethod(args)
    cls.types = dict(fields)
    return cls
