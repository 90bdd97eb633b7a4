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

import pyarrow as pa
import zstandard

from ..errors import ConfigError

__all__ = ["CODECS", "infer_compression", "check_codec", "strip_suffix", "compressed_writer", "decompressed"]

# codec name -> file-name suffixes
CODECS = {"gzip": (".gz", ".gzip"), "zstd": (".zst", ".zstd"), "zlib": (".zlib",), "lz4": (".lz4",)}

# The zstd level of the files ``ingest convert`` writes (decisions.md, "pb.zst is written at zstd level 2"): 6 %
# smaller than level 1 at the same read speed.  Levels 3-9 make pb files 9-21 % smaller, but level 3 already costs
# a pb.zst read 4-9 % (decompression time) and conversion 22 % more CPU.  Files of any level read alike.
ZSTD_LEVEL = 2


class _ZlibReader(io.RawIOBase):
    """Decompress a zlib stream (or several concatenated) read from ``fileobj``."""

    def __init__(self, fileobj):
        self._f = fileobj
        self._d = zlib.decompressobj()
        self._pending = b""
        self._eof = False

    def readable(self):
        return True

    def readinto(self, b):
        while not self._pending and not self._eof:
            raw = self._f.read(1 << 20)
            if not raw:
                self._pending = self._d.flush()
                if not self._d.eof and (self._pending or self._d.unconsumed_tail):
                    raise zlib.error("truncated zlib stream")
                self._eof = True
                break
            out = self._d.decompress(raw)
            while self._d.eof and self._d.unused_data:  # next concatenated stream
                rest = self._d.unused_data
                self._d = zlib.decompressobj()
                out += self._d.decompress(rest)
            self._pending = out
        n = min(len(b), len(self._pending))
        b[:n] = self._pending[:n]
        self._pending = self._pending[n:]
        return n

    def close(self):
        self._f.close()
        super().close()


def _lz4_reader(fileobj):
    """An LZ4-frame stream decompressed by pyarrow (``readinto`` included)."""
    return pa.CompressedInputStream(pa.PythonFile(fileobj, mode="r"), "lz4")


def _zstd_reader(fileobj):
    # read_across_frames: a file of several frames (pzstd, or files concatenated) is read whole, not cut
    # silently at the end of its first frame
    return zstandard.ZstdDecompressor().stream_reader(fileobj, read_across_frames=True)


_READERS = {
    "gzip": lambda f: gzip.GzipFile(fileobj=f, mode="rb"),
    "zstd": _zstd_reader,
    "zlib": _ZlibReader,
    "lz4": _lz4_reader,
}


def decompressed(fileobj, codec):
    """A binary stream of the bytes of ``fileobj`` decompressed with ``codec`` (a name of CODECS)."""
    return _READERS[codec](fileobj)


class _Lz4Writer:
    """LZ4 frames written by pyarrow to a Python file object (left open on ``close()``)."""

    def __init__(self, raw):
        self._stream = pa.CompressedOutputStream(pa.PythonFile(raw, mode="w"), "lz4")

    def write(self, data):
        self._stream.write(data)

    def close(self):
        self._stream.close()


def compressed_writer(raw, codec):
    """A writer compressing into the binary file ``raw`` with ``codec`` (None: ``raw`` itself).

    ``close()`` of the writer finishes the stream; ``raw`` stays open for the caller.
    zstd uses level 2 (``ZSTD_LEVEL``, a 1 MiB window) and gzip level 6: conversion should not be bound by
    compression, nor reading by decompression.
    """
    if codec is None:
        return raw
    if codec == "gzip":
        return gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=6)
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
