"""The Azure ML job's environment: a prebuilt image, an image built here, or one Azure ML builds.

``image_uri=`` and a ``DockerSettings`` with only a parent image need no build. Otherwise the
image's tag is the settings' content hash, and ``[stepop] azureml_image_build`` says who builds:

* ``engine``: the worker's container engine builds on a registry miss and pushes to
  ``image_repository`` (an Azure Container Registry is logged in to with a token exchanged for
  the connection's credential; other registries use the engine's own login);
* ``service``: the worker uploads the build context (the same Dockerfile and requirements as
  the engine path) next to the artifacts, and the environment version points at it; Azure ML
  builds the image in the workspace's registry before the job starts;
* ``auto`` (default): the engine when one answers, else the service.

Environment versions are immutable and named by content, so a second job reuses the first's.
"""

from __future__ import annotations

import hashlib
import logging
from typing import Any

from airflow_stepop.backends.base import JobRequest
from airflow_stepop.images.reference import DEFAULT_REPOSITORY
from airflow_stepop.runtime.storage import join

log = logging.getLogger(__name__)

IMAGE_ENVIRONMENT = "stepop-image"
BUILD_ENVIRONMENT = "stepop-build"


def environment_body(backend: Any, request: JobRequest, storage: Any) -> tuple[str, str, dict]:
    """(environment name, version, ARM body) for the job of ``request``."""
    from airflow_stepop.images import builder

    job = backend.job
    if job.image_uri:
        return _image(job.image_uri)
    settings = request.docker
    if settings is None:
        raise ValueError("Azure ML steps need image_uri= or docker=DockerSettings(...)")
    if not settings.needs_build:
        return _image(builder.image_reference(settings, DEFAULT_REPOSITORY))
    from airflow_stepop.backends.image_build import build_mode

    mode = build_mode("azureml")
    client = _engine_or_none() if mode in ("auto", "engine") else None
    if client is None and mode == "engine":
        raise ValueError(
            "[stepop] azureml_image_build='engine', but no container engine answers; start one, "
            "set it to 'service' (Azure ML builds the image), or give image_uri=."
        )
    if client is not None:
        return _image(_build_and_push(backend, settings, client))
    if settings.dockerfile:  # Azure ML's build takes one context: ours, with no Dockerfile of yours
        from airflow_stepop.setting_values import SettingsError

        why = "is 'service'" if mode == "service" else "is 'auto' and no container engine answers"
        raise SettingsError(
            f"DockerSettings.dockerfile={settings.dockerfile!r} is built by the worker's "
            f"container engine only, but [stepop] azureml_image_build {why}. Set it to 'auto' "
            "or 'engine' with an engine running, or give image_uri= (an image built elsewhere)."
        )
    return _service_build(backend, request, settings, storage)


def _image(reference: str) -> tuple[str, str, dict]:
    version = hashlib.sha256(reference.encode()).hexdigest()[:24]
    return IMAGE_ENVIRONMENT, version, {"properties": {"image": reference, "osType": "Linux"}}


def _build_and_push(backend: Any, settings: Any, client: Any) -> str:
    from airflow_stepop import config
    from airflow_stepop.images import builder

    repository = (
        backend.job.image_repository
        or config.get("azureml_image_repository")
        or _workspace_registry(backend)
    )
    options = builder.BuildOptions.from_config()
    image, built = builder.ensure_image(
        settings, client, repository=repository, push=True, options=options,
        auth_config=acr_auth(backend, repository.split("/", 1)[0]),
    )  # fmt: skip
    log.info("Environment image %s (%s)", image, "built and pushed" if built else "no build")
    return image


def _workspace_registry(backend: Any) -> str:
    """The workspace's own Azure Container Registry (``<name>.azurecr.io/airflow-stepop-env``)."""
    registry = backend.arm.get(backend.workspace.path)["properties"].get("containerRegistry")
    if not registry:
        raise ValueError(
            "The workspace has no container registry to push the step's image to: set "
            "image_repository= or [stepop] azureml_image_repository (e.g. "
            "'myregistry.azurecr.io/airflow-stepop-env')."
        )
    return f"{registry.rstrip('/').rsplit('/', 1)[-1]}.azurecr.io/{DEFAULT_REPOSITORY}"


def acr_auth(backend: Any, host: str) -> dict[str, str] | None:
    """Docker login for an ACR: the connection's Entra ID token exchanged for an ACR token.

    Other registries get None (the engine's own login applies). The token is only handed to
    the docker SDK for this push; it is never logged or stored.
    """
    if not host.endswith(".azurecr.io"):
        return None
    import requests

    ws = backend.workspace
    token = backend.hook.get_credential().get_token(ws.scope).token
    answer = requests.post(
        f"https://{host}/oauth2/exchange",
        data={"grant_type": "access_token", "service": host, "access_token": token,
              **({"tenant": ws.tenant_id} if ws.tenant_id else {})},
        timeout=30,
    )  # fmt: skip
    answer.raise_for_status()
    return {"username": "00000000-0000-0000-0000-000000000000",
            "password": answer.json()["refresh_token"]}  # fmt: skip


def _service_build(
    backend: Any, request: JobRequest, settings: Any, storage: Any
) -> tuple[str, str, dict]:
    """Upload the build context; Azure ML builds the environment's image from it."""
    from airflow_stepop.backends.azureml.launch import blob_url
    from airflow_stepop.backends.azureml.roots import storage_account
    from airflow_stepop.images import builder
    from airflow_stepop.images.dockerfile import dockerfile_text

    parent = settings.parent_image or builder.default_parent_image()
    digest = settings.content_hash(parent, builder.RECIPE_VERSION)[:24]
    root = request.code_uri.rsplit("/code/", 1)[0]
    context = join(root, "images", digest)
    # pip trusts [stepop] build_ca_bundle here too (a network whose TLS a proxy re-signs)
    ca_bundle = builder.BuildOptions.from_config().ca_bundle if settings.requirements else None
    storage.write_bytes(
        join(context, "Dockerfile"), dockerfile_text(settings, parent, bool(ca_bundle)).encode()
    )
    if settings.requirements:
        storage.write_bytes(
            join(context, "stepop-requirements.txt"),
            ("\n".join(settings.requirements) + "\n").encode(),
        )
    if ca_bundle:
        from pathlib import Path

        from airflow_stepop.images.build_log import unreadable_ca_bundle
        from airflow_stepop.images.dockerfile import CA_FILE

        try:
            storage.write_bytes(join(context, CA_FILE), Path(ca_bundle).read_bytes())
        except OSError as exc:
            raise builder.ImageBuildError(unreadable_ca_bundle(ca_bundle, exc)) from exc
    suffix = backend.workspace.cloud.storage_suffix
    uri = blob_url(context, storage_account(storage, context), suffix) + "/"
    log.info("Azure ML builds the environment image from %s", context)
    body = {"properties": {"build": {"contextUri": uri, "dockerfilePath": "Dockerfile"},
                           "osType": "Linux"}}  # fmt: skip
    return BUILD_ENVIRONMENT, digest, body


def _engine_or_none() -> Any:
    from airflow_stepop.images.builder import engine_client

    client = engine_client()
    if client is None:
        log.info("No container engine answers: Azure ML builds the image")
    return client
