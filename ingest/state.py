"""The reader state of ``enable_state=True``: its byte format, its checks, saving it atomically.

``reader.state()`` is UTF-8 JSON (docs/state.md documents every field)::

    {"format": "ingest-state", "version": 1, "reader": "train",
     "options": {...what fixes the sample sequence...}, "units": "<sha256 of the unit plan>", "unit_count": 8,
     "epoch": 0, "done": {"0": [[0, 3]]}, "partial": [[0, 5, 1048576, 2]], "batches": 90, "samples": 92160}

``partial`` rows are ``[epoch, unit index, position, rows]``; a position is a byte offset of
the unit's (decompressed) stream, or a position in its source's own terms (docs/state.md).
"""

import hashlib
import json
import operator
import os

from .errors import ConfigError, StateError
from .pipeline.progress import Progress
from .sources.filesystems import open_url, url_to_fs

__all__ = ["FORMAT", "VERSION", "header", "encode", "decode", "check", "unit_digest", "write_atomic", "read"]

FORMAT = "ingest-state"
VERSION = 1


def unit_digest(units):
    """What identifies the unit plan: each unit's ``ident()`` (files with their byte ranges and sizes; a
    partition by its URL, as its end offset moves between runs)."""
    h = hashlib.sha256()
    for u in units:
        h.update(json.dumps(u.ident()).encode())
    return h.hexdigest()


def header(name, options, units):
    """The part of a reader's state fixed at startup."""
    return {
        "format": FORMAT,
        "version": VERSION,
        "reader": name,
        "options": options,
        "units": unit_digest(units),
        "unit_count": len(units),
    }


def encode(head, progress):
    # a count or position a kernel returned may be a numpy integer (numba run as Python): JSON takes it as an int
    return json.dumps({**head, **progress.to_json()}, separators=(",", ":"), default=operator.index).encode()


def decode(data):
    """The state as a dict, checked for format and version."""
    try:
        obj = json.loads(bytes(data).decode())
        ok = isinstance(obj, dict) and obj.get("format") == FORMAT
    except (ValueError, TypeError):
        ok = False
    if not ok:
        raise StateError("not an ingest reader state (expected the bytes of reader.state())")
    if obj.get("version") != VERSION:
        raise StateError(f"reader state of version {obj.get('version')!r}; this ingest reads version {VERSION}")
    return obj


def check(obj, name, options, units):
    """Progress of a decoded state, after checking that it was saved by a reader reading the same."""
    for key in sorted(set(options) | set(obj["options"])):
        saved, now = obj["options"].get(key), options.get(key)
        if saved != now:
            raise StateError(
                f"reader {name!r}: the state was saved with {key}={saved!r}, this reader has "
                f"{key}={now!r}; a state resumes only the same input with the same options"
            )
    if obj["units"] != unit_digest(units):
        raise StateError(
            f"reader {name!r}: the state was saved over another input ({obj['unit_count']} work "
            f"units, now {len(units)}, or the same number of other files, ranges or sizes); "
            f"a state resumes only the same paths"
        )
    return Progress.from_json([u.index for u in units], obj)


def write_atomic(url, data):
    """Write ``data`` to ``url`` (any fsspec URL) so that a reader of ``url`` sees the old or the new bytes."""
    fs, path = url_to_fs(url)
    tmp = f"{path}.tmp-{os.getpid()}"
    with fs.open(tmp, "wb") as f:
        f.write(data)
    if "file" in (fs.protocol if isinstance(fs.protocol, (tuple, list)) else (fs.protocol,)):
        os.replace(tmp, path)
        return
    if type(fs).__module__.startswith("hdfs_native"):
        fs.mv(tmp, path, overwrite=True)  # one NameNode rename
        return
    if fs.exists(path):  # other stores: a rename does not replace everywhere
        fs.rm(path)
    fs.mv(tmp, path)


def read(url, missing_ok=False):
    """The bytes of a saved state; None when there is none and ``missing_ok``."""
    try:
        with open_url(url, "rb") as f:
            return f.read()
    except FileNotFoundError as exc:
        if missing_ok:
            return None
        raise StateError(f"{url}: no saved reader state there") from exc
    except OSError as exc:
        raise ConfigError(f"{url}: cannot read the reader state: {exc}") from exc
