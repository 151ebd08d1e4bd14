"""The CodeBuild fake's service: AWS JSON 1.1 dispatch, CodeBuild's error shape, reset,
shutdown, and its entry points ``serve`` (the stack's), ``start`` (tests), ``stack_env`` and
``main`` (``python -m cloud.codebuild``).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from typing import Any

from cloud.codebuild.operations import BuildOperations
from cloud.codebuild.validation import ApiError
from cloud.fake_http import FakeServer, Request, Response

TARGET_PREFIX = "CodeBuild_20161006"
Operation = Callable[[dict[str, Any], dict[str, str]], dict[str, Any]]


class CodeBuildFake(BuildOperations):
    """The fake: dispatch on ``X-Amz-Target``, the error shape, reset and shutdown."""

    def __init__(self, env: dict[str, str]) -> None:
        super().__init__(env)
        self.operations: dict[str, Operation] = {
            "CreateProject": self.create_project,
            "BatchGetProjects": self.batch_get_projects,
            "ListProjects": self.list_projects,
            "StartBuild": self.start_build,
            "BatchGetBuilds": self.batch_get_builds,
            "StopBuild": self.stop_build,
            "ListBuildsForProject": self.list_builds_for_project,
        }

    def error_response(self, status: int, message: str, kind: str) -> Response:
        code = {
            "throttle": "ThrottlingException",
            "not_found": "UnknownOperationException",
            "bad": "InvalidInputException",
        }.get(kind, "ServiceUnavailableException" if status == 503 else "InternalFailure")
        if kind == "throttle":
            status, message = 400, "Rate exceeded"
        return self._error(ApiError(code, message, status))

    @staticmethod
    def _error(err: ApiError) -> Response:
        return Response(
            err.status,
            {"__type": err.code, "message": err.message},
            headers={"x-amzn-ErrorType": err.code, "x-amzn-RequestId": str(uuid.uuid4())},
            content_type="application/x-amz-json-1.1",
        )

    def dispatch(self, req: Request) -> Response:
        if req.path.startswith("/_fake/"):
            resp = self.control(req)
            return resp if resp is not None else Response(404, {"error": "no such control"})
        prefix, _, operation = req.headers.get("x-amz-target", "").partition(".")
        if req.method != "POST" or prefix != TARGET_PREFIX or not operation:
            return self._error(ApiError("UnknownOperationException", "Unknown operation", 400))
        self.count(operation)
        fault = self.faults.request_fault(operation)
        if fault is not None:
            kind = "throttle" if fault["kind"] == "throttle" else "error"
            return self.error_response(int(fault.get("status", 503)), "injected failure", kind)
        handler = self.operations.get(operation)
        if handler is None:
            msg = f"{operation} is not implemented by the CodeBuild fake"
            return self._error(ApiError("UnknownOperationException", msg, 400))
        try:
            body = req.json() or {}
            if not isinstance(body, dict):
                raise ApiError("SerializationException", "Expected a JSON object")
            answer = handler(body, req.headers)
        except ValueError:
            return self._error(ApiError("SerializationException", "Malformed JSON"))
        except ApiError as err:
            return self._error(err)
        return Response(200, answer, content_type="application/x-amz-json-1.1")

    def _stop_builds(self) -> None:
        """Stop every running build and wait for its thread."""
        builds = self.running()
        for build in builds:
            build.stop_requested.set()
        for build in builds:
            if build.thread is not None:
                build.thread.join(timeout=self.stop_grace + 15)

    def reset(self, jobs: bool) -> None:
        if not jobs:
            return
        self._stop_builds()
        with self.store_lock:  # projects stay: they are set-up, not jobs
            self.builds.clear()
            self.tokens.clear()
            for project in self.projects.values():
                project.builds = 0
        self.log_sink.forget_created()

    def shutdown(self) -> None:
        self._stop_builds()
        self.log_sink.close()


def serve(host: str, port: int, env: dict[str, str]) -> None:
    """Serve until SIGTERM/SIGINT, then stop every running build (cloud.stack's entry)."""
    server = FakeServer(CodeBuildFake({**os.environ, **env}), host, port)
    print(f"[codebuild] serving on {server.url}", flush=True)
    server.serve_until_interrupted()


def start(env: dict[str, str], host: str = "127.0.0.1", port: int = 0) -> FakeServer:
    """Start the fake in this process (tests); ``.shutdown()`` stops it and its builds."""
    return FakeServer(CodeBuildFake({**os.environ, **env}), host, port)


def stack_env(url: str, env: dict[str, str]) -> dict[str, str]:
    """Extra ``.cloud/env`` lines: boto3's per-service endpoint for CodeBuild."""
    return {"AWS_ENDPOINT_URL_CODEBUILD": url}


def main(argv: list[str] | None = None) -> None:
    """``python -m cloud.codebuild [--host H] [--port P]``, against the stack's moto."""
    import argparse

    from cloud.stack import read_env

    parser = argparse.ArgumentParser(prog="python -m cloud.codebuild", description=main.__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    serve(args.host, args.port, read_env())
