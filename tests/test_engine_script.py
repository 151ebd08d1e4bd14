"""scripts/engine.sh: starts only what does not answer, says what it started, stops only that.

`make test` relies on this to leave a developer's running engine and registry alone. The test
runs a private registry (its own port and state directory) next to whatever engine answers.
"""

from __future__ import annotations

import os
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from cloud.pytest_plugin import docker_engine  # noqa: F401 - the fixture
from tests.waiting import free_port

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "scripts" / "engine.sh"


def _has_image(registry: str, repo: str, tag: str) -> bool:
    request = urllib.request.Request(f"http://{registry}/v2/{repo}/manifests/{tag}", method="HEAD")
    request.add_header("Accept", "application/vnd.docker.distribution.manifest.v2+json")
    try:
        with urllib.request.urlopen(request, timeout=5):
            return True
    except OSError:  # HTTPError (404) included
        return False


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2):
            return True
    except urllib.error.HTTPError:
        return True
    except OSError:
        return False


@pytest.mark.container
def test_up_starts_what_is_missing_and_down_stops_only_that(
    tmp_path: Path,
    docker_engine,  # noqa: F811
) -> None:
    port = free_port()
    env = {**os.environ, "STEPOP_ENGINE_STATE": str(tmp_path), "STEPOP_REGISTRY_PORT": str(port)}

    def engine(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(SCRIPT), *args], env=env, capture_output=True, text=True,
                              timeout=600)  # fmt: skip

    try:
        up = engine("up")
        assert up.returncode == 0, up.stderr
        assert up.stdout.split() == ["registry"]  # the engine answered already: reused
        base = "stepop-base/python:3.11-bookworm"
        repo, tag = base.split(":")
        assert _has_image(f"127.0.0.1:{port}", repo, tag)  # pushed
        assert not _has_image(f"127.0.0.1:{port}", repo, "no-such-tag")

        again = engine("up")
        assert again.returncode == 0 and again.stdout.split() == []  # nothing new started
    finally:
        down = engine("down", "registry")
        # the private tag only: the image is the shared base, tagged elsewhere too
        private = f"127.0.0.1:{port}/stepop-base/python:3.11-bookworm"
        if any(private in image.tags for image in docker_engine.images.list()):
            docker_engine.images.remove(private, noprune=True)
    assert down.returncode == 0, down.stderr
    assert not _answers(f"http://127.0.0.1:{port}/v2/")
    docker_engine.ping()  # the engine it did not start still runs
