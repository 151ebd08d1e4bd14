"""Client of the fakes' control API (``/_fake/...``), for tests and benchmarks.

Every fake (SageMaker, Vertex AI, Azure ML) answers the same control paths; rule shapes are
documented in :mod:`cloud.fake_http`. Example::

    ctl = FakeControl(env["STEPOP_SAGEMAKER_ENDPOINT"])
    ctl.reset()
    ctl.add_faults({"kind": "throttle", "operation": "DescribeTrainingJob", "count": 2})
    ...
    assert ctl.counters()["DescribeTrainingJob"] == 3

Only the standard library, so a benchmark can use it without the test tools.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


class ControlError(RuntimeError):
    """The control API refused a call (bad rule, unknown mode...)."""


class FakeControl:
    """Faults, counters, reset, runner mode and list page size of one fake, by its base URL."""

    def __init__(self, url: str, timeout: float = 10.0) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout

    def call(self, method: str, path: str, body: Any = None) -> Any:
        """``METHOD /_fake/<path>`` with a JSON body; the JSON answer (None when empty). For a
        fake's own controls (the Kubernetes fake's ``nodes``, ``queues``...)."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(f"{self.url}/_fake/{path}", data=data, method=method)
        req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as exc:
            raise ControlError(f"{method} /_fake/{path}: {exc.code} {exc.read()!r}") from exc
        return json.loads(raw) if raw else None

    def health(self) -> dict[str, Any]:
        """``{"ok": true, "service": ...}``."""
        return self.call("GET", "health")

    def counters(self) -> dict[str, int]:
        """API calls by operation name since the last reset."""
        return dict(self.call("GET", "counters")["counters"])

    def add_faults(self, *rules: dict[str, Any], replace: bool = False) -> list[dict[str, Any]]:
        """Add fault rules (or replace all); returns the rules now in force."""
        return self.call("POST", "faults", {"faults": list(rules), "replace": replace})["faults"]

    def faults(self) -> list[dict[str, Any]]:
        """The fault rules in force."""
        return self.call("GET", "faults")["faults"]

    def clear_faults(self) -> None:
        """Remove every fault rule."""
        self.call("DELETE", "faults")

    def reset(self, jobs: bool = False) -> None:
        """Clear faults and counters (and forget jobs with ``jobs=True``)."""
        self.call("POST", "reset", {"jobs": jobs})

    def mode(self, mode: str | None = None) -> str:
        """Read or set the runner mode ("process" or "container") of fakes that have one."""
        if mode is None:
            return self.call("GET", "mode")["mode"]
        return self.call("POST", "mode", {"mode": mode})["mode"]

    def page_size(self, size: int | None = None) -> int:
        """Read or set the most jobs one list page holds (Vertex AI and Azure ML fakes; a reset
        restores the service's own)."""
        if size is None:
            return int(self.call("GET", "page_size")["size"])
        return int(self.call("POST", "page_size", {"size": size})["size"])

    @contextmanager
    def faulted(self, *rules: dict[str, Any]) -> Iterator[FakeControl]:
        """Rules in force for a ``with`` block only."""
        self.add_faults(*rules)
        try:
            yield self
        finally:
            self.clear_faults()

    @contextmanager
    def in_mode(self, mode: str) -> Iterator[FakeControl]:
        """Runner mode for a ``with`` block only."""
        before = self.mode()
        self.mode(mode)
        try:
            yield self
        finally:
            self.mode(before)
