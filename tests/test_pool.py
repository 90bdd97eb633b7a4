"""Batch buffers come from a pool: reused once dropped, never while any array of a batch is held."""

import gc

import numpy as np

from ingest import synthetic
from ingest.pipeline.runner import PREFETCH_PER_THREAD
from ingest.pool import BufferPool

from conftest import make_reader


def test_a_buffer_is_reused_only_when_nothing_refers_to_it():
    pool = BufferPool()
    a = pool.lease(100, np.int64)
    a[:] = 7
    view = a[10:20]
    del a
    b = pool.lease(100, np.int64)  # the first buffer is still held through `view`
    assert pool.allocated == 2 and np.all(view == 7) and pool.in_use() == 2
    del view, b
    assert pool.in_use() == 0
    c = pool.lease((10, 10), np.float32)  # same size class: reused
    assert pool.allocated == 2 and c.shape == (10, 10) and c.flags.c_contiguous and pool.in_use() == 1


def test_trim_lets_go_of_the_free_buffers_only():
    pool = BufferPool()
    kept, dropped, other = pool.lease(5000, np.uint8), pool.lease(5000, np.uint8), pool.lease(10000, np.uint8)
    kept[:] = 3
    del dropped, other
    assert pool.held_bytes() == 8192 + 8192 + 16384  # size classes: powers of two
    assert pool.trim() == 8192 + 16384 and pool.held_bytes() == 8192 and pool.in_use() == 1 and np.all(kept == 3)
    del kept
    assert pool.trim() == 8192 and pool.held_bytes() == 0


def _reader(path, **options):
    reader = make_reader([path], batch_size=(256,), **options)
    return synthetic.declare(reader)


# The batches alive at once in a reader of one parse thread: those prefetched, as many that the parse worker built
# and holds until it reads its next block, and the consumer's.  Each is on one buffer (its unique ids included), of
# one of at most two size classes over a run (a batch's size can cross a power of two).
MOST_ALIVE = 2 * PREFETCH_PER_THREAD + 1


def test_steady_state_allocates_no_batch_buffers(tmp_path):
    path = tmp_path / "s.txt"
    synthetic.write(path, 20000)
    reader = _reader(path, unique_ids=True, epochs=16).startup()
    pool = reader._pipeline.builder.pool
    batches = arrays = 0
    for batch in reader:  # each batch dropped when the loop moves on
        batch.validate()
        batches += 1
        arrays += len(batch.arrays())
    # the pool is bounded by the batches alive at once, not by the ~1,250 batches of ~60 arrays read
    assert batches > 1200 and arrays > 60 * batches
    assert 0 < pool.allocated <= 2 * MOST_ALIVE


def test_a_consumer_that_reads_no_unique_rows_frees_each_batch_when_it_drops_it(tmp_path):
    """A batch computes its unique rows only when they are read: until then its features wait on its layout,
    and the layout must not refer back to them, or each dropped batch would wait for the garbage collector to
    free its buffer (the cyclic one, not reference counting)."""
    path = tmp_path / "s.txt"
    synthetic.write(path, 20000)
    reader = _reader(path, unique_ids=True, epochs=4).startup()
    pool = reader._pipeline.builder.pool
    gc.disable()
    try:
        batches = sum(1 for batch in reader if len(batch["item"].inverse))
    finally:
        gc.enable()
    assert batches > 300
    assert 0 < pool.allocated <= 2 * MOST_ALIVE


def test_batches_kept_by_the_consumer_stay_intact(tmp_path):
    path = tmp_path / "s.txt"
    synthetic.write(path, 5000)
    kept = [(b["item"].ids.copy(), b["item"].ids, b.labels.copy(), b.labels) for b in _reader(path).startup()]
    fresh = [b["item"].ids for b in _reader(path).startup()]
    assert len(kept) == len(fresh) == 20
    for (ids_copy, ids, labels_copy, labels), ids2 in zip(kept, fresh):
        assert np.array_equal(ids, ids_copy) and np.array_equal(ids, ids2) and np.array_equal(labels, labels_copy)


def test_release_returns_the_buffers(tmp_path):
    path = tmp_path / "s.txt"
    synthetic.write(path, 5000)
    reader = _reader(path).startup()
    pool = reader._pipeline.builder.pool
    first = next(reader)
    first.release()
    list(reader)
    grown = pool.allocated
    assert grown < 20 * 20  # far fewer buffers than arrays of 20 batches
