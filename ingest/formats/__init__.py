"""Sample formats by name: ``ingest.parsers.txt``, ``.pb``, ``.spb``.

A format front end turns one work unit into Blocks (``read_unit(unit, stop)``) and says
whether its files may be cut into byte ranges (``splittable``).  Front ends are imported
when first used.
"""
from enum import Enum

from ..errors import ConfigError

__all__ = ["FileType", "file_type", "make_format"]


class FileType(str, Enum):
    txt = "txt"
    pb = "pb"
    spb = "spb"


def file_type(value):
    """The FileType for a member or its name; anything else is a ConfigError."""
    try:
        return FileType(value)
    except ValueError:
        raise ConfigError(f"file_type={value!r}: expected one of {[t.value for t in FileType]}") from None


def make_format(ftype, schema, **options):
    """The front end for ``ftype`` over ``schema``."""
    ftype = file_type(ftype)
    if ftype is FileType.txt:
        from .text import TextFormat
        return TextFormat(schema, **options)
    from .protobuf import ProtobufFormat
    return ProtobufFormat(schema, simple=ftype is FileType.spb, **options)
