"""Which ``Source`` reads a URL, by its scheme: ingest's own, those of other packages (entry point group
``ingest.sources``, ``scheme = "module:Class"``), and files through fsspec for every other scheme.  Like fsspec's
registry it is lazy: a source's module is imported when a URL of its scheme is first read."""

import functools
import importlib
import importlib.metadata

from ..errors import ConfigError
from .base import Source

__all__ = ["ENTRY_POINTS", "register", "source_for", "scheme_of", "schemes"]

ENTRY_POINTS = "ingest.sources"

# scheme -> "module:Class"; files (the fallback) serve every scheme not named here
_KNOWN = {"kafka": "ingest.sources.kafka:KafkaSource"}
_FILES = "ingest.sources.files:FileSource"


def scheme_of(url) -> str:
    """The URL scheme of ``url`` (``file`` for a plain path)."""
    url = str(url)
    scheme, sep, _ = url.partition("://")
    return scheme.lower() if sep and scheme.isidentifier() else "file"


def register(scheme, target, clobber=False):
    """Have ``target`` (a ``Source`` class, or ``"module:Class"`` imported on first use) read ``scheme://`` URLs."""
    scheme = scheme.lower()
    if scheme in _registered() and not clobber:
        raise ConfigError(
            f"a source is registered for {scheme}:// already ({_registered()[scheme]}); pass clobber=True to replace it"
        )
    _registered()[scheme] = target
    _load.cache_clear()


@functools.cache
def _registered():
    found = {ep.name.lower(): ep.value for ep in importlib.metadata.entry_points(group=ENTRY_POINTS)}
    return {**found, **_KNOWN}  # ingest's own schemes are not taken over by a plug-in


def schemes():
    """The schemes with a source of their own (every other one is read as files through fsspec)."""
    return sorted(_registered())


@functools.cache
def _load(target) -> Source:
    if isinstance(target, str):
        module, _, name = target.partition(":")
        target = getattr(importlib.import_module(module), name)
    return target()


def source_for(url) -> Source:
    """The ``Source`` of ``url``."""
    return _load(_registered().get(scheme_of(url), _FILES))
