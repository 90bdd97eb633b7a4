"""TraceWriter: records of named arrays per training step, in XDL's trace files (docs/trace.md)."""

import datetime
import operator
import re
import threading
import time

from .. import trace_pb2
from ..errors import ConfigError
from ..sources.filesystems import url_to_fs
from .background import MB, BackgroundFiles, file_mb
from .columns import as_array, column_bytes, record_pieces

__all__ = ["TraceWriter"]

# records go to the writer thread in chunks of about this size, each written with one call: a hand-over and a
# write per record cost more than encoding it (threads waking and taking the GIL from each other)
_CHUNK = 1 << 20


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

    __slots__ = ("lstep", "gstep", "timestamp", "columns", "wanted")

    def __init__(self, lstep, gstep, timestamp, wanted):
        self.lstep = lstep
        self.gstep = gstep
        self.timestamp = timestamp
        self.columns = {}  # key -> bytes of Record.column
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
        else:
            m[0], m[1], m[2] = min(m[0], lstep), max(m[1], lstep), min(m[2], gstep)
            m[3], m[4], m[5] = max(m[3], gstep), min(m[4], timestamp), max(m[5], timestamp)


class TraceWriter:
    """Write named arrays per training step to trace files of XDL's format (``FORMATS.md`` section 8).

    Files ``<output_dir>/<mode>.<name>.<rank>.<index>``: ``[u32 LE length][Header]``, then
    ``[u32 LE length][Record]`` per step; a file is closed and the next started before a record would take it
    past ``max_file_mb`` MB (MiB; a record is never split, so a file holding one record larger than that is
    larger), and each gets ``<file>.meta``, a serialized ``Meta`` of its step and time ranges, when it is
    closed and at every ``flush()``.  Indexes continue after the files of the same mode, name and rank already
    in ``output_dir``, so a job restarted into the same folder adds files instead of replacing them.

    Records are serialized by the caller; one background thread writes them, handed over in chunks of about
    1 MiB through a queue of ``queue_depth`` chunks.  An error of that thread (a full disk, a lost connection)
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
        self._chunk = bytearray()  # records not handed to the thread yet

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
        value is not written.  Every record holds the keys of the first one."""
        lstep, gstep = _int(lstep, "TraceWriter.write(lstep)"), _int(gstep, "TraceWriter.write(gstep)")
        with self._lock:
            self._open()
            step = self._step
            if step is None or step.lstep != lstep:
                self._end_step()
                now = time.time()
                wanted = lstep % self._every == 0 and _within(gstep, self._steps) and _within(now, self._window)
                step = self._step = _Step(lstep, gstep, int(now * 1000), wanted)
            elif step.gstep != gstep:
                raise ConfigError(
                    f"TraceWriter.write(lstep={lstep}, gstep={gstep}): this step was written with gstep {step.gstep}"
                )
            self._add(step, values)

    def add(self, values: dict) -> None:
        """Add ``values`` to the record being built (the step last written): a trainer's own tensors beside the
        reader's arrays of the batch it trains on, without naming the step."""
        with self._lock:
            self._open()
            if self._step is None:
                raise ConfigError("TraceWriter.add(): no step is being written; write(lstep, gstep, values) first")
            self._add(self._step, values)

    def _open(self):
        if self._closed:
            raise ConfigError(f"trace {self.output_dir}/{self.prefix}: the writer is closed")
        self._files.check()

    def _add(self, step, values):
        if not step.wanted:
            return
        for key, value in values.items():
            if not isinstance(key, str):
                raise ConfigError(f"trace key {key!r}: expected a string")
            if key in step.columns:
                raise ConfigError(f"trace key {key!r} written twice for lstep {step.lstep}")
            if self._keys is not None and key not in self._keys:
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
            step.columns[key] = column_bytes(as_array(key, value))

    def _end_step(self):
        """Write the record being built, if any and wanted."""
        step, self._step = self._step, None
        if step is None or not step.wanted or not step.columns:
            return
        if self._keys is None:
            self._keys = list(step.columns)
            self._key_set = set(self._keys)
            unknown = sorted(set(self._summary) - set(self._keys))
            if unknown:
                raise ConfigError(f"TraceWriter(summary=...) names keys {unknown} that the records lack: {self._keys}")
            header = trace_pb2.Header(key=self._keys).SerializeToString()
            self._header = len(header).to_bytes(4, "little") + header
        elif step.columns.keys() != self._key_set:
            raise ConfigError(
                f"trace record of lstep {step.lstep} holds keys {sorted(step.columns)}, the trace's are "
                f"{self._keys} (those of its first record); every record holds the same keys (a filter of the "
                f"reader's hook, reader.trace(every=...), leaves the trainer's keys alone: filter with "
                f"TraceWriter(every=...) instead)"
            )
        try:
            pieces = record_pieces(step.gstep, step.lstep, [step.columns[k] for k in self._keys], step.timestamp)
        except ValueError as exc:
            raise ConfigError(f"trace record of lstep {step.lstep}: {exc}") from None
        size = sum(map(len, pieces))
        f = self._file
        if f is None or (f.meta is not None and f.size + size > self._max_bytes):
            self._roll()
            f = self._file
        f.add(step.lstep, step.gstep, step.timestamp, size)
        chunk = self._chunk
        for piece in pieces:  # appended where the thread will write them from: one copy
            chunk += piece
        if len(self._chunk) >= _CHUNK:
            self._send()

    def _send(self):
        """Hand the records of the chunk to the writer thread, which writes them with one call."""
        if self._chunk:
            chunk, self._chunk = self._chunk, bytearray()
            self._files.write([chunk])

    def _roll(self):
        """Close the data file being written (with its ``.meta``) and start the next, with the Header."""
        self._finish_file()
        url = f"{self.output_dir}/{self.prefix}.{self._index}"
        self._index += 1
        self._file = _File(url, len(self._header))
        self.files.append(url)
        self._files.start(url)
        self._chunk += self._header

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
