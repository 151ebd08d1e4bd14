"""The life of an Azure ML fake job: statuses, inputs down, the processes, outputs and logs up.

:meth:`JobLifecycle._lifecycle` runs in the job's own thread. It walks the job through
Starting / Preparing / Queued (where faults may delay or fail it), prepares the data capability
directories (:meth:`_run`), builds the environment's image when it has a build context
(:mod:`cloud.azureml.environments`), runs the command once per attempt (:meth:`_run_once`: one
process or container per rank, a Spot job preempted is queued again) and, whatever happened,
uploads the outputs and the log files and sets the final status (:meth:`_finalize`). Process
mode runs the plain base image only; a job of any other image, a built one included, runs in a
container (:mod:`cloud.runner.images`).
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import time
import uuid
from typing import Any

from cloud import runner as runner_mod
from cloud.azureml.environments import EnvironmentRoutes
from cloud.azureml.state import DATASTORES, LOW_PRIORITY_PREFIX, STUCK, AmlJob
from cloud.azureml.storage import blob_service, download, parse_uri, upload, upload_text
from cloud.azureml.validation import PLACEHOLDER, iso_seconds


class JobLifecycle(EnvironmentRoutes):
    """Runs jobs: needs the environments (a job's image) and the shared state."""

    def _wait(self, job: AmlJob, seconds: float) -> bool:
        """Sleep; True when the job was cancelled or the fake is stopping."""
        return job.cancel.wait(max(0.0, seconds)) or self._stopping.is_set()

    def _lifecycle(self, job: AmlJob) -> None:
        workdir = None
        try:
            for status in ("Starting", "Preparing", "Queued"):
                if job.status == "CancelRequested" or self._wait(job, self.phase_seconds):
                    return self._set_status(job, "Canceled")
                self._set_status(job, status)
                if status == "Preparing":
                    extra = self.faults.seconds("provisioning_delay")
                    if extra and self._wait(job, extra):
                        return self._set_status(job, "Canceled")
            if self._short_of_capacity(job):
                return None
            failure = self.faults.take_job_fault("job_failure", job.name)
            if failure is not None:
                code = str(failure.get("code") or "ServiceError")
                reason = str(failure.get("reason") or "The compute could not be allocated.")
                status = failure.get("status") or "Failed"
                if status in STUCK:
                    with self._lock:
                        job.error = {"code": code, "message": reason, "details": []}
                    self._set_status(job, status)
                    while not self._wait(job, 3600):
                        pass
                    return self._set_status(job, "Canceled")
                return self._fail(job, code, reason)
            workdir = tempfile.mkdtemp(prefix=f"stepop-azureml-{job.name[:40]}-", dir=self.tmp_base)
            self._run(job, workdir)
        except Exception as exc:  # the fake's own bug: fail the job visibly
            self._log(job, "system_logs/fake.txt", f"fake internal error: {exc!r}")
            self._fail(job, "SystemError", f"Internal error in the fake: {exc!r}")
        finally:
            self.runner.release(job.runs, workdir, keep=self.keep_workdirs)

    def _vm_sizes(self, job: AmlJob) -> list[str]:
        """The job's VM sizes: serverless ``resources.instanceType``, a cluster's ``vmSize``."""
        sizes = [(job.props.get("resources") or {}).get("instanceType") or ""]
        compute = (job.props.get("computeId") or "").rstrip("/").rsplit("/", 1)[-1]
        sizes.append(self.computes.get(compute, "") if compute else "")
        return [s for s in sizes if s]

    def _short_of_capacity(self, job: AmlJob) -> bool:
        """A ``capacity`` rule for the queued job: True when it ended the job's life here.

        ``queue``: no VM of the size can be allocated; the job stays Queued with the service's
        warning in its run details, for the rule's ``seconds`` and then runs, or, without
        ``seconds``, until it is cancelled. ``provision``: the subscription's vCPU quota of the
        size is 0, and the job fails with the service's JobNodeCountExceedsCoreQuota message.
        """
        sizes = self._vm_sizes(job)
        nodes = int((job.props.get("resources") or {}).get("instanceCount") or 1)
        held = self.faults.take_capacity("queue", sizes, self.region, job.name)
        if held is not None:
            with self._lock:
                job.warnings.append({"source": "Compute", "message": self._stockout(job, nodes)})
            seconds = float(held.get("seconds", 0))
            while not self._wait(job, seconds or 3600):
                if seconds:
                    return False  # the VMs came back: the job runs
            self._set_status(job, "Canceled")
            return True
        rule = self.faults.take_capacity("provision", sizes, self.region, job.name)
        if rule is None:
            return False
        if self._wait(job, float(rule.get("seconds", 0))):
            self._set_status(job, "Canceled")
            return True
        size = next(s for s in sizes if s.casefold() == rule["machine"].strip().casefold())
        message = str(rule.get("reason") or "") or (
            "Job submission to AzureML Compute encountered an Exception with status code "
            f"JobNodeCountExceedsCoreQuota, The specified subscription has a vCPU quota of 0 for "
            f"{size} and is less than the requested job node count of {nodes}. Talk to your "
            "Subscription Admin or refer to https://docs.microsoft.com/azure/machine-learning/"
            "how-to-manage-quotas#request-quota-increases to increase the vCPU quota"
        )
        self._fail(job, str(rule.get("code") or "UserError"), message)
        return True

    def _stockout(self, job: AmlJob, nodes: int) -> str:
        """The run's warning while no VM of its size can be allocated (as the studio shows it
        for a cluster; a low-priority cluster or a Spot job adds the low-priority sentence)."""
        compute = (job.props.get("computeId") or "").rstrip("/").rsplit("/", 1)[-1]
        where = f" '{compute}' cluster has encountered error(s)." if compute else ""
        text = (
            f"Run requested {nodes} node(s).{where} Instances of the specified VM size are not "
            "currently available. Please retry later, try reducing the VM size or number of "
            "instances, or try deploying to a different region"
        )
        tier = (job.props.get("queueSettings") or {}).get("jobTier")
        if compute.startswith(LOW_PRIORITY_PREFIX) or tier == "Spot":
            text += (
                " The specified Virtual Machine size in low priority is currently out of "
                "capacity. Please retry later, try reducing the Virtual Machine size or number "
                "of instances, try using dedicated VMs to improve chances of capacity "
                "allocations, or try deploying to a different region"
            )
        return text

    def _container_paths(self, job: AmlJob) -> tuple[str, str]:
        """The data capability and working directories, as Azure ML names them in the job."""
        base = f"/mnt/azureml/cr/j/{uuid.uuid5(uuid.NAMESPACE_URL, job.resource['id']).hex}"
        return f"{base}/cap/data-capability/wd", f"{base}/exe/wd"

    def _run(self, job: AmlJob, workdir: str) -> None:
        props = job.props
        cap, exe = self._container_paths(job)
        cap_host = os.path.join(workdir, "cap")
        exe_host = os.path.join(workdir, "exe")
        os.makedirs(cap_host, exist_ok=True)
        os.makedirs(exe_host, exist_ok=True)
        service = blob_service(self.conn_str) if self.conn_str else None
        values: dict[tuple[str, str], str] = {}
        env: dict[str, str] = {}
        # inputs: copied down before the start
        for name, spec in (props.get("inputs") or {}).items():
            if spec["jobInputType"] == "literal":
                values[("inputs", name)] = str(spec.get("value", ""))
                continue
            if spec.get("mode") == "Direct":  # the job gets the URI and reads storage itself
                values[("inputs", name)] = spec["uri"]
                env[f"AZURE_ML_INPUT_{name}"] = spec["uri"]
                continue
            is_file = spec["jobInputType"] == "uri_file"
            container, path = parse_uri(spec["uri"], DATASTORES)
            rel = f"INPUT_{name}"
            target = os.path.join(cap_host, rel)
            cpath = f"{cap}/{rel}"
            if is_file:
                fname = path.rsplit("/", 1)[-1]
                target = os.path.join(target, fname)
                cpath = f"{cpath}/{fname}"
            if service is None:
                return self._fail(job, "UserError", "No storage is configured for this fake.")
            try:
                download(service, container, path, target, is_file)
            except FileNotFoundError:
                return self._fail(
                    job,
                    "UserError",
                    f"Failed to download input '{name}': no data found at '{spec['uri']}'. "
                    "Make sure the path exists in the datastore.",
                )
            values[("inputs", name)] = cpath
            env[f"AZURE_ML_INPUT_{name}"] = cpath
        outputs: dict[str, tuple[str, str]] = {}
        for name, spec in (props.get("outputs") or {}).items():
            if spec.get("mode") == "Direct":
                values[("outputs", name)] = spec["uri"]
                env[f"AZURE_ML_OUTPUT_{name}"] = spec["uri"]
                continue
            host = os.path.join(cap_host, name)
            os.makedirs(host, exist_ok=True)
            if spec.get("mode") == "ReadWriteMount" and service is not None:
                # a read-write mount shows what the datastore already holds there
                container, path = parse_uri(spec["uri"], DATASTORES)
                with contextlib.suppress(FileNotFoundError):
                    download(service, container, path, host, False)
            values[("outputs", name)] = f"{cap}/{name}"
            env[f"AZURE_ML_OUTPUT_{name}"] = f"{cap}/{name}"
            outputs[name] = (host, spec["uri"])
        command = PLACEHOLDER.sub(lambda mm: values[(mm.group(1), mm.group(2))], props["command"])
        env.update(
            AZUREML_RUN_ID=job.name,
            AZUREML_ARM_SUBSCRIPTION=job.sub,
            AZUREML_ARM_RESOURCEGROUP=job.rg,
            AZUREML_ARM_WORKSPACE_NAME=job.ws,
            AZUREML_ARM_PROJECT_NAME=props.get("experimentName") or "Default",
            AZUREML_EXPERIMENT_NAME=props.get("experimentName") or "Default",
            AZUREML_SERVICE_ENDPOINT=self.url,
            AZUREML_CR_EXECUTION_WORKING_DIR_PATH=exe,
            AZUREML_CR_DATA_CAPABILITY_PATH=cap,
        )
        ws_id = job.resource["id"].rsplit("/jobs/", 1)[0]
        env.update(self.tracking.job_environment(self.url, ws_id, job.name))
        env.update(props.get("environmentVariables") or {})
        environment = self._resolve_env(props["environmentId"])
        image = environment["properties"].get("image") or ""
        if environment["properties"].get("build"):
            built = self._build_image(job, environment, service)
            if built is None:
                return None  # the job failed with the build's error
            image = built
        tier = (props.get("queueSettings") or {}).get("jobTier")
        try:
            while True:
                outcome = self._run_once(
                    job, workdir, image, command, env, cap, cap_host, exe, exe_host
                )
                if outcome != "preempted":
                    break
                self._log(job, "system_logs/lifecycler.txt", "Job preempted (low priority).")
                if tier != "Spot":
                    job.final = (
                        "Failed",
                        {
                            "code": "ServiceError",
                            "message": "The job was preempted and could not be resumed.",
                        },
                    )
                    break
                self._set_status(job, "Queued")
                if self._wait(job, self.phase_seconds):
                    job.final = ("Canceled", None)
                    break
        finally:
            if job.final is None or job.final[0] != "Canceled":
                self._set_status(job, "Finalizing")
            self._finalize(job, service, outputs)

    def _finalize(self, job: AmlJob, service: Any, outputs: dict[str, tuple[str, str]]) -> None:
        """Outputs and log files up to the datastores, then the status ``job.final`` asks for."""
        final, job.final = job.final, None
        if service is not None:
            for name, (host, uri) in outputs.items():
                try:
                    container, path = parse_uri(uri, DATASTORES)
                    upload(service, container, path, host)
                except Exception as exc:
                    self._log(job, "system_logs/data_capability.txt", f"upload of {name}: {exc!r}")
                    if final is not None and final[0] == "Completed":
                        msg = f"Failed to upload output '{name}': {exc}"
                        final = ("Failed", {"code": "UserError", "message": msg})
            by_file: dict[str, list[str]] = {}
            with self._lock:
                for ln in job.logs:
                    by_file.setdefault(ln.file, []).append(ln.text)
            for fname, lines in by_file.items():
                try:
                    upload_text(
                        service,
                        DATASTORES["workspaceartifactstore"],
                        f"ExperimentRun/dcid.{job.name}/{fname}",
                        "".join(line + "\n" for line in lines),
                    )
                except Exception as exc:
                    print(f"[azureml] log upload failed: {exc!r}", file=sys.stderr)
        if final is None:
            final = (
                "Failed",
                {"code": "SystemError", "message": "The job ended without a status."},
            )
        status, error = final
        if error is not None:
            self._fail(job, error["code"], error["message"])
        else:
            self._set_status(job, status)

    def _run_once(
        self,
        job: AmlJob,
        workdir: str,
        image: str,
        command: str,
        env: dict[str, str],
        cap: str,
        cap_host: str,
        exe: str,
        exe_host: str,
    ) -> str:
        """One attempt: "done" (``job.final`` set), "cancelled" or "preempted"."""
        props = job.props
        resources = props.get("resources") or {}
        instances = int(resources.get("instanceCount") or 1)
        dist = props.get("distribution") or {}
        per_node = int(dist.get("processCountPerInstance") or 1) if dist else 1
        world = instances * per_node
        master_port = str(_free_port())
        nodes = []
        for node_rank in range(instances):
            for local in range(per_node):
                rank = node_rank * per_node + local
                node_env = {
                    "RANK": str(rank),
                    "LOCAL_RANK": str(local),
                    "NODE_RANK": str(node_rank),
                    "WORLD_SIZE": str(world),
                    "LOCAL_WORLD_SIZE": str(per_node),
                    "MASTER_ADDR": "127.0.0.1",
                    "MASTER_PORT": master_port,
                    "AZUREML_NODE_COUNT": str(instances),
                }
                nodes.append(
                    runner_mod.NodeSpec(f"node-{node_rank}-{local}", rank=rank, env=node_env)
                )
        try:  # the job's own mode, else a built image runs in a container (cloud.runner)
            mode = self.runner.mode_for(image, (props.get("tags") or {}).get("stepop_fake_mode"))
        except runner_mod.LaunchError as exc:
            job.final = ("Failed", {"code": "UserError", "message": str(exc)})
            return "done"
        launch_env = dict(env)
        if mode == runner_mod.MODE_PROCESS:
            launch_env["PATH"] = os.pathsep.join(
                [os.path.dirname(sys.executable), os.environ.get("PATH", "/usr/bin:/bin")]
            )
        launch = runner_mod.JobLaunch(
            fake="azureml",
            name=job.name,
            image=image,
            entrypoint=["/bin/bash", "-c"],
            args=[command],
            env=launch_env,
            mounts=[runner_mod.Mount(cap_host, cap), runner_mod.Mount(exe_host, exe)],
            workdir=exe,
            nodes=nodes,
            labels={"stepop.azureml.job": job.name},
        )
        single = world == 1

        def sink(node: runner_mod.NodeSpec, stream: str, line: str, ts: float) -> None:
            fname = (
                "user_logs/std_log.txt" if single else f"user_logs/std_log_process_{node.rank}.txt"
            )
            self._log(job, fname, line, ts)

        run_dir = os.path.join(workdir, "runs", str(len(job.runs)))
        os.makedirs(run_dir, exist_ok=True)
        try:
            run = self.runner.launch(launch, on_line=sink, mode=mode, workdir=run_dir)
        except runner_mod.LaunchError as exc:
            job.final = (
                "Failed",
                {"code": "UserError", "message": f"Failed to start the job's container: {exc}"},
            )
            return "done"
        job.runs.append(run)
        self._set_status(job, "Running")
        started = time.monotonic()
        timeout = iso_seconds((props.get("limits") or {}).get("timeout"))
        # preempt rules are checked all along the attempt: one added while it runs is taken at
        # the next poll, and preempts ``after_seconds`` after that
        preempt_seen: set[int] = set()
        preempt_at: float | None = None
        while True:
            code = run.result()
            if code is not None:
                if code == 0:
                    job.final = ("Completed", None)
                else:
                    tail = [ln.text for ln in job.logs if ln.file.startswith("user_logs/")][-5:]
                    job.final = (
                        "Failed",
                        {
                            "code": "UserError",
                            "message": "Execution failed. User process '/bin/bash' exited with "
                            f"status code {code}. Please check log file 'user_logs/std_log.txt' "
                            "for error details. Error: " + "\n".join(tail),
                        },
                    )
                return "done"
            if job.cancel.is_set() or self._stopping.is_set():
                run.stop(grace=5)
                job.final = ("Canceled", None)
                return "cancelled"
            now = time.monotonic()
            if preempt_at is None:
                preempt = self.faults.take_job_fault("preempt", job.name, preempt_seen)
                if preempt is not None:
                    preempt_at = now + float(preempt.get("after_seconds", 0.5))
            if preempt_at is not None and now >= preempt_at:
                run.stop(grace=2)
                return "preempted"
            if timeout is not None and now - started > timeout:
                run.stop(grace=2)
                job.final = (
                    "Failed",
                    {
                        "code": "UserError",
                        "message": f"The job exceeded its limits.timeout of {timeout:g} seconds "
                        "and was canceled.",
                    },
                )
                return "done"
            # a timer job's end is read once a second: a thousand of them polling 20 times a
            # second kept the fake's threads runnable all the time
            job.cancel.wait(1.0 if mode == runner_mod.MODE_TIMER else 0.05)

    def _stop_jobs(self) -> None:
        """Cancel every job and wait for their threads (reset, shutdown)."""
        with self._lock:
            alive = list(self.jobs.values())
        runner_mod.stop_job_threads(alive)


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
