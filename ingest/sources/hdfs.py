"""Which client serves ``hdfs://`` URLs: hdfs-native, else pyarrow's (libhdfs), else WebHDFS.

``INGEST_HDFS_CLIENT`` (``native``, ``pyarrow``, ``webhdfs``; default ``auto``, the first of them that
is installed) picks one for the process; ``use_hdfs_client()`` changes it.  ingest opens every URL
through ``filesystems.url_to_fs``, which asks ``filesystem_class()`` here for ``hdfs://``: fsspec's own
registry is left as it is, so another library's ``fsspec.open("hdfs://...")`` in the same process gets
what it would get without ingest.  URLs stay ``hdfs://namenode:port/path`` whichever client serves them.
A client's modules are imported when it is first used.  WebHDFS is the REST API on the NameNode's HTTP
address: ``INGEST_WEBHDFS_URL`` when set, else ``dfs.namenode.http-address`` of
``$HADOOP_CONF_DIR/hdfs-site.xml``, else the NameNode's host on 9870.  ``check_reachable`` probes the
address the client in use connects to before a path is read.

Kerberos (hdfs-native only): with no settings, hdfs-native takes the ticket of the default credential cache
(``KRB5CCNAME``, what ``kinit`` left); ``INGEST_HDFS_PRINCIPAL`` with ``INGEST_HDFS_KEYTAB`` has it log in from
that keytab itself, into a private in-memory cache (hdfs-native's own keytab login).  ``KRB5_CONFIG`` names
the KDC, as for any MIT Kerberos client.  ``connect`` asks the NameNode once when a client is made, so that a
secured cluster without credentials is a ``SourceError`` saying what to do, not an error from inside a read.
"""

import ctypes.util
import functools
import importlib.util
import os
import re
import socket
import urllib.parse
import xml.etree.ElementTree as ElementTree

from ..errors import ConfigError, SourceError
from ..optional import require

__all__ = [
    "CLIENTS",
    "check_reachable",
    "connect",
    "filesystem_class",
    "hdfs_client",
    "kerberos_credentials",
    "use_hdfs_client",
    "webhdfs_address",
]

CLIENTS = ("native", "pyarrow", "webhdfs")
_WEBHDFS_PORT = 9870  # Hadoop 3's default NameNode HTTP port
_current = None  # the client chosen, once a URL or use_hdfs_client() asked


def _libhdfs():
    """Where pyarrow would load libhdfs from (its own search order), or None."""
    for var, sub in (("ARROW_LIBHDFS_DIR", ""), ("HADOOP_HOME", "lib/native")):
        if os.environ.get(var):
            path = os.path.join(os.environ[var], sub, "libhdfs.so")
            if os.path.exists(path):
                return path
    return ctypes.util.find_library("hdfs")


def _missing(client):
    """Why ``client`` cannot serve here, or None when it can."""
    if client == "native" and importlib.util.find_spec("hdfs_native") is None:
        return "hdfs-native is not installed (pip install 'ingest[hdfs]')"
    if client == "pyarrow" and _libhdfs() is None:
        return "libhdfs.so is not found (set ARROW_LIBHDFS_DIR or HADOOP_HOME, and CLASSPATH for its JVM)"
    if client == "webhdfs" and importlib.util.find_spec("requests") is None:
        return "requests is not installed (pip install 'ingest[webhdfs]')"
    return None


def use_hdfs_client(client="auto"):
    """Serve ``hdfs://`` URLs with ``client`` (``auto``: the first of CLIENTS installed); returns its name."""
    global _current
    if client != "auto" and client not in CLIENTS:
        raise ConfigError(f"hdfs client {client!r}: expected auto or one of {', '.join(CLIENTS)}")
    if client == "auto":
        client = next((c for c in CLIENTS if _missing(c) is None), None)
        if client is None:
            raise ConfigError(
                "no HDFS client is installed: pip install 'ingest[hdfs]' (hdfs-native), or set "
                "ARROW_LIBHDFS_DIR / HADOOP_HOME for pyarrow's libhdfs client, or pip install "
                "'ingest[webhdfs]' for WebHDFS"
            )
    elif (why := _missing(client)) is not None:
        raise ConfigError(f"hdfs client {client!r}: {why}")
    _current = client
    return client


def hdfs_client():
    """The client serving ``hdfs://`` URLs (chosen by ``INGEST_HDFS_CLIENT`` on first use)."""
    if _current is None:
        use_hdfs_client(os.environ.get("INGEST_HDFS_CLIENT", "auto"))
    return _current


def filesystem_class():
    """The fsspec filesystem class of the client serving ``hdfs://`` URLs."""
    client = hdfs_client()
    if client == "native":
        return require("hdfs_native.fsspec", "hdfs-native", "hdfs").HdfsFileSystem
    if client == "pyarrow":
        from fsspec.implementations.arrow import HadoopFileSystem

        return HadoopFileSystem
    return _webhdfs_as_hdfs()


def webhdfs_address(namenode_host):
    """``(host, port)`` of the WebHDFS API of the NameNode on ``namenode_host``."""
    url = os.environ.get("INGEST_WEBHDFS_URL")
    if url:
        parts = urllib.parse.urlsplit(url)
        return parts.hostname, parts.port or _WEBHDFS_PORT
    if os.environ.get("HADOOP_CONF_DIR"):
        site = os.path.join(os.environ["HADOOP_CONF_DIR"], "hdfs-site.xml")
        try:
            mtime_ns = os.stat(site).st_mtime_ns
        except FileNotFoundError:
            mtime_ns = None
        found = None if mtime_ns is None else _site_http_address(site, mtime_ns)
        if found is not None:
            host, port = found
            return (namenode_host if host in ("", "0.0.0.0") else host), port
    return namenode_host, _WEBHDFS_PORT


@functools.lru_cache(maxsize=4)
def _site_http_address(site, mtime_ns):
    """``(host, port)`` of ``dfs.namenode.http-address`` in the hdfs-site.xml ``site``, or None; parsed once per
    version of the file (``mtime_ns``), not at every URL opened."""
    for prop in ElementTree.parse(site).getroot().iter("property"):
        if prop.findtext("name") == "dfs.namenode.http-address":
            host, _, port = (prop.findtext("value") or "").strip().rpartition(":")
            if port.isdigit():
                return host, int(port)
    return None


# hdfs-native retries a refused NameNode for minutes: a path's NameNode is probed first, this long
_CONNECT_TIMEOUT = 10.0
_HDFS_DEFAULT_PORT = 8020


def check_reachable(path):
    """A clear SourceError now, rather than a hang, when the NameNode of an ``hdfs://`` path is unreachable.

    A host without a port that does not resolve is taken for an HA nameservice and left to the client.
    """
    parts = urllib.parse.urlsplit(path)
    if parts.scheme not in ("hdfs", "viewfs") or not parts.hostname:
        return
    host, port = parts.hostname, parts.port or _HDFS_DEFAULT_PORT
    what = "the HDFS NameNode"
    if parts.scheme == "hdfs" and hdfs_client() == "webhdfs":
        (host, port), what = webhdfs_address(host), "WebHDFS"
    elif parts.port is None:
        try:
            socket.getaddrinfo(host, port)
        except socket.gaierror:
            return
    try:
        socket.create_connection((host, port), timeout=_CONNECT_TIMEOUT).close()
    except OSError as exc:
        raise SourceError(f"{path}: cannot connect to {what} at {host}:{port} ({exc})", source=path) from exc


@functools.cache
def _webhdfs_as_hdfs():
    """fsspec's WebHDFS serving ``hdfs://namenode:port/path``: the same paths over the NameNode's REST API
    (a class made on first use: fsspec's WebHDFS module needs ``requests``)."""
    webhdfs = require("fsspec.implementations.webhdfs", "requests", "webhdfs")

    class WebHdfsAsHdfs(webhdfs.WebHDFS):
        protocol = "hdfs"

        def __init__(self, host, port=None, namenode="", **kwargs):
            super().__init__(host, port=port, **kwargs)
            self.namenode = namenode  # host:port of the URLs, kept in the URLs this gives back

        @staticmethod
        def _get_kwargs_from_urls(urlpath):
            parts = urllib.parse.urlsplit(urlpath)
            host = parts.hostname or "localhost"
            http_host, http_port = webhdfs_address(host)
            return {"host": http_host, "port": http_port, "namenode": parts.netloc or host}

        def unstrip_protocol(self, name):
            return name if name.startswith("hdfs://") else f"hdfs://{self.namenode}{name}"

    return WebHdfsAsHdfs


PRINCIPAL_VAR = "INGEST_HDFS_PRINCIPAL"
KEYTAB_VAR = "INGEST_HDFS_KEYTAB"


def kerberos_credentials():
    """hdfs-native's Kerberos keyword arguments from ``INGEST_HDFS_PRINCIPAL`` and ``INGEST_HDFS_KEYTAB``;
    ``{}`` when neither is set (the default ticket cache).  A principal alone picks that identity from the
    default cache; a keytab needs the principal to log in as."""
    principal = os.environ.get(PRINCIPAL_VAR) or None
    keytab = os.environ.get(KEYTAB_VAR) or None
    if principal is None and keytab is None:
        return {}
    if principal is None:
        raise ConfigError(f"{KEYTAB_VAR}={keytab}: set {PRINCIPAL_VAR} too, the principal of that keytab to log in as")
    credentials = {"kerberos_principal": principal}
    if keytab is not None:
        if not os.path.isfile(keytab) or not os.access(keytab, os.R_OK):
            raise ConfigError(f"{KEYTAB_VAR}={keytab}: expected a readable keytab file")
        credentials["kerberos_keytab"] = os.path.abspath(keytab)
    return credentials


def connect(cls, kwargs, url, credentials):
    """A filesystem of ``cls`` (``filesystem_class()``) for the NameNode of ``url`` (``kwargs``, from the URL).

    With hdfs-native, its client logs in with ``credentials`` (``kerberos_credentials()``) and the NameNode is
    asked for ``/`` once: a secured NameNode without a ticket, or refusing the one given, is a ``SourceError``
    now, naming the NameNode and what to do, and an unreachable one is ``check_reachable``'s error.
    """
    native = hdfs_client() == "native"
    if credentials and not native:
        raise ConfigError(
            f"{PRINCIPAL_VAR} / {KEYTAB_VAR}: Kerberos is supported with the hdfs-native client only, "
            f"this process uses {hdfs_client()!r} (pip install 'ingest[hdfs]')"
        )
    fs = cls(skip_instance_cache=True, **kwargs)
    if native:
        if credentials:
            fs.client = _native_client(fs, credentials)
        check_reachable(url)  # hdfs-native retries a refused NameNode for minutes
        _check_login(fs, url)
    return fs


def _native_client(fs, credentials):
    """The hdfs-native client of ``fs`` (its URL and settings) logged in with ``credentials``: hdfs-native's
    fsspec class passes no Kerberos arguments, so its client is replaced by one that has them."""
    from hdfs_native import Client  # 0.14.5 and later take Kerberos credentials (pyproject.toml)

    url = f"hdfs://{fs.host or ''}{f':{fs.port}' if fs.host and fs.port else ''}"
    config = {k: v for k, v in fs.storage_options.items() if k not in ("host", "port")}
    try:
        return Client(url, config, **credentials)
    except (RuntimeError, ValueError) as exc:
        raise ConfigError(f"{PRINCIPAL_VAR} / {KEYTAB_VAR}: hdfs-native refused them ({exc})") from exc


# what hdfs-native's errors say when the SASL / Kerberos exchange with a NameNode failed
_AUTH_FAILED = re.compile(r"GSSAPI|GSS_S_|SASL|Kerberos|AccessControlException|authenticat", re.IGNORECASE)


def _check_login(fs, url):
    namenode = f"{fs.host}:{fs.port or _HDFS_DEFAULT_PORT}" if fs.host else "of fs.defaultFS"
    try:
        fs.client.get_file_info("/")
    except (OSError, RuntimeError) as exc:
        text = str(exc)
        if not _AUTH_FAILED.search(text):
            raise SourceError(f"{url}: the HDFS NameNode {namenode} did not answer ({text})", source=url) from exc
        cause = re.findall(r'"([^"]+)"', text)  # GSSAPIError(codes, minor, "the library's message")
        raise SourceError(
            f"{url}: the HDFS NameNode {namenode} wants Kerberos and this client could not log in "
            f"({cause[-1] if cause else text}); run kinit (the ticket cache is KRB5CCNAME), or set "
            f"{PRINCIPAL_VAR} and {KEYTAB_VAR} to log in from a keytab (KRB5_CONFIG names the KDC)",
            source=url,
        ) from exc
