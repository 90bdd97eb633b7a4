"""The reader state of ``enable_state=True``: its byte format, its checks, saving it atomically.

``reader.state()`` is UTF-8 JSON (docs/state.md documents every field)::

    {"format": "ingest-state", "version": 1, "reader": "train",
     "options": {...what fixes the sample sequence...}, "units": "<sha256 of the unit plan>", "unit_count": 8,
     "epoch": 0, "done": {"0": [[0, 3]]}, "partial": [[0, 5, 1048576, 2]], "batches": 90, "samples": 92160}

``partial`` rows are ``[epoch, unit index, position, rows]``; a position is a byte offset of
the unit's (decompressed) stream, or a position in its source's own terms (docs/state.md).
"""

import contextlib
import hashlib
import json
import operator
import os

from .errors import ConfigError, StateError
from .features import is_int
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
    """The state as a dict, checked for format, version and the type of every field."""
    if isinstance(data, str):
        data = data.encode()
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise StateError(f"a reader state is bytes (what reader.state() returns), not {type(data).__name__}")
    try:
        obj = json.loads(bytes(data).decode())
        ok = isinstance(obj, dict) and obj.get("format") == FORMAT
    except (ValueError, TypeError, RecursionError):
        ok = False
    if not ok:
        raise StateError("not an ingest reader state (expected the bytes of reader.state())")
    if obj.get("version") != VERSION:
        raise StateError(f"reader state of version {obj.get('version')!r}; this ingest reads version {VERSION}")
    _check_fields(obj)
    return obj


def _count(value):
    return is_int(value) and value >= 0


def _position(value):
    """A unit's position: a byte offset, or a source's own ``[offset, byte in message]``."""
    return _count(value) or (isinstance(value, list) and len(value) == 2 and all(map(_count, value)))


def _field_error(field, value, expected):
    text = json.dumps(value)
    text = text if len(text) <= 80 else text[:77] + "..."
    return StateError(f"reader state: {field} is {text}; expected {expected} (was the state edited?)")


def _check_fields(obj):
    """Every field a state resumes from has the type and range that ``state()`` writes: an edited or damaged
    state is refused here, before a reader seeks to or drops anything by it."""
    expected = {
        "options": (lambda v: isinstance(v, dict), "an object"),
        "units": (lambda v: isinstance(v, str), "a string"),
        "unit_count": (_count, "an int >= 0"),
        "epoch": (_count, "an int >= 0"),
        "done": (lambda v: isinstance(v, dict), "an object"),
        "partial": (lambda v: isinstance(v, list), "a list"),
        "batches": (_count, "an int >= 0"),
        "samples": (_count, "an int >= 0"),
    }
    for key, (ok, what) in expected.items():
        if key not in obj:
            raise StateError(f"reader state: no field {key!r} (was the state edited?)")
        if not ok(obj[key]):
            raise _field_error(key, obj[key], what)
    units = obj["unit_count"]
    # with a shuffle buffer, done runs and partial entries of an epoch before `epoch` say where a window starts
    for e, runs in obj["done"].items():
        if not (e.isdigit() and isinstance(runs, list)):
            raise _field_error(f"done[{e!r}]", runs, "runs of unit indices under an epoch")
        for run in runs:
            if not (isinstance(run, list) and len(run) == 2 and all(map(_count, run)) and run[0] < run[1] <= units):
                raise _field_error(f"a run of done[{e!r}]", run, f"[first, end) with 0 <= first < end <= {units}")
    for entry in obj["partial"]:
        if not (isinstance(entry, list) and len(entry) == 4):
            raise _field_error("a partial entry", entry, "[epoch, unit index, position, rows]")
        e, u, position, rows = entry
        if not (_count(e) and _count(u) and u < units and _position(position) and _count(rows)):
            raise _field_error("a partial entry", entry, f"an epoch, a unit index < {units}, a position and rows >= 0")
    window = obj.get("window")
    if window is not None and not (isinstance(window, list) and len(window) == 3 and all(map(_count, window))):
        raise _field_error("window", window, "[epoch, window, rows delivered], ints >= 0")


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
    epochs = options.get("epochs")  # 0: epochs without end
    if epochs and obj["epoch"] > epochs:
        raise _field_error("epoch", obj["epoch"], f"at most epochs={epochs}")
    later = [e for e in [*map(int, obj["done"]), *(entry[0] for entry in obj["partial"])] if epochs and e >= epochs]
    if later:
        raise _field_error("an epoch of done or partial", later[0], f"below epochs={epochs}")
    by_index = {u.index: u for u in units}
    for entry in obj["partial"]:
        unit = by_index.get(entry[1])
        if unit is None:
            raise _field_error("a partial entry", entry, "a unit of this reader's shard")
        refused = unit.resume_refused(entry[2])
        if refused is not None:
            raise _field_error("the position of a partial entry", entry, refused)
    return Progress.from_json([u.index for u in units], obj)


def write_atomic(url, data):
    """Write ``data`` to ``url`` (any fsspec URL) so that a reader of ``url`` sees the old or the new bytes; a
    ``ConfigError`` naming ``url`` when it cannot be written, and no temporary file left."""
    fs, path = url_to_fs(url)
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        _write_then_rename(fs, path, tmp, data)
    except OSError as exc:
        with contextlib.suppress(OSError):
            if fs.exists(tmp):
                fs.rm(tmp)
        raise ConfigError(f"{url}: cannot write the reader state there ({exc})") from exc


def _write_then_rename(fs, path, tmp, data):
    local = "file" in (fs.protocol if isinstance(fs.protocol, (tuple, list)) else (fs.protocol,))
    if local:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)  # as check_writable promises
    with fs.open(tmp, "wb") as f:
        f.write(data)
    if local:
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
