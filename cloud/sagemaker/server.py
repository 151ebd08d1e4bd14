"""A SageMaker training-job fake that really runs the job (``cloud.serve cloud.sagemaker``).

It speaks the AWS JSON 1.1 protocol as boto3 and aiobotocore send it with ``endpoint_url``
(``POST /``, ``X-Amz-Target: SageMaker.<Operation>``) and answers CreateTrainingJob,
DescribeTrainingJob, StopTrainingJob and ListTrainingJobs. Moto has no StopTrainingJob and never
runs a job, hence this fake; storage and logs stay in moto (S3, CloudWatch Logs).

What a job goes through, as on the real service:

* refusals at create, with the real error shape (HTTP 400, ``__type`` ValidationException /
  ResourceInUse): every constraint of the request shapes of botocore's service model (name
  pattern, lengths, enums, Environment limits, required members), instance types from
  ``data/training_instance_types.txt``, spot rules, duplicate names, and an image that
  the local registry (v2 API) does not hold;
* InProgress: Starting -> Downloading (S3 channels to /opt/ml/input/data/<channel>, the
  checkpoints from CheckpointConfig.S3Uri, /opt/ml/input/config/{hyperparameters,
  inputdataconfig,resourceconfig}.json) -> Training (the image's ContainerEntrypoint +
  ContainerArguments through :mod:`cloud.runner`, one node per host algo-1..algo-N, output lines
  to CloudWatch Logs group /aws/sagemaker/TrainingJobs, stream ``<job>/algo-<n>-<epoch>``) ->
  Uploading (/opt/ml/model and /opt/ml/output/data to ``<S3OutputPath>/<job>/output/``, as
  model.tar.gz/output.tar.gz or, with CompressionType NONE, as plain files under model/ and
  data/; checkpoints back to their S3Uri);
* Completed; Failed with ``AlgorithmError: <tail of /opt/ml/output/failure>, exit code: N``;
  Stopping -> Stopped (SIGTERM, a grace period, then outputs and checkpoints are uploaded);
  Stopped/MaxRuntimeExceeded and Stopped/MaxWaitTimeExceeded.

Known gaps: S3Prefix channels in File/FastFile mode only (Pipe, manifests and file systems fail
the job with a ClientError that says so); checkpoints are synced at start, stop, interruption and
end, not continuously; no warm pools, metrics, debugger or profiler; in process mode the job's
own code must take /opt/ml paths from args or env (see :mod:`cloud.runner`) and algo-N host names
do not resolve.

Control API (``/_fake/...``, see :mod:`cloud.control`): the fault rules of
:mod:`cloud.fake_http` (throttle -> ``ThrottlingException`` "Rate exceeded", HTTP 400;
error -> 500 InternalFailure / 503 ServiceUnavailable; provisioning_delay; job_failure with
``reason``; preempt with ``after_seconds`` for managed spot jobs: Interrupted, checkpoints
uploaded, Restarting, then the job runs again from its checkpoints; log_delay; capacity, see
below), counters by
operation, reset, and ``POST /_fake/mode {"mode": "process"|"container"|"timer"}``. The runner
mode starts as ``STEPOP_SAGEMAKER_MODE`` (default process) or ``python -m cloud.sagemaker
--mode``. In process mode only the plain base image (``STEPOP_TEST_BASE_IMAGE``, by name or by
image ID: :mod:`cloud.runner.images`) runs as a local process; a job of any other image (one
built with requirements, say) runs in a container, so it sees what was built. A job's tag
``stepop_fake_mode`` (``process``, ``container`` or ``timer``) chooses its own mode.

Capacity (``{"kind": "capacity", "machine": "ml.p4d.24xlarge", "at": ..., "region": ...,
"count": null}``: every job asking for that instance type, in ``ResourceConfig.InstanceType`` or
an instance group, or the next ``count``), as SageMaker signals a shortage:

* ``at: "provision"`` (the default): the job is created and stays InProgress/Starting (status
  message "Insufficient capacity error from EC2 while launching instances, retrying!") for the
  rule's ``seconds`` (default 0) on top of any ``provisioning_delay``, then ends Failed with
  FailureReason ``CapacityError: Unable to provision requested ML compute capacity. Please retry
  using a different ML instance type.`` (or the rule's ``reason``), never having trained; a
  job of a training plan (``ResourceConfig.TrainingPlanArn``) instead waits InProgress/Pending
  ("Waiting for the reserved capacity of training plan <arn>") for the rule's ``seconds``, then
  runs;
* ``at: "create"``: CreateTrainingJob is refused, HTTP 400 ``ResourceLimitExceeded`` "The
  account-level service limit '<type> for training job usage' is 0 Instances, with current
  utilization of 0 Instances and a request delta of <count> Instances. Please contact AWS support
  to request an increase for this limit." (``spot training job usage`` for a managed spot job;
  the rule's ``reason`` replaces the message); no job is created.

``region`` matches the region the request was signed for (botocore's ``region_name``; the
fake's ``AWS_DEFAULT_REGION`` for an unsigned call).
"""

from __future__ import annotations

import os
import uuid

from cloud.fake_http import FakeServer, Request, Response
from cloud.runner import MODES
from cloud.sagemaker.operations import TrainingJobOperations
from cloud.sagemaker.validation import ApiError


class SageMakerFake(TrainingJobOperations):
    """The fake: AWS JSON 1.1 dispatch on ``X-Amz-Target``, its error shape, reset, shutdown.

    The parts, each in its module: :class:`~cloud.sagemaker.operations.TrainingJobOperations`
    (the four operations, built on :class:`~cloud.sagemaker.lifecycle.JobLifecycle`), sharing
    :class:`~cloud.sagemaker.state.SageMakerState`; S3 transfers in
    :mod:`cloud.sagemaker.storage`, CloudWatch Logs in :mod:`cloud.sagemaker.logs`, refusals in
    :mod:`cloud.sagemaker.validation`.
    """

    def __init__(self, env: dict[str, str]) -> None:
        super().__init__(env)
        self.operations = {
            "CreateTrainingJob": self.create,
            "DescribeTrainingJob": self.describe,
            "StopTrainingJob": self.stop,
            "ListTrainingJobs": self.list,
        }

    # --- HTTP ------------------------------------------------------------------------------
    def error_response(self, status: int, message: str, kind: str) -> Response:
        code = {
            "throttle": "ThrottlingException",
            "not_found": "UnknownOperationException",
            "bad": "ValidationException",
        }.get(kind, "ServiceUnavailable" if status == 503 else "InternalFailure")
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
        if req.path == "/_fake/mode":
            return self._mode(req)
        if req.path.startswith("/_fake/"):
            resp = self.control(req)
            return resp if resp is not None else Response(404, {"error": "no such control"})
        target = req.headers.get("x-amz-target", "")
        prefix, _, operation = target.partition(".")
        if req.method != "POST" or prefix != "SageMaker" or not operation:
            return self._error(ApiError("UnknownOperationException", "Unknown operation", 400))
        self.count(operation)
        fault = self.faults.request_fault(operation)
        if fault is not None:
            kind = "throttle" if fault["kind"] == "throttle" else "error"
            return self.error_response(int(fault.get("status", 503)), "injected failure", kind)
        handler = self.operations.get(operation)
        if handler is None:
            msg = f"{operation} is not implemented by the SageMaker fake"
            return self._error(ApiError("UnknownOperationException", msg, 400))
        # the region the call was signed for: what CreateTrainingJob's capacity rules match
        self._local.region = self.request_region(req.headers.get("authorization"))
        try:
            body = req.json() or {}
            if not isinstance(body, dict):
                raise ApiError("SerializationException", "Expected a JSON object")
            return Response(200, handler(body), content_type="application/x-amz-json-1.1")
        except ValueError:
            return self._error(ApiError("SerializationException", "Malformed JSON"))
        except ApiError as err:
            return self._error(err)

    def _mode(self, req: Request) -> Response:
        if req.method == "POST":
            mode = (req.json() or {}).get("mode")
            if mode not in MODES:
                return Response(400, {"error": f"mode {mode!r}: use one of {MODES}"})
            self.mode = mode
        return Response(200, {"mode": self.mode})

    def reset(self, jobs: bool) -> None:
        if jobs:
            self.runner.stop_all(grace=1)
            with self.jobs_lock:
                self.jobs.clear()

    def shutdown(self) -> None:
        for job in list(self.jobs.values()):
            job.stop_requested.set()
        self.runner.stop_all(grace=2)
        self.log_sink.close()


def serve(host: str, port: int, env: dict[str, str]) -> None:
    """Serve the fake until SIGTERM/SIGINT, then stop every job it runs (cloud.stack entry)."""
    server = FakeServer(SageMakerFake({**os.environ, **env}), host, port)
    print(f"[sagemaker] serving on {server.url} in {server.service.mode} mode", flush=True)
    server.serve_until_interrupted()


def start(env: dict[str, str], host: str = "127.0.0.1", port: int = 0) -> FakeServer:
    """Start the fake in this process (tests); ``.shutdown()`` stops it and its jobs."""
    return FakeServer(SageMakerFake({**os.environ, **env}), host, port)


def main(argv: list[str] | None = None) -> None:
    """``python -m cloud.sagemaker [--host H] [--port P] [--mode process|container]``.

    Stand-alone, against the stack's moto and registry (read from .cloud/env).
    """
    import argparse

    from cloud.stack import read_env

    parser = argparse.ArgumentParser(prog="python -m cloud.sagemaker", description=main.__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--mode", choices=MODES, default=None)
    args = parser.parse_args(argv)
    env = read_env()
    if args.mode:
        env["STEPOP_SAGEMAKER_MODE"] = args.mode
    serve(args.host, args.port, env)
