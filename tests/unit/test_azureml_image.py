"""Who builds an Azure ML step's environment image ([stepop] azureml_image_build)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from airflow_stepop.backends.azureml.image import environment_body
from airflow_stepop.settings import DockerSettings, SettingsError


def test_a_dockerfile_left_to_the_service_to_build_names_the_setting(monkeypatch, tmp_path):
    """Azure ML builds from the one context we upload; a Dockerfile of yours needs the worker's
    engine, and the setting that sent the build to the service is what to change."""
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text("FROM python:3.11-slim\n")
    monkeypatch.setenv("AIRFLOW__STEPOP__AZUREML_IMAGE_BUILD", "service")
    backend = SimpleNamespace(job=SimpleNamespace(image_uri=None))
    request = SimpleNamespace(docker=DockerSettings(dockerfile=str(dockerfile)))

    with pytest.raises(SettingsError) as refused:
        environment_body(backend, request, storage=None)
    assert str(refused.value) == (
        f"DockerSettings.dockerfile={str(dockerfile)!r} is built by the worker's container "
        "engine only, but [stepop] azureml_image_build is 'service'. Set it to 'auto' or "
        "'engine' with an engine running, or give image_uri= (an image built elsewhere)."
    )
