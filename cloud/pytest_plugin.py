"""Pytest plugin of the emulated clouds: ``pytest_plugins = ["cloud.pytest_plugin"]``.

Fixtures:

``cloud_stack`` (session)
    The env of the emulated clouds (the ``.cloud/env`` keys, as a dict). Reuses a running stack
    (``make cloud-up``); otherwise starts one and stops it at the end of the session. It does not
    touch ``os.environ``: use ``cloud_environ`` for that.
``cloud_environ``
    ``cloud_stack`` applied to ``os.environ`` for one test (``AWS_ENDPOINT_URL``,
    ``AIRFLOW_CONN_*``...), undone afterwards.
``registry_image`` (session)
    The base image in the local registry (``127.0.0.1:5000/stepop-base/python:3.11-bookworm``),
    pushed from the engine on first use; skips when neither engine nor registry has it.
``docker_engine`` (session)
    A docker client; skips the test when no engine answers (use with ``@pytest.mark.container``).
``aws_target``, ``gcp_target``, ``azure_target``
    Parametrize a test over ``"emulated"`` and ``"live"`` (the latter marked ``live("<cloud>")``):
    the way an integration test reruns against the real cloud.

The ``live`` marker: a test marked ``@pytest.mark.live("aws")`` (or "gcp", "azure", several, or
none for any) talks to real clouds. It runs only when ``--live`` or ``STEPOP_LIVE=1`` opts in AND
credentials for each named cloud are configured; it is skipped otherwise, naming what is missing.
A live test never sees the emulated stack's env.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from typing import Any

import pytest

from cloud import stack

CLOUDS = ("aws", "gcp", "azure", "kubernetes")


def pytest_addoption(parser: pytest.Parser) -> None:
    """``--live``: run the tests marked ``live`` against real clouds."""
    parser.addoption(
        "--live",
        action="store_true",
        default=False,
        help="run tests marked `live` against real clouds (needs their credentials)",
    )


def live_opted_in(config: pytest.Config) -> bool:
    """Whether real clouds may be called at all (an explicit opt-in, never by default)."""
    return bool(config.getoption("--live", default=False)) or os.environ.get("STEPOP_LIVE") == "1"


def missing_credentials(cloud: str) -> str | None:
    """Why ``cloud`` cannot be reached for real, or None when credentials are configured.

    Besides credentials, a live run needs the few resources a job uses (role, bucket, image),
    named by STEPOP_LIVE_* variables.
    """
    env = os.environ
    if cloud == "aws":
        if env.get("AWS_ENDPOINT_URL"):
            return "AWS_ENDPOINT_URL points at an emulator"
        try:
            import boto3

            if boto3.Session().get_credentials() is None:
                return "no AWS credentials"
        except Exception as exc:  # botocore config errors
            return f"AWS credentials: {exc}"
        need = ("STEPOP_LIVE_AWS_ROLE_ARN", "STEPOP_LIVE_AWS_BUCKET", "STEPOP_LIVE_AWS_IMAGE")
    elif cloud == "gcp":
        if env.get("STORAGE_EMULATOR_HOST"):
            return "STORAGE_EMULATOR_HOST points at an emulator"
        if not (env.get("GOOGLE_APPLICATION_CREDENTIALS") or shutil.which("gcloud")):
            return "no GOOGLE_APPLICATION_CREDENTIALS (nor gcloud)"
        need = ("STEPOP_LIVE_GCP_PROJECT", "STEPOP_LIVE_GCP_BUCKET", "STEPOP_LIVE_GCP_IMAGE")
    elif cloud == "azure":
        if not (env.get("AZURE_CLIENT_ID") or shutil.which("az")):
            return "no AZURE_CLIENT_ID (nor az CLI)"
        need = ("AZURE_SUBSCRIPTION_ID", "STEPOP_LIVE_AZURE_RESOURCE_GROUP",
                "STEPOP_LIVE_AZURE_WORKSPACE")  # fmt: skip
    elif cloud == "kubernetes":  # a cluster, and an S3 bucket its pods reach
        config = env.get("STEPOP_LIVE_KUBECONFIG", "")
        if config and not os.path.exists(os.path.expanduser(config)):
            return f"STEPOP_LIVE_KUBECONFIG={config} does not exist"
        if env.get("AWS_ENDPOINT_URL"):
            return "AWS_ENDPOINT_URL points at an emulator"
        need = ("STEPOP_LIVE_KUBECONFIG", "STEPOP_LIVE_KUBERNETES_ROOT")
    else:
        return f"unknown cloud {cloud!r} (use one of {CLOUDS})"
    absent = [k for k in need if not env.get(k)]
    return f"unset: {', '.join(absent)}" if absent else None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip every ``live`` test that is not opted in or lacks credentials."""
    opted = live_opted_in(config)
    for item in items:
        marker = item.get_closest_marker("live")
        if marker is None:
            continue
        if not opted:
            item.add_marker(
                pytest.mark.skip(reason="live: real clouds need --live or STEPOP_LIVE=1")
            )
            continue
        clouds = marker.args or CLOUDS
        reasons = {c: missing_credentials(c) for c in clouds}
        if marker.args:
            missing = {c: r for c, r in reasons.items() if r}
        else:  # no cloud named: any configured cloud will do
            missing = reasons if all(reasons.values()) else {}
        if missing:
            why = "; ".join(f"{c}: {r}" for c, r in missing.items())
            item.add_marker(pytest.mark.skip(reason=f"live: {why}"))


@pytest.fixture(scope="session")
def cloud_stack() -> Iterator[dict[str, str]]:
    """The emulated clouds' env: a running stack's, or one started for this session."""
    env = stack.read_env()
    if env and stack.running(env):
        yield env
        return
    started = stack.up()
    try:
        yield started
    finally:
        stack.down()


@pytest.fixture
def cloud_environ(cloud_stack: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The stack's env in ``os.environ`` for one test."""
    for key, value in cloud_stack.items():
        monkeypatch.setenv(key, value)
    return cloud_stack


@pytest.fixture(scope="session")
def docker_engine() -> Any:
    """A docker client, or skip: no engine answers."""
    try:
        import docker

        client = docker.from_env(timeout=10)
        client.ping()
    except Exception as exc:
        pytest.skip(f"no container engine answers: {exc}")
    return client


def _registry_has(reference: str) -> bool:
    from airflow_stepop.images.registry import has_image

    return has_image(reference, timeout=5) is True


@pytest.fixture(scope="session")
def registry_image(cloud_stack: dict[str, str]) -> str:
    """The base image as the fakes pull it from the local registry (pushed on first use)."""
    registry = cloud_stack.get("STEPOP_REGISTRY", stack.REGISTRY)
    base = cloud_stack.get("STEPOP_TEST_BASE_IMAGE", stack.BASE_IMAGE)
    repo, _, tag = base.rpartition(":")
    ref = f"{registry}/{repo}:{tag}"
    if _registry_has(ref):
        return ref
    try:
        import docker

        client = docker.from_env(timeout=60)
        image = client.images.get(base)
    except Exception as exc:
        pytest.skip(f"{ref} is not in the registry and the engine cannot provide it: {exc}")
    image.tag(f"{registry}/{repo}", tag=tag)
    for line in client.images.push(f"{registry}/{repo}", tag=tag, stream=True, decode=True):
        if "error" in line:
            pytest.skip(f"cannot push {ref}: {line['error']}")
    if not _registry_has(ref):
        pytest.skip(f"pushed {ref} but the registry does not list it")
    return ref


def _target(cloud: str) -> Any:
    @pytest.fixture(params=["emulated", pytest.param("live", marks=pytest.mark.live(cloud))])
    def target(request: pytest.FixtureRequest) -> str:
        return str(request.param)

    target.__doc__ = f"Run a test on the emulated {cloud} and, when opted in, on the real one."
    return target


aws_target = _target("aws")
gcp_target = _target("gcp")
azure_target = _target("azure")
