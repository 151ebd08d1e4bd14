"""A trigger imports no cloud SDK, and reads none of its data files, on the triggerer's loop.

A cloud SDK's first import takes seconds (``google.cloud.aiplatform_v1``: 2-6 s), and reading
botocore's SageMaker service model a quarter of one; on the loop either stalls every trigger of
the triggerer process meanwhile: log relays, deadlines and kills. Each backend imports and reads
what its async calls need in ``prepare_async``, in a thread. Each case
runs a trigger in a fresh process (where nothing is imported yet) against the emulated cloud,
for a job the service does not know: the trigger lists, describes, and hands the job back to
the task on the answer.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cloud.pytest_plugin import cloud_environ, cloud_stack  # noqa: F401 - the fixtures

ROOT = Path(__file__).resolve().parents[2]
# Cloud SDKs and what they stand on, Airflow's providers: none may load on the loop.
HEAVY = ("google", "boto3", "botocore", "aiobotocore", "aiohttp", "azure.identity", "azure.ai")
HEAVY_PACKAGES = ("airflow.providers",)

CASES = {
    "sagemaker": (
        "airflow_stepop.backends.sagemaker.backend.SageMakerBackend",
        {"aws_conn_id": "aws_default", "region_name": None},
        {"job_id": "never-submitted", "run_uri": "s3://stepop-demo/never"},
        "unwatched: its state could not be read (ClientError:",
    ),
    "vertex": (
        "airflow_stepop.backends.vertex.backend.VertexBackend",
        {"gcp_conn_id": "google_cloud_default", "project_id": None, "location": None},
        {
            "job_id": "404",
            "name": "projects/stepop-local/locations/us-central1/customJobs/404",
            "run_uri": "gs://stepop-demo/never",
            "project": "stepop-local",
            "location": "us-central1",
            "create_time": "2026-01-01T00:00:00Z",
        },
        "unwatched: its state could not be read (NotFound:",
    ),
    "azureml": (
        "airflow_stepop.backends.azureml.backend.AzureMLBackend",
        {"azureml_conn_id": "azureml_default"},
        {"job_id": "never-submitted", "run_uri": "az://stepop-demo/never"},
        "unwatched: its state could not be read (ResourceNotFoundError:",
    ),
}


@pytest.mark.usefixtures("cloud_environ")
@pytest.mark.parametrize("cloud", sorted(CASES))
def test_a_triggers_calls_import_and_read_no_cloud_sdk_on_the_event_loop(cloud, tmp_path):
    backend_path, kwargs, handle, answer = CASES[cloud]
    run = subprocess.run(
        [sys.executable, "-m", "tests.integration.loop_imports", backend_path,
         json.dumps(kwargs), json.dumps(handle)],
        cwd=ROOT,
        env={**os.environ, "AIRFLOW_HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads(run.stdout.strip().splitlines()[-1])
    assert report["outcome"].startswith(answer)  # the service was asked: it has no such job
    on_loop = report["on_loop"]
    heavy = [
        name
        for name in on_loop
        if name.split(".")[0] in HEAVY or name.startswith(HEAVY + HEAVY_PACKAGES)
    ]
    assert heavy == [], f"imported on the event loop: {heavy}"
    assert report["read_on_loop"] == [], "an installed package's data read on the event loop"
