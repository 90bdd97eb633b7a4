"""PyTorch and TorchRec: batches as dicts of tensors through a ``DataLoader``, resumable with torchdata's
``StatefulDataLoader``, and as TorchRec ``KeyedJaggedTensor``s.

Importing ``ingest`` never imports this module; it needs ``pip install 'ingest[torch]'`` (and ``[torchrec]`` for
``to_kjt``)::

    dataset = ingest.torch.ReaderDataset(reader)          # reader: configured, not started
    loader = StatefulDataLoader(dataset, batch_size=None, num_workers=2, pin_memory=True)
    for step, batch in enumerate(ingest.torch.even_batches(loader)):
        ids, offsets = batch["item.ids"], batch["item.offsets"]
"""
import pickle

import numpy as np

from .errors import ConfigError
from .optional import require

torch = require("torch", "torch", "torch")

__all__ = ["ReaderDataset", "batch_tensors", "even_batches", "to_kjt", "shard_of_this_process"]


def batch_tensors(batch):
    """The arrays of ``batch`` as torch tensors sharing its memory, named as ``Batch.arrays()`` names them, with
    ``sample_id_bytes`` (uint8) and ``sample_id_offsets`` (int64) for the sample ids and ``size`` (an int: the
    real samples, padding excluded)."""
    out = {name: torch.from_numpy(arr) for name, arr in batch.arrays().items()}
    out["sample_id_bytes"] = torch.from_numpy(batch.sid_bytes)
    out["sample_id_offsets"] = torch.from_numpy(batch.sid_offsets)
    out["size"] = batch.size
    return out


def shard_of_this_process():
    """``(index, count)`` of the share this process (DataLoader worker ``w`` of ``k``, on rank ``r`` of ``world``)
    reads: ``r * k + w`` of ``world * k``; without workers ``r`` of ``world``."""
    rank, world = 0, 1
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        rank, world = torch.distributed.get_rank(), torch.distributed.get_world_size()
    info = torch.utils.data.get_worker_info()
    if info is None:
        return rank, world
    return rank * info.num_workers + info.id, world * info.num_workers


class ReaderDataset(torch.utils.data.IterableDataset):
    """A ``DataReader`` (configured, not started) as an ``IterableDataset`` of batches, each ``transform(batch)``
    (default ``batch_tensors``: a dict of tensors; ``lambda b: (b.to_kjt(), ...)`` builds TorchRec inputs in the
    workers); use it with ``batch_size=None``, the reader makes the batches.

    Each process that iterates it (the main one, or each ``DataLoader`` worker) reads its own share of the work
    units (``shard_of_this_process``, on top of any ``reader.shard()``), so that every sample is delivered exactly
    once across workers and ranks.  ``state_dict()`` / ``load_state_dict()`` follow the protocol of torchdata's
    ``StatefulDataLoader``: a loader's state taken after N batches and loaded into a new loader continues with
    exactly the samples not yet delivered (the reader's exact resume, docs/state.md).
    """

    def __init__(self, reader, transform=batch_tensors):
        self.transform = transform
        if reader._started:
            raise ConfigError(f"ReaderDataset(reader {reader.name!r}): give a reader that has not started; each "
                              f"process starts its own copy")
        self._config = pickle.dumps(reader)  # each iteration reads with a fresh copy
        self._resume = None  # a state to continue from, for the next iteration
        self._running = None

    def _reader(self):
        reader = pickle.loads(self._config)
        index, count = shard_of_this_process()
        task, tasks = reader._options.task
        reader._set(task=(task + tasks * index, tasks * count), enable_state=True)
        if self._resume is not None:
            reader.restore(self._resume)
            self._resume = None
        return reader

    def __iter__(self):
        return self._batches(self._reader())

    def _batches(self, reader):
        self._running = reader
        with reader:
            for batch in reader.startup():
                yield self.transform(batch)

    def state_dict(self):
        """``{"reader": bytes}``: where this process's reader is (None before it started)."""
        if self._running is not None:
            return {"reader": self._running.state()}
        return {"reader": self._resume}

    def load_state_dict(self, state):
        """Continue the next iteration from ``state`` (of ``state_dict()``, taken in the same process slot)."""
        self._resume = state.get("reader")


def even_batches(batches, group=None):
    """The items of ``batches`` (a DataLoader) until any rank of ``torch.distributed`` has run out: every rank
    ends the epoch after the same number of batches, the smallest shard's, so that no rank waits forever in a
    collective of a step the others never take.  The batches other ranks had left are not delivered this epoch
    (with exact resume, a state taken at the end resumes them).  Without ``torch.distributed`` it yields every
    batch."""
    dist = torch.distributed
    if not (dist.is_available() and dist.is_initialized()):
        yield from batches
        return
    it = iter(batches)
    while True:
        batch = next(it, None)
        more = torch.tensor([0 if batch is None else 1])
        dist.all_reduce(more, op=dist.ReduceOp.MIN, group=group)
        if not more.item():
            return
        yield batch


def _ids_64(feat):
    """int64 ``[N]`` ids of a sparse feature; ``(hkey, key)`` pairs give their key when every hkey is 0."""
    ids = feat.ids
    if ids.ndim == 1:
        return ids
    if ids[:, 0].any():
        raise ConfigError(f"feature {feat.name!r} holds 128-bit ids (hkey != 0), which a KeyedJaggedTensor cannot "
                          f"hold")
    return ids[:, 1]


def to_kjt(batch, table=0, expand=False):
    """The sparse features of one table of ``batch`` as a TorchRec ``KeyedJaggedTensor``: keys in declaration
    order, values the ids, lengths the rows' lengths, weights the values.

    ``table=0``: one row per sample (``batch.rows``).  ``table=k >= 1`` (an aux table of structured compression):
    one row per aux line of the batch, with ``inverse_indices`` giving each sample its row, the variable-batch
    form TorchRec's pooled embeddings expand (``KeyedTensor``'s ``inverse_indices``), so that user features are
    looked up once per page view.  ``expand=True``: every sparse feature of every table over the samples' rows,
    aux rows repeated for their samples.
    """
    kjt_class = require("torchrec.sparse.jagged_tensor", "torchrec", "torchrec").KeyedJaggedTensor
    names = [n for n in batch if n in batch.sparse_names and (expand or batch.table_of(n) == table)]
    if expand:
        rows = batch.rows_of_samples()
        parts = []
        for name in names:
            feat = batch[name]
            picked = rows[batch.table_of(name)]
            starts = feat.offsets[picked]
            lengths = feat.offsets[picked + 1] - starts
            # the positions of the picked rows' ids, row after row: arange(total) shifted per row
            take = np.arange(lengths.sum()) - np.repeat(np.cumsum(lengths) - lengths - starts, lengths)
            parts.append((_ids_64(feat)[take], feat.values[take], lengths))
        stride = batch.rows
    else:
        parts = [(_ids_64(f), f.values, np.diff(f.offsets)) for f in (batch[n] for n in names)]
        stride = batch.table_rows[table]
    values = torch.from_numpy(np.concatenate([p[0] for p in parts])) if parts else torch.empty(0, dtype=torch.int64)
    weights = torch.from_numpy(np.concatenate([p[1] for p in parts])) if parts else torch.empty(0)
    lengths = torch.from_numpy(np.concatenate([p[2] for p in parts]).astype(np.int32)) if parts \
        else torch.empty(0, dtype=torch.int32)
    inverse = None
    if table and not expand:
        per_sample = torch.from_numpy(batch.rows_of_samples()[table].astype(np.int64))
        inverse = (names, per_sample.expand(len(names), -1).contiguous())
    return kjt_class(keys=names, values=values, lengths=lengths, weights=weights, stride=stride,
                     inverse_indices=inverse)
