"""The options of a DataReader: one frozen value, replaced by each option method, pickled with the reader."""

from dataclasses import dataclass, field
from typing import Optional

from .errors import ConfigError
from .features import is_flag, is_int
from .formats import FileType

__all__ = ["ReaderOptions", "MOST", "positive_int", "flag"]

# Upper bounds of the counts a reader allocates or starts by (a thread, a queue place, a row of every batch
# array each): far above any use, and low enough that a typo is an error rather than a hang or a MemoryError.
MOST = {
    "threads": 1024,
    "prefetch": 1 << 16,
    "batch_size": 1 << 24,
    "label_count": 1 << 12,
    "max_group_size": (1 << 31) - 1,
    "max_record_bytes": (1 << 32) - 1,  # a record's length prefix is 4 bytes
}


def positive_int(name, value, minimum=1, maximum=None):
    """``value`` as an int (numpy integers too, not bools) in ``[minimum, maximum]``; ``maximum`` defaults to the
    option's bound in ``MOST``."""
    maximum = MOST.get(name) if maximum is None else maximum
    if not is_int(value) or value < minimum or (maximum is not None and value > maximum):
        most = "" if maximum is None else f" and <= {maximum:,}"
        raise ConfigError(f"{name}={value!r}: expected an int >= {minimum}{most}")
    return int(value)


def flag(name, value):
    """``value`` as a bool (``features.is_flag``)."""
    if is_flag(value):
        return bool(value)
    raise ConfigError(f"{name}={value!r}: expected True or False")


@dataclass(frozen=True)
class ReaderOptions:
    """Everything a ``DataReader`` was told before ``startup()`` (docs/formats.md, reader options)."""

    paths: object = None
    file_type: FileType = FileType.txt
    enable_state: bool = False
    restored: object = None  # the decoded state of restore()
    save_every: Optional[tuple] = None  # (batches, url) of save_state_every()
    shuffle: object = None  # seed
    shuffle_buffer: object = None  # sample groups a window of the group shuffle holds
    ops: tuple = ()
    keep: bool = False
    pause: object = None  # (groups, wait_exactly)
    epochs: int = 1
    batch_size: int = 1024
    label_count: int = 1
    threads: int = 1
    specs: tuple = ()
    split_group: bool = True
    pad: bool = True
    drop_last: bool = False
    task: tuple = (0, 1)
    policy: str = "raise"
    max_group_size: int = 8192
    max_record_bytes: object = None
    compression: object = None
    deterministic: bool = False
    prefetch: Optional[int] = None  # None: PREFETCH_PER_THREAD a parse thread (pipeline/runner.py)
    unique: bool = False
    timeline_path: object = None
    timeline_mb: float = 100  # size of a timeline file before the next one starts
    sources: dict = field(default_factory=dict)  # URL scheme -> its source's options (reader.kafka()...)
    unit_bytes: object = None
    units: Optional[tuple] = None  # work units planned elsewhere, read instead of the paths' (ingest.ray's read tasks)
