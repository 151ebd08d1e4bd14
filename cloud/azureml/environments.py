"""The Azure ML fake's environment versions: the routes, the lookup a job does, image builds.

An environment version is immutable (a second PUT with another image or build is refused). A
version with a build context (``build.contextUri``) is built into an image when a job first uses
it, whatever the runner's mode, as Azure ML builds it in the workspace's registry before the
job starts; the job then runs in that image, in a container.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
import time
from typing import Any

from cloud import runner as runner_mod
from cloud.azureml.arm import PROVIDER, SEG, WS, ArmError, bad, read_json, system_data, ws_id
from cloud.azureml.state import DATASTORES, AmlJob, AzureMLState
from cloud.azureml.storage import download, parse_uri
from cloud.azureml.validation import check_environment_name, validate_environment
from cloud.fake_http import Request, Response


class EnvironmentRoutes(AzureMLState):
    """``PUT|GET {WS}/environments/{n}/versions/{v}``, ``GET {WS}/environments/{n}/versions``."""

    def _add_environment_routes(self) -> None:
        r = self.router
        env_v = rf"{WS}/environments/(?P<env>{SEG})/versions"
        r.add("PUT", rf"{env_v}/(?P<ver>{SEG})", "EnvironmentVersions_CreateOrUpdate", self.put_env)
        r.add("GET", rf"{env_v}/(?P<ver>{SEG})", "EnvironmentVersions_Get", self.get_env)
        r.add("GET", env_v, "EnvironmentVersions_List", self.list_envs)

    def put_env(self, req: Request) -> Response:
        m = req.match
        assert m is not None
        check_environment_name(m["env"])
        body = read_json(req)
        props = body.get("properties")
        validate_environment(props, DATASTORES)
        assert isinstance(props, dict)
        build = props.get("build")
        image = props.get("image")
        env_id = f"{ws_id(m)}/environments/{m['env']}/versions/{m['ver']}"
        now = time.time()
        with self._lock:
            existing = self.environments.get(env_id.lower())
            if existing is not None and (
                existing["properties"].get("image") != image
                or existing["properties"].get("build") != build
            ):
                raise bad(
                    f"Environment {m['env']}:{m['ver']} already exists with a different image "
                    "or build; environment versions are immutable.",
                    "Conflict",
                )
            resource = existing or {
                "id": env_id,
                "name": m["ver"],
                "type": f"{PROVIDER}/workspaces/environments/versions",
                "properties": {
                    **props,
                    "environmentType": "UserCreated",
                    "osType": props.get("osType") or "Linux",
                    "autoRebuild": props.get("autoRebuild") or "OnBaseImageUpdate",
                    "provisioningState": "Succeeded",
                    "stage": props.get("stage") or "Development",
                },
                "systemData": system_data(now),
            }
            self.environments[env_id.lower()] = resource
        return Response(201 if existing is None else 200, resource)

    def get_env(self, req: Request) -> Response:
        m = req.match
        assert m is not None
        env_id = f"{ws_id(m)}/environments/{m['env']}/versions/{m['ver']}"
        with self._lock:
            resource = self.environments.get(env_id.lower())
        if resource is None:
            raise ArmError(
                404, "UserError", f"Environment {m['env']}:{m['ver']} not found.", "NotFound"
            )
        return Response(200, resource)

    def list_envs(self, req: Request) -> Response:
        m = req.match
        assert m is not None
        prefix = f"{ws_id(m)}/environments/{m['env']}/versions/".lower()
        with self._lock:
            found = [r for k, r in self.environments.items() if k.startswith(prefix)]
        return Response(200, {"value": found})

    def _resolve_env(self, env_ref: str) -> dict[str, Any]:
        """A job's ``environmentId`` (``azureml:`` + the version's ARM id) -> the version."""
        ref = env_ref.removeprefix("azureml:")
        with self._lock:
            resource = self.environments.get(ref.lower())
        if resource is None:
            raise bad(
                f"Environment '{env_ref}' was not found in the workspace; create the environment "
                "version first.",
                "NotFound",
            )
        return resource

    def _build_image(self, job: AmlJob, environment: dict[str, Any], service: Any) -> str | None:
        """An environment with a build context: the image Azure ML builds in its own registry.

        Every job of such an environment gets its image built, whatever the runner's mode, as
        Azure ML builds it before the job starts; the job then runs in it (a built image is not
        the plain base image, so process mode runs it in a container: :mod:`cloud.runner`).
        The context is built with the local engine (``network_mode`` host, as the test engine
        has no bridge network) and pushed to the stack's registry; the build log is the job's
        ``system_logs/image_build.txt``. One build per environment version: jobs that start
        together wait for it, later ones reuse its image. None: the job failed with the build's
        reason (its error and the last lines of its log).
        """
        log_file = "system_logs/image_build.txt"
        env_id = environment["id"].lower()
        with self._lock:
            lock = self.build_locks.setdefault(env_id, threading.Lock())
        with lock:
            with self._lock:
                built = self.built_images.get(env_id)
            if built is not None:
                self._log(job, log_file, f"Image {built} was built for this environment; reused")
                return built
            tag = self._build_tag(env_id)
            try:
                self._build_context(job, environment["properties"]["build"], tag, service)
            except Exception as exc:
                self._log(job, log_file, f"image build failed: {exc}")
                self._fail(
                    job, "ImageBuildFailure", f"Building the environment's image failed: {exc}"
                )
                return None
            with self._lock:
                self.built_images[env_id] = tag
        return tag

    def _build_tag(self, env_id: str) -> str:
        """``<registry>/azureml/<environment>:<version>``, in the stack's registry."""
        registry = (self.runner.base_image or runner_mod.BaseImage.from_env()).registry
        name, version = env_id.split("/environments/")[1].split("/versions/")
        return f"{registry}/azureml/{name}:{version}"

    def _build_context(self, job: AmlJob, build: dict[str, Any], tag: str, service: Any) -> None:
        """Download the build context, build it as ``tag`` and push it; raises on a failure."""
        log_file = "system_logs/image_build.txt"
        context = tempfile.mkdtemp(prefix="stepop-azureml-build-", dir=self.tmp_base)
        lines: list[str] = []
        try:
            if service is None:
                raise RuntimeError("no storage is configured for this fake")
            container, path = parse_uri(build["contextUri"], DATASTORES)
            download(service, container, path, context, False)
            self._log(job, log_file, f"Building image {tag} from {build['contextUri']}")
            client = self.runner.docker()
            for chunk in client.api.build(
                path=context, dockerfile=build.get("dockerfilePath") or "Dockerfile", tag=tag,
                network_mode="host", rm=True, forcerm=True, decode=True,
            ):  # fmt: skip
                for line in str(chunk.get("stream", "")).splitlines():
                    if line.strip():
                        lines.append(line)
                        self._log(job, log_file, line)
                if "error" in chunk:
                    tail = "\n".join(lines[-5:])
                    raise RuntimeError(f"{chunk['error'].strip()}\n{tail}".strip())
            repo, _, tag_name = tag.rpartition(":")
            for chunk in client.images.push(repo, tag=tag_name, stream=True, decode=True):
                if "error" in chunk:
                    raise RuntimeError(f"pushing {tag}: {chunk['error'].strip()}")
            self._log(job, log_file, f"Image {tag} built and pushed")
        finally:
            shutil.rmtree(context, ignore_errors=True)
