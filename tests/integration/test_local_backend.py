"""The local backend under the trigger: logs relayed, user kill stops the job, containers."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import time
import uuid
from pathlib import Path

import pytest

from airflow_stepop import DockerSettings, ResourceSettings
from airflow_stepop.backends.base import JobRequest
from airflow_stepop.backends.local.backend import LocalBackend
from airflow_stepop.backends.local.process import supervisor_alive
from airflow_stepop.backends.naming import job_name, task_key
from airflow_stepop.packaging.staging import StepIdentity, stage_step
from airflow_stepop.runtime.storage import Storage
from airflow_stepop.triggers.process_identity import this_process
from airflow_stepop.triggers.step_job import StepJobTrigger
from tests.processes import process_alive
from tests.step_modules import step_module
from tests.waiting import wait_for

RUN_ID = f"run-{uuid.uuid4().hex[:8]}"  # container names are global to the engine


@pytest.fixture
def steps(tmp_path, monkeypatch):
    """A module of step functions, importable by name (no Airflow import in it)."""
    yield from step_module(
        tmp_path,
        monkeypatch,
        "steps",
        """
            import os, sys, time
            from pathlib import Path

            def chatty(n):
                for i in range(n):
                    print(f"line {i}", flush=True)
                return n

            def held(pid_file, release):
                Path(pid_file).write_text(str(os.getpid()))
                print("holding", flush=True)
                while not Path(release).exists():
                    time.sleep(0.05)
                return "released"

            def saves_when_stopped(pid_file):
                print("training", flush=True)
                try:
                    Path(pid_file).write_text(str(os.getpid()))
                    while True:
                        time.sleep(0.05)
                finally:
                    print("saving a checkpoint in finally:", flush=True)

            def two_phases(release):
                for i in range(3):
                    print(f"before {i}", flush=True)
                while not Path(release).exists():
                    time.sleep(0.05)
                for i in range(3):
                    print(f"after {i}", flush=True)
                return "done"

            def bursts(release):
                for burst in range(5):
                    for i in range(100):
                        print(f"out {burst} {i}", flush=True)
                        if i % 10 == 0:
                            print(f"err {burst} {i}", file=sys.stderr, flush=True)
                    time.sleep(0.05)
                print("x" * 40000, flush=True)  # the engine keeps it as pieces of 16 KiB
                print("out end", flush=True)
                while not Path(release).exists():
                    time.sleep(0.05)
                for i in range(50):
                    print(f"after {i}", flush=True)
                return "done"

            def where():
                return {
                    "python": sys.executable,
                    "greeting": os.environ.get("GREETING"),
                    "pythonpath": os.environ["PYTHONPATH"].split(os.pathsep),
                }
        """,
    )


def _submit(
    tmp_path,
    function,
    args,
    *,
    docker=None,
    resources=None,
    try_number=1,
    max_runtime_s=None,
    environment=(("GREETING", "hello"),),
):
    storage = Storage()
    identity = StepIdentity("dag", RUN_ID, function.__name__, -1, try_number)
    staged = stage_step(
        function, args, {}, root=f"file://{tmp_path}/root", step=identity, storage=storage
    )
    key = task_key(identity.dag_id, identity.run_id, identity.task_id, identity.map_index)
    backend = LocalBackend(jobs_dir=str(tmp_path / "jobs"), max_runtime_s=max_runtime_s)
    handle = backend.submit(
        JobRequest(
            job_name=job_name(key, try_number),
            task_key=key,
            spec_uri=staged.spec_uri,
            run_uri=staged.run_uri,
            code_uri=staged.code_uri,
            docker=docker,
            resources=resources,
            environment=dict(environment),
        )
    )
    trigger = StepJobTrigger(
        backend_path="airflow_stepop.backends.local.backend.LocalBackend",
        backend_kwargs=backend.serialize(),
        handle=handle,
        poll_interval=0.1,
    )
    return backend, handle, trigger, storage


async def _first(trigger):
    async for event in trigger.run():
        return event.payload


def test_trigger_relays_job_log_lines_into_the_task_log(tmp_path, steps, capfd):
    _, handle, trigger, storage = _submit(tmp_path, steps.chatty, [5])
    event = asyncio.run(_first(trigger))
    assert event["status"] == "succeeded"
    logged = capfd.readouterr().out  # the triggerer's log records (structlog writes stdout)
    for i in range(5):
        assert f"[{handle['job_id']}] line {i}" in logged
    assert storage.read_json(handle["run_uri"] + "/result.json")["outputs"] == {"inline": 5}


def test_a_trigger_resumed_after_its_event_fired_relays_no_line_again(
    tmp_path, steps, capfd, monkeypatch
):
    """A triggerer killed after the trigger fired and before Airflow stored the event: the
    task stays deferred, and another triggerer runs the trigger again. Here lines settle in
    the task log at once (they take up to SETTLE_SECONDS, which a resumed relay repeats), and
    no periodic save runs: only the save before the event can spare the repeat."""
    from airflow_stepop.triggers import relay_cursor

    monkeypatch.setattr(relay_cursor, "SETTLE_SECONDS", 0.0)
    monkeypatch.setattr(relay_cursor, "SAVE_SECONDS", 1e9)
    _, handle, first, _ = _submit(tmp_path, steps.chatty, [5])
    assert asyncio.run(_first(first))["status"] == "succeeded"
    assert f"[{handle['job_id']}] line 4" in capfd.readouterr().out

    resumed = StepJobTrigger(**first.serialize()[1])
    assert asyncio.run(_first(resumed))["status"] == "succeeded"
    assert "line" not in capfd.readouterr().out


class LogServiceDown(LocalBackend):
    """The local backend with a log service that never answers (an outage, a missing
    permission): the job's state must still reach the task."""

    async def alogs(self, handle, cursor):
        raise ConnectionError("log service unavailable")


def test_a_quick_jobs_event_waits_for_the_resume_hold_in_a_triggerer(tmp_path, steps):
    """Airflow 3.3 fails a task whose resumed try is queued before the executor reported the
    deferring try's exit: a trigger in another process than the one that deferred holds the
    event of a job that ended at once until resume_hold after its start."""
    _, _, trigger, _ = _submit(tmp_path, steps.chatty, [1])
    trigger.resume_hold, trigger.deferred_by = 3.0, "1-another-process"
    started = time.monotonic()
    assert asyncio.run(_first(trigger))["status"] == "succeeded"
    assert time.monotonic() - started >= 3.0


def test_a_trigger_in_the_process_that_deferred_does_not_hold_its_event(tmp_path, steps):
    """dag.test() and airflow dags test run the trigger in the deferring process: no executor
    to wait for."""
    _, _, trigger, _ = _submit(tmp_path, steps.chatty, [1])
    trigger.resume_hold, trigger.deferred_by = 120.0, this_process()
    assert asyncio.run(asyncio.wait_for(_first(trigger), 60))["status"] == "succeeded"


async def _cancelled_while_its_event_waits(trigger):
    """Run ``trigger`` until its job has ended and its event waits out the hold, then cancel it
    as a triggerer does (stopping, or for a user's kill, which then awaits ``on_kill``)."""
    running = asyncio.ensure_future(_first(trigger))
    while not trigger._job_ended:
        await asyncio.sleep(0.05)
    running.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await running


def test_a_kill_while_the_event_waits_stops_no_finished_job(tmp_path, steps):
    backend, handle, trigger, _ = _submit(tmp_path, steps.chatty, [1])
    trigger.resume_hold, trigger.deferred_by = 600.0, "1-another-process"

    async def kill() -> None:
        await _cancelled_while_its_event_waits(trigger)
        await trigger.on_kill()

    asyncio.run(asyncio.wait_for(kill(), 60))
    assert backend.status(handle).state == "succeeded"
    assert not (Path(handle["job_dir"]) / "stop_requested").exists()


def test_a_triggerer_stopping_while_the_event_waits_leaves_no_line_to_repeat(
    tmp_path, steps, capfd, monkeypatch
):
    from airflow_stepop.triggers import relay_cursor

    monkeypatch.setattr(relay_cursor, "SAVE_SECONDS", 1e9)  # no periodic save to spare them
    _, handle, first, _ = _submit(tmp_path, steps.chatty, [5])
    first.resume_hold, first.deferred_by = 600.0, "1-another-process"
    asyncio.run(asyncio.wait_for(_cancelled_while_its_event_waits(first), 60))
    assert f"[{handle['job_id']}] line 4" in capfd.readouterr().out

    resumed = StepJobTrigger(**{**first.serialize()[1], "resume_hold": 0.0})
    assert asyncio.run(_first(resumed))["status"] == "succeeded"
    assert "line" not in capfd.readouterr().out


def test_a_failing_log_service_never_holds_back_the_jobs_end(tmp_path, steps, capfd):
    _, handle, trigger, _ = _submit(tmp_path, steps.chatty, [3])
    trigger.backend_path = f"{__name__}.LogServiceDown"
    event = asyncio.run(asyncio.wait_for(_first(trigger), 60))
    assert event["status"] == "succeeded"
    assert "its last lines stay in the service's log" in capfd.readouterr().out


def test_a_trigger_resumed_by_another_triggerer_continues_the_relay_where_it_stopped(
    tmp_path, steps, capfd
):
    release = tmp_path / "release"
    _, handle, first, _ = _submit(tmp_path, steps.two_phases, [str(release)])
    saved = (
        tmp_path
        / "root"
        / handle["run_uri"].split("/root/", 1)[1]
        / f"relay-{handle['job_id']}.json"
    )

    output = Path(handle["job_dir"]) / "output.log"

    def all_before_lines_saved() -> bool:  # the saved cursor is past "before 2"
        end = output.read_bytes().find(b"before 2\n") if output.exists() else -1
        offset = json.loads(saved.read_text())["cursor"]["offset"] if saved.exists() else -1
        return end >= 0 and offset > end

    async def relay_until_saved():
        task = asyncio.ensure_future(_first(first))
        for _ in range(600):
            if all_before_lines_saved():
                break
            await asyncio.sleep(0.05)
        task.cancel()  # the triggerer dies

    asyncio.run(relay_until_saved())
    assert all_before_lines_saved()
    release.touch()
    classpath, kwargs = first.serialize()
    resumed = StepJobTrigger(**kwargs)  # what another triggerer rebuilds from the database
    capfd.readouterr()
    assert asyncio.run(_first(resumed))["status"] == "succeeded"
    logged = capfd.readouterr().out
    assert all(f"after {i}" in logged for i in range(3))
    assert "before" not in logged  # not relayed twice


def test_user_kill_stops_the_job(tmp_path, steps):
    pid_file, release = tmp_path / "pid", tmp_path / "never"
    backend, handle, trigger, storage = _submit(tmp_path, steps.held, [str(pid_file), str(release)])

    async def kill_when_running():  # never before the step runs: a slow start is no reason
        await asyncio.to_thread(wait_for, pid_file.exists, 120, "the step to record its pid")
        await trigger.on_kill()

    asyncio.run(kill_when_running())
    pid = int(pid_file.read_text())
    assert not process_alive(pid)
    status = asyncio.run(backend.astatus(handle))
    assert status.state == "stopped"
    error = storage.read_json(handle["run_uri"] + "/error.json")
    assert error["type"] == "StepStopped"


def test_what_a_step_prints_while_a_users_kill_stops_it_reaches_the_task_log(
    tmp_path, steps, capfd
):
    """Airflow cancels the trigger, then awaits its ``on_kill``: the step's ``finally:`` runs
    after the stop, and its lines are relayed from where the trigger's relay stopped."""
    pid_file = tmp_path / "pid"
    _, handle, trigger, _ = _submit(tmp_path, steps.saves_when_stopped, [str(pid_file)])
    job = handle["job_id"]

    async def kill_while_relaying():
        watching = asyncio.ensure_future(_first(trigger))
        while f"[{job}] training" not in capfd.readouterr().out:
            await asyncio.sleep(0.05)
        await asyncio.to_thread(wait_for, pid_file.exists, 120, "the step to record its pid")
        watching.cancel()  # the triggerer's cancel, then its on_kill
        with contextlib.suppress(asyncio.CancelledError):
            await watching
        await trigger.on_kill()

    asyncio.run(asyncio.wait_for(kill_while_relaying(), 120))
    logged = capfd.readouterr().out
    assert f"[{job}] saving a checkpoint in finally:" in logged
    assert f"[{job}] training" not in logged  # not relayed twice


def test_a_stop_ends_a_step_that_outlived_its_supervisor_and_no_other_process(tmp_path, steps):
    """The supervisor is killed (SIGKILL: it forwards nothing) and the step runs on: the job
    reads as running, and a stop ends the step, found by the pid and start time it recorded;
    a process that has the step's pid with another start time (a reused pid) is left alone."""
    pid_file, release = tmp_path / "pid", tmp_path / "never"
    backend, handle, _, storage = _submit(tmp_path, steps.held, [str(pid_file), str(release)])
    job_dir = Path(handle["job_dir"])
    step = int(wait_for(lambda: pid_file.exists() and pid_file.read_text(), 120, "the step"))
    try:
        os.kill(handle["pid"], signal.SIGKILL)
        wait_for(lambda: not supervisor_alive(job_dir), 30, "the supervisor's lock to be released")
        assert backend._status(handle).state == "running"

        record = job_dir / "child.pid"
        recorded = record.read_text()
        record.write_text(f"{step} 1")  # the pid, with another process's start time
        backend.stop(handle)
        assert process_alive(step)

        record.write_text(recorded)
        backend.stop(handle)
        assert not process_alive(step)
        assert backend._status(handle).state == "stopped"
        error = storage.read_json(handle["run_uri"] + "/error.json")
        assert error["type"] == "StepStopped"  # a graceful stop first, as with a supervisor
    finally:
        if process_alive(step):
            os.kill(step, signal.SIGKILL)


def test_a_step_that_outlived_its_supervisor_and_ran_to_its_end_succeeded(tmp_path, steps):
    """No exit code is recorded with the supervisor killed: the step's result manifest says
    it ended well, so its result is used and no retry runs it again."""
    pid_file, release = tmp_path / "pid", tmp_path / "release"
    backend, handle, _, storage = _submit(tmp_path, steps.held, [str(pid_file), str(release)])
    step = int(wait_for(lambda: pid_file.exists() and pid_file.read_text(), 120, "the step"))
    os.kill(handle["pid"], signal.SIGKILL)
    wait_for(lambda: not supervisor_alive(Path(handle["job_dir"])), 30, "the supervisor's lock")
    release.touch()
    wait_for(lambda: not process_alive(step), 60, "the step to end")

    assert backend._status(handle).state == "succeeded"
    result = storage.read_json(handle["run_uri"] + "/result.json")
    assert result["outputs"] == {"inline": "released"}


def test_a_job_nobody_watches_ends_at_its_max_runtime(tmp_path, steps):
    """No trigger runs (a triggerer down): the job's own limit ends it, as a cloud's would."""
    pid_file, release = tmp_path / "pid", tmp_path / "never"
    backend, handle, _, storage = _submit(
        tmp_path, steps.held, [str(pid_file), str(release)], max_runtime_s=2
    )

    wait_for(lambda: backend._status(handle).terminal, 120, "the job to end at its limit")
    status = backend._status(handle)
    assert status.state == "failed"
    assert "ran past its max_runtime (the operator's max_runtime argument;" in status.reason
    assert not process_alive(int(pid_file.read_text()))
    error = storage.read_json(handle["run_uri"] + "/error.json")
    assert error["type"] == "StepTimedOut"


def test_the_code_bundle_goes_in_front_of_the_steps_own_pythonpath(tmp_path, steps):
    environment = {"GREETING": "hello", "PYTHONPATH": f"/opt/lib{os.pathsep}/opt/more"}
    _, handle, trigger, storage = _submit(tmp_path, steps.where, [], environment=environment)
    assert asyncio.run(_first(trigger))["status"] == "succeeded"
    result = storage.read_json(handle["run_uri"] + "/result.json")["outputs"]["inline"]
    bundle, *rest = result["pythonpath"]
    assert bundle.endswith(".zip") and rest == ["/opt/lib", "/opt/more"]


def test_find_active_sees_a_running_job_and_not_a_finished_one(tmp_path, steps):
    pid_file, release = tmp_path / "pid", tmp_path / "release"
    backend, handle, trigger, _ = _submit(tmp_path, steps.held, [str(pid_file), str(release)])
    assert backend.find_active(handle["task_key"])["job_id"] == handle["job_id"]
    release.touch()
    assert asyncio.run(_first(trigger))["status"] == "succeeded"
    assert backend.find_active(handle["task_key"]) is None


@pytest.mark.container
def test_container_mode_builds_once_and_runs_the_step(
    tmp_path, steps, docker_client, build_settings
):
    from tests.integration.conftest import BASE_IMAGE, remove_images

    image_env = {"STEP_ENV": str(uuid.uuid4()), "PYTHONPATH": "/opt/image-lib"}
    settings = DockerSettings(parent_image=BASE_IMAGE, environment=image_env)
    backend, handle, trigger, storage = _submit(
        tmp_path, steps.where, [], docker=settings, resources=ResourceSettings(cpu_count=1)
    )
    handles = [handle]
    try:
        assert handle["mode"] == "container" and handle["image_built"] is True
        event = asyncio.run(_first(trigger))
        assert event["status"] == "succeeded", event
        result = storage.read_json(handle["run_uri"] + "/result.json")["outputs"]["inline"]
        bundle, *rest = result.pop("pythonpath")
        assert result == {"python": "/usr/bin/python3", "greeting": "hello"}  # in the image
        assert bundle.endswith(".zip") and rest == ["/opt/image-lib"]  # the image's path kept

        # an edited step (another function, same environment) reuses the image
        _, again, trigger2, _ = _submit(tmp_path, steps.chatty, [2], docker=settings, try_number=2)
        handles.append(again)
        assert again["image_built"] is False and again["image"] == handle["image"]
        assert asyncio.run(_first(trigger2))["status"] == "succeeded"
    finally:
        for finished in handles:
            backend.release(finished)
        remove_images(docker_client, "airflow-stepop-env")
    names = {c.name for c in docker_client.containers.list(all=True)}
    assert not names & {h["job_id"] for h in handles}  # released


@pytest.mark.container
def test_container_build_installs_requirements_through_the_build_ca(
    tmp_path, steps, docker_client, build_settings
):
    from airflow_stepop.images.builder import BuildOptions, ensure_image
    from tests.integration.conftest import BASE_IMAGE, remove_images

    settings = DockerSettings(parent_image=BASE_IMAGE, requirements=["six==1.16.0"])
    options = BuildOptions(
        network_mode="host", ca_bundle=os.environ.get("AIRFLOW__STEPOP__BUILD_CA_BUNDLE")
    )
    try:
        image, built = ensure_image(settings, docker_client, options=options)
        assert built
        output = docker_client.containers.run(
            image, ["python3", "-c", "import six; print(six.__version__)"], remove=True
        )
        assert output.decode().strip() == "1.16.0"
        assert ensure_image(settings, docker_client, options=options) == (image, False)
    finally:
        remove_images(docker_client, "airflow-stepop-env")


@pytest.mark.container
def test_a_dockerfile_of_ones_own_builds_with_its_directory_and_build_args(tmp_path, docker_client):
    from airflow_stepop.images.builder import BuildOptions, ensure_image
    from tests.integration.conftest import BASE_IMAGE, remove_images

    context = tmp_path / "image"
    context.mkdir()
    (context / "extra.txt").write_text("from the build context\n")
    (context / "Dockerfile").write_text(
        "ARG PARENT\nFROM ${PARENT}\nARG GREETING\nENV STEP_GREETING=${GREETING}\n"
        "COPY extra.txt /opt/extra.txt\n"
    )
    greeting = f"hello-{uuid.uuid4().hex[:8]}"  # a new hash: a build each run
    settings = DockerSettings(
        dockerfile=context / "Dockerfile", build_args={"PARENT": BASE_IMAGE, "GREETING": greeting}
    )
    try:
        image, built = ensure_image(settings, docker_client, options=BuildOptions())
        assert built
        probe = "import os; print(os.environ['STEP_GREETING'], open('/opt/extra.txt').read())"
        output = docker_client.containers.run(image, ["python3", "-c", probe], remove=True)
        assert output.decode().split() == [greeting, "from", "the", "build", "context"]
        tags = {tag for i in docker_client.images.list(name="airflow-stepop-env") for tag in i.tags}
        assert f"{image}-base" not in tags  # nothing on top of it: one build, the image itself
    finally:
        remove_images(docker_client, "airflow-stepop-env")
