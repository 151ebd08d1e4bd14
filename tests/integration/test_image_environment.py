"""DockerSettings.environment reaches a built image exactly: ``$``, quotes, backslashes and line
breaks included (before, ``$HOME`` was expanded by Docker and a line break split the
Dockerfile). Real builds on the local engine: one as a worker's engine builds (values as build
arguments), one from the Dockerfile a builder without build arguments gets (Azure ML's).
"""

from __future__ import annotations

import io
import json
import tarfile
import uuid

import pytest

from airflow_stepop.images.builder import BuildOptions, ensure_image
from airflow_stepop.images.dockerfile import dockerfile_text
from airflow_stepop.settings import DockerSettings
from tests.integration.conftest import BASE_IMAGE, remove_images

TRICKY = "a $HOME ${PATH} \"double\" 'single' back\\slash \\\\two \\$x end\\\nline two\r\n\ttab"
PROBE = "import json, os; print(json.dumps({k: os.environ[k] for k in ('TRICKY', 'PLAIN')}))"


def _environment(client, image: str) -> dict[str, str]:
    """The values as a process in the image sees them."""
    return json.loads(client.containers.run(image, ["python3", "-c", PROBE], remove=True))


@pytest.mark.container
def test_an_engine_build_bakes_every_value_exactly(docker_client):
    repository = f"stepop-it-env-{uuid.uuid4().hex[:8]}"
    settings = DockerSettings(
        parent_image=BASE_IMAGE, environment={"TRICKY": TRICKY, "PLAIN": uuid.uuid4().hex}
    )
    try:
        image, built = ensure_image(
            settings, docker_client, repository=repository, options=BuildOptions()
        )
        assert built
        assert _environment(docker_client, image) == dict(settings.environment)
    finally:
        remove_images(docker_client, repository)


@pytest.mark.container
def test_a_dockerfile_for_a_builder_without_build_args_bakes_every_value_exactly(docker_client):
    """Everything but a line break (refused there: a Dockerfile line cannot hold one)."""
    tag = f"stepop-it-env-inline-{uuid.uuid4().hex[:8]}:1"
    value = TRICKY.split("\n", 1)[0] + " it's \t"
    settings = DockerSettings(environment={"TRICKY": value, "PLAIN": "x"})
    text = dockerfile_text(settings, BASE_IMAGE, False).encode()
    context = io.BytesIO()
    with tarfile.open(fileobj=context, mode="w") as tar:
        info = tarfile.TarInfo("Dockerfile")
        info.size = len(text)
        tar.addfile(info, io.BytesIO(text))
    context.seek(0)
    try:
        for chunk in docker_client.api.build(
            fileobj=context, custom_context=True, tag=tag, rm=True, decode=True
        ):
            assert "error" not in chunk, chunk
        assert _environment(docker_client, tag) == {"TRICKY": value, "PLAIN": "x"}
    finally:
        remove_images(docker_client, tag.split(":")[0])
