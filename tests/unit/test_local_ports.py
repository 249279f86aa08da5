"""Free loopback ports for the local servers."""

from __future__ import annotations

import socket

from tidelake.platform.local.ports import LOOPBACK, free_ports


def test_ports_taken_together_never_repeat_and_are_free_once_returned() -> None:
    ports = free_ports(64)
    assert len(set(ports)) == len(ports) == 64
    for port in ports:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((LOOPBACK, port))
