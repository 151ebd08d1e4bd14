"""execution_timeout counts from execute(), as Airflow's own does, not from the submit; and the
triggerer enforces it on its own clock, whatever the worker's clock says.

The worker passes what is left of the timeout as a duration (``time_left``); the first trigger
of the deferral fixes the instant on the triggerer's clock and keeps it beside the run, so a
trigger resumed by another triggerer goes on with the same deadline.
"""

from __future__ import annotations

import asyncio
import json
import time
from datetime import timedelta
from types import SimpleNamespace

import pytest
from airflow.sdk.bases.operator import ExecutorSafeguard
from airflow.sdk.exceptions import TaskDeferred

from airflow_stepop import LocalStepOperator
from airflow_stepop.triggers import step_job
from airflow_stepop.triggers.relay_cursor import CursorStore
from airflow_stepop.triggers.step_job import StepJobTrigger
from tests.unit.test_step_job_trigger import Poller, RunningBackend


class Clock:
    """A triggerer's ``time.time``/``time.monotonic`` that move only when the trigger waits."""

    def __init__(self, wall: float) -> None:
        self.wall = wall
        self.elapsed = 0.0

    def time(self) -> float:
        return self.wall + self.elapsed

    def monotonic(self) -> float:
        return self.elapsed

    def until(self, due: float) -> None:
        self.elapsed = max(self.elapsed, due)


def _deferred_kwargs(tmp_path, monkeypatch, *, worker_skew: float) -> dict:
    """What execute() passes to the trigger: a one-hour execution_timeout, 600 s of it spent
    staging and submitting, on a worker whose clock is ``worker_skew`` seconds off."""
    monkeypatch.setenv("AIRFLOW__STEPOP__ARTIFACT_ROOT", f"file://{tmp_path}/artifacts")
    monkeypatch.setenv("AIRFLOW__STEPOP__LOCAL_JOBS_DIR", str(tmp_path / "jobs"))
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path / "home"))
    operator = LocalStepOperator(
        task_id="t", python_callable=json.dumps, op_args=[1], execution_timeout=timedelta(hours=1)
    )
    backend = operator.make_backend()
    slow_submit = backend.submit

    def submit(request):  # staging and a submit that take a while (a slow cloud API)
        clock["now"] += 600
        return slow_submit(request)

    clock = {"now": time.time() + worker_skew}
    monkeypatch.setattr("airflow_stepop.operators.base.time.time", lambda: clock["now"])
    backend.submit = submit
    monkeypatch.setattr(operator, "make_backend", lambda: backend)
    ti = SimpleNamespace(dag_id="d", run_id="r", task_id="t", map_index=-1, try_number=1)
    with pytest.raises(TaskDeferred) as deferred:
        operator.execute({"ti": ti}, LocalStepOperator__sentinel=ExecutorSafeguard.sentinel_value)
    monkeypatch.undo()  # the worker's clock stays on the worker
    return deferred.value.trigger.serialize()[1]


def test_the_trigger_gets_what_is_left_of_execution_timeout_after_execute_began(
    tmp_path, monkeypatch
):
    kwargs = _deferred_kwargs(tmp_path, monkeypatch, worker_skew=0.0)
    assert kwargs["time_left"] == pytest.approx(3000.0)


@pytest.mark.parametrize("worker_skew", [-3600.0, 3600.0, 0.0])
def test_a_skewed_worker_clock_neither_ends_the_job_early_nor_lets_it_run_longer(
    tmp_path, monkeypatch, worker_skew
):
    """The worker's clock an hour behind (before: the job was stopped at the first poll) or an
    hour ahead (before: it ran an hour past its timeout): the job is stopped 3000 s after the
    trigger started, what was left of the hour when the task deferred."""
    kwargs = _deferred_kwargs(tmp_path, monkeypatch, worker_skew=worker_skew)
    clock = Clock(time.time())  # the triggerer's clock is right
    monkeypatch.setattr(step_job, "time", clock)
    kwargs["poll_interval"] = 600.0  # few rounds (the double's poller allows 100)
    trigger = StepJobTrigger(**kwargs)
    backend = RunningBackend(clock)
    backend.first_poll_seconds = 5.0
    event = asyncio.run(trigger._watch(Poller(backend, clock), CursorStore(trigger.handle, None)))
    assert event.payload["status"] == "timeout"
    assert backend.stopped_at == [pytest.approx(clock.wall + 3000.0)]


def _trigger(tmp_path, *, time_left: float, deferred_by: str = "4242-try1") -> StepJobTrigger:
    handle = {"job_id": "dag-task-t1", "run_uri": tmp_path.as_uri()}
    return StepJobTrigger(
        backend_path="tests.RunningBackend",
        backend_kwargs={},
        handle=handle,
        poll_interval=600.0,
        time_left=time_left,
        deferred_by=deferred_by,
    )


def _stopped_at(trigger: StepJobTrigger, clock: Clock) -> float:
    backend = RunningBackend(clock)
    backend.first_poll_seconds = 5.0
    asyncio.run(trigger._watch(Poller(backend, clock), CursorStore(trigger.handle, None)))
    return backend.stopped_at[0]


def test_a_trigger_resumed_by_another_triggerer_keeps_the_deadline_of_the_first(
    tmp_path, monkeypatch
):
    """A triggerer restarted 1000 s into a 3000 s timeout: the resumed trigger stops the job at
    3000 s, not 3000 s after its own start (which each restart would have pushed back)."""
    clock = Clock(1_900_000_000.0)
    monkeypatch.setattr(step_job, "time", clock)

    class DiesAt1000(Poller):
        async def status(self, handle, due):
            if due >= 1000:
                raise asyncio.CancelledError  # the triggerer stops: it cancels its triggers
            return await super().status(handle, due)

    with pytest.raises(asyncio.CancelledError):
        first = _trigger(tmp_path, time_left=3000.0)
        asyncio.run(first._watch(DiesAt1000(RunningBackend(clock), clock), CursorStore(
            first.handle, None)))  # fmt: skip
    clock.until(1200.0)  # another triggerer picks the trigger up later
    assert _stopped_at(_trigger(tmp_path, time_left=3000.0), clock) == pytest.approx(
        clock.wall + 3000.0
    )


def test_a_rewritten_deadline_file_buys_the_job_no_time(tmp_path, monkeypatch):
    """The run directory is writable by the job: a deadline pushed a year ahead there is no
    later than a count from the resumed trigger's own start."""
    clock = Clock(1_900_000_000.0)
    monkeypatch.setattr(step_job, "time", clock)
    (tmp_path / "deadline-dag-task-t1.json").write_text(
        json.dumps({"job_id": "dag-task-t1", "deferred_by": "4242-try1", "deadline": 4e9})
    )
    assert _stopped_at(_trigger(tmp_path, time_left=30.0), clock) == pytest.approx(
        clock.wall + 30.0
    )


def test_a_retry_that_re_attaches_to_the_job_gets_its_own_timeout(tmp_path, monkeypatch):
    """Try 1's deadline is kept beside the run; try 2 (another deferral) re-attaches to the same
    job with a fresh execution_timeout, which counts from its own deferral."""
    clock = Clock(1_900_000_000.0)
    monkeypatch.setattr(step_job, "time", clock)
    assert _stopped_at(_trigger(tmp_path, time_left=20.0), clock) == pytest.approx(
        clock.wall + 20.0
    )
    clock.until(100.0)
    second = _trigger(tmp_path, time_left=50.0, deferred_by="4343-try2")
    assert _stopped_at(second, clock) == pytest.approx(clock.wall + 150.0)
