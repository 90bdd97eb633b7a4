"""Files through fsspec: expansion of paths, work-unit planning, sharding and opening."""
import io
import os
from dataclasses import dataclass

from ..errors import ConfigError, SourceError
from .ahead import Ahead
from .compression import decompressed, infer_compression
from .filesystems import url_to_fs
from .hdfs import check_reachable
from .kafka import KafkaStream, is_kafka

__all__ = ["WorkUnit", "expand_paths", "plan_units", "open_unit", "read_into"]

_GLOB_CHARS = "*?["
MIB = 1 << 20


@dataclass(frozen=True)
class WorkUnit:
    """A file or a nominal byte range ``[start, end)`` of one (uncompressed) file, or a Kafka partition.

    ``end`` is None for "to the end of the file".  ``index`` numbers units in plan order
    (before sharding), the same in every worker of a job.  ``resume`` is set when a restored
    state continues the unit: ``(position, rows)``, the position of a group start (a byte
    offset of the decompressed stream; for Kafka ``(message offset, byte in message)``) and
    the samples of that group already delivered.
    """

    index: int
    url: str
    start: int
    end: object
    size: object
    compression: object
    position: object = None  # Kafka: (start offset, end offset or None, client, consumer settings)
    resume: object = None
    lease: object = None  # Kafka group member: the partition's kafka_group.Lease

    @property
    def whole(self):
        return self.start == 0 and self.end is None

    @property
    def stream_start(self):
        """Position of the first byte ``open_unit`` returns for a whole unit (the resume point of a
        file; a Kafka stream starts at 0 wherever it resumes)."""
        if self.resume is None or is_kafka(self.url):
            return 0
        return self.resume[0]


def _hidden(path):
    name = path.rstrip("/").rsplit("/", 1)[-1]
    return name.startswith(".") or name.startswith("_")


def expand_paths(paths):
    """Expand files, directories (recursively, hidden and ``_`` files skipped) and globs.

    Returns a list of ``(url, size)``, each path's files sorted, paths in the given order.
    A path that matches nothing is a ``SourceError``.
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    if not paths:
        raise ConfigError("paths=[]: expected at least one file, directory, glob or URL")
    out = []
    for path in paths:
        path = os.fspath(path)
        check_reachable(path)
        fs, root = url_to_fs(path)
        protocol = fs.protocol[0] if isinstance(fs.protocol, (tuple, list)) else fs.protocol
        try:
            if any(c in root for c in _GLOB_CHARS):
                found = sorted(p for p in fs.glob(root) if not fs.isdir(p))
            elif fs.isdir(root):
                found = sorted(p for p in fs.find(root) if not _hidden(p))
            elif fs.exists(root):
                found = [root]
            else:
                found = []
            infos = [(p, fs.size(p)) for p in found]
        except OSError as exc:
            raise SourceError(f"{path}: {exc}", source=path) from exc
        if not infos:
            raise SourceError(f"{path}: no such file, or nothing matches", source=path)
        for p, size in infos:
            url = p if protocol in ("file", "local") else fs.unstrip_protocol(p)
            out.append((url, size))
    return out


def plan_units(files, *, compression=None, splittable=True, task_num=1, unit_bytes=None):
    """Cut files into work units.

    Uncompressed files of a splittable format are cut into byte ranges of about
    ``unit_bytes`` (default: total / (8 * task_num), within 1..64 MiB), so that every
    shard has several units.  The plan depends only on the files and ``task_num``, so
    every worker of a job computes the same one.
    """
    total = sum(size or 0 for _, size in files)
    if unit_bytes is None:
        unit_bytes = min(64 * MIB, max(MIB, total // (8 * max(task_num, 1)) + 1))
    units = []
    for url, size in files:
        codec = compression if compression is not None else infer_compression(url)
        if codec is None and splittable and size and size > unit_bytes:
            n = -(-size // unit_bytes)
            step = -(-size // n)
            for k in range(n):
                end = None if k == n - 1 else (k + 1) * step
                units.append(WorkUnit(len(units), url, k * step, end, size, None))
        else:
            units.append(WorkUnit(len(units), url, 0, None, size, codec))
    return units


def open_unit(unit):
    """Open the unit's file for binary reading, decompressed.  Errors become ``SourceError``.

    A compressed unit is decompressed a few chunks ahead on a thread of its own
    (``ReadAhead``), so that decompression overlaps with parsing.  A whole unit that resumes
    is positioned at ``unit.stream_start`` (a compressed file by decompressing up to there).
    An hdfs-native file is read through ranged streams (``RangeStream``).  It gets no read-ahead
    thread when uncompressed: the stream already fetches ahead, and the extra thread halved the
    throughput of the parse workers.
    """
    if is_kafka(unit.url):
        return KafkaStream(unit)
    try:
        fs, path = url_to_fs(unit.url)
        f = fs.open(path, "rb")
        if hasattr(f, "read_range_stream"):
            f = RangeStream(f, unit.url, unit.end)
        if unit.compression:
            f = ReadAhead(decompressed(f, unit.compression), unit.url, under=f)
    except (OSError, ValueError) as exc:
        raise SourceError(f"{unit.url}: cannot open: {exc}", source=unit.url) from exc
    if unit.whole and unit.stream_start:
        skip(f, unit.stream_start, unit.url)
    return f


def skip(f, n, url):
    """Move a stream ``n`` bytes forward: a seek when it can, else by reading (decompressing) them."""
    if f.seekable():
        f.seek(n, io.SEEK_CUR)
        return
    scratch = bytearray(min(n, 1 << 22))
    left = n
    while left:
        got = read_into(f, memoryview(scratch)[:min(left, len(scratch))])
        if got == 0:
            raise SourceError(f"{url}: ends {left} bytes before the position to skip to (was the file changed?)",
                              source=url)
        left -= got


class _Chunked(io.RawIOBase):
    """A stream whose bytes come as chunks (bytes, None at the end) from ``_next_chunk()``; ``readinto``
    copies from them, slicing without copies."""

    def __init__(self):
        super().__init__()
        self._current = memoryview(b"")
        self._at = 0      # next byte in _current
        self._pos = 0     # stream position of the next byte

    def readable(self):
        return True

    def _next_chunk(self):
        raise NotImplementedError

    def readinto(self, b):
        view = memoryview(b).cast("B")
        n = 0
        while n < len(view):
            if self._at == len(self._current):
                chunk = self._next_chunk()
                if not chunk:
                    break
                self._current, self._at = memoryview(chunk), 0
            k = min(len(view) - n, len(self._current) - self._at)
            view[n:n + k] = self._current[self._at:self._at + k]
            n += k
            self._at += k
            self._pos += k
        return n


class RangeStream(_Chunked):
    """A file of hdfs-native read through ranged streams from the current position.  Each ``read()`` of
    hdfs-native asks the DataNode anew: 4 MiB reads moved ~170 MB/s here where one stream moves ~600 MB/s.

    The DataNode sends a stream's bytes ahead of the reader, and the client checksums them, whether they
    are read or not.  So a stream never asks for much more than will be read: after a seek it asks for
    ``FIRST`` bytes (the alignment of a byte-range unit reads ~64 KiB at a few places), each next one for 4x
    more, and none past the unit's ``end`` and ``PAST_END`` more (where its last sample group ends) unless
    the reader goes on past that.  With streams to the end of the file, reading the 156 MB benchmark file in
    8 units moved ~240 MB over the loopback; now ~167 MB."""

    FIRST = 256 << 10
    PAST_END = 256 << 10

    def __init__(self, f, url, end=None):
        super().__init__()
        self._f = f
        self._url = url
        self._size = f.size
        self._end = end
        self._pos = f.tell()
        self._ask = self.FIRST            # bytes the next stream asks for
        self._chunks = None               # the current stream's iterator of bytes, from _pos on

    def seekable(self):
        return True

    def tell(self):
        return self._pos

    def seek(self, offset, whence=io.SEEK_SET):
        target = {io.SEEK_SET: offset, io.SEEK_CUR: self._pos + offset, io.SEEK_END: self._size + offset}[whence]
        if target != self._pos:
            self._chunks, self._current, self._at, self._pos = None, memoryview(b""), 0, target
            self._ask = self.FIRST
        return self._pos

    def _next_chunk(self):
        while self._pos < self._size:
            try:
                if self._chunks is None:
                    bounded = self._end is not None and self._pos < self._end
                    limit = min(self._size, self._end + self.PAST_END) if bounded else self._size
                    n = min(self._ask, limit - self._pos)
                    self._ask *= 4
                    self._chunks = iter(self._f.read_range_stream(self._pos, n))
                chunk = next(self._chunks, None)
            except Exception as exc:  # noqa: BLE001 - any failure of the client
                raise SourceError(f"{self._url}: cannot read at byte {self._pos}: {exc}", source=self._url) from exc
            if chunk:
                return chunk
            self._chunks = None  # this stream is read: the next one
        return None

    def close(self):
        if not self.closed:
            self._chunks = None
            self._f.close()
        super().close()


class ReadAhead(_Chunked):
    """A stream read ``depth`` chunks ahead by a background thread (``Ahead``).

    Errors of the underlying stream (a corrupt or truncated compressed file) reach the reader as a
    ``SourceError`` naming the file, in stream order.  ``close()`` stops and joins the thread.
    """

    def __init__(self, f, url, chunk=4 << 20, depth=2, under=None):
        super().__init__()
        self._f = f
        self._under = under  # the compressed stream, closed too (a GzipFile leaves its file open)
        self._url = url
        self._chunk = chunk
        self._ahead = Ahead(self._read_chunk, depth, "ingest-readahead")

    def _read_chunk(self, stop):
        try:
            return self._f.read(self._chunk) or None
        except Exception as exc:  # noqa: BLE001 - any failure of the underlying stream
            raise SourceError(f"{self._url}: cannot read: {exc}", source=self._url) from exc

    def _next_chunk(self):
        return self._ahead.take()

    def close(self):
        if not self.closed:
            self._ahead.close()
            self._f.close()
            if self._under is not None:
                self._under.close()
        super().close()


def read_into(f, view):
    """Read up to ``len(view)`` bytes into the writable memoryview; returns the count (0 at EOF)."""
    readinto = getattr(f, "readinto", None)
    if readinto is not None:
        try:
            n = readinto(view)
            return n or 0
        except (NotImplementedError, io.UnsupportedOperation):
            pass
    data = f.read(len(view))
    view[:len(data)] = data
    return len(data)

