"""Registries to push environment images to: ECR (repository on demand, token login), Artifact
Registry (token login) or any.

An ECR repository (``<account>.dkr.ecr.<region>.amazonaws.com/<name>``) is created when missing
and logged in to with a token from ECR's GetAuthorizationToken, through the amazon provider's
``EcrHook`` (so the connection's endpoint overrides and role assumption apply). Any other
registry is used as given, with the engine's own credentials.

``has_image`` asks a registry for a tag over its HTTP API (the OCI distribution API every
registry serves), so a worker with no container engine can still use an image built elsewhere.
"""

from __future__ import annotations

import contextlib
import logging
import re
from dataclasses import dataclass, field
from typing import Any

from airflow_stepop.images.reference import DEFAULT_REPOSITORY, ecr_match, registry_host

log = logging.getLogger(__name__)

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


_MANIFEST_TYPES = ", ".join(
    [
        "application/vnd.oci.image.index.v1+json",
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
        "application/vnd.docker.distribution.manifest.v2+json",
    ]
)
_CHALLENGE_PARAM = re.compile(r'(\w+)="([^"]*)"')


def has_image(
    reference: str, auth_config: dict[str, str] | None = None, timeout: float = 10
) -> bool | None:
    """Whether the registry holds ``reference`` (``host[:port]/name:tag``), asked without an engine.

    One HEAD of the tag's manifest, answering a ``401`` challenge as docker does: Basic with
    ``auth_config``'s user and password (ECR), or Bearer with a token from the challenge's realm
    (Artifact Registry, Azure Container Registry, Docker Hub). A loopback registry is spoken to
    over plain HTTP, as docker treats it as insecure by default. None when the registry cannot
    say (no host in the reference, unreachable, a refused login): the caller asks the engine.
    """
    import requests

    host = registry_host(reference)
    name, _, tag = reference.removeprefix(f"{host}/").rpartition(":")
    if host == "docker.io" or not name:
        return None  # Docker Hub (its short names, its library/ prefix): left to the engine
    scheme = "http" if _loopback(host) else "https"
    url = f"{scheme}://{host}/v2/{name}/manifests/{tag}"
    basic = (auth_config["username"], auth_config["password"]) if auth_config else None
    try:
        with requests.Session() as session:
            response = session.head(url, headers={"Accept": _MANIFEST_TYPES}, timeout=timeout)
            if response.status_code == 401:
                challenge = response.headers.get("WWW-Authenticate", "")
                answer = _answer(session, challenge, basic, timeout)
                if answer is None:
                    return None
                response = session.head(
                    url,
                    headers={"Accept": _MANIFEST_TYPES, "Authorization": answer},
                    timeout=timeout,
                )
    except (requests.RequestException, ValueError) as exc:  # ValueError: a token not in JSON
        log.info("Could not ask the registry for %s (%s); asking the engine", reference, exc)
        return None
    if response.status_code in (200, 404):
        return response.status_code == 200
    log.info("The registry answered %s for %s; asking the engine", response.status_code, reference)
    return None


def _answer(
    session: Any, challenge: str, basic: tuple[str, str] | None, timeout: float
) -> str | None:
    """The ``Authorization`` value that answers a registry's ``WWW-Authenticate`` challenge."""
    scheme = challenge.split(" ", 1)[0].lower()
    if scheme == "basic":
        import base64

        if basic is None:
            return None
        return "Basic " + base64.b64encode(f"{basic[0]}:{basic[1]}".encode()).decode()
    if scheme != "bearer":
        return None
    params = dict(_CHALLENGE_PARAM.findall(challenge))
    if "realm" not in params:
        return None
    query = {key: params[key] for key in ("service", "scope") if key in params}
    token = session.get(params["realm"], params=query, auth=basic, timeout=timeout)
    if token.status_code != 200:
        return None
    body = token.json()
    value = body.get("token") or body.get("access_token")
    return f"Bearer {value}" if value else None


def _loopback(host_port: str) -> bool:
    import ipaddress

    if host_port.startswith("["):  # [::1]:5000
        host = host_port[1 : host_port.find("]")]
    else:
        host = host_port.split(":")[0]
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
