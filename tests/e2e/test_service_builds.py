"""Steps from an Airflow with no container engine: each cloud's builder builds their images.

Issue 40: on managed Airflow (MWAA, Cloud Composer, Astronomer, the Helm chart) no worker has a
Docker daemon. Here every Airflow process (api-server, scheduler with the LocalExecutor,
dag-processor, triggerer, on a private PostgreSQL) runs with ``DOCKER_HOST`` pointing at a port
nothing listens on, against this module's own fakes: SageMaker's images are built by AWS
CodeBuild, Vertex AI's by Cloud Build, Azure ML's by Azure ML itself. The fakes really build
with the stack's engine, push to its registry, and run each job in the image built for it, so a
step that pins ``tabulate==0.9.0`` (the test virtualenv has another version) sees 0.9.0 only if
it ran in what was built. ``tests/e2e/build_dags`` holds the DAGs.
"""

from __future__ import annotations

import shutil
import tempfile
import urllib.error
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cloud.control import FakeControl
from cloud.pytest_plugin import cloud_stack, registry_image  # noqa: F401 - fixtures
from tests.e2e.private_clouds import aws_client, connections, make_buckets, private_fakes
from tests.e2e.services import Api, airflow_deployment
from tests.waiting import wait_for

DAGS = Path(__file__).parent / "build_dags"
SERVICES = ("sagemaker", "vertex", "azureml")
ROLE = "arn:aws:iam::123456789012:role/stepop"
GCP_PROJECT = "stepop-service-builds"
BUCKET = "stepop-service-builds"
AZURE_CONTAINER = "azureml-blobstore"
RUN_TIMEOUT = 420  # seconds: a build with pip, then a job in a container of its image
CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"


@pytest.fixture(scope="module")
def fakes(cloud_stack: dict[str, str]) -> Iterator[dict[str, Any]]:  # noqa: F811
    with private_fakes(cloud_stack, builders=True) as started:
        yield started


@pytest.fixture(scope="module")
def deployment(
    cloud_stack: dict[str, str],  # noqa: F811
    registry_image: str,  # noqa: F811
    fakes: dict[str, Any],
) -> Iterator[dict[str, Any]]:
    """Airflow's services with no container engine, every backend set for the private fakes."""
    make_buckets(cloud_stack, BUCKET, BUCKET)
    base = Path(tempfile.mkdtemp(prefix="stepop-service-builds-"))
    base.chmod(0o755)  # the PostgreSQL server runs as `postgres` when we are root
    prefix = f"builds-{uuid.uuid4().hex[:8]}"
    extra = {
        **{k: v for k, v in cloud_stack.items() if k != "STEPOP_CLOUD_DIR"},
        **connections(cloud_stack, fakes, GCP_PROJECT),
        "DOCKER_HOST": "tcp://127.0.0.1:9",  # no engine answers any Airflow process
        "AIRFLOW__STEPOP__SAGEMAKER_ARTIFACT_ROOT": f"s3://{BUCKET}/{prefix}",
        "AIRFLOW__STEPOP__SAGEMAKER_ROLE": ROLE,
        "AIRFLOW__STEPOP__VERTEX_ARTIFACT_ROOT": f"gs://{BUCKET}/{prefix}",
        "AIRFLOW__STEPOP__AZUREML_ARTIFACT_ROOT": f"abfs://{AZURE_CONTAINER}/{prefix}",
        "AIRFLOW__STEPOP__POLL_INTERVAL": "1.0",
        "AIRFLOW__STEPOP__BUILD_NETWORK_MODE": "host",  # the stack's engine has no bridge
        "STEPOP_BUILD_PARENT": registry_image,
        "STEPOP_BUILD_SALT": uuid.uuid4().hex[:12],  # every tag new: the first run builds
    }
    if Path(CA_BUNDLE).exists():  # pip behind this machine's TLS-re-signing proxy
        extra["AIRFLOW__STEPOP__BUILD_CA_BUNDLE"] = CA_BUNDLE
    try:
        with airflow_deployment(base, DAGS, extra) as (api, home):
            wait_for(lambda: _parsed(api), 180, "the DAGs", tolerate=(OSError,), interval=1)
            yield {"api": api, "home": home, "cloud": cloud_stack}
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _parsed(api: Api) -> bool:
    dags = {d["dag_id"] for d in api.get("/api/v2/dags?tags=service-build-test")["dags"]}
    return {"built_sagemaker", "slow_build_sagemaker"} <= dags and len(dags) == 6


def _trigger(api: Api, dag_id: str, run_id: str) -> None:
    api.patch(f"/api/v2/dags/{dag_id}", {"is_paused": False})
    api.post(f"/api/v2/dags/{dag_id}/dagRuns", {"dag_run_id": run_id, "logical_date": None})


def _run(deployment: dict[str, Any], dag_ids: list[str], run_id: str) -> dict[str, Any]:
    """Trigger ``dag_ids`` as ``run_id``, wait until each run ends: dag_id -> (state, result,
    task log)."""
    api: Api = deployment["api"]
    for dag_id in dag_ids:
        _trigger(api, dag_id, run_id)

    def ended() -> dict[str, str] | None:
        states = {d: api.get(f"/api/v2/dags/{d}/dagRuns/{run_id}")["state"] for d in dag_ids}
        return states if all(s in ("success", "failed") for s in states.values()) else None

    states = wait_for(ended, RUN_TIMEOUT, f"runs {run_id}", tolerate=(OSError,), interval=2)
    seen = {}
    for dag_id, state in states.items():
        ti_path = f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/step"
        try:
            result = api.get(f"{ti_path}/xcomEntries/return_value")["value"]
        except urllib.error.HTTPError:
            result = None
        logs = deployment["home"] / "logs" / f"dag_id={dag_id}" / f"run_id={run_id}"
        log = "\n".join(p.read_text() for p in sorted(logs.rglob("*.log")))
        seen[dag_id] = (state, result, log)
    return seen


def _counts(fakes: dict[str, Any]) -> dict[str, int]:
    codebuild = FakeControl(fakes["codebuild"].url).counters()
    cloudbuild = FakeControl(fakes["cloudbuild"].url).counters()
    return {"StartBuild": codebuild.get("StartBuild", 0),
            "CreateBuild": cloudbuild.get("CreateBuild", 0)}  # fmt: skip


def test_each_clouds_builder_builds_the_pinned_environment_once_and_the_step_runs_in_it(
    deployment: dict[str, Any], fakes: dict[str, Any]
) -> None:
    import tabulate

    assert tabulate.__version__ != "0.9.0"  # else the test could not tell the image's apart
    dag_ids = [f"built_{service}" for service in SERVICES]
    first = _run(deployment, dag_ids, "first")
    for dag_id, (state, result, log) in first.items():
        assert (state, result) == ("success", "0.9.0"), f"{dag_id}: {state}\n{log[-3000:]}"
    assert _counts(fakes) == {"StartBuild": 1, "CreateBuild": 1}
    sagemaker_log = first["built_sagemaker"][2]
    assert "AWS CodeBuild builds it from s3://" in sagemaker_log
    assert "Waiting for image build" in sagemaker_log  # deferred: no worker slot meanwhile
    assert "is built: creating the job" in sagemaker_log
    assert "Step job: " in sagemaker_log  # its console link, stored when the task resumed
    assert "Cloud Build builds it from gs://" in first["built_vertex"][2]

    second = _run(deployment, dag_ids, "second")  # the same environments: nothing to build
    for dag_id, (state, result, log) in second.items():
        assert (state, result) == ("success", "0.9.0"), f"{dag_id}: {state}\n{log[-3000:]}"
    assert _counts(fakes) == {"StartBuild": 1, "CreateBuild": 1}
    assert "is in the registry; no build" in second["built_sagemaker"][2]
    assert "is in the registry; no build" in second["built_vertex"][2]


def test_a_build_that_fails_fails_its_task_with_the_builders_reason_and_no_job(
    deployment: dict[str, Any], fakes: dict[str, Any]
) -> None:
    seen = _run(deployment, ["unbuildable_sagemaker", "unbuildable_vertex"], "unbuildable")
    for dag_id, (state, _, log) in seen.items():
        assert state == "failed", dag_id
        assert "stepop-no-such-package==9.9.9" in log and "was not built" in log, log[-3000:]
        assert "No job was created" in log
        assert "A requirement does not exist on the package index" in log  # the fix
    sagemaker = aws_client("sagemaker", deployment["cloud"], fakes["sagemaker"].url)
    jobs = sagemaker.list_training_jobs(NameContains="unbuildable", MaxResults=100)
    assert jobs["TrainingJobSummaries"] == []


def test_a_users_kill_during_the_build_stops_the_build_and_starts_no_job(
    deployment: dict[str, Any], fakes: dict[str, Any]
) -> None:
    api: Api = deployment["api"]
    codebuild = FakeControl(fakes["codebuild"].url)
    stops = codebuild.counters().get("StopBuild", 0)
    ti_path = "/api/v2/dags/slow_build_sagemaker/dagRuns/killed/taskInstances/step"
    with codebuild.faulted({"kind": "provisioning_delay", "seconds": 600}):
        _trigger(api, "slow_build_sagemaker", "killed")
        # the user kills the task while the triggerer follows its build (a trigger Airflow has
        # not started yet gets no on_kill: that holds for a job as for a build)
        logs = deployment["home"] / "logs" / "dag_id=slow_build_sagemaker" / "run_id=killed"
        wait_for(lambda: any("Waiting for image build" in p.read_text(errors="replace")
                             for p in logs.rglob("*trigger*")),
                 180, "the triggerer to follow the build", interval=1)  # fmt: skip
        assert api.get(ti_path)["state"] == "deferred"
        api.patch(ti_path, {"new_state": "failed"})  # as a user marks it in the UI
        wait_for(lambda: codebuild.counters().get("StopBuild", 0) > stops, 60, "StopBuild",
                 interval=0.5)  # fmt: skip
    builds = aws_client("codebuild", deployment["cloud"], fakes["codebuild"].url)
    ids = builds.list_builds_for_project(projectName="airflow-stepop-image-build")["ids"]
    statuses = [b["buildStatus"] for b in builds.batch_get_builds(ids=ids)["builds"]]
    assert "STOPPED" in statuses
    sagemaker = aws_client("sagemaker", deployment["cloud"], fakes["sagemaker"].url)
    jobs = sagemaker.list_training_jobs(NameContains="slow-build", MaxResults=100)
    assert jobs["TrainingJobSummaries"] == []
