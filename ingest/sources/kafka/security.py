"""TLS and SASL for Kafka: the settings (kafka-python's names), where they come from, and the secured
connection of the direct client.

Settings come from ``kafka(...)`` / ``produce(...)`` arguments, else from ``INGEST_KAFKA_<SETTING>``
environment variables (``INGEST_KAFKA_SASL_PLAIN_PASSWORD``...), else from a file of ``setting=value`` lines
(``security_file=`` or ``INGEST_KAFKA_SECURITY_FILE``).  Passwords are kept as ``Secret``s, whose repr
and str hide them, from the moment they are read; only the code that hands them to kafka-python or to the
SASL exchange (``reveal``) sees the text.  TLS is the standard library's ``ssl`` (the context built as
kafka-python builds its own), SASL PLAIN and SCRAM are kafka-python's mechanisms, spoken here over
ingest's own sockets.
"""

import logging
import os
import ssl

from ...errors import ConfigError, SourceError

__all__ = [
    "Secret",
    "SECURITY_SETTINGS",
    "MECHANISMS",
    "security_settings",
    "reveal",
    "check_security",
    "direct_speaks",
    "tls_context",
    "secure",
]

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
SECRET_SETTINGS = ("sasl_plain_password", "ssl_password")
SECURITY_SETTINGS = (
    "security_protocol",
    "sasl_mechanism",
    "sasl_plain_username",
    "sasl_plain_password",
    "ssl_cafile",
    "ssl_certfile",
    "ssl_keyfile",
    "ssl_password",
    "ssl_crlfile",
    "ssl_check_hostname",
)
ENV_PREFIX = "INGEST_KAFKA_"
FILE_ENV = "INGEST_KAFKA_SECURITY_FILE"
_SASL_VERSIONS = (1, 1)  # SaslHandshake, SaslAuthenticate: v1 wraps the exchange in Kafka requests


class Secret:
    """A password: compared and pickled by value, shown as ``'***'`` (repr, str, format)."""

    __slots__ = ("_value",)

    def __init__(self, value):
        self._value = value.reveal() if isinstance(value, Secret) else str(value)

    def reveal(self):
        return self._value

    def __repr__(self):
        return "'***'"

    __str__ = __repr__

    def __format__(self, spec):
        return format(repr(self), spec)

    def __eq__(self, other):
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self):
        return hash(self._value)

    def __reduce__(self):
        return Secret, (self._value,)


def _from_file(path):
    """``{setting: value}`` of a file of ``setting=value`` lines (``#`` comments, blank lines)."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError as exc:
        raise ConfigError(f"kafka security file {path}: cannot read it: {exc.strerror or exc}") from None
    out = {}
    for number, line in enumerate(lines, 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, value = line.partition("=")
        name = name.strip().replace(".", "_")
        if not sep or name not in SECURITY_SETTINGS:
            raise ConfigError(
                f"kafka security file {path}, line {number}: expected setting=value with a setting among "
                f"{', '.join(SECURITY_SETTINGS)}; got {name!r}"
            )
        out[name] = value.strip()
    return out


def _typed(name, value):
    if name == "ssl_check_hostname" and isinstance(value, str):
        if value.lower() not in ("true", "false", "1", "0"):
            raise ConfigError(f"kafka(ssl_check_hostname={value!r}): expected true or false")
        return value.lower() in ("true", "1")
    if name in SECRET_SETTINGS and value is not None:
        return Secret(value)
    return value


def security_settings(config):
    """``config`` (consumer or producer settings) with its security settings completed from the environment
    and the security file, passwords as ``Secret``s, checked; ``security_file`` is taken out."""
    config = dict(config)
    path = config.pop("security_file", None) or os.environ.get(FILE_ENV)
    found = _from_file(path) if path else {}
    for name in SECURITY_SETTINGS:
        value = os.environ.get(ENV_PREFIX + name.upper())
        if value is not None:
            found[name] = value
    for name, value in found.items():
        config.setdefault(name, value)
    for name in SECURITY_SETTINGS:
        if name in config:
            config[name] = _typed(name, config[name])
    check_security(config)
    return config


def check_security(config):
    """ConfigError for security settings that do not go together (never showing a password)."""
    protocol = config.get("security_protocol", "PLAINTEXT")
    if protocol not in PROTOCOLS:
        raise ConfigError(f"kafka(security_protocol={protocol!r}): expected one of {', '.join(PROTOCOLS)}")
    mechanism = config.get("sasl_mechanism")
    if protocol.startswith("SASL_") and mechanism is None:
        raise ConfigError(f"kafka(security_protocol={protocol!r}): sasl_mechanism needed ({', '.join(MECHANISMS)})")
    if protocol.startswith("SASL_") and mechanism in MECHANISMS:
        missing = [n for n in ("sasl_plain_username", "sasl_plain_password") if not config.get(n)]
        if missing:
            raise ConfigError(
                f"kafka(security_protocol={protocol!r}): {' and '.join(missing)} needed (as arguments, "
                f"{', '.join(ENV_PREFIX + n.upper() for n in missing)} or a security file)"
            )
    for name in ("ssl_cafile", "ssl_certfile", "ssl_keyfile", "ssl_crlfile"):
        path = config.get(name)
        if path is not None and not os.path.isfile(path):
            raise ConfigError(f"kafka({name}={path!r}): no such file")


def direct_speaks(config):
    """Whether the direct client speaks ``config``'s SASL mechanism (it has none of kafka-python's others:
    GSSAPI, OAUTHBEARER, AWS_MSK_IAM)."""
    protocol = config.get("security_protocol", "PLAINTEXT")
    return not protocol.startswith("SASL_") or config.get("sasl_mechanism") in MECHANISMS


class _Redaction(logging.Filter):
    """Masks the passwords handed to kafka-python in its log records: at DEBUG it logs its requests, and a
    SASL PLAIN request holds the password."""

    def __init__(self):
        super().__init__()
        self.hidden = set()

    def filter(self, record):
        text = record.getMessage()
        masked = text
        for secret in self.hidden:
            masked = masked.replace(secret, "***")
        if masked != text:
            record.msg, record.args = masked, None
        return True


_REDACTION = _Redaction()


def _hide_in_logs(password):
    """Mask ``password`` (as text and as it shows in a bytes repr) in the records of kafka-python's loggers."""
    _REDACTION.hidden |= {password, repr(password.encode())[2:-1]}
    for name, logger in list(logging.Logger.manager.loggerDict.items()):
        if name.split(".")[0] == "kafka" and isinstance(logger, logging.Logger) and _REDACTION not in logger.filters:
            logger.addFilter(_REDACTION)


def reveal(config):
    """``config`` with its passwords as text, for kafka-python (whose log records will not show them)."""
    out = {}
    for name, value in config.items():
        if isinstance(value, Secret):
            value = value.reveal()
            _hide_in_logs(value)
        out[name] = value
    return out


def tls_context(config):
    """The ``ssl.SSLContext`` of ``config``'s ssl_* settings, built as kafka-python builds its own (TLS 1.2+,
    the CA file or the system's CAs, a client certificate, a CRL); None without TLS."""
    if config.get("security_protocol", "PLAINTEXT") not in ("SSL", "SASL_SSL"):
        return None
    from kafka.net.transport import KafkaSSLTransport

    settings = {**KafkaSSLTransport.DEFAULT_CONFIG, **{k: v for k, v in reveal(config).items() if k.startswith("ssl_")}}
    try:
        return KafkaSSLTransport._build_ssl_context(settings)  # noqa: SLF001 - the one place it is built
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"kafka TLS settings: cannot load the certificates or key: {exc}") from None


def broker_error(broker, what):
    """The SourceError of a broker that refused this client for good (no retry will help)."""
    return SourceError(f"kafka broker {broker}: {what}", source=broker)


def secure(conn, host, port, context, config):
    """Make ``conn`` (a connection whose ``sock`` is connected to ``host:port``) speak TLS (``context``) and
    SASL as ``config`` says.  A certificate that does not verify, a TLS handshake refused and a SASL exchange
    refused are ``SourceError``s naming the broker (no retry will help); a connection lost on the way is an
    ``OSError``, as it is for any request."""
    broker = f"{host}:{port}"
    if context is not None:
        try:
            conn.sock = context.wrap_socket(conn.sock, server_hostname=host)
        except ssl.SSLCertVerificationError as exc:
            raise broker_error(broker, f"TLS: the broker's certificate does not verify: {exc.verify_message}") from None
        except (ssl.SSLEOFError, ssl.SSLZeroReturnError, ssl.SSLSyscallError):
            raise
        except ssl.SSLError as exc:
            raise broker_error(broker, f"TLS handshake failed: {exc.reason or exc}") from None
    if config.get("security_protocol", "PLAINTEXT").startswith("SASL_"):
        _authenticate(conn, host, broker, config)


def _authenticate(conn, host, broker, config):
    """SASL over Kafka requests (SaslHandshake, then SaslAuthenticate rounds), the mechanism kafka-python's."""
    from kafka.errors import for_code
    from kafka.net.sasl import get_sasl_mechanism
    from kafka.protocol.sasl import (
        SaslAuthenticateRequest,
        SaslAuthenticateResponse,
        SaslHandshakeRequest,
        SaslHandshakeResponse,
    )

    name = config["sasl_mechanism"]
    user = config.get("sasl_plain_username")
    got = conn.call(SaslHandshakeRequest(mechanism=name), SaslHandshakeResponse, _SASL_VERSIONS[0])
    if got.error_code:
        raise broker_error(
            broker,
            f"SASL mechanism {name} refused ({for_code(got.error_code).__name__}; the listener offers "
            f"{', '.join(got.mechanisms) or 'none'})",
        )
    mechanism = get_sasl_mechanism(name)(host=host, **reveal(config))
    try:
        while not mechanism.is_done():
            answer = conn.call(
                SaslAuthenticateRequest(auth_bytes=mechanism.auth_bytes()), SaslAuthenticateResponse, _SASL_VERSIONS[1]
            )
            if answer.error_code:
                raise broker_error(
                    broker,
                    f"SASL {name} authentication of user {user!r} failed: {answer.error_message or ''} "
                    f"({for_code(answer.error_code).__name__})",
                )
            mechanism.receive(answer.auth_bytes)
    except ValueError as exc:  # kafka-python's SCRAM client: a server message that does not check
        raise broker_error(broker, f"SASL {name}: the broker's answer does not check: {exc}") from None
    if not mechanism.is_authenticated():
        raise broker_error(broker, f"SASL {name} authentication of user {user!r} failed")
