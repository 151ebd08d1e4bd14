"""The fault rules of a fake's control API: :class:`FaultBook` (the kinds: :mod:`cloud.fake_http`).

Rates are deterministic (an accumulator, not a random draw), so a rule with ``rate: 0.5`` fires on
exactly every second call.
"""

from __future__ import annotations

import itertools
import threading
from typing import Any

JOB_FAULT_KINDS = ("provisioning_delay", "job_failure", "preempt", "log_delay")
REQUEST_FAULT_KINDS = ("throttle", "error")


class FaultBook:
    """Fault rules in force, with deterministic rates."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._serials = itertools.count(1)
        self.rules: list[dict[str, Any]] = []

    @staticmethod
    def validate(rule: Any) -> dict[str, Any]:
        if not isinstance(rule, dict) or "kind" not in rule:
            raise ValueError('a fault rule is an object with a "kind"')
        kind = rule["kind"]
        if kind not in REQUEST_FAULT_KINDS + JOB_FAULT_KINDS:
            raise ValueError(
                f"fault kind {kind!r}: use one of {REQUEST_FAULT_KINDS + JOB_FAULT_KINDS}"
            )
        rate = float(rule.get("rate", 1.0))
        if not 0.0 <= rate <= 1.0:
            raise ValueError(f"fault rate {rate}: use 0..1")
        clean = dict(rule)
        clean["rate"] = rate
        clean.setdefault("operation", "*")
        if kind in ("job_failure", "preempt"):  # "the next matching job": once, unless told
            clean.setdefault("count", 1)
        clean["_acc"] = 0.0
        return clean

    def add(self, rules: list[Any], replace: bool = False) -> None:
        clean = [self.validate(r) for r in rules]
        with self._lock:
            if replace:
                self.rules = []
            for rule in clean:
                rule["_serial"] = next(self._serials)
            self.rules.extend(clean)

    def clear(self) -> None:
        with self._lock:
            self.rules = []

    def public(self) -> list[dict[str, Any]]:
        with self._lock:
            return [{k: v for k, v in r.items() if not k.startswith("_")} for r in self.rules]

    def _fire(self, rule: dict[str, Any]) -> bool:
        """Deterministic rate: fires whenever the accumulated rate crosses 1."""
        rule["_acc"] += rule["rate"]
        if rule["_acc"] + 1e-9 < 1.0:
            return False
        rule["_acc"] -= 1.0
        if rule.get("count") is not None:
            rule["count"] = int(rule["count"]) - 1
            if rule["count"] <= 0:
                self.rules.remove(rule)
        return True

    def request_fault(self, operation: str) -> dict[str, Any] | None:
        """The throttle/error rule that fires for this call, if any."""
        with self._lock:
            for rule in list(self.rules):
                if rule["kind"] not in REQUEST_FAULT_KINDS:
                    continue
                if rule["operation"] not in ("*", operation):
                    continue
                if self._fire(rule):
                    return dict(rule)
        return None

    def take_job_fault(
        self, kind: str, name: str, seen: set[int] | None = None
    ) -> dict[str, Any] | None:
        """Consume a job-level rule of ``kind`` matching the job ``name`` (by substring).

        With ``seen``, only the rules not in it are considered, and each one considered is added
        to it: a running attempt polls with one set of its own, so a rule added at any time
        during the attempt is taken at the next poll, and a rule's ``rate`` is rolled once per
        attempt, not once per poll.
        """
        with self._lock:
            for rule in list(self.rules):
                if rule["kind"] != kind:
                    continue
                match = rule.get("match")
                if match and match not in name:
                    continue
                if seen is not None:
                    if rule["_serial"] in seen:
                        continue
                    seen.add(rule["_serial"])
                if self._fire(rule):
                    return dict(rule)
        return None

    def seconds(self, kind: str) -> float:
        """Sum of ``seconds`` of every standing rule of ``kind`` (delays do not retire)."""
        with self._lock:
            return sum(float(r.get("seconds", 0)) for r in self.rules if r["kind"] == kind)
