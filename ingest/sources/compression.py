"""Compression codecs of sample files, chosen by extension or forced by ``reader.z()``.

gzip and zstd come from fsspec's registry; ``zlib`` (XDL's zlib streams, RFC 1950, one
or several concatenated) is registered here because fsspec has no codec for it.
"""
import io
import zlib

import fsspec.compression

from ..errors import ConfigError

__all__ = ["CODECS", "infer_compression", "check_codec"]

# codec name -> file-name suffixes
CODECS = {"gzip": (".gz", ".gzip"), "zstd": (".zst", ".zstd"), "zlib": (".zlib",)}


class _ZlibReader(io.RawIOBase):
    """Decompress a zlib stream (or several concatenated) read from ``fileobj``."""

    def __init__(self, fileobj, mode="rb", **_):
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


if "zlib" not in fsspec.compression.compr:
    fsspec.compression.register_compression("zlib", _ZlibReader, "zlib", force=True)


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
