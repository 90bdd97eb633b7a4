"""The reader's trace hook: the named arrays and the sample ids of each batch the consumer takes."""

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
        every = batch.arrays()
        try:
            values = {name: every[name] for name in self.arrays}
        except KeyError as exc:
            raise ConfigError(
                f"reader.trace(arrays=...): the batch has no array {exc.args[0]!r}; it has {sorted(every)}"
            ) from None
        values["sample_ids"] = batch.sid_bytes
        values["sample_ids.offsets"] = batch.sid_offsets
        self.writer.write(lstep, gstep, values)
