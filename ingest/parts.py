"""Output files of ``ingest convert``: written whole or not at all, and, for a directory, listed in input order.

A directory output holds one part per input file, or, on a Dask cluster, one per byte range of a large
uncompressed text input (``range_bytes``), and a ``_manifest.json`` that lists the parts in input order with their
sample and group counts.  Reading the directory follows the manifest (``sources.files``), so it gives the input's
samples in the input's order.  Every part is written under a temporary name and renamed when complete, so a task
that Dask runs again after its worker died rewrites its part whole; the manifest is written last, so a directory
without one is not a finished conversion.
"""

import json
import os
import uuid
from dataclasses import dataclass

from .errors import ConfigError, SourceError
from .optional import require
from .sources import FileRange, plan_units
from .sources.compression import CODECS, compressed_writer, infer_compression, strip_suffix
from .sources.files import MANIFEST
from .sources.filesystems import url_to_fs

__all__ = ["AtomicWriter", "Part", "output_parts", "run_on_cluster", "write_manifest", "dask_client"]

SCHEDULER_TIMEOUT = 8  # seconds to wait for a Dask scheduler to answer


class AtomicWriter:
    """A file written under a temporary name in the same directory (``temporary_name``), renamed on
    ``commit()``.  ``groups``: every ``write()`` holds whole sample groups (``compressed_writer``)."""

    def __init__(self, url, groups=False):
        self.url = url
        self.fs, self.path = url_to_fs(url)
        parent, name = os.path.split(self.path)
        self.tmp = os.path.join(parent, temporary_name(name, uuid.uuid4().hex[:8]))
        if parent:
            self.fs.makedirs(parent, exist_ok=True)
        self.raw = self.fs.open(self.tmp, "wb")
        try:
            self.f = compressed_writer(self.raw, infer_compression(url), groups)
        except ConfigError as exc:
            self.abort()
            raise ConfigError(f"{url}: {exc}") from None
        self.bytes = 0

    def write(self, data):
        self.f.write(memoryview(data))
        self.bytes += len(data)

    def commit(self):
        if self.f is not self.raw:
            self.f.close()
        self.raw.close()
        self.fs.mv(self.tmp, self.path)

    def abort(self):
        try:
            self.raw.close()
            self.fs.rm(self.tmp)
        except OSError:
            pass


def temporary_name(name, tag):
    """The name a file ``name`` is written under until complete (hidden: readers of the directory skip it)."""
    return f".{name}.{tag}.tmp"


def _final_name(temporary):
    """The file name a ``temporary_name`` stands for."""
    return temporary[1:].rsplit(".", 2)[0]


@dataclass(frozen=True)
class Part:
    """One output file: the input ``files`` (``(url, size)``) it holds, or the one byte range ``unit`` of a file."""

    url: str
    files: tuple
    unit: FileRange | None = None


def output_parts(files, output, suffix, *, compression=None, range_bytes=None, splittable=False):
    """``(parts, directory)``: one part holding every input when ``output`` names a file (``directory`` None),
    else one per input file in the directory ``output``, named after it with ``suffix`` (``"pb"``...) and the
    ``compression`` codec's suffix.  With ``range_bytes`` (on a cluster) the output must be a directory, and when
    the input format is ``splittable`` its uncompressed inputs larger than that are cut into byte ranges of about
    that size, one part each (``<name>.00000.pb``...)."""
    fs, path = url_to_fs(output)
    is_dir = (
        output.endswith("/")
        or (fs.exists(path) and fs.isdir(path))
        or (len(files) > 1 and not os.path.splitext(path)[1])
    )
    if not is_dir and range_bytes is not None:
        raise ConfigError(f"{output}: on a Dask cluster the output is a directory of parts; end it with /")
    if not is_dir:
        if compression is not None:
            raise ConfigError(f"--compression {compression}: applies to a directory output; name the file instead")
        return [Part(output, tuple(files))], None
    if compression is not None and compression not in CODECS:
        raise ConfigError(f"--compression {compression}: expected one of {', '.join(sorted(CODECS))}")
    ext = suffix + (CODECS[compression][0] if compression else "")
    directory = output.rstrip("/")
    parts = []
    for url, size in files:
        name = strip_suffix(url.rstrip("/").rsplit("/", 1)[-1])
        stem = name.rsplit(".", 1)[0] if "." in name else name
        units = plan_units([(url, size)], unit_bytes=range_bytes) if range_bytes and splittable else []
        if len(units) > 1:
            parts += [Part(f"{directory}/{stem}.{k:05d}.{ext}", ((url, size),), u) for k, u in enumerate(units)]
        else:
            parts.append(Part(f"{directory}/{stem}.{ext}", ((url, size),)))
    names = [p.url for p in parts]
    if len(set(names)) < len(names):
        twice = next(n for n in names if names.count(n) > 1)
        raise ConfigError(f"{twice}: two inputs would write this part; convert them to separate directories")
    return parts, directory


def write_manifest(directory, parts, results, fmt):
    """Write ``directory/_manifest.json``: the parts in input order with their counts (``results``: one dict of
    ``samples``, ``groups`` and ``bytes`` per part), and the totals."""
    rows = []
    for part, result in zip(parts, results):
        unit = part.unit
        rows.append(
            {
                "path": part.url.rsplit("/", 1)[-1],
                "input": part.files[0][0],  # a directory's part holds one input, or a range of one
                "range": None if unit is None else [unit.start, unit.end if unit.end is not None else unit.size],
                "samples": result["samples"],
                "groups": result["groups"],
                "bytes": result["bytes"],
            }
        )
    manifest = {
        "format": fmt,
        "samples": sum(r["samples"] for r in rows),
        "groups": sum(r["groups"] for r in rows),
        "parts": rows,
    }
    writer = AtomicWriter(f"{directory}/{MANIFEST}")
    writer.write(json.dumps(manifest, indent=1).encode())
    writer.commit()


# -- on a Dask cluster ---------------------------------------------------------------------------------------------
def dask_client(address):
    """A Dask client of the scheduler at ``address``; a ``SourceError`` when none answers within
    ``SCHEDULER_TIMEOUT`` seconds."""
    client_class = require("dask.distributed", "distributed", "dask").Client
    try:
        return client_class(address, timeout=SCHEDULER_TIMEOUT)
    except (OSError, ValueError) as exc:
        raise SourceError(
            f"--scheduler {address}: no Dask scheduler answered within {SCHEDULER_TIMEOUT} s "
            f"({' '.join(str(exc).split())})",
            source=address,
        ) from exc


def run_on_cluster(client, parts, work, **job):
    """``[work(part, **job)]`` in the order of ``parts``, one Dask task each.  Temporaries left by attempts whose
    worker died are removed; when a task fails, the others are cancelled, the parts written are removed and its
    error is raised."""
    futures = client.map(work, parts, pure=False, **job)
    try:
        results = client.gather(futures)
    except BaseException:
        client.cancel(futures)
        for part in parts:
            _remove(part.url)
        _remove_temporaries(parts)
        raise
    _remove_temporaries(parts)
    return results


def _remove(url):
    fs, path = url_to_fs(url)
    try:
        if fs.exists(path):
            fs.rm(path)
    except OSError:
        pass


def _remove_temporaries(parts):
    """Remove what attempts of these parts left under their temporary names (one listing per directory)."""
    names = {}
    for part in parts:
        fs, path = url_to_fs(part.url)
        parent, name = os.path.split(path)
        names.setdefault(parent, (fs, set()))[1].add(name)
    for parent, (fs, mine) in names.items():
        for tmp in fs.glob(os.path.join(parent, temporary_name("*", "*"))):
            if _final_name(tmp.rsplit("/", 1)[-1]) in mine:
                try:
                    fs.rm(tmp)
                except OSError:
                    pass
