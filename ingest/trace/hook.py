"""The reader's trace hook: the named arrays and the sample ids of each batch the consumer takes."""

import functools
import operator

from ..errors import ConfigError

__all__ = ["BatchTrace"]

SAMPLE_IDS = ("sample_ids", "sample_ids.offsets")  # the ids' bytes (Byte) and their int64 offsets


class BatchTrace:
    """What ``reader.trace(writer, arrays, every)`` sets: per batch taken, ``lstep`` its number (counted from the
    first batch of the run a restored reader continues), ``gstep`` the trainer's step (``set_global_step``) or
    ``lstep``; batches whose ``lstep`` is not a multiple of ``every`` only start their step in the writer."""

    def __init__(self, writer, arrays, every):
        if not callable(getattr(writer, "write", None)):
            raise ConfigError(f"trace(writer={writer!r}): expected an ingest.trace.TraceWriter")
        if isinstance(arrays, str) or not all(isinstance(a, str) for a in arrays):
            raise ConfigError(f"trace(arrays={arrays!r}): expected names of Batch.arrays() ('labels', 'item.ids')")
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise ConfigError(f"trace(every={every!r}): expected an int >= 1")
        clash = sorted(set(arrays) & set(SAMPLE_IDS))
        if clash:
            raise ConfigError(f"trace(arrays=...): {clash} are written with every batch, name them not")
        self.writer = writer
        self.arrays = tuple(arrays)
        self.every = every
        self.next_step = 0
        self.gstep_ahead = 0  # gstep - lstep
        self._keys = (*self.arrays, *SAMPLE_IDS)
        self._getters = None  # per key, the function of a batch giving its array
        self._fixed = None  # the writer's FixedColumns of them, when there are

    def global_step(self, n):
        """The next batch is the trainer's step ``n``; the ones after it count on from there."""
        if isinstance(n, bool) or not isinstance(n, int):
            raise ConfigError(f"set_global_step({n!r}): expected an int")
        self.gstep_ahead = n - self.next_step

    def took(self, batch):
        """Write what the consumer is handed in ``batch``."""
        lstep = self.next_step
        self.next_step += 1
        gstep = lstep + self.gstep_ahead
        if lstep % self.every:
            self.writer.write(lstep, gstep, {})  # the step starts: a trainer's add() joins it, not the last one
            return
        if self._getters is None:  # the first batch: its arrays checked, as every write's
            self._getters = _getters(batch, self.arrays)
            self._getters += [operator.attrgetter("sid_bytes"), operator.attrgetter("sid_offsets")]
            values = dict(zip(self._keys, [get(batch) for get in self._getters]))
            self.writer.write(lstep, gstep, values)
            self._fixed = self.writer.fixed(values)
        elif self._fixed is not None:  # the arrays of every batch alike: no checks per key and array
            self.writer.write_fixed(lstep, gstep, self._fixed, [get(batch) for get in self._getters])
        else:
            self.writer.write(lstep, gstep, dict(zip(self._keys, [get(batch) for get in self._getters])))


def _getters(batch, names):
    """Per name of ``names``, the function of a batch giving its array of that name in ``Batch.arrays()``, found
    on the first batch: building every array's name per batch took longer than writing the trace."""
    every = batch.arrays()
    out = []
    for name in names:
        if name not in every:
            raise ConfigError(f"reader.trace(arrays=...): the batch has no array {name!r}; it has {sorted(every)}")
        feature, _, attr = name.rpartition(".")
        if name in ("labels", "timestamps"):
            get = operator.attrgetter(name)
        elif name in batch:  # a dense feature
            get = operator.itemgetter(name)
        elif feature in batch:
            get = functools.partial(_of_feature, feature, attr)
        else:  # indicators.<k>
            get = functools.partial(_by_name, name)
        assert get(batch) is every[name]
        out.append(get)
    return out


def _of_feature(feature, attr, batch):
    return getattr(batch[feature], attr)


def _by_name(name, batch):
    return batch.arrays()[name]
