"""Airflow's services as processes, on a private PostgreSQL: what docker-compose.yaml runs.

``postgres(dir)`` starts a private cluster on loopback (``scripts/postgres.sh``);
``AirflowServices`` runs ``airflow db migrate`` and then the api-server, scheduler (LocalExecutor),
dag-processor and triggerer, each in its own session with its log under ``<home>/services/``.
The tests use it; a benchmark that needs a real deployment can too.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.waiting import free_port, wait_for

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
SERVICES = ("api-server", "scheduler", "dag-processor", "triggerer")


@contextlib.contextmanager
def postgres(directory: Path) -> Iterator[str]:
    """A private PostgreSQL cluster under ``directory``; yields its SQLAlchemy URL.

    As root the server runs as ``postgres``, which must be able to reach ``directory``: keep it
    out of 0700 directories (pytest's tmp_path is one).
    """
    script = str(REPO / "scripts" / "postgres.sh")
    up = subprocess.run(
        [script, "up", str(directory), str(free_port())], capture_output=True, text=True
    )
    if up.returncode:
        raise RuntimeError(f"scripts/postgres.sh up failed:\n{up.stderr}")
    url = up.stdout.strip()
    try:
        yield url
    finally:
        subprocess.run([script, "down", str(directory)], check=False, capture_output=True)


class Api:
    """The REST API with a token of the simple auth manager (every user an admin)."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.token = self._call("GET", "/auth/token", auth=False)["access_token"]

    def _call(self, method: str, path: str, body: Any = None, auth: bool = True) -> Any:
        request = urllib.request.Request(
            self.base + path,
            method=method,
            data=json.dumps(body).encode() if body is not None else None,
            headers={"Content-Type": "application/json"},
        )
        if auth:
            request.add_header("Authorization", f"Bearer {self.token}")
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read() or b"null")

    def get(self, path: str) -> Any:
        return self._call("GET", path)

    def post(self, path: str, body: Any) -> Any:
        return self._call("POST", path, body)

    def patch(self, path: str, body: Any) -> Any:
        return self._call("PATCH", path, body)


class AirflowServices:
    """api-server, scheduler, dag-processor and triggerer of one AIRFLOW_HOME."""

    def __init__(self, home: Path, db_url: str, dags: Path, extra_env: dict[str, str]) -> None:
        self.home = home
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
        env.update(extra_env)
        env.update(
            AIRFLOW_HOME=str(home),
            PATH=f"{BIN}:{env.get('PATH', '')}",
            AIRFLOW__CORE__LOAD_EXAMPLES="False",
            AIRFLOW__CORE__DAGS_FOLDER=str(dags),
            AIRFLOW__CORE__EXECUTOR="LocalExecutor",
            AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=db_url,
            AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS="True",
            AIRFLOW__API__PORT=str(self.port),
            AIRFLOW__API__BASE_URL=self.url,
            AIRFLOW__CORE__EXECUTION_API_SERVER_URL=f"{self.url}/execution/",
            AIRFLOW__API_AUTH__JWT_SECRET="stepop-test-only",  # one secret for every service
            AIRFLOW__SCHEDULER__STANDALONE_DAG_PROCESSOR="True",
            AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL="5",
        )
        self.env = env
        self.processes: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, timeout: float = 240) -> Api:
        """Migrate the DB, start the four services, wait until all report healthy."""
        (self.home / "services").mkdir(parents=True, exist_ok=True)
        migrate = subprocess.run(
            ["airflow", "db", "migrate"], env=self.env, capture_output=True, text=True
        )
        if migrate.returncode:
            raise AssertionError(f"airflow db migrate failed:\n{migrate.stderr[-3000:]}")
        for name in SERVICES:
            with open(self.home / "services" / f"{name}.log", "wb") as log:
                self.processes[name] = subprocess.Popen(
                    ["airflow", name],
                    env=self.env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
        api = self._wait_ok("the API server", lambda: Api(self.url), timeout)

        def healthy() -> bool:
            health = api.get("/api/v2/monitor/health")
            parts = ("metadatabase", "scheduler", "triggerer", "dag_processor")
            return all(health[p]["status"] == "healthy" for p in parts)

        self._wait_ok("every service to report healthy", healthy, timeout)
        return api

    def _wait_ok(self, what: str, check: Any, timeout: float) -> Any:
        def guarded() -> Any:
            dead = [n for n, p in self.processes.items() if p.poll() is not None]
            if dead:
                raise RuntimeError(f"{dead} exited; logs in {self.home / 'services'}")
            return check()

        try:
            return wait_for(guarded, timeout, what, tolerate=(OSError, KeyError), interval=0.5)
        except RuntimeError as exc:
            raise AssertionError(str(exc)) from exc

    def stop(self) -> None:
        """SIGTERM each service's process group; SIGKILL what is left after 30 s."""
        for process in self.processes.values():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
        for process in self.processes.values():
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait()


@contextlib.contextmanager
def airflow_deployment(
    base: Path, dags: Path, extra_env: dict[str, str]
) -> Iterator[tuple[Api, Path]]:
    """Airflow's four services on a private PostgreSQL under ``base`` (``base`` must not be a
    0700 directory: the server runs as ``postgres`` when we are root); yields the REST API and
    the AIRFLOW_HOME. Everything is stopped on exit; ``base`` is left to the caller."""
    with postgres(base / "pg") as db_url:
        services = AirflowServices(base / "home", db_url, dags, extra_env)
        try:
            yield services.start(), base / "home"
        finally:
            services.stop()
