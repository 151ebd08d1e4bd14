"""How one node of a job runs: :class:`ProcessNode`, :class:`TimerNode`, :class:`ContainerNode`.

Each is a :class:`Node`: it starts, streams its output lines to the fake's callback, reports its
exit code and stops (SIGTERM, then SIGKILL). What each mode promises is in :mod:`cloud.runner`.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Iterable
from typing import IO, Any

from cloud.runner.launch import STDERR, STDOUT, JobLaunch, LaunchError, LineCallback, NodeSpec

_PYTHON = re.compile(r"^python(3(\.\d+)?)?$")


class Node(ABC):
    """One running process or container of a job."""

    def __init__(self, spec: NodeSpec, on_line: LineCallback | None) -> None:
        self.spec = spec
        self._on_line = on_line
        self._readers: list[threading.Thread] = []

    @abstractmethod
    def start(self) -> None:
        """Start the node; raises LaunchError when it cannot start."""

    @abstractmethod
    def _exit_code(self) -> int | None:
        """The exit code once the node has ended, else None."""

    @abstractmethod
    def stop(self, grace: float = 10.0) -> None:
        """SIGTERM, then SIGKILL after ``grace`` seconds; returns once the node has ended."""

    def cleanup(self) -> None:  # noqa: B027 - optional hook, nothing to release by default
        """Release what the node holds (container, files); after the fake read its outputs."""

    def exit_code(self) -> int | None:
        """The exit code once the node ended and all of its output was delivered, else None."""
        code = self._exit_code()
        if code is None:
            return None
        for reader in self._readers:
            reader.join(timeout=5)
        return code

    def _pump(self, stream: str, chunks: Iterable[bytes]) -> None:
        """Split a byte stream into lines and hand each to the callback."""
        buf = b""
        for chunk in chunks:
            buf += chunk
            *lines, buf = buf.split(b"\n")
            for line in lines:
                self._emit(stream, line)
        if buf:
            self._emit(stream, buf)

    def _emit(self, stream: str, raw: bytes) -> None:
        if self._on_line is None:
            return
        line = raw.decode("utf-8", "replace").rstrip("\r")
        try:
            self._on_line(self.spec, stream, line, time.time())
        except Exception as exc:  # a broken log sink must not kill the job
            print(f"[runner] log callback failed: {exc!r}", file=sys.stderr)

    def _start_reader(self, stream: str, chunks: Iterable[bytes]) -> None:
        thread = threading.Thread(
            target=self._pump, args=(stream, chunks), daemon=True, name=f"log-{stream}"
        )
        thread.start()
        self._readers.append(thread)


class ProcessNode(Node):
    """A node as a local subprocess with container paths re-rooted under ``root``."""

    def __init__(self, launch: JobLaunch, spec: NodeSpec, root: str, on_line: LineCallback | None):
        super().__init__(spec, on_line)
        self.launch = launch
        self.root = root
        self.proc: subprocess.Popen[bytes] | None = None
        mounts = [*launch.mounts, *spec.mounts]
        prefixes = {m.container_path.rstrip("/") for m in mounts}
        prefixes.update(p.rstrip("/") for p in launch.reroot)
        if launch.workdir:
            prefixes.add(launch.workdir.rstrip("/"))
        prefixes.discard("")
        alternation = "|".join(re.escape(p) for p in sorted(prefixes, key=len, reverse=True))
        self._pattern = (
            re.compile(rf"(?<![\w.\-/])(?:{alternation})(?=/|$|[^\w.\-])") if prefixes else None
        )
        self._mounts = mounts

    def path(self, container_path: str) -> str:
        """Where a container path lies on this machine for this node."""
        return os.path.join(self.root, container_path.lstrip("/"))

    def rewrite(self, value: str) -> str:
        """Re-root every container path inside ``value``."""
        if self._pattern is None:
            return value
        return self._pattern.sub(lambda m: self.path(m.group(0)), value)

    def _layout(self) -> None:
        os.makedirs(self.root, exist_ok=True)
        for mount in sorted(self._mounts, key=lambda m: m.container_path):
            target = self.path(mount.container_path)
            os.makedirs(mount.host_dir, exist_ok=True)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            if os.path.islink(target):
                os.unlink(target)
            elif os.path.isdir(target):
                shutil.rmtree(target)
            os.symlink(os.path.abspath(mount.host_dir), target)
        os.makedirs(os.path.join(self.root, "root"), exist_ok=True)

    def start(self) -> None:
        if not self.launch.entrypoint:
            raise LaunchError("process mode needs an explicit entrypoint (the image's is unknown)")
        self._layout()
        argv = [*self.launch.entrypoint, *(self.launch.args or [])]
        argv = [self.rewrite(a) for a in argv]
        if _PYTHON.match(os.path.basename(argv[0])):
            argv[0] = sys.executable
        env = {
            "PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
            "LANG": "C.UTF-8",
            "HOME": os.path.join(self.root, "root"),
            "PYTHONUNBUFFERED": "1",
        }
        env.update({k: self.rewrite(v) for k, v in self.launch.env.items()})
        env.update({k: self.rewrite(v) for k, v in self.spec.env.items()})
        cwd = self.path(self.launch.workdir) if self.launch.workdir else self.root
        os.makedirs(cwd, exist_ok=True)
        try:
            self.proc = subprocess.Popen(
                argv,
                cwd=cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,  # its own process group, so stop() reaches children
            )
        except OSError as exc:
            raise LaunchError(f"cannot execute {argv[0]!r}: {exc}") from exc
        # Next to the node's root, so `cloud.stack down` can find a job a dead fake left.
        with open(f"{self.root}.pid", "w") as f:
            f.write(str(self.proc.pid))
        self._start_reader(STDOUT, _chunks(self.proc.stdout))
        self._start_reader(STDERR, _chunks(self.proc.stderr))

    def _exit_code(self) -> int | None:
        if self.proc is None:
            return None
        code = self.proc.poll()
        if code is None:
            return None
        return 128 - code if code < 0 else code  # -15 (signal) reads as 143, as in a container

    def stop(self, grace: float = 10.0) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        _killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            _killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


def _killpg(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, sig)


def _chunks(pipe: IO[bytes] | None) -> Iterable[bytes]:
    if pipe is None:
        return
    with pipe:
        while chunk := pipe.read1(65536):  # type: ignore[attr-defined]
            yield chunk


class TimerNode(Node):
    """A node with no process: it ends with exit code 0 after a fixed time (or -15 if stopped).

    The end is ``seconds`` after the start, or with ``end_file`` the epoch written in that file
    (none yet: it runs on). The file is read at most once a second for all nodes.
    """

    _end: tuple[float, float | None] = (-1.0, None)  # (when read, the end read)

    def __init__(
        self,
        spec: NodeSpec,
        on_line: LineCallback | None,
        seconds: float,
        end_file: str | None = None,
    ) -> None:
        super().__init__(spec, on_line)
        self.seconds = seconds
        self.end_file = end_file
        self.started = 0.0
        self.stopped = False

    def start(self) -> None:
        self.started = time.time()
        when = f"at the time in {self.end_file}" if self.end_file else f"in {self.seconds:g}s"
        self._emit(STDOUT, f"timer node {self.spec.host}: ends {when}".encode())

    def _ends_at(self) -> float | None:
        if not self.end_file:
            return self.started + self.seconds
        read_at, end = TimerNode._end
        if read_at < 0 or time.monotonic() - read_at >= 1.0:
            try:
                with open(self.end_file) as f:
                    end = float(f.read())
            except (OSError, ValueError):
                end = None
            TimerNode._end = (time.monotonic(), end)
        return end

    def _exit_code(self) -> int | None:
        if self.stopped:
            return -signal.SIGTERM
        end = self._ends_at()
        return 0 if end is not None and time.time() >= end else None

    def stop(self, grace: float = 10.0) -> None:
        self.stopped = True


class ContainerNode(Node):
    """A node as a detached container on the local engine."""

    def __init__(
        self, launch: JobLaunch, spec: NodeSpec, client: Any, on_line: LineCallback | None
    ) -> None:
        super().__init__(spec, on_line)
        self.launch = launch
        self.client = client
        self.container: Any = None

    def path(self, container_path: str) -> str:
        """Containers see container paths as they are."""
        return container_path

    def rewrite(self, value: str) -> str:
        """Nothing to re-root in a container."""
        return value

    def start(self) -> None:
        import docker.errors

        volumes = {
            os.path.abspath(m.host_dir): {
                "bind": m.container_path,
                "mode": "ro" if m.read_only else "rw",
            }
            for m in [*self.launch.mounts, *self.spec.mounts]
        }
        for host_dir in volumes:
            os.makedirs(host_dir, exist_ok=True)
        labels = {
            **self.launch.labels,
            "stepop.fake": self.launch.fake,
            "stepop.job": self.launch.name,
            "stepop.node": self.spec.host,
            # which stack started it: `cloud-down` of one stack leaves other stacks' jobs alone
            "stepop.stack": os.environ.get("STEPOP_CLOUD_DIR", ""),
        }
        hosts = {h: "127.0.0.1" for h in [*(n.host for n in self.launch.nodes), *self.launch.hosts]}
        try:
            self.container = self.client.containers.run(
                self.launch.image,
                command=self.launch.args,
                entrypoint=self.launch.entrypoint,
                environment={**self.launch.env, **self.spec.env},
                volumes=volumes,
                working_dir=self.launch.workdir,
                labels=labels,
                extra_hosts=hosts,
                network_mode="host",
                name=f"stepop-{self.launch.fake}-{self.spec.host}-{uuid.uuid4().hex[:8]}",
                detach=True,
            )
        except docker.errors.DockerException as exc:
            raise LaunchError(f"cannot start a container of {self.launch.image}: {exc}") from exc
        for stream in (STDOUT, STDERR):
            chunks = self.container.logs(
                stream=True, follow=True, stdout=stream == STDOUT, stderr=stream == STDERR
            )
            self._start_reader(stream, chunks)

    def _exit_code(self) -> int | None:
        if self.container is None:
            return None
        self.container.reload()
        if self.container.status not in ("exited", "dead"):
            return None
        return int(self.container.attrs["State"]["ExitCode"])

    def stop(self, grace: float = 10.0) -> None:
        import docker.errors

        if self.container is None:
            return
        with contextlib.suppress(docker.errors.NotFound):
            self.container.stop(timeout=max(1, int(grace)))

    def cleanup(self) -> None:
        import docker.errors

        if self.container is not None:
            with contextlib.suppress(docker.errors.NotFound):
                self.container.remove(force=True)
