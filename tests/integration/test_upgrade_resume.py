"""A task deferred by the version before the service packages resumes after the upgrade.

Airflow keeps a deferred task's trigger as a classpath and keyword arguments, and the trigger
keeps its backend's classpath (``airflow_stepop.backends.<service>.<Backend>`` then, a module;
a package now). ``tests/fixtures/triggers_stored_before_service_packages.json`` holds what that
version stored; these tests rebuild the triggers from it as the triggerer does.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from airflow.sdk.bases.operator import ExecutorSafeguard
from airflow.sdk.exceptions import TaskDeferred
from airflow.sdk.module_loading import import_string

from airflow_stepop import LocalStepOperator
from airflow_stepop.backends.base import StepBackend
from airflow_stepop.triggers.step_job import StepJobTrigger, load_backend

STORED = json.loads(
    (
        Path(__file__).parents[1] / "fixtures/triggers_stored_before_service_packages.json"
    ).read_text()
)


@pytest.mark.parametrize("backend_path", sorted(STORED["backends"]))
def test_a_backend_path_stored_before_the_move_rebuilds_that_backend(backend_path):
    backend = load_backend(backend_path, STORED["backends"][backend_path])
    assert isinstance(backend, StepBackend)
    assert type(backend).__name__ == backend_path.rsplit(".", 1)[1]
    assert backend.serialize() == STORED["backends"][backend_path]  # nothing lost on the way


def test_a_local_step_deferred_before_the_move_resumes_and_returns_its_result(
    tmp_path, monkeypatch
):
    """The job runs now (its files as the new version writes them, which the move did not
    change), and the trigger Airflow rebuilds carries the classpaths the old version stored."""
    monkeypatch.setenv("AIRFLOW__STEPOP__ARTIFACT_ROOT", f"file://{tmp_path}/artifacts")
    monkeypatch.setenv("AIRFLOW__STEPOP__LOCAL_JOBS_DIR", str(tmp_path / "jobs"))
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path / "home"))
    operator = LocalStepOperator(task_id="t", python_callable=json.dumps, op_args=[[1, 2]])
    ti = SimpleNamespace(dag_id="d", run_id="r", task_id="t", map_index=-1, try_number=1)
    with pytest.raises(TaskDeferred) as deferred:
        operator.execute({"ti": ti}, LocalStepOperator__sentinel=ExecutorSafeguard.sentinel_value)
    classpath, kwargs = deferred.value.trigger.serialize()

    old_classpath, old_kwargs = STORED["local"]
    # what the old version stored has the shape the new one writes and reads
    assert classpath == old_classpath
    # ... but for the deadline: a duration now (``time_left``), the worker's wall clock then;
    # and what the trigger needs to end the task itself (``end_task``), which a trigger stored
    # without it does not (its task resumes in a worker, as then)
    assert kwargs.keys() - {"time_left", "end_task"} == old_kwargs.keys() - {"deadline"}
    assert kwargs["handle"].keys() == old_kwargs["handle"].keys()
    assert kwargs["backend_kwargs"].keys() == old_kwargs["backend_kwargs"].keys()
    assert kwargs["backend_path"] != old_kwargs["backend_path"]  # the move changed it

    stored = {**kwargs, "backend_path": old_kwargs["backend_path"], "poll_interval": 0.1}
    trigger = import_string(old_classpath)(**stored)
    assert isinstance(trigger, StepJobTrigger)

    async def first_event():
        async for event in trigger.run():
            return event.payload

    event = asyncio.run(asyncio.wait_for(first_event(), 120))
    assert event["status"] == "succeeded", event
    result = operator.execute_complete({"ti": ti}, event)
    assert result == "[1, 2]"


def test_a_trigger_stored_with_a_wall_clock_deadline_still_loads_and_keeps_it():
    """The previous version passed ``deadline`` (the worker's wall clock): its triggers load as
    stored and serialize to the same kwargs, the deadline kept."""
    classpath, kwargs = STORED["local"]
    stored = {**kwargs, "deadline": 1_900_000_000.0}
    trigger = import_string(classpath)(**stored)
    assert trigger.deadline == 1_900_000_000.0 and trigger.time_left is None
    assert trigger.serialize()[1] == {**stored, "time_left": None}


def _provider_paths(info: dict) -> list[str]:
    """Every import path ``get_provider_info()`` gives Airflow."""
    paths = [d["class-name"] for d in info["task-decorators"]]
    paths += [c["hook-class-name"] for c in info["connection-types"]]
    paths += [module for t in info["triggers"] for module in t["python-modules"]]
    paths += info["filesystems"] + info["extra-links"]
    return paths


def test_every_name_airflow_and_users_import_still_imports():
    """What Airflow loads from the provider's info, and the public names of ``airflow_stepop``
    (a DAG's imports), resolve after the move."""
    import importlib

    import airflow_stepop

    info = airflow_stepop.get_provider_info()
    paths = _provider_paths(info)
    assert len(paths) >= 10, paths
    for path in paths:
        try:
            importlib.import_module(path)
        except ImportError:
            module, _, name = path.rpartition(".")
            assert getattr(importlib.import_module(module), name) is not None, path
    for name in airflow_stepop.__all__:
        assert getattr(airflow_stepop, name) is not None, name
    assert info["connection-types"][0]["connection-type"] == "azure_ml"
    assert info["config"]["stepop"]["options"]  # the [stepop] options, unchanged by the move
