"""Ten tasks of a mapped step that need one new image tag, prepared at once on workers with no
container engine: what each backend's ``prepare`` asks of its cloud's builder.

Each task is staged as its own map index (``stage_step``), then ten threads call the backend's
``prepare`` together, as ten worker slots running the expanded task would: the builder must be
asked for one build, and every task must wait for that same build.
"""

from __future__ import annotations

import threading
import uuid
from typing import Any

from airflow_stepop.backends.base import JobRequest, PreparedJob, StepBackend
from airflow_stepop.settings import DockerSettings

PARENT = "127.0.0.1:5000/stepop-base/python:3.11-bookworm"
TASKS = 10


def _step(i: int) -> int:
    return i


def prepare_mapped(
    backend: StepBackend, root: str, conn_id: str, tasks: int = TASKS
) -> list[PreparedJob]:
    """``tasks`` map indexes of one step with one new environment, prepared concurrently."""
    from airflow_stepop.artifacts.storage import worker_storage
    from airflow_stepop.backends.naming import job_name, task_key
    from airflow_stepop.packaging.staging import StepIdentity, stage_step

    storage = worker_storage(conn_id)
    docker = DockerSettings(parent_image=PARENT, environment={"SALT": uuid.uuid4().hex})
    run_id = f"run-{uuid.uuid4().hex[:6]}"
    requests = []
    for index in range(tasks):
        key = task_key("mapped_build", run_id, "step", index)
        step = StepIdentity("mapped_build", run_id, "step", index, 1)
        staged = stage_step(_step, [index], {}, root=root, step=step, storage=storage)
        uris = (staged.spec_uri, staged.run_uri, staged.code_uri)
        requests.append(JobRequest(job_name(key, 1), key, *uris, docker=docker))
    prepared: list[Any] = [None] * tasks
    errors: list[BaseException] = []

    def prepare(index: int) -> None:
        try:
            prepared[index] = backend.prepare(requests[index])
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=prepare, args=(i,)) for i in range(tasks)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return prepared
