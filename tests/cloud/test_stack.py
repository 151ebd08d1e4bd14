"""`python -m cloud.stack up|down` (`make cloud-up`/`cloud-down`) on a private state dir."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import boto3

from cloud import stack


def _processes_with(marker: bytes) -> list[int]:
    """PIDs whose environment contains ``marker`` (what the stack's pieces inherit)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if marker in (entry / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def _run(args: list[str], state: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "STEPOP_CLOUD_DIR": str(state)}
    return subprocess.run(
        [sys.executable, "-m", "cloud.stack", *args],
        env=env,
        cwd=stack.ROOT,
        capture_output=True,
        text=True,
        timeout=180,
    )


def test_up_writes_env_reuses_and_down_leaves_nothing(tmp_path: Path) -> None:
    state = tmp_path / "cloud"
    marker = f"STEPOP_CLOUD_DIR={state}".encode()
    try:
        up = _run(["up"], state)
        assert up.returncode == 0, up.stderr
        env = stack.read_env(state / "env")
        for key in ("AWS_ENDPOINT_URL", "STORAGE_EMULATOR_HOST", "AZURE_STORAGE_CONNECTION_STRING",
                    "STEPOP_REGISTRY", "AIRFLOW_CONN_AWS_DEFAULT",
                    "AIRFLOW_CONN_GOOGLE_CLOUD_DEFAULT", "STEPOP_SAGEMAKER_ENDPOINT",
                    "STEPOP_CODEBUILD_ENDPOINT", "STEPOP_CLOUDBUILD_ENDPOINT"):  # fmt: skip
            assert env.get(key), key
        assert env["AWS_ENDPOINT_URL_CODEBUILD"] == env["STEPOP_CODEBUILD_ENDPOINT"]
        aws = json.loads(env["AIRFLOW_CONN_AWS_DEFAULT"])["extra"]["service_config"]
        assert aws["codebuild"] == {"endpoint_url": env["STEPOP_CODEBUILD_ENDPOINT"]}
        google = json.loads(env["AIRFLOW_CONN_GOOGLE_CLOUD_DEFAULT"])["extra"]
        assert google["cloudbuild_endpoint"] == env["STEPOP_CLOUDBUILD_ENDPOINT"]
        codebuild = boto3.client(
            "codebuild",
            endpoint_url=env["STEPOP_CODEBUILD_ENDPOINT"],
            region_name="us-east-1",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )
        (project,) = codebuild.batch_get_projects(names=[env["STEPOP_CODEBUILD_PROJECT"]])[
            "projects"
        ]
        assert project["serviceRole"] == env["STEPOP_CODEBUILD_ROLE_ARN"]
        assert project["environment"]["privilegedMode"] is True
        assert stack.running(env)
        pids = [int(p.read_text()) for p in (state / "pids").glob("*.pid")]
        assert len(pids) >= 4
        assert set(pids) <= set(_processes_with(marker))

        again = _run(["up"], state)
        assert again.returncode == 0 and "reusing" in again.stderr
        assert stack.read_env(state / "env") == env
    finally:
        down = _run(["down"], state)
    assert down.returncode == 0, down.stderr
    assert not (state / "env").exists()
    assert _processes_with(marker) == []


def test_connections_name_the_build_fakes() -> None:
    """The AWS connection sends CodeBuild to its fake; the Google one names Cloud Build's."""
    aws = json.loads(stack.aws_connection("http://moto", "http://sm", "http://cb"))["extra"]
    assert aws["endpoint_url"] == "http://moto"
    assert aws["service_config"] == {
        "sagemaker": {"endpoint_url": "http://sm"},
        "codebuild": {"endpoint_url": "http://cb"},
    }
    assert "service_config" not in json.loads(stack.aws_connection("http://moto", None))["extra"]
    google = json.loads(stack.google_connection("p", "http://vx", "http://lg", "http://gcb"))
    assert google["extra"]["cloudbuild_endpoint"] == "http://gcb"
    assert "cloudbuild_endpoint" not in json.loads(stack.google_connection("p"))["extra"]
