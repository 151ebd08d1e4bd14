"""The life of a CodeBuild fake build, on its own thread.

SUBMITTED -> QUEUED (until one of the concurrent slots frees) -> PROVISIONING (longer under a
``provisioning_delay`` fault) -> DOWNLOAD_SOURCE (S3 source, buildspec) -> INSTALL -> PRE_BUILD
-> BUILD -> POST_BUILD -> UPLOAD_ARTIFACTS -> FINALIZING -> COMPLETED, with CodeBuild's
transitions on failure: a failed DOWNLOAD_SOURCE, INSTALL or PRE_BUILD goes straight to
FINALIZING, a failed BUILD still runs POST_BUILD (``CODEBUILD_BUILD_SUCCEEDING=0``) and
UPLOAD_ARTIFACTS; a phase's ``on-failure: ABORT`` goes to FINALIZING, ``CONTINUE`` on to the next
phase. A stop request or the build's timeout ends the phase running (STOPPED / TIMED_OUT), then
FINALIZING. Commands run through :mod:`cloud.codebuild.commands`.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path

from cloud.codebuild.buildspec import Buildspec, BuildspecError, Phase, load
from cloud.codebuild.commands import CommandShell, End
from cloud.codebuild.logs import agent_line
from cloud.codebuild.source import SourceError, fetch
from cloud.codebuild.state import Build, CodeBuildState

PHASE_KEYS = (("INSTALL", "install"), ("PRE_BUILD", "pre_build"), ("BUILD", "build"),
              ("POST_BUILD", "post_build"))  # fmt: skip
INTERNAL_ERROR = "CodeBuild encountered an internal error. Please retry the build."


class BuildLifecycle(CodeBuildState):
    """Runs builds: the queue, the phases and their transitions, stop and timeout."""

    # --- logging ---------------------------------------------------------------------------
    def say(self, build: Build, message: str) -> None:
        """A line of the agent's own."""
        ts = time.time()
        self.output(build, agent_line(message, ts), ts)

    def output(self, build: Build, line: str, ts: float) -> None:
        """One output line of the build, into its CloudWatch stream."""
        target = build.log_target
        if target is not None:
            self.log_sink.put(target[0], target[1], line, ts)

    def _close(self, build: Build, status: str, code: str = "", message: str = "") -> None:
        """Close the current phase and log it as the agent does."""
        self.say(build, f"Phase complete: {build.current_phase} State: {status}")
        self.say(build, f"Phase context status code: {code} Message: {message}")
        build.close_phase(status, code, message)

    # --- the build's life ----------------------------------------------------------------------
    def work(self, build: Build) -> None:
        """The life of one build, on its own thread."""
        workdir = Path(tempfile.mkdtemp(prefix=f"{build.uuid}-", dir=self.jobs_dir))
        shell: CommandShell | None = None
        status = "FAULT"
        try:
            if not self._queue(build):
                status = "STOPPED"
                return
            deadline = time.time() + build.timeout_minutes * self.minute
            shell = CommandShell(self, build, workdir, deadline)
            status = self._phases(build, shell)
        except End as end:
            self._close(build, end.status, end.code, end.message)
            status = end.status
        except Exception:
            traceback.print_exc(file=sys.stderr)
            if build.phases and "phaseStatus" not in build.phases[-1]:
                self._close(build, "FAULT", "INTERNAL_ERROR", INTERNAL_ERROR)
        finally:
            if build.current_phase != "QUEUED" or status != "STOPPED":
                self._finalize(build)
            build.finish(status)
            self.log_sink.flush()
            shutil.rmtree(workdir, ignore_errors=True)

    def _queue(self, build: Build) -> bool:
        """QUEUED until a slot frees; False when stopped while queued."""
        build.enter("QUEUED")
        while not self.slots.acquire(timeout=0.1):
            if build.stop_requested.is_set():
                build.close_phase("STOPPED", None)
                return False
        build.slot = True
        build.close_phase("SUCCEEDED", None)
        return True

    def _finalize(self, build: Build) -> None:
        build.enter("FINALIZING")
        build.close_phase("SUCCEEDED")
        if getattr(build, "slot", False):
            build.slot = False
            self.slots.release()

    def _phases(self, build: Build, shell: CommandShell) -> str:
        """PROVISIONING to UPLOAD_ARTIFACTS; the build's status (FINALIZING is the caller's)."""
        build.enter("PROVISIONING")
        shell.wait(self.faults.seconds("provisioning_delay"))
        self.say(build, "Running on CodeBuild On-demand")
        self.say(build, "Waiting for agent ping")
        self.say(build, "Waiting for DOWNLOAD_SOURCE")
        self._close(build, "SUCCEEDED")

        build.enter("DOWNLOAD_SOURCE")
        self.say(build, "Phase is DOWNLOAD_SOURCE")
        self.say(build, f"CODEBUILD_SRC_DIR={shell.src_dir}")
        try:
            spec = self._download(build, shell)
        except SourceError as exc:
            self._close(build, "FAILED", "CLIENT_ERROR", str(exc))
            return "FAILED"
        except BuildspecError as exc:
            self._close(build, "FAILED", "YAML_FILE_ERROR", str(exc))
            return "FAILED"
        self._close(build, "SUCCEEDED")

        failed = False
        for phase_type, key in PHASE_KEYS:
            if failed and phase_type in ("INSTALL", "PRE_BUILD", "BUILD"):
                continue  # a failed INSTALL/PRE_BUILD already went to FINALIZING
            build.enter(phase_type)
            self.say(build, f"Entering phase {phase_type}")
            if phase_type == "POST_BUILD" and failed:
                shell.export("CODEBUILD_BUILD_SUCCEEDING", "0")
            phase = spec.phases.get(key, Phase())
            error = self._fault(build) if phase_type == "BUILD" else None
            if error is None:
                error = shell.run_phase(phase)
            if error is None:
                self._close(build, "SUCCEEDED")
                continue
            self._close(build, "FAILED", *error)
            failed = True
            if phase.on_failure == "ABORT" or (
                phase.on_failure is None and phase_type in ("INSTALL", "PRE_BUILD")
            ):
                return "FAILED"
        build.enter("UPLOAD_ARTIFACTS")
        self.say(build, "Entering phase UPLOAD_ARTIFACTS")
        self._close(build, "SUCCEEDED")
        return "FAILED" if failed else "SUCCEEDED"

    def _download(self, build: Build, shell: CommandShell) -> Buildspec:
        """The source into CODEBUILD_SRC_DIR, then the buildspec it runs."""
        kind = build.source["type"]
        if kind == "S3":
            build.resolved_version = fetch(self.s3, build.source["location"], shell.src_dir)
        elif kind != "NO_SOURCE":
            raise SourceError(f"the CodeBuild fake fetches S3 and NO_SOURCE sources only: {kind}")
        for var in build.environment.get("environmentVariables", []):
            if var.get("type", "PLAINTEXT") != "PLAINTEXT":
                raise SourceError(
                    f"the CodeBuild fake resolves PLAINTEXT environment variables only: "
                    f"{var['name']} is {var['type']}"
                )
        spec = load(build.source.get("buildspec"), shell.src_dir)
        self.say(build, f"YAML location is {spec.location}")
        self.say(build, "Processing environment variables")
        shell.prepare(spec)
        self.say(build, f"Moving to directory {shell.src_dir}")
        self.say(build, f"Phases found in YAML: {len(spec.phases)}")
        for _, key in PHASE_KEYS:
            if key in spec.phases:
                count = len(spec.phases[key].commands)
                self.say(build, f" {key.upper()}: {count} commands")
        return spec

    def _fault(self, build: Build) -> tuple[str, str] | None:
        """An injected failure of the BUILD phase (``job_failure`` fault), if one matches."""
        rule = self.faults.take_job_fault("job_failure", self._fault_subject(build))
        if rule is None:
            return None
        message = str(rule.get("reason") or "Error while executing command: injected failure")
        self.say(build, message)
        return str(rule.get("code") or "COMMAND_EXECUTION_ERROR"), message

    @staticmethod
    def _fault_subject(build: Build) -> str:
        """What a fault's ``match`` is looked for in: id, source, buildspec, variable values."""
        values = [v.get("value", "") for v in build.environment.get("environmentVariables", [])]
        parts = [build.id, build.source.get("location", ""), build.source.get("buildspec", "")]
        return "\n".join([*parts, *values])
