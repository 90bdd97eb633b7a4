"""The exception tree of ``ingest``: one root, located data errors, config errors that are also ValueError."""

__all__ = [
    "IngestError",
    "ConfigError",
    "SourceError",
    "DataError",
    "TextParseError",
    "GroupTooLargeError",
    "ReaderClosedError",
    "DslError",
    "DslLimitError",
    "StateError",
    "OpError",
    "UnseenFeatureWarning",
]


class IngestError(Exception):
    """Root of every error raised by ``ingest``."""


class ConfigError(IngestError, ValueError):
    """A reader option, feature declaration or command-line argument is invalid."""


class StateError(ConfigError):
    """A reader state that cannot be restored: not a state, another version, or saved over other input
    or options."""


class DslError(ConfigError):
    """A feature-DSL expression that does not parse or check; the message shows it with a caret.

    Attributes: ``feature``, ``expression`` and the 1-based ``column`` of the offending text; for a feature of a
    conf file (``load_feature_conf``), the file (``source``) and its 1-based ``line``, else None.
    """

    def __init__(self, message, feature=None, expression=None, column=None, source=None, line=None):
        super().__init__(message)
        self.feature = feature
        self.expression = expression
        self.column = column
        self.source = source
        self.line = line


class SourceError(IngestError, OSError):
    """A source could not be listed, opened or read (missing path, refused connection, corrupt stream)."""

    def __init__(self, message, source=None):
        super().__init__(message)
        self.source = source


# the keyword arguments of DataError that locate it beyond source and offset
_WHERE = frozenset(["line", "record", "column", "field", "feature"])


class DataError(IngestError):
    """Bad input data, located: source, line or record, byte offset and what was expected.

    Attributes
    ----------
    source : str
        URL or path of the source.
    line : int or None
        1-based line number (text formats).
    record : int or None
        0-based record index (length-prefixed formats).
    offset : int
        Byte offset of the offending text from the start of the (decompressed) source.
    column : int or None
        1-based column of the offending text in its line.
    field : str or None
        Name of the field (``sparse``, ``dense``, ``labels``...).
    feature : str or None
        Feature name when the error is inside one feature.
    text : str
        The offending text (shortened when long).
    expected : str
        What was expected there.
    kind : str
        A stable short name of the problem (``BAD_KEY``, ``TOO_FEW_FIELDS``...).
    """

    def __init__(self, reason, *, source, offset, expected, text="", context=None, kind=None, **where):
        """``where`` locates the error further: any of ``line``, ``record``, ``column``, ``field`` and
        ``feature`` (the attributes above; None when not given).  ``context`` is the whole bad line, which
        ``render`` shows; ``kind`` defaults to the class name."""
        unknown = where.keys() - _WHERE
        if unknown:
            raise TypeError(f"{type(self).__name__}.__init__() got an unexpected keyword argument {min(unknown)!r}")
        self.reason = reason
        self.kind = kind or type(self).__name__
        self.source = source
        self.offset = offset
        self.expected = expected
        self.text = text
        self.line = where.get("line")
        self.record = where.get("record")
        self.column = where.get("column")
        self.field = where.get("field")
        self.feature = where.get("feature")
        self.context = context
        super().__init__(self._message())

    def __reduce__(self):  # rebuilt from its attributes where it crosses processes (a Dask task's error)
        return _rebuilt, (type(self), self.__dict__)

    def _message(self):
        where = f"{self.source}:{self.line}" if self.line is not None else f"{self.source}"
        parts = [where]
        if self.record is not None:
            parts.append(f"record {self.record}")
        parts.append(f"byte {self.offset}")
        if self.column is not None:
            parts.append(f"column {self.column}")
        if self.field is not None:
            parts.append(f"field {self.field}" + (f" (feature {self.feature!r})" if self.feature else ""))
        return f"{', '.join(parts)}: {self.reason} {self.text!r}; expected {self.expected}"

    def render(self, width=100):
        """The message, then the bad line with a caret under the offending column."""
        if self.context is None or self.column is None:
            return str(self)
        ctx = self.context
        col = self.column - 1
        left = max(0, col - width // 2)
        snippet = ctx[left : left + width]
        return f"{self}\n  {snippet}\n  {' ' * (col - left)}^"


def _rebuilt(cls, attributes):
    error = cls.__new__(cls)
    error.__dict__.update(attributes)
    Exception.__init__(error, error._message())
    return error


class TextParseError(DataError):
    """A malformed line of a text sample file."""


class GroupTooLargeError(DataError):
    """With ``split_group(False)``, a sample group larger than the batch size."""


class DslLimitError(DataError):
    """A DSL expression whose result for one row has more pairs than the reader allows."""


class ReaderClosedError(IngestError):
    """The reader was shut down, or iterated before ``startup()``."""


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
        super().__init__(
            f"{source}, byte {offset}: op {op}: {reason}; in group {group} of the chunk at byte "
            f"{block_offset} (first sample id {sample_id!r})"
        )


class UnseenFeatureWarning(UserWarning):
    """A declared feature that an epoch of input never held (a misspelt name, or a feature of another table)."""
