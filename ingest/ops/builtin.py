"""The built-in ops, after XDL's ``FilterOP``, ``DenseToSparseOP`` and ``DebugOP``, on whole Blocks.

They work column by column (numba kernels, no Python object per sample or id), except
``DebugOP``, which formats the groups it prints.
"""

import math
import sys
import threading

import numpy as np

from .._native.names import build_name_table
from .._native.ops import bucket_ids, listed_tags
from ..errors import ConfigError
from ..features import FeatureType
from .blocks import replace_sparse, take_rows
from .stage import BlockOp

__all__ = ["FilterOP", "DenseToSparseOP", "DebugOP"]


def _tag_text(tag):
    if isinstance(tag, str):
        return tag
    if isinstance(tag, (bytes, bytearray)):
        try:
            return bytes(tag).decode("utf-8")
        except UnicodeDecodeError:
            raise ConfigError(f"FilterOP: tag {bytes(tag)!r} is not UTF-8; sample ids are protobuf strings") from None
    raise ConfigError(f"FilterOP: tag {tag!r}: expected str or bytes")


class FilterOP(BlockOp):
    """Drops the samples whose sample-id tag is listed; a group left without samples is dropped.

    The tag of a sample id is its text up to the first ``separator`` (XDL's ``\\x01``), the
    whole id when there is none; ``separator=None`` always compares whole ids.  Aux lines
    stay (their samples' indicators are unchanged).  ``counts()`` gives the samples passed
    and filtered so far (XDL's ``URun``).

    Parameters
    ----------
    tags : iterable of str or bytes
    separator : bytes of length 1, or None
    """

    def __init__(self, tags, separator=b"\x01"):
        if isinstance(tags, (str, bytes)):
            raise ConfigError(f"FilterOP(tags={tags!r}): expected a list of tags, not one string")
        self.tags = sorted({_tag_text(t) for t in tags})
        if separator is not None and (not isinstance(separator, (bytes, bytearray)) or len(separator) != 1):
            raise ConfigError(f"FilterOP(separator={separator!r}): expected one byte (b'\\x01') or None")
        self.separator = -1 if separator is None else separator[0]
        self._table = build_name_table(self.tags)
        self._lock = threading.Lock()
        self._passed = self._filtered = 0

    def __repr__(self):
        shown = ", ".join(repr(t) for t in self.tags[:3]) + (", ..." if len(self.tags) > 3 else "")
        return f"FilterOP([{shown}])"

    def counts(self):
        """``{"passed": samples kept, "filtered": samples dropped}`` over every block so far."""
        with self._lock:
            return {"passed": self._passed, "filtered": self._filtered}

    def bind(self, schema):
        return self._run

    def _run(self, blk):
        listed = np.empty(blk.nrows, np.bool_)
        n = listed_tags(blk.sid_bytes, blk.sid_offsets, self.separator, *self._table, listed) if self.tags else 0
        with self._lock:
            self._passed += blk.nrows - n
            self._filtered += n
        return blk if n == 0 else take_rows(blk, ~listed)


class DenseToSparseOP(BlockOp):
    """Bucketizes a dense feature into a sparse one: one id per vector element, value 1.0.

    The id of an element is the number of ``boundaries`` <= its value (XDL's
    ``upper_bound``; NaN gives 0); with ``positional=True`` it is
    ``j * (len(boundaries) + 1) + bucket`` for element ``j``, so equal buckets of different
    elements stay apart.  The dense feature stays as it is.

    Both features are declared on the reader, in the same table; ``sparse`` is a plain
    sparse feature (no ``dsl``) whose parsed values, if the input has any, are replaced::

        reader.feature("price", "dense", nvec=1).feature("price_bucket", "sparse")
        reader.add_op(DenseToSparseOP(dense="price", sparse="price_bucket", boundaries=[1, 10, 100]))

    A ``mask`` on the dense feature applies first: one id per kept element.
    """

    def __init__(self, dense, sparse, boundaries, positional=False):
        for arg, value in (("dense", dense), ("sparse", sparse)):
            if not isinstance(value, str) or not value:
                raise ConfigError(f"DenseToSparseOP({arg}={value!r}): expected a feature name")
        try:
            bounds = [float(b) for b in boundaries]
        except (TypeError, ValueError):
            raise ConfigError(f"DenseToSparseOP(boundaries={boundaries!r}): expected a list of numbers") from None
        if not bounds or any(not math.isfinite(b) for b in bounds) or bounds != sorted(bounds):
            raise ConfigError(
                f"DenseToSparseOP(boundaries={boundaries!r}): expected finite numbers in ascending order, at least one"
            )
        self.dense = dense
        self.sparse = sparse
        self.boundaries = np.array(bounds, np.float64)
        self.positional = bool(positional)

    def __repr__(self):
        return f"DenseToSparseOP(dense={self.dense!r}, sparse={self.sparse!r}, boundaries={self.boundaries.tolist()})"

    def bind(self, schema):
        dn = schema.by_name.get(self.dense)
        if dn is None or dn.type is not FeatureType.dense:
            known = ", ".join(s.name for s in schema.dense) or "none"
            raise ConfigError(
                f"{self!r}: dense={self.dense!r} is not a parsed dense feature of the reader (declared "
                f"dense features without dsl: {known})"
            )
        sp = schema.by_name.get(self.sparse)
        if sp is None or sp.type is not FeatureType.sparse:
            raise ConfigError(
                f"{self!r}: sparse={self.sparse!r} is not declared as a sparse feature; declare it with "
                f"reader.feature({self.sparse!r}, 'sparse', table={dn.table})"
            )
        if sp.table != dn.table:
            raise ConfigError(
                f"{self!r}: sparse feature {self.sparse!r} is in table {sp.table}, dense feature "
                f"{self.dense!r} in table {dn.table}; declare both in the same table"
            )
        table = dn.table
        d = schema.dense_in(table).index(dn)
        f = schema.sparse_in(table).index(sp)
        boundaries, positional = self.boundaries, self.positional

        def run(blk):
            col = blk.tables[table].dense[d]
            n, w = col.shape
            keys = np.empty(n * w, np.int64)
            bucket_ids(col, boundaries, positional, keys)
            offsets = np.arange(n + 1, dtype=np.int64) * w
            return replace_sparse(blk, table, f, offsets, keys, np.ones(n * w, np.float32))

        return run


class DebugOP(BlockOp):
    """Prints a readable summary of every ``every``-th group (the 1st, then every N-th) and keeps everything.

    Groups are counted over all blocks in the order the parse workers reach them (the input
    order with one thread).  ``out`` is a text stream, ``sys.stderr`` when None.
    """

    def __init__(self, every=1, out=None):
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise ConfigError(f"DebugOP(every={every!r}): expected an int >= 1")
        self.every = every
        self.out = out
        self._lock = threading.Lock()
        self._seen = 0

    def __repr__(self):
        return f"DebugOP(every={self.every})"

    def bind(self, schema):
        sparse = [[s.name for s in schema.sparse_in(t)] for t in range(schema.tables)]
        dense = [[s.name for s in schema.dense_in(t)] for t in range(schema.tables)]

        def run(blk):
            ngroups = len(blk.group_offsets) - 1
            with self._lock:
                first = self._seen
                self._seen += ngroups
            chosen = range((-first) % self.every, ngroups, self.every)
            if chosen:
                text = "".join(describe_group(blk, g, first + g, sparse, dense) for g in chosen)
                stream = self.out if self.out is not None else sys.stderr
                stream.write(text)
                stream.flush()
            return blk

        return run


def _sparse_text(blk, offsets, r):
    a, b = int(offsets[r]), int(offsets[r + 1])
    items = []
    for i in range(a, b):
        key = int(blk.sp_keys[i])
        h = 0 if blk.sp_hkeys is None else int(blk.sp_hkeys[i])
        value = float(blk.sp_values[i])
        text = f"({h},{key})" if h else str(key)
        items.append(text if value == 1.0 else f"{text}:{value:g}")
    return ",".join(items)


def _line_text(blk, t, r, sparse, dense, indent):
    tab = blk.tables[t]
    parts = []
    for f, name in enumerate(sparse[t]):
        text = _sparse_text(blk, tab.sp_offsets[f], r)
        if text:
            parts.append(f"{name}@{text}")
    for d, name in enumerate(dense[t]):
        row = tab.dense[d][r]
        if row.any():
            parts.append(f"{name}@" + ",".join(f"{v:g}" for v in row.tolist()))
    return indent + ("; ".join(parts) if parts else "(no features)") + "\n"


def describe_group(blk, g, number, sparse, dense):
    """The text ``DebugOP`` prints for group ``g`` of ``blk``: samples, their features, then aux lines."""
    r0, r1 = int(blk.group_offsets[g]), int(blk.group_offsets[g + 1])
    pos = blk.group_pos[g] if getattr(blk, "group_pos", None) is not None else blk.start
    out = [f"DebugOP: group {number} ({blk.source}, byte {int(pos)}): {r1 - r0} samples\n"]
    lo, hi = r0, r1
    for t in range(len(blk.tables)):
        tab = blk.tables[t]
        for r in range(lo, hi):
            if t == 0:
                sid = blk.sid_bytes[blk.sid_offsets[r] : blk.sid_offsets[r + 1]].tobytes().decode("utf-8", "replace")
                labels = ",".join(f"{v:g}" for v in blk.labels[r].tolist())
                head = f"  sample {r - r0}: id={sid!r} labels={labels} ts={int(blk.timestamps[r])}"
            else:
                head = f"  table {t} line {r - lo}"
            if tab.refer is not None:
                head += f" -> table {t + 1} line {int(tab.refer[r] - tab.refer[lo:hi].min())}"
            out.append(head + "\n" + _line_text(blk, t, r, sparse, dense, "    "))
        if tab.refer is not None and hi > lo:
            lo, hi = int(tab.refer[lo:hi].min()), int(tab.refer[lo:hi].max()) + 1
    return "".join(out)
