"""The options of a DataReader: one frozen value, replaced by each option method, pickled with the reader."""

from dataclasses import dataclass, field
from typing import Optional

from .formats import FileType

__all__ = ["ReaderOptions"]


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
    prefetch: int = 4
    unique: bool = False
    timeline_path: object = None
    timeline_mb: float = 100  # size of a timeline file before the next one starts
    sources: dict = field(default_factory=dict)  # URL scheme -> its source's options (reader.kafka()...)
    unit_bytes: object = None
    units: Optional[tuple] = None  # work units planned elsewhere, read instead of the paths' (ingest.ray's read tasks)
