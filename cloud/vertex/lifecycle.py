"""The life of a Vertex AI fake job: queue, provisioning, the replicas, /gcs, the final state.

:meth:`JobLifecycle._lifecycle` runs in the job's own thread: QUEUED -> PENDING (faults may
delay or fail it there; a FLEX_START job waits out a stockout there instead:
:mod:`cloud.vertex.flex_start`) -> RUNNING -> an end. Buckets the job spec names are copied down
to a ``/gcs`` directory before the start and changes copied back after (:mod:`cloud.vertex.gcs`);
each worker pool starts one node per replica with Vertex's cluster environment; a Spot job
preempted is restarted unless retries are disabled.
"""

from __future__ import annotations

import json
import os
import socket
import tempfile
import time
from typing import Any

from cloud import runner as runner_mod
from cloud.vertex.api import (
    CODE_CANCELLED,
    CODE_DEADLINE_EXCEEDED,
    CODE_INTERNAL,
    CODE_INVALID_ARGUMENT,
    CODE_RESOURCE_EXHAUSTED,
    CODE_UNAVAILABLE,
    get_field,
    render,
)
from cloud.vertex.flex_start import FlexStartWait, is_flex_start
from cloud.vertex.gcs import referenced_buckets, storage_client, sync_down, sync_up
from cloud.vertex.state import Job, machine_names, pool_machines


class JobLifecycle(FlexStartWait):
    """Runs jobs: states, attempts, the replicas' launches and their exit."""

    def _wait(self, job: Job, seconds: float) -> bool:
        """Wait ``seconds`` unless cancelled; True when cancelled."""
        return job.cancel.wait(max(0.0, seconds)) or self._stopping.is_set()

    def _finish_cancel(self, job: Job) -> None:
        self._set_state(
            job, "JOB_STATE_CANCELLED", error={"code": CODE_CANCELLED, "message": "CANCELED"}
        )

    def _lifecycle(self, job: Job) -> None:
        workdir = None
        try:
            if self._wait(job, self.queue_seconds):
                return self._finish_cancel(job)
            self._set_state(job, "JOB_STATE_PENDING")
            delay = self.provision_seconds + self.faults.seconds("provisioning_delay")
            capacity = self._capacity_rule(job)
            if capacity is not None and is_flex_start(job.resource["jobSpec"]):
                outcome = self._flex_start_wait(job, capacity)  # DWS: it waits, then may run
                if outcome == "cancelled":
                    return self._finish_cancel(job)
                if outcome == "expired":
                    return None
                capacity = None
            stockout = f"Resources are insufficient in region: {job.location}."
            if capacity is not None:  # the region has none of the machines: PENDING, then FAILED
                self._log(job, "service", "stderr", stockout)
                delay += float(capacity.get("seconds", 0))
            if self._wait(job, delay):
                return self._finish_cancel(job)
            if capacity is not None:
                error = {
                    "code": int(capacity.get("code") or CODE_RESOURCE_EXHAUSTED),
                    "message": str(capacity.get("reason") or stockout),
                }
                return self._set_state(job, "JOB_STATE_FAILED", error=error)
            failure = self.faults.take_job_fault("job_failure", job.resource["displayName"])
            if failure is not None:
                reason = failure.get("reason") or (
                    "The zone does not have enough resources available to fulfill the request. "
                    "Try a different zone, or try again later."
                )
                code = int(failure.get("code", CODE_RESOURCE_EXHAUSTED))
                state = failure.get("state") or "JOB_STATE_FAILED"
                if state == "JOB_STATE_PAUSED":  # not an end: it sits there until cancelled
                    self._set_state(job, state)
                    while not self._wait(job, 3600):
                        pass
                    return self._finish_cancel(job)
                if state not in ("JOB_STATE_FAILED", "JOB_STATE_EXPIRED"):
                    state = "JOB_STATE_FAILED"
                return self._set_state(job, state, error={"code": code, "message": reason})
            workdir = tempfile.mkdtemp(prefix=f"stepop-vertex-{job.job_id}-", dir=self.tmp_base)
            self._run_attempts(job, workdir)
        except Exception as exc:  # the fake's own bug: fail the job visibly, not silently
            self._log(job, "service", "stderr", f"fake internal error: {exc!r}")
            self._set_state(
                job,
                "JOB_STATE_FAILED",
                error={"code": CODE_INTERNAL, "message": f"Internal error: {exc!r}"},
            )
        finally:
            self.runner.release(job.runs, workdir, keep=self.keep_workdirs)

    def _capacity_rule(self, job: Job) -> dict[str, Any] | None:
        """The ``capacity`` rule at ``provision`` for any of the job's pools, if one matches."""
        names = [n for m in pool_machines(job.resource["jobSpec"]) for n in machine_names(m)]
        return self.faults.take_capacity(
            "provision", names, job.location, job.resource["displayName"]
        )

    def _run_attempts(self, job: Job, workdir: str) -> None:
        spec = job.resource["jobSpec"]
        sched = get_field(spec, "scheduling") or {}
        spot = get_field(sched, "strategy") == "SPOT"
        retries = not get_field(sched, "disableRetries", False)
        gcs_dir = os.path.join(workdir, "gcs")
        client, snapshots = self._gcs_down(job, gcs_dir)
        try:
            while True:
                outcome = self._run_once(job, workdir, gcs_dir, sched)
                if outcome != "preempted":
                    break
                self._log(job, "service", "stderr", "The replicas were preempted (Spot VM).")
                if not (spot and retries):
                    self._set_state(
                        job,
                        "JOB_STATE_FAILED",
                        error={
                            "code": CODE_UNAVAILABLE,
                            "message": "The job was preempted: its Spot VMs were reclaimed by "
                            "Compute Engine.",
                        },
                    )
                    break
                self._set_state(job, "JOB_STATE_PENDING")
                if self._wait(job, self.provision_seconds):
                    self._finish_cancel(job)
                    break
        finally:
            self._gcs_up(job, gcs_dir, client, snapshots)
        final, job.final = job.final, None
        if final is not None:
            state, error = final
            if error is None:
                self._set_state(job, state)
            else:
                self._set_state(job, state, error=error)

    def _gcs_down(self, job: Job, gcs_dir: str) -> tuple[Any, dict[str, Any]]:
        os.makedirs(gcs_dir, exist_ok=True)
        mode = (job.resource.get("labels") or {}).get("stepop_fake_mode") or self.runner.mode
        if not self.gcs_emulator_host or mode == runner_mod.MODE_TIMER:
            return None, {}  # a timer job runs no code: no copy of its buckets (a whole bucket)
        texts = [json.dumps(job.resource["jobSpec"])]
        client = storage_client(self.gcs_emulator_host)
        snapshots: dict[str, Any] = {}
        for bucket in referenced_buckets(texts):
            snap = sync_down(client, bucket, os.path.join(gcs_dir, bucket))
            if snap is None:
                self._log(job, "service", "stderr", f"gcsfuse: bucket {bucket} does not exist")
                continue
            snapshots[bucket] = snap
        return client, snapshots

    def _gcs_up(self, job: Job, gcs_dir: str, client: Any, snapshots: dict[str, Any]) -> None:
        if client is None:
            return
        for bucket, snap in snapshots.items():
            try:
                sync_up(client, bucket, os.path.join(gcs_dir, bucket), snap)
            except Exception as exc:
                self._log(job, "service", "stderr", f"gcsfuse: upload to {bucket} failed: {exc!r}")

    def _launches(self, job: Job, workdir: str, gcs_dir: str) -> list[runner_mod.JobLaunch]:
        """One launch per worker pool, one node per replica, with Vertex's environment."""
        spec = job.resource["jobSpec"]
        pools = get_field(spec, "workerPoolSpecs")
        addrs: dict[str, list[str]] = {}
        for i, pool in enumerate(pools):
            if pool:
                n = int(get_field(pool, "replicaCount") or 1)
                addrs[f"workerpool{i}"] = [f"127.0.0.1:{_free_port()}" for _ in range(n)]
        world = sum(len(v) for v in addrs.values())
        master_host, master_port = addrs["workerpool0"][0].split(":")
        base_env = {
            "CLOUD_ML_JOB_ID": job.job_id,
            "CLOUD_ML_PROJECT_ID": job.project,
            "CLOUD_ML_REGION": job.location,
            "MASTER_ADDR": master_host,
            "MASTER_PORT": master_port,
            "WORLD_SIZE": str(world),
        }
        base = get_field(get_field(spec, "baseOutputDirectory"), "outputUriPrefix")
        if base:
            base = base.rstrip("/")
            base_env.update(
                AIP_MODEL_DIR=f"{base}/model/",
                AIP_CHECKPOINT_DIR=f"{base}/checkpoints/",
                AIP_TENSORBOARD_LOG_DIR=f"{base}/logs/",
            )
        launches = []
        rank = 0
        for i, pool in enumerate(pools):
            if not pool:
                continue
            pool_name = f"workerpool{i}"
            container = get_field(pool, "containerSpec")
            env = dict(base_env)
            env.update(
                {
                    get_field(e, "name"): get_field(e, "value", "")
                    for e in get_field(container, "env") or []
                }
            )
            nodes = []
            for index, _addr in enumerate(addrs[pool_name]):
                task = {"type": pool_name, "index": index}
                cluster = {
                    "cluster": addrs,
                    "environment": "cloud",
                    "task": task,
                    "job": json.dumps(render(spec, False)),
                }
                tf_config = {"cluster": addrs, "task": task, "environment": "cloud"}
                node_env = {
                    "CLUSTER_SPEC": json.dumps(cluster),
                    "TF_CONFIG": json.dumps(tf_config),
                    "RANK": str(rank),
                }
                nodes.append(runner_mod.NodeSpec(f"{pool_name}-{index}", rank=rank, env=node_env))
                rank += 1
            launches.append(
                runner_mod.JobLaunch(
                    fake="vertex",
                    name=f"{job.job_id}-{pool_name}",
                    image=get_field(container, "imageUri"),
                    entrypoint=list(get_field(container, "command") or []) or None,
                    args=list(get_field(container, "args") or []) or None,
                    env=env,
                    mounts=[runner_mod.Mount(gcs_dir, "/gcs")],
                    nodes=nodes,
                    labels={"stepop.vertex.job": job.job_id},
                )
            )
        return launches

    def _run_once(self, job: Job, workdir: str, gcs_dir: str, sched: dict[str, Any]) -> str:
        """Start every node, wait for the end; returns "done", "preempted" or "cancelled"."""
        launches = self._launches(job, workdir, gcs_dir)
        requested = (job.resource.get("labels") or {}).get("stepop_fake_mode")
        runs: list[runner_mod.JobRun] = []
        mode = self.runner.mode
        for launch in launches:
            pool_dir = os.path.join(workdir, "pools", launch.name, str(len(job.runs)))
            os.makedirs(pool_dir, exist_ok=True)

            def sink(node: runner_mod.NodeSpec, stream: str, line: str, ts: float) -> None:
                self._log(job, node.host, stream, line, ts)

            try:
                # the job's own mode, else a built image runs in a container (cloud.runner)
                mode = self.runner.mode_for(launch.image, requested)
                launch.labels["stepop.mode"] = mode
                run = self.runner.launch(launch, on_line=sink, mode=mode, workdir=pool_dir)
            except runner_mod.LaunchError as exc:
                for other in runs:
                    other.stop(grace=1)
                self._log(job, "service", "stderr", str(exc))
                job.final = (
                    "JOB_STATE_FAILED",
                    {
                        "code": CODE_INVALID_ARGUMENT,
                        "message": f"Unable to start the replicas of {launch.name}: {exc}",
                    },
                )
                return "done"
            runs.append(run)
            job.runs.append(run)
        self._set_state(job, "JOB_STATE_RUNNING")
        started = time.monotonic()
        timeout = _seconds(get_field(sched, "timeout"))
        # preempt rules are checked all along the attempt: one added while it runs is taken at
        # the next poll, and preempts ``after_seconds`` after that
        display_name = job.resource["displayName"]
        preempt_seen: set[int] = set()
        preempt_at: float | None = None
        while True:
            codes = [r.result() for r in runs]
            failed = next(
                ((r, c) for r, c in zip(runs, codes, strict=True) if c not in (None, 0)), None
            )
            if failed is not None:
                for r in runs:
                    r.stop(grace=2)
                run, code = failed
                replica = next(
                    (n.spec.host for n in run.nodes if n.exit_code() not in (None, 0)),
                    run.nodes[0].spec.host,
                )
                job.final = (
                    "JOB_STATE_FAILED",
                    {
                        "code": CODE_INVALID_ARGUMENT,
                        "message": self._exit_message(job, replica, code),
                    },
                )
                return "done"
            if all(c == 0 for c in codes):
                job.final = ("JOB_STATE_SUCCEEDED", None)
                return "done"
            if job.cancel.is_set() or self._stopping.is_set():
                for r in runs:
                    r.stop(grace=5)
                job.final = (
                    "JOB_STATE_CANCELLED",
                    {"code": CODE_CANCELLED, "message": "CANCELED"},
                )
                return "cancelled"
            now = time.monotonic()
            if preempt_at is None:
                preempt = self.faults.take_job_fault("preempt", display_name, preempt_seen)
                if preempt is not None:
                    preempt_at = now + float(preempt.get("after_seconds", 0.5))
            if preempt_at is not None and now >= preempt_at:
                for r in runs:
                    r.stop(grace=2)
                return "preempted"
            if timeout is not None and now - started > timeout:
                for r in runs:
                    r.stop(grace=2)
                job.final = (
                    "JOB_STATE_FAILED",
                    {
                        "code": CODE_DEADLINE_EXCEEDED,
                        "message": f"Job exceeded the timeout of {get_field(sched, 'timeout')}.",
                    },
                )
                return "done"
            # a timer job's end is read once a second: a thousand of them polling 20 times a
            # second kept the fake's threads runnable all the time
            job.cancel.wait(1.0 if mode == runner_mod.MODE_TIMER else 0.05)

    @staticmethod
    def _exit_message(job: Job, replica: str, code: int) -> str:
        reason = "Error"
        if code == 137:
            reason = "OOMKilled or SIGKILL"
        query = f"resource.type%3D%22ml_job%22%0Aresource.labels.job_id%3D%22{job.job_id}%22"
        return (
            f"The replica {replica} exited with a non-zero status of {code}. Termination reason: "
            f"{reason}. To find out more about why your job exited please check the logs: "
            f"https://console.cloud.google.com/logs/viewer?project={job.project}"
            f"&resource=ml_job%2Fjob_id%2F{job.job_id}&advancedFilter={query}"
        )


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _seconds(duration: str | None) -> float | None:
    if not duration:
        return None
    return float(duration[:-1])
