"""The job runner every fake uses to really run a job: one local process or container per node.

A fake translates its service's request into a :class:`JobLaunch` (image, entrypoint and args,
env, mounts, nodes) and hands it to :class:`Runner`. The runner starts one process or container
per node, streams every output line to a callback (so the fake can write it to CloudWatch Logs or
wherever its service keeps logs), reports exit codes and stops nodes (SIGTERM, then SIGKILL).

Two modes, same contract:

``process`` (default; container creation costs seconds here)
    Each node gets its own root directory under a per-job temporary directory. Every mount's
    container path is a symlink under that root to the mount's host directory, so
    ``/opt/ml/model`` becomes ``<tmp>/<node>/opt/ml/model``. Container paths that appear in the
    entrypoint, the args or the env values are rewritten to the re-rooted paths (only paths that
    start with a mount path, the working dir or a prefix of ``JobLaunch.reroot``). A job that
    hard-codes a path in its own code is not re-rooted: pass paths through args or env. A leading
    ``python``/``python3`` runs with the current interpreter, which also means the job sees this
    virtualenv's packages, not the image's. Read-only mounts are not enforced. The process gets a
    fresh environment (PATH, LANG, HOME under its root, then the launch's env), never ours.

``container``
    docker SDK: pulls the image (from the local registry), runs one detached container per node
    with ``network_mode="host"`` (dockerd runs with ``--bridge=none``), bind mounts, every node's
    host name mapped to 127.0.0.1, and labels ``stepop.fake``/``stepop.job``/``stepop.node`` so
    leftovers can be found and removed.

``timer`` (scale benchmarks)
    No process at all: each node prints one line, "runs" for ``STEPOP_FAKE_TIMER_SECONDS``
    (default 60) and exits 0, so a thousand jobs fit on a small machine. With
    ``STEPOP_FAKE_TIMER_END_FILE`` set, every node runs instead until the wall-clock time (epoch
    seconds) written in that file, however long its job took to submit: a benchmark that submits
    jobs for minutes ends them all when it has measured enough. The job's code never runs, so it
    leaves no result: use it to measure the control plane, not a step.
    :func:`write_local_timer` gives the local backend the same kind of job: a stand-in for its
    interpreter (``LocalBackend(python=...)``) that keeps the supervisor's protocol (holds the
    job's lock, writes ``output.log`` and ``exit_code``) with one ``sh`` and one ``sleep`` (or
    one ``cat`` of a FIFO: the job ends when the FIFO's last writer closes it).

Nodes are independent: multi-node jobs pass per-node host/rank information in
:class:`NodeSpec` (env and extra mounts such as a per-node resourceconfig.json). A job has
failed as soon as one node exits non-zero (the others are then stopped, as the services do); it
has succeeded when every node exits 0.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import IO, Any

MODE_PROCESS = "process"
MODE_CONTAINER = "container"
MODE_TIMER = "timer"
MODES = (MODE_PROCESS, MODE_CONTAINER, MODE_TIMER)

STDOUT = "stdout"
STDERR = "stderr"

_PYTHON = re.compile(r"^python(3(\.\d+)?)?$")


@dataclass(frozen=True)
class Mount:
    """A host directory the job sees at ``container_path``."""

    host_dir: str
    container_path: str
    read_only: bool = False


@dataclass
class NodeSpec:
    """One node of a job: its host name, rank and what only this node gets."""

    host: str
    rank: int = 0
    env: dict[str, str] = field(default_factory=dict)
    mounts: list[Mount] = field(default_factory=list)


@dataclass
class JobLaunch:
    """What a service would start for a job, in terms every service shares.

    ``entrypoint`` None means the image's own ENTRYPOINT and ``args`` None its CMD (container
    mode only: process mode needs an explicit entrypoint).
    """

    fake: str
    name: str
    image: str
    entrypoint: list[str] | None
    args: list[str] | None = None
    env: dict[str, str] = field(default_factory=dict)
    mounts: list[Mount] = field(default_factory=list)
    workdir: str | None = None
    nodes: list[NodeSpec] = field(default_factory=lambda: [NodeSpec("node-0")])
    labels: dict[str, str] = field(default_factory=dict)
    reroot: tuple[str, ...] = ()


# (node, stream name "stdout"/"stderr", line without its newline, epoch seconds when read)
LineCallback = Callable[[NodeSpec, str, str, float], None]


class LaunchError(RuntimeError):
    """The job could not be started (the fake reports it as the service's start failure)."""


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
        hosts = {n.host: "127.0.0.1" for n in self.launch.nodes}
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

    def __init__(self, mode: str = MODE_PROCESS, tmp_base: str | None = None) -> None:
        if mode not in MODES:
            raise ValueError(f"runner mode {mode!r}: use one of {MODES}")
        self.mode = mode
        self.tmp_base = tmp_base
        self._runs: list[JobRun] = []
        self._lock = threading.Lock()
        self._client: Any = None

    def docker(self) -> Any:
        """The docker client (container mode), made on first use."""
        if self._client is None:
            import docker

            self._client = docker.from_env()
        return self._client

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

        ``workdir`` is the per-job directory for process roots (made with job_dir() when None);
        the fake usually creates it first to prepare the mounts' host directories inside it.
        """
        mode = mode or self.mode
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


LOCAL_TIMER = """#!/bin/sh
# A timer job for LocalBackend(python=THIS): called as `THIS SUPERVISOR JOB_DIR -- COMMAND...`, it
# keeps the supervisor's protocol (the inherited job lock, output.log, exit_code) and runs nothing.
job_dir=$2
finish() {{
  echo "$1" > "$job_dir/.{exit_code}.tmp" && mv "$job_dir/.{exit_code}.tmp" "$job_dir/{exit_code}"
  exit 0
}}
trap 'kill $pid 2>/dev/null; finish -15' TERM INT
echo "timer job: ends {when}"
{wait} & pid=$!
echo $pid > "$job_dir/{child_pid}"
wait $pid
finish 0
"""


def write_local_timer(path: str, seconds: float = 60.0, fifo: str | None = None) -> str:
    """Write the local backend's timer interpreter (see the module's ``timer`` mode); its path.

    ``LocalBackend(python=path).submit(...)`` then starts a job that ends with exit code 0 after
    ``seconds``, or with ``fifo`` (a named pipe that someone holds open for writing, e.g.
    ``os.open(fifo, os.O_RDWR)``) when its last writer closes it; -15 when stopped. So a
    thousand local jobs fit on a small machine. The step's code never runs: a control-plane
    benchmark only.
    """
    from airflow_stepop.backends import local_supervisor as supervisor

    text = LOCAL_TIMER.format(
        exit_code=supervisor.EXIT_CODE,
        child_pid=supervisor.CHILD_PID,
        when=f"when {fifo} closes" if fifo else f"in {seconds:g}s",
        wait=f"cat '{fifo}' > /dev/null" if fifo else f"sleep {seconds:g}",
    )
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, 0o755)
    return path
