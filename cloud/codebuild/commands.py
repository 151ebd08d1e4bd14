"""A build's commands, as CodeBuild's agent runs them, on this host.

Each command runs on its own (``bash <script>`` through :class:`~cloud.build_commands.
HostCommand`), in the same shell state as the one before, as in buildspec version 0.2: the
exported variables and the working directory a command leaves are saved when it exits and
restored for the next. A command's non-zero exit fails its phase (``COMMAND_EXECUTION_ERROR``,
``Error while executing command: <cmd>. Reason: exit status N``) and skips the phase's other
commands; ``finally`` commands run anyway.

The environment: the buildspec's ``env.variables``, then the project's variables, then
``environmentVariablesOverride`` (each wins over the one before, as in CodeBuild), and
``CODEBUILD_BUILD_ID``, ``CODEBUILD_BUILD_ARN``, ``CODEBUILD_BUILD_NUMBER``,
``CODEBUILD_INITIATOR``, ``CODEBUILD_SRC_DIR``, ``CODEBUILD_RESOLVED_SOURCE_VERSION``,
``CODEBUILD_SOURCE_VERSION``, ``CODEBUILD_BUILD_SUCCEEDING``, ``CODEBUILD_START_TIME``,
``CODEBUILD_LOG_PATH``, ``CODEBUILD_BUILD_IMAGE``, ``AWS_REGION``, ``AWS_DEFAULT_REGION``,
``HOME`` (a directory of the build's) and ``PATH`` (``docker`` first). Never the stack's AWS
credentials. Without privileged mode, ``docker`` answers as it does in CodeBuild:
``Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon
running?``.
"""

from __future__ import annotations

import shlex
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING

from cloud.build_commands import HostCommand, host_path
from cloud.codebuild.buildspec import Buildspec, Phase

if TYPE_CHECKING:
    from cloud.codebuild.lifecycle import BuildLifecycle
    from cloud.codebuild.state import Build

NO_DAEMON = (
    "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. "
    "Is the docker daemon running?"
)
TIMED_OUT = ("TIMED_OUT", "BUILD_TIMED_OUT", "Build has timed out. ")
STOPPED = ("STOPPED", "BUILD_STOPPED", "Build was stopped. ")


class End(Exception):
    """The build ends early: stopped, or out of time (how the running phase closes)."""

    def __init__(self, status: str, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


class CommandShell:
    """The shell state of one build and the commands run in it."""

    def __init__(self, fake: BuildLifecycle, build: Build, workdir: Path, deadline: float):
        self.fake = fake
        self.build = build
        self.deadline = deadline
        self.src_dir = workdir / "src"
        self.src_dir.mkdir()
        self.tmp = workdir / "tmp"
        self.tmp.mkdir()
        self.home = workdir / "home"
        self.home.mkdir()
        self.env_file = self.tmp / "env.sh"
        self.cwd_file = self.tmp / "cwd"
        self.shell = "/bin/bash"

    # --- waiting ---------------------------------------------------------------------------
    def check(self) -> None:
        """End the build when a stop was asked for or its time is up."""
        if self.build.stop_requested.is_set():
            raise End(*STOPPED)
        if time.time() >= self.deadline:
            raise End(*TIMED_OUT)

    def wait(self, seconds: float) -> None:
        """Wait ``seconds`` (a provisioning delay), ending early on a stop or the timeout."""
        until = time.time() + seconds
        while time.time() < until:
            self.check()
            self.build.stop_requested.wait(min(0.1, max(0.0, until - time.time())))
        self.check()

    # --- environment -----------------------------------------------------------------------
    def prepare(self, spec: Buildspec) -> None:
        """The first shell state: variables, directory, the docker a build may use."""
        b = self.build
        env: dict[str, str] = dict(spec.variables)
        for var in b.environment.get("environmentVariables", []):
            env[var["name"]] = var["value"]
        region = self.fake.region
        env.update({
            "CODEBUILD_BUILD_ID": b.id,
            "CODEBUILD_BUILD_ARN": b.arn,
            "CODEBUILD_BUILD_NUMBER": str(b.number),
            "CODEBUILD_INITIATOR": b.initiator,
            "CODEBUILD_SRC_DIR": str(self.src_dir),
            "CODEBUILD_RESOLVED_SOURCE_VERSION": b.resolved_version or "",
            "CODEBUILD_SOURCE_VERSION": b.request.get("sourceVersion", ""),
            "CODEBUILD_SOURCE_REPO_URL": b.source.get("location", ""),
            "CODEBUILD_BUILD_SUCCEEDING": "1",
            "CODEBUILD_START_TIME": str(int(b.started * 1000)),
            "CODEBUILD_LOG_PATH": b.uuid,
            "CODEBUILD_BUILD_IMAGE": b.environment.get("image", ""),
            "AWS_REGION": region,
            "AWS_DEFAULT_REGION": region,
            "HOME": str(self.home),
            "LANG": "C.UTF-8",
            "PATH": host_path(),
        })  # fmt: skip
        if b.environment.get("privilegedMode"):
            if self.fake.env.get("DOCKER_HOST"):
                env["DOCKER_HOST"] = self.fake.env["DOCKER_HOST"]
        else:
            env["PATH"] = f"{self._no_docker()}:{env['PATH']}"
            env["DOCKER_HOST"] = f"unix://{self.tmp}/no-docker.sock"
        self.env_file.write_text("".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items()))
        self.cwd_file.write_text(str(self.src_dir))
        self.shell = "/bin/bash" if spec.shell == "bash" else "/bin/sh"

    def _no_docker(self) -> Path:
        """A ``docker`` that finds no daemon, as in a build without privileged mode."""
        shim = self.tmp / "no-docker"
        shim.mkdir(exist_ok=True)
        real = shutil.which("docker") or "false"
        script = shim / "docker"
        script.write_text(
            "#!/bin/sh\n"
            f'case "$1" in --version|-v) exec {shlex.quote(real)} "$@";; esac\n'
            f"echo {shlex.quote(NO_DAEMON)} >&2\nexit 1\n"
        )
        script.chmod(0o755)
        return shim

    def export(self, name: str, value: str) -> None:
        """Set a variable for the commands to come (``CODEBUILD_BUILD_SUCCEEDING=0``)."""
        with self.env_file.open("a") as f:
            f.write(f"export {name}={shlex.quote(value)}\n")

    # --- commands ----------------------------------------------------------------------------
    def run_phase(self, phase: Phase) -> tuple[str, str] | None:
        """Run a phase's commands then its ``finally``; (code, message) of the first failure."""
        error: tuple[str, str] | None = None
        for command in phase.commands:
            error = self._run_checked(command)
            if error is not None:
                break
        for command in phase.finally_:
            failure = self._run_checked(command)
            error = error or failure
        return error

    def _run_checked(self, command: str) -> tuple[str, str] | None:
        self.fake.say(self.build, f"Running command {command}")
        code = self.run(command)
        if code == 0:
            return None
        self.fake.say(self.build, f"Command did not exit successfully {command} exit status {code}")
        return (
            "COMMAND_EXECUTION_ERROR",
            f"Error while executing command: {command}. Reason: exit status {code}",
        )

    def run(self, command: str) -> int:
        """Run one command in the build's shell state; its exit status."""
        self.check()
        script = self.tmp / "script.sh"
        saved = f"{shlex.quote(str(self.env_file))}"
        where = f"{shlex.quote(str(self.cwd_file))}"
        script.write_text(
            f". {saved}\n"
            f'cd "$(cat {where})"\n'
            f"trap '__cb_rc=$?; export -p > {saved}; pwd > {where}; exit $__cb_rc' EXIT\n"
            f"{command}\n"
        )
        proc = HostCommand(
            [self.shell, str(script)],
            cwd=str(self.src_dir),
            env={"PATH": host_path()},
            on_line=lambda line, ts: self.fake.output(self.build, line, ts),
            pid_file=self.fake.pid_file(self.build),
        )
        self.build.command = proc
        try:
            while True:
                code = proc.wait(0.1)
                if code is not None:
                    return code
                try:
                    self.check()
                except End:
                    proc.stop(self.fake.stop_grace)
                    raise
        finally:
            self.build.command = None
