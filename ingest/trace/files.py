"""Trace files read back: records as arrays, in file and index order, with located errors (docs/trace.md)."""

import re
from typing import Iterator

import fsspec.core
from google.protobuf.message import DecodeError

from .. import trace_pb2
from ..errors import DataError, SourceError
from ..sources.filesystems import protocol_of, url_to_fs
from .columns import column_array

__all__ = ["TraceFileError", "read", "meta", "trace_files"]

_INDEX = re.compile(r"^(.*)\.(\d+)$")


class TraceFileError(DataError):
    """A trace file or ``.meta`` that is cut short or does not decode; ``record`` counts the file's
    length-prefixed messages from 0, the Header's."""


def _display(fs, path, protocol):
    return path if protocol == "file" else fs.unstrip_protocol(path)


def _order(path):
    """Sort key: the files of one trace (``<mode>.<name>.<rank>``) together, by index."""
    m = _INDEX.match(path)
    return (m.group(1), int(m.group(2))) if m else (path, -1)


def trace_files(paths) -> list:
    """``[(filesystem, path, url)]`` of the data files ``paths`` names: files as given, globs and folders
    expanded to their data files (``.meta`` files left out) in file and index order."""
    found = []
    for p in [paths] if isinstance(paths, str) or not hasattr(paths, "__iter__") else paths:
        p = str(p)
        fs, path = url_to_fs(p)
        protocol = protocol_of(p)
        if fsspec.core.has_magic(path):
            names = [n for n in fs.glob(path) if not n.endswith(".meta") and not fs.isdir(n)]
        elif fs.isdir(path):
            names = [n for n in fs.find(path) if _INDEX.match(n)]
        elif fs.exists(path):
            found.append((fs, path, p))
            continue
        else:
            raise SourceError(f"{p}: no such trace file or folder", source=p)
        if not names:
            raise SourceError(f"{p}: no trace files there", source=p)
        found += [(fs, n, _display(fs, n, protocol)) for n in sorted(names, key=_order)]
    return found


def _exactly(f, n):
    """``n`` bytes of ``f``, fewer only at its end."""
    parts = []
    while n > 0:
        part = f.read(n)
        if not part:
            break
        parts.append(part)
        n -= len(part)
    return b"".join(parts)


def _messages(f, url, size):
    """``(index, offset, bytes)`` of each length-prefixed message of the open file ``f`` of ``size`` bytes."""
    offset = index = 0
    while True:
        prefix = _exactly(f, 4)
        if not prefix:
            return
        if len(prefix) < 4:
            raise TraceFileError(
                "file ends inside a length prefix:",
                source=url,
                offset=offset,
                record=index,
                text=prefix.hex(),
                expected="a 4-byte little-endian length (the file is cut short)",
            )
        n = int.from_bytes(prefix, "little")
        if n > size - offset - 4:
            raise TraceFileError(
                f"length prefix {n} runs past the end of the file ({size - offset - 4} bytes left):",
                source=url,
                offset=offset,
                record=index,
                text=prefix.hex(),
                expected=f"at most {size - offset - 4} bytes of message (the file is cut short or corrupt)",
            )
        yield index, offset, _exactly(f, n)
        offset += 4 + n
        index += 1


def _parse(cls, data, url, offset, index):
    try:
        return cls.FromString(data)
    except DecodeError as exc:
        raise TraceFileError(
            f"message does not decode ({exc}):",
            source=url,
            offset=offset,
            record=index,
            text=data[:16].hex(),
            expected=f"a serialized xdl.proto.{cls.__name__}",
        ) from None


def _records(fs, path, url):
    size = fs.size(path)
    with fs.open(path, "rb") as f:
        keys = None
        for index, offset, data in _messages(f, url, size):
            if keys is None:
                keys = tuple(_parse(trace_pb2.Header, data, url, offset, index).key)
                continue
            record = _parse(trace_pb2.Record, data, url, offset, index)
            if len(record.column) != len(keys):
                raise TraceFileError(
                    "columns in the record:",
                    source=url,
                    text=str(len(record.column)),
                    offset=offset,
                    record=index,
                    expected=f"{len(keys)}, one per key of the Header {list(keys)}",
                )
            values = {}
            for key, column in zip(keys, record.column):
                try:
                    values[key] = column_array(column)
                except ValueError as exc:
                    raise TraceFileError(
                        f"column {key!r}:",
                        source=url,
                        text=str(exc),
                        offset=offset,
                        record=index,
                        expected="a Type of trace.proto and data of its shape's size",
                    ) from None
            yield keys, record.lstep, record.gstep, record.timestamp, values
        if keys is None:
            raise TraceFileError(
                "empty file:", source=url, offset=0, record=0, text="", expected="a length-prefixed Header first"
            )


def read(paths) -> Iterator[tuple]:
    """Yield ``(header_keys, lstep, gstep, timestamp_ms, {key: numpy array})`` of every record of the trace files
    ``paths`` names (a file, a glob, a folder, any fsspec URL, or a list of them), in file and index order.

    Arrays are read-only views of the record's bytes (``Byte`` columns as uint8).  A file cut short or
    corrupt raises ``TraceFileError`` naming the file, the record and its byte offset."""
    for fs, path, url in trace_files(paths):
        yield from _records(fs, path, url)


def meta(path):
    """The ``Meta`` of a data file (``path`` names the data file or its ``.meta``): ranges of its records'
    ``lstep``, ``gstep`` and ``timestamp``, ends included."""
    url = str(path) if str(path).endswith(".meta") else f"{path}.meta"
    fs, p = url_to_fs(url)
    try:
        with fs.open(p, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise SourceError(
            f"{url}: no such .meta file (it is written when its data file is closed or flushed)"
        ) from None
    return _parse(trace_pb2.Meta, data, url, 0, 0)
