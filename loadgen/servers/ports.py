"""Free loopback ports for servers loadgen starts (emulators, test clusters)."""

from __future__ import annotations

import socket


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on right now (the OS picks it; a tiny race with other starters remains)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]
