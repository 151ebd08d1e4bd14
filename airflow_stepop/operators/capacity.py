"""Capacity failover: a step whose machine type the service has no capacity or quota for runs
on the next of its ``StepBackend.machine_choices()``, up to ``capacity_attempts``.

The service says so at create (``NoCapacityError``, on the worker or in the triggerer after an
image build) or when the job fails to provision (``JobStatus.capacity`` in the trigger's
event). Either way the step starts its next attempt as a new job, under a name of its own, and
defers again: at most one job of a task instance is alive at any time. Which attempt a task
instance is at, and what each attempt was refused for, live in the task state store, so a retry
that re-attaches to a live attempt goes on from it, never from the top of the list.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow_stepop.backends.base import JobRequest, StepBackend

STATE_KEY = "stepop_capacity"


class NoCapacityLeftError(RuntimeError):
    """Every machine type a step may run on was refused for want of capacity or quota."""


class CapacityFailover:
    """``_attempt_request`` and ``_fail_over`` of ``BaseStepOperator``."""

    log: Any
    capacity_attempts: int | None
    _capacity_state: dict[str, Any] | None = None  # where no task state store keeps it

    def _reset_attempts(self, context: Any) -> None:
        self._save_attempts(context, {"attempt": 0, "tried": []})

    def _attempt_request(self, context: Any, backend: StepBackend, request: JobRequest) -> Any:
        """This attempt's request: its machine type and, past the first, a name of its own."""
        from airflow_stepop.backends.naming import job_name

        choices = backend.machine_choices()
        if not choices:
            return request
        attempt = min(self._attempts(context)["attempt"], len(choices) - 1)
        name = request.job_name
        if attempt:
            name = job_name(request.task_key, context["ti"].try_number, salt=f"a{attempt + 1}")
        return dataclasses.replace(request, machine=choices[attempt].name, job_name=name)

    def _fail_over(self, context: Any, backend: StepBackend, reason: Any) -> Any:
        """The service had no capacity for this attempt's machine type: start the next one,
        or fail naming every type tried and why."""
        state = self._attempts(context)
        choices = backend.machine_choices()
        attempt = state["attempt"]
        machine = choices[attempt].name if attempt < len(choices) else "the step's machine type"
        tried = [*state["tried"], [machine, str(reason)]]
        attempt += 1
        limit = min(len(choices), self._attempt_limit())
        if attempt >= limit:
            lines = "\n".join(f"- {name}: {why}" for name, why in tried)
            more = (
                f" ({len(choices) - limit} more fit: raise capacity_attempts or [stepop] "
                "capacity_attempts to try them)" if len(choices) > limit else ""
            )  # fmt: skip
            raise NoCapacityLeftError(
                f"No capacity for any machine type this step may run on, after {len(tried)} "
                f"attempt(s){more}:\n{lines}"
            )
        following = choices[attempt]
        price = following.price_per_hour
        self.log.warning(
            "No capacity for %s: %s. Trying %s%s: attempt %d of %d",
            machine,
            reason,
            following.name,
            f" (about ${price:.2f}/h)" if price is not None else "",
            attempt + 1,
            limit,
        )
        self._save_attempts(context, {"attempt": attempt, "tried": tried})
        from airflow_stepop.operators.task_identity import task_identity

        return self._start(context, task_identity(context), backend, fresh=False)  # type: ignore[attr-defined]

    def _attempt_limit(self) -> int:
        from airflow_stepop import config

        if self.capacity_attempts is not None:
            return self.capacity_attempts
        return config.get_int("capacity_attempts")

    def _attempts(self, context: Any) -> dict[str, Any]:
        store = context.get("task_state_store")
        state = store.get(STATE_KEY) if store is not None else self._capacity_state
        if isinstance(state, dict) and isinstance(state.get("attempt"), int):
            return state
        return {"attempt": 0, "tried": []}

    def _save_attempts(self, context: Any, state: dict[str, Any]) -> None:
        store = context.get("task_state_store")
        if store is None:
            self._capacity_state = state
        else:
            store.set(STATE_KEY, state)
