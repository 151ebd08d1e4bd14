"""``.cloud/env``: read and written as KEY=VALUE lines, and what follows from its endpoints.

:func:`derived` adds the Airflow connections (:func:`aws_connection`,
:func:`google_connection`), each fake's ``stack_env`` lines, the CodeBuild project's and the
demo bucket's names.
"""

from __future__ import annotations

import importlib
import json
import re
from pathlib import Path

from cloud.gcs import signer
from cloud.stack.settings import (
    CODEBUILD_PROJECT,
    CODEBUILD_ROLE,
    DEMO_BUCKET,
    ENV_FILE,
    FAKES,
    MOTO_ACCOUNT,
    REGION,
    SIGNER_FILE,
    STATE,
)


def read_env(path: Path = ENV_FILE) -> dict[str, str]:
    """Parse .cloud/env: KEY=VALUE lines, a value in single quotes when the shell needs them."""
    env: dict[str, str] = {}
    if not path.exists():
        return env
    for line in path.read_text().splitlines():
        if line and not line.startswith("#") and "=" in line:
            key, value = line.split("=", 1)
            if len(value) >= 2 and value[0] == value[-1] == "'":
                value = value[1:-1].replace("'\\''", "'")
            env[key] = value
    return env


_SHELL_SAFE = re.compile(r"^[A-Za-z0-9_./:@%+,=-]*$")


def shell_quote(value: str) -> str:
    """Single-quote a value the shell would split or unquote (JSON, `;` in connection strings)."""
    if _SHELL_SAFE.match(value):
        return value
    return "'" + value.replace("'", "'\\''") + "'"


def write_env(env: dict[str, str]) -> None:
    """Write .cloud/env atomically."""
    STATE.mkdir(parents=True, exist_ok=True)
    tmp = ENV_FILE.with_suffix(".tmp")
    lines = ["# written by `python -m cloud.stack up`; removed by `down`"]
    lines += [f"{k}={shell_quote(v)}" for k, v in env.items()]
    tmp.write_text("\n".join(lines) + "\n")
    tmp.replace(ENV_FILE)


def derived(env: dict[str, str]) -> dict[str, str]:
    """``env`` plus what follows from its endpoints: the connections, each fake's ``stack_env``
    and the demo bucket's name. ``up`` recomputes it for a stack it reuses."""
    out = dict(env)
    for fake in FAKES:
        if fake.url_key not in out:  # not started (a fake whose module does not exist yet)
            continue
        extra = getattr(importlib.import_module(fake.module), "stack_env", None)
        if extra is not None:
            out.update(extra(out[fake.url_key], dict(out)))
    if "STEPOP_SAGEMAKER_ENDPOINT" in out:  # boto3's per-service override (service id SageMaker)
        out["AWS_ENDPOINT_URL_SAGEMAKER"] = out["STEPOP_SAGEMAKER_ENDPOINT"]
    out["AIRFLOW_CONN_AWS_DEFAULT"] = aws_connection(
        out["STEPOP_MOTO_ENDPOINT"],
        out.get("STEPOP_SAGEMAKER_ENDPOINT"),
        out.get("STEPOP_CODEBUILD_ENDPOINT"),
    )
    out["AIRFLOW_CONN_GOOGLE_CLOUD_DEFAULT"] = google_connection(
        "stepop-local",
        out.get("STEPOP_VERTEX_ENDPOINT"),
        out.get("STEPOP_VERTEX_LOGGING_ENDPOINT"),
        out.get("STEPOP_CLOUDBUILD_ENDPOINT"),
    )
    if "STEPOP_ADLS_BLOB_ENDPOINT" in out:  # Azurite's account as ADLS Gen2 (directory SAS)
        from cloud.azure_dfs.front import connection_string  # it imports the stack's settings

        adls = connection_string(out["STEPOP_ADLS_BLOB_ENDPOINT"])
        out["STEPOP_ADLS_CONNECTION_STRING"] = adls
        out["AIRFLOW_CONN_ADLS_EMULATED"] = json.dumps(
            {"conn_type": "adls", "extra": {"connection_string": adls}}
        )
    if SIGNER_FILE.exists():  # what signs gs:// URLs for a Kubernetes step's pod
        info = json.loads(SIGNER_FILE.read_text())
        out["AIRFLOW_CONN_GOOGLE_CLOUD_SIGNER"] = signer.connection(info, "stepop-local")
    if "STEPOP_REGISTRY" in out:  # the registry stands in for ECR, Artifact Registry and ACR
        for service in ("SAGEMAKER", "VERTEX", "AZUREML"):
            key = f"AIRFLOW__STEPOP__{service}_IMAGE_REPOSITORY"
            out[key] = f"{out['STEPOP_REGISTRY']}/stepop-env"
    if "STEPOP_CODEBUILD_ENDPOINT" in out:  # made by `up` (cloud.stack.projects)
        out["STEPOP_CODEBUILD_PROJECT"] = CODEBUILD_PROJECT
        out["STEPOP_CODEBUILD_ROLE_ARN"] = f"arn:aws:iam::{MOTO_ACCOUNT}:role/{CODEBUILD_ROLE}"
    out["STEPOP_DEMO_BUCKET"] = DEMO_BUCKET
    return out


def aws_connection(moto: str, sagemaker: str | None, codebuild: str | None = None) -> str:
    """AIRFLOW_CONN_AWS_DEFAULT: moto for every service, the fakes for SageMaker and CodeBuild.

    The amazon provider reads ``endpoint_url`` (all services) and ``service_config.<boto3
    service name>.endpoint_url`` (per-service override) from the connection extra.
    """
    extra: dict[str, object] = {"region_name": REGION, "endpoint_url": moto}
    services = {"sagemaker": sagemaker, "codebuild": codebuild}
    config = {name: {"endpoint_url": url} for name, url in services.items() if url}
    if config:
        extra["service_config"] = config
    conn = {"conn_type": "aws", "login": "testing", "password": "testing", "extra": extra}
    return json.dumps(conn, separators=(",", ":"))


def google_connection(
    project: str,
    vertex: str | None = None,
    logging: str | None = None,
    cloudbuild: str | None = None,
) -> str:
    """AIRFLOW_CONN_GOOGLE_CLOUD_DEFAULT: anonymous credentials (the emulators check none).

    ``vertex_endpoint``, ``logging_endpoint`` and ``cloudbuild_endpoint`` are the connection
    extras the Vertex backend reads to reach the emulated Vertex AI, Cloud Logging and Cloud
    Build (GCS: STORAGE_EMULATOR_HOST).
    """
    extra: dict[str, object] = {"project": project, "is_anonymous": True}
    if vertex:
        extra["vertex_endpoint"] = vertex
    if logging:
        extra["logging_endpoint"] = logging
    if cloudbuild:
        extra["cloudbuild_endpoint"] = cloudbuild
    conn = {"conn_type": "google_cloud_platform", "extra": extra}
    return json.dumps(conn, separators=(",", ":"))
