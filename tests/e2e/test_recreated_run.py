"""A DAG run deleted and triggered again with the same run_id gets new jobs and its own results.

Issue 39, point 1: job names and run directories once came only from dag, run, task, map index
and try, so a run triggered with a fixed run_id (the REST API's ``dag_run_id``, as backfill
scripts do), deleted, and triggered again with the same run_id and a new input found the first
run's job under its name: SageMaker's step returned the old input's result, the local step
failed. Each job now carries its try's Airflow task instance id (``ti.id``), and a hash of the
task instance's first try id (kept in the task state store, deleted with its run) goes into its
job names and run directories.

Under Airflow's own processes (api-server, scheduler with the LocalExecutor, dag-processor,
triggerer) on a private PostgreSQL, as docker-compose.yaml runs them, one DAG per backend
(tests/e2e/recreated_dags): the local backend, and SageMaker, Vertex AI and Azure ML on private
fakes of the emulated clouds (this session's own, so their job lists hold only this test's
jobs). The four DAGs go through the whole story at once, through the REST API as a user would:
trigger with run_id R and ``{"value": 1}``, wait, delete the run, trigger R with
``{"value": 2}``, wait. Then, per backend: the second run returns the value-2 result computed
by a job of its own try, the service holds two jobs for the task (distinct names, each carrying
its run's try id), and the two runs staged into two run directories.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import urllib.error
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from cloud.pytest_plugin import cloud_stack, registry_image  # noqa: F401 - fixtures
from tests.e2e.private_clouds import aws_client, connections, make_buckets, private_fakes
from tests.e2e.services import Api, airflow_deployment
from tests.waiting import wait_for

DAGS = Path(__file__).parent / "recreated_dags"
BACKENDS = ("local", "sagemaker", "vertex", "azureml")
TASK = "compute"
RUN_ID = "reload-2026-11-01"  # fixed by the user, as a backfill script does
ROLE = "arn:aws:iam::123456789012:role/stepop"
GCP_PROJECT = "stepop-recreated"
GCS_BUCKET = "stepop-recreated"
S3_BUCKET = "stepop-recreated"
AZURE_CONTAINER = "azureml-blobstore"  # the fake workspace's default datastore
RUN_TIMEOUT = 300  # seconds for one run of the four DAGs (each a single small step)


def dag_id(backend: str) -> str:
    return f"recreated_run_{backend}"


@dataclass
class RunSeen:
    """One finished DAG run as the REST API and the task log show it."""

    state: str  # the DAG run's
    ti: dict[str, Any]  # the task instance
    result: Any  # its return_value XCom (None when it has none)
    log: str  # its task log


Recreated = dict[str, tuple[RunSeen, RunSeen]]  # each backend's first and second run


@pytest.fixture(scope="module")
def fakes(cloud_stack: dict[str, str]) -> Iterator[dict[str, Any]]:  # noqa: F811
    """This module's own SageMaker, Vertex AI and Azure ML fakes (jobs run as processes)."""
    with private_fakes(cloud_stack) as started:
        yield started


@pytest.fixture(scope="module")
def deployment(
    cloud_stack: dict[str, str],  # noqa: F811
    registry_image: str,  # noqa: F811
    fakes: dict[str, Any],
) -> Iterator[dict[str, Any]]:
    """Airflow's services on a private PostgreSQL, every backend configured for the fakes."""
    make_buckets(cloud_stack, S3_BUCKET, GCS_BUCKET)
    base = Path(tempfile.mkdtemp(prefix="stepop-recreated-"))
    base.chmod(0o755)  # the PostgreSQL server runs as `postgres` when we are root
    prefix = f"recreated-{uuid.uuid4().hex[:8]}"
    roots = {
        "local": f"file://{base / 'artifacts'}",
        "sagemaker": f"s3://{S3_BUCKET}/{prefix}",
        "vertex": f"gs://{GCS_BUCKET}/{prefix}",
        "azureml": f"abfs://{AZURE_CONTAINER}/{prefix}",
    }
    extra = {
        **{k: v for k, v in cloud_stack.items() if k != "STEPOP_CLOUD_DIR"},
        **connections(cloud_stack, fakes, GCP_PROJECT),
        "AIRFLOW__STEPOP__ARTIFACT_ROOT": roots["local"],
        "AIRFLOW__STEPOP__LOCAL_JOBS_DIR": str(base / "jobs"),
        "AIRFLOW__STEPOP__SAGEMAKER_ARTIFACT_ROOT": roots["sagemaker"],
        "AIRFLOW__STEPOP__SAGEMAKER_ROLE": ROLE,
        "AIRFLOW__STEPOP__VERTEX_ARTIFACT_ROOT": roots["vertex"],
        "AIRFLOW__STEPOP__AZUREML_ARTIFACT_ROOT": roots["azureml"],
        "AIRFLOW__STEPOP__POLL_INTERVAL": "0.5",
        "STEPOP_RECREATED_IMAGE": registry_image,
    }
    try:
        with airflow_deployment(base, DAGS, extra) as (api, home):
            _wait_for_dags(api)
            yield {"api": api, "home": home, "base": base, "roots": roots, "cloud": cloud_stack}
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _wait_for_dags(api: Api) -> None:
    def parsed() -> bool:
        return all(api.get(f"/api/v2/dags/{dag_id(b)}") for b in BACKENDS)

    try:
        wait_for(parsed, 180, "the four DAGs", tolerate=(OSError,), interval=0.5)
    except AssertionError as exc:
        errors = api.get("/api/v2/importErrors")
        raise AssertionError(f"{exc}; import errors: {errors}") from exc


@pytest.fixture(scope="module")
def recreated(deployment: dict[str, Any]) -> Recreated:
    """Each DAG run with ``{"value": 1}``, deleted, and run again under the same run_id with
    ``{"value": 2}``: the first and second run as each backend's DAG saw them."""
    api: Api = deployment["api"]
    for backend in BACKENDS:
        api.patch(f"/api/v2/dags/{dag_id(backend)}", {"is_paused": False})
    first = _run_all(deployment, {"value": 1})
    _wait_for_exits_taken(deployment, first)
    for backend in BACKENDS:
        # as a user deletes a run: the REST API (the UI's delete button calls the same)
        api._call("DELETE", f"/api/v2/dags/{dag_id(backend)}/dagRuns/{RUN_ID}")
        with pytest.raises(urllib.error.HTTPError, match="404"):
            api.get(f"/api/v2/dags/{dag_id(backend)}/dagRuns/{RUN_ID}")
    second = _run_all(deployment, {"value": 2})
    return {b: (first[b], second[b]) for b in BACKENDS}


def _wait_for_exits_taken(deployment: dict[str, Any], runs: dict[str, RunSeen]) -> None:
    """Wait until the scheduler has taken each run's last task process exit from its executor.

    Airflow's executor reports an exit by the task instance's key (dag, task, run_id, try, map
    index), which a run triggered again under the same run_id shares: an exit taken after the
    new run's task started is read as that task's, and the scheduler fails it as "killed
    externally" (Airflow's race, not the step's; docs/security.md says what a user sees). The
    scheduler logs "TaskInstance Finished: ... ti_id=<id> ... state=success" when it has taken it.
    """
    log = deployment["home"] / "services" / "scheduler.log"

    def taken() -> bool:
        finished = [line for line in log.read_text(errors="replace").splitlines()
                    if "TaskInstance Finished" in line and "state=success" in line]  # fmt: skip
        ids = [f"ti_id={run.ti['id']}" for run in runs.values()]
        return all(any(ti_id in line for line in finished) for ti_id in ids)

    wait_for(taken, 60, "the scheduler to take the first runs' task exits", interval=0.5)


def _run_all(deployment: dict[str, Any], conf: dict[str, Any]) -> dict[str, RunSeen]:
    """Trigger every backend's DAG as run RUN_ID with ``conf``; wait until each run ends."""
    api: Api = deployment["api"]
    for backend in BACKENDS:
        body = {"dag_run_id": RUN_ID, "logical_date": None, "conf": conf}
        try:
            run = api.post(f"/api/v2/dags/{dag_id(backend)}/dagRuns", body)
        except urllib.error.HTTPError as exc:
            raise AssertionError(f"trigger {dag_id(backend)}: {exc} {exc.read()!r}") from exc
        assert run["dag_run_id"] == RUN_ID

    def states() -> dict[str, str]:
        return {b: api.get(f"/api/v2/dags/{dag_id(b)}/dagRuns/{RUN_ID}")["state"] for b in BACKENDS}

    def ended() -> dict[str, str] | None:
        seen = states()
        return seen if all(s in ("success", "failed") for s in seen.values()) else None

    try:
        final = wait_for(ended, RUN_TIMEOUT, f"runs with {conf}", tolerate=(OSError,), interval=1)
    except AssertionError as exc:
        raise AssertionError(f"{exc}: {states()}") from exc
    return {b: _seen(deployment, b, final[b]) for b in BACKENDS}


def _seen(deployment: dict[str, Any], backend: str, state: str) -> RunSeen:
    api: Api = deployment["api"]
    ti_path = f"/api/v2/dags/{dag_id(backend)}/dagRuns/{RUN_ID}/taskInstances/{TASK}"
    ti = api.get(ti_path)
    try:
        value = api.get(f"{ti_path}/xcomEntries/return_value")["value"]
        result = json.loads(value) if isinstance(value, str) else value
    except urllib.error.HTTPError:
        result = None
    logs = deployment["home"] / "logs" / f"dag_id={dag_id(backend)}" / f"run_id={RUN_ID}"
    log = "\n".join(p.read_text() for p in sorted(logs.rglob("*.log")))
    return RunSeen(state, ti, result, log)


# ---- what each service holds -----------------------------------------------------------------


def _jobs(backend: str, deployment: dict[str, Any], fakes: dict[str, Any]) -> dict[str, str]:
    """The service's jobs of this backend's task: job name -> the try id the job carries."""
    prefix = f"recreated-run-{backend}-{TASK}-"
    if backend == "local":
        jobs = {}
        for record in (deployment["base"] / "jobs").glob(f"{prefix}*/job.json"):
            jobs[record.parent.name] = json.loads(record.read_text()).get("try_id", "")
        return jobs
    if backend == "sagemaker":
        client = aws_client("sagemaker", deployment["cloud"], fakes["sagemaker"].url)
        names = [
            s["TrainingJobName"]
            for s in client.list_training_jobs(NameContains=prefix, MaxResults=100)[
                "TrainingJobSummaries"
            ]
        ]
        return {
            name: client.describe_training_job(TrainingJobName=name)["Environment"].get(
                "STEPOP_TRY_ID", ""
            )
            for name in names
        }
    if backend == "vertex":
        from google.api_core.client_options import ClientOptions
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import aiplatform_v1

        client = aiplatform_v1.JobServiceClient(
            transport="rest",
            client_options=ClientOptions(api_endpoint=fakes["vertex"].url),
            credentials=AnonymousCredentials(),
        )
        parent = f"projects/{GCP_PROJECT}/locations/us-central1"
        jobs = {}
        for job in client.list_custom_jobs(parent=parent):
            if job.display_name.startswith(prefix):
                env = job.job_spec.worker_pool_specs[0].container_spec.env
                jobs[job.display_name] = {e.name: e.value for e in env}.get("STEPOP_TRY_ID", "")
        return jobs
    import requests

    from cloud import azureml

    workspace = (
        f"/subscriptions/{azureml.SUBSCRIPTION}/resourceGroups/{azureml.RESOURCE_GROUP}/"
        f"providers/Microsoft.MachineLearningServices/workspaces/{azureml.WORKSPACE}"
    )
    found = requests.get(
        f"{fakes['azureml'].url}{workspace}/jobs",
        params={"api-version": "2024-04-01", "listViewType": "All"},
        timeout=10,
    ).json()
    return {
        job["name"]: (job["properties"].get("properties") or {}).get("stepop_try_id", "")
        for job in found["value"]
        if job["name"].startswith(prefix)
    }


def _run_directories(backend: str, deployment: dict[str, Any]) -> dict[str, set[str]]:
    """The run directories of the task's tries under this backend's artifact root:
    ``<instance>/<try>`` -> the paths of the files in it."""
    root = deployment["roots"][backend]
    scheme, _, rest = root.partition("://")
    task_dir = f"{dag_id(backend)}/{RUN_ID}/{TASK}/-1/"
    if scheme == "file":
        base = Path(rest) / task_dir
        keys = [p.relative_to(base).as_posix() for p in base.rglob("*") if p.is_file()]
    else:
        bucket, _, prefix = rest.partition("/")
        prefix = f"{prefix}/{task_dir}"
        found = _object_keys(deployment["cloud"], scheme, bucket, prefix)
        keys = [k.removeprefix(prefix) for k in found]
    directories: dict[str, set[str]] = {}
    for key in keys:
        instance, attempt, *path = key.split("/")
        if path and attempt.isdigit():  # not the task instance's checkpoints
            directories.setdefault(f"{instance}/{attempt}", set()).add("/".join(path))
    return directories


def _object_keys(cloud: dict[str, str], scheme: str, bucket: str, prefix: str) -> list[str]:
    if scheme == "s3":
        s3 = aws_client("s3", cloud)
        pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        return [o["Key"] for page in pages for o in page.get("Contents", [])]
    if scheme == "gs":
        from cloud.vertex.gcs import storage_client

        gcs = storage_client(cloud["STORAGE_EMULATOR_HOST"])
        return [b.name for b in gcs.list_blobs(bucket, prefix=prefix)]
    from azure.storage.blob import BlobServiceClient

    blobs = BlobServiceClient.from_connection_string(cloud["AZURE_STORAGE_CONNECTION_STRING"])
    container = blobs.get_container_client(bucket)
    return [b.name for b in container.list_blobs(name_starts_with=prefix)]


# ---- the test --------------------------------------------------------------------------------


def _tail(run: RunSeen) -> str:
    """What a failure message shows of a run: its log's warnings and errors, then its end."""
    bad = [
        line[:1500]
        for line in run.log.splitlines()
        if any(f'"level":"{level}"' in line for level in ("warning", "error", "critical"))
    ]
    return "\n".join([*bad[-12:], "...", run.log[-2000:]])


def test_a_run_deleted_and_triggered_again_with_the_same_run_id_makes_new_local_jobs(
    recreated: Recreated, deployment: dict[str, Any], fakes: dict[str, Any]
) -> None:
    _assert_new_jobs_and_results("local", recreated, deployment, fakes)


def test_a_run_deleted_and_triggered_again_with_the_same_run_id_makes_new_sagemaker_jobs(
    recreated: Recreated, deployment: dict[str, Any], fakes: dict[str, Any]
) -> None:
    _assert_new_jobs_and_results("sagemaker", recreated, deployment, fakes)


def test_a_run_deleted_and_triggered_again_with_the_same_run_id_makes_new_vertex_jobs(
    recreated: Recreated, deployment: dict[str, Any], fakes: dict[str, Any]
) -> None:
    _assert_new_jobs_and_results("vertex", recreated, deployment, fakes)


def test_a_run_deleted_and_triggered_again_with_the_same_run_id_makes_new_azureml_jobs(
    recreated: Recreated, deployment: dict[str, Any], fakes: dict[str, Any]
) -> None:
    _assert_new_jobs_and_results("azureml", recreated, deployment, fakes)


def _assert_new_jobs_and_results(
    backend: str, recreated: Recreated, deployment: dict[str, Any], fakes: dict[str, Any]
) -> None:
    first, second = recreated[backend]
    assert first.state == "success", f"first run {first.state}:\n{_tail(first)}"
    assert _computed(first) == {"value": 1, "squared": 1, "run_id": RUN_ID}, _tail(first)

    # the run triggered again under the same run_id: the new input's result, not the first
    # run's (nor a failure on the first run's job or files)
    assert second.state == "success", f"second run {second.state}:\n{_tail(second)}"
    assert _computed(second) == {"value": 2, "squared": 4, "run_id": RUN_ID}, _tail(second)

    # each result computed by a job of its own run's try (Airflow's ti.id, new in the new run)
    assert second.ti["id"] != first.ti["id"]
    assert [first.result["try_id"], second.result["try_id"]] == [first.ti["id"], second.ti["id"]]

    # the service holds two jobs of the task (two names), one carrying each run's try id
    jobs = _jobs(backend, deployment, fakes)
    assert len(jobs) == 2, jobs
    assert sorted(jobs.values()) == sorted([first.ti["id"], second.ti["id"]]), jobs
    for run in (first, second):
        [name] = [n for n, owner in jobs.items() if owner == run.ti["id"]]
        assert f"Submitted job {name}" in run.log

    # and each run staged into a run directory of its own, both still holding their files
    directories = _run_directories(backend, deployment)
    assert len(directories) == 2, directories
    for files in directories.values():  # the worker's spec, the job's result (SageMaker's
        # output upload puts it under the job's name)
        assert "spec.json" in files, directories
        assert any(f.rsplit("/", 1)[-1] == "result.json" for f in files), directories


def _computed(run: RunSeen) -> dict[str, Any] | None:
    """What the step computed from the run's conf, without the try id its job carried."""
    if not isinstance(run.result, dict):
        return run.result
    return {k: v for k, v in run.result.items() if k != "try_id"}
