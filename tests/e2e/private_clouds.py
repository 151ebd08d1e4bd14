"""A test module's own fakes of the job services and image builders, and the connections that
point Airflow's processes at them (the stack's moto, GCS emulator and Azurite stay shared).

Private fakes keep a test's counters and job lists its own: a count of ``StartBuild`` calls is
this module's builds, not another test's.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any


@contextlib.contextmanager
def private_fakes(cloud: dict[str, str], builders: bool = False) -> Iterator[dict[str, Any]]:
    """SageMaker, Vertex AI and Azure ML fakes in this process (and, with ``builders``, AWS
    CodeBuild and Cloud Build ones), shut down on exit."""
    from cloud import azureml, sagemaker, vertex

    base = Path(tempfile.mkdtemp(prefix="stepop-e2e-fakes-"))
    for directory in ("vertex", "azureml", "azureml-tls"):
        (base / directory).mkdir()
    started: dict[str, Any] = {}
    try:
        started["sagemaker"] = sagemaker.start(dict(cloud))
        started["vertex"] = vertex.serve(
            "127.0.0.1", 0, gcs_emulator_host=cloud["STORAGE_EMULATOR_HOST"],
            tmp_base=str(base / "vertex"),
        )  # fmt: skip
        started["azureml"] = azureml.serve(
            "127.0.0.1", 0,
            storage_connection_string=cloud["AZURE_STORAGE_CONNECTION_STRING"],
            tmp_base=str(base / "azureml"), tls_dir=str(base / "azureml-tls"),
        )  # fmt: skip
        if builders:
            from cloud import cloudbuild, codebuild

            started["codebuild"] = codebuild.start(dict(cloud))
            started["cloudbuild"] = cloudbuild.start(dict(cloud))
        yield started
    finally:
        for server in started.values():
            server.shutdown()
        shutil.rmtree(base, ignore_errors=True)


def connections(cloud: dict[str, str], fakes: dict[str, Any], project: str) -> dict[str, str]:
    """The stack's connections (as .cloud/env writes them), pointed at ``fakes``."""
    aws = json.loads(cloud["AIRFLOW_CONN_AWS_DEFAULT"])
    services = aws["extra"].setdefault("service_config", {})
    services["sagemaker"] = {"endpoint_url": fakes["sagemaker"].url}
    gcp = json.loads(cloud["AIRFLOW_CONN_GOOGLE_CLOUD_DEFAULT"])
    gcp["extra"].update(
        project=project,
        vertex_endpoint=fakes["vertex"].url,
        logging_endpoint=fakes["vertex"].url,
    )
    env = {"AWS_ENDPOINT_URL_SAGEMAKER": fakes["sagemaker"].url}
    if "codebuild" in fakes:
        services["codebuild"] = {"endpoint_url": fakes["codebuild"].url}
        env["AWS_ENDPOINT_URL_CODEBUILD"] = fakes["codebuild"].url
        gcp["extra"]["cloudbuild_endpoint"] = fakes["cloudbuild"].url
    azure = json.loads(cloud["AIRFLOW_CONN_AZUREML_DEFAULT"])
    azure["extra"].update(endpoint=fakes["azureml"].https_url, ca_bundle=fakes["azureml"].ca_bundle)
    return {
        **env,
        "AIRFLOW_CONN_AWS_DEFAULT": json.dumps(aws),
        "AIRFLOW_CONN_GOOGLE_CLOUD_DEFAULT": json.dumps(gcp),
        "AIRFLOW_CONN_AZUREML_DEFAULT": json.dumps(azure),
    }


def aws_client(service: str, cloud: dict[str, str], endpoint: str = "") -> Any:
    """A boto3 client of the emulated AWS, with the stack's credentials."""
    import boto3

    return boto3.client(
        service,
        endpoint_url=endpoint or cloud["AWS_ENDPOINT_URL"],
        region_name=cloud["AWS_DEFAULT_REGION"],
        aws_access_key_id=cloud["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=cloud["AWS_SECRET_ACCESS_KEY"],
    )


def make_buckets(cloud: dict[str, str], s3_bucket: str, gcs_bucket: str) -> None:
    from cloud.vertex.gcs import storage_client

    s3 = aws_client("s3", cloud)
    with contextlib.suppress(s3.exceptions.BucketAlreadyOwnedByYou):
        s3.create_bucket(Bucket=s3_bucket)
    gcs = storage_client(cloud["STORAGE_EMULATOR_HOST"])
    if gcs.lookup_bucket(gcs_bucket) is None:
        gcs.create_bucket(gcs_bucket)
