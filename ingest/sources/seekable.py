"""zstd files of independent frames that begin at sample groups, so that a reader can cut them into work units.

``ingest convert`` writes pb and spb outputs as zstd frames of about ``FRAME_BYTES`` of records each, every frame
beginning at a record (a group).  After the frames come two skippable frames, which zstd decoders skip:

- ingest's mark, ``MARK``: the frames before it begin at sample groups;
- a seek table in zstd's Seekable Format (``contrib/seekable_format`` of the zstd repository): per frame its
  compressed and decompressed sizes (the mark and the frames before it), then the frame count, a descriptor
  byte and the magic number ``0x8F92EAB1``.

The table alone does not say where groups begin (other tools cut frames anywhere), so only a file with the mark is
cut.  A file without both, or whose table does not add up to its size, is one work unit.  A file whose table adds
up, with or without the mark, is read by its frames (``compression.FrameReader``: one decompression call a
frame); any other is read frame after frame as zstd files are.
"""

import struct

import zstandard

__all__ = ["FRAME_BYTES", "FramedZstdWriter", "frame_table", "group_frames"]

# Decompressed bytes per frame.  Each frame starts zstd's 1 MiB window afresh: on the benchmarks' pb samples, 8 MiB
# frames make the file 0.17 % larger than one frame (4 MiB 0.36 %, 1 MiB 1.5 %), and a 1 GB pb.zst has ~1,000.
FRAME_BYTES = 8 << 20

_SKIPPABLE = 0x184D2A50  # | 0..15: zstd's skippable frames
_MARK_MAGIC = _SKIPPABLE | 0xB
_TABLE_MAGIC = _SKIPPABLE | 0xE
_SEEKABLE_MAGIC = 0x8F92EAB1
_FOOTER = struct.Struct("<IBI")  # frame count, descriptor, seekable magic
_HEADER = struct.Struct("<II")  # skippable magic, content size
MARK = b"ingest: the frames before this one begin at sample groups"
_MARK_FRAME = _HEADER.pack(_MARK_MAGIC, len(MARK)) + MARK
_CHECKSUMS = 0x80  # descriptor bit: each entry has a 4-byte checksum too
_TAIL_GUESS = 64 << 10  # bytes read from a file's end first: the table of up to ~8,000 frames


class FramedZstdWriter:
    """Compresses what is written to ``raw`` (left open on ``close()``) at ``level``, starting a new frame at the
    first ``write()`` after a frame reached ``frame_bytes``: the caller writes whole groups at a time.  ``close()``
    ends the last frame and writes the mark and the seek table."""

    def __init__(self, raw, level, frame_bytes=None):
        self._raw = raw
        self._compressor = zstandard.ZstdCompressor(level=level)
        self._frame_bytes = FRAME_BYTES if frame_bytes is None else frame_bytes
        self._frame = None  # the open frame's compressobj
        self._sizes = []  # (compressed, decompressed) of each frame ended
        self._c = self._d = 0  # sizes of the open frame so far

    def write(self, data):
        if self._frame is not None and self._d >= self._frame_bytes:
            self._end_frame()
        if self._frame is None:
            self._frame = self._compressor.compressobj()
        self._put(self._frame.compress(data))
        self._d += len(data)

    def _put(self, out):
        self._raw.write(out)
        self._c += len(out)

    def _end_frame(self):
        self._put(self._frame.flush(zstandard.COMPRESSOBJ_FLUSH_FINISH))
        self._sizes.append((self._c, self._d))
        self._frame, self._c, self._d = None, 0, 0

    def close(self):
        if self._frame is not None:
            self._end_frame()
        self._raw.write(_MARK_FRAME)
        entries = [*self._sizes, (len(_MARK_FRAME), 0)]
        body = b"".join(struct.pack("<II", c, d) for c, d in entries)
        body += _FOOTER.pack(len(entries), 0, _SEEKABLE_MAGIC)
        self._raw.write(_HEADER.pack(_TABLE_MAGIC, len(body)) + body)


def frame_table(f, size):
    """The seek table of the zstd file ``f`` (``size`` bytes, opened for binary reading and seekable): the
    ``(compressed, decompressed)`` sizes of each frame it lists, or None when the file ends in no seek table, or in
    one that does not add up to its size."""
    tail_size = min(size, _TAIL_GUESS)
    tail = _read_at(f, size - tail_size, tail_size)
    if len(tail) < _FOOTER.size:
        return None
    count, descriptor, magic = _FOOTER.unpack_from(tail, len(tail) - _FOOTER.size)
    entry = 12 if descriptor & _CHECKSUMS else 8
    table = _HEADER.size + count * entry + _FOOTER.size
    if magic != _SEEKABLE_MAGIC or count < 1 or table > size:
        return None
    if table > tail_size:
        tail = _read_at(f, size - table, table)
    at = len(tail) - table
    header_magic, content = _HEADER.unpack_from(tail, at)
    if header_magic != _TABLE_MAGIC or content != table - _HEADER.size:
        return None
    sizes = [struct.unpack_from("<II", tail, at + _HEADER.size + k * entry) for k in range(count)]
    if sum(c for c, _ in sizes) + table != size:
        return None
    return sizes


def group_frames(f, size):
    """The frames of the zstd file ``f`` (``size`` bytes, opened for binary reading) that begin at sample groups,
    as ``(compressed, decompressed)`` offsets of each frame's start, and then of the end of the last; None when
    the file has no mark of ingest or no seek table that adds up to its size."""
    sizes = frame_table(f, size)
    if sizes is None or sizes[-1] != (len(_MARK_FRAME), 0):
        return None
    starts, c_at, d_at = [], 0, 0
    for c, d in sizes[:-1]:
        starts.append((c_at, d_at))
        c_at, d_at = c_at + c, d_at + d
    starts.append((c_at, d_at))
    if _read_at(f, c_at, len(_MARK_FRAME)) != _MARK_FRAME:
        return None
    return starts


def _read_at(f, offset, n):
    f.seek(offset)
    return f.read(n)
