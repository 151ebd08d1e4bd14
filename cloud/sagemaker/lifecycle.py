"""The life of a SageMaker fake training job, on its own thread.

InProgress: Starting -> Downloading (channels, checkpoints, ``/opt/ml/input/config``) ->
Training (one node per host algo-1..algo-N through :mod:`cloud.runner`) -> Uploading, then
Completed or Failed; a stop request, MaxRuntimeInSeconds or MaxWaitTimeInSeconds end it as
Stopped (outputs uploaded first), and a preempted spot job is Interrupted, Restarting and runs
again from its checkpoints.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path

import boto3.exceptions
import botocore.exceptions

from cloud.runner import JobLaunch, JobRun, LaunchError, Mount, NodeSpec
from cloud.sagemaker.state import SERVICE, Job, SageMakerState
from cloud.sagemaker.validation import ClientError

STOP_GRACE = float(os.environ.get("STEPOP_SAGEMAKER_STOP_GRACE", "5"))
INTERNAL_ERROR = "InternalServerError: We encountered an internal error. Please try again."
CAPACITY_ERROR = (
    "CapacityError: Unable to provision requested ML compute capacity. "
    "Please retry using a different ML instance type."
)
# the Starting status message while EC2 has none of the instances (DescribeTrainingJob docs)
CAPACITY_RETRYING = "Insufficient capacity error from EC2 while launching instances, retrying!"
PLAN_WAITING = "Waiting for the reserved capacity of training plan {plan}"


class _Stop(Exception):
    """The job ended early (stop request, runtime or wait limit): how it ends is attached."""

    def __init__(self, secondary: str, message: str) -> None:
        super().__init__(message)
        self.secondary = secondary
        self.message = message


def requested_mode(job: Job) -> str | None:
    """The job's own runner mode: its tag ``stepop_fake_mode``, as the other fakes take it."""
    tags = {t.get("Key"): t.get("Value") for t in job.request.get("Tags") or []}
    return tags.get("stepop_fake_mode") or None


class JobLifecycle(SageMakerState):
    """Runs jobs: attempts, the nodes' launch and watch, stop and time limits, preemption."""

    def _work(self, job: Job) -> None:
        """The life of one job, on its own thread."""
        workdir = ""
        try:
            # a capacity rule at "provision": EC2 has none of the instances; Starting says so
            # while it retries, then the job fails with CapacityError
            capacity = self.faults.take_capacity(
                "provision", job.instance_types, job.region, job.name
            )
            delay = self.faults.seconds("provisioning_delay")
            plan = (job.request.get("ResourceConfig") or {}).get("TrainingPlanArn")
            if capacity is not None and plan:  # a plan's job waits Pending for its capacity
                job.transition("Pending", PLAN_WAITING.format(plan=plan))
                if job.stop_requested.wait(float(capacity.get("seconds", 0))):
                    raise _Stop("Stopped", "Training job stopped")
                job.transition("Starting", "Launching requested ML instances")
                capacity = None
            elif capacity is not None:
                self._status_message(job, CAPACITY_RETRYING)
                delay += float(capacity.get("seconds", 0))
            if delay and job.stop_requested.wait(delay):
                raise _Stop("Stopped", "Training job stopped")
            if job.stop_requested.is_set():
                raise _Stop("Stopped", "Training job stopped")
            if capacity is not None:
                self._fail(job, str(capacity.get("reason") or CAPACITY_ERROR))
                return
            fault = self.faults.take_job_fault("job_failure", job.name)
            if fault is not None:
                self._fail(job, str(fault.get("reason") or CAPACITY_ERROR))
                return
            workdir = tempfile.mkdtemp(prefix=f"{job.name}-", dir=self.jobs_dir)
            attempt = 0
            while True:
                attempt += 1
                code = self._attempt(job, Path(workdir), attempt)
                if code is not None:
                    break
            if code == 0:
                job.transition("Uploading", "Uploading generated training model")
                try:
                    self.storage.upload(job, Path(workdir))
                except (boto3.exceptions.S3UploadFailedError, botocore.exceptions.ClientError) as e:
                    output = job.request["OutputDataConfig"]["S3OutputPath"]
                    raise ClientError(
                        f"Failed to upload model artifacts to {output}: {e}. Please ensure the "
                        "bucket exists and the role has s3:PutObject on it."
                    ) from e
                job.transition("Completed", "Training job completed", status="Completed")
            else:
                self.storage.upload_checkpoints(job, Path(workdir))
                tail = self.storage.failure_tail(job, Path(workdir))
                self._fail(job, f"AlgorithmError: {tail}, exit code: {code}")
        except _Stop as stop:
            if workdir and job.training_start is not None:
                with contextlib.suppress(Exception):
                    self.storage.upload(job, Path(workdir))
            job.transition(stop.secondary, stop.message, status="Stopped")
        except ClientError as err:
            self._fail(job, f"ClientError: {err}")
        except Exception:
            traceback.print_exc(file=sys.stderr)
            self._fail(job, INTERNAL_ERROR)
        finally:
            with job.lock:
                if job.training_start is not None and job.training_end is None:
                    job.training_end = time.time()
            self.log_sink.flush_all()
            if workdir:
                shutil.rmtree(workdir, ignore_errors=True)

    @staticmethod
    def _status_message(job: Job, message: str) -> None:
        """A new StatusMessage for the current secondary status (it stays the same status)."""
        with job.lock:
            if job.transitions:
                job.transitions[-1]["StatusMessage"] = message
            job.modified = time.time()

    def _fail(self, job: Job, reason: str) -> None:
        with job.lock:
            job.failure_reason = reason[:1024]
        job.transition("Failed", "Training job failed", status="Failed")

    def _launch(self, job: Job, workdir: str, nodes: list[NodeSpec]) -> JobLaunch:
        algo = job.request["AlgorithmSpecification"]
        env = {
            "TRAINING_JOB_NAME": job.name,
            "TRAINING_JOB_ARN": job.arn,
            **job.request.get("Environment", {}),
        }
        entrypoint = algo.get("ContainerEntrypoint")
        args = algo.get("ContainerArguments")
        if not entrypoint:
            args = ["train"]  # what SageMaker runs: `docker run <image> train`
        return JobLaunch(
            fake=SERVICE,
            name=job.name,
            image=self.local_image(algo.get("TrainingImage", "")),
            entrypoint=entrypoint,
            args=args,
            env=env,
            nodes=nodes or [NodeSpec("algo-1")],
            reroot=("/opt/ml",),
        )

    def _local_checkpoint_path(self, job: Job) -> str:
        return (job.request.get("CheckpointConfig") or {}).get("LocalPath") or "/opt/ml/checkpoints"

    def _attempt(self, job: Job, workdir: Path, attempt: int) -> int | None:
        """Download, run and watch the nodes once. None: interrupted (spot), run again."""
        job.transition("Downloading", "Downloading input data")
        channels = workdir / "input" / "data"
        config = self.storage.write_channels(job, channels)
        hosts = job.hosts
        rc = job.request["ResourceConfig"]
        nodes = []
        for rank, host in enumerate(hosts):
            cfg = workdir / "config" / host
            cfg.mkdir(parents=True, exist_ok=True)
            (cfg / "hyperparameters.json").write_text(
                json.dumps(job.request.get("HyperParameters", {}))
            )
            (cfg / "inputdataconfig.json").write_text(json.dumps(config))
            (cfg / "resourceconfig.json").write_text(json.dumps({
                "current_host": host,
                "current_instance_type": rc.get("InstanceType"),
                "current_group_name": "homogeneousCluster",
                "hosts": hosts,
                "instance_groups": [{
                    "instance_group_name": "homogeneousCluster",
                    "instance_type": rc.get("InstanceType"),
                    "hosts": hosts,
                }],
                "network_interface_name": "eth0",
            }))  # fmt: skip
            (workdir / "output" / host / "data").mkdir(parents=True, exist_ok=True)
            mounts = [
                Mount(str(channels), "/opt/ml/input/data", read_only=True),
                Mount(str(cfg), "/opt/ml/input/config", read_only=True),
                Mount(str(workdir / "model" / host), "/opt/ml/model"),
                Mount(str(workdir / "output" / host), "/opt/ml/output"),
            ]
            if job.request.get("CheckpointConfig"):
                local = workdir / "checkpoints" / host
                self.storage.download_checkpoints(job, local)
                mounts.append(Mount(str(local), self._local_checkpoint_path(job)))
            nodes.append(NodeSpec(host=host, rank=rank, mounts=mounts))
        if job.stop_requested.is_set():
            raise _Stop("Stopped", "Training job stopped")
        launch = self._launch(job, str(workdir), nodes)
        epoch = int(time.time())
        streams = {h: f"{job.name}/{h}-{epoch}" for h in hosts}
        try:
            run = self.runner.launch(
                launch,
                on_line=lambda node, _s, line, ts: self.log_sink.put(streams[node.host], line, ts),
                mode=self.runner.mode_for(launch.image, requested_mode(job)),
                workdir=str(workdir / f"run-{attempt}"),
            )
        except LaunchError as exc:
            raise ClientError(str(exc)) from exc
        now = time.time()
        with job.lock:
            if job.training_start is None:
                job.training_start = now
        job.transition("Training", "Training image download completed. Training in progress.")
        try:
            return self._watch(job, run, workdir, now)
        finally:
            self.runner.forget(run)
            run.cleanup()
            self.log_sink.flush_all()

    def _watch(self, job: Job, run: JobRun, workdir: Path, started: float) -> int | None:
        """Poll the nodes; enforce stop requests, time limits and injected preemptions."""
        stopping = job.request["StoppingCondition"]
        runtime = stopping.get("MaxRuntimeInSeconds")
        wait = stopping.get("MaxWaitTimeInSeconds")
        last = started
        while True:
            code = run.result()
            now = time.time()
            with job.lock:
                job.billable += now - last
            last = now
            if code is not None:
                return code
            if job.stop_requested.is_set():
                run.stop(STOP_GRACE)
                raise _Stop("Stopped", "Training job stopped")
            if runtime and job.billable >= runtime:
                run.stop(STOP_GRACE)
                raise _Stop(
                    "MaxRuntimeExceeded", "Training job stopped: MaxRuntimeInSeconds reached"
                )
            if wait and now - job.created >= wait:
                run.stop(STOP_GRACE)
                raise _Stop(
                    "MaxWaitTimeExceeded", "Training job stopped: MaxWaitTimeInSeconds reached"
                )
            if job.spot and self._preempt_due(job):
                job.transition("Interrupted", "Training job interrupted: spot capacity reclaimed")
                run.stop(STOP_GRACE)
                self.storage.upload_checkpoints(job, workdir)
                job.transition("Restarting", "Restarting the training job from its checkpoints")
                return None
            time.sleep(0.1)

    def _preempt_due(self, job: Job) -> bool:
        for rule in self.faults.public():
            if rule["kind"] != "preempt" or (rule.get("match") and rule["match"] not in job.name):
                continue
            if job.billable >= float(rule.get("after_seconds", 0)):
                return self.faults.take_job_fault("preempt", job.name) is not None
        return False
