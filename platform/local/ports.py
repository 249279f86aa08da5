"""Loopback ports of the local servers: each binds 127.0.0.1 only, on a port free at start."""

from __future__ import annotations

import contextlib
import socket

LOOPBACK = "127.0.0.1"


def free_port() -> int:
    """A port on loopback that nothing listens on (bound, read, released)."""
    (port,) = free_ports(1)
    return port


def free_ports(count: int) -> list[int]:
    """`count` different ports on loopback that nothing listens on. Each is held until all are
    bound: ports taken one at a time can repeat (a server's filer was once given its volume
    server's port and did not start)."""
    with contextlib.ExitStack() as held:
        ports = []
        for _ in range(count):
            sock = held.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind((LOOPBACK, 0))
            ports.append(int(sock.getsockname()[1]))
        return ports


def accepts_connections(port: int) -> bool:
    """True if something on loopback accepts a TCP connection on port."""
    try:
        with socket.create_connection((LOOPBACK, port), timeout=0.5):
            return True
    except OSError:
        return False
