"""Ray Data: the samples of a reader as a ``ray.data.Dataset``, one row per sample (docs/ray.md).

Importing ``ingest`` never imports this module; it needs ``pip install 'ingest[ray]'``::

    ds = ingest.ray.read_samples(reader)          # reader: configured, not started
    for batch in ds.iter_torch_batches(batch_size=1024, collate_fn=ingest.ray.TorchCollate()):
        ids, offsets = batch["item.ids"], batch["item.offsets"]
"""

import pickle
import warnings

import numpy as np
import pyarrow as pa

from . import formats
from .arrow import batch_to_arrow, record_schema, sample_id_buffers
from .errors import ConfigError
from .optional import require

ray_data = require("ray.data", "ray[data]", "ray")
require("ray.data.collate_fn", "ray[data]", "ray")

__all__ = ["read_samples", "SampleDatasource", "TorchCollate"]


def read_samples(reader, **read_args):
    """The samples of ``reader`` (a ``DataReader``, configured, not started) as a ``ray.data.Dataset`` of one row
    per sample, columns as ``Batch.to_arrow()`` names them.

    Each read task reads a run of consecutive work units of the reader (files, byte ranges, Kafka partitions:
    ``SampleDatasource``) with its own copy of the reader, and yields its batches as Arrow tables.  ``read_args`` go to
    ``ray.data.read_datasource``: ``override_num_blocks`` (the most read tasks), ``concurrency``,
    ``ray_remote_args``...; ``num_cpus`` (per read task) defaults to the reader's ``threads(n)`` (1 for ``threads(0)``).
    """
    source = SampleDatasource(reader)
    if "num_cpus" not in read_args and "num_cpus" not in (read_args.get("ray_remote_args") or {}):
        read_args["num_cpus"] = max(1, reader._options.threads)
    return ray_data.read_datasource(source, **read_args)


# what a reader of read_samples cannot have: (whether its options have it, what to say)
_REFUSED = (
    (lambda o: o.epochs != 1, "epochs(n) other than 1 (iterate the dataset again for another epoch)"),
    (lambda o: o.enable_state or o.restored is not None or o.save_every is not None, "enable_state / restore"),
    (lambda o: o.keep or o.pause is not None, "keep_sample / pause"),
    (lambda o: o.drop_last, "drop_last(True) (each read task would drop its last partial batch)"),
    (lambda o: o.timeline_path is not None, "timeline() (every read task would write the same file)"),
)


class SampleDatasource(ray_data.Datasource):  # type: ignore[name-defined]
    """A Ray ``Datasource`` of the samples of ``reader`` (a ``DataReader``, configured, not started).

    The work units are planned once, here, as ``reader.startup()`` plans them (the reader's shard of them, if
    ``shard()`` was called; Kafka partitions up to their end offsets now).  ``get_read_tasks(parallelism)`` makes
    ``min(parallelism, units)`` read tasks, each a run of consecutive units (runs differ by one unit at most),
    so that every unit is read by one task; a task reads its units with a copy of the reader (its options, its
    ``threads(n)``) and yields its batches joined in Arrow tables of ``record_schema(reader.schema)`` of about 32 MiB.
    """

    def __init__(self, reader):
        super().__init__()
        if reader._started:
            raise ConfigError(
                f"read_samples(reader {reader.name!r}): give a reader that has not started; each read task "
                f"starts its own copy"
            )
        o = reader._options
        refused = [what for applies, what in _REFUSED if applies(o)]
        if refused:
            raise ConfigError(f"read_samples(reader {reader.name!r}): not available with {'; '.join(refused)}")
        self._name = reader.name
        self._config = pickle.dumps(reader)
        self._units = _plan(reader)
        self._schema = record_schema(reader.schema)

    def get_name(self) -> str:
        return "Samples"  # Ray names the operator "ReadSamples"

    def estimate_inmemory_data_size(self):
        """The bytes of the units' inputs (None when a unit's size is unknown: compressed, Kafka)."""
        sizes = [_unit_bytes(u) for u in self._units]
        return None if None in sizes else sum(sizes)

    def get_read_tasks(self, parallelism, per_task_row_limit=None, data_context=None):
        """At most ``parallelism`` read tasks (Ray's ``override_num_blocks``, or its estimate): ``min(parallelism,
        units)`` runs of consecutive units in plan order, one unit per task when ``parallelism`` is at least the
        number of units."""
        tasks = []
        for run in np.array_split(np.arange(len(self._units)), max(1, min(parallelism, len(self._units)))):
            units = tuple(self._units[i] for i in run)
            if not units:
                continue
            sizes = [_unit_bytes(u) for u in units]
            metadata = ray_data.block.BlockMetadata(
                num_rows=None,
                size_bytes=None if None in sizes else sum(sizes),
                exec_stats=None,
                input_files=tuple(dict.fromkeys(u.url for u in units)),
            )
            read = _ReadUnits(self._config, units)
            tasks.append(ray_data.ReadTask(read, metadata, schema=self._schema, per_task_row_limit=per_task_row_limit))
        return tasks


def _plan(reader):
    """The work units ``reader.startup()`` would read, planned as it plans them."""
    o = reader._options
    if o.paths is None:
        raise ConfigError(f"reader {reader.name!r}: paths=None, expected files, directories, globs or URLs")
    member = reader._join_group()
    if member is not None:
        member.close()
        raise ConfigError(
            f"read_samples(reader {reader.name!r}): a consumer group assigns this reader's partitions as it runs; "
            f"name the partitions in the URLs (kafka://brokers/topic:0,1,...) so that read tasks can share them out"
        )
    fmt = formats.make_format(o.file_type, reader.schema.raw)  # whether its files may be cut into byte ranges
    units = reader._plan_units(fmt)[o.task[0] :: o.task[1]]
    if any(source.live(settings) for source, settings, _ in reader._by_source(units)):
        raise ConfigError(
            f"read_samples(reader {reader.name!r}): its units have no end (kafka(until='forever')); a read task "
            f"reads its units to their end"
        )
    return units


def _unit_bytes(unit):
    if unit.size is None:
        return None
    return (unit.size if unit.end is None else unit.end) - unit.start


# Bytes of the blocks a read task yields, its batches joined: Ray moved blocks of one batch (4096 samples) at
# 250k samples/s and blocks of 16-32 MiB at 340k (2 CPUs, 1M pb samples); 64 MiB left too few blocks to overlap
_BLOCK_BYTES = 32 << 20


class _ReadUnits:
    """A read task's function: the samples of ``units`` read by a copy of the reader pickled as ``config``, as
    Arrow tables of about ``_BLOCK_BYTES`` (the last one smaller)."""

    def __init__(self, config, units):
        self.config, self.units = config, units

    def __call__(self):
        reader = pickle.loads(self.config)
        reader._set(units=self.units)
        pending, size = [], 0
        with reader:
            for batch in reader.startup():
                pending.append(batch_to_arrow(batch))
                size += pending[-1].nbytes
                if size >= _BLOCK_BYTES:
                    yield pa.Table.from_batches(pending).combine_chunks()
                    pending, size = [], 0
        if pending:
            yield pa.Table.from_batches(pending).combine_chunks()


class TorchCollate(ray_data.collate_fn.ArrowBatchCollateFn):  # type: ignore[name-defined]
    """``collate_fn`` of ``iter_torch_batches`` for the rows of ``read_samples``: a batch of rows as a dict of
    tensors named as ``ingest.torch.batch_tensors`` names a batch's, so that a model takes either.

    ``labels`` float32 ``[n, label_count]``, ``timestamps`` int64 ``[n]``; per sparse feature ``f``: ``f.ids``
    int64 and ``f.values`` float32 ``[ids]`` with ``f.offsets`` int64 ``[n + 1]`` (one row per sample, as an
    ``nn.EmbeddingBag`` takes them); per dense feature ``f`` float32 ``[n, width]``; ``sample_id_bytes`` uint8 and
    ``sample_id_offsets`` int64 ``[n + 1]``.  Columns a transform added: numbers as they are, a list column ``c``
    as ``c`` and ``c.offsets``.  A column of one chunk is taken without a copy (offsets are rebased to 0, a copy of
    ``n + 1`` numbers).  Ray's default collate cannot take the string and list columns.
    """

    def __call__(self, batch):
        torch = require("torch", "torch", "torch")
        arrays = {}
        for name, column in zip(batch.column_names, batch.columns):
            column = column.combine_chunks()
            kind = column.type
            if name == "sample_id":
                arrays["sample_id_bytes"], arrays["sample_id_offsets"] = sample_id_buffers(column, len(column))
            elif pa.types.is_integer(kind) or pa.types.is_floating(kind):
                arrays["timestamps" if name == "timestamp" else name] = column.to_numpy()
            elif pa.types.is_fixed_size_list(kind):
                arrays[name] = column.flatten().to_numpy().reshape(len(column), kind.list_size)
            elif pa.types.is_large_list(kind) or pa.types.is_list(kind):
                arrays[name] = column.flatten().to_numpy()
                if not name.endswith(".values"):  # <f>.values share the offsets of <f>.ids
                    offsets = column.offsets.to_numpy()
                    arrays[f"{name.removesuffix('.ids')}.offsets"] = offsets.astype(np.int64) - offsets[0]
            else:
                raise ConfigError(
                    f"TorchCollate: column {name!r} is {kind}; expected the sample_id string, numbers or lists of them"
                )
        with warnings.catch_warnings():  # Arrow's memory is read-only; the tensors share it
            warnings.simplefilter("ignore")
            return {name: torch.as_tensor(arr) for name, arr in arrays.items()}
