"""Trace files as one Parquet table: a row per record, a column per key (``ingest trace to-parquet``)."""

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import ConfigError
from ..sources.filesystems import url_to_fs
from .files import read

__all__ = ["to_parquet"]

_CHUNK_BYTES = 64 << 20  # records per row group: about this many bytes of arrays, so that memory stays bounded
_CHUNK_RECORDS = 4096


def _nested(arrays):
    """One list column of ``arrays`` (one per row, all of the same number of dimensions): nested lists, a level per
    dimension, over their values in C order; 0-d arrays make a plain column."""
    ndim = arrays[0].ndim
    if ndim == 0:
        return pa.array(np.array(arrays))
    column = pa.array(np.concatenate([a.reshape(-1) for a in arrays]))
    for level in range(ndim - 1, -1, -1):  # innermost lists first
        lengths = np.concatenate([np.full(int(np.prod(a.shape[:level])), a.shape[level], np.int32) for a in arrays])
        offsets = np.zeros(len(lengths) + 1, np.int32)
        np.cumsum(lengths, out=offsets[1:])
        column = pa.ListArray.from_arrays(pa.array(offsets), column)
    return column


def _ids(chunks, offsets):
    """A list<binary> column: per row, the ids of a Byte array cut at its int64 offsets (``sample_ids``)."""
    data = np.concatenate(chunks) if chunks else np.empty(0, np.uint8)
    starts = np.cumsum([0] + [len(c) for c in chunks[:-1]], dtype=np.int64)
    value_offsets = np.concatenate([o[:-1] + s for o, s in zip(offsets, starts)] + [np.array([len(data)], np.int64)])
    binary = pa.LargeBinaryArray.from_buffers(
        pa.large_binary(), len(value_offsets) - 1, [None, pa.py_buffer(value_offsets), pa.py_buffer(data)]
    )
    row_offsets = np.zeros(len(offsets) + 1, np.int32)
    np.cumsum([len(o) - 1 for o in offsets], out=row_offsets[1:])
    return pa.ListArray.from_arrays(pa.array(row_offsets), binary)


def _table(keys, rows):
    """The Parquet table of ``rows`` (``(lstep, gstep, timestamp, values)``)."""
    columns = {
        "lstep": pa.array([r[0] for r in rows], pa.int64()),
        "gstep": pa.array([r[1] for r in rows], pa.int64()),
        "timestamp": pa.array([r[2] for r in rows], pa.timestamp("ms")),
    }
    for key in keys:
        arrays = [r[3][key] for r in rows]
        first = arrays[0]
        if any(a.dtype != first.dtype or a.ndim != first.ndim for a in arrays):
            raise ConfigError(f"trace key {key!r}: its dtype or number of dimensions changes between records")
        offsets = f"{key}.offsets"
        if first.dtype == np.uint8 and first.ndim == 1 and offsets in keys and _cut_by_offsets(rows, key, offsets):
            columns[key] = _ids(arrays, [r[3][offsets] for r in rows])
        else:
            columns[key] = _nested(arrays)
    return pa.table(columns)


def _cut_by_offsets(rows, key, offsets):
    """Whether every row's ``offsets`` cut its ``key`` bytes (int64, from 0 to their length)."""
    return all(
        (o := r[3][offsets]).dtype == np.int64 and o.ndim == 1 and len(o) and o[0] == 0 and o[-1] == len(r[3][key])
        for r in rows
    )


def to_parquet(paths, out) -> dict:
    """Write the records of the trace files ``paths`` names (``read``) to the Parquet file ``out`` (any fsspec URL):
    columns ``lstep``, ``gstep``, ``timestamp`` (ms) and one per key, each array as nested lists (a level per
    dimension, values in C order; a 0-d array as a value); a ``Byte`` key with int64 ``<key>.offsets`` beside it
    (``sample_ids``) becomes a list of binary ids.  Returns ``{"records": n, "keys": [...]}``."""
    fs, path = url_to_fs(str(out))
    writer = None
    keys = None
    rows = []
    size = count = 0
    try:
        with fs.open(path, "wb") as f:
            for header, lstep, gstep, timestamp, values in read(paths):
                if keys is None:
                    keys = list(header)
                elif list(header) != keys:
                    raise ConfigError(f"trace files of other keys in one table: {keys} and then {list(header)}")
                rows.append((lstep, gstep, timestamp, values))
                size += sum(a.nbytes for a in values.values())
                count += 1
                if size >= _CHUNK_BYTES or len(rows) >= _CHUNK_RECORDS:
                    writer = _write(writer, f, _table(keys, rows))
                    rows, size = [], 0
            if rows:
                writer = _write(writer, f, _table(keys, rows))
            if writer is None:  # no record: the three step columns, no row
                writer = _write(writer, f, _table([], [(0, 0, 0, {})])[:0])
            writer.close()
    except BaseException:
        if fs.exists(path):
            fs.rm(path)
        raise
    return {"records": count, "keys": keys or []}


def _write(writer, f, table):
    if writer is None:
        writer = pq.ParquetWriter(f, table.schema)
    writer.write_table(table.cast(writer.schema))
    return writer
