"""Two task processes that miss the same environment image at once: one builds, one waits.

The first process's build is held open (the real build, wrapped to wait on an event before it
starts) until the second says it is waiting for the tag's lock, so the two provably overlap; then
the first builds, and the second finds the image and builds nothing. Without the lock the second
process reaches its own build instead, and the test fails there.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import queue as queue_module
import uuid
from typing import Any

import pytest

from airflow_stepop.settings import DockerSettings
from cloud.pytest_plugin import cloud_stack, registry_image  # noqa: F401 - fixtures
from tests.integration.conftest import BASE_IMAGE

BUILDER_LOGGER = "airflow_stepop.images.builder"
WAITING = "Waiting for another task on this host that is building environment image"
BUILDING = "Building environment image"


class _Forward(logging.Handler):
    def __init__(self, name: str, messages: Any) -> None:
        super().__init__(logging.INFO)
        self.task = name
        self.messages = messages

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.put((self.task, "log", record.getMessage()))


def _task(
    name: str,
    settings: DockerSettings,
    kwargs: dict[str, Any],
    home: str,
    messages: Any,
    release: Any,
) -> None:
    """One task process: ``ensure_image`` with the real build held until ``release``."""
    try:
        os.environ["AIRFLOW_HOME"] = home  # the locks' directory, shared by both tasks
        import docker

        from airflow_stepop.images import builder

        logger = logging.getLogger(BUILDER_LOGGER)
        logger.addHandler(_Forward(name, messages))
        logger.setLevel(logging.INFO)
        real_build = builder._run_build

        def held_build(client: Any, tag: str, options: Any, **build: Any) -> None:
            messages.put((name, "build-starts", tag))
            release.wait()
            real_build(client, tag, options, **build)

        builder._run_build = held_build
        client = docker.from_env(timeout=120)
        image, built = builder.ensure_image(settings, client, **kwargs)
        messages.put((name, "result", (image, built)))
    except BaseException as exc:
        messages.put((name, "error", repr(exc)))


def _until(messages: Any, seen: list[tuple], wanted: Any) -> tuple:
    """The next message for which ``wanted`` holds; every message read goes into ``seen``."""
    while True:
        try:
            message = messages.get(timeout=300)  # a bound on a hung test, not a synchronization
        except queue_module.Empty:
            raise AssertionError(f"no such message; seen: {seen}") from None
        seen.append(message)
        if message[1] == "error":
            raise AssertionError(f"task {message[0]} failed: {message[2]}; seen: {seen}")
        if wanted(message):
            return message


@pytest.fixture(params=["engine", "registry"])
def target(request) -> dict[str, Any]:
    """Where the image goes: the engine only (local container mode), or pushed to the registry
    (the SageMaker, Vertex AI and Azure ML engine builds)."""
    if request.param == "engine":
        return {}
    registry = request.getfixturevalue("registry_image").split("/", 1)[0]
    return {"repository": f"{registry}/stepop-it-lock", "push": True}


@pytest.mark.container
def test_tasks_missing_one_image_together_build_it_once(docker_client, target, tmp_path):
    from airflow_stepop.images.builder import image_reference

    # a tag no one has: the cheapest build there is, an ENV on the offline base image
    settings = DockerSettings(
        parent_image=BASE_IMAGE, environment={"STEPOP_LOCK_TEST": uuid.uuid4().hex}
    )
    reference = image_reference(settings, target.get("repository", "airflow-stepop-env"))
    context = multiprocessing.get_context("fork")
    messages = context.Queue()
    release = context.Event()
    seen: list[tuple] = []
    tasks = {
        name: context.Process(
            target=_task, args=(name, settings, target, str(tmp_path), messages, release)
        )
        for name in ("first", "second")
    }
    try:
        tasks["first"].start()
        _until(messages, seen, lambda m: m[:2] == ("first", "build-starts"))
        tasks["second"].start()
        # the second task either waits for the first's lock or, with no lock, starts a build
        _, kind, detail = _until(
            messages,
            seen,
            lambda m: (
                m[0] == "second" and (m[1] == "build-starts" or (m[1] == "log" and WAITING in m[2]))
            ),
        )
        assert kind == "log", f"the second task built too; seen: {seen}"
        release.set()
        results = {}
        while len(results) < 2:
            name, _, result = _until(messages, seen, lambda m: m[1] == "result")
            results[name] = result
        for process in tasks.values():
            process.join(120)
            assert process.exitcode == 0
        env = docker_client.images.get(reference).attrs["Config"]["Env"]
        assert f"STEPOP_LOCK_TEST={settings.environment['STEPOP_LOCK_TEST']}" in env
        if target:
            assert docker_client.images.get_registry_data(reference).id
    finally:
        release.set()
        for process in tasks.values():
            if process.is_alive():
                process.join(120)
            if process.is_alive():
                process.kill()
        with contextlib.suppress(Exception):  # only this test's tag; the push stays
            docker_client.images.remove(reference, force=True)

    assert results == {"first": (reference, True), "second": (reference, False)}
    logs = [(name, text) for name, kind, text in seen if kind == "log"]
    assert [name for name, text in logs if text.startswith(BUILDING)] == ["first"]
    assert [name for name, kind, _ in seen if kind == "build-starts"] == ["first"]
    pushes = [name for name, text in logs if text.startswith("Pushing")]
    assert pushes == (["first"] if target else [])
    assert (
        "second",
        f"Environment image {reference} was built by another task while this one waited; "
        "using it, no build",
    ) in logs
    assert (tmp_path / "stepop-cache" / "image-locks").is_dir()
