"""The services of ``bench/many_jobs.py``: each backend's fake (or local stand-in) and counters.

Each ``*_service`` starts what its backend needs for the bench (a private fake in timer mode, or
the local backend with a stand-in interpreter), points the connection at it, and says how to
count its status, log and final calls. ``SERVICES`` maps ``--backend`` names to them.
"""

from __future__ import annotations

import collections
import contextlib
import http.client
import http.server
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.airflow_rig import wait

ROOT = Path(__file__).resolve().parents[1]
ROLE = "arn:aws:iam::123456789012:role/stepop-bench"
BUCKET = "stepop-bench"


class CountingProxy(http.server.ThreadingHTTPServer):
    """Forwards AWS JSON calls to ``target`` and records (time, X-Amz-Target operation)."""

    def __init__(self, target: str) -> None:
        self.target = target.split("://", 1)[1].rstrip("/")
        self.calls: list[tuple[float, str]] = []
        super().__init__(("127.0.0.1", 0), _Forward)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Forward(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: CountingProxy

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        operation = (self.headers.get("X-Amz-Target") or "?").rsplit(".", 1)[-1]
        self.server.calls.append((time.time(), operation))
        upstream = http.client.HTTPConnection(self.server.target, timeout=60)
        try:
            upstream.request("POST", self.path, body, dict(self.headers.items()))
            answer = upstream.getresponse()
            status, headers, data = answer.status, answer.getheaders(), answer.read()
        except (OSError, http.client.HTTPException) as exc:  # counted, and a 503 to retry
            self.server.calls.append((time.time(), f"proxy error {type(exc).__name__}"))
            status, headers, data = 503, [], b'{"__type": "ServiceUnavailableException"}'
        finally:
            upstream.close()
        self.send_response(status)
        for name, value in headers:
            if name.lower() not in ("content-length", "transfer-encoding", "connection"):
                self.send_header(name, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        return None


@dataclass
class Service:
    """One backend's side of the bench: its operator arguments, submitter and call counts."""

    kind: str
    operator_kwargs: dict[str, Any]
    make_submitter: Callable[[Any], Any]  # operator -> the backend whose submit starts a job
    release: Callable[[float], None]  # every job ends at this time.time()
    counts: Callable[[], dict[str, int]]  # service calls (local: file opens) so far, by name
    status_ops: tuple[str, ...] = ("ListTrainingJobs", "DescribeTrainingJob")
    log_ops: tuple[str, ...] = ("DescribeLogStreams", "GetLogEvents")
    final_ops: tuple[str, ...] = ("DescribeTrainingJob",)
    close: Callable[[], None] = lambda: None
    notes: list[str] = field(default_factory=list)


def start_fake(name: str, argv: list[str], env: dict[str, str], work: Path) -> tuple[Any, str]:
    """``python -m cloud.<name> --port 0 ...`` of the bench's own: (process, its URL)."""
    log = work / f"fake-{name}.log"
    with open(log, "w") as out:  # a file, not a pipe: a full pipe would stall the fake
        fake = subprocess.Popen([sys.executable, "-m", f"cloud.{name}", "--port", "0", *argv],
                                cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)  # fmt: skip

    def serving() -> str:
        if fake.poll() is not None:
            sys.exit(f"the {name} fake did not start: {log.read_text()[-2000:]}")
        return next((x for x in log.read_text().splitlines() if " on http" in x), "")

    line = wait(f"the {name} fake", serving, timeout=60, every=0.2)
    return fake, line.split(" on ", 1)[1].split()[0]


def stop_fake(fake: Any) -> None:
    fake.terminate()
    try:
        fake.wait(timeout=60)
    except subprocess.TimeoutExpired:
        fake.kill()


def _shared(env: dict[str, str]) -> dict[str, str]:
    """`make cloud-up`'s environment (storage, logs), less its connections, into ``env``."""
    from cloud import stack

    shared = stack.read_env()
    if not shared or not stack.running(shared):
        sys.exit("The emulated cloud is not running: make cloud-up")
    env.update({k: v for k, v in shared.items() if not k.startswith("AIRFLOW_CONN_")})
    return shared


def _timer_env(env: dict[str, str], end_file: Path, **extra: str) -> dict[str, str]:
    """A fake's environment: its jobs in timer mode, all ending at the time in ``end_file``."""
    return {**os.environ, **env, "STEPOP_FAKE_MODE": "timer",
            "STEPOP_FAKE_TIMER_END_FILE": str(end_file), **extra}  # fmt: skip


def sagemaker_service(work: Path, env: dict[str, str]) -> Service:
    """A private SageMaker fake in timer mode; S3 and CloudWatch Logs of `make cloud-up`."""
    from cloud.control import FakeControl

    shared = _shared(env)
    end_file = work / "jobs-end"
    fake_env = _timer_env(env, end_file, STEPOP_SAGEMAKER_MODE="timer")
    fake, url = start_fake("sagemaker", [], fake_env, work)
    logs = CountingProxy(shared["STEPOP_MOTO_ENDPOINT"])
    connection = json.loads(shared["AIRFLOW_CONN_AWS_DEFAULT"])
    services = connection["extra"].setdefault("service_config", {})
    services.setdefault("sagemaker", {})["endpoint_url"] = url
    services.setdefault("logs", {})["endpoint_url"] = logs.url
    env["AIRFLOW_CONN_AWS_DEFAULT"] = json.dumps(connection)
    env["AWS_ENDPOINT_URL_SAGEMAKER"] = url
    control = FakeControl(url)
    registry = shared.get("STEPOP_REGISTRY", "127.0.0.1:5000")
    image = f"{registry}/stepop-base/python:3.11-bookworm"

    def counts() -> dict[str, int]:
        return {**control.counters(), **collections.Counter(op for _, op in logs.calls)}

    def close() -> None:
        logs.shutdown()
        stop_fake(fake)

    def submitter(operator: Any) -> Any:
        import boto3

        s3 = boto3.client("s3", endpoint_url=shared["STEPOP_MOTO_ENDPOINT"])
        with contextlib.suppress(s3.exceptions.BucketAlreadyOwnedByYou):
            s3.create_bucket(Bucket=BUCKET)
        return operator.make_backend()

    return Service(
        kind="sagemaker",
        operator_kwargs={"role": ROLE, "image_uri": image, "instance_type": "ml.m5.large",
                         "artifact_root": f"s3://{BUCKET}/many-jobs/{work.name}",
                         # its registry stands in for ECR, the only place SageMaker pulls from
                         "image_repository": f"{registry}/stepop-bench-env"},  # fmt: skip
        make_submitter=submitter,
        release=lambda end: end_file.write_text(repr(end)),
        counts=counts,
        close=close,
        notes=["SageMaker: a private fake (cloud.sagemaker) in timer mode (no process; every job "
               "ends at the time the bench sets); S3 and CloudWatch Logs: moto of "
               "`make cloud-up`, logs calls counted by a proxy"],
    )  # fmt: skip


def vertex_service(work: Path, env: dict[str, str]) -> Service:
    """A private Vertex AI fake (CustomJobs and Cloud Logging) in timer mode; GCS of cloud-up."""
    from cloud.control import FakeControl
    from cloud.vertex.gcs import storage_client

    shared = _shared(env)
    end_file = work / "jobs-end-vertex"
    (work / "vertex-jobs").mkdir()
    fake, url = start_fake("vertex", ["--mode", "timer", "--tmp-base", str(work / "vertex-jobs")],
                           _timer_env(env, end_file), work)  # fmt: skip
    connection = json.loads(shared["AIRFLOW_CONN_GOOGLE_CLOUD_DEFAULT"])
    connection["extra"].update(vertex_endpoint=url, logging_endpoint=url)
    env["AIRFLOW_CONN_GOOGLE_CLOUD_DEFAULT"] = json.dumps(connection)
    control = FakeControl(url)
    registry = shared.get("STEPOP_REGISTRY", "127.0.0.1:5000")

    def submitter(operator: Any) -> Any:
        gcs = storage_client(shared["STORAGE_EMULATOR_HOST"])
        if gcs.lookup_bucket(BUCKET) is None:
            gcs.create_bucket(BUCKET)
        return operator.make_backend()

    return Service(
        kind="vertex",
        operator_kwargs={"image_uri": f"{registry}/stepop-base/python:3.11-bookworm",
                         "machine_type": "n1-standard-4",
                         "artifact_root": f"gs://{BUCKET}/many-jobs/{work.name}"},  # fmt: skip
        make_submitter=submitter,
        release=lambda end: end_file.write_text(repr(end)),
        counts=control.counters,
        status_ops=("ListCustomJobs", "GetCustomJob"),
        log_ops=("ListLogEntries",),
        final_ops=("GetCustomJob",),
        close=lambda: stop_fake(fake),
        notes=["Vertex AI: a private fake (cloud.vertex: CustomJobs and Cloud Logging, its "
               "counters) in timer mode; GCS: the emulator of `make cloud-up`"],
    )  # fmt: skip


def azureml_service(work: Path, env: dict[str, str]) -> Service:
    """A private Azure ML fake (ARM jobs, run history, log files) in timer mode; Azurite."""
    from cloud import azureml
    from cloud.control import FakeControl

    shared = _shared(env)
    end_file = work / "jobs-end-azureml"
    tls = work / "azureml-tls"
    (work / "azureml-jobs").mkdir()
    argv = ["--mode", "timer", "--tmp-base", str(work / "azureml-jobs"), "--tls-dir", str(tls),
            "--storage-connection-string", shared["AZURE_STORAGE_CONNECTION_STRING"]]  # fmt: skip
    fake, url = start_fake("azureml", argv, _timer_env(env, end_file), work)
    connection = json.loads(azureml.stack_env(url, {})["AIRFLOW_CONN_AZUREML_DEFAULT"])
    connection["extra"].update(endpoint=url.replace("http://", "https://", 1),
                               ca_bundle=str(tls / "cert.pem"))  # fmt: skip
    env["AIRFLOW_CONN_AZUREML_DEFAULT"] = json.dumps(connection)
    control = FakeControl(url)
    registry = shared.get("STEPOP_REGISTRY", "127.0.0.1:5000")
    root = f"abfs://azureml-blobstore/many-jobs/{work.name}"  # the workspace's default store

    return Service(
        kind="azureml",
        operator_kwargs={"image_uri": f"{registry}/stepop-base/python:3.11-bookworm",
                         "instance_type": "Standard_DS3_v2", "artifact_root": root},  # fmt: skip
        make_submitter=lambda operator: operator.make_backend(),
        release=lambda end: end_file.write_text(repr(end)),
        counts=control.counters,
        status_ops=("Jobs_List", "Jobs_Get"),
        log_ops=("Runs_GetDetails", "FakeLogFile"),
        final_ops=("Jobs_Get",),
        close=lambda: stop_fake(fake),
        notes=["Azure ML: a private fake (cloud.azureml: ARM jobs, run history and log files, its "
               "counters) in timer mode; Blob Storage: Azurite of `make cloud-up`"],
    )  # fmt: skip


def kubernetes_service(work: Path, env: dict[str, str]) -> Service:
    """A private Kubernetes fake (cloud.kubernetes) whose pods run in timer mode; S3 of
    `make cloud-up` (moto) as the artifact store."""
    from cloud.control import FakeControl
    from cloud.kubernetes.server import stack_env

    shared = _shared(env)
    end_file = work / "jobs-end-kubernetes"
    fake, url = start_fake("kubernetes", ["--mode", "timer"], _timer_env(env, end_file), work)
    env["AIRFLOW_CONN_KUBERNETES_DEFAULT"] = stack_env(url, {})["AIRFLOW_CONN_KUBERNETES_DEFAULT"]
    env["AIRFLOW_CONN_AWS_DEFAULT"] = shared["AIRFLOW_CONN_AWS_DEFAULT"]  # S3: moto
    control = FakeControl(url)
    registry = shared.get("STEPOP_REGISTRY", "127.0.0.1:5000")

    def submitter(operator: Any) -> Any:
        import boto3

        s3 = boto3.client("s3", endpoint_url=shared["STEPOP_MOTO_ENDPOINT"])
        with contextlib.suppress(s3.exceptions.BucketAlreadyOwnedByYou):
            s3.create_bucket(Bucket=BUCKET)
        return operator.make_backend()

    return Service(
        kind="kubernetes",
        operator_kwargs={"image_uri": f"{registry}/stepop-base/python:3.11-bookworm",
                         "artifact_root": f"s3://{BUCKET}/many-jobs/{work.name}"},  # fmt: skip
        make_submitter=submitter,
        release=lambda end: end_file.write_text(repr(end)),
        counts=control.counters,
        # the poller's two Lists per namespace and 100 tasks; a Job's GET (with a List of its
        # pods) only for a Job the Lists left out, or a finished one's facts
        status_ops=("listBatchV1NamespacedJob", "listCoreV1NamespacedPod",
                    "readBatchV1NamespacedJob"),  # fmt: skip
        log_ops=("readCoreV1NamespacedPodLog",),
        final_ops=("readBatchV1NamespacedJob",),
        close=lambda: stop_fake(fake),
        notes=["Kubernetes: a private fake (cloud.kubernetes: the API server, job controller, "
               "scheduler and kubelets, its counters by OpenAPI operation id) whose pods run in "
               "timer mode (no process; every pod ends at the time the bench sets); S3: moto of "
               "`make cloud-up`"],
    )  # fmt: skip


class FileOpens:
    """Counts opens of files in watched directories (inotify): the local poller's record reads.

    The triggerer is not touched: the kernel reports each open of a job's ``lock`` (its state:
    ``supervisor_alive``), ``output.log`` (its log relay) and ``exit_code``, by file name.
    """

    IN_OPEN, IN_Q_OVERFLOW = 0x20, 0x4000

    def __init__(self) -> None:
        import ctypes

        self.libc = ctypes.CDLL(None, use_errno=True)
        self.fd = self.libc.inotify_init()
        if self.fd < 0:
            sys.exit(f"inotify_init failed: errno {ctypes.get_errno()}")
        self.opens: collections.Counter[str] = collections.Counter()
        threading.Thread(target=self._read, daemon=True).start()

    def watch(self, directory: Path) -> None:
        if self.libc.inotify_add_watch(self.fd, str(directory).encode(), self.IN_OPEN) < 0:
            sys.exit(f"inotify_add_watch {directory} failed")

    def _read(self) -> None:
        import struct

        while True:
            try:
                data = os.read(self.fd, 1 << 16)
            except OSError:
                return
            at = 0
            while at < len(data):
                _, mask, _, size = struct.unpack_from("iIII", data, at)
                name = data[at + 16 : at + 16 + size].rstrip(b"\0").decode()
                at += 16 + size
                self.opens["inotify overflow" if mask & self.IN_Q_OVERFLOW else name] += 1


def local_service(work: Path, env: dict[str, str]) -> Service:
    """The local backend with timer jobs (cloud.runner.write_local_timer as its interpreter)."""
    from cloud.runner import write_local_timer

    fifo = work / "jobs-release"
    os.mkfifo(fifo)
    held = os.open(fifo, os.O_RDWR)  # every job ends when this last writer closes
    timer = write_local_timer(str(work / "local-timer.sh"), fifo=str(fifo))

    def release(end: float) -> None:
        threading.Timer(max(0.0, end - time.time()), os.close, (held,)).start()

    opens = FileOpens()

    class Submitter:  # the job's directory is watched from its submit on
        def __init__(self, operator: Any) -> None:
            from airflow_stepop.backends.local.backend import LocalBackend

            jobs_dir = str(operator.make_backend().jobs_dir)
            self.backend = LocalBackend(jobs_dir=jobs_dir, python=timer)

        def submit(self, request: Any) -> dict[str, Any]:
            handle = self.backend.submit(request)
            opens.watch(Path(handle["job_dir"]))
            return handle

    return Service(
        kind="local",
        operator_kwargs={"artifact_root": f"file://{work}/artifacts"},
        make_submitter=Submitter,
        release=release,
        counts=lambda: dict(opens.opens),
        status_ops=("lock",),
        log_ops=("output.log",),
        final_ops=("exit_code",),
        notes=[f"local: jobs submitted by LocalBackend(python={timer}): one sh and one cat of a "
               "FIFO per job, with the supervisor's lock, output.log and exit_code, all ending "
               "at the time the bench sets; the triggers carry the operator's own backend (its "
               "interpreter), as in production"],
    )  # fmt: skip


SERVICES: dict[str, Callable[[Path, dict[str, str]], Service]] = {
    "sagemaker": sagemaker_service,
    "vertex": vertex_service,
    "azureml": azureml_service,
    "kubernetes": kubernetes_service,
    "local": local_service,
}
