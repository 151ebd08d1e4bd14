"""A build's commands on this host, for the CodeBuild and Cloud Build fakes.

Both services run a build's commands on a machine of their own, with a container engine at
hand; the fakes run them on this host against the stack's engine (``docker`` on ``PATH``), so a
build really builds and pushes. :class:`HostCommand` runs one command:

* in its own session, so a stop reaches every process it started (the ``docker`` client
  included): SIGTERM to the process group, SIGKILL after a grace period;
* with stdout and stderr merged, each line handed to a callback as soon as it is read (both
  services log the two streams as one);
* with its PID in a file under the stack's jobs directory while it runs, where
  ``python -m cloud.stack down`` finds what a killed fake left.

:func:`host_path` is the ``PATH`` a build gets: where ``docker`` is, then the usual directories.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

# (line without its newline, epoch seconds when it was read)
LineSink = Callable[[str, float], None]
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def host_path() -> str:
    """``PATH`` for a build: the directory of ``docker`` first, then the system's."""
    docker = shutil.which("docker")
    dirs = [os.path.dirname(docker)] if docker else []
    return ":".join(dict.fromkeys([*dirs, *SYSTEM_PATH.split(":")]))


class HostCommand:
    """One running command: its lines go to ``on_line``; ``wait``, ``stop``."""

    def __init__(
        self,
        argv: list[str],
        cwd: str,
        env: dict[str, str],
        on_line: LineSink,
        pid_file: Path | None = None,
    ) -> None:
        self.on_line = on_line
        self.pid_file = pid_file
        self.proc = subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        if pid_file is not None:
            pid_file.parent.mkdir(parents=True, exist_ok=True)
            pid_file.write_text(str(self.proc.pid))
        self._reader = threading.Thread(target=self._read, daemon=True, name="build-output")
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in iter(self.proc.stdout.readline, b""):
            line = raw.decode("utf-8", errors="replace").rstrip("\n").rstrip("\r")
            self.on_line(line, time.time())

    def wait(self, timeout: float | None = None) -> int | None:
        """The exit status, or None when still running after ``timeout`` seconds."""
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None
        # A background child may keep the pipe open: its lines are not worth hanging for.
        self._reader.join(timeout=2)
        self._forget()
        return code

    def stop(self, grace: float = 3.0) -> int:
        """SIGTERM the command's process group, SIGKILL it after ``grace`` seconds."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        code = self.wait(grace)
        if code is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            code = self.wait(10)
        # The group may outlive its leader (a child ignoring SIGTERM): make sure it is gone.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        return code if code is not None else -signal.SIGKILL

    def _forget(self) -> None:
        if self.pid_file is not None:
            self.pid_file.unlink(missing_ok=True)
