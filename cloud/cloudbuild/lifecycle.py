"""The life of a Cloud Build fake build, on its own thread.

QUEUED (until one of the concurrent slots frees, and longer under a ``provisioning_delay``
fault) -> WORKING: FETCHSOURCE (``source.storageSource`` into the workspace), BUILD (the steps,
in order, each ``docker <args>`` on this host in ``/workspace/<dir>``), PUSH (``images``) ->
SUCCESS | FAILURE | INTERNAL_ERROR | TIMEOUT | CANCELLED. A step's non-zero exit fails the build
(``failureInfo`` USER_BUILD_STEP) unless the step allows it (``allowFailure``,
``allowExitCodes``); a listed image no step built fails it (PUSH_IMAGE_NOT_FOUND), as does a
failed push (PUSH_FAILED). The log gets Cloud Build's prefixes: ``starting build "<id>"``,
``FETCHSOURCE``, ``BUILD``, ``Starting Step #0``, ``Step #0: <line>``, ``Finished Step #0``,
``PUSH``, ``DONE`` / ``ERROR``.

Builders: only ``gcr.io/cloud-builders/docker`` runs (its ``entrypoint`` may be ``docker``,
``bash`` or ``sh``, or a ``script`` runs with bash); any other builder fails its step, saying
so. ``/workspace`` at the start of an argument, an ``env`` value or ``dir`` is the build's
workspace directory.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

from cloud.build_commands import HostCommand, host_path
from cloud.cloudbuild.source import SourceError, fetch
from cloud.cloudbuild.state import CloudBuildState, Job
from cloud.cloudbuild.validation import seconds
from cloud.fake_http import rfc3339

DOCKER_BUILDER = re.compile(r"^gcr\.io/cloud-builders/docker(:[\w.-]+|@sha256:[0-9a-f]{64})?$")
SHELLS = {"bash": "/bin/bash", "/bin/bash": "/bin/bash", "sh": "/bin/sh", "/bin/sh": "/bin/sh"}
_DIGEST = re.compile(r"digest: (sha256:[0-9a-f]{64})")


class BuildEnd(Exception):
    """The build ends before DONE: its status, ``statusDetail`` and failure type."""

    def __init__(self, status: str, detail: str, failure: str | None = None) -> None:
        super().__init__(detail)
        self.status, self.detail, self.failure = status, detail, failure


class BuildLifecycle(CloudBuildState):
    """Runs builds: the queue, source, steps, push, cancel and timeouts."""

    def work(self, job: Job) -> None:
        """The life of one build, on its own thread."""
        workdir = Path(tempfile.mkdtemp(prefix=f"{job.id}-", dir=self.jobs_dir))
        self.uploader.watch(job.log)
        slot = False
        try:
            slot = self._queue(job)
            if not slot:
                raise BuildEnd("CANCELLED", "Build was cancelled")
            self.set_status(job, "WORKING")
            deadline = time.time() + seconds(job.resource.get("timeout", "3600s"))
            job.log.add(f'starting build "{job.id}"')
            job.log.add("")
            workspace = workdir / "workspace"
            workspace.mkdir()
            self._fetch(job, workspace)
            self._steps(job, workdir, workspace, deadline)
            self._push(job, workdir, deadline)
            job.log.add("DONE")
            self.set_status(job, "SUCCESS")
        except BuildEnd as end:
            self._end(job, end)
        except Exception:
            traceback.print_exc(file=sys.stderr)
            self._end(job, BuildEnd("INTERNAL_ERROR", "Internal error while running the build"))
        finally:
            if slot:
                self.slots.release()
            self.uploader.finish(job.log)
            shutil.rmtree(workdir, ignore_errors=True)

    def _end(self, job: Job, end: BuildEnd) -> None:
        if end.status == "TIMEOUT":
            job.log.add("TIMEOUT")
            job.log.add("ERROR: context deadline exceeded")
        elif end.status != "CANCELLED":
            job.log.add("ERROR")
            job.log.add(f"ERROR: {end.detail}")
        extra: dict[str, Any] = {"statusDetail": end.detail}
        if end.failure:
            extra["failureInfo"] = {"type": end.failure, "detail": end.detail}
        self.set_status(job, end.status, **extra)

    def _queue(self, job: Job) -> bool:
        """QUEUED until a slot frees and a provisioning delay passed; False when cancelled."""
        while not self.slots.acquire(timeout=0.1):
            if job.cancel.is_set():
                return False
        until = time.time() + self.faults.seconds("provisioning_delay")
        while time.time() < until and not job.cancel.wait(min(0.1, until - time.time())):
            pass
        if job.cancel.is_set():
            self.slots.release()
            return False
        return True

    def _timing(self, job: Job, phase: str, start: float) -> None:
        with self.lock:
            timing = job.resource.setdefault("timing", {})
            timing[phase] = {"startTime": rfc3339(start), "endTime": rfc3339(time.time())}

    def _fetch(self, job: Job, workspace: Path) -> None:
        source = (job.resource.get("source") or {}).get("storageSource")
        if not source:
            return
        start = time.time()
        job.log.add("FETCHSOURCE")
        url = f"gs://{source['bucket']}/{source['object']}"
        job.log.add(f"Fetching storage object: {url}")
        if self.storage is None:
            raise BuildEnd("FAILURE", "no storage emulator to fetch from", "FETCH_SOURCE_FAILED")
        try:
            resolved = fetch(self.storage, source, workspace)
        except SourceError as exc:
            raise BuildEnd("FAILURE", str(exc), "FETCH_SOURCE_FAILED") from exc
        with self.lock:
            job.resource["sourceProvenance"] = {"resolvedStorageSource": resolved}
        self._timing(job, "FETCHSOURCE", start)

    # --- steps -------------------------------------------------------------------------------
    def _steps(self, job: Job, workdir: Path, workspace: Path, deadline: float) -> None:
        start = time.time()
        job.log.add("BUILD")
        steps = job.resource["steps"]
        for i, step in enumerate(steps):
            label = f"Step #{i}" + (f' - "{step["id"]}"' if step.get("id") else "")
            job.log.add(f"Starting {label}")
            with self.lock:
                step["status"] = "WORKING"
                step["timing"] = {"startTime": rfc3339(time.time())}
            try:
                code = self._step(job, i, step, label, workdir, workspace, deadline)
            except BuildEnd as end:
                self._close_step(step, end.status)
                if end.status == "FAILURE":
                    job.log.add(f"Finished {label}")
                raise
            allowed = step.get("allowFailure") or code in step.get("allowExitCodes", [])
            self._close_step(step, "SUCCESS" if code == 0 else "FAILURE", code)
            job.log.add(f"Finished {label}")
            if code != 0 and not allowed:
                name = step["name"]
                raise BuildEnd(
                    "FAILURE",
                    f'Build step failure: build step {i} "{name}" failed: step exited with '
                    f"non-zero status: {code}",
                    "USER_BUILD_STEP",
                )
        self._timing(job, "BUILD", start)

    def _close_step(self, step: dict[str, Any], status: str, code: int | None = None) -> None:
        with self.lock:
            step["status"] = status
            step.setdefault("timing", {})["endTime"] = rfc3339(time.time())
            if code is not None:
                step["exitCode"] = code

    def _step(
        self,
        job: Job,
        i: int,
        step: dict[str, Any],
        label: str,
        workdir: Path,
        workspace: Path,
        deadline: float,
    ) -> int:
        """Run one step; its exit status (a failure the builder itself causes raises)."""
        if i == 0:
            rule = self.faults.take_job_fault("job_failure", self._fault_subject(job))
            if rule is not None:
                reason = str(rule.get("reason") or "injected build step failure")
                job.log.add(f"{label}: {reason}")
                raise BuildEnd("FAILURE", reason, "USER_BUILD_STEP")
        argv = self._argv(i, step, workdir, workspace)
        where = step.get("dir", "")
        cwd = (workspace / where.removeprefix("/workspace").lstrip("/")).resolve()
        outside = where.startswith("/") and not where.startswith("/workspace")
        if outside or not cwd.is_relative_to(workspace.resolve()):
            raise BuildEnd("FAILURE", f"build step {i}: the emulator runs steps under /workspace "
                           f"only, not in {where}", "USER_BUILD_STEP")  # fmt: skip
        cwd.mkdir(parents=True, exist_ok=True)
        env = self._env(job, step, workdir, workspace)
        step_deadline = deadline
        if "timeout" in step:
            step_deadline = min(deadline, time.time() + seconds(step["timeout"]))
        return self._run(job, argv, str(cwd), env, step_deadline, deadline, prefix=f"{label}: ")

    def _argv(self, i: int, step: dict[str, Any], workdir: Path, workspace: Path) -> list[str]:
        name = step["name"]
        if not DOCKER_BUILDER.match(name):
            raise BuildEnd(
                "FAILURE",
                f'build step {i} "{name}" failed: the Cloud Build emulator runs only the '
                "gcr.io/cloud-builders/docker builder",
                "USER_BUILD_STEP",
            )
        if step.get("script"):
            script = workdir / f"step-{i}.sh"
            script.write_text(step["script"])
            return ["/bin/bash", str(script)]
        args = [_in_workspace(a, workspace) for a in step.get("args", [])]
        entrypoint = step.get("entrypoint", "docker")
        if entrypoint == "docker":
            return [shutil.which("docker") or "docker", *args]
        if entrypoint in SHELLS:
            return [SHELLS[entrypoint], *args]
        raise BuildEnd(
            "FAILURE",
            f'build step {i} "{name}" failed: the emulator runs the entrypoints docker, bash '
            f"and sh, not {entrypoint}",
            "USER_BUILD_STEP",
        )

    def _env(
        self, job: Job, step: dict[str, Any], workdir: Path, workspace: Path
    ) -> dict[str, str]:
        home, outputs = workdir / "home", workdir / "outputs"
        home.mkdir(exist_ok=True)
        outputs.mkdir(exist_ok=True)
        env = {"PATH": host_path(), "HOME": str(home), "BUILDER_OUTPUT": str(outputs),
               "LANG": "C.UTF-8"}  # fmt: skip
        if self.env.get("DOCKER_HOST"):
            env["DOCKER_HOST"] = self.env["DOCKER_HOST"]
        for item in [*(job.resource.get("options") or {}).get("env", []), *step.get("env", [])]:
            key, _, value = item.partition("=")
            env[key] = _in_workspace(value, workspace)
        return env

    def _run(
        self,
        job: Job,
        argv: list[str],
        cwd: str,
        env: dict[str, str],
        step_deadline: float,
        deadline: float,
        prefix: str = "",
    ) -> int:
        """Run a command to its end; a cancel or a timeout stops it and ends the build."""
        proc = HostCommand(
            argv, cwd, env, lambda line, ts: job.log.add(prefix + line, ts), self.pid_file(job)
        )
        job.command = proc
        try:
            while True:
                code = proc.wait(0.1)
                if code is not None:
                    return code
                if job.cancel.is_set():
                    proc.stop(self.stop_grace)
                    raise BuildEnd("CANCELLED", "Build was cancelled")
                if time.time() >= step_deadline:
                    proc.stop(self.stop_grace)
                    which = "build" if step_deadline >= deadline else "build step"
                    raise BuildEnd("TIMEOUT", f"{which} timed out")
        finally:
            job.command = None

    # --- images ------------------------------------------------------------------------------
    def _push(self, job: Job, workdir: Path, deadline: float) -> None:
        images = job.resource.get("images", [])
        if not images:
            return
        start = time.time()
        job.log.add("PUSH")
        env = {"PATH": host_path(), "HOME": str(workdir / "home")}
        if self.env.get("DOCKER_HOST"):
            env["DOCKER_HOST"] = self.env["DOCKER_HOST"]
        docker = shutil.which("docker") or "docker"
        missing = [image for image in images if not _image_exists(docker, image, env)]
        if missing:
            shown = ", ".join(f'"{m}"' for m in missing)
            raise BuildEnd(
                "FAILURE",
                f"failed to find one or more images after execution of build steps: [{shown}]",
                "PUSH_IMAGE_NOT_FOUND",
            )
        results = []
        for image in images:
            pushed = time.time()
            job.log.add(f"Pushing {image}")
            mark = len(job.log.lines)
            if self._run(job, [docker, "push", image], str(workdir), env, deadline, deadline):
                raise BuildEnd("FAILURE", f"failed to push image {image}", "PUSH_FAILED")
            with job.log.lock:
                found = [_DIGEST.search(line) for _, line in job.log.lines[mark:]]
            digest = next((m.group(1) for m in found if m), "")
            results.append({
                "name": image,
                "digest": digest,
                "pushTiming": {"startTime": rfc3339(pushed), "endTime": rfc3339(time.time())},
            })  # fmt: skip
        with self.lock:
            job.resource.setdefault("results", {})["images"] = results
        self._timing(job, "PUSH", start)

    @staticmethod
    def _fault_subject(job: Job) -> str:
        """What a fault's ``match`` is looked for in: id, source, images, tags, step args."""
        source = (job.resource.get("source") or {}).get("storageSource") or {}
        parts = [job.id, f"gs://{source.get('bucket', '')}/{source.get('object', '')}"]
        parts += job.resource.get("images", []) + job.resource.get("tags", [])
        for step in job.resource.get("steps", []):
            parts += step.get("args", [])
        return "\n".join(parts)


def _image_exists(docker: str, image: str, env: dict[str, str]) -> bool:
    """Whether the engine holds ``image`` (what a step built or pulled)."""
    found = subprocess.run(
        [docker, "image", "inspect", image],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        timeout=60,
        check=False,
    )
    return found.returncode == 0


def _in_workspace(value: str, workspace: Path) -> str:
    """``/workspace...`` -> the build's workspace directory."""
    if value == "/workspace" or value.startswith("/workspace/"):
        return str(workspace) + value[len("/workspace") :]
    return value
