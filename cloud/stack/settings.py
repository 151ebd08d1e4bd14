"""The stack's settings (paths, addresses, ports, the registry), its fakes and its log line.

Each setting comes from the environment when set (``STEPOP_CLOUD_DIR``, ``STEPOP_CLOUD_BIND``...),
read once at import. Adding a fake is one :class:`Fake` entry in :data:`FAKES`.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
STATE = Path(os.environ.get("STEPOP_CLOUD_DIR", ROOT / ".cloud"))
ENV_FILE = STATE / "env"
# The throwaway service-account key that signs gs:// URLs for the emulated GCS (cloud.gcs).
SIGNER_FILE = STATE / "gcs-signer.json"
CACHE = Path(os.environ.get("STEPOP_CLOUD_CACHE", "/var/tmp/airflow-stepop-cloud"))
AZURITE_VERSION = os.environ.get("STEPOP_AZURITE_VERSION", "3.35.0")
# scripts/engine.sh's registry (STEPOP_REGISTRY_PORT), unless another is named.
REGISTRY = os.environ.get("STEPOP_REGISTRY") or (
    f"127.0.0.1:{os.environ.get('STEPOP_REGISTRY_PORT', '5000')}"
)
BASE_IMAGE = os.environ.get("STEPOP_TEST_BASE_IMAGE", "stepop-base/python:3.11-bookworm")
# Where the pieces listen, and the host name the URLs in .cloud/env use. In a container (the
# `emulated` profile of docker-compose.yaml): STEPOP_CLOUD_BIND=0.0.0.0 and
# STEPOP_CLOUD_HOST=host.docker.internal, the name Airflow's containers reach the host by.
BIND = os.environ.get("STEPOP_CLOUD_BIND", "127.0.0.1")
HOST = os.environ.get("STEPOP_CLOUD_HOST", "127.0.0.1")
# Fixed ports from this one on (moto, GCS, Azurite, then the fakes in FAKES' order); 0: free ports.
PORT_BASE = int(os.environ.get("STEPOP_CLOUD_PORT_BASE", "0"))
REGION = "us-east-1"
# Azurite's well-known development account (public, documented by Microsoft).
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)
START_TIMEOUT = 60.0
# The bucket (S3, GCS) and Blob container the docs' "try it" blocks use.
DEMO_BUCKET = "stepop-demo"
# A ready CodeBuild project (cloud.stack.projects) and its IAM role, in moto's account.
CODEBUILD_PROJECT = "stepop-image-builds"
CODEBUILD_ROLE = "stepop-codebuild"
MOTO_ACCOUNT = "123456789012"


@dataclass(frozen=True)
class Fake:
    """A job-service fake: its module (with ``serve``) and the env key holding its URL."""

    name: str
    module: str
    url_key: str


FAKES: list[Fake] = [
    Fake("sagemaker", "cloud.sagemaker", "STEPOP_SAGEMAKER_ENDPOINT"),
    Fake("vertex", "cloud.vertex", "STEPOP_VERTEX_ENDPOINT"),
    Fake("azureml", "cloud.azureml", "STEPOP_AZUREML_ENDPOINT"),
    Fake("codebuild", "cloud.codebuild", "STEPOP_CODEBUILD_ENDPOINT"),
    Fake("cloudbuild", "cloud.cloudbuild", "STEPOP_CLOUDBUILD_ENDPOINT"),
    Fake("kubernetes", "cloud.kubernetes", "STEPOP_KUBERNETES_ENDPOINT"),
]


def log(msg: str) -> None:
    """Progress on stderr, so `env` output stays clean."""
    print(f"[cloud] {msg}", file=sys.stderr, flush=True)
