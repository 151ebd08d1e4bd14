"""Vertex AI's Dynamic Workload Scheduler: ``jobSpec.scheduling.strategy = "FLEX_START"``.

A FLEX_START job queues for its GPUs instead of failing on a stockout.

What CreateCustomJob refuses (:func:`flex_start_problems`, part of
:func:`~cloud.vertex.validation.validate_custom_job`'s one 400 INVALID_ARGUMENT): a worker pool
without a GPU of the kinds Google offers through DWS (:data:`DWS_ACCELERATORS`: L4, A100, H100,
H200, B200), worker pools whose ``machineSpec`` differ, a ``scheduling.timeout`` over 7 days.

What the job's life does (:meth:`FlexStartWait._flex_start_wait`, called by
:class:`~cloud.vertex.lifecycle.JobLifecycle`): a FLEX_START job that meets a ``capacity`` rule at
``provision`` stays JOB_STATE_PENDING while the shortage lasts (the rule's ``seconds`` since the job
met it; without ``seconds``, until the rule is cleared) and then runs as any job does, or ends
JOB_STATE_FAILED with code 8 when ``scheduling.maxWaitDuration`` (default 1 day; ``"0s"``: no limit)
passes first. Time is the fake's own clock (``time.monotonic``), as for the rest of the lifecycle.
"""

from __future__ import annotations

import re
import time
from typing import Any

from cloud.vertex.api import CODE_RESOURCE_EXHAUSTED, get_field
from cloud.vertex.state import Job, VertexState

# The GPUs Google offers through the Dynamic Workload Scheduler for custom training.
DWS_ACCELERATORS = (
    "NVIDIA_L4",
    "NVIDIA_TESLA_A100",
    "NVIDIA_A100_80GB",
    "NVIDIA_H100_80GB",
    "NVIDIA_H100_MEGA_80GB",
    "NVIDIA_H200_141GB",
    "NVIDIA_B200",
)
MAX_TIMEOUT_SECONDS = 7 * 24 * 3600  # a FLEX_START job runs for at most 7 days
DEFAULT_MAX_WAIT = "86400s"  # scheduling.maxWaitDuration when absent: 24 hours
POLL_SECONDS = 0.1  # how often a waiting job looks at the fault book
EXPIRED = (
    "No resources became available in region {location} within scheduling.maxWaitDuration {wait}."
)
_NOT_SET = (None, "", 0, "0", "ACCELERATOR_TYPE_UNSPECIFIED")


def is_flex_start(job_spec: dict[str, Any]) -> bool:
    return get_field(get_field(job_spec, "scheduling") or {}, "strategy") == "FLEX_START"


def duration_seconds(duration: str) -> float:
    """A JSON Duration (``"2s"``, ``"0.5s"``; already validated) in seconds."""
    return float(duration[:-1])


def max_wait(job_spec: dict[str, Any]) -> str:
    """The job's ``scheduling.maxWaitDuration`` as written, or the default."""
    value = get_field(get_field(job_spec, "scheduling") or {}, "maxWaitDuration")
    return value if isinstance(value, str) and value else DEFAULT_MAX_WAIT


def _machine_key(machine: Any) -> dict[str, Any]:
    """A ``machineSpec`` comparable whatever its spelling: camelCase names, counts as numbers,
    fields at their default left out."""
    if not isinstance(machine, dict):
        return {}
    key = {re.sub(r"_([a-z])", lambda m: m.group(1).upper(), k): v for k, v in machine.items()}
    if key.get("acceleratorCount") not in (None, ""):
        key["acceleratorCount"] = int(key["acceleratorCount"])
    return {k: v for k, v in key.items() if v not in _NOT_SET}


def flex_start_problems(job_spec: dict[str, Any]) -> list[tuple[str, str]]:
    """What Vertex refuses in a FLEX_START job spec, as ``(field, message)``; none otherwise."""
    if not is_flex_start(job_spec):
        return []
    where = "custom_job.job_spec"
    problems: list[tuple[str, str]] = []
    first: tuple[int, dict[str, Any]] | None = None
    for i, pool in enumerate(get_field(job_spec, "workerPoolSpecs") or []):
        if not pool:
            continue
        machine = get_field(pool, "machineSpec") or {}
        acc = get_field(machine, "acceleratorType")
        if acc not in DWS_ACCELERATORS:
            got = acc if acc not in _NOT_SET else "none"
            problems.append(
                (
                    f"{where}.worker_pool_specs[{i}].machine_spec.accelerator_type",
                    "Scheduling strategy FLEX_START requires a GPU accelerator in every worker "
                    f"pool, one of {', '.join(DWS_ACCELERATORS)}; got {got}.",
                )
            )
        key = _machine_key(machine)
        if first is None:
            first = (i, key)
        elif key != first[1]:
            problems.append(
                (
                    f"{where}.worker_pool_specs[{i}].machine_spec",
                    "Scheduling strategy FLEX_START requires the same machine_spec in every "
                    f"worker pool; it differs from worker_pool_specs[{first[0]}].machine_spec.",
                )
            )
    timeout = get_field(get_field(job_spec, "scheduling"), "timeout")
    if isinstance(timeout, str) and duration_seconds(timeout) > MAX_TIMEOUT_SECONDS:
        problems.append(
            (
                f"{where}.scheduling.timeout",
                "Scheduling strategy FLEX_START allows a timeout of at most 7 days "
                f"({MAX_TIMEOUT_SECONDS}s); got {timeout}.",
            )
        )
    return problems


class FlexStartWait(VertexState):
    """The wait of a FLEX_START job for the machines a ``capacity`` rule says are short."""

    def _flex_start_wait(self, job: Job, rule: dict[str, Any]) -> str:
        """Hold ``job`` (PENDING) while the shortage of ``rule`` lasts for it.

        The shortage ends the rule's ``seconds`` after the job met it (a rule without
        ``seconds`` lasts until cleared), or when the rule no longer stands
        (:meth:`~cloud.fake_http.FaultBook.standing`: cleared through the control API; a
        counted rule the job consumed still stands for it until a clear). Returns ``"ready"``
        (the job goes on to run), ``"cancelled"``, or ``"expired"``: ``maxWaitDuration`` passed
        first and the job is now JOB_STATE_FAILED with code 8.
        """
        wait = max_wait(job.resource["jobSpec"])
        limit = duration_seconds(wait)
        seconds = float(rule.get("seconds", 0))
        self._log(
            job, "service", "stderr", f"Resources are insufficient in region: {job.location}."
        )
        self._log(
            job,
            "service",
            "stdout",
            "Scheduling strategy FLEX_START: the job waits for resources "
            + (f"up to scheduling.maxWaitDuration {wait}." if limit else "with no time limit."),
        )
        met = time.monotonic()
        back_at = met + seconds if seconds > 0 else None
        give_up = met + limit if limit > 0 else None
        while True:
            now = time.monotonic()
            over = back_at is not None and now >= back_at
            if over or not self.faults.standing(rule["_serial"]):
                back = f"Resources became available in region: {job.location}."
                self._log(job, "service", "stdout", back)
                return "ready"
            if give_up is not None and now >= give_up:
                message = EXPIRED.format(location=job.location, wait=wait)
                self._log(job, "service", "stderr", message)
                error = {"code": CODE_RESOURCE_EXHAUSTED, "message": message}
                self._set_state(job, "JOB_STATE_FAILED", error=error)
                return "expired"
            step = min([POLL_SECONDS] + [t - now for t in (back_at, give_up) if t is not None])
            if job.cancel.wait(max(0.0, step)) or self._stopping.is_set():
                return "cancelled"
