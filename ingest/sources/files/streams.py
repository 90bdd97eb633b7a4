"""The byte streams of files: ranged HDFS reads, decompression read ahead, and the ``UnitStream`` a file unit
opens as."""

import io
import threading

from ...errors import SourceError
from ..ahead import Ahead
from ..base import UnitStream, read_into

__all__ = ["FileStream", "RangeStream", "ReadAhead", "Window", "skip"]


def skip(f, n, url):
    """Move a stream ``n`` bytes forward: a seek when it can, else by reading (decompressing) them."""
    if f.seekable():
        f.seek(n, io.SEEK_CUR)
        return
    scratch = bytearray(min(n, 1 << 22))
    left = n
    while left:
        got = read_into(f, memoryview(scratch)[: min(left, len(scratch))])
        if got == 0:
            raise SourceError(
                f"{url}: ends {left} bytes before the position to skip to (was the file changed?)", source=url
            )
        left -= got


class _Chunked(io.RawIOBase):
    """A stream whose bytes come as chunks (any buffer of bytes, None or an empty one at the end) from
    ``_next_chunk()``; ``readinto`` copies from them, slicing without copies."""

    def __init__(self):
        super().__init__()
        self._current = memoryview(b"")
        self._at = 0  # next byte in _current
        self._pos = 0  # stream position of the next byte

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
                if chunk is None or len(chunk) == 0:
                    break
                self._current, self._at = memoryview(chunk), 0
            k = min(len(view) - n, len(self._current) - self._at)
            view[n : n + k] = self._current[self._at : self._at + k]
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
        self._ask = self.FIRST  # bytes the next stream asks for
        self._chunks = None  # the current stream's iterator of bytes, from _pos on

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


class Window(io.RawIOBase):
    """The next ``length`` bytes of the binary file ``f``, then the end (a run of zstd frames of a file).
    ``close()`` leaves ``f`` to its owner."""

    def __init__(self, f, length):
        super().__init__()
        self._f = f
        self._left = length

    def readable(self):
        return True

    def read(self, n=-1):
        n = self._left if n is None or n < 0 else min(n, self._left)
        data = self._f.read(n) if n else b""
        self._left -= len(data)
        return data


class ReadAhead(_Chunked):
    """A stream read ``depth`` chunks ahead by a background thread (``Ahead``).

    Errors of the underlying stream (a corrupt or truncated compressed file) reach the reader as a
    ``SourceError`` naming the file and the bytes of the stream the failed read was for, in stream order
    (``done``: the stream position ``f`` starts at).  ``close()`` stops and joins the thread.
    """

    def __init__(self, f, url, chunk=4 << 20, depth=2, under=None, done=0):
        super().__init__()
        self._f = f
        self._under = under  # the compressed stream, closed too (a GzipFile leaves its file open)
        self._url = url
        self._chunk = chunk
        self._done = done  # stream position of the next chunk
        self._lock = threading.Lock()
        self._ended = False  # the thread read the last chunk
        self._then = []  # callbacks waiting for the end (when_read)
        self._ahead = Ahead(self._read_chunk, depth, "ingest-readahead")

    def _read_chunk(self, stop):
        try:
            data = self._f.read(self._chunk)
        except Exception as exc:  # noqa: BLE001 - any failure of the underlying stream
            end = self._done + self._chunk
            raise SourceError(
                f"{self._url}: cannot read bytes {self._done}-{end} of the stream: {exc}", source=self._url
            ) from exc
        self._done += len(data)
        if len(data) == 0:
            self._end()
            return None
        return data

    def _end(self):
        with self._lock:
            self._ended, callbacks, self._then = True, self._then, []
        for callback in callbacks:
            callback()

    def when_read(self, callback):
        """``callback()`` once the thread read the last chunk (at once if it did)."""
        with self._lock:
            if not self._ended:
                self._then.append(callback)
                return
        callback()

    def _next_chunk(self):
        return self._ahead.take()

    def close(self):
        if not self.closed:
            self._ahead.close()
            self._f.close()
            if self._under is not None:
                self._under.close()
        super().close()


class FileStream(UnitStream):
    """A file unit's stream: the opened file (fsspec's, ``RangeStream`` or ``ReadAhead``) behind the
    ``UnitStream`` interface.  Positions are byte offsets of the file, decompressed when it is compressed."""

    def __init__(self, f, url, decompressed=False):
        super().__init__(url)
        self._f = f
        self._decompressed = decompressed

    def readinto(self, b):
        return read_into(self._f, b)

    def read(self, size=-1):
        return self._f.read(size)

    def seekable(self):
        return self._f.seekable()

    def seek(self, offset, whence=io.SEEK_SET):
        return self._f.seek(offset, whence)

    def tell(self):
        return self._f.tell()

    def describe(self, pos):
        return f"{self.url} (decompressed)" if self._decompressed else self.url

    def when_read(self, callback):
        if isinstance(self._f, ReadAhead):
            self._f.when_read(callback)
        else:
            callback()

    def close(self):
        if not self.closed:
            self._f.close()
        super().close()
