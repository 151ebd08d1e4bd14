"""Registries to push environment images to: ECR (repository on demand, token login), Artifact
Registry (token login) or any.

An ECR repository (``<account>.dkr.ecr.<region>.amazonaws.com/<name>``) is created when missing
and logged in to with a token from ECR's GetAuthorizationToken, through the amazon provider's
``EcrHook`` (so the connection's endpoint overrides and role assumption apply). Any other
registry is used as given, with the engine's own credentials.
"""

from __future__ import annotations

import contextlib
import logging
import re
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)

ECR_HOST = re.compile(
    r"^(?P<account>\d{12})\.dkr\.ecr\.(?P<region>[a-z0-9-]+)\.amazonaws\.com(\.cn)?$"
)
_REPOSITORY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._\-]*(:\d+)?(/[a-z0-9][a-z0-9._\-/]*)+$")


@dataclass(frozen=True)
class Registry:
    repository: str  # host[:port]/name, no tag
    # for the docker SDK; never logged or stored, so not in the repr either
    auth_config: dict[str, str] | None = field(default=None, repr=False)


def check_repository(value: Any, field: str, example: str) -> str:
    """``example`` is a repository of the field's own service, for the error."""
    if not isinstance(value, str) or not _REPOSITORY.match(value) or ":" in value.split("/")[-1]:
        raise ValueError(
            f"{field}={value!r} is not an image repository. Use e.g. {example!r}: "
            "host[:port]/name, no tag (the tag is the environment's content hash)."
        )
    return value


def ecr_match(repository: str) -> re.Match[str] | None:
    return ECR_HOST.match(repository.split("/", 1)[0])


def prepare(repository: str, *, aws_conn_id: str | None, region_name: str | None) -> Registry:
    """Make ``repository`` ready for a push: for ECR, create it if missing and log in."""
    match = ecr_match(repository)
    if match is None:
        return Registry(repository)
    from airflow.providers.amazon.aws.hooks.ecr import EcrHook

    hook = EcrHook(aws_conn_id=aws_conn_id, region_name=match.group("region") or region_name)
    name = repository.split("/", 1)[1]
    client = hook.conn
    try:
        client.describe_repositories(registryId=match.group("account"), repositoryNames=[name])
    except client.exceptions.RepositoryNotFoundException:
        log.info("Creating ECR repository %s", name)
        with contextlib.suppress(client.exceptions.RepositoryAlreadyExistsException):
            client.create_repository(repositoryName=name, imageTagMutability="IMMUTABLE")
    credentials = hook.get_temporary_credentials(registry_ids=[match.group("account")])[0]
    return Registry(
        repository,
        auth_config={"username": credentials.username, "password": credentials.password},
    )


ARTIFACT_REGISTRY_HOST = re.compile(r"^[a-z0-9-]+-docker\.pkg\.dev$")


def prepare_google(repository: str, token: Any) -> Registry:
    """Artifact Registry (``LOCATION-docker.pkg.dev/PROJECT/REPO[/IMAGE]``): log in with an
    OAuth access token of the connection's credentials (``token()`` gives one); any other
    registry is used as given. A bare ``.../PROJECT/REPO`` gets the image name appended.
    """
    host, _, path = repository.partition("/")
    if not ARTIFACT_REGISTRY_HOST.match(host):
        return Registry(repository)
    if path.count("/") == 1:
        from airflow_stepop.images.builder import DEFAULT_REPOSITORY

        repository = f"{repository}/{DEFAULT_REPOSITORY}"
    password = token()
    if password is None:
        raise RuntimeError(
            f"The step's environment image goes to Artifact Registry ({repository}), and the "
            "connection's credentials are anonymous: they cannot log in to push it. Give the "
            "connection credentials (gcp_conn_id), or push to a registry of your own with "
            "image_repository= or [stepop] vertex_image_repository, or give image_uri=."
        )
    return Registry(repository, auth_config={"username": "oauth2accesstoken", "password": password})
