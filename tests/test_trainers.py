"""Batches into trainers: PyTorch DataLoader and torchdata's StatefulDataLoader, TorchRec KJTs, DLPack, tf.data,
fixed-shape JAX batches, and the examples that train."""

import collections
import json
import os
import pickle
import subprocess
import sys

import numpy as np
import pytest
import torch

# imported at collection, before any test imports tensorflow: triton (which torchrec loads) crashes the
# process when it is loaded after tensorflow
import torchrec  # noqa: F401
from torch.utils.data import DataLoader
from torchdata.stateful_dataloader import StatefulDataLoader

import ingest
import ingest.torch
from ingest import synthetic

from conftest import ROOT, SAMPLES, flatten, key_of

AUX = ["uid", "age", "gender", "clk_hist", "cate_pref", "user_emb"]
# Loader workers start by spawn here: forked from this process, which has imported tensorflow and jax (other tests),
# a worker can hang on a lock one of their threads held at the fork
_SPAWN = {False: {}, True: {"multiprocessing_context": "spawn"}}


@pytest.fixture(scope="module")
def pb_files(tmp_path_factory):
    """Three pb files of synthetic samples (the user features in table 1), and every sample of them by key."""
    folder = tmp_path_factory.mktemp("trainers")
    paths = []
    for k, n in enumerate((3000, 2000, 2500)):
        text = folder / f"p{k}.txt"
        synthetic.write(text, n, seed=k + 1)
        paths.append(str(folder / f"p{k}.pb"))
        ingest.convert([str(text)], paths[-1], aux=AUX, log=lambda *_: None)
    want = collections.Counter(key_of(s) for b in _reader(paths).startup() for s in flatten(b))
    return paths, want


def _reader(paths, batch_size=100):
    reader = ingest.DataReader("t", paths=paths, file_type="pb").batch_size(batch_size).pad(False)
    return synthetic.declare(reader, aux=AUX, serialized=True)


def _sample_keys(item, batch):
    """Keys of the samples of a loader item, matched against the batch the same reader made (by sample ids)."""
    ids = item["sample_id_bytes"].numpy()
    offsets = item["sample_id_offsets"].numpy()
    return [ids[offsets[r] : offsets[r + 1]].tobytes() for r in range(item["size"])]


def _ids_of(items):
    out = collections.Counter()
    for item in items:
        out.update(_sample_keys(item, None))
    return out


def _want_ids(want):
    return collections.Counter(k[0] for k in want.elements())


@pytest.mark.parametrize("workers", [0, 1, 2])
def test_a_loader_delivers_every_sample_once_whatever_its_workers(pb_files, workers):
    paths, want = pb_files
    loader = DataLoader(
        ingest.torch.ReaderDataset(_reader(paths)),
        batch_size=None,
        num_workers=workers,
        pin_memory=True,
        **_SPAWN[workers > 0],
    )
    assert _ids_of(loader) == _want_ids(want)


def _sample_ids(batch):
    return [batch.sample_id(r) for r in range(batch.size)]


def test_a_transform_runs_in_the_workers_and_delivers_every_sample_once(pb_files):
    paths, want = pb_files
    dataset = ingest.torch.ReaderDataset(_reader(paths), transform=_sample_ids)
    loader = DataLoader(dataset, batch_size=None, num_workers=2, **_SPAWN[True])
    got = collections.Counter(sid for ids in loader for sid in ids)
    assert got == _want_ids(want)


def test_a_loader_item_is_the_batch_as_tensors(pb_files):
    paths, _ = pb_files
    item = next(iter(DataLoader(ingest.torch.ReaderDataset(_reader(paths)), batch_size=None)))
    batch = next(_reader(paths).startup())
    arrays = batch.arrays()
    assert set(item) == set(arrays) | {"sample_id_bytes", "sample_id_offsets", "size"}
    for name, arr in arrays.items():
        assert item[name].dtype == torch.from_numpy(arr).dtype
        np.testing.assert_array_equal(item[name].numpy(), arr)
    assert item["size"] == batch.size == 100
    assert _sample_keys(item, batch) == [batch.sample_id(r) for r in range(batch.size)]


def test_a_batch_built_in_shared_buffers_travels_as_its_block(pb_files):
    """A DataLoader worker builds its batches in shared memory (``SharedBuffers``): each travels as its block and
    where each array lies (``_SharedBatch``), and arrives as the dict of tensors ``batch_tensors`` would give."""
    paths, _ = pb_files
    reader = _reader(paths)
    reader._buffers = ingest.torch.SharedBuffers()
    with reader:
        batch = next(reader.startup())
        shared = ingest.torch._SharedBatch.of(batch)
        assert shared is not None
        arrived = pickle.loads(pickle.dumps(shared))
        want = ingest.torch.batch_tensors(batch)
        assert arrived.keys() == want.keys() and arrived["size"] == batch.size
        for name, tensor in want.items():
            if name != "size":
                assert torch.equal(arrived[name], tensor), name


def test_parse_threads_leasing_shared_buffers_at_once_never_share_a_block():
    """A DataLoader worker's reader with 2 parse threads leases its shared blocks from both at once: a free block goes
    to one of them (two batches laid out in one block would overwrite each other)."""
    import threading

    buffers = ingest.torch.SharedBuffers()
    start, leased = threading.Barrier(2), [[], []]

    def lease(k):
        start.wait()
        for _ in range(300):
            leased[k].append(buffers.lease_bytes(1000))  # held: each block stays in use

    threads = [threading.Thread(target=lease, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    starts = {view.__array_interface__["data"][0] for views in leased for view in views}
    assert len(starts) == 600


@pytest.mark.parametrize("workers", [0, 1, 2])
def test_a_stateful_loader_resumed_mid_epoch_delivers_exactly_the_rest(pb_files, workers):
    paths, want = pb_files
    loader = StatefulDataLoader(
        ingest.torch.ReaderDataset(_reader(paths)), batch_size=None, num_workers=workers, **_SPAWN[workers > 0]
    )
    delivered = []
    for step, item in enumerate(loader):
        delivered.append(item)
        if step == 23:
            state = loader.state_dict()
            break
    resumed = StatefulDataLoader(
        ingest.torch.ReaderDataset(_reader(paths)), batch_size=None, num_workers=workers, **_SPAWN[workers > 0]
    )
    resumed.load_state_dict(state)
    assert _ids_of(delivered) + _ids_of(resumed) == _want_ids(want)


def test_a_reader_that_started_is_refused():
    reader = ingest.DataReader("t", [str(SAMPLES / "ads.txt")]).feature("item", "sparse").label_count(2)
    reader.startup()
    with pytest.raises(ingest.ConfigError, match="has not started"):
        ingest.torch.ReaderDataset(reader)
    reader.shutdown()


_DISTRIBUTED = """
import json, sys, torch, torch.distributed as dist
sys.path.insert(0, {tests!r})
import ingest, ingest.torch
from test_trainers import _reader, _ids_of
rank = int(sys.argv[1])
dist.init_process_group("gloo", init_method="file://" + {store!r}, rank=rank, world_size=2)
loader = torch.utils.data.DataLoader(ingest.torch.ReaderDataset(_reader({paths!r})), batch_size=None, num_workers=2)
items = list(ingest.torch.even_batches(loader) if {even} else loader)
print(json.dumps([len(items), sorted(_ids_of(items).elements(), key=repr)], default=repr))
dist.destroy_process_group()
"""


@pytest.mark.parametrize("even", [False, True])
def test_ranks_and_workers_share_the_input_and_even_batches_ends_every_rank_together(pb_files, tmp_path, even):
    paths, want = pb_files
    script = _DISTRIBUTED.format(tests=str(ROOT / "tests"), store=str(tmp_path / "store"), paths=paths, even=even)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script, str(rank)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT / "tests",
        )
        for rank in range(2)
    ]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-3000:]
        results.append(json.loads(out.splitlines()[-1]))
    counts = [n for n, _ in results]
    delivered = collections.Counter(i for _, ids in results for i in ids)
    if even:  # every rank stops after the smaller share's batches
        assert counts[0] == counts[1] and sum(delivered.values()) < sum(want.values())
    else:  # four shares (2 ranks x 2 workers): every sample once, the ranks' counts differ
        assert counts[0] != counts[1]
        assert delivered == collections.Counter(repr(k) for k in _want_ids(want).elements())


def test_to_kjt_holds_the_batch_as_torchrec_reads_it(pb_files):
    kjt_class = pytest.importorskip("torchrec.sparse.jagged_tensor").KeyedJaggedTensor
    paths, _ = pb_files
    batch = next(_reader(paths).startup())
    main = batch.to_kjt()
    assert isinstance(main, kjt_class) and main.keys() == ["item", "cate", "shop", "brand", "title", "tags"]
    assert main.stride() == batch.rows
    for name, jagged in main.to_dict().items():
        feat = batch[name]
        rows = [t.tolist() for t in jagged.to_dense()]
        assert rows == [feat.ids[a:b].tolist() for a, b in zip(feat.offsets[:-1], feat.offsets[1:])]
        np.testing.assert_array_equal(jagged.weights().numpy(), feat.values)
    # the aux table: one row per aux line of the batch, and each sample's row as inverse indices
    aux = batch.to_kjt(table=1)
    assert aux.keys() == ["uid", "age", "gender", "clk_hist", "cate_pref"] and aux.stride() == batch.table_rows[1]
    keys, inverse = aux.inverse_indices()
    assert keys == aux.keys() and inverse.shape == (5, batch.rows)
    assert inverse.dtype == torch.int64 and inverse.is_contiguous() and bool((inverse == inverse[0]).all())
    np.testing.assert_array_equal(inverse[0].numpy(), batch.rows_of_samples()[1])
    # expanded: every sparse feature over the samples' rows, aux rows repeated for their samples
    flat = batch.to_kjt(expand=True).to_dict()
    for r, sample in enumerate(flatten(batch)):
        for name, pairs in sample["sparse"].items():
            assert flat[name].to_dense()[r].tolist() == [k for k, _ in pairs]


def test_to_kjt_stores_what_torchrecs_constructor_stores(pb_files):
    kjt_class = pytest.importorskip("torchrec.sparse.jagged_tensor").KeyedJaggedTensor
    paths, _ = pb_files
    batch = next(_reader(paths).startup())
    for table in (0, 1):
        made = batch.to_kjt(table=table)
        built = kjt_class(
            keys=made.keys(),
            values=made.values(),
            lengths=made.lengths(),
            weights=made.weights(),
            stride=made.stride(),
            inverse_indices=made.inverse_indices_or_none(),
        )
        assert type(made) is kjt_class and made.__dict__.keys() == built.__dict__.keys()
        for name, value in built.__dict__.items():
            assert made.__dict__[name] is value or made.__dict__[name] == value, name


def test_to_kjt_calls_the_constructor_when_it_does_more_than_store(pb_files, monkeypatch):
    jagged = pytest.importorskip("torchrec.sparse.jagged_tensor")
    import ingest.batch

    class Checked(jagged.KeyedJaggedTensor):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.checked = True

    monkeypatch.setattr(jagged, "KeyedJaggedTensor", Checked)
    monkeypatch.setattr(ingest.batch, "_KJT_MAKER", None)
    paths, _ = pb_files
    made = next(_reader(paths).startup()).to_kjt()
    assert type(made) is Checked and made.checked


def test_to_dlpack_gives_arrays_numpy_torch_and_jax_take_without_a_copy():
    jax = pytest.importorskip("jax")
    reader = ingest.DataReader("t", [str(SAMPLES / "ads.txt")]).feature("item", "sparse", serialized=True)
    with reader:
        batch = next(reader.feature("user_emb", "dense", nvec=8).label_count(2).batch_size(64).startup())
        for name, arr in batch.to_dlpack().items():
            original = batch.arrays()[name]
            assert np.shares_memory(np.from_dlpack(arr), original)
            assert torch.from_dlpack(arr).data_ptr() == original.ctypes.data
            with jax.enable_x64(True):  # JAX's default 32-bit mode would cut 64-bit ids
                np.testing.assert_array_equal(np.asarray(jax.dlpack.from_dlpack(arr)), original)


def test_tf_dataset_gives_ragged_features_and_traces_once(pb_files):
    tf = pytest.importorskip("tensorflow")
    import ingest.tf

    paths, want = pb_files
    ds = ingest.tf.dataset(_reader(paths))
    assert ds.element_spec == ingest.tf.element_signature(_reader(paths))
    element = next(iter(ds))
    batch = next(_reader(paths).startup())
    assert isinstance(element["item"], tf.RaggedTensor) and element["item"].to_list() == [
        batch["item"].ids[a:b].tolist() for a, b in zip(batch["item"].offsets[:-1], batch["item"].offsets[1:])
    ]
    assert element["clk_hist"].shape[0] == batch.table_rows[1]
    np.testing.assert_array_equal(element["user_emb"].numpy(), batch["user_emb"])
    assert element["sample_ids"].numpy().tolist() == batch.sample_ids.tolist()
    traces = []

    def total(el):
        traces.append(1)
        return tf.reduce_sum(el["item.values"].flat_values) + tf.cast(el["size"], tf.float32)

    sums = list(ds.map(total))
    assert len(traces) == 1 and len(sums) == 75  # 7500 samples in batches of 100
    assert sum(int(el["size"]) for el in ds) == sum(want.values())


def test_jax_batches_compile_once_per_bucket(pb_files):
    jax = pytest.importorskip("jax")
    import ingest.jax

    paths, want = pb_files
    buckets = [256, 512, 1024]
    with pytest.raises(ingest.ConfigError, match="jax_enable_x64"):
        next(ingest.jax.batches(_reader(paths)))
    jax.config.update("jax_enable_x64", True)

    @jax.jit
    def step(b):
        return b["item.values"].sum() + b["clk_hist.values"].sum() + b["user_emb"][b["indicators.0"]].sum()

    batches = sizes = 0
    used = set()
    reader = _reader(paths, batch_size=40).epochs(2)  # 375 batches
    for b in ingest.jax.batches(reader, buckets=buckets):
        step(b)
        batches += 1
        sizes += int(b["size"])
        used.add(b["item.ids"].shape[0])
        assert b["labels"].shape == (40, 2) and b["user_emb"].shape == (41, 8)
    assert batches > 200 and sizes == 2 * sum(want.values())
    assert used <= set(buckets) and step._cache_size() == len(used)


@pytest.mark.parametrize("script", ["train_torch.py", "train_jax.py"])
def test_the_examples_train_and_the_loss_falls(tmp_path, script):
    run = subprocess.run(
        [
            sys.executable,
            str(ROOT / "examples" / script),
            "--data",
            str(tmp_path),
            "--samples",
            "20000",
            "--epochs",
            "2",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT / "examples",
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout.splitlines()[-1])
    assert result["last_loss"] < 0.9 * result["first_loss"]


def test_the_torch_example_resumes_exactly(tmp_path):
    example = [
        sys.executable,
        str(ROOT / "examples" / "train_torch.py"),
        "--data",
        str(tmp_path),
        "--samples",
        "20000",
        "--checkpoint",
        str(tmp_path / "ck.pt"),
    ]
    first = subprocess.run(example + ["--max-steps", "30"], capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stderr[-3000:]
    rest = subprocess.run(example + ["--resume"], capture_output=True, text=True, timeout=600)
    assert rest.returncode == 0, rest.stderr[-3000:]
    assert json.loads(first.stdout.splitlines()[-1])["samples"] == 30 * 256
    assert json.loads(rest.stdout.splitlines()[-1])["samples"] == 20000  # every sample once over both runs
    assert os.path.getsize(tmp_path / "ck.pt") > 0
