"""Routing: :class:`Request` and :class:`Response` as a route handler sees them, :class:`Router`.

Also :func:`rfc3339`, the timestamp format Google's and Azure's answers use.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Request:
    """One parsed HTTP request, as a route handler sees it."""

    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes
    match: re.Match[str] | None = None
    base_url: str = ""  # scheme://host:port as the client reached us

    def json(self) -> Any:
        """The body as JSON (None when empty); raises ValueError on malformed JSON."""
        if not self.body.strip():
            return None
        return json.loads(self.body)

    def arg(self, name: str, default: str | None = None) -> str | None:
        """One query parameter."""
        values = self.query.get(name)
        return values[0] if values else default


@dataclass
class Response:
    """What a route handler answers.

    ``stream``, when set, is the body: sent chunk by chunk (chunked transfer encoding) as the
    iterator yields, for answers that stay open (a Kubernetes watch, a followed log). An empty
    chunk sends nothing: it lets the server notice a client that went away while nothing
    happened, so a generator that waits should yield one every second or so.
    """

    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    raw: bytes | None = None
    content_type: str = "application/json; charset=utf-8"
    stream: Iterator[bytes] | None = None


Handler = Callable[[Request], Response]


@dataclass
class Route:
    method: str
    pattern: re.Pattern[str]
    operation: str
    handler: Handler


class Router:
    """Method + path regex -> handler, with the operation name each call is counted under."""

    def __init__(self) -> None:
        self.routes: list[Route] = []

    def add(self, method: str, pattern: str, operation: str, handler: Handler) -> None:
        self.routes.append(Route(method, re.compile(f"^{pattern}$"), operation, handler))

    def find(self, method: str, path: str) -> tuple[Route | None, re.Match[str] | None, bool]:
        """The route, its match, and whether the path exists under another method."""
        other = False
        for route in self.routes:
            m = route.pattern.match(path)
            if m is None:
                continue
            if route.method == method:
                return route, m, True
            other = True
        return None, None, other


def rfc3339(ts: float | None) -> str | None:
    """Epoch seconds -> RFC 3339 UTC with microseconds (what Google and Azure both answer)."""
    if ts is None:
        return None
    whole = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ts))
    return f"{whole}.{int((ts % 1) * 1e6):06d}Z"
