"""A trigger that ends its task itself (``triggers/task_end``), run as a triggerer runs it.

In a triggerer, a trigger's XComs go to the triggerer's supervisor over its comms channel
(``SetXCom``), which writes them through the Execution API; ``SupervisorComms`` stands in for
that supervisor and keeps what it was sent. The real path, under Airflow's own processes, is
tests/e2e/test_trigger_end.py.
"""

from __future__ import annotations

import asyncio
from typing import Any

ANOTHER_PROCESS = "1-another-process"  # the trigger runs in a triggerer, not where it deferred


class SupervisorComms:
    """What a triggerer's supervisor receives from its triggers (``SetXCom`` messages)."""

    def __init__(self, refuse: bool = False) -> None:
        self.sent: list[Any] = []
        self.refuse = refuse  # the Execution API refuses every XCom (a 400, say)

    def send(self, message: Any) -> None:
        if self.refuse:
            from airflow.sdk.exceptions import AirflowRuntimeError, ErrorType

            raise AirflowRuntimeError(ErrorType.GENERIC_ERROR, detail={"refused": True})
        self.sent.append(message)

    async def asend(self, message: Any) -> None:
        self.send(message)

    def xcoms(self) -> dict[str, Any]:
        """The XComs pushed, by key (as serialized for the Execution API)."""
        return {m.key: m.value for m in self.sent if type(m).__name__ == "SetXCom"}


def in_a_triggerer(monkeypatch: Any, refuse: bool = False) -> SupervisorComms:
    """Route this process's Task SDK calls to a recording supervisor, as in a triggerer."""
    from airflow.sdk.execution_time import task_runner

    comms = SupervisorComms(refuse)
    monkeypatch.setattr(task_runner, "SUPERVISOR_COMMS", comms, raising=False)
    return comms


def end_task(handle: dict[str, Any], **overrides: Any) -> dict[str, Any]:
    """What ``operators/trigger_end`` hands the trigger for an unmapped task's try 1."""
    return {
        "dag_id": "d", "task_id": "t", "run_id": "r", "map_index": -1, "try_number": 1,
        "do_xcom_push": True, "multiple_outputs": False, "dag_result": False,
        "mapped_over": False, "capacity_failover": False, "end_failure": True,
        "end_skip": True, "cache": None, **overrides,
    }  # fmt: skip


def ending_event(trigger: Any, timeout: float = 240) -> Any:
    """The trigger's first event (the object: a task-ending event is told by its class)."""

    async def first() -> Any:
        async for event in trigger.run():
            return event
        raise AssertionError("the trigger ended without an event")

    return asyncio.run(asyncio.wait_for(first(), timeout))


def assert_ended_with_its_xcoms(trigger: Any, comms: SupervisorComms, capfd: Any) -> dict:
    """``trigger`` of a ``split(2)`` job (``multiple_outputs``) ends its task as a success
    with no hold (its ``resume_hold`` must be longer than the wait): the XComs it pushed."""
    assert trigger.resume_hold > 240
    event = ending_event(trigger)
    assert type(event).__name__ == "TaskSuccessEvent", event
    xcoms = comms.xcoms()
    assert (xcoms["count"], xcoms["names"]) == (2, ["a", "b"])
    assert xcoms["return_value"] == {"count": 2, "names": ["a", "b"]}
    logged = capfd.readouterr().out  # the trigger's lines: the task log's
    assert "splitting 2" in logged and "succeeded; result: {'count': 2" in logged, logged
    return xcoms


def assert_ended_failed(trigger: Any, comms: SupervisorComms, capfd: Any) -> None:
    """``trigger`` of a ``fails("bad input")`` job ends its task as failed, with the remote
    exception and its traceback in the task's error (the job's error document, or where a
    service keeps none, the service's reason and the job's log tail), and pushes nothing."""
    event = ending_event(trigger)
    assert type(event).__name__ == "TaskFailedEvent", event
    assert comms.xcoms() == {}
    logged = capfd.readouterr().out
    error = logged[logged.index("Task failed with StepFailedError: Step job ") :]
    assert "ValueError: bad input" in error and "raise ValueError(why)" in error, logged
