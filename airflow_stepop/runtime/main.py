"""Runs one step inside the job: spec in, result manifest (or error document) out."""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib
import inspect
import json
import os
import signal
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from airflow_stepop.runtime import code_tree, source_lines, values
from airflow_stepop.runtime import spec as specs
from airflow_stepop.runtime.cache import DiskCache, max_bytes_from_env
from airflow_stepop.runtime.private import job_cache_root
from airflow_stepop.runtime.spec import (
    BUNDLE_CALLABLE,
    BUNDLE_CODE_DIR,
    BUNDLE_DEPS_DIR,
    BUNDLE_SOURCES,
    MAX_RUNTIME_ENV,
    MAX_RUNTIME_EXIT_CODE,
)
from airflow_stepop.runtime.storage import Storage, join

OUTPUT_URI_ENV = "STEPOP_OUTPUT_URI"
# After its limit, how long a step that swallows StepTimedOut (or never returns to Python)
# runs before the kernel ends it (SIGALRM's default action terminates the process): this, or
# the limit itself if shorter.
MAX_RUNTIME_KILL_GRACE_S = 30


class StepStopped(BaseException):  # noqa: N818 - like KeyboardInterrupt, not an error of the step
    """The job was asked to stop (SIGTERM from the backend or the service)."""


class StepTimedOut(StepStopped):
    """The job ran past its max_runtime (``STEPOP_MAX_RUNTIME_S``) and the runtime ended it."""


class CodeBundleError(RuntimeError):
    """The code bundle is missing or is not the one the spec names."""


class _StopSignal:
    """The SIGTERM and SIGALRM handler: the first signal raises StepStopped (SIGALRM, the
    job's max_runtime: StepTimedOut) in the step; later ones do not.

    A stop often arrives more than once (a service's entry script and the local supervisor
    each forward it, a stop request and a timeout cross). Raising again would interrupt the
    step's own clean-up or the runtime's failure report (error.json) with a second exception.
    Later SIGTERMs are ignored: a step that swallows StepStopped keeps running until the
    backend's grace period ends and it is killed (SIGKILL), never longer. After its max_runtime
    the runtime is its own backstop: SIGALRM is re-armed with its default action, which ends
    the process ``MAX_RUNTIME_KILL_GRACE_S`` later (at most the limit again) whatever it is
    doing. ``disarm()`` makes even the first signal a no-op, while the runtime writes its
    report and exits.
    """

    def __init__(self, max_runtime_s: int | None = None) -> None:
        self.armed = True
        self.max_runtime_s = max_runtime_s
        signal.signal(signal.SIGTERM, self)
        if max_runtime_s:
            signal.signal(signal.SIGALRM, self)
            signal.alarm(max_runtime_s)

    def __call__(self, signum: int, frame: Any) -> None:
        if signum == signal.SIGALRM:
            signal.signal(signal.SIGALRM, signal.SIG_DFL)
            signal.alarm(min(MAX_RUNTIME_KILL_GRACE_S, self.max_runtime_s or 1))
        if not self.armed:
            return
        self.armed = False
        if signum == signal.SIGALRM:
            raise StepTimedOut(
                f"the job ran past its max_runtime of {self.max_runtime_s} s "
                f"(${MAX_RUNTIME_ENV}) and the runtime ended it"
            )
        raise StepStopped(
            "the job received SIGTERM (stopped by the user, a timeout or the service)"
        )

    def disarm(self) -> None:
        self.armed = False


def step_traceback(exc: BaseException) -> str:
    """The exception's traceback from the step's first frame: the runtime's own frames above
    it (``main``, ``run``) say nothing to the step's author. An error of the runtime itself
    (a bundle that does not match, say) keeps all its frames."""
    first = exc.__traceback__
    while first is not None and first.tb_frame.f_code.co_filename == __file__:
        first = first.tb_next
    return "".join(traceback.format_exception(type(exc), exc, first or exc.__traceback__))


def _max_runtime() -> int | None:
    """The job's own runtime limit from ``STEPOP_MAX_RUNTIME_S``, if its backend set one."""
    value = os.environ.get(MAX_RUNTIME_ENV, "")
    if not value:
        return None
    try:
        seconds = int(value)
    except ValueError:
        seconds = 0
    if seconds < 1:
        raise SystemExit(f"{MAX_RUNTIME_ENV}={value!r} must be a whole number of seconds >= 1")
    return seconds


class StepRun:
    """One execution of a spec: fetch, verify, import, call, write outputs, write the manifest."""

    def __init__(self, spec_uri: str, storage: Storage, output_uri: str | None = None) -> None:
        self.spec_uri = spec_uri
        # Where result.json, error.json and outputs/ go: the spec's directory unless the
        # backend names another place (e.g. a prefix the service uploads at the end).
        self.output_uri = output_uri or spec_uri.rsplit("/", 1)[0]
        self.storage = storage
        self.spec: dict[str, Any] = {}
        self.bundle: Path | None = None
        self._artifacts: DiskCache | None = None

    def run(self) -> dict[str, Any]:
        started = time.monotonic()
        self.spec = specs.check(json.loads(self._spec_bytes()))
        step = self.spec["step"]
        print(
            f"[stepop] step {step['dag_id']}.{step['task_id']} map_index={step['map_index']} "
            f"try={step['try_number']} on Python {sys.version.split()[0]}",
            flush=True,
        )
        self._check_python()
        self._install_code()
        function = self._load_callable()
        args = values.decode({"list": self.spec["args"]}, self._load_ref)
        kwargs = values.decode({"dict": self.spec["kwargs"]}, self._load_ref)
        result = function(*args, **kwargs)
        if inspect.iscoroutine(result):  # an ``async def`` step, run as Airflow runs an async @task
            import asyncio

            result = asyncio.run(result)
        manifest = {
            "spec_version": specs.SPEC_VERSION,
            "outputs": self._encode_outputs(result),
            "duration_s": round(time.monotonic() - started, 3),
        }
        self.storage.write_json(join(self.output_uri, specs.RESULT_NAME), manifest)
        return manifest

    def write_error(self, exc: BaseException) -> None:
        document = {
            "type": type(exc).__name__,
            "module": type(exc).__module__,
            "message": str(exc),
            "traceback": step_traceback(exc),
        }
        self.storage.write_json(join(self.output_uri, specs.ERROR_NAME), document)

    def _uses_pickle(self) -> bool:
        if self.spec["callable"]["kind"] == "pickle":
            return True
        return '"materializer": "cloudpickle"' in json.dumps(
            [self.spec["args"], self.spec["kwargs"]], sort_keys=True
        )

    def _check_python(self) -> None:
        packaged = self.spec["python"]
        if packaged != specs.python_version() and self._uses_pickle():
            raise values.PythonVersionMismatchError(
                f"This step was packaged by a worker on Python {packaged}, but the job runs "
                f"Python {specs.python_version()} ({sys.executable}), and the step travels as a "
                "pickle, which does not cross minor versions. Use a parent image with Python "
                f"{packaged} (DockerSettings.parent_image), or define the function at module level "
                "in a module that does not import Airflow so it is imported by name."
            )

    def _spec_bytes(self) -> bytes:
        """The spec's bytes, read once and, when the job's environment names their sha256 (the
        service stores it with the job), checked against it before anything parses them."""
        data = self.storage.read_bytes(self.spec_uri)
        expected = os.environ.get(specs.SPEC_SHA256_ENV, "").strip().lower()
        found = hashlib.sha256(data).hexdigest()
        if expected and found != expected:
            raise specs.SpecTamperedError(
                f"The step spec {self.spec_uri} has sha256 {found}, but the job was submitted "
                f"with {specs.SPEC_SHA256_ENV}={expected}: the spec was rewritten in the "
                "artifact root after the step was submitted. Refusing to run it; check who "
                "may write the artifact root, then run the task again."
            )
        return data

    def _install_code(self) -> None:
        """Extract the code bundle from the bytes that were verified (read once: a mounted
        bucket could change the file between a check and a second read) and put it on
        ``sys.path``."""
        code = self.spec["code"]
        try:
            data = self.storage.read_bytes(code["uri"])
        except FileNotFoundError:
            raise CodeBundleError(f"Code bundle {code['uri']} does not exist.") from None
        digest = hashlib.sha256(data).hexdigest()
        if digest != code["sha256"]:
            raise CodeBundleError(
                f"Code bundle {code['uri']} has sha256 {digest}, but the spec expects "
                f"{code['sha256']}: it was modified after the step was submitted."
            )
        cache = DiskCache(job_cache_root() / "code", max_bytes_from_env())
        target = code_tree.install(data, digest, cache)
        self.bundle = target
        for sub in (BUNDLE_CODE_DIR, BUNDLE_DEPS_DIR):
            directory = target / sub
            if directory.is_dir():
                sys.path.insert(0, str(directory))
        importlib.invalidate_caches()

    def _load_callable(self) -> Any:
        entry = self.spec["callable"]
        if entry["kind"] == "import":
            target: Any = importlib.import_module(entry["module"])
            for part in entry["qualname"].split("."):
                target = getattr(target, part)
            return target
        import cloudpickle

        assert self.bundle is not None
        source_lines.register(self.bundle / BUNDLE_SOURCES)
        return cloudpickle.loads((self.bundle / BUNDLE_CALLABLE).read_bytes())

    def _load_ref(self, ref: dict[str, Any]) -> Any:
        if self._artifacts is None:
            self._artifacts = DiskCache(job_cache_root() / "artifacts", max_bytes_from_env())
        return values.read_artifact(ref, self.storage, self._artifacts)

    def _write(self, value: Any, name: str) -> dict[str, Any]:
        uri = join(self.output_uri, specs.OUTPUTS_DIR, name)
        ref = values.write_artifact(value, uri, self.storage)
        if ref["materializer"] == "cloudpickle":  # say so when it was nearly JSON
            limit = int(self.spec.get("inline_limit_bytes", 64 * 1024))
            with contextlib.suppress(Exception):  # a note never fails a step that succeeded
                if note := values.pickled_json_note(value, name, limit):
                    print(note, flush=True)
        return ref

    def _encode_outputs(self, result: Any) -> dict[str, Any]:
        limit = int(self.spec.get("inline_limit_bytes", 64 * 1024))
        values.refuse_missing_paths(result)

        def encode(value: Any, name: str) -> dict[str, Any]:
            return values.encode(value, name=name, inline_limit=limit, write=self._write)

        if self.spec.get("multiple_outputs") and result is not None:  # None: no XCom, as @task
            if not isinstance(result, dict):
                raise TypeError(
                    f"multiple_outputs=True needs the function to return a dict with str keys, "
                    f"got {type(result).__name__}. Airflow also sets it from a '-> dict' return "
                    "annotation: fix the annotation or the value."
                )
            for key in result:
                if type(key) is not str:
                    raise TypeError(
                        f"multiple_outputs=True needs the function to return a dict with str "
                        f"keys, got the key {key!r} ({type(key).__name__}): each key names an "
                        "XCom."
                    )
            return {"dict": {key: encode(value, key) for key, value in result.items()}}
        if self.spec.get("mapped_downstream"):
            # a task mapped over this result needs a list or dict in the XCom, whatever its size:
            # each item is decided on its own (inline, or an artifact of its own)
            if isinstance(result, (list, tuple)):
                items = [encode(item, f"return_value.{i}") for i, item in enumerate(result)]
                return {"list": items, "tuple": isinstance(result, tuple)}
            if isinstance(result, dict) and all(type(k) is str for k in result):
                items = {k: encode(v, f"return_value.{k}") for k, v in result.items()}
                return {"dict": items}
        return encode(result, "return_value")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m airflow_stepop.runtime")
    parser.add_argument("spec_uri", help="URI of the step spec (spec.json) to run")
    parser.add_argument(
        "--output-uri",
        default=os.environ.get(OUTPUT_URI_ENV),
        help=f"where results go (default: the spec's directory; env {OUTPUT_URI_ENV})",
    )
    options = parser.parse_args(argv)
    stop = _StopSignal(_max_runtime())
    run = StepRun(options.spec_uri, Storage.from_env(), options.output_uri)
    try:
        manifest = run.run()
    except BaseException as exc:  # the error document is the step's failure report
        stop.disarm()  # a SIGTERM from now on must not cut the report short
        print(step_traceback(exc), end="", file=sys.stderr, flush=True)  # as error.json has it
        try:
            run.write_error(exc)
        except Exception:
            traceback.print_exc()
        if isinstance(exc, StepTimedOut):
            return MAX_RUNTIME_EXIT_CODE
        return 143 if isinstance(exc, StepStopped) else 1
    stop.disarm()  # result.json is written: the step is done
    print(f"[stepop] step finished in {manifest['duration_s']}s", flush=True)
    return 0
