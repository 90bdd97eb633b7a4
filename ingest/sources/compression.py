"""Compression codecs of sample files, chosen by extension or forced by ``reader.z()``.

``decompressed(f, codec)`` wraps an open binary file: gzip (the standard library), zstd (zstandard,
every frame of a file of several), ``zlib`` (XDL's zlib streams, RFC 1950, one or several
concatenated) and ``lz4`` (LZ4 frames, through pyarrow: it decompresses about three times as fast
as zstd, for inputs read more often than stored).  They are ingest's own table: fsspec's global
compression registry is left alone.  ``compressed_writer`` wraps an output file for ``ingest convert``.
"""

import gzip
import io
import zlib

import numpy as np
import pyarrow as pa
import zstandard

from ..errors import ConfigError
from ..pool import BufferPool
from .seekable import FramedZstdWriter

__all__ = [
    "CODECS",
    "FrameReader",
    "infer_compression",
    "check_codec",
    "strip_suffix",
    "compressed_writer",
    "decompressed",
]

# codec name -> file-name suffixes
CODECS = {"gzip": (".gz", ".gzip"), "zstd": (".zst", ".zstd"), "zlib": (".zlib",), "lz4": (".lz4",)}

# The zstd level of the files ``ingest convert`` writes (decisions.md, "pb.zst is written at zstd level 2"): 6 %
# smaller than level 1 at the same read speed.  Levels 3-9 make pb files 9-21 % smaller, but level 3 already costs
# a pb.zst read 4-9 % (decompression time) and conversion 22 % more CPU.  Files of any level read alike.
ZSTD_LEVEL = 2


class _Streams(io.RawIOBase):
    """Decompress the streams read from ``fileobj`` one after the other (zstd frames: pzstd's files, files
    concatenated; XDL's concatenated zlib streams), each checked to end: zstandard's stream reader and zlib's
    ``decompressobj`` end a stream the file cuts short silently, as if the file ended there.  ``new_stream()``
    makes the decompressor of one stream (``eof`` once it ended, the bytes after it in ``unused_data``);
    ``error`` is the codec's exception, ``what`` names a stream in it."""

    _INPUT = 1 << 18  # compressed bytes decompressed at a time (bounds what one step makes)

    def __init__(self, fileobj, new_stream, error, what, on_close=None):
        self._f = fileobj
        self._new_stream, self._error, self._what = new_stream, error, what
        self._on_close = on_close
        self._stream = None  # the decompressor of a stream begun and not ended
        self._pending = b""
        self._at = 0  # where the unread part of _pending starts
        self._eof = False

    def readable(self):
        return True

    def read(self, n=-1):
        if n is None or n < 0:  # to the end
            return b"".join(iter(lambda: self.read(1 << 62), b""))
        while self._at == len(self._pending) and not self._eof:
            self._pending, self._at = self._decompress_more(), 0
        if n >= len(self._pending) - self._at:
            out = self._pending if self._at == 0 else self._pending[self._at :]
            self._pending, self._at = b"", 0
            return out
        self._at += n
        return self._pending[self._at - n : self._at]

    def readinto(self, b):
        data = self.read(len(b))
        b[: len(data)] = data
        return len(data)

    def _decompress_more(self):
        raw = self._f.read(self._INPUT)
        if not raw:
            self._eof = True
            if self._stream is not None:
                raise self._error(f"truncated {self._what}: the file ends inside it")
            return b""
        out = []
        while raw:
            if self._stream is None:
                self._stream = self._new_stream()
            out.append(self._stream.decompress(raw))
            raw = b""
            if self._stream.eof:
                raw, self._stream = self._stream.unused_data, None
        return b"".join(out)

    def close(self):
        if not self.closed and self._on_close is not None:
            self._on_close()
        self._f.close()
        super().close()


# zstd decompressors of closed files, for the next: a fresh one spends 1-2 ms on the first touch of its buffers,
# once per work unit of a file cut into frames (list.append and pop are atomic)
_IDLE_ZSTD: list[zstandard.ZstdDecompressor] = []


def _idle_zstd():
    try:
        return _IDLE_ZSTD.pop()
    except IndexError:
        return zstandard.ZstdDecompressor()


def _zstd_reader(fileobj):
    # a decompressor's context serves one frame at a time: one per open file
    context = _idle_zstd()
    return _Streams(
        fileobj, context.decompressobj, zstandard.ZstdError, "zstd frame", lambda: _IDLE_ZSTD.append(context)
    )


# The buffers FrameReader decompresses frames into, leased again once nothing refers to them: a buffer allocated
# for each frame costs the first touch of its pages (over 80 passes of the benchmarks' pb.zst on one thread, 0.76 s
# of system time against 0.44-0.64 pooled, and the parse thread waited for the read-ahead).
_FRAME_BUFFERS = BufferPool()


def trim_frame_buffers():
    """Let go of the frame buffers no read is using (a reader that ends calls this: the pool would otherwise keep
    what was in flight, ~9 MiB a frame, for reads the process may never make); returns the bytes let go."""
    return _FRAME_BUFFERS.trim()


_EMPTY = np.empty(0, np.uint8)


class FrameReader:
    """The bytes of zstd frames of known sizes (a seek table's ``(compressed, decompressed)`` entries), read from
    ``fileobj``'s position.  Each frame is decompressed in one call (the GIL released) into a pooled buffer of its
    size, and ``read(n)`` returns up to ``n`` of its bytes as a numpy view of that buffer: chunks as large as the
    read-ahead asks for, where ``decompressobj`` makes one a few hundred KB, each a hand-over to the parse thread.
    Not a memoryview: slices of one memoryview count their exports in it unguarded on free-threaded CPython 3.14,
    and sliced on the read-ahead thread while the parse thread let go of others, it was released under them.
    A frame that does not decompress to the size its table gives is an ``OSError`` (or ``zstandard.ZstdError``)."""

    def __init__(self, fileobj, sizes):
        self._f = fileobj
        self._sizes = sizes
        self._next = 0  # the next frame of _sizes
        self._frame = _EMPTY
        self._at = 0  # next byte of _frame
        self._context = _idle_zstd()

    def pass_over(self, n):
        """Before the first ``read``: pass over the whole frames within the first ``n`` bytes without decompressing
        them (a seek of ``fileobj`` past them; it must be seekable); returns their decompressed bytes.  A frame the
        table gives 0 bytes is decompressed, not passed over: were the table wrong, its bytes would be lost unseen,
        where a decompressed frame is checked against its size."""
        passed = compressed = 0
        while self._next < len(self._sizes) and 0 < self._sizes[self._next][1] <= n - passed:
            compressed += self._sizes[self._next][0]
            passed += self._sizes[self._next][1]
            self._next += 1
        self._f.seek(compressed, io.SEEK_CUR)
        return passed

    def read(self, n):
        """Up to ``n`` bytes as a numpy view, empty at the end (its truth is not its length: ask ``len``)."""
        while self._at == len(self._frame):
            if self._next == len(self._sizes):
                return _EMPTY
            self._frame, self._at = self._decompress(*self._sizes[self._next]), 0
            self._next += 1
        out = self._frame[self._at : self._at + n]
        self._at += len(out)
        return out

    def _decompress(self, compressed, decompressed):
        data = self._f.read(compressed)
        while len(data) < compressed:  # a stream may return less than asked
            more = self._f.read(compressed - len(data))
            if not more:
                raise OSError(f"the file ends {compressed - len(data)} bytes before the end of a zstd frame")
            data += more
        frame = _FRAME_BUFFERS.lease_bytes(decompressed)[:decompressed]
        reader = self._context.stream_reader(data)
        got = 0
        while got < decompressed:
            n = reader.readinto(frame[got:])
            if n == 0:
                raise OSError(f"a zstd frame ends {decompressed - got} bytes before the size its seek table gives")
            got += n
        if reader.read(1):
            raise OSError(f"a zstd frame holds more than the {decompressed} bytes its seek table gives")
        return frame

    def close(self):
        if self._context is not None:
            _IDLE_ZSTD.append(self._context)
            self._context = None
        self._f.close()


def _lz4_reader(fileobj):
    """An LZ4-frame stream decompressed by pyarrow (``readinto`` included)."""
    return pa.CompressedInputStream(pa.PythonFile(fileobj, mode="r"), "lz4")


_READERS = {
    "gzip": lambda f: gzip.GzipFile(fileobj=f, mode="rb"),
    "zstd": _zstd_reader,
    "zlib": lambda f: _Streams(f, zlib.decompressobj, zlib.error, "zlib stream"),
    "lz4": _lz4_reader,
}


def decompressed(fileobj, codec):
    """A binary stream of the bytes of ``fileobj`` decompressed with ``codec`` (a name of CODECS)."""
    return _READERS[codec](fileobj)


class _Lz4Writer:
    """LZ4 frames written by pyarrow to a Python file object (left open on ``close()``)."""

    def __init__(self, raw):
        self._stream = pa.CompressedOutputStream(pa.PythonFile(_LeftOpen(raw), mode="w"), "lz4")

    def write(self, data):
        self._stream.write(data)

    def close(self):
        self._stream.close()


class _LeftOpen:
    """``raw`` as pyarrow's ``PythonFile`` writes to it, without its ``close()``, which would close ``raw``."""

    def __init__(self, raw):
        self._raw = raw
        self.closed = False

    def write(self, data):
        return self._raw.write(data)

    def flush(self):
        self._raw.flush()

    def close(self):
        self.closed = True


def compressed_writer(raw, codec, groups=False):
    """A writer compressing into the binary file ``raw`` with ``codec`` (None: ``raw`` itself).

    ``close()`` of the writer finishes the stream; ``raw`` stays open for the caller.
    zstd uses level 2 (``ZSTD_LEVEL``, a 1 MiB window) and gzip level 6: conversion should not be bound by
    compression, nor reading by decompression.  With ``groups`` (every ``write()`` holds whole sample groups),
    zstd is written as frames that begin at groups, with a seek table (``seekable.py``): readers cut such a file
    into work units.
    """
    if codec is None:
        return raw
    if codec == "gzip":
        return gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=6)
    if codec == "zstd" and groups:
        return FramedZstdWriter(raw, ZSTD_LEVEL)
    if codec == "zstd":
        return zstandard.ZstdCompressor(level=ZSTD_LEVEL).stream_writer(raw, closefd=False)
    if codec == "lz4":
        return _Lz4Writer(raw)
    raise ConfigError(f"writing {codec} is not supported; use .zst, .lz4 or .gz")


def check_codec(name):
    if name is not None and name not in CODECS:
        raise ConfigError(f"compression={name!r}: expected one of {sorted(CODECS)} or None")
    return name


def infer_compression(url):
    """Codec name for a file name by its suffix, or None."""
    lower = url.lower()
    for codec, suffixes in CODECS.items():
        if lower.endswith(suffixes):
            return codec
    return None


def strip_suffix(name):
    """``name`` without its compression suffix (``a.pb.zst`` -> ``a.pb``)."""
    codec = infer_compression(name)
    if codec is None:
        return name
    return next(name[: -len(s)] for s in CODECS[codec] if name.lower().endswith(s))
