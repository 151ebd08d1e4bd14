"""Steps whose images a cloud's builder must build: the worker has no container engine.

tests/e2e/test_service_builds.py runs them under Airflow's own processes with ``DOCKER_HOST``
pointing nowhere. ``built_<service>`` pins a requirement at a version other than the test
virtualenv's and returns the version the step saw; ``unbuildable_<service>`` asks for a
requirement no index has; ``slow_build_sagemaker`` needs a tag of its own, so that its build is
the one a user kills. ``STEPOP_BUILD_SALT`` (new for every test session) makes every tag new.
"""

from __future__ import annotations

import os

from airflow.sdk import dag, task

from airflow_stepop import DockerSettings

PARENT = os.environ.get("STEPOP_BUILD_PARENT", "127.0.0.1:5000/stepop-base/python:3.11-bookworm")
SALT = os.environ.get("STEPOP_BUILD_SALT", "none")
SERVICES = ("sagemaker", "vertex", "azureml")


def pinned_version() -> str:
    import tabulate

    return tabulate.__version__


def step_dag(dag_id: str, service: str, docker: DockerSettings) -> None:
    @dag(dag_id=dag_id, schedule=None, tags=["airflow-stepop", "service-build-test"])
    def service_build():
        getattr(task, f"{service}_step")(task_id="step", docker=docker)(pinned_version)()

    service_build()


for _service in SERVICES:
    step_dag(f"built_{_service}", _service, DockerSettings(
        parent_image=PARENT, requirements=["tabulate==0.9.0"],
        environment={"STEPOP_BUILD_SALT": SALT},
    ))  # fmt: skip
for _service in ("sagemaker", "vertex"):
    step_dag(f"unbuildable_{_service}", _service, DockerSettings(
        parent_image=PARENT, requirements=["stepop-no-such-package==9.9.9"],
        environment={"STEPOP_BUILD_SALT": SALT},
    ))  # fmt: skip
step_dag("slow_build_sagemaker", "sagemaker", DockerSettings(
    parent_image=PARENT, environment={"STEPOP_BUILD_SALT": f"{SALT}-slow"},
))  # fmt: skip
