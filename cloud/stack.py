"""Start and stop the emulated clouds: ``python -m cloud.stack up|down|env|status|serve``.

``up`` starts every piece on a free loopback port (or fixed ports and another address: see
:data:`BIND`, :data:`HOST`, :data:`PORT_BASE`), waits until each answers, and writes the
endpoints to ``.cloud/env`` (KEY=VALUE lines). A stack whose ``.cloud/env`` still answers is
reused. ``down`` stops every process ``up`` started, by the PIDs kept under ``.cloud/pids``
(each piece runs in its own session, so its whole process group goes), every job process a fake
left (``.cloud/jobs/**/*.pid``) and every container labelled ``stepop.fake``. ``serve`` is
``up``, then waiting for SIGTERM, then ``down``: the command of a container.

Pieces:

* moto server: S3, ECR API, STS, IAM, CloudWatch Logs (``AWS_ENDPOINT_URL``);
* gcp-storage-emulator, in memory (``STORAGE_EMULATOR_HOST``);
* Azurite's blob service from npm, in memory (``AZURE_STORAGE_CONNECTION_STRING``);
* the job-service fakes of :data:`FAKES`.

Once every piece answers, ``up`` creates the bucket :data:`DEMO_BUCKET` in S3, in GCS and as an
Azure Blob container (``STEPOP_DEMO_BUCKET``), so the docs' "try it" blocks need no set-up of
their own. The base image the docs name is pushed to the registry by ``scripts/engine.sh up``
(which ``make cloud-up`` runs first).

Adding a fake is one :class:`Fake` entry. Its module provides::

    def serve(host: str, port: int, env: dict[str, str]) -> None:
        '''Serve until SIGTERM/SIGINT, then stop every job it runs.'''

and optionally::

    def stack_env(url: str, env: dict[str, str]) -> dict[str, str]:
        '''Extra .cloud/env lines (e.g. an AIRFLOW_CONN_* value) given the fake's URL.'''

``env`` is what the stack wrote so far (storage endpoints, registry, ``STEPOP_CLOUD_DIR``).
A fake whose module does not exist yet, or has no ``serve``, is skipped.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.util
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STATE = Path(os.environ.get("STEPOP_CLOUD_DIR", ROOT / ".cloud"))
ENV_FILE = STATE / "env"
CACHE = Path(os.environ.get("STEPOP_CLOUD_CACHE", "/var/tmp/airflow-stepop-cloud"))
AZURITE_VERSION = os.environ.get("STEPOP_AZURITE_VERSION", "3.35.0")
# scripts/engine.sh's registry (STEPOP_REGISTRY_PORT), unless another is named.
REGISTRY = os.environ.get("STEPOP_REGISTRY") or (
    f"127.0.0.1:{os.environ.get('STEPOP_REGISTRY_PORT', '5000')}"
)
BASE_IMAGE = os.environ.get("STEPOP_TEST_BASE_IMAGE", "stepop-base/python:3.11-bookworm")
# Where the pieces listen, and the host name the URLs in .cloud/env use. In a container (the
# `emulated` profile of docker-compose.yaml): STEPOP_CLOUD_BIND=0.0.0.0 and
# STEPOP_CLOUD_HOST=host.docker.internal, the name Airflow's containers reach the host by.
BIND = os.environ.get("STEPOP_CLOUD_BIND", "127.0.0.1")
HOST = os.environ.get("STEPOP_CLOUD_HOST", "127.0.0.1")
# Fixed ports from this one on (moto, GCS, Azurite, then the fakes in FAKES' order); 0: free ports.
PORT_BASE = int(os.environ.get("STEPOP_CLOUD_PORT_BASE", "0"))
REGION = "us-east-1"
# Azurite's well-known development account (public, documented by Microsoft).
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)
START_TIMEOUT = 60.0
# The bucket (S3, GCS) and Blob container the docs' "try it" blocks use.
DEMO_BUCKET = "stepop-demo"


@dataclass(frozen=True)
class Fake:
    """A job-service fake: its module (with ``serve``) and the env key holding its URL."""

    name: str
    module: str
    url_key: str


FAKES: list[Fake] = [
    Fake("sagemaker", "cloud.sagemaker", "STEPOP_SAGEMAKER_ENDPOINT"),
    Fake("vertex", "cloud.vertex", "STEPOP_VERTEX_ENDPOINT"),
    Fake("azureml", "cloud.azureml", "STEPOP_AZUREML_ENDPOINT"),
]


def log(msg: str) -> None:
    """Progress on stderr, so `env` output stays clean."""
    print(f"[cloud] {msg}", file=sys.stderr, flush=True)


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


def read_env(path: Path = ENV_FILE) -> dict[str, str]:
    """Parse .cloud/env: KEY=VALUE lines, a value in single quotes when the shell needs them."""
    env: dict[str, str] = {}
    if not path.exists():
        return env
    for line in path.read_text().splitlines():
        if line and not line.startswith("#") and "=" in line:
            key, value = line.split("=", 1)
            if len(value) >= 2 and value[0] == value[-1] == "'":
                value = value[1:-1].replace("'\\''", "'")
            env[key] = value
    return env


_SHELL_SAFE = re.compile(r"^[A-Za-z0-9_./:@%+,=-]*$")


def _quote(value: str) -> str:
    """Single-quote a value the shell would split or unquote (JSON, `;` in connection strings)."""
    if _SHELL_SAFE.match(value):
        return value
    return "'" + value.replace("'", "'\\''") + "'"


def health_urls(env: dict[str, str]) -> list[str]:
    """The URLs that must answer for a written stack to be reused."""
    urls = [env.get("STEPOP_MOTO_ENDPOINT", ""), env.get("STORAGE_EMULATOR_HOST", "")]
    if "STEPOP_AZURITE_BLOB_ENDPOINT" in env:
        urls.append(env["STEPOP_AZURITE_BLOB_ENDPOINT"])
    urls += [env[f.url_key] + "/_fake/health" for f in FAKES if f.url_key in env]
    return urls


def running(env: dict[str, str] | None = None) -> bool:
    """Whether the stack of ``.cloud/env`` is up and every piece answers."""
    env = read_env() if env is None else env
    urls = health_urls(env)
    return bool(env) and all(u and answers(u) for u in urls)


def _spawn(name: str, argv: list[str], extra_env: dict[str, str] | None = None) -> int:
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


def _wait(name: str, url: str, pid: int) -> None:
    """Poll ``url`` until it answers; fail early if the process died."""
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if answers(url, timeout=1.0):
            return
        if not _alive(pid):
            tail = _log_tail(name)
            raise RuntimeError(f"{name} exited before answering at {url}:\n{tail}")
        time.sleep(0.2)
    raise RuntimeError(f"{name} did not answer at {url} within {START_TIMEOUT:.0f}s")


def _log_tail(name: str, lines: int = 20) -> str:
    path = STATE / "logs" / f"{name}.log"
    if not path.exists():
        return ""
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def _alive(pid: int) -> bool:
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


def aws_connection(moto: str, sagemaker: str | None) -> str:
    """AIRFLOW_CONN_AWS_DEFAULT: moto for every service, the SageMaker fake for SageMaker.

    The amazon provider reads ``endpoint_url`` (all services) and ``service_config.<boto3
    service name>.endpoint_url`` (per-service override) from the connection extra.
    """
    extra: dict[str, object] = {"region_name": REGION, "endpoint_url": moto}
    if sagemaker:
        extra["service_config"] = {"sagemaker": {"endpoint_url": sagemaker}}
    conn = {"conn_type": "aws", "login": "testing", "password": "testing", "extra": extra}
    return json.dumps(conn, separators=(",", ":"))


def google_connection(project: str, vertex: str | None = None, logging: str | None = None) -> str:
    """AIRFLOW_CONN_GOOGLE_CLOUD_DEFAULT: anonymous credentials (the emulators check none).

    ``vertex_endpoint`` and ``logging_endpoint`` are the connection extras the Vertex backend
    reads to reach the emulated Vertex AI and Cloud Logging (GCS: STORAGE_EMULATOR_HOST).
    """
    extra: dict[str, object] = {"project": project, "is_anonymous": True}
    if vertex:
        extra["vertex_endpoint"] = vertex
    if logging:
        extra["logging_endpoint"] = logging
    conn = {"conn_type": "google_cloud_platform", "extra": extra}
    return json.dumps(conn, separators=(",", ":"))


def _script(name: str) -> str:
    """A console script of this interpreter's packages: next to it (a virtualenv), else on PATH
    (a system or ``pip --user`` install, as in the compose image)."""
    beside = Path(sys.executable).parent / name
    return str(beside) if beside.exists() else (shutil.which(name) or str(beside))


def _has_serve(module: str) -> bool:
    """Whether ``module`` exists and has a ``serve`` (a fake's package re-exports it)."""
    if importlib.util.find_spec(module) is None:
        return False
    return callable(getattr(importlib.import_module(module), "serve", None))


def up() -> dict[str, str]:
    """Start the stack (or reuse a running one) and write .cloud/env."""
    current = read_env()
    if current and running(current):
        log(f"reusing the running stack of {ENV_FILE}")
        # A stack started by an older checkout gets today's connections and bucket.
        fresh = derived(current)
        if fresh != current:
            write_env(fresh)
            log(f"refreshed the connections of {ENV_FILE}")
        create_buckets(fresh, DEMO_BUCKET)
        return fresh
    if current or (STATE / "pids").exists():
        log("a previous stack is partly down: stopping its leftovers")
        down()
    STATE.mkdir(parents=True, exist_ok=True)
    py = sys.executable
    env: dict[str, str] = {
        "STEPOP_CLOUD_DIR": str(STATE),
        "STEPOP_REGISTRY": REGISTRY,
        "STEPOP_TEST_REGISTRY": REGISTRY,
        "STEPOP_TEST_BASE_IMAGE": BASE_IMAGE,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": REGION,
        "AWS_REGION": REGION,
        "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false",
        "GOOGLE_CLOUD_PROJECT": "stepop-local",
    }
    pending: list[tuple[str, str, int]] = []
    fixed = iter(range(PORT_BASE, PORT_BASE + 16))

    def next_port() -> int:
        return next(fixed) if PORT_BASE else free_port()

    port = next_port()
    moto = f"http://{HOST}:{port}"
    pid = _spawn("moto", [_script("moto_server"), "-H", BIND, "-p", str(port)])
    pending.append(("moto", f"{moto}/moto-api/", pid))
    env.update({"STEPOP_MOTO_ENDPOINT": moto, "AWS_ENDPOINT_URL": moto})

    port = next_port()
    gcs = f"http://{HOST}:{port}"
    argv = [_script("gcp-storage-emulator"), "start", "--host", BIND, "--port", str(port),
            "--in-memory"]  # fmt: skip
    pid = _spawn("gcs", argv)
    pending.append(("gcs", gcs, pid))
    env["STORAGE_EMULATOR_HOST"] = gcs

    port = next_port()
    blob = f"http://{HOST}:{port}/{AZURITE_ACCOUNT}"
    flags = ["--inMemoryPersistence", "--skipApiVersionCheck", "--disableTelemetry", "--loose"]
    argv = [str(azurite_bin()), "--blobHost", BIND, "--blobPort", str(port), *flags]
    pid = _spawn("azurite", argv)
    pending.append(("azurite", blob, pid))
    env.update({
        "STEPOP_AZURITE_BLOB_ENDPOINT": blob,
        "AZURE_STORAGE_CONNECTION_STRING": (
            f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};"
            f"AccountKey={AZURITE_KEY};BlobEndpoint={blob};"
        ),
    })  # fmt: skip

    for name, url, pid in pending:
        _wait(name, url, pid)
        log(f"{name} answers at {url}")

    fakes: list[tuple[Fake, str, int]] = []
    for fake in FAKES:
        if not _has_serve(fake.module):
            log(f"{fake.name}: {fake.module} has no serve() yet, skipped")
            continue
        port = next_port()
        url = f"http://{HOST}:{port}"
        argv = [py, "-m", "cloud.serve", fake.module, BIND, str(port)]
        pid = _spawn(fake.name, argv, {"STEPOP_CLOUD_ENV_JSON": json.dumps(env)})
        fakes.append((fake, url, pid))
    for fake, url, pid in fakes:
        _wait(fake.name, url + "/_fake/health", pid)
        log(f"{fake.name} answers at {url}")
        env[fake.url_key] = url

    env = derived(env)
    create_buckets(env, DEMO_BUCKET)
    write_env(env)
    log(f"wrote {ENV_FILE}")
    return env


def derived(env: dict[str, str]) -> dict[str, str]:
    """``env`` plus what follows from its endpoints: the connections, each fake's ``stack_env``
    and the demo bucket's name. ``up`` recomputes it for a stack it reuses."""
    out = dict(env)
    for fake in FAKES:
        extra = getattr(importlib.import_module(fake.module), "stack_env", None)
        if fake.url_key in out and extra is not None:
            out.update(extra(out[fake.url_key], dict(out)))
    if "STEPOP_SAGEMAKER_ENDPOINT" in out:  # boto3's per-service override (service id SageMaker)
        out["AWS_ENDPOINT_URL_SAGEMAKER"] = out["STEPOP_SAGEMAKER_ENDPOINT"]
    out["AIRFLOW_CONN_AWS_DEFAULT"] = aws_connection(
        out["STEPOP_MOTO_ENDPOINT"], out.get("STEPOP_SAGEMAKER_ENDPOINT")
    )
    out["AIRFLOW_CONN_GOOGLE_CLOUD_DEFAULT"] = google_connection(
        "stepop-local", out.get("STEPOP_VERTEX_ENDPOINT"), out.get("STEPOP_VERTEX_LOGGING_ENDPOINT")
    )
    out["STEPOP_DEMO_BUCKET"] = DEMO_BUCKET
    return out


def create_buckets(env: dict[str, str], name: str) -> None:
    """Create ``name`` in S3 (moto), GCS (the emulator) and Azurite, unless it exists there.

    Each client is imported here: the stack itself needs only what the ``cloud`` extra has, and
    a store whose client is not installed (no ``gcp``/``azure`` extra) gets no bucket.
    """
    import boto3

    s3 = boto3.client(
        "s3",
        endpoint_url=env["STEPOP_MOTO_ENDPOINT"],
        region_name=REGION,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    with contextlib.suppress(s3.exceptions.BucketAlreadyOwnedByYou):
        s3.create_bucket(Bucket=name)
    made = ["S3"]
    try:
        from google.api_core.exceptions import Conflict
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import storage
    except ImportError:
        log(f"google-cloud-storage is not installed: no gs://{name}")
    else:
        gcs = storage.Client(
            project=env["GOOGLE_CLOUD_PROJECT"],
            credentials=AnonymousCredentials(),
            client_options={"api_endpoint": env["STORAGE_EMULATOR_HOST"]},
        )
        with contextlib.suppress(Conflict):
            gcs.create_bucket(name)
        made.append("GCS")
    try:
        from azure.core.exceptions import ResourceExistsError
        from azure.storage.blob import BlobServiceClient
    except ImportError:
        log(f"azure-storage-blob is not installed: no Blob container {name}")
    else:
        blobs = BlobServiceClient.from_connection_string(env["AZURE_STORAGE_CONNECTION_STRING"])
        with contextlib.suppress(ResourceExistsError):
            blobs.create_container(name)
        made.append("Azure Blob")
    log(f"the bucket {name} is there ({', '.join(made)})")


def write_env(env: dict[str, str]) -> None:
    """Write .cloud/env atomically."""
    STATE.mkdir(parents=True, exist_ok=True)
    tmp = ENV_FILE.with_suffix(".tmp")
    lines = ["# written by `python -m cloud.stack up`; removed by `down`"]
    lines += [f"{k}={_quote(v)}" for k, v in env.items()]
    tmp.write_text("\n".join(lines) + "\n")
    tmp.replace(ENV_FILE)


def _stop_group(pid: int, grace: float) -> None:
    """SIGTERM the process group led by ``pid``, SIGKILL it after ``grace`` seconds."""
    try:
        if os.getsid(pid) != pid:  # not a session leader we started: the PID was reused
            return
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and _alive(pid):
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and _alive(pid):
        time.sleep(0.05)


def down() -> None:
    """Stop every piece (fakes first, so they stop their jobs), leftovers, and containers."""
    pids = STATE / "pids"
    if pids.exists():
        order = [f.name for f in FAKES]
        files = sorted(pids.glob("*.pid"), key=lambda p: (p.stem not in order, p.stem))
        for pidfile in files:
            with contextlib.suppress(ValueError, OSError):
                _stop_group(int(pidfile.read_text().strip()), grace=10)
                log(f"stopped {pidfile.stem}")
            pidfile.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            pids.rmdir()
    jobs = STATE / "jobs"
    if jobs.exists():
        for pidfile in jobs.rglob("*.pid"):
            with contextlib.suppress(ValueError, OSError):
                _stop_group(int(pidfile.read_text().strip()), grace=2)
    _remove_containers()
    ENV_FILE.unlink(missing_ok=True)


def _remove_containers() -> None:
    """Remove containers this stack's fakes left behind, if an engine answers."""
    try:
        import docker

        client = docker.from_env(timeout=5)
        mine = {"label": f"stepop.stack={STATE}"}
        for container in client.containers.list(all=True, filters=mine):
            container.remove(force=True)
    except Exception:  # no engine, no containers
        return


def status() -> int:
    """Print each endpoint of .cloud/env and whether it answers; 0 when all do."""
    env = read_env()
    if not env:
        print("no stack (.cloud/env missing)")
        return 1
    ok = True
    for url in health_urls(env):
        up_ = answers(url)
        ok &= up_
        print(f"{'up  ' if up_ else 'DOWN'} {url}")
    return 0 if ok else 1


def serve() -> int:
    """Run the stack in the foreground, as a container's command: up, wait for SIGTERM, down.

    Returns 1 (after stopping the rest) when a piece stops answering, so the container's restart
    policy or health check sees it.
    """
    up()
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    healthy = True
    while healthy and not stop.wait(10):
        healthy = running()
    if not healthy:
        log("a piece stopped answering: stopping the stack")
    down()
    return 0 if healthy else 1


def main(argv: list[str] | None = None) -> int:
    """CLI entry point."""
    parser = argparse.ArgumentParser(
        prog="python -m cloud.stack", description=__doc__.split("\n")[0]
    )
    parser.add_argument("command", choices=["up", "down", "env", "status", "serve"])
    args = parser.parse_args(argv)
    actions: dict[str, Callable[[], int]] = {
        "up": lambda: (up(), 0)[1],
        "down": lambda: (down(), 0)[1],
        "env": lambda: (print(ENV_FILE.read_text(), end=""), 0)[1],
        "status": status,
        "serve": serve,
    }
    return actions[args.command]()


if __name__ == "__main__":
    sys.exit(main())
