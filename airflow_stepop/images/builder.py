"""Builds environment images with the docker SDK, tagged by content hash, only on a miss.

The tag is a hash of the parent image, requirements, apt packages, environment, the user's
Dockerfile bytes, build args and this recipe's version. Code is not in the image (it travels in
the code bundle), so editing a step never rebuilds. A parent image with nothing added is used
as it is, unless a cloud service cannot pull it (``service_image``): then it is copied to the
service's repository as an image built from a Dockerfile that is only ``FROM <parent>``.

Tasks that start together with the same settings (a mapped step) would all miss the tag and all
build it: on one host, builds of one tag are serialized by an ``flock`` on a file under
``$AIRFLOW_HOME/stepop-cache/image-locks``, and a task that waited uses the image the first one
built. Workers on different hosts may still build the same tag at once (the push is idempotent).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import io
import logging
import os
import sys
import tarfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from airflow_stepop.images.build_log import hints, plain
from airflow_stepop.images.reference import DEFAULT_REPOSITORY
from airflow_stepop.images.registry import has_image
from airflow_stepop.settings import DockerSettings

if TYPE_CHECKING:
    from airflow_stepop.backends.image_build import ImageBuild
    from airflow_stepop.images.build_context import BuildPlan
    from airflow_stepop.images.registry import Registry

log = logging.getLogger(__name__)

RECIPE_VERSION = "1"


def default_parent_image() -> str:
    return f"python:{sys.version_info.major}.{sys.version_info.minor}-slim"


@dataclass(frozen=True)
class BuildOptions:
    """How to build, without changing what is built (so none of it enters the hash)."""

    network_mode: str | None = None
    ca_bundle: str | None = None  # PEM file pip trusts during the build (TLS-re-signing proxies)

    @classmethod
    def from_config(cls) -> BuildOptions:
        """``[stepop] build_network_mode`` and ``build_ca_bundle``."""
        from airflow_stepop import config

        return cls(
            network_mode=config.get("build_network_mode") or None,
            ca_bundle=config.get("build_ca_bundle") or None,
        )


def environment_hash(settings: DockerSettings) -> str:
    """The content hash an image of ``settings`` is tagged by, whether or not it is built."""
    return settings.content_hash(settings.parent_image or default_parent_image(), RECIPE_VERSION)


class ImageBuildError(RuntimeError):
    """A failed image build; the message carries the tail of the build log (colour codes
    stripped) and, for a failure a ``[stepop]`` build option fixes, that option."""


def image_reference(settings: DockerSettings, repository: str, *, copy: bool = False) -> str:
    """The image's reference: the parent itself when nothing is added (and no ``copy`` of it is
    wanted), else ``<repository>:<content hash>``."""
    parent = settings.parent_image or default_parent_image()
    if not (settings.needs_build or copy):
        return parent
    return f"{repository}:{environment_hash(settings)[:24]}"


def _context(files: dict[str, bytes]) -> io.BytesIO:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, data in sorted(files.items()):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    buffer.seek(0)
    return buffer


def _image_exists(client: Any, reference: str) -> bool:
    """Whether the engine has the image (the registry is ``_in_registry``'s to ask)."""
    import docker.errors

    try:
        client.images.get(reference)
        return True
    except docker.errors.ImageNotFound:
        return False


def _run_build(
    client: Any, tag: str, options: BuildOptions, *, what: str = "", **kwargs: Any
) -> None:
    """Build ``tag``; a failure says ``what`` was done (default: building it), the build's last
    lines and what to set."""
    import docker.errors

    what = what or f"Building image {tag}"
    lines: list[str] = []
    try:
        for chunk in client.api.build(
            tag=tag, rm=True, forcerm=True, decode=True, network_mode=options.network_mode, **kwargs
        ):
            if "stream" in chunk:
                lines.extend(line for line in plain(chunk["stream"]).splitlines() if line.strip())
            if "error" in chunk:
                said = hints(lines, options.network_mode, options.ca_bundle)
                raise ImageBuildError(
                    "\n".join(
                        [f"{what} failed: {plain(chunk['error']).strip()}"] + lines[-30:] + said
                    )
                )
    except docker.errors.APIError as exc:
        raise ImageBuildError(f"{what} failed: {exc}") from exc
    for line in lines:
        log.debug("build %s: %s", tag, line)


def lock_dir() -> Path:
    """``$AIRFLOW_HOME/stepop-cache/image-locks``: beside the bundle cache, on the worker."""
    from airflow_stepop import config

    return config.worker_cache_dir() / "image-locks"


@contextlib.contextmanager
def build_lock(reference: str, directory: Path | None = None) -> Iterator[bool]:
    """Hold this host's lock on building ``reference``; yields whether it had to wait for it.

    An exclusive ``flock`` on ``<directory>/<sha256 of reference>.lock``. The kernel releases it
    when the file is closed, or when the process ends however it ends, so a killed build never
    leaves it held. Lock files are never removed (removing one would let two holders lock two
    different files). A directory that cannot be written only means no lock: the build goes on.
    """
    directory = directory or lock_dir()
    path = directory / (hashlib.sha256(reference.encode()).hexdigest()[:32] + ".lock")
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
    except OSError as exc:
        log.warning("No build lock for %s (%s); building without one", reference, exc)
        fd = None
    if fd is None:
        yield False
        return
    try:
        waited = False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            waited = True
            log.info(
                "Waiting for another task on this host that is building environment image %s "
                "(lock %s)",
                reference,
                path,
            )
            fcntl.flock(fd, fcntl.LOCK_EX)
            log.info("Done waiting for the build of %s", reference)
        yield waited
    finally:
        os.close(fd)  # releases the lock


def ensure_image(
    settings: DockerSettings,
    client: Any,
    *,
    repository: str = DEFAULT_REPOSITORY,
    push: bool = False,
    options: BuildOptions | None = None,
    auth_config: dict[str, str] | None = None,
    copy: bool = False,
) -> tuple[str, bool]:
    """The image for these settings, built (and pushed) only if missing. Returns (ref, built).

    ``copy``: settings that add nothing to the parent still get an image of their own in
    ``repository`` (a Dockerfile that is only ``FROM <parent>``), for a service that cannot
    pull the parent from where it is.

    With ``push``, the registry decides: a tag already there means no build; a tag built here
    before but not pushed is pushed. ``auth_config`` (docker SDK shape) logs in to the registry.
    A miss is checked again under this host's lock on the tag (``build_lock``), so of the tasks
    that miss together, one builds and the others use its image.
    """
    options = options or BuildOptions()
    reference = image_reference(settings, repository, copy=copy)
    if not (settings.needs_build or copy):
        return reference, False
    if _present(client, reference, push, auth_config):
        return reference, False
    with build_lock(reference) as waited:
        if _present(client, reference, push, auth_config):
            log.info(
                "Environment image %s was built by another task%s; using it, no build",
                reference,
                " while this one waited" if waited else "",
            )
            return reference, False
        _build(settings, client, reference, options)
        if push:
            _push(client, reference, auth_config)
    return reference, True


def _present(client: Any, reference: str, push: bool, auth_config: dict[str, str] | None) -> bool:
    """Whether the image is there already (with ``push``: in the registry, pushed if need be)."""
    if push:  # the registry is the truth: the job's machine pulls from there
        if _in_registry(client, reference, auth_config):
            log.info("Environment image %s is in the registry; no build", reference)
            return True
        if _image_exists(client, reference):
            log.info("Environment image %s was built here before; pushing it", reference)
            _push(client, reference, auth_config)
            return True
    elif _image_exists(client, reference):
        log.info("Environment image %s exists; no build", reference)
        return True
    return False


def _build(settings: DockerSettings, client: Any, reference: str, options: BuildOptions) -> None:
    parent = settings.parent_image or default_parent_image()
    if settings.dockerfile:
        dockerfile = Path(settings.dockerfile)
        on_top = settings.apt_packages or settings.requirements or settings.environment
        base_tag = f"{reference}-base" if on_top else reference  # nothing on top: it is the image
        log.info("Building %s from %s", base_tag, dockerfile)
        _run_build(
            client,
            base_tag,
            options,
            path=str(dockerfile.parent),
            dockerfile=dockerfile.name,
            buildargs=dict(settings.build_args) or None,  # the ARGs of the user's Dockerfile
        )
        if not on_top:
            return
        parent = base_tag

    from airflow_stepop.images.build_context import BuildContextError, layer_files

    try:
        files, build_args = layer_files(settings, parent, options.ca_bundle)
    except BuildContextError as exc:
        raise ImageBuildError(str(exc)) from exc
    what = f"Building environment image {reference}"
    if not settings.needs_build:  # only FROM <parent>: for a service that cannot pull it
        what = f"Copying the parent image {parent} to {reference} (the service pulls from there)"
    log.info(what)
    _run_build(
        client,
        reference,
        options,
        what=what,
        fileobj=_context(files),
        custom_context=True,
        buildargs=build_args or None,
    )


def _in_registry(client: Any, reference: str, auth_config: dict[str, str] | None) -> bool:
    """The registry's HTTP API answers; the engine only when that cannot say."""
    import docker.errors

    found = has_image(reference, auth_config)
    if found is not None:
        return found
    try:
        client.images.get_registry_data(reference, auth_config=auth_config)
        return True
    except docker.errors.APIError:
        return False


def _push(client: Any, reference: str, auth_config: dict[str, str] | None = None) -> None:
    repository, _, tag = reference.rpartition(":")
    log.info("Pushing %s", reference)
    for chunk in client.images.push(
        repository, tag=tag, stream=True, decode=True, auth_config=auth_config
    ):
        if "error" in chunk:
            raise ImageBuildError(f"Pushing {reference} failed: {chunk['error']}")


def engine_client(timeout: int = 120) -> Any | None:
    """A docker client when a container engine answers, else None (the SDK imported only here)."""
    try:
        import docker

        client = docker.from_env(timeout=timeout)
        client.ping()
        return client
    except Exception:  # no SDK, no socket, a stopped engine: all mean "no engine"
        return None


def require_engine(reference: str) -> Any:
    """A docker client to build ``reference`` on the worker, or a refusal that says what works."""
    client = engine_client()
    if client is None:
        raise ImageBuildError(
            f"The step's environment image {reference} was not found in its registry, and "
            "building it needs a container engine on the worker: none answers. Start one (or "
            "run the step once from a worker that has one: the image is pushed, and workers "
            "without an engine then use it), or give a prebuilt image with image_uri=."
        )
    return client


class ImageChoice(NamedTuple):
    """The image a service's job runs: ``built`` by this worker's engine just now, or to be
    built by the service's builder first (``build``: the trigger waits for it)."""

    reference: str
    built: bool = False
    build: ImageBuild | None = None


def service_image(
    settings: DockerSettings,
    registry: Callable[[], Registry],
    client: Any = None,
    *,
    pullable: Callable[[str], bool] | None = None,
    mode: str = "engine",
    service_build: Callable[[BuildPlan, Callable[[], bool]], ImageBuild | None] | None = None,
) -> ImageChoice:
    """The image a cloud service's job runs for ``settings``.

    ``pullable(image)`` says whether the service's machines can pull an image (None: any, as
    Vertex AI and Azure ML pull public images). A parent image alone that the service can pull
    is used as it is; one it cannot pull is copied (``FROM <parent>``, content-hashed).
    Otherwise the content-hashed image is built on a registry miss, by (``mode``, the
    ``[stepop] <service>_image_build`` option's value) the worker's engine (``engine``; found
    when ``client`` is None), the service's builder (``service``: ``service_build(plan,
    present)`` starts or joins its build), or the engine when one answers, else the builder
    (``auto``). Either way it is pushed to the registry that ``registry()`` makes ready (called
    only then, so a parent-only step the service can pull needs no registry login).
    """
    parent = settings.parent_image or default_parent_image()
    copy = not settings.needs_build and pullable is not None and not pullable(parent)
    if not (settings.needs_build or copy):
        return ImageChoice(parent)
    if copy:
        log.info("The service cannot pull %s; copying it to the image repository", parent)
    target = registry()
    reference = image_reference(settings, target.repository, copy=copy)
    if has_image(reference, target.auth_config):  # asked without an engine: none is needed
        log.info("Environment image %s is in the registry; no build", reference)
        return ImageChoice(reference)
    options = BuildOptions.from_config()
    if mode != "service" and client is None:
        client = engine_client()
        if client is None and mode == "auto" and service_build is not None:
            log.info("No container engine answers on this worker: the service builds %s",
                     reference)  # fmt: skip
    if client is not None or mode == "engine" or service_build is None:
        image, built = ensure_image(
            settings, client or require_engine(reference), repository=target.repository,
            push=True, options=options, auth_config=target.auth_config, copy=copy,
        )  # fmt: skip
        log.info("Environment image %s (%s)", image, "built and pushed" if built else "no build")
        return ImageChoice(image, built)
    from airflow_stepop.images.build_context import BuildContextError, build_plan

    try:
        plan = build_plan(settings, reference, parent, network_mode=options.network_mode,
                          ca_bundle=options.ca_bundle)  # fmt: skip
    except BuildContextError as exc:
        raise ImageBuildError(str(exc)) from exc
    build = service_build(plan, lambda: bool(has_image(reference, target.auth_config)))
    return ImageChoice(reference, build=build)
