"""Compiling the numba kernels: telling the user, and doing part of it in a second process.

The kernels are compiled on first use and cached on disk (``cache=True``), once per install.  A cold
start compiles a few large kernels one after the other (the text or pb parser, then the batch builder or
the converter's writer), each a few seconds.  ``compile_ahead`` has another process compile the ones a
run needs later (numba's compiler holds one lock per process), so that on two cores they compile side
by side; the run waits for it (``CompileAhead.wait``) before it first calls them, and then loads them
from the cache.  ``notice`` prints what is about to be compiled, and about how long it takes, to stderr.

``python -m ingest.warmup module:function JSON`` is the helper process: it calls the function with the
decoded JSON, which exercises the kernels on a miniature input of the same types.
"""

import dataclasses
import importlib
import json
import logging
import subprocess
import sys
import threading
import time

__all__ = ["KERNELS", "SECONDS", "cold", "ahead", "notice", "compile_ahead", "CompileAhead", "for_reader"]

_log = logging.getLogger("ingest")

# kernel groups: (module of ingest._native, kernel names), and about how long they take to compile cold,
# measured on the 2-core machine of benchmarks/README.md (bench_startup.py)
KERNELS = {
    "text": (
        ("text", ("parse_text_chunk",)),
        ("columns", ("region_room", "region_decoded", "trim_rows")),
    ),
    "pb": (
        ("protobuf", ("decode_chunk",)),
        ("columns", ("region_room", "region_decoded", "trim_rows")),
    ),
    "scan-text": (("scan", ("scan_names",)),),
    "scan-pb": (("protobuf", ("scan_record_names",)),),
    "batch": (("batch", ("copy_pieces", "measure_piece", "batch_layout")),),
    "unique": (("unique", ("unique_ids_of_batch", "unique_rows_of_batch")),),
    "dsl": (("dsl", ("run_plans",)),),
    "write-pb": (("encode", ("encode_groups", "identical_features")),),
    "write-text": (("text_write", ("write_text_rows",)),),
}
SECONDS = {
    "text": 10,
    "pb": 16,
    "scan-text": 2,
    "scan-pb": 5,
    "batch": 4,
    "unique": 3,
    "dsl": 5,
    "write-pb": 8,
    "write-text": 6,
}


def _dispatchers(group):
    for module, names in KERNELS[group]:
        mod = importlib.import_module(f"ingest._native.{module}")
        for name in names:
            yield getattr(mod, name)


def cold(groups):
    """The groups of ``groups`` with a kernel that has nothing in the on-disk cache for its current source."""
    out = []
    for group in groups:
        try:
            if any(not d._cache._cache_file._load_index() for d in _dispatchers(group)):  # numba's own index
                out.append(group)
        except (AttributeError, OSError):  # another numba, or no cache: say nothing rather than guess
            continue
    return out


def ahead(groups):
    """The groups of ``groups`` (cold ones) worth compiling in a second process while a reader compiles its parse
    kernels in this one: the batch builder's."""
    return [g for g in groups if g in ("batch", "unique")] if {"text", "pb"} & set(groups) else []


_announced: set[str] = set()


def notice(groups, parallel=(), stream=None):
    """Say on ``stream`` (default stderr), once per process, that the kernels of the cold ones of ``groups`` are
    about to be compiled, and about how long it takes (``parallel``: those a second process compiles)."""
    groups = [g for g in cold(groups) if g not in _announced]
    if not groups:
        return
    _announced.update(groups)
    here = sum(SECONDS[g] for g in groups if g not in parallel)
    seconds = max(here, sum(SECONDS[g] for g in groups if g in parallel))
    print(
        f"ingest: compiling kernels ({', '.join(groups)}), once per install: ~{seconds} s",
        file=stream or sys.stderr,
        flush=True,
    )


class CompileAhead:
    """A helper process compiling kernels; ``wait()`` until it is done (at once when it was not needed)."""

    def __init__(self, process=None):
        self._process = process
        self._lock = threading.Lock()  # parse workers that build batches may all wait

    def wait(self, timeout=600):
        with self._lock:
            process, self._process = self._process, None
            if process is None:
                return
            try:
                _, err = process.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.communicate()
                return
        if process.returncode:  # the run compiles what is missing itself: slower, not wrong
            _log.warning("compiling kernels ahead failed (exit %s): %s", process.returncode, err[-2000:])

    def __del__(self):
        process = self._process
        if process is not None and process.poll() is None:
            process.kill()


def compile_ahead(function, payload):
    """Run ``function`` (``"module:name"``, a warmer that exercises kernels) with ``payload`` (JSON-able) in a
    new Python process; returns its ``CompileAhead``."""
    process = subprocess.Popen(
        [sys.executable, "-m", "ingest.warmup", function, json.dumps(payload)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    return CompileAhead(process)


def for_reader(schema, text, batch_size, pad, unique, with_dsl):
    """Say which kernels a reader's run compiles (only when the on-disk cache lacks them), and when the parse
    kernels are among them, have a second process compile the batch kernels meanwhile; returns what the batch
    builder calls before its first batch (None when there is nothing to wait for)."""
    groups = ["text" if text else "pb", "batch"] + (["unique"] if unique else []) + (["dsl"] if with_dsl else [])
    parallel = ahead(cold(groups))
    notice(groups, parallel)
    if not parallel:
        return None
    payload = {
        "specs": [dataclasses.asdict(s) for s in schema.specs],
        "label_count": schema.label_count,
        "batch_size": batch_size,
        "pad": pad,
        "unique": unique,
    }
    return compile_ahead("ingest.pipeline.batcher:warm", payload).wait


def _main(argv):
    module, name = argv[0].split(":")
    t0 = time.perf_counter()
    getattr(importlib.import_module(module), name)(json.loads(argv[1]))
    _log.debug("%s compiled in %.1f s", argv[0], time.perf_counter() - t0)


if __name__ == "__main__":
    _main(sys.argv[1:])
