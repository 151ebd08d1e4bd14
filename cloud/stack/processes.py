"""The stack's processes: start a piece in its own session, wait until it answers, stop it.

Also the console scripts the pieces are (moto_server, gcp-storage-emulator, Azurite's
azurite-blob, installed once from npm) and the removal of job containers the fakes left.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from cloud.stack.settings import AZURITE_VERSION, BIND, CACHE, ROOT, START_TIMEOUT, STATE, log


def free_port() -> int:
    """A loopback port nobody listens on now."""
    with socket.socket() as s:
        s.bind((BIND, 0))
        return int(s.getsockname()[1])


def answers(url: str, timeout: float = 2.0) -> bool:
    """Whether an HTTP server answers at ``url`` (any status counts)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout):
            return True
    except urllib.error.HTTPError:
        return True
    except (OSError, ValueError):
        return False


def spawn(name: str, argv: list[str], extra_env: dict[str, str] | None = None) -> int:
    """Start a piece in its own session, logging to .cloud/logs/<name>.log; returns its PID."""
    (STATE / "pids").mkdir(parents=True, exist_ok=True)
    (STATE / "logs").mkdir(parents=True, exist_ok=True)
    logf = open(STATE / "logs" / f"{name}.log", "ab")  # noqa: SIM115 - child keeps it
    env = {**os.environ, "STEPOP_CLOUD_DIR": str(STATE), **(extra_env or {})}
    proc = subprocess.Popen(
        argv,
        stdout=logf,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        env=env,
        cwd=ROOT,
        start_new_session=True,
    )
    logf.close()
    (STATE / "pids" / f"{name}.pid").write_text(str(proc.pid))
    return proc.pid


def wait_until_answers(name: str, url: str, pid: int) -> None:
    """Poll ``url`` until it answers; fail early if the process died."""
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if answers(url, timeout=1.0):
            return
        if not alive(pid):
            tail = log_tail(name)
            raise RuntimeError(f"{name} exited before answering at {url}:\n{tail}")
        time.sleep(0.2)
    raise RuntimeError(f"{name} did not answer at {url} within {START_TIMEOUT:.0f}s")


def log_tail(name: str, lines: int = 20) -> str:
    path = STATE / "logs" / f"{name}.log"
    if not path.exists():
        return ""
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, reaped by us or not yet by init, counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    with contextlib.suppress(ChildProcessError):
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def stop_group(pid: int, grace: float) -> None:
    """SIGTERM the process group led by ``pid``, SIGKILL it after ``grace`` seconds."""
    try:
        if os.getsid(pid) != pid:  # not a session leader we started: the PID was reused
            return
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and alive(pid):
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and alive(pid):
        time.sleep(0.05)


def console_script(name: str) -> str:
    """A console script of this interpreter's packages: next to it (a virtualenv), else on PATH
    (a system or ``pip --user`` install, as in the compose image)."""
    beside = Path(sys.executable).parent / name
    return str(beside) if beside.exists() else (shutil.which(name) or str(beside))


def azurite_bin() -> Path:
    """azurite-blob from npm, installed once into the cache directory."""
    prefix = CACHE / f"azurite-{AZURITE_VERSION}"
    binary = prefix / "node_modules" / ".bin" / "azurite-blob"
    if not binary.exists():
        log(f"installing azurite@{AZURITE_VERSION} from npm into {prefix}")
        prefix.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            ["npm", "install", "--no-audit", "--no-fund", "--prefix", str(prefix),
             f"azurite@{AZURITE_VERSION}"],
            check=True,
            stdout=subprocess.DEVNULL,
        )  # fmt: skip
    return binary


def remove_containers() -> None:
    """Remove containers this stack's fakes left behind, if an engine answers."""
    try:
        import docker

        client = docker.from_env(timeout=5)
        mine = {"label": f"stepop.stack={STATE}"}
        for container in client.containers.list(all=True, filters=mine):
            container.remove(force=True)
    except Exception:  # no engine, no containers
        return
