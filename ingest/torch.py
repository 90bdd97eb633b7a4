"""PyTorch: batches as dicts of tensors through a ``DataLoader``, resumable with torchdata's
``StatefulDataLoader`` (``Batch.to_kjt()`` makes TorchRec's ``KeyedJaggedTensor``s of a batch).

Importing ``ingest`` never imports this module; it needs ``pip install 'ingest[torch]'``::

    dataset = ingest.torch.ReaderDataset(reader)          # reader: configured, not started
    loader = StatefulDataLoader(dataset, batch_size=None, num_workers=2, prefetch_factor=8, pin_memory=True)
    for step, batch in enumerate(ingest.torch.even_batches(loader)):
        ids, offsets = batch["item.ids"], batch["item.offsets"]
"""

import collections
import pickle
import threading
import weakref

import numpy as np

from .errors import ConfigError
from .optional import require

torch = require("torch", "torch", "torch")

__all__ = ["ReaderDataset", "SharedBuffers", "batch_tensors", "even_batches", "shard_of_this_process"]


def batch_tensors(batch):
    """The arrays of ``batch`` as torch tensors sharing its memory, named as ``Batch.arrays()`` names them, with
    ``sample_id_bytes`` (uint8) and ``sample_id_offsets`` (int64) for the sample ids and ``size`` (an int: the
    real samples, padding excluded)."""
    out = {name: torch.from_numpy(arr) for name, arr in _arrays(batch).items()}
    out["size"] = batch.size
    return out


def _arrays(batch):
    return {**batch.arrays(), "sample_id_bytes": batch.sid_bytes, "sample_id_offsets": batch.sid_offsets}


class _SharedBatch:
    """A batch a ``DataLoader`` worker built in a block of shared memory (``SharedBuffers``), on its way to the
    main process: it travels as that block and a list of where each array is, and arrives as the dict of
    ``batch_tensors`` (forty tensors sent one by one, each its own block of shared memory, cost the loader nine
    tenths of its throughput).  Not a mapping, so that the loader's ``default_convert`` passes it on as it is."""

    def __init__(self, block, layout, size):
        self.block, self.layout, self.size = block, layout, size

    @classmethod
    def of(cls, batch):
        """The batch on its way, or None when its arrays are not all in one shared block."""
        root = batch.labels.base  # the block's array: numpy bases a view of a view of it on it
        block = getattr(root, "base", None)
        if not (isinstance(block, torch.Tensor) and block.is_shared()):
            return None
        base = root.__array_interface__["data"][0]
        layout = []
        for name, arr in _arrays(batch).items():
            if arr.base is not root:
                return None
            # the dtype as its one-letter code: pickling dtype objects cost more than the rest of the batch
            layout.append((name, arr.__array_interface__["data"][0] - base, arr.dtype.char, arr.shape))
        return cls(block, layout, batch.size)

    def __reduce__(self):
        return _arrived, (self.block, self.layout, self.size)


def _arrived(block, layout, size):
    """The dict of tensors of a batch sent by a worker; once every tensor of it is gone, the block's flag tells
    the worker that it may build another batch there."""
    _MAPPED.append(block)
    root = block.numpy()
    weakref.finalize(root, _free, block[:_HEADER].numpy())  # a view of the tensor: it must not keep root alive
    out = {name: torch.from_numpy(np.ndarray(shape, code, root, at)) for name, at, code, shape in layout}
    out["size"] = size
    return out


def _free(header):
    header[0] = 0


_HEADER = 64  # the first bytes of a shared block: its in-use flag, then alignment
# The blocks that arrived last, kept mapped: a worker builds its next batches in the same blocks, and torch maps
# one again only when nothing holds it (mapping a block per batch took a third of the main process's time).
_MAPPED: collections.deque = collections.deque(maxlen=64)


class SharedBuffers:
    """Batch buffers of a ``DataLoader`` worker, in shared memory, so that a batch crosses to the main process
    as a handle, not a copy.  A block is in use from the batch built in it until the main process has dropped
    every tensor of it (a flag in the block); then the worker builds another batch there.  A new block costs its
    page faults (1 ms a MB here); a reused one does not."""

    def __init__(self):
        self._blocks = []  # numpy views of the blocks (a tensor's indexing costs microseconds, theirs does not)
        self._lock = threading.Lock()  # the worker's parse threads lease at once: a free block goes to one of them

    def lease_bytes(self, nbytes):
        """``nbytes`` of a free block, after its header (``BufferPool.lease_bytes``)."""
        size = 1 << (nbytes + _HEADER - 1).bit_length()
        with self._lock:
            root = next((b for b in self._blocks if len(b) == size and b[0] == 0), None)
            if root is None:
                root = torch.empty(size, dtype=torch.uint8).share_memory_().numpy()
                self._blocks.append(root)
            root[0] = 1
        return root[_HEADER : _HEADER + nbytes]


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


class ReaderDataset(torch.utils.data.IterableDataset):  # type: ignore[name-defined]
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
            raise ConfigError(
                f"ReaderDataset(reader {reader.name!r}): give a reader that has not started; each "
                f"process starts its own copy"
            )
        self._config = pickle.dumps(reader)  # each iteration reads with a fresh copy
        self._resume = None  # a state to continue from, for the next iteration
        self._running = None

    def _reader(self):
        reader = pickle.loads(self._config)
        index, count = shard_of_this_process()
        task, tasks = reader._options.task
        reader._set(task=(task + tasks * index, tasks * count), enable_state=True)
        if self.transform is batch_tensors and torch.utils.data.get_worker_info() is not None:
            # only batch_tensors hands a block back (_SharedBatch): under another transform one would stay in use
            reader._buffers = SharedBuffers()
            # the blocks travel by name, which the main process maps once per block: with the default
            # file-descriptor strategy every batch took a socket round trip to pass its descriptor
            torch.multiprocessing.set_sharing_strategy("file_system")
        if self._resume is not None:
            reader.restore(self._resume)
            self._resume = None
        return reader

    def __iter__(self):
        return self._batches(self._reader())

    def _batches(self, reader):
        self._running = reader
        shared = reader._buffers is not None
        with reader:
            for batch in reader.startup():
                yield (shared and _SharedBatch.of(batch)) or self.transform(batch)

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
