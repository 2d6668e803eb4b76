"""Loopback ports."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A loopback port the kernel reported free a moment ago (another process may take it
    before the caller binds it: callers that start a server on it try again)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
