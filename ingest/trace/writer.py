"""TraceWriter: records of named arrays per training step, in XDL's trace files (docs/trace.md)."""

import datetime
import math
import operator
import re
import threading
import time

import numpy as np

from .. import trace_pb2
from .._native import bundles
from .._native.trace import DERIVED, U32_LIMIT, encode_columns
from ..errors import ConfigError
from ..pool import BufferPool
from ..sources.filesystems import url_to_fs
from .background import MB, BackgroundFiles, file_mb
from .columns import TYPES, column_of

__all__ = ["TraceWriter", "FixedColumns"]

# records are encoded into chunks of about this size, each handed to the writer thread and written with one call:
# a hand-over and a write per record cost more than encoding it (threads waking and taking the GIL from each other)
_CHUNK = 1 << 20
# the encoding kernel takes a tuple of a few sizes (one compilation each), the columns past a write's padded with
_NO_DATA = np.zeros(0, np.uint8)


def _padded(datas):
    """``datas`` as a tuple of 4, 8, 16, ... arrays."""
    n = len(datas)
    return (*datas, *(_NO_DATA,) * ((4 if n <= 4 else 1 << (n - 1).bit_length()) - n))


def _seconds(t, what):
    """``t`` (unix seconds, or a datetime) as unix seconds; None stays None."""
    if t is None:
        return None
    if isinstance(t, datetime.datetime):
        return t.timestamp()
    if isinstance(t, bool) or not isinstance(t, (int, float)):
        raise ConfigError(f"{what}={t!r}: expected unix seconds or a datetime")
    return float(t)


def _range(value, what, convert):
    """``(begin, end)`` with either end None (open), converted; None for no range."""
    if value is None:
        return None
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        raise ConfigError(f"{what}={value!r}: expected (begin, end), either of them None")
    return tuple(convert(v, what) for v in value)


def _int(v, what):
    """``v`` as an int (numpy's integers too)."""
    try:
        if not isinstance(v, bool):
            return operator.index(v)
    except TypeError:
        pass
    raise ConfigError(f"{what}={v!r}: expected an int step")


def _step(v, what):
    return None if v is None else _int(v, what)


def _within(x, bounds):
    return bounds is None or ((bounds[0] is None or x >= bounds[0]) and (bounds[1] is None or x < bounds[1]))


class _Step:
    """The record being built: writes of the same step join it until another step, ``flush`` or ``close``."""

    __slots__ = ("lstep", "gstep", "timestamp", "keys", "wanted")

    def __init__(self, lstep, gstep, timestamp, wanted):
        self.lstep = lstep
        self.gstep = gstep
        self.timestamp = timestamp
        self.keys = []  # those written, in order: their columns are encoded in the chunk as they come
        self.wanted = wanted  # False: filtered out, writes of this step are dropped


class _File:
    """The data file being written: its name, size and the ranges of its records (its ``Meta``)."""

    def __init__(self, url, size):
        self.url = url
        self.size = size
        self.meta = None

    def add(self, lstep, gstep, timestamp, size):
        self.size += size
        m = self.meta
        if m is None:
            self.meta = [lstep, lstep, gstep, gstep, timestamp, timestamp]
            return
        # unrolled: once per record, under the GIL the parse workers want
        if lstep < m[0]:
            m[0] = lstep
        elif lstep > m[1]:
            m[1] = lstep
        if gstep < m[2]:
            m[2] = gstep
        elif gstep > m[3]:
            m[3] = gstep
        if timestamp < m[4]:
            m[4] = timestamp
        elif timestamp > m[5]:
            m[5] = timestamp


class FixedColumns:
    """What ``TraceWriter.fixed`` returns: keys, and the layout of their columns with the first dimension of each
    given by its data."""

    def __init__(self, keys, layout, kinds):
        self.keys = keys
        self.key_set = frozenset(keys)
        self.layout = layout
        self._kinds = kinds  # (dtype, shape past the first dimension) per key

    def check(self, arrays):
        """A ``TypeError`` for arrays unlike those the columns were made of (``INGEST_CHECK_KERNEL_ARGS=1``)."""
        for key, a, (dtype, rest) in zip(self.keys, arrays, self._kinds, strict=True):
            flags = getattr(a, "flags", None)
            if type(a) is not np.ndarray or a.dtype != dtype or a.shape[1:] != rest or not flags.c_contiguous:
                raise TypeError(
                    f"trace key {key!r}: expected a C-contiguous {dtype} array of shape (n, *{rest}), got {a!r}"
                )
            if not flags.writeable:
                raise TypeError(f"trace key {key!r}: expected a writeable array, got a read-only one")


class TraceWriter:
    """Write named arrays per training step to trace files of XDL's format (``FORMATS.md`` section 8).

    Files ``<output_dir>/<mode>.<name>.<rank>.<index>``: ``[u32 LE length][Header]``, then
    ``[u32 LE length][Record]`` per step; a file is closed and the next started before a record would take it
    past ``max_file_mb`` MB (MiB; a record is never split, so a file holding one record larger than that is
    larger), and each gets ``<file>.meta``, a serialized ``Meta`` of its step and time ranges, when it is
    closed and at every ``flush()``.  Indexes continue after the files of the same mode, name and rank already
    in ``output_dir``, so a job restarted into the same folder adds files instead of replacing them.

    Each write's arrays are encoded when it is made, by one kernel call, into the record of its step;
    one background thread writes the records, handed over in chunks of about 1 MiB through a queue of
    ``queue_depth`` chunks.  An error of that thread (a full disk, a lost connection)
    is raised by the next ``write``, ``flush`` or ``close``.

    Parameters
    ----------
    output_dir : str
        A folder, local or any fsspec URL (``hdfs://...``); made if missing.
    every : int
        Keep the steps whose ``lstep`` is a multiple of ``every``.
    steps : (int or None, int or None)
        Keep the steps with ``begin <= gstep < end``.
    window : (float or datetime or None, float or datetime or None)
        Keep the steps written at unix time ``begin <= t < end``.
    summary : dict of key -> callable
        Write ``f(array)`` instead of the array of that key (``{"item.ids": np.unique}``).
    """

    def __init__(
        self,
        output_dir,
        name="trace",
        rank=0,
        mode="train",
        max_file_mb=300,
        *,
        every=1,
        steps=None,
        window=None,
        summary=None,
        queue_depth=16,
    ):
        for what, v in (("name", name), ("mode", mode)):
            if not isinstance(v, str) or not v or "/" in v:
                raise ConfigError(f"TraceWriter({what}={v!r}): expected a non-empty string without '/'")
        if isinstance(rank, bool) or not isinstance(rank, int) or rank < 0:
            raise ConfigError(f"TraceWriter(rank={rank!r}): expected an int >= 0")
        file_mb(max_file_mb, "TraceWriter")
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise ConfigError(f"TraceWriter(every={every!r}): expected an int >= 1")
        summary = dict(summary or {})
        for key, f in summary.items():
            if not callable(f):
                raise ConfigError(f"TraceWriter(summary={{{key!r}: {f!r}}}): expected a function of an array")
        self._steps = _range(steps, "steps", _step)
        self._window = _range(window, "window", _seconds)
        self._every = every
        self._ranges = self._steps is not None or self._window is not None
        self._summary = summary
        self._max_bytes = int(max_file_mb * MB)
        self.output_dir = str(output_dir).rstrip("/")
        self.prefix = f"{mode}.{name}.{rank}"
        fs, path = url_to_fs(self.output_dir)
        fs.makedirs(path, exist_ok=True)
        self._index = self._next_index(fs, path)
        self._files = BackgroundFiles("trace", queue_depth)
        self._lock = threading.Lock()  # the reader's hook and the trainer may write from different threads
        self._keys = None  # the Header's keys, from the first record
        self._key_set = None
        self._header = None  # its length-prefixed bytes
        self._file = None
        self._step = None
        self._closed = False
        self.files = []  # the data files started, in order
        self._chunks = BufferPool()  # a chunk the thread has written is taken again: fresh memory costs page faults
        self._chunk = self._chunks.lease(_CHUNK, np.uint8)  # records not handed to the thread yet: [0, _pos)
        self._pos = 0
        self._record = None  # where the record being built starts in the chunk, None before its first column

    def _next_index(self, fs, path):
        pattern = re.compile(re.escape(self.prefix) + r"\.(\d+)$")
        taken = [int(m.group(1)) for p in fs.glob(f"{path}/{self.prefix}.*") if (m := pattern.search(p))]
        return max(taken) + 1 if taken else 0

    @property
    def keys(self):
        """The Header's keys (those of the first record written), or None before it."""
        return None if self._keys is None else list(self._keys)

    # -- writing ------------------------------------------------------------------------------
    def write(self, lstep: int, gstep: int, values: dict) -> None:
        """Add ``values`` (key -> numpy array, torch tensor or bytes) to the record of step ``lstep``.

        Writes of the same step in a row make one record (the reader's arrays, then the trainer's loss); it
        is written once a write names another step, or at ``flush()`` / ``close()``.  A record without any
        value is not written.  Every record holds the keys of the first one.  The arrays are encoded before
        ``write`` returns: changing them afterwards changes nothing in the trace."""
        with self._lock:
            self._add(self._step_of(lstep, gstep), values)

    def add(self, values: dict) -> None:
        """Add ``values`` to the record being built (the step last written): a trainer's own tensors beside the
        reader's arrays of the batch it trains on, without naming the step."""
        with self._lock:
            self._open()
            if self._step is None:
                raise ConfigError("TraceWriter.add(): no step is being written; write(lstep, gstep, values) first")
            self._add(self._step, values)

    def fixed(self, values: dict) -> "FixedColumns | None":
        """The columns of ``values`` for a caller that writes arrays of these keys, dtypes and shapes at every step
        but for their first dimension (the reader's hook: a batch's arrays), to write with ``write_fixed``; None
        where ``values`` are not such arrays, or have a summary (then ``write``)."""
        layout = [len(values)]
        for key, value in values.items():
            if not (
                type(value) is np.ndarray
                and value.dtype in TYPES
                and value.dtype.isnative
                and value.ndim
                and value.flags.c_contiguous
                and value.flags.writeable
                and math.prod(value.shape[1:])
                and key not in self._summary
            ):
                return None
            layout += (TYPES[value.dtype], value.ndim, DERIVED, *value.shape[1:])
        return FixedColumns(list(values), np.array(layout, np.int64), [(v.dtype, v.shape[1:]) for v in values.values()])

    def write_fixed(self, lstep: int, gstep: int, fixed: "FixedColumns", arrays) -> None:
        """``write(lstep, gstep, dict(zip(fixed.keys, arrays)))`` for arrays like those ``fixed`` was made of,
        without the checks per key and array that this makes needless."""
        with self._lock:
            step = self._step_of(lstep, gstep)
            if not step.wanted:
                return
            if step.keys or (self._key_set is not None and not fixed.key_set <= self._key_set):
                return self._add(step, dict(zip(fixed.keys, arrays)))  # where the general path states the error
            if bundles.CHECK_EVERY_BATCH:
                fixed.check(arrays)
            datas = [a.view(np.uint8) if a.ndim == 1 else a.reshape(-1).view(np.uint8) for a in arrays]
            self._encode(step, fixed.layout, _padded(datas))
            step.keys += fixed.keys

    def _step_of(self, lstep, gstep):
        """The step ``lstep`` (of ``gstep``), started here when the one being built is another: that one ends."""
        if type(lstep) is not int:
            lstep = _int(lstep, "TraceWriter.write(lstep)")
        if type(gstep) is not int:
            gstep = _int(gstep, "TraceWriter.write(gstep)")
        self._open()
        step = self._step
        if step is None or step.lstep != lstep:
            self._end_step()
            now = time.time()
            wanted = lstep % self._every == 0 and (
                not self._ranges or (_within(gstep, self._steps) and _within(now, self._window))
            )
            step = self._step = _Step(lstep, gstep, int(now * 1000), wanted)
        elif step.gstep != gstep:
            raise ConfigError(
                f"TraceWriter.write(lstep={lstep}, gstep={gstep}): this step was written with gstep {step.gstep}"
            )
        return step

    def _open(self):
        if self._closed:
            raise ConfigError(f"trace {self.output_dir}/{self.prefix}: the writer is closed")
        self._files.check()

    def _add(self, step, values):
        """Encode ``values`` as columns of the record of ``step``: all of them, or none and an error."""
        if not step.wanted:
            return
        keys, layout, datas = [], [len(values)], []
        for key, value in values.items():
            if not isinstance(key, str):
                raise ConfigError(f"trace key {key!r}: expected a string")
            if key in step.keys or key in keys:
                raise ConfigError(f"trace key {key!r} written twice for lstep {step.lstep}")
            if self._key_set is not None and key not in self._key_set:
                raise ConfigError(
                    f"trace key {key!r} at lstep {step.lstep}: not in the trace's keys {self._keys} (those of its "
                    f"first record); every record holds the same keys"
                )
            f = self._summary.get(key)
            if f is not None:
                try:
                    value = f(value)
                except Exception as exc:
                    raise ConfigError(
                        f"trace summary of key {key!r} ({getattr(f, '__name__', f)!r}) failed at lstep "
                        f"{step.lstep}: {exc}"
                    ) from exc
            code, shape, data = column_of(key, value)
            keys.append(key)
            layout += (code, len(shape), *shape)
            datas.append(data)
        if keys:
            self._encode(step, np.array(layout, np.int64), _padded(datas))
            step.keys += keys

    def _encode(self, step, layout, datas):
        """Add the columns to the record being built in the chunk, or start it with them."""
        for _ in range(2):
            record = -1 if self._record is None else self._record
            end = encode_columns(self._chunk, self._pos, record, step.gstep, step.lstep, step.timestamp, layout, datas)
            if end >= 0:
                break
            self._room(-end)
        if self._record is None:
            self._record = self._pos
        self._pos = end

    def _end_step(self):
        """Hand over the record being built, if any: keys checked, in the data file it fits in."""
        step, self._step = self._step, None
        start = self._record
        if start is None:
            return
        end, self._record, self._pos = self._pos, None, start  # the record is taken back once known right
        if self._keys is None:
            unknown = sorted(set(self._summary) - set(step.keys))
            if unknown:
                raise ConfigError(f"TraceWriter(summary=...) names keys {unknown} that the records lack: {step.keys}")
            self._keys, self._key_set = step.keys, set(step.keys)
            header = trace_pb2.Header(key=self._keys).SerializeToString()
            self._header = len(header).to_bytes(4, "little") + header
        elif step.keys != self._keys:
            if len(step.keys) != len(self._keys):
                raise ConfigError(
                    f"trace record of lstep {step.lstep} holds keys {sorted(step.keys)}, the trace's are "
                    f"{self._keys} (those of its first record); every record holds the same keys (a filter of the "
                    f"reader's hook, reader.trace(every=...), leaves the trainer's keys alone: filter with "
                    f"TraceWriter(every=...) instead)"
                )
            self._reorder(start, end, step.keys)
        size = end - start
        if size - 4 >= U32_LIMIT:
            raise ConfigError(f"trace record of lstep {step.lstep}: {size - 4} bytes, past the format's u32 length")
        f = self._file
        if f is None or (f.meta is not None and f.size + size > self._max_bytes):
            record = self._chunk[start:end].copy()
            self._roll()
            self._append(record)
        else:
            self._pos = end
        self._file.add(step.lstep, step.gstep, step.timestamp, size)
        if self._pos >= _CHUNK:
            self._send()

    def _reorder(self, start, end, keys):
        """Put the columns of the record at ``chunk[start:end]``, written in the order of ``keys``, in the
        order of the trace's keys (as the protobuf library serializes a Record: the same bytes)."""
        record = trace_pb2.Record.FromString(self._chunk[start + 4 : end].tobytes())
        columns = [record.column[keys.index(k)] for k in self._keys]
        del record.column[:]
        record.column.extend(columns)
        self._chunk[start + 4 : end] = np.frombuffer(record.SerializeToString(), np.uint8)

    def _append(self, data):
        n = len(data)
        if self._pos + n > len(self._chunk):
            self._room(n)
        self._chunk[self._pos : self._pos + n] = np.frombuffer(data, np.uint8)
        self._pos += n

    def _room(self, n):
        """Room for ``n`` more bytes in the chunk: its whole records go to the writer thread, the record being
        built moves to the start of a new chunk."""
        begin = self._pos if self._record is None else self._record
        part = self._chunk[begin : self._pos]
        self._send(begin, max(_CHUNK, len(part) + n))
        self._chunk[: len(part)] = part
        self._pos = len(part)
        if self._record is not None:
            self._record = 0

    def _send(self, end=None, size=_CHUNK):
        """Hand ``chunk[:end]`` (whole records) to the writer thread, which writes them with one call, and start
        a chunk of at least ``size`` bytes."""
        end = self._pos if end is None else end
        if end:  # the thread holds that chunk now: never written again
            self._files.write([self._chunk[:end]])
        if end or size > len(self._chunk):
            self._chunk = self._chunks.lease(size, np.uint8)
        self._pos = 0

    def _roll(self):
        """Close the data file being written (with its ``.meta``) and start the next, with the Header."""
        self._finish_file()
        url = f"{self.output_dir}/{self.prefix}.{self._index}"
        self._index += 1
        self._file = _File(url, len(self._header))
        self.files.append(url)
        self._files.start(url)
        self._append(self._header)

    def _finish_file(self):
        self._send()
        f = self._file
        if f is not None and f.meta is not None:
            m = f.meta
            meta = trace_pb2.Meta(
                lstep_begin=m[0], lstep_end=m[1], gstep_begin=m[2], gstep_end=m[3], timestamp_begin=m[4],
                timestamp_end=m[5],
            )  # fmt: skip
            self._files.whole(f"{f.url}.meta", meta.SerializeToString())

    def flush(self) -> None:
        """Write the record being built, the ``.meta`` of the file being written, and wait until both are written."""
        with self._lock:
            self._open()
            self._end_step()
            self._finish_file()
            self._files.flush()

    def close(self) -> None:
        """``flush()``, then close the file and stop the thread; raises an error of the thread not raised yet."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            try:
                if not self._files.failed:
                    self._end_step()
                    self._finish_file()
            finally:
                self._files.close()

    def __enter__(self) -> "TraceWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self):
        return f"TraceWriter({self.output_dir!r}, prefix={self.prefix!r}, keys={self._keys})"
