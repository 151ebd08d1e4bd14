"""Polling with a deadline (never a bare sleep), and free loopback ports, for the tests."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from typing import Any


def wait_for(
    predicate: Callable[[], Any],
    timeout: float = 30.0,
    what: str = "",
    *,
    tolerate: tuple[type[BaseException], ...] = (),
    interval: float = 0.05,
) -> Any:
    """Poll until ``predicate`` returns something truthy; fail after ``timeout`` seconds.

    Exceptions listed in ``tolerate`` count as "not yet" (e.g. a server still starting).
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            value = predicate()
        except tolerate:
            value = None
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what or predicate}")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
