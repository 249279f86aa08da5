"""Where and how the ingest service listens: the address checked before gRPC binds it, TLS, and
who may call it.

The launcher checks the address before the service's JVM binds it, so that a taken port fails
at once, in one line that names the process holding it (the JVM could only say that the address
is in use). Plaintext is for loopback: on any other address the service needs a certificate, or
an explicit, logged opt-out.
"""

from __future__ import annotations

import errno
import ipaddress
import logging
import socket
from dataclasses import dataclass
from pathlib import Path

import psutil

from tidelake.streaming.errors import SetupError

log = logging.getLogger("tidelake.ingest")


INGEST_MAIN_CLASS = "dev.tidelake.ingest.IngestMain"
"""The ingest service's JVM entry point (jvm/ingest-service)."""


class ListenError(SetupError):
    """The service cannot listen as asked; the message says why and what to do."""


@dataclass(frozen=True)
class ServiceSecurity:
    """TLS and client authentication of the ingest service (all off by default)."""

    tls_cert: Path | None = None
    """PEM certificate chain the service presents (TIDELAKE_INGEST_TLS_CERT)."""
    tls_key: Path | None = None
    """Its PEM private key (TIDELAKE_INGEST_TLS_KEY)."""
    client_ca: Path | None = None
    """PEM CA bundle: when set, clients must present a certificate it signed (mutual TLS)."""
    token: str | None = None
    """When set, every CallEventService call must carry `authorization: Bearer <token>`."""
    allow_plaintext: bool = False
    """Serve without TLS on an address other than loopback (logged at start)."""

    @property
    def tls(self) -> bool:
        return self.tls_cert is not None


def check_security(security: ServiceSecurity, host: str) -> None:
    """ListenError for a setting that cannot work, naming it; a warning for an explicit
    plaintext opt-out beyond loopback."""
    if (security.tls_cert is None) != (security.tls_key is None):
        raise ListenError(
            "TIDELAKE_INGEST_TLS_CERT and TIDELAKE_INGEST_TLS_KEY go together: set both or neither"
        )
    if security.client_ca is not None and not security.tls:
        raise ListenError(
            "TIDELAKE_INGEST_CLIENT_CA (mutual TLS) needs TIDELAKE_INGEST_TLS_CERT and "
            "TIDELAKE_INGEST_TLS_KEY"
        )
    if security.token is not None and not security.token.strip():
        raise ListenError("TIDELAKE_INGEST_TOKEN is empty: set a token or unset it")
    if not security.tls:
        if not is_loopback(host):
            if not security.allow_plaintext:
                raise ListenError(
                    f"refusing to serve plaintext on {host}, which is not a loopback address: set "
                    "TIDELAKE_INGEST_TLS_CERT and TIDELAKE_INGEST_TLS_KEY, or pass "
                    "--allow-plaintext to accept that anyone on the network can read and send"
                )
            log.warning("serving plaintext on %s (--allow-plaintext): no TLS", host)
        return
    assert security.tls_cert is not None and security.tls_key is not None
    _read("TIDELAKE_INGEST_TLS_CERT", security.tls_cert)
    _read("TIDELAKE_INGEST_TLS_KEY", security.tls_key)
    if security.client_ca is not None:
        _read("TIDELAKE_INGEST_CLIENT_CA", security.client_ca)


def _read(setting: str, path: Path) -> bytes:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ListenError(f"{setting}: cannot read {path}: {exc.strerror}") from exc
    if b"-----BEGIN " not in data:
        raise ListenError(f"{setting}: {path} is not a PEM file")
    return data


def is_loopback(host: str) -> bool:
    """Whether every address the host name stands for is a loopback address."""
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except socket.gaierror:
        return False
    return all(ipaddress.ip_address(info[4][0]).is_loopback for info in infos)


def check_listen_address(host: str, port: int) -> None:
    """ListenError unless host:port can be listened on by this process alone."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError):
        raise ListenError(
            f"cannot listen on {host!r}: not an IP address or a host name this machine resolves"
        ) from None
    if port == 0:
        return
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as gRPC: TIME_WAIT is fine
        try:
            probe.bind(address)
        except OSError as exc:
            raise ListenError(_bind_problem(exc, host, port)) from None


def _bind_problem(exc: OSError, host: str, port: int) -> str:
    if exc.errno == errno.EADDRINUSE:
        return (
            f"port {port} on {host} is already taken{_holder(port)}: stop it or choose another "
            "--port"
        )
    if exc.errno == errno.EADDRNOTAVAIL:
        return f"cannot listen on {host}: no network interface of this machine has that address"
    if exc.errno == errno.EACCES:
        return f"cannot listen on port {port}: ports below 1024 need privileges"
    return f"cannot listen on {host}:{port}: {exc.strerror}"


def _holder(port: int) -> str:
    """' by pid N (command)' of the process listening on the port, when it can be found."""
    try:
        for conn in psutil.net_connections(kind="tcp"):
            if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == port:
                if conn.pid is None:
                    return ""
                return f" by pid {conn.pid} ({_describe(psutil.Process(conn.pid))})"
    except (psutil.Error, OSError):
        pass
    return ""


def _describe(process: psutil.Process) -> str:
    """A process as a user knows it: a JVM by its main class, tidelake's ingest service as
    such, with the command that started it."""
    args = process.cmdline()
    if not args or Path(args[0]).name != "java":
        return " ".join(args[:4])
    main = next(
        (
            a
            for a, before in zip(args[1:], args[:-1], strict=True)
            if not a.startswith("-") and before != "-cp"
        ),
        "",
    )
    if main != INGEST_MAIN_CLASS:
        return f"java {main}".strip()
    parent = process.parent()
    started_by = (
        f", started by pid {parent.pid}: {' '.join(parent.cmdline()[:4])}" if parent else ""
    )
    return f"the tidelake ingest service{started_by}"
