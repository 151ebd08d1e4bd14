"""The CodeBuild fake's API: projects (CreateProject, BatchGetProjects, ListProjects) and builds
(StartBuild, BatchGetBuilds, StopBuild, ListBuildsForProject).

Each operation takes the request body and the request's headers and returns the answer body;
``CodeBuildFake.dispatch`` routes on ``X-Amz-Target`` and turns an
:class:`~cloud.sagemaker.validation.ApiError` into CodeBuild's error shape.
"""

from __future__ import annotations

import base64
import json
import re
import threading
import time
from typing import Any

from cloud.codebuild.lifecycle import BuildLifecycle
from cloud.codebuild.state import Build, Project
from cloud.codebuild.validation import (
    ApiError,
    check_create_project,
    check_shape,
    check_start_build,
    invalid,
)

MAX_PROJECTS = 5000
IDEMPOTENCY_SECONDS = 300
ENV_OVERRIDES = {
    "environmentTypeOverride": "type",
    "imageOverride": "image",
    "computeTypeOverride": "computeType",
    "privilegedModeOverride": "privilegedMode",
    "certificateOverride": "certificate",
    "imagePullCredentialsTypeOverride": "imagePullCredentialsType",
}
_CREDENTIAL = re.compile(r"Credential=([^/,\s]+)/")


def _token(offset: int) -> str:
    return base64.urlsafe_b64encode(json.dumps({"offset": offset}).encode()).decode()


def _offset(token: str | None) -> int:
    if not token:
        return 0
    try:
        return int(json.loads(base64.urlsafe_b64decode(token.encode()))["offset"])
    except (ValueError, KeyError, TypeError) as exc:
        raise invalid("Invalid pagination token") from exc


def _page(items: list[str], body: dict[str, Any], key: str, size: int) -> dict[str, Any]:
    start = _offset(body.get("nextToken"))
    out: dict[str, Any] = {key: items[start : start + size]}
    if start + size < len(items):
        out["nextToken"] = _token(start + size)
    return out


class BuildOperations(BuildLifecycle):
    """The seven operations, on the shared project and build store."""

    # --- projects --------------------------------------------------------------------------
    def create_project(self, body: dict[str, Any], headers: dict[str, str]) -> dict[str, Any]:
        check_shape(self.model, "CreateProject", body)
        check_create_project(body)
        role = body["serviceRole"]
        if not self.role_exists(role):
            raise invalid(f"CodeBuild is not authorized to perform: sts:AssumeRole on {role}")
        name = body["name"]
        with self.store_lock:
            if name in self.projects:
                raise ApiError(
                    "ResourceAlreadyExistsException",
                    f"Project already exists: {self.project_arn(name)}",
                )
            if len(self.projects) >= MAX_PROJECTS:
                raise ApiError(
                    "AccountLimitExceededException",
                    f"Cannot have more than {MAX_PROJECTS} projects in the account",
                )
            project = Project(request=body, arn=self.project_arn(name), created=time.time())
            self.projects[name] = project
        return {"project": project.describe()}

    def _project(self, name_or_arn: str) -> Project | None:
        name = name_or_arn
        if name.startswith("arn:"):
            name = name.rsplit("project/", 1)[-1]
        with self.store_lock:
            return self.projects.get(name)

    def batch_get_projects(self, body: dict[str, Any], headers: dict[str, str]) -> dict[str, Any]:
        check_shape(self.model, "BatchGetProjects", body)
        found, missing = [], []
        for name in body["names"]:
            project = self._project(name)
            if project is None:
                missing.append(name)
            else:
                found.append(project.describe())
        return {"projects": found, "projectsNotFound": missing}

    def list_projects(self, body: dict[str, Any], headers: dict[str, str]) -> dict[str, Any]:
        check_shape(self.model, "ListProjects", body)
        with self.store_lock:
            projects = list(self.projects.values())
        sort_by = body.get("sortBy", "NAME")
        key = (lambda p: p.name) if sort_by == "NAME" else (lambda p: p.created)
        projects.sort(key=key, reverse=body.get("sortOrder", "ASCENDING") == "DESCENDING")
        return _page([p.name for p in projects], body, "projects", self.page_size.cap)

    # --- builds ------------------------------------------------------------------------------
    def start_build(self, body: dict[str, Any], headers: dict[str, str]) -> dict[str, Any]:
        check_shape(self.model, "StartBuild", body)
        project = self._project(body["projectName"])
        if project is None:
            arn = self.project_arn(body["projectName"].rsplit("project/", 1)[-1])
            raise ApiError("ResourceNotFoundException", f"Project cannot be found: {arn}")
        check_start_build(project.request, body)
        role = body.get("serviceRoleOverride", project.request["serviceRole"])
        if not self.role_exists(role):
            raise invalid(f"CodeBuild is not authorized to perform: sts:AssumeRole on {role}")
        token = body.get("idempotencyToken")
        params = json.dumps({k: v for k, v in body.items() if k != "idempotencyToken"},
                            sort_keys=True)  # fmt: skip
        with self.store_lock:
            if token:
                earlier = self._idempotent(token, params)
                if earlier is not None:
                    return {"build": earlier.describe()}
            self._check_limits(project)
            build = self._new_build(project, body, role, headers)
            self.builds[build.id] = build
            if token:
                self.tokens[token] = (time.time(), params, build.id)
        build.enter("SUBMITTED")
        build.close_phase("SUCCEEDED", None)
        answer = {"build": build.describe()}  # as submitted, before its thread moves it on
        build.thread = threading.Thread(
            target=self.work, args=(build,), daemon=True, name=f"build-{build.uuid}"
        )
        build.thread.start()
        return answer

    def _idempotent(self, token: str, params: str) -> Build | None:
        """The build an earlier call with ``token`` started, or None (store lock held)."""
        now = time.time()
        for key, (when, _, _) in list(self.tokens.items()):
            if now - when > IDEMPOTENCY_SECONDS:
                del self.tokens[key]
        if token not in self.tokens:
            return None
        _, earlier_params, build_id = self.tokens[token]
        if earlier_params != params:
            raise invalid(
                f"The idempotency token {token} was used within the last "
                f"{IDEMPOTENCY_SECONDS // 60} minutes with different parameters"
            )
        return self.builds.get(build_id)

    def _check_limits(self, project: Project) -> None:
        running = self.running()
        limit = project.request.get("concurrentBuildLimit")
        mine = [b for b in running if b.project == project.name]
        if limit is not None and len(mine) >= limit:
            raise ApiError(
                "AccountLimitExceededException",
                f"Build concurrency limit of {limit} reached for project {project.name}",
            )
        if len(running) >= self.queue_limit:
            raise ApiError(
                "AccountLimitExceededException",
                f"Cannot have more than {self.queue_limit} builds in queue for the account",
            )

    def _new_build(
        self, project: Project, body: dict[str, Any], role: str, headers: dict[str, str]
    ) -> Build:
        """A build of ``project`` with the call's overrides applied (store lock held)."""
        request = project.request
        source = dict(request["source"])
        if "sourceTypeOverride" in body:
            source = {"type": body["sourceTypeOverride"]}
            if "buildspec" in request["source"]:
                source["buildspec"] = request["source"]["buildspec"]
        if "sourceLocationOverride" in body:
            source["location"] = body["sourceLocationOverride"]
        if "buildspecOverride" in body:
            source["buildspec"] = body["buildspecOverride"]
        environment = dict(request["environment"])
        for override, key in ENV_OVERRIDES.items():
            if override in body:
                environment[key] = body[override]
        variables = {v["name"]: v for v in environment.get("environmentVariables", [])}
        for var in body.get("environmentVariablesOverride", []):
            variables[var["name"]] = var
        environment["environmentVariables"] = [
            {"type": "PLAINTEXT", **v} for v in variables.values()
        ]
        environment.setdefault("privilegedMode", False)
        project.builds += 1
        build_id, arn = self.new_build_id(project.name)
        logs = body.get("logsConfigOverride", request.get("logsConfig", {}))
        match = _CREDENTIAL.search(headers.get("authorization", ""))
        return Build(
            id=build_id,
            arn=arn,
            number=project.builds,
            project=project.name,
            request=body,
            source=source,
            environment=environment,
            service_role=role,
            timeout_minutes=body.get("timeoutInMinutesOverride",
                                     request.get("timeoutInMinutes", 60)),
            queued_timeout_minutes=body.get("queuedTimeoutInMinutesOverride",
                                            request.get("queuedTimeoutInMinutes", 480)),
            logs=self.logs_location(project.name, build_id.split(":", 1)[1], logs),
            initiator=match.group(1) if match else "stepop",
            started=time.time(),
        )  # fmt: skip

    def batch_get_builds(self, body: dict[str, Any], headers: dict[str, str]) -> dict[str, Any]:
        check_shape(self.model, "BatchGetBuilds", body)
        found, missing = [], []
        for build_id in body["ids"]:
            with self.store_lock:
                build = self.builds.get(build_id.rsplit("build/", 1)[-1])
            if build is None:
                missing.append(build_id)
            else:
                found.append(build.describe())
        return {"builds": found, "buildsNotFound": missing}

    def stop_build(self, body: dict[str, Any], headers: dict[str, str]) -> dict[str, Any]:
        check_shape(self.model, "StopBuild", body)
        with self.store_lock:
            build = self.builds.get(body["id"].rsplit("build/", 1)[-1])
        if build is None:
            raise ApiError("ResourceNotFoundException", f"Build {body['id']} does not exist")
        build.stop_requested.set()
        return {"build": build.describe()}

    def list_builds_for_project(
        self, body: dict[str, Any], headers: dict[str, str]
    ) -> dict[str, Any]:
        check_shape(self.model, "ListBuildsForProject", body)
        project = self._project(body["projectName"])
        if project is None:
            arn = self.project_arn(body["projectName"])
            raise ApiError("ResourceNotFoundException", f"Project cannot be found: {arn}")
        with self.store_lock:
            builds = [b for b in self.builds.values() if b.project == project.name]
        newest_first = body.get("sortOrder", "DESCENDING") != "ASCENDING"
        builds.sort(key=lambda b: b.number, reverse=newest_first)
        return _page([b.id for b in builds], body, "ids", self.page_size.cap)
