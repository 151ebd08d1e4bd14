"""Many deferred steps in one real triggerer: status and log calls per poll interval, CPU share.

What is real: PostgreSQL (Debian's package, ``scripts/postgres.sh``) as Airflow's metadata
database, a private AIRFLOW_HOME (``airflow db migrate``), a DAG of N mapped steps serialized by
``airflow dags reserialize``, one dag run created by Airflow's own ``create_dagrun``, and for
each task instance what a worker does: the Execution API's ``run`` call, the step's own
staging and ``backend.submit`` (``BaseStepOperator._prepare``, as in ``execute()``), the trigger
the operator defers with (``_trigger``) and the Execution API's ``defer`` call with the message
the task runner builds (``_defer_task``): the Trigger rows are those a real defer writes. Then
one ``airflow triggerer --capacity N`` process runs every trigger until it fires
(``bench/airflow_rig.py``).

What is simulated: the jobs run no code and end when the bench says (the SageMaker, Vertex AI
and Azure ML fakes' timer mode with ``STEPOP_FAKE_TIMER_END_FILE``, each fake the bench's own,
started with ``python -m cloud.<service>``; for the local backend a stand-in interpreter from
``cloud.runner.write_local_timer``: one ``sh`` holding the job's lock and one ``cat`` of a FIFO
per job), so that a thousand fit on a 2-core machine and deferring them, which takes minutes
here, does not eat into the measurement; the scheduler only through the rows it would write (the
dag run, queued task instances); no worker resumes the tasks after their triggers fire.

Measured: service calls from the fakes' counters (sampled each second; for SageMaker the
CloudWatch Logs calls through a counting proxy on the connection's ``logs`` endpoint): status
calls (SageMaker ListTrainingJobs/DescribeTrainingJob, Vertex ListCustomJobs/GetCustomJob, Azure
ML Jobs_List/Jobs_Get: list pages vs describes) and log calls (GetLogEvents...,
ListLogEntries, Runs_GetDetails and log file reads), and the CPU time of the triggerer process
and its children (psutil, each second). The steady state starts ``--ramp`` poll intervals after
every trigger started watching its job (its trigger log says so; the first polls come sooner)
and lasts ``--steady`` seconds; then every job ends, and the bench waits until every trigger
fired.

    make cloud-up   # S3/CloudWatch Logs (moto), GCS, Azurite; the bench starts its own fakes
    .venv/bin/python bench/many_jobs.py [--backend all|sagemaker|vertex|azureml|local]
    .venv/bin/python bench/many_jobs.py --backend vertex --steps 200   # a quicker look
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import http.client
import http.server
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
ROLE = "arn:aws:iam::123456789012:role/stepop-bench"
BUCKET = "stepop-bench"

from bench.airflow_rig import (  # noqa: E402 - after the repository joined sys.path
    OPERATORS,
    Triggerer,
    Worker,
    airflow,
    airflow_env,
    assigned_triggers,
    create_run,
    events,
    postgres,
    still_deferred,
    wait,
    write_dag,
)


def step(i: int) -> int:
    """The steps' callable (staged for every step; timer jobs never run it)."""
    return i


# ---- the services: SageMaker (fake in timer mode, counted logs) and local -------------------


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


class FileOpens:
    """Counts opens of files in watched directories (inotify): the local poller's record reads.

    The triggerer is not touched: the kernel reports each open of a job's ``lock`` (its state:
    ``_alive``), ``output.log`` (its log relay) and ``exit_code``, by file name.
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
            from airflow_stepop.backends.local import LocalBackend

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
    "local": local_service,
}


# ---- one backend's run: defer N steps, watch the triggerer, report ---------------------------


@dataclass
class Sample:
    at: float  # time.time()
    cpu: tuple[float, float]  # triggerer supervisor, its children (trigger runner)
    counts: dict[str, int]


def bench(service: Service, env: dict[str, str], args: argparse.Namespace, work: Path) -> None:
    from airflow.sdk.module_loading import import_string

    kind, n = service.kind, args.steps
    dag_id = write_dag(Path(env["AIRFLOW_HOME"]), kind, n, service.operator_kwargs)
    airflow(env, "dags", "reserialize")
    # The step's operator with the DAG file's arguments: what builds the request and the trigger.
    operator = import_string(OPERATORS[kind])(
        task_id="step", python_callable=step, **service.operator_kwargs
    )
    run_id, tis = create_run(dag_id)
    worker = Worker(dag_id, run_id, operator, service.make_submitter(operator))
    triggerer = Triggerer(env, capacity=n, log=work / f"triggerer-{kind}.log")
    samples: list[Sample] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            samples.append(Sample(time.time(), triggerer.cpu(), service.counts()))
            stop.wait(1.0)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        began = time.time()
        print(f"[{kind}] {n} steps: run, stage, submit and defer each (8 threads)...", flush=True)
        worker(tis[0])  # first: clients and caches
        with ThreadPoolExecutor(max_workers=8) as pool:
            list(pool.map(worker, tis[1:]))
        deferred = time.time()
        print(f"[{kind}] deferred in {deferred - began:.0f} s; waiting for the triggerer to run "
              "them all...", flush=True)  # fmt: skip
        wait("the triggerer to take every trigger", lambda: assigned_triggers() >= n,
              timeout=600, every=2.0)  # fmt: skip
        # Taken is not started: each trigger first reads its connection and builds its clients.
        logs = Path(env["AIRFLOW_HOME"]) / "logs" / f"dag_id={dag_id}"
        wait("every trigger to watch its job", lambda: watching(logs) >= n,
              timeout=600, every=2.0)  # fmt: skip
        running = time.time()
        end = running + args.ramp * args.poll + args.steady
        service.release(end)  # every job ends then
        print(f"[{kind}] all {n} triggers watching their jobs {running - deferred:.0f} s later; "
              f"every job ends in {end - running:.0f} s; waiting for every trigger to fire...",
              flush=True)  # fmt: skip
        wait("every trigger to fire", lambda: still_deferred(dag_id, run_id) == 0,
              timeout=end - time.time() + 900, every=5.0)  # fmt: skip
        fired = time.time()
        time.sleep(1.5)  # one more sample
    finally:
        stop.set()
        sampler.join()
        triggerer.stop()
        service.close()
    window = (running + args.ramp * args.poll, end)
    _report(service, args, samples, window, (began, deferred, running, fired),
            events(dag_id, run_id), triggerer)  # fmt: skip


def watching(logs: Path) -> int:
    """Triggers past their start-up: their task's trigger log says it waits for the job."""
    return sum(
        "Waiting for job" in path.read_text(errors="replace")
        for path in logs.rglob("*.log.trigger.*.log")
    )


def _at(samples: list[Sample], t: float) -> Sample:
    """The last sample taken at or before ``t``."""
    before = [s for s in samples if s.at <= t]
    return before[-1] if before else samples[0]


def _ops(a: Sample, b: Sample, ops: tuple[str, ...]) -> int:
    return sum(b.counts.get(op, 0) - a.counts.get(op, 0) for op in ops)


def _report(service: Service, args: argparse.Namespace, samples: list[Sample],
            window: tuple[float, float], marks: tuple[float, float, float, float],
            outcome: dict[str, int], triggerer: Triggerer) -> None:  # fmt: skip
    from airflow_stepop import config

    kind, n, poll = service.kind, args.steps, args.poll
    began, deferred, running, fired = marks
    a, b = _at(samples, window[0]), _at(samples, window[1])
    span = b.at - a.at
    print(f"\n=== {n} concurrent deferred {kind} steps in one `airflow triggerer` process "
          f"(PostgreSQL), poll_interval {poll:g} s ===")  # fmt: skip
    print(f"deferring them all: {deferred - began:.0f} s; then until every trigger watched its "
          f"job: {running - deferred:.0f} s; from the jobs' end until every trigger fired: "
          f"{fired - window[1]:.0f} s")  # fmt: skip
    print(f"outcome: {outcome}")
    if span < 2 * poll:
        print(f"steady state too short ({span:.0f} s): raise --steady")
        return
    intervals = span / poll
    print(f"steady state: {span:.0f} s = {intervals:.1f} poll intervals (from {args.ramp:g} "
          "intervals after the last trigger started to the jobs' end)")  # fmt: skip
    cpu_sup = (b.cpu[0] - a.cpu[0]) / span
    cpu_run = (b.cpu[1] - a.cpu[1]) / span
    end = samples[-1]
    total = (sum(end.cpu) - sum(samples[0].cpu)) / (end.at - samples[0].at)
    last = _at(samples, fired + 1)
    status = _ops(a, b, service.status_ops) / intervals
    logs = _ops(a, b, service.log_ops) / span
    if kind != "local":
        budget = config.get_float("log_calls_per_second")
        listed, described = service.status_ops
        print(f"status calls per poll interval: {status:.1f} "
              f"({_ops(a, b, (listed,)) / intervals:.1f} {listed} pages, "
              f"{_ops(a, b, (described,)) / intervals:.1f} {described} describes) vs {n} for one "
              f"describe per job per interval (Airflow's operators): {100 * status / n:.2f}% "
              "(target <= 1%)")  # fmt: skip
        print(f"log calls ({', '.join(service.log_ops)}): {logs:.2f}/s vs the budget of "
              f"{budget:g}/s ([stepop] log_calls_per_second)")  # fmt: skip
        print(f"after the jobs' end: {_ops(b, last, service.final_ops)} describes (a finished "
              f"job's final facts, when its list entry lacks them: one each), "
              f"{_ops(b, last, service.log_ops)} log calls (a finished job's last read, outside "
              "the budget)")  # fmt: skip
    else:
        print(f"status calls: none, no service; the poller reads job records (local files): "
              f"{status:.1f} per poll interval for {n} jobs; log reads (output.log): "
              f"{logs:.1f}/s; after the jobs' end: {_ops(b, last, service.final_ops)} exit_code "
              "reads")  # fmt: skip
    print(f"counts: {dict(sorted(last.counts.items()))}")
    print(f"triggerer CPU, steady state: {100 * (cpu_sup + cpu_run):.1f}% of one core "
          f"(supervisor {100 * cpu_sup:.1f}%: Airflow's DB work and heartbeats; trigger runner "
          f"{100 * cpu_run:.1f}%: the triggers) (target < 10%); over the whole run "
          f"{100 * total:.1f}%")  # fmt: skip
    print(
        "real: the triggerer process, PostgreSQL, the task instances and Trigger rows, the "
        "provider's operator, staging, backend.submit and trigger; simulated: "
        + "; ".join(service.notes)
        + "; no scheduler or worker resumes the tasks after their event"
    )
    if args.keep:
        print(f"triggerer log: {triggerer.log}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("all", *SERVICES), default="all")
    parser.add_argument("--steps", type=int, default=1000, help="concurrent deferred steps")
    parser.add_argument("--steady", type=float, default=180.0,
                        help="seconds of steady state measured; then every job ends")  # fmt: skip
    parser.add_argument("--poll", type=float, default=10.0, help="[stepop] poll_interval")
    parser.add_argument("--ramp", type=float, default=3.0,
                        help="poll intervals after the last trigger started before the steady "
                             "state (the first polls come sooner)")  # fmt: skip
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("terminated"))  # cleanup runs on SIGTERM
    work = Path(tempfile.mkdtemp(prefix="stepop-many-jobs-"))
    work.chmod(0o755)  # the PostgreSQL server (user postgres when run as root) lives inside
    kinds = tuple(SERVICES) if args.backend == "all" else (args.backend,)
    try:
        with postgres(work) as url:
            env = airflow_env(work, url, args.poll)
            for kind in kinds:
                service = SERVICES[kind](work, env)
                # This process is one of the deployment's too, a quiet one.
                os.environ.update({**env, "AIRFLOW__LOGGING__LOGGING_LEVEL": "WARNING"})
                if kind == kinds[0]:
                    airflow(env, "db", "migrate")
                bench(service, {**os.environ, **env}, args, work)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"work directory kept: {work}")


if __name__ == "__main__":
    main()
