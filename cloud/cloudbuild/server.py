"""The Cloud Build fake's service: its routes on one router, Google's error shapes, the build log
as text, reset, shutdown, and its entry points ``serve`` (the stack's), ``start`` (tests),
``stack_env`` and ``main`` (``python -m cloud.cloudbuild``).
"""

from __future__ import annotations

import os

from cloud.cloudbuild.api import ApiError, google_error
from cloud.cloudbuild.routes import BuildRoutes
from cloud.fake_http import FakeServer, Request, Response

LOGS_PATH = "/_fake/logs/"


class CloudBuildFake(BuildRoutes):
    """The fake: routes, errors, ``GET /_fake/logs/<build id>``, reset and shutdown."""

    def __init__(self, env: dict[str, str]) -> None:
        super().__init__(env)
        self.add_routes()

    def error_response(self, status: int, message: str, kind: str) -> Response:
        if kind == "throttle":
            message = (
                "Quota exceeded for quota metric 'Build and Operation Get requests' and limit "
                "'Build and Operation Get requests per minute' of service "
                "'cloudbuild.googleapis.com' for consumer 'project_number:123456789012'."
            )
        elif kind == "error":
            message = (
                "The service is currently unavailable."
                if status == 503
                else "Internal error encountered."
            )
        return google_error(status, message)

    def dispatch(self, req: Request) -> Response:
        if req.path.startswith(LOGS_PATH) and req.method == "GET":
            return self._log_text(req.path[len(LOGS_PATH) :])
        try:
            return super().dispatch(req)
        except ApiError as exc:
            return google_error(exc.code, exc.message, exc.status)

    def _log_text(self, build_id: str) -> Response:
        with self.lock:
            job = self.jobs.get(build_id)
        if job is None:
            return google_error(404, f'Build "{build_id}" not found')
        text, _ = job.log.text(cutoff=None)
        return Response(200, raw=text.encode(), content_type="text/plain; charset=utf-8")

    def _stop_builds(self) -> None:
        """Cancel every build not finished and wait for its thread."""
        jobs = self.running()
        for job in jobs:
            job.cancel.set()
        for job in jobs:
            if job.thread is not None:
                job.thread.join(timeout=self.stop_grace + 15)

    def reset(self, jobs: bool) -> None:
        if not jobs:
            return
        self._stop_builds()
        with self.lock:
            self.jobs.clear()

    def shutdown(self) -> None:
        self.stopping.set()
        self._stop_builds()
        self.uploader.close()


def serve(host: str, port: int, env: dict[str, str]) -> None:
    """Serve until SIGTERM/SIGINT, then cancel every running build (cloud.stack's entry)."""
    server = FakeServer(CloudBuildFake({**os.environ, **env}), host, port)
    print(f"[cloudbuild] serving on {server.url}", flush=True)
    server.serve_until_interrupted()


def start(env: dict[str, str], host: str = "127.0.0.1", port: int = 0) -> FakeServer:
    """Start the fake in this process (tests); ``.shutdown()`` stops it and its builds."""
    return FakeServer(CloudBuildFake({**os.environ, **env}), host, port)


def stack_env(url: str, env: dict[str, str]) -> dict[str, str]:
    """No extra ``.cloud/env`` lines: the Google connection's ``cloudbuild_endpoint`` says it."""
    return {}


def main(argv: list[str] | None = None) -> None:
    """``python -m cloud.cloudbuild [--host H] [--port P]``, against the stack's GCS emulator."""
    import argparse

    from cloud.stack import read_env

    parser = argparse.ArgumentParser(prog="python -m cloud.cloudbuild", description=main.__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    serve(args.host, args.port, read_env())
