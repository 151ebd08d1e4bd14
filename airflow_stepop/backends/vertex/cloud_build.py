"""Cloud Build builds Vertex AI steps' images where the worker has no container engine.

``CreateBuild`` (``google-cloud-build``'s ``CloudBuildClient``, REST, with the connection's
credentials and its ``cloudbuild_endpoint`` extra where one is set) in the step's region: the
archive as a Cloud Storage source, one ``gcr.io/cloud-builders/docker`` step per ``docker
build`` of the plan (``images/build_context``), the content-hashed tag in ``images`` (Cloud Build
pushes it), the build's log written to the tag's folder in the artifact root (``logsBucket``,
``GCS_ONLY``: ``log-<build id>.txt``), which the trigger reads by byte ranges, a bounded piece a
read. The library has no async REST transport: the triggerer's calls run in a thread each.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from functools import cached_property
from typing import Any

from airflow_stepop.backends.base import JobStatus
from airflow_stepop.backends.image_build import ImageBuilder, build_hint, build_minutes
from airflow_stepop.backends.log_lines import MORE, take_lines
from airflow_stepop.backends.ratelimit import log_limiter
from airflow_stepop.backends.vertex.api import GoogleAccess, is_transient_error
from airflow_stepop.images.build_context import BuildPlan
from airflow_stepop.runtime.storage import join
from airflow_stepop.setting_values import SettingsError

DOCKER_BUILDER = "gcr.io/cloud-builders/docker"
PENDING = frozenset({"QUEUED", "PENDING", "STATUS_UNKNOWN"})
FAILED = frozenset({"FAILURE", "INTERNAL_ERROR", "TIMEOUT", "EXPIRED"})
LOG_READ_BYTES = 1 << 20  # one read of the build's log takes at most this much of it
FINAL_READS = 50


class CloudBuildBuilder(ImageBuilder):
    """Builds and pushes images with Cloud Build."""

    name = "Cloud Build"
    archive_kind = "tar.gz"
    first_poll_seconds = 5.0

    def __init__(
        self,
        gcp_conn_id: str = "google_cloud_default",
        project_id: str | None = None,
        location: str | None = None,
        impersonation_chain: list[str] | None = None,
    ) -> None:
        self.gcp_conn_id = gcp_conn_id
        self.project_id = project_id
        self.location = location
        self.impersonation_chain = list(impersonation_chain or [])
        self.access = GoogleAccess(gcp_conn_id, tuple(self.impersonation_chain), project_id,
                                   location)  # fmt: skip
        self._ended: set[str] = set()

    def serialize(self) -> dict[str, Any]:
        return self.access.arguments()

    def poll_group(self) -> str:
        return f"cloudbuild:{self.gcp_conn_id}:{self.project_id or ''}:{self.location or ''}"

    @cached_property
    def client(self) -> Any:
        from google.api_core.client_options import ClientOptions
        from google.cloud.devtools import cloudbuild_v1

        endpoint = self.access.extra("cloudbuild_endpoint") or "cloudbuild.googleapis.com"
        return cloudbuild_v1.CloudBuildClient(
            transport="rest",
            client_options=ClientOptions(api_endpoint=endpoint),
            credentials=self.access.credentials,
        )

    # ---- worker side -------------------------------------------------------------------

    def start(self, plan: BuildPlan, source_uri: str, folder_uri: str, token: str) -> str:
        from airflow_stepop import config

        bucket, _, key = source_uri.split("://", 1)[1].partition("/")
        build: dict[str, Any] = {
            "source": {"storage_source": {"bucket": bucket, "object_": key}},
            "steps": [
                # the archive lies where jobs can write: its files must be the worker's
                {
                    "name": DOCKER_BUILDER,
                    "entrypoint": "bash",
                    "args": ["-c", plan.verify_script()],
                },
                *({"name": DOCKER_BUILDER, "args": _docker_args(plan, b)} for b in plan.builds),
            ],
            "images": [plan.reference],
            "tags": ["airflow-stepop", "stepop-" + plan.reference.rsplit(":", 1)[1]],
            "timeout": {"seconds": 60 * build_minutes()},
            "logs_bucket": folder_uri,
            "options": {"logging": "GCS_ONLY"},
        }
        account = config.get("vertex_cloud_build_service_account")
        if account:
            if "/" not in account:
                account = f"projects/{self.access.project}/serviceAccounts/{account}"
            build["service_account"] = account
        try:
            operation = self.client.create_build(
                request={"parent": self.access.parent, "project_id": self.access.project,
                         "build": build}
            )  # fmt: skip
        except Exception as exc:
            if getattr(exc, "code", None) == 403:
                raise SettingsError(
                    f"The connection may not create Cloud Build builds in "
                    f"{self.access.parent} ({exc}): give its identity "
                    "roles/cloudbuild.builds.editor (docs/vertex.md, IAM roles), or build the "
                    "image with a container engine ([stepop] vertex_image_build = engine)."
                ) from exc
            raise
        return operation.metadata.build.id

    def handle_of(self, build_id: str, folder_uri: str) -> dict[str, Any] | None:
        if not re.fullmatch(r"[0-9a-f-]{36}", build_id):
            return None  # not a Cloud Build id: a record is not trusted beyond that
        return {"job_id": build_id, "name": f"{self.access.parent}/builds/{build_id}",
                "log_uri": join(folder_uri, f"log-{build_id}.txt")}  # fmt: skip

    def image_of(self, handle: dict[str, Any]) -> tuple[JobStatus, str | None]:
        build = self.client.get_build(request={"name": handle["name"]})
        return build_status(build), (list(build.images) or [None])[0]

    def status(self, handle: dict[str, Any]) -> JobStatus:
        return self.image_of(handle)[0]

    def stop(self, handle: dict[str, Any]) -> None:
        from google.api_core import exceptions

        # gone, or ended already: nothing to stop
        with contextlib.suppress(exceptions.NotFound, exceptions.FailedPrecondition):
            self.client.cancel_build(request={"name": handle["name"]})

    def is_transient(self, exc: Exception) -> bool:
        return is_transient_error(exc)

    def hint(self, reason: str, log_tail: list[str]) -> str | None:
        text = "\n".join([reason, *log_tail])
        if "denied" in text or "artifactregistry.repositories.uploadArtifacts" in text:
            return (
                "Cloud Build's service account may not push to the image repository: give it "
                "roles/artifactregistry.writer there (docs/vertex.md, IAM roles)."
            )
        return build_hint(text)

    # ---- triggerer side ----------------------------------------------------------------

    def prepare_async(self) -> None:
        self.client  # noqa: B018 - imports the library and reads the connection, in a thread

    async def astatus(self, handle: dict[str, Any]) -> JobStatus:
        build = await asyncio.to_thread(self.client.get_build, request={"name": handle["name"]})
        status = build_status(build)
        if status.terminal:
            self._ended.add(handle["job_id"])
        return status

    async def alogs(self, handle: dict[str, Any], cursor: Any) -> tuple[list[str], Any]:
        """The build's log object from the cursor's offset, at most ``LOG_READ_BYTES`` a read
        (a finished build's to its end over as many reads as that takes)."""
        cursor = dict(cursor) if isinstance(cursor, dict) else {"offset": 0, "reads": 0}
        cursor.pop(MORE, None)
        final = handle["job_id"] in self._ended
        if not final and not log_limiter(self.poll_group()).try_acquire():
            return [], cursor
        offset = int(cursor.get("offset") or 0)
        data = await asyncio.to_thread(self._read_log, handle["log_uri"], offset)
        full = len(data) > LOG_READ_BYTES
        data = data[:LOG_READ_BYTES]
        lines, used = take_lines(data, ended=final and not full)
        cursor["offset"] = offset + used
        if final:
            cursor["reads"] = int(cursor.get("reads") or 0) + 1
        if full and (not final or cursor["reads"] < FINAL_READS):
            cursor[MORE] = True  # more waits past this read: the relay reads again at once
        return lines, cursor

    def _read_log(self, uri: str, offset: int) -> bytes:
        """Up to ``LOG_READ_BYTES`` + 1 bytes of the log from ``offset`` (b"" before it exists)."""
        from airflow_stepop.artifacts.storage import worker_storage

        if not uri.startswith("gs://"):  # where the build writes: nothing else is read
            raise ValueError(f"a Cloud Build log is in Cloud Storage, not at {uri!r}")
        fs, path = worker_storage(self.gcp_conn_id).resolver(uri)
        try:
            return fs.cat_file(path, start=offset, end=offset + LOG_READ_BYTES + 1)
        except FileNotFoundError:
            return b""

    async def astop(self, handle: dict[str, Any]) -> None:
        await asyncio.to_thread(self.stop, handle)

    def forget(self, handle: dict[str, Any]) -> None:
        self._ended.discard(handle["job_id"])


def _docker_args(plan: BuildPlan, build: Any) -> list[str]:
    """``docker build``'s arguments, each ``$`` doubled: Cloud Build reads ``$X`` as a
    substitution, and a value must reach the build as given."""
    args = ["build", "--tag", build.tag]
    if plan.network_mode:
        args += ["--network", plan.network_mode]
    for key, value in build.build_args.items():
        args += ["--build-arg", f"{key}={value}"]
    args += ["--file", f"{build.directory}/{build.dockerfile}", build.directory]
    return [arg.replace("$", "$$") for arg in args]


def build_status(build: Any) -> JobStatus:
    """A Cloud Build build -> JobStatus; a failure's reason is the service's own detail."""
    state = build.status.name
    if state == "SUCCESS":
        return JobStatus("succeeded")
    if state == "CANCELLED":
        return JobStatus("stopped", "the build was cancelled")
    if state in FAILED:
        detail = build.failure_info.detail or build.status_detail or "the build did not succeed"
        return JobStatus("failed", f"{state}: {detail}")
    if state in PENDING:
        return JobStatus("pending")
    return JobStatus("running")
