"""Asking a registry for an environment image over its HTTP API, with no container engine.

A worker without an engine (a Kubernetes pod, a locked-down VM) must still run a step whose
image another worker built and pushed. The registry here speaks the distribution API's two
login schemes: Bearer tokens from a realm (Artifact Registry, ACR, Docker Hub) and Basic (ECR).
"""

from __future__ import annotations

import base64
import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from airflow_stepop.images import builder
from airflow_stepop.images.registry import Registry, has_image
from airflow_stepop.settings import DockerSettings

USER, PASSWORD, TOKEN = "oauth2accesstoken", "ya29.secret", "registry-token-1"
BASIC = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()


class _Registry(BaseHTTPRequestHandler):
    """Holds the tags in ``tags``; ``scheme`` is the login it asks for."""

    tags: set[str] = set()
    scheme = "bearer"
    seen: list[tuple[str, str, str | None]] = []

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:  # the token realm
        self.seen.append(("GET", self.path, self.headers.get("Authorization")))
        if not self.path.startswith("/token?") or self.headers.get("Authorization") != BASIC:
            self._reply(401)
            return
        body = json.dumps({"token": TOKEN}).encode()
        self._reply(200, {"Content-Type": "application/json"}, body)

    def do_HEAD(self) -> None:  # /v2/<name>/manifests/<tag>
        self.seen.append(("HEAD", self.path, self.headers.get("Authorization")))
        wanted = f"Bearer {TOKEN}" if self.scheme == "bearer" else BASIC
        if self.headers.get("Authorization") != wanted:
            host = f"http://{self.headers['Host']}"
            challenge = (
                f'Bearer realm="{host}/token",service="test",scope="repository:env:pull"'
                if self.scheme == "bearer"
                else f'Basic realm="{host}/"'
            )
            self._reply(401, {"WWW-Authenticate": challenge})
            return
        name, _, tag = self.path.removeprefix("/v2/").partition("/manifests/")
        self._reply(200 if f"{name}:{tag}" in self.tags else 404)

    def _reply(self, status: int, headers: dict[str, str] | None = None, body: bytes = b"") -> None:
        self.send_response(status)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)


@pytest.fixture
def registry() -> Iterator[str]:
    _Registry.tags, _Registry.scheme, _Registry.seen = set(), "bearer", []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Registry)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


AUTH = {"username": USER, "password": PASSWORD}


def test_a_token_login_finds_a_tag_that_is_there_and_not_one_that_is_not(registry):
    _Registry.tags = {"team/env:abc"}
    assert has_image(f"{registry}/team/env:abc", AUTH) is True
    assert has_image(f"{registry}/team/env:other", AUTH) is False
    token_requests = [seen for seen in _Registry.seen if seen[0] == "GET"]
    assert token_requests[0] == (
        "GET",
        "/token?service=test&scope=repository%3Aenv%3Apull",
        BASIC,
    )


def test_a_basic_login_as_ecr_asks_for_is_answered_with_the_password(registry):
    _Registry.scheme, _Registry.tags = "basic", {"env:abc"}
    assert has_image(f"{registry}/env:abc", AUTH) is True
    assert [seen[0] for seen in _Registry.seen] == ["HEAD", "HEAD"]  # no token realm


def test_what_the_registry_cannot_answer_is_left_to_the_engine(registry):
    _Registry.tags = {"env:abc"}
    wrong = {"username": USER, "password": "wrong"}
    assert has_image(f"{registry}/env:abc", wrong) is None  # the login is refused
    assert has_image(f"{registry}/env:abc") is None  # no credentials for a registry that wants some
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    assert has_image(f"127.0.0.1:{port}/env:abc") is None  # nothing listens
    assert has_image("team/env:abc") is None  # a Docker Hub name, not a host: the engine's


def test_a_worker_without_an_engine_uses_an_image_already_in_the_registry(
    registry, monkeypatch, tmp_path
):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    assert builder.engine_client() is None
    settings = DockerSettings(parent_image="python:3.11-slim", requirements=["six==1.17.0"])
    target = Registry(f"{registry}/team/env", AUTH)
    reference = builder.image_reference(settings, target.repository)
    _Registry.tags = {reference.removeprefix(f"{registry}/")}

    assert builder.service_image(settings, lambda: target) == (reference, False, None)

    _Registry.tags = set()  # another environment: it must be built, and nothing can build it
    with pytest.raises(builder.ImageBuildError) as refused:
        builder.service_image(settings, lambda: target)
    message = str(refused.value)
    assert f"{reference} was not found in its registry" in message
    assert "image_uri=" in message and "container engine" in message
