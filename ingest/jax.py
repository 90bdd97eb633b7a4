"""JAX: a reader's batches with fixed shapes, so that ``jax.jit`` compiles a few times, not once per batch.

Importing ``ingest`` never imports this module; it needs ``pip install 'ingest[jax]'``::

    for batch in ingest.jax.batches(reader):       # reader: configured, not started
        loss = step(params, batch)                 # a jitted step: one compilation per bucket
"""

import numpy as np

from .errors import ConfigError
from .optional import require

jax = require("jax", "jax", "jax")

__all__ = ["batches", "bucket_of", "padded"]

FIRST_BUCKET = 1024


def bucket_of(n, buckets=None):
    """The padded length of ``n`` ids: the smallest of ``buckets`` (sorted) that holds them, else (or without
    ``buckets``) the smallest power of two that does, at least ``FIRST_BUCKET``."""
    for size in buckets or ():
        if size >= n:
            return int(size)
    return max(FIRST_BUCKET, 1 << max(0, int(n - 1).bit_length()))


def _pad(arr, length, fill=0):
    """``arr`` grown along its first axis to ``length`` rows of ``fill``."""
    if len(arr) == length:
        return arr
    out = np.full((length, *arr.shape[1:]), fill, arr.dtype)
    out[: len(arr)] = arr
    return out


def padded(batch, buckets=None):
    """The arrays of ``batch`` (``Batch.arrays()`` names) at fixed shapes, as numpy arrays.

    Every sparse feature's ids and values are padded with zeros to one length for the batch, ``bucket_of`` its
    longest; ``<f>.length`` holds each feature's real count.  Table 0 has ``batch_size`` rows (the reader's
    padding; padded rows are empty).  An aux table's rows (their count varies per batch) are padded to
    ``batch_size + 1``, or to a power of two when a batch holds more: empty sparse rows, zero dense rows;
    ``table_rows.<k>`` holds the real count.  ``size`` is the real samples.
    """
    arrays = batch.arrays()
    sparse = batch.sparse_names
    ids = bucket_of(max((len(batch[f].ids) for f in sparse), default=0), buckets)
    rows0 = max(batch.rows, 1)
    table_rows = []
    for k, real in enumerate(batch.table_rows):
        table_rows.append(rows0 if k == 0 else (rows0 + 1 if real <= rows0 + 1 else bucket_of(real)))
    out = {}
    for name, arr in arrays.items():
        feature, _, part = name.partition(".")
        if name.startswith("indicators."):
            out[name] = _pad(arr, table_rows[int(part)])
        elif feature in sparse and part in ("ids", "values"):
            out[name] = _pad(arr, ids)
        elif feature in sparse and part == "offsets":
            out[name] = _pad(arr, table_rows[batch.table_of(feature)] + 1, fill=arr[-1])
        elif feature in sparse:
            continue  # unique ids: lengths of their own, not padded here
        else:  # labels, timestamps (table 0) and dense features
            out[name] = _pad(arr, table_rows[batch.table_of(name)] if name in batch else rows0)
    for f in sparse:
        out[f"{f}.length"] = np.int32(len(batch[f].ids))
    for k, real in enumerate(batch.table_rows):
        out[f"table_rows.{k}"] = np.int32(real)
    out["size"] = np.int32(batch.size)
    return out


def batches(reader, buckets=None, device=None):
    """The batches of ``reader`` (configured, not started), each a dict of ``padded`` arrays put on ``device``
    (the default device when None), so that a jitted function compiles once per bucket of ids.  Asks the reader
    to pad table 0 (``pad(True)``).  Needs ``jax_enable_x64`` (the ids are int64)."""
    if not jax.config.jax_enable_x64:
        raise ConfigError(
            "ingest.jax.batches: ids are 64-bit, and JAX in its default 32-bit mode would cut them; "
            "enable it first with jax.config.update('jax_enable_x64', True)"
        )
    reader.pad(True)
    with reader:
        for batch in reader.startup():
            yield jax.device_put(padded(batch, buckets), device)
