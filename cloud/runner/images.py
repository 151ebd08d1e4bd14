"""Which mode a job runs in: the plain base image in a process, any other image in a container.

Process mode runs a job with the stack's own interpreter, which sees this virtualenv's packages,
not the image's: a step whose image was built (requirements, apt packages, an environment, a
Dockerfile) would run without what was built, and could pass. So a fake in process mode (the
default: a container costs seconds) runs only the stack's plain base image in a process and
every other image in a container (:meth:`BaseImage.choose`). Container and timer mode are left
as they are, and a job's own mode (the ``stepop_fake_mode`` label or tag) wins.

The plain base image is ``STEPOP_TEST_BASE_IMAGE`` (``stepop-base/python:3.11-bookworm``):

* by name: that reference, or the same in the stack's registry (``STEPOP_REGISTRY``,
  ``127.0.0.1:5000/stepop-base/python:3.11-bookworm``);
* by content: an image whose ID is the base's. The ID is the digest of the image's config,
  which names every layer's content and the whole configuration (env, entrypoint, user...), so
  equal IDs are the same image; a copy built from a Dockerfile that is only ``FROM <base>``
  has the base's ID. It is read from the registry's v2 API (the manifest's config digest:
  nothing is pulled, no engine is needed) or, for an image the registry does not hold, from the
  engine's image store (whose image ID is that digest).

An image neither the registry nor the engine knows is not the base: it runs in a container,
whose pull then fails as the service's would.
"""

from __future__ import annotations

import json
import os
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from cloud.runner.launch import MODE_CONTAINER, MODE_PROCESS, MODES, LaunchError

DEFAULT_BASE_IMAGE = "stepop-base/python:3.11-bookworm"
DEFAULT_REGISTRY = "127.0.0.1:5000"
_ACCEPT = ", ".join(
    [
        "application/vnd.docker.distribution.manifest.v2+json",
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
        "application/vnd.oci.image.index.v1+json",
    ]
)
_LOOPBACK = ("127.0.0.1", "localhost", "[::1]")

# A docker client (or None when no engine answers), made only when needed.
EngineFactory = Callable[[], Any]


def normalize(image: str) -> str:
    """``image`` as the engine names it: ``docker.io/library/`` dropped, ``:latest`` added."""
    name = image.removeprefix("docker.io/").removeprefix("library/")
    if "@" not in name and ":" not in name.rpartition("/")[2]:
        name += ":latest"
    return name


def split_reference(image: str) -> tuple[str | None, str, str]:
    """``host:5000/repo:tag`` -> (host, repo, tag or digest); host None without a registry."""
    first, slash, rest = image.partition("/")
    host = first if slash and ("." in first or ":" in first or first == "localhost") else None
    path = rest if host else image
    if "@" in path:
        repo, _, ref = path.partition("@")
    else:
        repo, _, tag = path.rpartition(":") if ":" in path.rpartition("/")[2] else (path, "", "")
        ref = tag or "latest"
    return host, repo, ref


@dataclass(frozen=True)
class BaseImage:
    """The stack's plain base image and the registry it is pushed to."""

    reference: str = DEFAULT_BASE_IMAGE
    registry: str = DEFAULT_REGISTRY

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> BaseImage:
        """``STEPOP_TEST_BASE_IMAGE`` and ``STEPOP_REGISTRY`` of ``env``, else of ours."""
        env = env or {}
        return cls(
            env.get("STEPOP_TEST_BASE_IMAGE")
            or os.environ.get("STEPOP_TEST_BASE_IMAGE")
            or DEFAULT_BASE_IMAGE,
            env.get("STEPOP_REGISTRY") or os.environ.get("STEPOP_REGISTRY") or DEFAULT_REGISTRY,
        )

    def names(self) -> set[str]:
        """The references that name the base image itself."""
        return {normalize(self.reference), normalize(f"{self.registry}/{self.reference}")}

    def is_base(self, image: str, engine: EngineFactory | None = None) -> bool:
        """Whether ``image`` is the plain base image, by name or by content (see the module)."""
        if normalize(image) in self.names():
            return True
        found = image_id(image, engine, self.registry)
        if found is None:
            return False
        base = image_id(f"{self.registry}/{self.reference}", engine, self.registry)
        return found == (base or image_id(self.reference, engine, self.registry))

    def choose(
        self, image: str, mode: str, requested: str | None, engine: EngineFactory | None = None
    ) -> str:
        """The mode a job of ``image`` runs in, for a runner in ``mode``: ``requested`` (the
        job's own) when given; process mode for the plain base image only."""
        if requested:
            if requested not in MODES:
                raise LaunchError(f"stepop_fake_mode={requested!r}: use one of {', '.join(MODES)}")
            return requested
        if mode != MODE_PROCESS or self.is_base(image, engine):
            return mode
        print(
            f"[runner] {image} is not the base image {self.reference}: the job runs in a container",
            file=sys.stderr,
            flush=True,
        )
        return MODE_CONTAINER


def image_id(
    image: str, engine: EngineFactory | None = None, registry: str = DEFAULT_REGISTRY
) -> str | None:
    """The image's ID (its config's digest): the registry's answer, else the engine's; None
    when neither knows the image."""
    found = registry_image_id(image, registry)
    if found is not None or engine is None:
        return found
    try:
        client = engine()
        return str(client.images.get(image).id) if client is not None else None
    except Exception:  # no engine, no such image: nothing known
        return None


def registry_image_id(
    image: str, registry: str = DEFAULT_REGISTRY, timeout: float = 5.0
) -> str | None:
    """The config digest of ``image`` in its registry, for this machine's platform when the tag
    is a multi-platform index. Asked over plain http of the stack's ``registry`` and loopback
    registries only; None for any other registry."""
    host, repo, ref = split_reference(image)
    if host is None or not (host == registry or host.startswith(_LOOPBACK)):
        return None
    manifest = _manifest(host, repo, ref, timeout)
    if manifest is not None and manifest.get("manifests") is not None:  # an index of platforms
        entries = manifest["manifests"] or [{}]
        arch = {"x86_64": "amd64", "aarch64": "arm64"}.get(os.uname().machine, os.uname().machine)
        entry = next(
            (m for m in entries if (m.get("platform") or {}).get("architecture") == arch),
            entries[0],
        )
        manifest = _manifest(host, repo, str(entry.get("digest", "")), timeout)
    config = (manifest or {}).get("config") or {}
    digest = config.get("digest")
    return str(digest) if digest else None


def _manifest(host: str, repo: str, ref: str, timeout: float) -> dict[str, Any] | None:
    request = urllib.request.Request(f"http://{host}/v2/{repo}/manifests/{ref}")
    request.add_header("Accept", _ACCEPT)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            body = json.loads(answer.read())
    except (urllib.error.URLError, OSError, ValueError):
        return None
    return body if isinstance(body, dict) else None
