"""The op stage: runs the reader's ops, in the order added, on every sample group of each Block.

Two kinds of op.  A ``BlockOp`` (the built-in ops) works on a whole Block column by column
in numba kernels.  A Python op (a callable, or an object with ``run(group)``) sees each
group as an ``ingest.sample_pb2.SampleGroup`` message it may read and modify, and returns
True to keep the group or False to drop it; consecutive Python ops share one trip through
messages (``GroupCodec``), which is the slow path: per group a parse, the calls and a
serialize.
"""

import dataclasses
import warnings

import numpy as np
from google.protobuf.internal import api_implementation

from .. import sample_pb2
from ..errors import ConfigError
from ..formats.protobuf import ProtobufDecodeError
from .blocks import check_parsed_only, take_rows
from ..errors import OpError
from .messages import GroupCodec

__all__ = ["OpStage", "BlockOp", "PythonOp", "as_op", "op_name"]


class BlockOp:
    """Base of ops that work on whole Blocks (every built-in op).

    A subclass implements ``bind(schema)``: check itself against the reader's parsed
    features (raise ``ConfigError``) and return a callable Block -> Block that keeps, drops
    or rewrites groups without a Python object per sample.
    """

    def bind(self, schema):
        raise NotImplementedError


def op_name(op):
    """How messages name an op: a function's qualified name, an object's own repr, or its class name."""
    if isinstance(op, PythonOp):
        return op.name
    if hasattr(op, "__qualname__") and not hasattr(op, "run"):
        return op.__qualname__
    if type(op).__repr__ is not object.__repr__:
        text = repr(op)
        return text if len(text) <= 80 else text[:77] + "..."
    return type(op).__qualname__


class PythonOp:
    """A user op: ``op(group)`` or ``op.run(group)`` on a ``SampleGroup`` message, returning a bool."""

    def __init__(self, op):
        self.op = op
        self.call = op.run if callable(getattr(op, "run", None)) else op
        self.name = op_name(op)

    def __repr__(self):
        return f"PythonOp({self.name})"


def as_op(op):
    """A built-in op as it is, a user op wrapped in ``PythonOp``; ``ConfigError`` for anything else."""
    if isinstance(op, (BlockOp, PythonOp)):
        return op
    if isinstance(op, type):
        raise ConfigError(
            f"add_op(op={op.__qualname__}): got a class, expected an instance of it "
            f"(e.g. add_op({op.__qualname__}(...)))"
        )
    if callable(getattr(op, "run", None)) or callable(op):
        if api_implementation.Type() == "python":
            warnings.warn(
                f"add_op(op={op_name(op)}): protobuf runs its pure-Python implementation in this interpreter (on "
                f"free-threaded CPython its C core has no build), and a Python op sees each group as a message "
                f"parsed by it: ~65x slower than with the C core (docs/decisions.md). Built-in ops (ingest.ops) "
                f"are kernels and do not slow down",
                RuntimeWarning,
                stacklevel=3,
            )
        return PythonOp(op)
    raise ConfigError(
        f"add_op(op={op!r}): expected a callable taking a SampleGroup and returning a bool, an object "
        f"with run(group) -> bool, or a built-in op (ingest.ops.FilterOP, DenseToSparseOP, DebugOP)"
    )


def _first_sample_id(blk, g):
    r = int(blk.group_offsets[g])
    return blk.sid_bytes[blk.sid_offsets[r] : blk.sid_offsets[r + 1]].tobytes().decode("utf-8", "replace")


def _op_error(blk, g, op, reason):
    group_pos = getattr(blk, "group_pos", None)
    offset = int(group_pos[g]) if group_pos is not None else blk.start
    return OpError(
        reason,
        op=op,
        source=blk.source,
        offset=offset,
        block_offset=blk.start,
        group=g,
        sample_id=_first_sample_id(blk, g),
    )


class _PythonOps:
    """Consecutive Python ops: the block's groups as messages, through the ops, back to a Block."""

    def __init__(self, codec, ops):
        self.codec = codec
        self.ops = ops

    def __call__(self, blk):
        ngroups = len(blk.group_offsets) - 1
        records, starts = self.codec.encode(blk)
        view = memoryview(records)
        starts = starts.tolist()
        kept, parts = [], []
        for g in range(ngroups):
            group = sample_pb2.SampleGroup()
            group.ParseFromString(view[starts[g] + 4 : starts[g + 1]])
            if self._keeps(group, blk, g) and len(group.labels):  # a group whose samples were all removed goes
                body = group.SerializeToString()
                parts += (len(body).to_bytes(4, "little"), body)
                kept.append(g)
        if not kept:
            return take_rows(blk, np.zeros(blk.nrows, np.bool_))
        try:
            out = self.codec.decode(b"".join(parts), blk.source)
        except ProtobufDecodeError as exc:
            g = kept[exc.record] if exc.record is not None and exc.record < len(kept) else kept[0]
            names = ", ".join(op.name for op in self.ops)
            raise _op_error(
                blk,
                g,
                names,
                f"the group the ops left does not read back ({exc.reason} {exc.text!r}, expected {exc.expected})",
            ) from exc
        extra = {}
        if getattr(blk, "group_pos", None) is not None:
            extra["group_pos"] = blk.group_pos[np.array(kept, np.int64)]
        return _with_content(blk, out, extra)

    def _keeps(self, group, blk, g):
        for op in self.ops:
            try:
                verdict = op.call(group)
            except Exception as exc:
                raise _op_error(blk, g, op.name, f"raised {type(exc).__name__}: {exc}") from exc
            if verdict is True or verdict is False:
                keep = verdict
            elif isinstance(verdict, np.bool_):
                keep = bool(verdict)
            else:
                raise _op_error(
                    blk, g, op.name, f"returned {verdict!r}; an op returns True (keep the group) or False (drop it)"
                )
            if not keep:
                return False
        return True


def _with_content(blk, out, extra):
    """``blk`` (its source, positions and pipeline fields) with the columns of the decoded ``out``."""
    return dataclasses.replace(
        blk,
        tables=out.tables,
        group_offsets=out.group_offsets,
        sp_keys=out.sp_keys,
        sp_hkeys=out.sp_hkeys,
        sp_values=out.sp_values,
        labels=out.labels,
        timestamps=out.timestamps,
        sid_bytes=out.sid_bytes,
        sid_offsets=out.sid_offsets,
        **extra,
    )


class OpStage:
    """Runs ``ops`` in order on each Block; the Block handed on holds only the groups the ops kept.

    A callable Block -> Block for the parse workers, to run before the DSL stage (ops see
    and may change the parsed features; DSL features are computed from what they leave).

    Parameters
    ----------
    schema : Schema
        The parsed features of the blocks (the reader's schema without DSL features).
    ops : list
        Built-in ops (``BlockOp``) and Python ops, as given to ``add_op``.
    """

    def __init__(self, schema, ops):
        self.schema = schema
        self.ops = [as_op(op) for op in ops]
        self.steps = []
        pending = []
        codec = None
        for op in self.ops + [None]:
            if isinstance(op, PythonOp):
                pending.append(op)
                continue
            if pending:
                codec = codec or GroupCodec(schema)
                self.steps.append(_PythonOps(codec, pending))
                pending = []
            if op is not None:
                self.steps.append(op.bind(schema))

    def __call__(self, blk):
        check_parsed_only(blk)
        for step in self.steps:
            if len(blk.group_offsets) <= 1:
                break  # nothing left to run on
            blk = step(blk)
        return blk
