"""The one way ingest turns a URL into a filesystem: fsspec's, except that ``hdfs://`` is served by the client
``hdfs.py`` chose.  Nothing is registered in fsspec's global registry, so importing or running ingest changes
nothing for another library of the same process that opens URLs with fsspec."""

import os
import tempfile

import fsspec.core

from ..errors import ConfigError, SourceError
from . import hdfs
from .registry import schemes

__all__ = ["url_to_fs", "open_url", "protocol_of", "check_writable"]


def protocol_of(url):
    """The URL scheme of ``url`` (``file`` for a plain path)."""
    return fsspec.core.split_protocol(str(url))[0] or "file"


def url_to_fs(url):
    """``(filesystem, path)`` of ``url``, as ``fsspec.core.url_to_fs`` gives them but for ``hdfs://``."""
    url = str(url)
    if protocol_of(url) == "hdfs":
        cls = hdfs.filesystem_class()
        return _hdfs_filesystem(cls, cls._get_kwargs_from_urls(url), url), cls._strip_protocol(url)
    try:
        return fsspec.core.url_to_fs(url)
    except ValueError:  # fsspec: "Protocol not known"
        own = "".join(f"{scheme}://, " for scheme in schemes())
        raise SourceError(
            f"{url}: unknown URL scheme {protocol_of(url)!r}; ingest reads local paths, file://, "
            f"hdfs://, {own}and any fsspec protocol whose package is installed "
            f"({', '.join(sorted(fsspec.available_protocols()))})",
            source=url,
        ) from None
    except ImportError as exc:
        raise SourceError(
            f"{url}: the {protocol_of(url)}:// filesystem of fsspec needs a package that is not installed ({exc})",
            source=url,
        ) from exc


# HDFS filesystems by process and arguments, kept out of fsspec's instance cache: fsspec's fork handler empties
# that cache in a forked child, and dropping an hdfs-native client there waits for its runtime's threads, which a
# child does not have (a DataLoader worker, or Ray starting its processes, hung).  Entries are never removed, so
# a child never drops the clients it inherited; it makes its own.
_HDFS_FILESYSTEMS: dict = {}


def _hdfs_filesystem(cls, kwargs, url):
    credentials = hdfs.kerberos_credentials()
    # A client keeps the Kerberos identity it logged in with: other credentials, or another ticket cache, are
    # another client.
    identity = (repr(sorted(credentials.items())), os.environ.get("KRB5CCNAME"))
    key = (os.getpid(), cls, repr(sorted(kwargs.items())), identity)
    fs = _HDFS_FILESYSTEMS.get(key)
    if fs is None:  # threads that connect at once all use the first client kept (no lock: it would outlive a fork)
        fs = _HDFS_FILESYSTEMS.setdefault(key, hdfs.connect(cls, kwargs, url, credentials))
    return fs


def open_url(url, mode="rb", **kwargs):
    """``url`` opened in ``mode`` (a file object; close it, or use it as a context manager).  A local file is read
    with Python's own ``open``: fsspec's parsing of the URL and its file wrapper cost ~200 us of CPU a unit in a
    running reader (its code runs cold between chunks), ~14 us a pb batch."""
    if mode == "rb" and not kwargs and protocol_of(url) == "file":
        return open(fsspec.core.strip_protocol(str(url)), "rb")
    fs, path = url_to_fs(url)
    return fs.open(path, mode, **kwargs)


def check_writable(url, what):
    """A ``ConfigError`` now, rather than after a long run, when the local file ``url`` cannot be written (``what``
    names it: ``"--timeline"``...): a folder, a path under a file, or a place where no file can be made (tried
    with a temporary file).  URLs of other stores are left to the store, which answers when written."""
    if protocol_of(url) != "file":
        return
    path = os.path.abspath(fsspec.core.strip_protocol(str(url)))
    if os.path.isdir(path):
        raise ConfigError(f"{what} {url}: is a directory, expected a file to write")
    folder = os.path.dirname(path)
    while not os.path.exists(folder):  # folders that do not exist yet are made
        folder = os.path.dirname(folder)
    if not os.path.isdir(folder):
        raise ConfigError(f"{what} {url}: cannot write there, {folder} is a file, not a folder")
    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
        if os.path.exists(path):
            with open(path, "ab"):
                pass
    except OSError as exc:
        raise ConfigError(f"{what} {url}: cannot write there ({exc.strerror or exc})") from None
