"""TensorFlow: a reader's batches as a ``tf.data.Dataset`` of dicts, ragged sparse features included.

Importing ``ingest`` never imports this module; it needs ``pip install 'ingest[tf]'``::

    ds = ingest.tf.dataset(reader)                 # reader: configured, not started
    for batch in ds:
        ids = batch["item"]                        # tf.RaggedTensor, one row per sample
"""

import pickle

from .batch import SparseFeature
from .features import FeatureType
from .optional import require

tf = require("tensorflow", "tensorflow-cpu", "tf")

__all__ = ["dataset", "element_signature"]


def element_signature(reader):
    """The ``output_signature`` of ``dataset(reader)``: per sparse feature ``f`` a ``RaggedTensorSpec`` of its ids
    (``[rows, None]``, or ``[rows, None, 2]`` for ``(hkey, key)`` pairs) and one of its values (``f.values``), per
    dense feature a float32 ``[rows, width]``, ``labels``, ``timestamps``, ``sample_ids`` (strings of the real
    samples), ``size`` and one ``indicators.k`` per aux table."""
    schema = reader.schema
    ragged = dict(ragged_rank=1, row_splits_dtype=tf.int64)
    spec = {
        "labels": tf.TensorSpec([None, schema.label_count], tf.float32),
        "timestamps": tf.TensorSpec([None], tf.int64),
        "sample_ids": tf.TensorSpec([None], tf.string),
        "size": tf.TensorSpec([], tf.int64),
    }
    for s in schema.specs:
        if s.type is FeatureType.sparse:
            shape = [None, None] if s.serialized else [None, None, 2]
            spec[s.name] = tf.RaggedTensorSpec(shape, tf.int64, **ragged)
            spec[f"{s.name}.values"] = tf.RaggedTensorSpec([None, None], tf.float32, **ragged)
        else:
            spec[s.name] = tf.TensorSpec([None, s.width], tf.float32)
    for k in range(schema.tables - 1):
        spec[f"indicators.{k}"] = tf.TensorSpec([None], tf.int32)
    return spec


def _flat_signature(reader):
    """What the generator yields: the ragged features as ids, values and row splits (built into RaggedTensors by a
    traced map, once: made one by one in Python they cost nineteen twentieths of the throughput)."""
    spec = {}
    for name, item in element_signature(reader).items():
        if isinstance(item, tf.RaggedTensorSpec):
            if name.endswith(".values"):
                spec[name] = tf.TensorSpec([None], tf.float32)
            else:
                spec[name] = tf.TensorSpec([None, *item.shape[2:]], tf.int64)
                spec[f"{name}.offsets"] = tf.TensorSpec([None], tf.int64)
        else:
            spec[name] = item
    return spec


def _flat(batch):
    out = {"labels": batch.labels, "timestamps": batch.timestamps, "sample_ids": batch.sample_ids, "size": batch.size}
    for name in batch:
        feat = batch[name]
        if isinstance(feat, SparseFeature):
            out[name], out[f"{name}.values"], out[f"{name}.offsets"] = feat.ids, feat.values, feat.offsets
        else:
            out[name] = feat
    for k, ind in enumerate(batch.indicators):
        out[f"indicators.{k}"] = ind
    return out


def dataset(reader):
    """A ``tf.data.Dataset`` of the batches of ``reader`` (configured, not started), each a dict as
    ``element_signature`` declares, so that ``model.fit`` and ``tf.function`` trace once.  Each iteration of
    the dataset reads with a fresh copy of the reader."""
    config = pickle.dumps(reader)
    sparse = [s.name for s in reader.schema.specs if s.type is FeatureType.sparse]

    def batches():
        copy = pickle.loads(config)
        with copy:
            for batch in copy.startup():
                yield _flat(batch)

    def ragged(flat):
        out = dict(flat)
        for name in sparse:
            splits = out.pop(f"{name}.offsets")
            out[name] = tf.RaggedTensor.from_row_splits(out[name], splits, validate=False)
            out[f"{name}.values"] = tf.RaggedTensor.from_row_splits(out[f"{name}.values"], splits, validate=False)
        return out

    flat = tf.data.Dataset.from_generator(batches, output_signature=_flat_signature(reader))
    return flat.map(ragged)
