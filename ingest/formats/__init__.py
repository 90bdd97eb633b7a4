"""Sample formats by name: ``ingest.parsers.txt``, ``.pb``, ``.spb``.

A format front end turns one work unit into Blocks (``read_unit(unit, stop)``) and says
whether its files may be cut into byte ranges (``splittable``).  Front ends are imported
when first used.
"""

import importlib
from enum import Enum

from ..errors import ConfigError
from ..sources.compression import strip_suffix

__all__ = ["FileType", "file_type", "format_of", "make_format"]


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


# the front end of each format, imported when first used
_FRONT_ENDS = {
    FileType.txt: ".text:TextFormat",
    FileType.pb: ".protobuf:ProtobufFormat",
    FileType.spb: ".protobuf:SimpleProtobufFormat",
}


def make_format(ftype, schema, **options):
    """The front end for ``ftype`` over ``schema``."""
    module, _, name = _FRONT_ENDS[file_type(ftype)].partition(":")
    return getattr(importlib.import_module(module, __name__), name)(schema, **options)


def format_of(url, given=None, flag="--from/--to"):
    """The sample format of a path: ``given``, else its extension (after a compression suffix); ``flag`` is the
    option that gives it, for the error."""
    if given is not None:
        try:
            return FileType(given)
        except ValueError:
            raise ConfigError(f"format {given!r}: expected one of txt, pb, spb") from None
    name = strip_suffix(url.lower())
    for ftype in FileType:
        if name.endswith("." + ftype.value):
            return ftype
    if name.endswith((".dat", ".csv", ".text")):
        return FileType.txt
    raise ConfigError(f"{url}: cannot tell the sample format from the name; give {flag} txt|pb|spb")
