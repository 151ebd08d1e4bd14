"""The fault rules of a fake's control API: :class:`FaultBook` (the kinds: :mod:`cloud.fake_http`).

Rates are deterministic (an accumulator, not a random draw), so a rule with ``rate: 0.5`` fires on
exactly every second call.

A ``capacity`` rule is matched on the job's machine (and region), not on its name: see
:meth:`FaultBook.take_capacity`. Each fake names the points where its service signals a shortage
(:attr:`FaultBook.capacity_stages`, the first being the default of a rule's ``at``); a fake that
names none refuses the kind.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterable
from typing import Any

JOB_FAULT_KINDS = ("provisioning_delay", "job_failure", "preempt", "log_delay", "capacity")
REQUEST_FAULT_KINDS = ("throttle", "error")


class FaultBook:
    """Fault rules in force, with deterministic rates."""

    def __init__(self, capacity_stages: tuple[str, ...] = ()) -> None:
        self._lock = threading.Lock()
        self._serials = itertools.count(1)
        self.rules: list[dict[str, Any]] = []
        # serials of the rules their ``count`` retired, until the next clear (:meth:`standing`)
        self._spent: set[int] = set()
        # where the service signals a capacity shortage ("create", "provision", "queue"...);
        # the first is a rule's default ``at``; none: the fake has no ``capacity`` fault
        self.capacity_stages = capacity_stages
        # kinds only this fake knows (Kubernetes: "evict"...) -> the default ``count`` of a rule
        # (None: no limit), taken with take_job_fault like the shared job kinds
        self.own_kinds: dict[str, int | None] = {}

    def validate(self, rule: Any) -> dict[str, Any]:
        if not isinstance(rule, dict) or "kind" not in rule:
            raise ValueError('a fault rule is an object with a "kind"')
        kind = rule["kind"]
        kinds = REQUEST_FAULT_KINDS + JOB_FAULT_KINDS + tuple(self.own_kinds)
        if kind not in kinds:
            raise ValueError(f"fault kind {kind!r}: use one of {kinds}")
        rate = float(rule.get("rate", 1.0))
        if not 0.0 <= rate <= 1.0:
            raise ValueError(f"fault rate {rate}: use 0..1")
        clean = dict(rule)
        clean["rate"] = rate
        clean.setdefault("operation", "*")
        if kind in ("job_failure", "preempt"):  # "the next matching job": once, unless told
            clean.setdefault("count", 1)
        if self.own_kinds.get(kind) is not None:
            clean.setdefault("count", self.own_kinds[kind])
        if kind == "capacity":
            self._validate_capacity(clean)
        clean["_acc"] = 0.0
        return clean

    def _validate_capacity(self, clean: dict[str, Any]) -> None:
        """``machine`` (required), ``at`` (one of the fake's stages), ``region``; every matching
        job unless ``count`` says how many."""
        if not self.capacity_stages:
            raise ValueError("fault kind 'capacity': this fake has no capacity to run short of")
        machine = clean.get("machine")
        if not isinstance(machine, str) or not machine.strip():
            raise ValueError('a capacity rule names the "machine" that runs short')
        at = clean.get("at") or self.capacity_stages[0]
        if at not in self.capacity_stages:
            raise ValueError(f"capacity at {at!r}: use one of {self.capacity_stages}")
        clean["at"] = at
        region = clean.get("region")
        if region is not None and not isinstance(region, str):
            raise ValueError('a capacity rule\'s "region" is a string')
        count = clean.get("count")
        if count is not None and (isinstance(count, bool) or not isinstance(count, int)
                                  or count < 1):  # fmt: skip
            raise ValueError(f"capacity count {count!r}: use a positive integer, or null for all")
        seconds = clean.get("seconds", 0)
        if isinstance(seconds, bool) or not isinstance(seconds, int | float) or seconds < 0:
            raise ValueError(f"capacity seconds {seconds!r}: use a number >= 0")

    def add(self, rules: list[Any], replace: bool = False) -> None:
        clean = [self.validate(r) for r in rules]
        with self._lock:
            if replace:
                self.rules = []
                self._spent = set()
            for rule in clean:
                rule["_serial"] = next(self._serials)
            self.rules.extend(clean)

    def clear(self) -> None:
        with self._lock:
            self.rules = []
            self._spent = set()

    def standing(self, serial: int) -> bool:
        """Whether the rule ``serial`` (a taken rule's ``_serial``) still holds for the jobs
        that took it: it is in force, or its ``count`` retired it and no clear (``DELETE
        /_fake/faults``, a reset, a replacing add) has come since. A fake that holds a job for
        as long as the shortage it met lasts polls this."""
        with self._lock:
            return serial in self._spent or any(r["_serial"] == serial for r in self.rules)

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
                self._spent.add(rule["_serial"])
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

    def take_capacity(
        self, at: str, machines: Iterable[str], region: str | None, name: str = ""
    ) -> dict[str, Any] | None:
        """Consume a ``capacity`` rule of stage ``at`` for a job on ``machines``, in ``region``.

        A rule matches when its ``machine`` is one of the job's machines (case-insensitively:
        Azure compares VM sizes so, and a Vertex rule may name the accelerator type), its
        ``region``, if any, is the job's, and its ``match``, if any, is in the job's ``name``.
        Without ``count`` a rule stands for every matching job; with one, for the next ``count``.
        """
        wanted = {m.casefold() for m in machines if m}
        with self._lock:
            for rule in list(self.rules):
                if rule["kind"] != "capacity" or rule["at"] != at:
                    continue
                if rule["machine"].strip().casefold() not in wanted:
                    continue
                if rule.get("region") and rule["region"].casefold() != (region or "").casefold():
                    continue
                if rule.get("match") and rule["match"] not in name:
                    continue
                if self._fire(rule):
                    return dict(rule)
        return None

    def seconds(self, kind: str) -> float:
        """Sum of ``seconds`` of every standing rule of ``kind`` (delays do not retire)."""
        with self._lock:
            return sum(float(r.get("seconds", 0)) for r in self.rules if r["kind"] == kind)
