"""Batches as Arrow record batches, and Arrow record batches of samples as Blocks (docs/formats.md, Arrow and
Parquet).

One row per sample, columns named as ``Batch.arrays()`` names arrays: ``sample_id`` (large_string), ``labels``
(fixed_size_list<float32>[label_count]), ``timestamp`` (int64), per sparse feature ``<f>.ids``
(large_list<int64>) and ``<f>.values`` (large_list<float32>), per dense feature ``<f>``
(fixed_size_list<float32>[width]).  Table 0's arrays are wrapped without a copy; an aux table's rows are
gathered per sample by Arrow's ``take`` (a copy).
"""

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .batch import SparseFeature, ids_64
from .blocks import Block, Table
from .errors import ConfigError
from .features import FeatureType

__all__ = ["batch_to_arrow", "record_schema", "arrow_features", "list_widths", "sample_id_buffers", "block_from_arrow"]


# -- batch -> Arrow ---------------------------------------------------------------------------------
def _wrap(arr, dtype):
    """A primitive Arrow array over the memory of the C-contiguous numpy array ``arr`` (no copy)."""
    return pa.Array.from_buffers(dtype, len(arr), [None, pa.py_buffer(arr)])


def _fixed(matrix):
    """fixed_size_list<float32>[width] over the rows of a C-contiguous float32 ``[rows, width]`` matrix (no copy;
    a width of 0 too, which ``FixedSizeListArray.from_arrays`` does not take)."""
    rows, width = matrix.shape
    child = _wrap(matrix.reshape(-1), pa.float32())
    return pa.Array.from_buffers(pa.list_(pa.float32(), width), rows, [None], children=[child])


def _sample_ids(batch):
    """large_string over the batch's sample id bytes and offsets (no copy); ids that are not UTF-8 are refused."""
    n = batch.size
    ids = pa.Array.from_buffers(
        pa.large_string(), n, [None, pa.py_buffer(batch.sid_offsets[: n + 1]), pa.py_buffer(batch.sid_bytes)]
    )
    try:
        ids.validate(full=True)
    except pa.ArrowInvalid as exc:
        raise ConfigError(f"sample ids are not UTF-8 ({exc}); the Arrow column sample_id is a string") from None
    return ids


def batch_to_arrow(batch) -> pa.RecordBatch:
    """``Batch.to_arrow``: the ``batch.size`` samples of ``batch`` (padding rows left out) as one record batch."""
    n = batch.size
    names = ["sample_id", "labels"]
    columns = [_sample_ids(batch), _fixed(batch.labels[:n])]
    if batch.timestamps is not None:
        names.append("timestamp")
        columns.append(_wrap(batch.timestamps[:n], pa.int64()))
    per_sample: list = []
    for name in batch:
        feat, table = batch[name], batch.table_of(name)
        if table and not per_sample:
            per_sample = [pa.array(rows[:n]) for rows in batch.rows_of_samples()]
        if isinstance(feat, SparseFeature):
            offsets = _wrap(feat.offsets if table else feat.offsets[: n + 1], pa.int64())
            pair = [
                pa.LargeListArray.from_arrays(
                    offsets, _wrap(np.ascontiguousarray(ids_64(feat, "an Arrow large_list<int64> column")), pa.int64())
                ),
                pa.LargeListArray.from_arrays(offsets, _wrap(feat.values, pa.float32())),
            ]
            if table:
                pair = [col.take(per_sample[table]) for col in pair]
            names += [f"{name}.ids", f"{name}.values"]
            columns += pair
        else:
            if not table:
                column = _fixed(feat[:n])
            elif feat.shape[1]:
                column = _fixed(feat).take(per_sample[table])
            else:  # Arrow's take does not handle a list size of 0
                column = _fixed(np.zeros((n, 0), np.float32))
            names.append(name)
            columns.append(column)
    return pa.RecordBatch.from_arrays(columns, names=names)


def record_schema(schema) -> pa.Schema:
    """The Arrow schema of the record batches of a reader of ``schema`` (a ``features.Schema``)."""
    fields = [
        pa.field("sample_id", pa.large_string()),
        pa.field("labels", pa.list_(pa.float32(), schema.label_count)),
        pa.field("timestamp", pa.int64()),
    ]
    for spec in schema.specs:
        if spec.type is FeatureType.sparse:
            fields += [
                pa.field(f"{spec.name}.ids", pa.large_list(pa.int64())),
                pa.field(f"{spec.name}.values", pa.large_list(pa.float32())),
            ]
        else:
            fields.append(pa.field(spec.name, pa.list_(pa.float32(), spec.width)))
    return pa.schema(fields)


# -- Arrow -> Block ---------------------------------------------------------------------------------
_LISTS = (pa.types.is_list, pa.types.is_large_list, pa.types.is_fixed_size_list)


def _is_list_of(dtype, kinds):
    return any(is_list(dtype) for is_list in _LISTS) and any(kind(dtype.value_type) for kind in kinds)


_INTEGERS = (pa.types.is_integer,)
_NUMBERS = (pa.types.is_integer, pa.types.is_floating)


def arrow_features(schema: pa.Schema, source: str):
    """What the columns of ``schema`` hold, checked against the column conventions (the module's docstring,
    with ``list`` or ``large_list`` for ``large_list``, any integers for int64, any numbers for float32).

    Returns ``(sparse, dense, labels)``: the sparse feature names (from ``<f>.ids`` columns), a dict of dense
    feature names to their width (None where the column is a variable list, whose rows give it) and the label
    width (None likewise).  A column that does not fit is a ``ConfigError`` naming ``source`` and the column.
    """

    def refuse(name, expected):
        raise ConfigError(f"{source}: column {name!r} is {schema.field(name).type}; expected {expected}")

    names = set(schema.names)
    sparse, dense, labels = [], {}, None
    for field in schema:
        name, dtype = field.name, field.type
        if name == "sample_id":
            if not (pa.types.is_string(dtype) or pa.types.is_large_string(dtype) or pa.types.is_binary(dtype)):
                if not pa.types.is_large_binary(dtype):
                    refuse(name, "a string or binary sample id")
        elif name == "timestamp":
            if not pa.types.is_integer(dtype):
                refuse(name, "an integer timestamp")
        elif name.endswith(".ids"):
            if not _is_list_of(dtype, _INTEGERS):
                refuse(name, "a list of int64 ids (list or large_list)")
            sparse.append(name[: -len(".ids")])
        elif name.endswith(".values"):
            if name[: -len(".values")] + ".ids" not in names:
                raise ConfigError(f"{source}: column {name!r} has no {name[: -len('.values')] + '.ids'!r} beside it")
            if not _is_list_of(dtype, _NUMBERS):
                refuse(name, "a list of float32 values, one per id (list or large_list)")
        elif not _is_list_of(dtype, _NUMBERS):
            what = "the labels, a list of float32" if name == "labels" else "a dense feature, a list of float32"
            refuse(name, f"{what} (fixed_size_list, list or large_list)")
        else:
            width = dtype.list_size if pa.types.is_fixed_size_list(dtype) else None
            if name == "labels":
                labels = width
            else:
                dense[name] = width
    if "labels" not in names:
        raise ConfigError(f"{source}: no column 'labels'; expected a list of float32 labels per sample")
    return sparse, dense, labels


def list_widths(column) -> np.ndarray:
    """int64 ``[rows]``: the length of each list of a list column (0 for a null)."""
    return pc.list_value_length(column).fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)


class _Place:
    """Where the columns of a record batch come from, for the errors: the file, and the row its first row is."""

    def __init__(self, source, first_row, rows):
        self.source, self.first_row, self.rows = source, first_row, rows

    def __call__(self, name, row=None):
        if row is None:
            return f"{self.source}: column {name!r} (rows {self.first_row}..{self.first_row + self.rows - 1})"
        return f"{self.source}: column {name!r}, row {self.first_row + row}"


def _cast(array, dtype, where):
    """``array`` cast to ``dtype`` (integers only where they fit) as numpy."""
    try:
        return array.cast(dtype, safe=pa.types.is_integer(dtype)).to_numpy(zero_copy_only=False)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise ConfigError(f"{where}: {exc}; expected values that fit {dtype}") from None


def _flat(column, dtype, place, name):
    """``(offsets int64 [rows + 1], values)`` of a list column, values cast to ``dtype``; null lists are empty."""
    lengths = list_widths(column)
    offsets = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    flat = column.flatten()
    if flat.null_count:
        raise ConfigError(f"{place(name)}: a null inside a list; expected numbers only")
    return offsets, _cast(flat, dtype, place(name))


def _matrix(column, width, place, name):
    """float32 ``[rows, width]`` of a list column whose every row holds ``width`` numbers."""
    offsets, values = _flat(column, pa.float32(), place, name)
    bad = np.flatnonzero(np.diff(offsets) != width)
    if len(bad):
        got = offsets[bad[0] + 1] - offsets[bad[0]]
        raise ConfigError(f"{place(name, bad[0])}: {got} numbers; expected {width}, as in every row")
    return values.reshape(len(offsets) - 1, width)


def sample_id_buffers(column, n):
    """``(bytes uint8 [S], offsets int64 [n + 1])`` of the sample id column (nulls empty), or of n empty ids."""
    if column is None:
        return np.zeros(0, np.uint8), np.zeros(n + 1, np.int64)
    column = column.cast(pa.large_binary()).fill_null(b"")
    _, offsets, data = column.buffers()
    offsets = np.frombuffer(offsets, np.int64)[column.offset : column.offset + n + 1]
    first, last = int(offsets[0]), int(offsets[-1])
    data = np.frombuffer(data, np.uint8)[first:last] if data is not None else np.zeros(0, np.uint8)
    return data, offsets - first


def block_from_arrow(record_batch, schema, source, first_row=0) -> Block:
    """A Block of the samples of ``record_batch`` (a column layout ``arrow_features`` accepted), over the
    features of ``schema`` (one table, one sample per group), for the converter's writers.

    Columns the record batch lacks give empty sparse rows, zero dense rows, values of 1.0, timestamps of 0 and
    empty sample ids.  Rows are counted from ``first_row`` in the errors.
    """
    n = record_batch.num_rows
    cols = dict(zip(record_batch.schema.names, record_batch.columns))
    place = _Place(source, first_row, n)
    labels = _matrix(cols["labels"], schema.label_count, place, "labels")
    dense = tuple(
        _matrix(cols[s.name], s.width, place, s.name) if s.name in cols else np.zeros((n, s.width), np.float32)
        for s in schema.dense
    )
    keys, values, offsets = [], [], np.zeros((len(schema.sparse), n + 1), np.int64)
    base = 0
    for f, spec in enumerate(schema.sparse):
        if spec.name + ".ids" not in cols:
            offsets[f] = base
            continue
        off, ids = _flat(cols[spec.name + ".ids"], pa.int64(), place, spec.name + ".ids")
        vals = np.ones(len(ids), np.float32)
        if spec.name + ".values" in cols:
            name = spec.name + ".values"
            voff, vals = _flat(cols[name], pa.float32(), place, name)
            bad = np.flatnonzero(voff != off)
            if len(bad):
                r = bad[0] - 1
                raise ConfigError(
                    f"{place(name, r)}: {voff[r + 1] - voff[r]} values for {off[r + 1] - off[r]} ids; "
                    f"expected one value per id"
                )
        keys.append(ids)
        values.append(vals)
        offsets[f] = off + base
        base += len(ids)
    stamp = cols.get("timestamp")
    timestamps = np.zeros(n, np.int64) if stamp is None else _cast(stamp.fill_null(0), pa.int64(), place("timestamp"))
    sid_bytes, sid_offsets = sample_id_buffers(cols.get("sample_id"), n)
    return Block(
        tables=(Table(n, offsets, dense),),
        group_offsets=np.arange(n + 1, dtype=np.int64),
        sp_keys=np.concatenate(keys) if keys else np.zeros(0, np.int64),
        sp_hkeys=None,
        sp_values=np.concatenate(values) if values else np.zeros(0, np.float32),
        labels=labels,
        timestamps=timestamps,
        sid_bytes=np.ascontiguousarray(sid_bytes),
        sid_offsets=np.ascontiguousarray(sid_offsets),
        source=source,
        end=record_batch.nbytes,
    )
