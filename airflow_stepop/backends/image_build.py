"""Images a cloud's builder builds (AWS CodeBuild, Cloud Build), one build per tag, followed as
a job is.

A worker with no container engine (MWAA, Cloud Composer, Astronomer, the Helm chart) hands the
build to the service's builder: it uploads the build's archive beside the artifacts
(``<root>/images/<tag>/<plan digest>.zip|tar.gz``: the same Dockerfiles and files the engine
path builds, ``build_context.BuildPlan``), starts the build, and the step defers. The trigger
follows the build as it follows jobs (the shared poller, the log relay, the deadline, a user's
kill: an ``ImageBuilder`` is a ``JobService``), then creates the step's job the moment the build
succeeds; a failed build fails the task before any job is created.

One build per tag. Of the tasks that need a tag together (a mapped task, a retry, tasks on other
hosts), one starts its build and the others follow that build: on one host they take turns
under ``builder.build_lock``; across hosts the first claims ``<root>/images/<tag>/build.json``
with a write that succeeds only where no record is (``Storage.create_new``), and names its
build there once started. A record is only ever a hint of which build to wait for: a build is
followed only when the builder itself says it builds this very image and is still running, and
the job always runs the content-hashed tag it asked for, never a name from the record (a job
can write the artifact root).
"""

from __future__ import annotations

import abc
import json
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from airflow_stepop.backends.base import JobService, JobStatus
from airflow_stepop.images.build_context import BuildPlan
from airflow_stepop.runtime.storage import join

log = logging.getLogger(__name__)

RECORD = "build.json"
MAX_RECORD_BYTES = 64 << 10
# A claim with no build named in it this long is taken over: its worker died before the start.
CLAIM_SECONDS = 60.0
CLAIM_POLL_SECONDS = 1.0


BUILD_MODES = ("auto", "engine", "service")


def build_mode(service: str) -> str:
    """``[stepop] <service>_image_build``: who builds a step's image (``BUILD_MODES``)."""
    from airflow_stepop import config
    from airflow_stepop.setting_values import SettingsError

    option = f"{service}_image_build"
    mode = (config.get(option) or "auto").strip().lower()
    if mode not in BUILD_MODES:
        raise SettingsError(
            f"[stepop] {option}={mode!r} (AIRFLOW__STEPOP__{option.upper()}) is not one of "
            f"{', '.join(BUILD_MODES)}; e.g. 'auto' (the worker's engine when one answers, else "
            "the service's builder)."
        )
    return mode


class ImageBuildFailedError(RuntimeError):
    """A service's build of the step's image did not succeed; nothing was submitted."""


@dataclass(frozen=True)
class ImageBuild:
    """A build the step's job waits for: its builder (import path and arguments, as a backend
    is rebuilt in the triggerer) and its handle (``job_id``: the build's id; ``image``: the tag
    it pushes; ``run_uri``: the step's run directory, where the relay keeps its cursor)."""

    builder_path: str
    builder_kwargs: dict[str, Any]
    handle: dict[str, Any]

    def builder(self) -> ImageBuilder:
        from airflow.sdk.module_loading import import_string

        return import_string(self.builder_path)(**self.builder_kwargs)

    def to_json(self) -> dict[str, Any]:
        return {"builder_path": self.builder_path, "builder_kwargs": self.builder_kwargs,
                "handle": self.handle}  # fmt: skip

    @classmethod
    def from_json(cls, document: dict[str, Any]) -> ImageBuild:
        return cls(document["builder_path"], document["builder_kwargs"], document["handle"])

    def wait(self, poll_seconds: float = 5.0, timeout: float = 3600.0) -> None:
        """Wait here until the build ends (scripts, tests, ``StepBackend.submit``): the operator
        never does, its trigger follows the build."""
        builder = self.builder()
        end = time.monotonic() + timeout
        while True:
            status = builder.status(self.handle)
            if status.terminal:
                break
            if time.monotonic() > end:
                builder.stop(self.handle)
                raise ImageBuildFailedError(f"{describe(self.handle)} took over {timeout:.0f} s")
            time.sleep(poll_seconds)
        if status.state != "succeeded":
            raise ImageBuildFailedError(f"{describe(self.handle)} {status.state}: {status.reason}")


class ImageBuilder(JobService):
    """A service that builds images from an uploaded archive: its builds are jobs to a trigger."""

    name: ClassVar[str]  # "AWS CodeBuild", in the task log and errors
    archive_kind: ClassVar[str]  # "zip" or "tar.gz": what the service's source takes

    def ready(self, plan: BuildPlan, source_uri: str) -> None:  # noqa: B027 - optional
        """Before this worker claims the build: what the builder needs once (a project, its
        role), so that the claim is held only for the upload and the start."""

    @abc.abstractmethod
    def start(self, plan: BuildPlan, source_uri: str, folder_uri: str, token: str) -> str:
        """Start building ``plan`` from the archive at ``source_uri`` and pushing
        ``plan.reference``; ``folder_uri`` is the tag's folder (where a service writes the
        build's log), ``token`` this claim's (a start call the client retries is one build).
        Returns the build's id."""

    @abc.abstractmethod
    def handle_of(self, build_id: str, folder_uri: str) -> dict[str, Any] | None:
        """The handle of the build ``build_id`` (``job_id`` and what ``alogs`` reads), made
        from the builder's own settings; None when the id is not one of its builds' (a record
        in the store is not trusted to name anything else)."""

    @abc.abstractmethod
    def image_of(self, handle: dict[str, Any]) -> tuple[JobStatus, str | None]:
        """One describe of a build: its state, and the image it pushes as the service says
        (None when it says none): whether a recorded build is one to wait for."""

    def hint(self, reason: str, log_tail: list[str]) -> str | None:
        """The fix for a failed build, where its reason or last lines tell it (a permission
        the builder lacks, a registry it cannot push to); ``build_hint`` the builders share."""
        return build_hint("\n".join([reason, *log_tail]))

    @classmethod
    def path(cls) -> str:
        return f"{cls.__module__}.{cls.__qualname__}"


def build_hint(text: str) -> str | None:
    """The fix for what any builder's failed ``pip install`` says, where it is known."""
    if "No matching distribution found" in text or "Could not find a version" in text:
        return ("A requirement does not exist on the package index the build reaches: check "
                "DockerSettings.requirements (names and versions).")  # fmt: skip
    if "CERTIFICATE_VERIFY_FAILED" in text:
        return ("pip does not trust the TLS certificate of the package index: set [stepop] "
                "build_ca_bundle to the CA bundle of your proxy.")  # fmt: skip
    if "toomanyrequests" in text:
        return ("Docker Hub refused the parent image's pull (its anonymous rate limit, shared by "
                "the builder's addresses): use a parent from another registry, e.g. "
                "public.ecr.aws/docker/library/python:3.11-slim, or one in your own.")  # fmt: skip
    return None


BUILD_MINUTES = (5, 1440)  # what both builders take: CodeBuild 5-2160, Cloud Build up to 24 h


def build_minutes() -> int:
    """``[stepop] image_build_timeout_minutes``, checked before any build starts."""
    from airflow_stepop import config
    from airflow_stepop.setting_values import SettingsError

    minutes = config.get_int("image_build_timeout_minutes")
    low, high = BUILD_MINUTES
    if not low <= minutes <= high:
        raise SettingsError(
            f"[stepop] image_build_timeout_minutes={minutes} "
            "(AIRFLOW__STEPOP__IMAGE_BUILD_TIMEOUT_MINUTES) is not between "
            f"{low} and {high}, the minutes a service's image build may take; e.g. 60."
        )
    return minutes


def images_root(request: Any) -> str:
    """Where a step's image builds keep their archives and records: ``images/`` beside the
    artifact root's code bundles (``<root>/code/<sha>.zip``), shared by every step there."""
    return join(request.code_uri.rsplit("/code/", 1)[0], "images")


def describe(handle: dict[str, Any]) -> str:
    return f"Image build {handle.get('job_id')} of {handle.get('image')}"


def start_or_join(
    builder: ImageBuilder,
    plan: BuildPlan,
    storage: Any,
    images_root: str,
    run_uri: str,
    present: Callable[[], bool],
) -> ImageBuild | None:
    """The build of ``plan.reference`` that this step waits for: one already running for the
    same tag, or one started now; None when ``present()`` (the registry has the tag) turns true
    meanwhile, e.g. the build another task waited for has just pushed it."""
    from airflow_stepop.images.builder import build_lock

    tag = plan.reference.rsplit(":", 1)[1]
    folder = join(images_root, tag)
    record_uri = join(folder, RECORD)
    source = join(folder, f"{plan.digest[:24]}.{builder.archive_kind}")
    build_minutes()  # a wrong [stepop] image_build_timeout_minutes stops here, before any claim
    builder.ready(plan, source)
    with build_lock(plan.reference):
        found = _claim(builder, storage, record_uri, folder, plan.reference, present)
        if found is None:
            return None
        if isinstance(found, dict):
            log.info("%s is running already (%s): waiting for it, no second build",
                     describe({**found, "image": plan.reference}), builder.name)  # fmt: skip
            return _followed(builder, {**found, "joined": True}, plan, run_uri)
        nonce = found
        # written even where one is: the build checks every file against the plan
        storage.write_bytes(source, plan.archive(builder.archive_kind))
        _write_claim(storage, record_uri, plan.reference, nonce)  # fresh after a long upload
        log.info("%s: %s builds it from %s", plan.what, builder.name, source)
        try:
            build_id = builder.start(plan, source, folder, nonce)
        except BaseException:  # the claim is given up: another task need not wait it out
            storage.write_bytes(record_uri, json.dumps({"image": plan.reference}).encode())
            raise
        record = {"image": plan.reference, "builder": builder.name, "build_id": build_id,
                  "nonce": nonce, "at": time.time()}  # fmt: skip
        storage.write_bytes(record_uri, json.dumps(record).encode())
    handle = builder.handle_of(build_id, folder)
    if handle is None:
        raise RuntimeError(f"{builder.name} answered a build id of another form: {build_id!r}")
    log.info("%s started", describe({**handle, "image": plan.reference}))
    return _followed(builder, handle, plan, run_uri)


def _followed(
    builder: ImageBuilder, handle: dict[str, Any], plan: BuildPlan, run_uri: str
) -> ImageBuild:
    handle = {**handle, "image": plan.reference, "run_uri": run_uri, "builder": builder.name,
              "kind": "Image build", "submitted_at": time.time()}  # fmt: skip
    return ImageBuild(builder.path(), builder.serialize(), handle)


def _claim_document(reference: str, nonce: str) -> bytes:
    return json.dumps({"image": reference, "nonce": nonce, "claimed_at": time.time()}).encode()


def _write_claim(storage: Any, uri: str, reference: str, nonce: str) -> None:
    storage.write_bytes(uri, _claim_document(reference, nonce))


def _claim(
    builder: ImageBuilder,
    storage: Any,
    record_uri: str,
    folder: str,
    reference: str,
    present: Callable[[], bool],
) -> dict[str, Any] | str | None:
    """None when the image is in its registry; the handle of a running build of it that the
    record names; or this worker's claim (a nonce) once it holds the record's claim to start
    one. Waits at most ``CLAIM_SECONDS`` for another worker's claim or build, then takes over."""
    deadline = time.monotonic() + CLAIM_SECONDS
    nonce = uuid.uuid4().hex
    while True:
        waiting = time.monotonic() < deadline
        if present():
            return None
        record = _read_record(storage, record_uri)
        if record is None:
            if storage.create_new(record_uri, _claim_document(reference, nonce)):
                return nonce
            if waiting:  # another worker claimed it this instant: read its record
                time.sleep(CLAIM_POLL_SECONDS)
                continue
        elif isinstance(record.get("build_id"), str):
            handle = builder.handle_of(record["build_id"], folder)
            state = _state(builder, handle, reference) if handle is not None else None
            if state == "running":
                return handle
            if state in ("succeeded", "unknown") and waiting:
                time.sleep(CLAIM_POLL_SECONDS)  # pushed (the registry says so in a moment), or
                continue  # the builder did not answer: asked again
        elif _fresh_claim(record) and waiting:
            time.sleep(CLAIM_POLL_SECONDS)  # another worker is starting the build
            continue
        _write_claim(storage, record_uri, reference, nonce)  # ended, failed, stale, not ours
        return nonce


def _read_record(storage: Any, uri: str) -> dict[str, Any] | None:
    try:
        record = json.loads(storage.read_bounded(uri, MAX_RECORD_BYTES))
    except FileNotFoundError:
        return None
    except ValueError:  # not a record of ours: taken over as a stale one
        return {}
    return record if isinstance(record, dict) else {}


def _fresh_claim(record: dict[str, Any]) -> bool:
    at = record.get("claimed_at")
    return isinstance(at, (int, float)) and 0 <= time.time() - at < CLAIM_SECONDS


def _state(builder: ImageBuilder, handle: dict[str, Any], reference: str) -> str | None:
    """The recorded build's state if the builder says it pushes ``reference`` (``unknown``:
    the builder did not answer), else None."""
    try:
        status, image = builder.image_of(handle)
    except Exception as exc:
        if builder.is_transient(exc):
            return "unknown"
        log.info("The recorded build %s cannot be used (%s)", handle.get("job_id"), exc)
        return None
    if image != reference:
        return None
    return "running" if not status.terminal else status.state
