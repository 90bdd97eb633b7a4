"""``OpError``: an op failed on a sample group; the error says which op, which group and where.

It belongs in ``ingest/errors.py`` (the one exception tree); it lives here until that
file takes it, and ``ingest.ops`` re-exports it either way.
"""
from ..errors import IngestError

__all__ = ["OpError"]


class OpError(IngestError):
    """A sample-group op raised, returned something other than a bool, or left a group that does not decode.

    The original exception is chained (``__cause__``).

    Attributes
    ----------
    op : str
        The op's name (a function's qualified name, a class's name or its ``repr``).
    source : str
        URL of the work unit the group came from.
    offset : int
        Byte offset in the source of the group's first byte when the block records it
        (``Block.group_pos``), else of the block.
    block_offset : int
        Byte offset in the source where the block holding the group starts.
    group : int
        Index of the group in that block.
    sample_id : str
        The group's first sample id (as parsed, before any op ran; may be empty).
    """

    def __init__(self, reason, *, op, source, offset, block_offset, group, sample_id):
        self.reason = reason
        self.op = op
        self.source = source
        self.offset = offset
        self.block_offset = block_offset
        self.group = group
        self.sample_id = sample_id
        super().__init__(f"{source}, byte {offset}: op {op}: {reason}; in group {group} of the chunk at byte "
                         f"{block_offset} (first sample id {sample_id!r})")
