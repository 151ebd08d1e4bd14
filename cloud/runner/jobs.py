"""The :class:`Runner` that starts a job's nodes in one mode, and the :class:`JobRun` it returns.

A job has failed as soon as one node exits non-zero (the others are then stopped, as the services
do); it has succeeded when every node exits 0. The runner remembers its runs so a fake can stop
them all when it shuts down.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Iterable
from typing import Any

from cloud.runner.images import BaseImage
from cloud.runner.launch import (
    MODE_CONTAINER,
    MODE_PROCESS,
    MODE_TIMER,
    MODES,
    JobLaunch,
    LaunchError,
    LineCallback,
)
from cloud.runner.nodes import ContainerNode, Node, ProcessNode, TimerNode


class JobRun:
    """The nodes of one launched job."""

    def __init__(
        self, launch: JobLaunch, nodes: list[Node], workdir: str | None, runner: Runner
    ) -> None:
        self.launch = launch
        self.nodes = nodes
        self.workdir = workdir
        self._runner = runner

    def result(self) -> int | None:
        """None while running; 0 when every node exited 0; else the first non-zero exit code.

        A node failing stops the others, as the services do.
        """
        codes = [n.exit_code() for n in self.nodes]
        failed = [c for c in codes if c not in (None, 0)]
        if failed:
            if any(c is None for c in codes):
                self.stop()
            return failed[0]
        if any(c is None for c in codes):
            return None
        return 0

    def wait(self, timeout: float, interval: float = 0.1) -> int | None:
        """Poll until the job ends or ``timeout`` seconds pass; returns result()."""
        deadline = time.monotonic() + timeout
        while True:
            code = self.result()
            if code is not None or time.monotonic() >= deadline:
                return code
            time.sleep(interval)

    def stop(self, grace: float = 10.0) -> None:
        """SIGTERM every node, SIGKILL what is left after ``grace`` seconds."""
        threads = [threading.Thread(target=n.stop, args=(grace,)) for n in self.nodes]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    def cleanup(self) -> None:
        """Remove containers and the per-job temporary directory (after outputs were read)."""
        self._runner.forget(self)
        for node in self.nodes:
            try:
                node.cleanup()
            except Exception as exc:
                print(f"[runner] cleanup of {node.spec.host} failed: {exc!r}", file=sys.stderr)
        if self.workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)


class Runner:
    """Starts jobs in one mode; remembers them so a fake can stop all on shutdown."""

    def __init__(
        self,
        mode: str = MODE_PROCESS,
        tmp_base: str | None = None,
        base_image: BaseImage | None = None,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"runner mode {mode!r}: use one of {MODES}")
        self.mode = mode
        self.tmp_base = tmp_base
        self.base_image = base_image  # None: read from the environment at each job
        self._runs: list[JobRun] = []
        self._lock = threading.Lock()
        self._client: Any = None

    def docker(self) -> Any:
        """The docker client (container mode), made on first use."""
        if self._client is None:
            import docker

            self._client = docker.from_env()
        return self._client

    def mode_for(self, image: str, requested: str | None = None) -> str:
        """The mode a job of ``image`` runs in: ``requested`` (the job's own) when given, else
        this runner's mode, except that process mode runs the plain base image only (any other
        image runs in a container: see :mod:`cloud.runner.images`)."""
        base = self.base_image or BaseImage.from_env()
        return base.choose(image, self.mode, requested, self._engine_or_none)

    def _engine_or_none(self) -> Any:
        try:
            return self.docker()
        except Exception:  # no docker SDK or no socket: the registry alone is asked
            return None

    def job_dir(self, launch: JobLaunch) -> str:
        """A fresh per-job temporary directory (process roots live under it)."""
        safe = re.sub(r"[^A-Za-z0-9_.-]", "-", launch.name)[:60]
        return tempfile.mkdtemp(prefix=f"stepop-{launch.fake}-{safe}-", dir=self.tmp_base)

    def launch(
        self,
        launch: JobLaunch,
        on_line: LineCallback | None = None,
        mode: str | None = None,
        workdir: str | None = None,
    ) -> JobRun:
        """Start every node of ``launch``; raises LaunchError (nothing left running) on failure.

        ``mode`` None is :meth:`mode_for` the launch's image. ``workdir`` is the per-job
        directory for process roots (made with job_dir() when None); the fake usually creates
        it first to prepare the mounts' host directories inside it.
        """
        mode = mode or self.mode_for(launch.image)
        nodes: list[Node] = []
        if mode == MODE_CONTAINER:
            client = self.docker()
            self.pull(launch.image)
            nodes = [ContainerNode(launch, s, client, on_line) for s in launch.nodes]
        elif mode == MODE_TIMER:
            seconds = float(os.environ.get("STEPOP_FAKE_TIMER_SECONDS", "60"))
            end_file = os.environ.get("STEPOP_FAKE_TIMER_END_FILE") or None
            nodes = [TimerNode(s, on_line, seconds, end_file) for s in launch.nodes]
        elif mode == MODE_PROCESS:
            workdir = workdir or self.job_dir(launch)
            nodes = [
                ProcessNode(launch, s, os.path.join(workdir, "nodes", s.host), on_line)
                for s in launch.nodes
            ]
        else:
            raise ValueError(f"runner mode {mode!r}: use one of {MODES}")
        run = JobRun(launch, nodes, workdir if mode == MODE_PROCESS else None, self)
        try:
            for node in nodes:
                node.start()
        except Exception:
            run.stop(grace=1)
            run.cleanup()
            raise
        with self._lock:
            self._runs.append(run)
        return run

    def pull(self, image: str) -> None:
        """Pull ``image`` unless the engine has it; raises LaunchError when it cannot."""
        import docker.errors

        client = self.docker()
        try:
            client.images.get(image)
            return
        except docker.errors.ImageNotFound:
            pass
        except docker.errors.DockerException as exc:
            raise LaunchError(f"container engine: {exc}") from exc
        repo, tag = _split_tag(image)
        try:
            client.images.pull(repo, tag=tag)
        except docker.errors.DockerException as exc:
            raise LaunchError(f"cannot pull {image}: {exc}") from exc

    def stop_all(self, grace: float = 5.0) -> None:
        """Stop and clean up every job still running (the fake is shutting down)."""
        with self._lock:
            runs, self._runs = self._runs, []
        for run in runs:
            run.stop(grace)
            run.cleanup()

    def forget(self, run: JobRun) -> None:
        """``run`` was cleaned up: nothing left to stop at shutdown."""
        with self._lock:
            if run in self._runs:
                self._runs.remove(run)

    def release(self, runs: Iterable[JobRun], workdir: str | None, *, keep: bool) -> None:
        """A job's runs are over: forget them and, unless ``keep``, delete their directories
        and the job's ``workdir``."""
        for run in runs:
            self.forget(run)
            if not keep:
                run.cleanup()
        if workdir and not keep:
            shutil.rmtree(workdir, ignore_errors=True)


def stop_job_threads(jobs: Iterable[Any]) -> None:
    """Cancel fake jobs (each has a ``cancel`` event and the ``thread`` that runs its life) and
    wait for their threads: what a fake's reset and shutdown do."""
    jobs = list(jobs)
    for job in jobs:
        job.cancel.set()
    for job in jobs:
        if job.thread is not None:
            job.thread.join(timeout=30)


def _split_tag(image: str) -> tuple[str, str | None]:
    """'host:5000/repo:tag' -> ('host:5000/repo', 'tag'); a digest stays in the repo part."""
    if "@" in image:
        return image, None
    name, _, last = image.rpartition("/")
    if ":" in last:
        last, tag = last.split(":", 1)
        return f"{name}/{last}" if name else last, tag
    return image, "latest"
