"""Where an image reference points: its registry's host, an ECR registry's account and region,
and the repository a step's environment image goes to when none is named. A SageMaker step's
``image_uri`` is checked with these when its DAG is parsed, so they stay apart from the registry
client and the builder (which both use them)."""

from __future__ import annotations

import re

# the repository name of built environment images when a step names only a registry
DEFAULT_REPOSITORY = "airflow-stepop-env"
_ECR_HOST = r"^(?P<account>\d{12})\.dkr\.ecr\.(?P<region>[a-z0-9-]+)\.amazonaws\.com(\.cn)?$"


def registry_host(image: str) -> str:
    """The registry host of an image reference, as docker reads it (Docker Hub when none)."""
    first, slash, _ = image.partition("/")
    if slash and ("." in first or ":" in first or first == "localhost"):
        return first
    return "docker.io"


def ecr_match(repository: str) -> re.Match[str] | None:
    """The ECR registry of a repository or host (groups ``account`` and ``region``), if it is
    one."""
    return re.match(_ECR_HOST, repository.split("/", 1)[0])
