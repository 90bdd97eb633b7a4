"""The batch handed to the trainer (docs/formats.md, the batch)."""

import functools

import numpy as np

from ._native.batch import fixed_width_rows, row_lengths
from .errors import ConfigError, IngestError
from .optional import require

__all__ = ["Batch", "SparseFeature", "InvalidBatchError"]


class InvalidBatchError(IngestError):
    """``Batch.validate()`` found a broken invariant (a bug in ``ingest`` or in a user op)."""


def _filled_when_read(slot, doc):
    """A property of a SparseFeature: its array ``slot``, which the batch fills when first read
    (``LaidOut.fill_rows``)."""

    def get(feat):
        if feat.rows_filler is not None:
            feat.rows_filler.fill_rows()
        return getattr(feat, slot)

    def put(feat, value):
        setattr(feat, slot, value)

    return property(get, put, doc=doc)


class SparseFeature:
    """CSR rows of one sparse feature in a batch.

    Attributes
    ----------
    ids : int64 [N], or [N, 2] as (hkey, key) for features declared ``serialized=False``
    values : float32 [N]
    offsets : int64 [R + 1]
        Row pointers, ``offsets[0] == 0``; row ``r`` is ``ids[offsets[r]:offsets[r + 1]]``.
    unique_ids, inverse, unique_rows, unique_row_offsets
        Filled with ``reader.unique_ids(True)``, else None.  A reader computes ``unique_rows`` and
        ``unique_row_offsets`` when they are first read, for every feature of the batch at once.
    rows_filler
        The batch's layout that computes those two when first read (``LaidOut.fill_rows``, at once if done), or
        None.
    """

    __slots__ = (
        "name",
        "ids",
        "values",
        "offsets",
        "unique_ids",
        "inverse",
        "_unique_rows",
        "_unique_row_offsets",
        "rows_filler",
    )

    def __init__(self, name, ids, values, offsets):
        self.name = name
        self.ids = ids
        self.values = values
        self.offsets = offsets
        self.unique_ids = self.inverse = self._unique_rows = self._unique_row_offsets = self.rows_filler = None

    unique_rows = _filled_when_read("_unique_rows", "int32 ``[N]``: each unique id's rows, as its offsets say.")
    unique_row_offsets = _filled_when_read("_unique_row_offsets", "int64 ``[U + 1]``.")

    def __getstate__(self):  # filled first: the layout that fills them stays behind
        return {name: getattr(self, name) for name in _FEATURE_STATE}

    def __setstate__(self, state):
        self.rows_filler = None
        for name, value in state.items():
            setattr(self, name, value)

    @property
    def segments(self):
        """XDL's layout: ``offsets[1:]`` as int32 (end of each row)."""
        return self.offsets[1:].astype(np.int32)

    @property
    def rows(self):
        return len(self.offsets) - 1

    def set_unique(self, unique_ids, inverse, unique_rows, unique_row_offsets, rows_filler=None):
        """Set the unique-id arrays, in one call (a batch's consumer makes them for every feature)."""
        self.unique_ids, self.inverse = unique_ids, inverse
        self._unique_rows, self._unique_row_offsets, self.rows_filler = unique_rows, unique_row_offsets, rows_filler

    def arrays(self) -> dict:
        """The arrays of this feature by name (unique ones only when computed)."""
        return {key: arr for key, arr in zip(_ARRAY_KEYS, self._array_list()) if arr is not None}

    def _array_list(self):
        """The arrays in the order of ``_ARRAY_KEYS`` (None where not computed)."""
        if self.rows_filler is not None:  # as the properties do, without two property calls a feature a batch
            self.rows_filler.fill_rows()
        return (
            self.ids,
            self.values,
            self.offsets,
            self.unique_ids,
            self.inverse,
            self._unique_rows,
            self._unique_row_offsets,
        )

    def __repr__(self):
        return f"SparseFeature({self.name!r}, rows={self.rows}, ids={len(self.ids)})"


_ARRAY_KEYS = ("ids", "values", "offsets", "unique_ids", "inverse", "unique_rows", "unique_row_offsets")
_FEATURE_STATE = ("name", *_ARRAY_KEYS)


@functools.lru_cache(maxsize=None)
def _flat_names(feature):
    """The names ``Batch.arrays()`` gives a sparse feature's arrays, made once per feature name."""
    return tuple(f"{feature}.{key}" for key in _ARRAY_KEYS)


def _nothing():
    pass


def _sample_array(index, doc):
    """A property of a Batch: item ``index`` of its ``_sample_arrays()``."""
    return property(lambda batch: batch._sample_arrays()[index], doc=doc)


class Batch:
    """One batch: ``n`` samples (``len(batch)``), padded to ``batch_size`` rows when asked.

    ``batch[name]`` is a ``SparseFeature`` for sparse features and a float32
    ``[rows, width]`` array for dense ones, over the rows of the feature's table
    (``table_of(name)``).  With aux tables, ``table_rows[k]`` is the number of rows of
    table k (the aux lines packed in this batch, plus one empty padding row when padded)
    and ``indicators[k]`` (int32 ``[table_rows[k]]``) maps each row of table k to its row of
    table k + 1.  All arrays are C-contiguous numpy arrays owned by the batch.
    """

    def __init__(self, size, laid, tables, table_rows):
        self.size = size
        self._laid = laid  # the builder's LaidOut: the arrays, and the features, are made when first asked for
        self._made = None  # the features by name
        self._samples = None  # (labels, timestamps, sid_bytes, sid_offsets, indicators)
        self._tables = tables
        self.table_rows = table_rows
        self._sample_ids = None
        self.marks = None  # what the batch delivers, for the reader state (pipeline.progress.Marks)
        self.pieces = None  # with keep_sample or pause: the (block, first row, end row) it was cut from
        self.release_groups = _nothing  # with keep_sample / pause: hands its groups back, once
        self.unique_work = ()  # the builder's, from assemble() until add_unique() fills the unique ids

    def _sample_arrays(self):
        if self._samples is None:
            self._samples = self._laid.samples()
        return self._samples

    labels = _sample_array(0, "float32 ``[rows, label_count]``.")
    timestamps = _sample_array(1, "int64 ``[rows]``.")
    sid_bytes = _sample_array(2, "uint8: the sample ids one after the other.")
    sid_offsets = _sample_array(
        3, "int64 ``[size + 1]``: sample ``r``'s id is ``sid_bytes[sid_offsets[r]:sid_offsets[r + 1]]``."
    )
    indicators = _sample_array(
        4, "Per aux table k, int32 ``[table_rows[k]]``: the row of table k + 1 each row of table k reads."
    )

    def __len__(self):
        return self.size

    @property
    def _features(self):
        if self._made is None:
            self._made = self._laid.features()
        return self._made

    def __getstate__(self):  # the builder's layout stays behind (its pool and locks do not pickle): the arrays go
        state = dict(self.__dict__)
        state["_made"], state["_samples"], state["_laid"] = self._features, self._sample_arrays(), None
        return state

    def sparse_span(self, table):
        """The builder's layout of a table's sparse features: their ids (None unless all are int64 keys), values
        and offsets ``[F, R + 1]``, each one array, and their names; None for a table without sparse features
        or a batch not built by a reader."""
        return None if self._laid is None else self._laid.span(table)

    def __getitem__(self, name):
        try:
            return self._features[name]
        except KeyError:
            raise KeyError(f"no feature {name!r} in this batch; declared: {sorted(self._features)}") from None

    def __contains__(self, name):
        return name in self._features

    def __iter__(self):
        return iter(self._features)

    def keys(self):
        return self._features.keys()

    def table_of(self, name):
        """The table whose rows feature ``name`` is laid over (0: one row per sample)."""
        self[name]
        return self._tables.get(name, 0)

    @property
    def rows(self):
        """Rows of table 0 (``batch_size`` when padded, else ``size``)."""
        return self.table_rows[0]

    @property
    def sample_ids(self):
        """The ``size`` sample ids as a numpy bytes array (dtype ``S``).

        numpy's ``S`` dtype drops trailing NUL bytes; ``sample_id(r)`` gives the exact bytes.
        """
        if self._sample_ids is None:
            n = len(self.sid_offsets) - 1
            width = int(np.diff(self.sid_offsets).max()) if n else 0
            out = np.zeros((n, max(width, 1)), np.uint8)
            fixed_width_rows(self.sid_bytes, self.sid_offsets, out)
            self._sample_ids = out.view(f"S{max(width, 1)}").reshape(n)
        return self._sample_ids

    def sample_id(self, r: int) -> bytes:
        """The exact bytes of sample ``r``'s id."""
        return self.sid_bytes[self.sid_offsets[r] : self.sid_offsets[r + 1]].tobytes()

    def arrays(self) -> dict:
        """Every array of the batch by a flat name (``labels``, ``f.ids``, ``indicators.0``...)."""
        out = {"labels": self.labels, "timestamps": self.timestamps}
        for name, feat in self._features.items():
            if isinstance(feat, SparseFeature):
                for flat, arr in zip(_flat_names(name), feat._array_list()):
                    if arr is not None:
                        out[flat] = arr
            else:
                out[name] = feat
        for k, ind in enumerate(self.indicators):
            out[f"indicators.{k}"] = ind
        return out

    @property
    def sparse_names(self):
        """The names of the sparse features, in declaration order."""
        return [name for name, feat in self._features.items() if isinstance(feat, SparseFeature)]

    def rows_of_samples(self) -> list:
        """Per table, int64 ``[rows]``: the row of that table each row of table 0 (each sample, padding included)
        reads, through the indicators."""
        rows = [np.arange(self.rows, dtype=np.int64)]
        for k, ind in enumerate(self.indicators):
            rows.append((ind if k == 0 else ind[rows[-1]]).astype(np.int64))  # table 0's rows are 0..rows-1
        return rows

    def to_dlpack(self) -> dict:
        """``arrays()``: numpy arrays, which implement the DLPack protocol (``__dlpack__``,
        ``__dlpack_device__``), so ``np.from_dlpack``, ``torch.from_dlpack`` and ``jax.dlpack.from_dlpack`` take
        them without a copy."""
        return self.arrays()

    def to_torch(self) -> dict:
        """torch tensors of ``arrays()`` by the same names, sharing memory with the batch."""
        torch = require("torch", "torch", "torch")
        return {name: torch.from_numpy(arr) for name, arr in self.arrays().items()}

    def to_arrow(self):
        """The ``size`` samples as a ``pyarrow.RecordBatch``, one row per sample (docs/formats.md, Arrow and
        Parquet): table 0's arrays without a copy, aux tables' rows gathered per sample."""
        from .arrow import batch_to_arrow

        return batch_to_arrow(self)

    def to_kjt(self, table: int = 0, expand: bool = False):
        """The sparse features of a table as a TorchRec ``KeyedJaggedTensor``: keys in declaration order, values
        the ids, lengths the rows' lengths, weights the values.

        ``table=0``: one row per sample (``rows``).  ``table=k >= 1`` (an aux table of structured compression):
        one row per aux line of the batch, with ``inverse_indices`` giving each sample its row, the variable-batch
        form TorchRec's pooled embeddings expand (``KeyedTensor``'s ``inverse_indices``), so that user features
        are looked up once per page view.  ``expand=True``: every sparse feature of every table over the samples'
        rows, aux rows repeated for their samples.  Needs ``pip install 'ingest[torchrec]'``."""
        return _kjt(self, table, expand)

    def release(self) -> None:
        """Drop the batch's arrays so that their buffers return to the reader's pool (arrays taken from
        the batch before stay valid: a buffer is reused only when nothing refers to it)."""
        self.release_groups()
        self._made, self._laid = {}, None
        self._samples = (None, None, None, None, [])
        self._sample_ids = None

    def validate(self) -> bool:
        """Check every invariant of docs/formats.md, the batch; raise ``InvalidBatchError`` on the first broken one."""

        def check(ok, what):
            if not ok:
                raise InvalidBatchError(f"batch invariant broken: {what}")

        rows = self.rows
        check(0 <= self.size <= rows, f"size {self.size} within rows {rows}")
        check(self.labels.dtype == np.float32 and self.labels.ndim == 2, "labels float32 [R, label_count]")
        check(self.timestamps.dtype == np.int64 and self.timestamps.shape == (rows,), "timestamps int64 [R]")
        so = self.sid_offsets
        check(
            len(so) == self.size + 1 and so[0] == 0 and so[-1] == len(self.sid_bytes) and np.all(np.diff(so) >= 0),
            "sample id offsets cover the id bytes",
        )
        tr = self.table_rows
        for name, feat in self._features.items():
            want = tr[self.table_of(name)]
            got = feat.rows if isinstance(feat, SparseFeature) else len(feat)
            check(got == want, f"{name}: {got} rows, table {self.table_of(name)} has {want}")
            if isinstance(feat, SparseFeature):
                o = feat.offsets
                check(o.dtype == np.int64 and o.ndim == 1 and o[0] == 0, f"{name}: offsets int64, start at 0")
                check(np.all(np.diff(o) >= 0), f"{name}: offsets non-decreasing")
                check(o[-1] == len(feat.ids) == len(feat.values), f"{name}: offsets end at len(ids)")
                check(
                    feat.ids.dtype == np.int64
                    and feat.ids.ndim in (1, 2)
                    and (feat.ids.ndim == 1 or feat.ids.shape[1] == 2),
                    f"{name}: ids int64 [N] or [N, 2]",
                )
                check(feat.values.dtype == np.float32, f"{name}: values float32")
                arrays = [o, feat.ids, feat.values]
                if feat.unique_ids is not None:
                    u, uo = len(feat.unique_ids), feat.unique_row_offsets
                    check(
                        feat.inverse.dtype == np.int32 and feat.unique_rows.dtype == np.int32 and uo.dtype == np.int64,
                        f"{name}: inverse, unique_rows int32, unique_row_offsets int64",
                    )
                    check(
                        np.array_equal(feat.unique_ids[feat.inverse], feat.ids), f"{name}: unique_ids[inverse] == ids"
                    )
                    check(
                        len(uo) == u + 1
                        and uo[0] == 0
                        and uo[-1] == len(feat.ids) == len(feat.unique_rows)
                        and np.all(np.diff(uo) > 0),
                        f"{name}: unique_row_offsets cover unique_rows",
                    )
                    arrays += [feat.unique_ids, feat.inverse, feat.unique_rows, uo]
            else:
                check(feat.dtype == np.float32 and feat.ndim == 2, f"{name}: dense float32 [R, width]")
                arrays = [feat]
            check(all(a.flags.c_contiguous for a in arrays), f"{name}: C-contiguous")
        tr = self.table_rows
        check(tr[0] == rows and len(self.indicators) == len(tr) - 1, "one indicator array per aux table")
        for k, ind in enumerate(self.indicators):
            check(ind.dtype == np.int32 and ind.shape == (tr[k],), f"indicators[{k}] int32 [R_{k}]")
            check(len(ind) == 0 or (ind.min() >= 0 and ind.max() < tr[k + 1]), f"indicators[{k}] within table {k + 1}")
        return True

    def __repr__(self):
        return f"Batch(size={self.size}, rows={self.rows}, features={list(self._features)})"


def ids_64(feat, holder="a KeyedJaggedTensor"):
    """int64 ``[N]`` ids of a sparse feature; ``(hkey, key)`` pairs give their key (a strided view) when every hkey
    is 0, and are a ``ConfigError`` naming ``holder``, which holds 64-bit ids only, otherwise."""
    ids = feat.ids
    if ids.ndim == 1:
        return ids
    if ids[:, 0].any():
        raise ConfigError(f"feature {feat.name!r} holds 128-bit ids (hkey != 0), which {holder} cannot hold")
    return ids[:, 1]


def _joined(arrays, dtype):
    return arrays[0] if len(arrays) == 1 else np.concatenate(arrays) if arrays else np.empty(0, dtype)


def _kjt(batch, table, expand):
    """``Batch.to_kjt``."""
    torch, make = _kjt_maker()
    spans = None if expand else batch.sparse_span(table)
    inverse = None
    if spans is not None and spans[0] is not None:  # laid out one after the other by the builder: no copy
        ids, weights, offsets, names = spans
        names = list(names)  # the builder's, shared by its batches: the KeyedJaggedTensor gets its own
        lengths = np.empty(offsets.shape[0] * (offsets.shape[1] - 1), np.int64)
        row_lengths(offsets, lengths)
        values, weights, lengths = torch.from_numpy(ids), torch.from_numpy(weights), torch.from_numpy(lengths)
    else:
        names = [n for n in batch.sparse_names if expand or batch.table_of(n) == table]
        if expand:
            rows = batch.rows_of_samples()
            parts = [_expanded(batch[name], rows[batch.table_of(name)]) for name in names]
        else:
            parts = [(ids_64(f), f.values, np.diff(f.offsets)) for f in (batch[n] for n in names)]
        values = torch.from_numpy(_joined([p[0] for p in parts], np.int64))
        weights = torch.from_numpy(_joined([p[1] for p in parts], np.float32))
        lengths = torch.from_numpy(_joined([p[2] for p in parts], np.int64))
    if table and not expand:
        inverse = (names, torch.from_numpy(_rows_of_table(batch, table, len(names))))
    stride = batch.rows if expand else batch.table_rows[table]
    return make(names, values, lengths, weights, stride, inverse)


_KJT_MAKER = None  # (torch, make) once torchrec is imported


def _kjt_maker():
    """``(torch, make)``: ``make(keys, values, lengths, weights, stride, inverse_indices)`` returns a
    ``KeyedJaggedTensor``.  torchrec's constructor only stores its arguments, after checks for TorchScript, FX
    and dynamo tracing that cost 3.5 us a call, more than the rest of ``to_kjt``, and cannot apply to the eager
    tensors made here: ``make`` stores them as the constructor does, in a copy of the attributes it gives a probe
    (the constructor itself when the probe shows attributes other than the arguments and their defaults)."""
    global _KJT_MAKER
    if _KJT_MAKER is None:
        torch = require("torch", "torch", "torch")
        kjt_class = require("torchrec.sparse.jagged_tensor", "torchrec", "torchrec").KeyedJaggedTensor
        _KJT_MAKER = torch, _stored_kjt(torch, kjt_class) or _constructed_kjt(kjt_class)
    return _KJT_MAKER


def _constructed_kjt(kjt_class):
    def make(keys, values, lengths, weights, stride, inverse):
        return kjt_class(
            keys=keys, values=values, lengths=lengths, weights=weights, stride=stride, inverse_indices=inverse
        )

    return make


def _stored_kjt(torch, kjt_class):
    """``make`` for ``_kjt_maker`` storing its arguments as torchrec's constructor does, or None when a probe
    shows that the class does more than store them under their names with a ``_`` and set the rest to None."""
    args = {
        "keys": ["k"],
        "values": torch.zeros(1, dtype=torch.int64),
        "lengths": torch.ones(1, dtype=torch.int64),
        "weights": torch.zeros(1),
        "stride": 1,
        "inverse_indices": (["k"], torch.zeros((1, 1), dtype=torch.int64)),
    }
    if kjt_class.__new__ is not object.__new__:
        return None
    attrs = getattr(kjt_class(**args), "__dict__", {})
    if any(attrs.get("_" + name, attrs) is not value for name, value in args.items()):
        return None
    rest = {name: value for name, value in attrs.items() if name[1:] not in args}
    if any(value is not None for value in rest.values()):
        return None
    new = object.__new__

    def make(keys, values, lengths, weights, stride, inverse):
        kjt = new(kjt_class)
        kjt.__dict__.update(rest)
        kjt._keys, kjt._values, kjt._lengths, kjt._weights = keys, values, lengths, weights
        kjt._stride, kjt._inverse_indices = stride, inverse
        return kjt

    return make


def _expanded(feat, picked):
    """``(ids, values, lengths)`` of the rows ``picked`` of a sparse feature, one after the other."""
    starts = feat.offsets[picked]
    lengths = feat.offsets[picked + 1] - starts
    # the positions of the picked rows' ids, row after row: arange(total) shifted per row
    take = np.arange(lengths.sum()) - np.repeat(np.cumsum(lengths) - lengths - starts, lengths)
    return ids_64(feat)[take], feat.values[take], lengths


def _rows_of_table(batch, table, copies):
    """int64 ``[copies, rows]``: in each row, the row of aux table ``table`` each sample reads (as
    ``rows_of_samples()[table]``)."""
    rows = batch.indicators[0]
    for ind in batch.indicators[1:table]:
        rows = ind[rows]
    out = np.empty((copies, len(rows)), np.int64)
    out[:] = rows  # one pass: the int32 indicators widened and repeated
    return out
