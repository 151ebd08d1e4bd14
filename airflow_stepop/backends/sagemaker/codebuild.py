"""AWS CodeBuild builds SageMaker steps' images where the worker has no container engine.

Worker side (boto3 through the amazon provider's hooks, so the connection's endpoints and role
apply): the project (``[stepop] sagemaker_codebuild_project``) is created on first use with its
service role (``[stepop] sagemaker_codebuild_role``, itself created where the connection may),
then ``StartBuild`` with the archive as an S3 source override and the buildspec of
``buildspec.py``. The idempotency token is the plan's digest and the second: workers that race
to start one tag's build where the store has no conditional write get one build from CodeBuild
itself; a start after a failed build (a retry) gets a new one.

Triggerer side (aiobotocore): ``BatchGetBuilds`` for every watched build of the poll group in one
call, the build's CloudWatch Logs stream (``/aws/codebuild/<project>``, ``<build uuid>``) read
within the log budget and a page bound, ``StopBuild`` on a kill or the task's deadline.
"""

from __future__ import annotations

import logging
import re
import time
from typing import Any

from airflow_stepop.backends.base import JobStatus
from airflow_stepop.backends.image_build import ImageBuilder, build_hint, build_minutes
from airflow_stepop.backends.log_lines import MORE, relayed_lines
from airflow_stepop.backends.ratelimit import log_limiter
from airflow_stepop.backends.sagemaker.buildspec import (
    BUILD_IMAGE,
    IMAGE_VARIABLE,
    ROLE_NAME,
    buildspec,
    role_policy,
    trust_policy,
)
from airflow_stepop.backends.sagemaker.clients import Clients
from airflow_stepop.backends.sagemaker.job import error_code, is_transient_error
from airflow_stepop.images.build_context import BuildPlan
from airflow_stepop.setting_values import SettingsError

log = logging.getLogger(__name__)

PENDING_PHASES = frozenset({"SUBMITTED", "QUEUED", "PROVISIONING"})
FAILED = frozenset({"FAILED", "FAULT", "TIMED_OUT"})
PAGES_PER_READ = 4
FINAL_PAGES = 50
MANAGED_TAG = {"Key": "airflow-stepop", "Value": "managed"}  # on the role we create
# IAM is eventually consistent: a role created a moment ago may not be assumable by CodeBuild yet.
ROLE_WAIT_SECONDS = 60.0


class CodeBuildBuilder(ImageBuilder):
    """Builds and pushes images with AWS CodeBuild."""

    name = "AWS CodeBuild"
    archive_kind = "zip"
    first_poll_seconds = 5.0  # a build takes a minute to provision

    def __init__(
        self,
        aws_conn_id: str | None = "aws_default",
        region_name: str | None = None,
        project: str = "airflow-stepop-image-build",
    ) -> None:
        self.aws_conn_id = aws_conn_id
        self.region_name = region_name
        self.project = project
        self._clients = Clients(aws_conn_id, region_name, kinds=("codebuild", "logs"))
        self._ended: set[str] = set()
        self._logs: dict[str, tuple[str, str]] = {}  # build -> (group, stream) CodeBuild said

    def serialize(self) -> dict[str, Any]:
        return {"aws_conn_id": self.aws_conn_id, "region_name": self.region_name,
                "project": self.project}  # fmt: skip

    def poll_group(self) -> str:
        return f"codebuild:{self.aws_conn_id}:{self.region_name or ''}"

    @property
    def _client(self) -> Any:
        return self._clients.hook("codebuild").conn

    # ---- worker side -------------------------------------------------------------------

    def ready(self, plan: BuildPlan, source_uri: str) -> None:
        """The project (created on first use, by whichever worker gets there first) and, on the
        role we created, a policy for this artifact root's images and this repository."""
        role = self._ensure_project(source_uri)
        if role is not None:
            self._allow(role, source_uri.rsplit("/", 2)[0], plan.reference)

    def start(self, plan: BuildPlan, source_uri: str, folder_uri: str, token: str) -> str:
        bucket_key = source_uri.split("://", 1)[1]
        try:
            answer = self._client.start_build(
                projectName=self.project,
                sourceTypeOverride="S3",
                sourceLocationOverride=bucket_key,
                buildspecOverride=buildspec(plan),
                privilegedModeOverride=True,
                environmentVariablesOverride=[
                    {"name": IMAGE_VARIABLE, "value": plan.reference, "type": "PLAINTEXT"}
                ],
                timeoutInMinutesOverride=build_minutes(),
                idempotencyToken=token,  # a StartBuild the client retries is one build
            )
        except Exception as exc:
            if error_code(exc) in ("AccessDeniedException", "AccessDenied"):
                raise SettingsError(
                    f"The connection may not start AWS CodeBuild builds of the project "
                    f"{self.project!r} ({exc}): give its identity codebuild:StartBuild, "
                    "BatchGetBuilds and StopBuild (docs/sagemaker.md, IAM), or build the image "
                    "with a container engine ([stepop] sagemaker_image_build = engine)."
                ) from exc
            raise
        return answer["build"]["id"]

    def handle_of(self, build_id: str, folder_uri: str) -> dict[str, Any] | None:
        if not re.fullmatch(rf"{re.escape(self.project)}:[0-9a-f-]{{36}}", build_id):
            return None  # not a build of this project: a record is not trusted beyond that
        return {"job_id": build_id}

    def _ensure_project(self, source_uri: str) -> str | None:
        """Make the project where it is missing; the name of its role when we created that role
        (and so keep its policies), else None."""
        from airflow_stepop import config

        client = self._client
        found = client.batch_get_projects(names=[self.project]).get("projects") or []
        if found:
            role = found[0].get("serviceRole", "")
            return self._managed_role(role.rsplit("/", 1)[-1])
        role, managed = self._service_role()
        give_up = time.monotonic() + ROLE_WAIT_SECONDS
        while True:
            try:
                client.create_project(
                    name=self.project,
                    description="Builds the environment images of airflow-stepop steps",
                    source={"type": "NO_SOURCE", "buildspec": "version: 0.2"},
                    artifacts={"type": "NO_ARTIFACTS"},
                    environment={
                        "type": "LINUX_CONTAINER",
                        "image": BUILD_IMAGE,
                        "computeType": config.get("sagemaker_codebuild_compute_type"),
                        "privilegedMode": True,
                    },
                    serviceRole=role,
                    timeoutInMinutes=build_minutes(),
                    logsConfig={"cloudWatchLogs": {"status": "ENABLED"}},
                )
                log.info("Created the CodeBuild project %s (role %s)", self.project, role)
                return role.rsplit("/", 1)[-1] if managed else None
            except Exception as exc:
                code = error_code(exc)
                if code == "ResourceAlreadyExistsException":
                    return role.rsplit("/", 1)[-1] if managed else None
                assumable = code == "InvalidInputException" and "AssumeRole" in str(exc)
                if not assumable or time.monotonic() > give_up:
                    raise SettingsError(
                        f"The CodeBuild project {self.project!r} ([stepop] "
                        f"sagemaker_codebuild_project) does not exist and cannot be created "
                        f"with the role {role} ({exc}). Create it, or let the connection "
                        "create it (docs/sagemaker.md, IAM: codebuild:CreateProject and "
                        "iam:PassRole)."
                    ) from exc
                time.sleep(5)  # a role created a moment ago: IAM has not told CodeBuild yet

    def _service_role(self) -> tuple[str, bool]:
        """The project's role and whether we manage it: ``[stepop] sagemaker_codebuild_role``
        (a name or an ARN), else ``airflow-stepop-codebuild``, created where the connection may
        (tagged ``airflow-stepop=managed``: its policies are ours to keep)."""
        from airflow_stepop import config

        named = config.get("sagemaker_codebuild_role")
        if named.startswith("arn:"):
            return named, False
        iam = self._clients.hook("iam").conn
        name = named or ROLE_NAME
        try:
            return iam.get_role(RoleName=name)["Role"]["Arn"], self._managed_role(name) is not None
        except Exception as exc:
            if error_code(exc) != "NoSuchEntity" or named:
                raise SettingsError(
                    f"The CodeBuild service role {name!r} ([stepop] sagemaker_codebuild_role) "
                    f"cannot be read ({exc}): give an existing role's name or ARN "
                    "(docs/sagemaker.md, IAM)."
                ) from exc
        account = self._clients.hook("sts").conn.get_caller_identity()["Account"]
        try:
            created = iam.create_role(
                RoleName=name, AssumeRolePolicyDocument=trust_policy(account),
                Description="airflow-stepop image builds", Tags=[MANAGED_TAG],
            )  # fmt: skip
        except Exception as exc:
            if error_code(exc) == "EntityAlreadyExists":
                return iam.get_role(RoleName=name)["Role"]["Arn"], True
            raise SettingsError(
                f"CodeBuild needs a service role to build the step's image, and the role "
                f"{name!r} cannot be created ({exc}). Create it once (docs/sagemaker.md, IAM) "
                "or name one with [stepop] sagemaker_codebuild_role."
            ) from exc
        log.info("Created the IAM role %s for CodeBuild", name)
        return created["Role"]["Arn"], True

    def _managed_role(self, name: str) -> str | None:
        """``name`` when the role carries our tag (we created it), else None."""
        try:
            tags = self._clients.hook("iam").conn.list_role_tags(RoleName=name).get("Tags") or []
        except Exception:  # not ours to read: not ours to change either
            return None
        return name if MANAGED_TAG in tags else None

    def _allow(self, role: str, images_uri: str, reference: str) -> None:
        """On the role we created: a policy for builds of this artifact root's images that
        push to this repository (one inline policy each; putting one is idempotent)."""
        import hashlib

        scope = hashlib.sha256(f"{images_uri}|{reference.rsplit(':', 1)[0]}".encode())
        try:
            self._clients.hook("iam").conn.put_role_policy(
                RoleName=role, PolicyName=f"airflow-stepop-{scope.hexdigest()[:16]}",
                PolicyDocument=role_policy(images_uri, reference),
            )  # fmt: skip
        except Exception as exc:
            raise SettingsError(
                f"The CodeBuild service role {role!r} needs a policy to read {images_uri} and "
                f"push {reference.rsplit(':', 1)[0]}, and it cannot be put ({exc}): give the "
                "connection iam:PutRolePolicy on it, or give the role those permissions "
                "yourself and remove its tag airflow-stepop=managed (docs/sagemaker.md, IAM)."
            ) from exc

    def image_of(self, handle: dict[str, Any]) -> tuple[JobStatus, str | None]:
        builds = self._client.batch_get_builds(ids=[handle["job_id"]]).get("builds") or []
        if not builds:
            raise FileNotFoundError(f"CodeBuild has no build {handle['job_id']}")
        variables = (builds[0].get("environment") or {}).get("environmentVariables") or []
        image = next((v.get("value") for v in variables if v.get("name") == IMAGE_VARIABLE), None)
        return build_status(builds[0]), image

    def status(self, handle: dict[str, Any]) -> JobStatus:
        return self.image_of(handle)[0]  # boto3 here: the worker has no event loop to share

    def stop(self, handle: dict[str, Any]) -> None:
        try:
            self._client.stop_build(id=handle["job_id"])
        except Exception as exc:
            if error_code(exc) not in ("ResourceNotFoundException", "InvalidInputException"):
                raise

    def is_transient(self, exc: Exception) -> bool:
        return is_transient_error(exc)

    def hint(self, reason: str, log_tail: list[str]) -> str | None:
        text = "\n".join([reason, *log_tail])
        if "denied" in text and ("ecr:" in text or "not authorized" in text):
            return ("The CodeBuild project's service role may not push to the image repository: "
                    "give it the ECR permissions of docs/sagemaker.md, IAM.")  # fmt: skip
        if "Cannot connect to the Docker daemon" in text:
            return (f"The CodeBuild project {self.project!r} runs without privileged mode, which "
                    "docker builds need: turn it on in the project's environment.")  # fmt: skip
        return build_hint(text)

    # ---- triggerer side ----------------------------------------------------------------

    def prepare_async(self) -> None:
        self._clients.prepare()

    async def astatus(self, handle: dict[str, Any]) -> JobStatus:
        return (await self.astatuses([handle]))[handle["job_id"]]

    async def astatuses(self, handles: list[dict[str, Any]]) -> dict[str, JobStatus]:
        client = await self._clients.get("codebuild")
        out: dict[str, JobStatus] = {}
        ids = [h["job_id"] for h in handles]
        for start in range(0, len(ids), 100):  # BatchGetBuilds takes 100 ids a call
            answer = await client.batch_get_builds(ids=ids[start : start + 100])
            for build in answer.get("builds") or []:
                status = build_status(build)
                out[build["id"]] = status
                logs = build.get("logs") or {}
                if logs.get("groupName") and logs.get("streamName"):  # a project's own config
                    self._logs[build["id"]] = (logs["groupName"], logs["streamName"])
                if status.terminal:
                    self._ended.add(build["id"])
        return out

    async def alogs(self, handle: dict[str, Any], cursor: Any) -> tuple[list[str], Any]:
        """The build's CloudWatch Logs stream from the cursor's token, ``PAGES_PER_READ`` pages
        a read at most; the cursor says when more waits (the relay reads again at once), up to
        ``FINAL_PAGES`` pages of a finished build."""
        cursor = dict(cursor) if isinstance(cursor, dict) else {"token": None, "pages": 0}
        cursor.pop(MORE, None)
        final = handle["job_id"] in self._ended
        group, stream = self._logs.get(handle["job_id"]) or (
            f"/aws/codebuild/{self.project}",
            handle["job_id"].split(":", 1)[-1],
        )
        client = await self._clients.get("logs")
        limiter = log_limiter(self.poll_group())
        lines: list[str] = []
        for _ in range(PAGES_PER_READ):
            if not final and not limiter.try_acquire():
                return lines, cursor
            kwargs: dict[str, Any] = {"logGroupName": group, "logStreamName": stream,
                                      "startFromHead": True}  # fmt: skip
            if cursor.get("token"):
                kwargs["nextToken"] = cursor["token"]
            try:
                answer = await client.get_log_events(**kwargs)
            except Exception as exc:
                if error_code(exc) == "ResourceNotFoundException":  # not started yet
                    return lines, cursor
                raise
            events = answer.get("events") or []
            for event in events:
                lines.extend(relayed_lines(event["message"]))
            cursor["pages"] = int(cursor.get("pages") or 0) + 1
            token = answer.get("nextForwardToken")
            if not events or token == cursor.get("token"):  # the stream's end, for now
                return lines, cursor
            cursor["token"] = token
        if not final or cursor["pages"] < FINAL_PAGES:
            cursor[MORE] = True  # a full read: more waits
        return lines, cursor

    async def astop(self, handle: dict[str, Any]) -> None:
        client = await self._clients.get("codebuild")
        try:
            await client.stop_build(id=handle["job_id"])
        except Exception as exc:
            if error_code(exc) not in ("ResourceNotFoundException", "InvalidInputException"):
                raise

    async def aclose(self) -> None:
        await self._clients.aclose()

    def forget(self, handle: dict[str, Any]) -> None:
        self._ended.discard(handle["job_id"])
        self._logs.pop(handle["job_id"], None)


def build_status(build: dict[str, Any]) -> JobStatus:
    """A CodeBuild build -> JobStatus; a failure's reason names its phase and what it said."""
    state = build.get("buildStatus")
    if state == "SUCCEEDED":
        return JobStatus("succeeded")
    if state == "STOPPED":
        return JobStatus("stopped", "the build was stopped")
    if state in FAILED:
        failed = [p for p in build.get("phases") or [] if p.get("phaseStatus") not in
                  (None, "SUCCEEDED")]  # fmt: skip
        said = ""
        if failed:
            phase = failed[0]
            messages = [c.get("message") for c in phase.get("contexts") or [] if c.get("message")]
            said = f" in phase {phase.get('phaseType')}" + (f": {messages[0]}" if messages else "")
        return JobStatus("failed", f"{state}{said}")
    if build.get("currentPhase") in PENDING_PHASES:
        return JobStatus("pending")
    return JobStatus("running")
