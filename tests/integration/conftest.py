from __future__ import annotations

import gc
import os
import subprocess

import pytest

BASE_IMAGE = os.environ.get("STEPOP_TEST_BASE_IMAGE", "stepop-base/python:3.11-bookworm")


@pytest.fixture(scope="session")
def docker_client():
    """A docker client on the local engine with the offline base image, or skip."""
    docker = pytest.importorskip("docker")
    try:
        client = docker.from_env(timeout=60)
        client.ping()
        client.images.get(BASE_IMAGE)
    except Exception as exc:  # no engine, or no base image: `scripts/engine.sh up` makes both
        pytest.skip(f"no container engine with {BASE_IMAGE} ({exc}); run scripts/engine.sh up")
    return client


@pytest.fixture
def build_settings(monkeypatch):
    """Builds reach PyPI through the host network, trusting the host's CA bundle."""
    monkeypatch.setenv("AIRFLOW__STEPOP__BUILD_NETWORK_MODE", "host")
    bundle = "/etc/ssl/certs/ca-certificates.crt"
    if os.path.exists(bundle):
        monkeypatch.setenv("AIRFLOW__STEPOP__BUILD_CA_BUNDLE", bundle)


def remove_images(client, prefix: str) -> None:
    for image in client.images.list(name=prefix):
        for tag in image.tags:
            subprocess.run(["docker", "rmi", "-f", tag], capture_output=True)


@pytest.fixture
def unclosed_reports(capfd, caplog):
    """The lines in which asyncio reports an unclosed client session or connector during this
    test (on stderr, or through logging under pytest); clients an earlier test dropped are
    collected, and their reports discarded, before the test runs."""
    gc.collect()
    capfd.readouterr()
    caplog.clear()

    def reports() -> list[str]:
        out, err = capfd.readouterr()
        return [line for line in (out + err + caplog.text).splitlines() if "Unclosed" in line]

    return reports
