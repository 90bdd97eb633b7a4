"""Block: the columnar result of parsing one chunk of one work unit (DESIGN.md, "Block")."""
from dataclasses import dataclass

import numpy as np

__all__ = ["Block"]


@dataclass(eq=False)
class Block:
    """Whole sample groups of one chunk, column by column, owned by the block.

    Attributes
    ----------
    nrows : int
        Samples (rows of table 0).
    group_offsets : int64 [G + 1]
        First row of each group, then ``nrows``.  Groups never span blocks.
    sp_offsets : int64 [F, nrows + 1]
        Per declared sparse feature (schema order), absolute positions into ``sp_keys``
        and ``sp_values``: feature ``f`` row ``r`` is ``sp_offsets[f, r]:sp_offsets[f, r + 1]``.
    sp_keys : int64 [T]
    sp_hkeys : int64 [T] or None
        High 64 bits of 128-bit ids; None when all are 0 (text input).
    sp_values : float32 [T]
    dense : tuple of float32 [nrows, width]
        One array per declared dense feature (schema order), masked already.
    labels : float32 [nrows, label_count]
    timestamps : int64 [nrows]
    sid_bytes : uint8 [S], sid_offsets : int64 [nrows + 1]
        Sample ids, row ``r`` is ``sid_bytes[sid_offsets[r]:sid_offsets[r + 1]]``.
    source : str
        URL of the work unit.
    start, end : int
        Byte range of the source this block was parsed from.
    """

    nrows: int
    group_offsets: np.ndarray
    sp_offsets: np.ndarray
    sp_keys: np.ndarray
    sp_hkeys: object
    sp_values: np.ndarray
    dense: tuple
    labels: np.ndarray
    timestamps: np.ndarray
    sid_bytes: np.ndarray
    sid_offsets: np.ndarray
    source: str = ""
    start: int = 0
    end: int = 0

    @property
    def nbytes(self):
        return self.end - self.start
