"""The stack's commands: ``up``, ``down``, ``status``, ``serve`` and the command line.

What each does is in :mod:`cloud.stack`.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.util
import json
import signal
import sys
import threading
from collections.abc import Callable

from cloud.gcs.signer import write_key
from cloud.stack.buckets import create_buckets
from cloud.stack.envfile import derived, read_env, write_env
from cloud.stack.processes import (
    answers,
    azurite_bin,
    console_script,
    free_port,
    remove_containers,
    spawn,
    stop_group,
    wait_until_answers,
)
from cloud.stack.projects import create_build_project
from cloud.stack.settings import (
    AZURITE_ACCOUNT,
    AZURITE_KEY,
    BASE_IMAGE,
    BIND,
    DEMO_BUCKET,
    ENV_FILE,
    FAKES,
    HOST,
    PORT_BASE,
    REGION,
    REGISTRY,
    SIGNER_FILE,
    STATE,
    Fake,
    log,
)

# The first line of the package's docstring, as `--help` shows it.
_DESCRIPTION = (
    "Start and stop the emulated clouds: ``python -m cloud.stack up|down|env|status|serve``."
)


def health_urls(env: dict[str, str]) -> list[str]:
    """The URLs that must answer for a written stack to be reused."""
    urls = [env.get("STEPOP_MOTO_ENDPOINT", ""), env.get("STORAGE_EMULATOR_HOST", "")]
    for key in ("STEPOP_AZURITE_BLOB_ENDPOINT", "STEPOP_ADLS_BLOB_ENDPOINT"):
        if key in env:
            urls.append(env[key])
    urls += [env[f.url_key] + "/_fake/health" for f in FAKES if f.url_key in env]
    return urls


def running(env: dict[str, str] | None = None) -> bool:
    """Whether the stack of ``.cloud/env`` is up and every piece answers."""
    env = read_env() if env is None else env
    urls = health_urls(env)
    return bool(env) and all(u and answers(u) for u in urls)


def _has_serve(module: str) -> bool:
    """Whether ``module`` exists and has a ``serve`` (a fake's package re-exports it); a fake
    whose client library is not installed (Cloud Build's without the ``gcp`` extra) has none."""
    if importlib.util.find_spec(module) is None:
        return False
    try:
        imported = importlib.import_module(module)
    except ImportError as exc:
        log(f"{module} cannot be imported ({exc})")
        return False
    return callable(getattr(imported, "serve", None))


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
        create_build_project(fresh)
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
    pid = spawn("moto", [console_script("moto_server"), "-H", BIND, "-p", str(port)])
    pending.append(("moto", f"{moto}/moto-api/", pid))
    env.update({"STEPOP_MOTO_ENDPOINT": moto, "AWS_ENDPOINT_URL": moto})

    port = next_port()
    gcs = f"http://{HOST}:{port}"
    write_key(SIGNER_FILE, token_uri=f"{gcs}/token")
    argv = [py, "-m", "cloud.gcs", "start", "--host", BIND, "--port", str(port), "--in-memory",
            "--signer-file", str(SIGNER_FILE)]  # fmt: skip
    pid = spawn("gcs", argv)
    pending.append(("gcs", gcs, pid))
    env["STORAGE_EMULATOR_HOST"] = gcs

    port = next_port()
    blob = f"http://{HOST}:{port}/{AZURITE_ACCOUNT}"
    flags = ["--inMemoryPersistence", "--skipApiVersionCheck", "--disableTelemetry", "--loose"]
    argv = [str(azurite_bin()), "--blobHost", BIND, "--blobPort", str(port), *flags]
    pid = spawn("azurite", argv)
    pending.append(("azurite", blob, pid))
    env.update({
        "STEPOP_AZURITE_BLOB_ENDPOINT": blob,
        "AZURE_STORAGE_CONNECTION_STRING": (
            f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};"
            f"AccountKey={AZURITE_KEY};BlobEndpoint={blob};"
        ),
    })  # fmt: skip

    for name, url, pid in pending:
        wait_until_answers(name, url, pid)
        log(f"{name} answers at {url}")

    fakes: list[tuple[Fake, str, int]] = []
    for fake in FAKES:
        if not _has_serve(fake.module):
            log(f"{fake.name}: {fake.module} has no serve() yet, skipped")
            continue
        port = next_port()
        url = f"http://{HOST}:{port}"
        argv = [py, "-m", "cloud.serve", fake.module, BIND, str(port)]
        pid = spawn(fake.name, argv, {"STEPOP_CLOUD_ENV_JSON": json.dumps(env)})
        fakes.append((fake, url, pid))
    for fake, url, pid in fakes:
        wait_until_answers(fake.name, url + "/_fake/health", pid)
        log(f"{fake.name} answers at {url}")
        env[fake.url_key] = url

    # ADLS Gen2 before Azurite, which has no hierarchical namespace (cloud.azure_dfs)
    port, azurite_port = next_port(), env["STEPOP_AZURITE_BLOB_ENDPOINT"].rsplit(":", 1)[1]
    adls = f"http://{HOST}:{port}/{AZURITE_ACCOUNT}"
    argv = [py, "-m", "cloud.azure_dfs", "--host", BIND, "--port", str(port),
            "--azurite", f"127.0.0.1:{azurite_port.split('/', 1)[0]}"]  # fmt: skip
    wait_until_answers("adls", adls, spawn("adls", argv))
    log(f"adls answers at {adls}")
    env["STEPOP_ADLS_BLOB_ENDPOINT"] = adls

    env = derived(env)
    create_buckets(env, DEMO_BUCKET)
    create_build_project(env)
    write_env(env)
    log(f"wrote {ENV_FILE}")
    return env


def down() -> None:
    """Stop every piece (fakes first, so they stop their jobs), leftovers, and containers."""
    pids = STATE / "pids"
    if pids.exists():
        order = [f.name for f in FAKES]
        files = sorted(pids.glob("*.pid"), key=lambda p: (p.stem not in order, p.stem))
        for pidfile in files:
            with contextlib.suppress(ValueError, OSError):
                stop_group(int(pidfile.read_text().strip()), grace=10)
                log(f"stopped {pidfile.stem}")
            pidfile.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            pids.rmdir()
    jobs = STATE / "jobs"
    if jobs.exists():
        for pidfile in jobs.rglob("*.pid"):
            with contextlib.suppress(ValueError, OSError):
                stop_group(int(pidfile.read_text().strip()), grace=2)
    remove_containers()
    ENV_FILE.unlink(missing_ok=True)


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
    parser = argparse.ArgumentParser(prog="python -m cloud.stack", description=_DESCRIPTION)
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
