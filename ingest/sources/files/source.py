"""Files through fsspec: expansion of paths, planning them as whole files or byte ranges, opening them."""

import dataclasses
import json
import os
from dataclasses import dataclass

from ...errors import ConfigError, SourceError
from ..base import Source, Unit, read_into
from ..compression import FrameReader, decompressed, infer_compression
from ..filesystems import open_url, url_to_fs
from ..hdfs import check_reachable
from ..seekable import frame_table, group_frames
from .streams import FileStream, RangeStream, ReadAhead, Window, skip

__all__ = ["FileRange", "FileSource", "MANIFEST", "expand_paths", "plan_units", "open_file"]

_GLOB_CHARS = "*?["
MANIFEST = "_manifest.json"  # a directory's list of parts in order (ingest convert)
MIB = 1 << 20
# Compressed bytes of a run of zstd frames (a unit) of a shard's plan at least, unless unit_bytes says otherwise: a
# unit's fixed costs (a read-ahead thread, its first chunk, a decompressor) weigh on runs of a frame or two.
MIN_RUN = 8 * MIB


@dataclass(frozen=True)
class FileRange(Unit):
    """A file, or a byte range ``[start, end)`` of one (``end`` None: to the end of the file).  A range of an
    uncompressed file is nominal: the format aligns it to its records or groups.  A range of a compressed file is
    a run of zstd frames that begin at sample groups (``seekable.py``), whose decompressed bytes start at
    ``origin`` of the whole file's.  A resume position is a byte offset of the (decompressed) file."""

    index: int
    url: str
    start: int
    end: int | None
    size: int | None
    compression: str | None
    resume: object = None
    origin: int = 0

    @property
    def aligned(self):
        return (self.start == 0 and self.end is None) or self.compression is not None

    @property
    def opens_ahead(self):
        return self.compression is not None

    @property
    def stream_start(self):
        return self.origin if self.resume is None else self.resume[0]

    def rewound(self):
        """A run of frames rewinds to the whole file, from whose start its positions count."""
        if self.compression is None:
            return super().rewound()
        return dataclasses.replace(self, start=0, end=None, origin=0, resume=None)

    def ident(self):
        return [self.index, self.url, self.start, self.end, self.size, self.compression]

    def resume_refused(self, position):
        # a range's groups may start up to its aligned end, past its nominal end; a run of frames counts from origin
        low = self.start if self.compression is None else self.origin
        high = self.size if self.compression is None and self.size is not None else None
        if isinstance(position, int) and position >= low and (high is None or position <= high):
            return None
        return f"a byte offset of {self.url} in [{low}, {'its end' if high is None else high}]"

    def open(self):
        return open_file(self)


class FileSource(Source):
    """Local paths, ``file://``, ``hdfs://`` and every fsspec protocol: directories and globs expanded, large
    uncompressed files of a splittable format cut into byte ranges."""

    def plan(self, urls, *, splittable, compression, task_num, unit_bytes, options, first_index):
        planned = plan_units(
            expand_paths(urls), compression=compression, splittable=splittable, task_num=task_num, unit_bytes=unit_bytes
        )
        return [dataclasses.replace(u, index=first_index + u.index) for u in planned]


def _hidden(path):
    name = path.rstrip("/").rsplit("/", 1)[-1]
    return name.startswith(".") or name.startswith("_")


def _listed(fs, root, path):
    """The files a directory's ``_manifest.json`` lists (``ingest convert``'s parts, in input order), or None
    without one."""
    manifest = root.rstrip("/") + "/" + MANIFEST
    if not fs.exists(manifest):
        return None
    try:
        with fs.open(manifest, "rb") as f:
            names = [part["path"] for part in json.load(f)["parts"]]
    except (ValueError, KeyError, TypeError) as exc:
        raise SourceError(f"{path}: {MANIFEST} is not a manifest of parts ({exc})", source=path) from None
    found = [root.rstrip("/") + "/" + name for name in names]
    missing = [name for name, p in zip(names, found) if not fs.exists(p)]
    if missing:
        raise SourceError(f"{path}: {MANIFEST} lists {missing[0]}, which is not there", source=path)
    return found


def expand_paths(paths):
    """Expand files, directories (recursively, hidden and ``_`` files skipped; in the order of their
    ``_manifest.json`` when they have one) and globs.

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
                found = _listed(fs, root, path)
                if found is None:
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

    Uncompressed files of a splittable format are cut into byte ranges of about ``unit_bytes`` (default: total /
    (8 * task_num), within 1..64 MiB), so that every shard has several units.  zstd files whose frames begin at
    sample groups (``seekable.group_frames``) are cut into runs of frames of about that many compressed bytes when
    ``unit_bytes`` is given, or by default for several shards (``task_num`` > 1) in runs of ``MIN_RUN`` at least;
    a reader alone reads each as one unit.  The plan depends only on the files and ``task_num``, so every worker
    of a job computes the same one.
    """
    total = sum(size or 0 for _, size in files)
    run_bytes = unit_bytes
    if unit_bytes is None:
        unit_bytes = min(64 * MIB, max(MIB, total // (8 * max(task_num, 1)) + 1))
        run_bytes = max(unit_bytes, MIN_RUN) if task_num > 1 else None
    units = []
    for url, size in files:
        codec = compression if compression is not None else infer_compression(url)
        if codec is None and splittable and size and size > unit_bytes:
            n = -(-size // unit_bytes)
            step = -(-size // n)
            for k in range(n):
                end = None if k == n - 1 else (k + 1) * step
                units.append(FileRange(len(units), url, k * step, end, size, None))
            continue
        runs = codec == "zstd" and splittable and run_bytes is not None and size and size > run_bytes
        frames = _group_frames(url, size) if runs else None
        if frames is None or len(frames) <= 2:  # one frame (and its end): nothing to cut
            units.append(FileRange(len(units), url, 0, None, size, codec))
            continue
        first = 0
        for k in range(1, len(frames)):
            if frames[k][0] - frames[first][0] >= run_bytes or k == len(frames) - 1:
                (start, origin), (end, _) = frames[first], frames[k]
                units.append(FileRange(len(units), url, start, end, size, codec, origin=origin))
                first = k
    return units


def _group_frames(url, size):
    """``seekable.group_frames`` of a file, read from its end."""
    try:
        fs, path = url_to_fs(url)
        with fs.open(path, "rb") as f:
            return group_frames(f, size)
    except OSError as exc:
        raise SourceError(f"{url}: cannot read its seek table: {exc}", source=url) from exc


def _frames_of(raw, unit):
    """The ``(compressed, decompressed)`` sizes of the zstd frames of ``unit`` by its file's seek table, ``raw``
    left at the unit's start; None when the file has no table that adds up (its frames are then found by
    decompressing them)."""
    if not unit.size or not raw.seekable():
        return None
    sizes = frame_table(raw, unit.size)
    raw.seek(unit.start)
    if sizes is None:
        return None
    end = unit.size if unit.end is None else unit.end
    frames, at = [], 0
    for c, d in sizes:
        if unit.start <= at < end:
            frames.append((c, d))
        at += c
    return frames


def open_file(unit):
    """The unit's file opened for binary reading, decompressed, as a ``FileStream``.  Errors become
    ``SourceError``.

    A compressed unit is decompressed a few chunks ahead on a thread of its own (``ReadAhead``), so that
    decompression overlaps with parsing; a zstd file with a seek table that adds up is decompressed a frame a call
    (``compression.FrameReader``); a range of frames is read from its first frame to its end only.  An aligned unit
    that resumes is positioned at ``unit.stream_start``: a compressed one by decompressing up to there, the whole
    frames before it passed over undecompressed when its table gives them.  An hdfs-native file is read through
    ranged streams (``RangeStream``).  It gets no read-ahead thread when uncompressed: the stream already fetches
    ahead, and the extra thread halved the throughput of the parse workers.
    """
    at = unit.origin  # the position of the stream's first byte
    try:
        f = open_url(unit.url)
        if hasattr(f, "read_range_stream"):
            f = RangeStream(f, unit.url, unit.end)
        if unit.compression:
            raw = f
            frames = _frames_of(raw, unit) if unit.compression == "zstd" else None
            if frames is not None:
                f = FrameReader(raw, frames)
                at += f.pass_over(unit.stream_start - unit.origin)  # a resume's whole frames before it
            else:
                if unit.end is not None:
                    raw.seek(unit.start)
                    f = Window(raw, unit.end - unit.start)
                f = decompressed(f, unit.compression)
            f = ReadAhead(f, unit.url, under=raw, done=at)
    except (OSError, ValueError) as exc:
        raise SourceError(f"{unit.url}: cannot open: {exc}", source=unit.url) from exc
    before = None
    if unit.aligned and unit.stream_start > at:
        skip(f, unit.stream_start - at - 1, unit.url)
        before = bytearray(1)
        if read_into(f, memoryview(before)) != 1:
            raise SourceError(
                f"{unit.url}: ends before the position to resume at (was the file changed?)", source=unit.url
            )
    stream = FileStream(f, unit.url, decompressed=unit.compression is not None)
    stream.byte_before = None if before is None else bytes(before)
    return stream
