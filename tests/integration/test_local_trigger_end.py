"""A local step's trigger ends its task itself (``triggers/task_end``), and what it leaves to
the worker: a result Airflow would refuse, a step that fails without a retry, ``dag.test()``
(which resumes the task with any event), a user's kill as the job ends."""

from __future__ import annotations

import asyncio
import contextlib
import json
from pathlib import Path

import pytest

from airflow_stepop.triggers.process_identity import this_process
from tests.integration.task_end import ANOTHER_PROCESS, end_task, ending_event, in_a_triggerer
from tests.integration.test_local_backend import _submit
from tests.step_modules import step_module


@pytest.fixture
def steps(tmp_path, monkeypatch):
    yield from step_module(
        tmp_path,
        monkeypatch,
        "ending_steps",
        """
            def listed(n):
                print(f"listing {n}", flush=True)
                return list(range(n))

            def scalar():
                return 7

            def fail_for_good():
                from airflow.sdk.exceptions import AirflowFailException
                raise AirflowFailException("the input is wrong for good")

            def skip_today():
                from airflow.sdk.exceptions import AirflowSkipException
                raise AirflowSkipException("nothing to do today")
        """,
    )


def _ending(tmp_path, function, args, **end):
    backend, handle, trigger, _ = _submit(tmp_path, function, args)
    trigger.deferred_by, trigger.resume_hold = ANOTHER_PROCESS, 0.0
    trigger.end_task = end_task(handle, **end)
    return backend, handle, trigger


def test_a_list_a_task_maps_over_is_pushed_with_its_length(tmp_path, steps, monkeypatch, capfd):
    """Airflow expands a downstream .expand() over the length the task pushed beside it."""
    comms = in_a_triggerer(monkeypatch)
    _, _, trigger = _ending(tmp_path, steps.listed, [3], mapped_over=True)
    trigger.resume_hold = 600.0  # no hold when the trigger ends the task
    event = asyncio.run(asyncio.wait_for(_first_event(trigger), 120))
    assert type(event).__name__ == "TaskSuccessEvent"
    (pushed,) = [m for m in comms.sent if m.key == "return_value"]
    assert (pushed.value, pushed.mapped_length, pushed.map_index) == ([0, 1, 2], 3, -1)
    assert "listing 3" in capfd.readouterr().out


def test_a_result_airflow_cannot_map_over_is_left_to_the_worker(tmp_path, steps, monkeypatch):
    """The worker then fails the task with Airflow's own error (UnmappableXComTypePushed)."""
    comms = in_a_triggerer(monkeypatch)
    _, _, trigger = _ending(tmp_path, steps.scalar, [], mapped_over=True)
    event = ending_event(trigger, 120)
    assert type(event).__name__ == "TriggerEvent" and event.payload["status"] == "succeeded"
    assert comms.sent == []


def test_a_step_that_fails_for_good_is_left_to_the_worker(tmp_path, steps, monkeypatch):
    """AirflowFailException fails the task without a retry: only a worker can say so."""
    in_a_triggerer(monkeypatch)
    _, _, trigger = _ending(tmp_path, steps.fail_for_good, [])
    event = ending_event(trigger, 120)
    assert type(event).__name__ == "TriggerEvent" and event.payload["status"] == "failed"


def test_a_step_that_skips_itself_ends_its_task_skipped(tmp_path, steps, monkeypatch, capfd):
    in_a_triggerer(monkeypatch)
    _, _, trigger = _ending(tmp_path, steps.skip_today, [])
    assert type(ending_event(trigger, 120)).__name__ == "TaskSkippedEvent"
    assert "nothing to do today" in capfd.readouterr().out


def test_under_dag_test_the_task_resumes_with_the_usual_event(tmp_path, steps, monkeypatch):
    """dag.test() resumes the task with any event's payload: a task-ending event's xcoms
    would be lost there."""
    comms = in_a_triggerer(monkeypatch)
    _, _, trigger = _ending(tmp_path, steps.listed, [2])
    trigger.deferred_by = this_process()
    event = ending_event(trigger, 120)
    assert type(event).__name__ == "TriggerEvent" and event.payload["status"] == "succeeded"
    assert comms.sent == []


def test_the_trigger_keeps_the_result_for_the_step_cache(tmp_path, steps, monkeypatch):
    """The entry the task would write after its job succeeded, written by the trigger."""
    in_a_triggerer(monkeypatch)
    root = f"file://{tmp_path}/root"
    _, handle, trigger = _ending(tmp_path, steps.listed, [2])
    trigger.end_task["cache"] = {"key": "k" * 64, "root": root, "spec_sha256": "s" * 64,
                                 "try_number": 1}  # fmt: skip
    assert type(ending_event(trigger, 120)).__name__ == "TaskSuccessEvent"
    entry = json.loads((tmp_path / "root" / "cache" / "d" / f"{'k' * 64}.json").read_text())
    assert (entry["job_id"], entry["made_by"]["task_id"]) == (handle["job_id"], "t")


def test_a_kill_as_the_job_ends_stops_no_finished_job(tmp_path, steps, monkeypatch):
    """A user's mark or clear cancels the trigger while it ends the task: Airflow then
    awaits on_kill, which must leave the finished job alone."""
    in_a_triggerer(monkeypatch)
    backend, handle, trigger = _ending(tmp_path, steps.listed, [2])

    async def kill() -> None:
        running = asyncio.ensure_future(_first_event(trigger))
        while not trigger._job_ended:
            await asyncio.sleep(0.01)
        running.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await running
        await trigger.on_kill()

    asyncio.run(asyncio.wait_for(kill(), 120))
    assert backend.status(handle).state == "succeeded"
    assert not (Path(handle["job_dir"]) / "stop_requested").exists()


async def _first_event(trigger):
    async for event in trigger.run():
        return event
    raise AssertionError("no event")


class Store(dict):
    """A task state store, as Airflow's task runner gives it: survives the task's tries."""

    def set(self, key, value):
        self[key] = value


def test_a_task_cleared_after_its_trigger_delivered_the_result_runs_the_step_again(
    tmp_path, steps, monkeypatch
):
    """A user's clear of the successful task: the trigger's delivery note makes the next try
    run the step again, as after a worker delivered it; without the note (the worker was to
    deliver it and died first) the next try returns the verified result with no new job."""
    from airflow_stepop.backends.outcome import delivery_marker
    from airflow_stepop.operators.earlier_try import STATE_KEY, earlier_job
    from airflow_stepop.runtime.storage import Storage

    in_a_triggerer(monkeypatch)
    backend, handle, trigger = _ending(tmp_path, steps.listed, [2])
    assert type(ending_event(trigger, 120)).__name__ == "TaskSuccessEvent"
    store = Store({STATE_KEY: {"handle": handle, "try_number": 1}})  # what execute() kept
    log = type("Log", (), {"info": print, "warning": print})()

    def next_try():
        return earlier_job(backend, store, 2, "unused", None, log)

    assert next_try() == (None, None)  # run again
    Path(Storage().local_path(delivery_marker(handle))).unlink()
    reused = next_try().reuse
    assert reused is not None and reused.result == [0, 1]


def test_xcoms_the_execution_api_refuses_leave_the_result_to_a_worker(tmp_path, steps, monkeypatch):
    """A push refused (a result over [core] max_map_length, say): the usual event, no note of
    a delivery, so a worker delivers the result and a retry may still reuse it."""
    from airflow_stepop.backends.outcome import delivery_marker

    in_a_triggerer(monkeypatch, refuse=True)
    _, handle, trigger = _ending(tmp_path, steps.listed, [2])
    event = ending_event(trigger, 120)
    assert type(event).__name__ == "TriggerEvent" and event.payload["status"] == "succeeded"
    assert not Path(delivery_marker(handle).removeprefix("file://")).exists()


def test_a_backend_the_triggerer_cannot_load_still_sends_the_unwatched_event(
    tmp_path, steps, monkeypatch
):
    """The worker then leaves the job to a retry or stops it, as before the trigger could end
    the task (no exception out of the trigger's run)."""
    in_a_triggerer(monkeypatch)
    _, _, trigger = _ending(tmp_path, steps.listed, [2])
    trigger.backend_path = "no_such_module.Backend"
    trigger._following = (trigger.backend_path, trigger.backend_kwargs)
    event = ending_event(trigger, 120)
    assert type(event).__name__ == "TriggerEvent" and event.payload["status"] == "unwatched"
