"""Feature declarations: what a reader emits, validated once at ``feature()`` time."""

from dataclasses import dataclass, field
from enum import Enum
from typing import Optional

import numpy as np

from .errors import ConfigError

__all__ = ["FeatureType", "FeatureSpec", "Schema", "DenseLayout", "sparse", "dense"]


class FeatureType(str, Enum):
    sparse = "sparse"
    dense = "dense"


sparse = FeatureType.sparse
dense = FeatureType.dense


@dataclass(frozen=True)
class FeatureSpec:
    """One declared feature (docs/formats.md, reader options, ``feature(...)``)."""

    name: str
    type: FeatureType
    table: int = 0
    nvec: int = 0
    serialized: bool = False
    dsl: Optional[str] = None
    cutoff: int = 0
    mask: Optional[str] = None
    #: ``(file, line)`` of the conf file entry it was read from (``load_feature_conf``), for errors; None otherwise
    origin: Optional[tuple] = field(default=None, compare=False)

    @property
    def width(self):
        """Columns of a dense feature in the batch: ``nvec``, or the number of ``1`` in ``mask``."""
        return self.mask.count("1") if self.mask is not None else self.nvec

    @property
    def kept_elements(self):
        """For a dense feature: int64 ``[nvec]``, the output column of each element or -1."""
        keep = [c == "1" for c in self.mask] if self.mask is not None else [True] * self.nvec
        cols = np.cumsum(keep) - 1
        return np.where(keep, cols, -1).astype(np.int64)


# Aux tables and dense widths a reader lays out arrays by (a tuple of arrays per table goes to the kernels): far
# above any use, and low enough that a typo is an error rather than a hang or a MemoryError.
MOST_TABLES = 64
MOST_NVEC = 1 << 20


def is_int(value):
    """An int or a numpy integer, not a bool (``isinstance(True, int)`` holds)."""
    return not isinstance(value, (bool, np.bool_)) and isinstance(value, (int, np.integer))


def is_flag(value):
    """True or False, numpy's too, or the ints 1 and 0 (not any object: ``bool("False")`` is True)."""
    return isinstance(value, (bool, np.bool_)) or (is_int(value) and value in (0, 1))


def make_feature(name, type, table=0, nvec=None, serialized=False, dsl=None, cutoff=0, mask=None, origin=None):
    """Validate user arguments into a ``FeatureSpec``; every problem is a ``ConfigError``.  ``origin``: where a
    conf file declared it (``load_feature_conf``), kept for errors."""
    # the separators of the text format; ':' also keeps the DSL's hidden plans ("<feature>:<n>") apart from features
    if not isinstance(name, str) or not name or any(c in name for c in "|@;,:\n"):
        raise ConfigError(f"feature name={name!r}: expected a non-empty string without | @ ; , : or newline")
    try:
        ftype = FeatureType(type)
    except ValueError:
        raise ConfigError(f"feature {name!r}: type={type!r}, expected ingest.features.sparse or .dense") from None
    if not is_int(table) or not 0 <= table < MOST_TABLES:
        raise ConfigError(f"feature {name!r}: table={table!r}, expected an int >= 0 and < {MOST_TABLES}")
    if not is_int(cutoff):
        raise ConfigError(f"feature {name!r}: cutoff={cutoff!r}, expected an int")
    if not is_flag(serialized):
        raise ConfigError(f"feature {name!r}: serialized={serialized!r}, expected True or False")
    if ftype is FeatureType.dense:
        if nvec is None or not is_int(nvec) or not 0 < nvec <= MOST_NVEC:
            raise ConfigError(f"dense feature {name!r}: nvec={nvec!r}, expected an int > 0 and <= {MOST_NVEC:,}")
        if cutoff:
            raise ConfigError(f"dense feature {name!r}: cutoff applies to sparse features only")
        if mask is not None:
            if not isinstance(mask, str) or len(mask) != nvec or set(mask) - {"0", "1"}:
                raise ConfigError(f"dense feature {name!r}: mask={mask!r}, expected {nvec} characters of 0/1")
            if "1" not in mask:
                raise ConfigError(f"dense feature {name!r}: mask={mask!r} keeps no element")
    else:
        if nvec not in (None, 0):
            raise ConfigError(f"sparse feature {name!r}: nvec={nvec!r} applies to dense features only")
        if mask is not None:
            raise ConfigError(f"sparse feature {name!r}: mask applies to dense features only")
        nvec = 0
    if dsl is not None:
        if not isinstance(dsl, str):
            raise ConfigError(f"feature {name!r}: dsl={dsl!r}, expected an expression string")
        if cutoff or mask is not None:
            raise ConfigError(f"feature {name!r}: cutoff and mask apply to parsed features, not dsl ones")
        if ftype is FeatureType.dense and nvec != 1:
            raise ConfigError(f"dense dsl feature {name!r}: nvec={nvec!r}, expected 1 (one value per row)")
    return FeatureSpec(name, ftype, int(table), int(nvec), bool(serialized), dsl, int(cutoff), mask, origin)


class Schema:
    """The declared features of a reader, in declaration order, and the label width.

    ``tables`` is one more than the highest declared ``table``: table 0 holds one row per
    sample, tables 1.. are the aux tables of structured compression (docs/formats.md, protobuf samples).
    """

    def __init__(self, specs, label_count, tables=None):
        self.specs = tuple(specs)
        self.label_count = label_count
        self.by_name = {s.name: s for s in self.specs}
        self.sparse = tuple(s for s in self.specs if s.type is FeatureType.sparse)
        self.dense = tuple(s for s in self.specs if s.type is FeatureType.dense)
        self.tables = max((s.table for s in self.specs), default=0) + 1 if tables is None else tables

    @property
    def raw(self):
        """The features parsed from the input (without DSL ones), over the same tables."""
        return Schema([s for s in self.specs if s.dsl is None], self.label_count, self.tables)

    def sparse_in(self, table):
        """Sparse features of one table, in declaration order."""
        return tuple(s for s in self.sparse if s.table == table)

    def dense_in(self, table):
        """Dense features of one table, in declaration order."""
        return tuple(s for s in self.dense if s.table == table)


class DenseLayout:
    """Dense features laid side by side in one float32 row, as the kernels fill and read them.

    Attributes
    ----------
    nvec, width : int64 [D]
        Elements of each feature in the input, and its columns in the output (after ``mask``).
    first_col, first_elem : int64 [D]
        First output column, and first entry of ``elem_col``, of each feature.
    elem_col : int64 [sum(nvec)]
        Output column of every input element, -1 for elements the mask drops.
    total : int
        Columns of the row.
    """

    def __init__(self, specs):
        self.nvec = np.array([s.nvec for s in specs], np.int64)
        self.width = np.array([s.width for s in specs], np.int64)
        self.first_col = np.cumsum(self.width) - self.width
        self.first_elem = np.cumsum(self.nvec) - self.nvec
        cols = [np.where(s.kept_elements >= 0, s.kept_elements + first, -1) for s, first in zip(specs, self.first_col)]
        self.elem_col = np.concatenate(cols).astype(np.int64) if cols else np.empty(0, np.int64)
        self.total = int(self.width.sum())
