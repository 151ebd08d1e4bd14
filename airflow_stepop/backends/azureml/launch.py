"""Pure parts of the Azure ML backend (no API call; unit-tested): URIs, the job body, states.

How a step becomes a command job:

* inputs (``uri_file``/``uri_folder``, mounted or downloaded as Azure ML decides): ``code`` =
  the code bundle, ``run`` = the attempt's run directory (spec, staged inputs, the entry script
  and its launch document), ``in1``.. = directories of upstream ``ArtifactRef`` inputs;
* outputs: ``result`` (uploaded when the job ends) = ``<run_uri>/<job>/result``, where result
  refs point (the handle's output_uri); ``checkpoints`` (read-write mount) =
  the task instance's checkpoint directory, shared by its tries;
* the command: the bootstrap (``backends/bootstrap.py``), which checks the entry script and
  launch document (in ``run``) and the code bundle (``code``) against the digests the command
  carries, then runs ``python3 <checked entry.py> <checked launch> code=${{inputs.code}} ...``.

Artifact URIs are ``abfs[s]://`` or ``az://`` (what the worker writes through fsspec); the job
sees the same data as ``https://<account>.blob.<suffix>/<container>/<path>`` (the suffix of the
workspace's cloud, ``core.windows.net`` in public Azure), a form Azure ML takes for job inputs
and outputs, or, under a datastore root, as
``azureml://datastores/<name>/paths/<path>`` (``roots``).
"""

from __future__ import annotations

import json
import math
import re
import shlex
from typing import Any

from airflow_stepop.backends.azureml.config import JOB_PRIORITIES, AzureMLJobConfig
from airflow_stepop.backends.azureml.errors import AzureMLConfigError
from airflow_stepop.backends.base import JobRequest, JobStatus
from airflow_stepop.backends.bootstrap import (
    CheckedFile,
    bootstrap_arguments,
    bootstrap_environment,
    sha256_of,
)
from airflow_stepop.hooks.azureml_rest import epoch
from airflow_stepop.runtime.values import input_uris

ENTRY_FILE = "stepop_entry.py"
LAUNCH_FILE = "stepop_launch.json"
TRY_PROPERTY = "stepop_try_id"  # the job's property naming the try that created it
CLUSTER_PROPERTY = "stepop_compute"  # the named cluster a job runs on (none: serverless)
PENDING = frozenset({"NotStarted", "Starting", "Provisioning", "Preparing", "Queued"})
RUNNING = frozenset({"Running", "Finalizing", "CancelRequested"})
# abfs://container/path, abfs://<conn id>@container/path (Airflow's form: the connection's
# credentials) and adlfs's abfs://container@account.dfs.core.windows.net/path.
_ABFS = re.compile(
    r"^(?:abfss?|az)://(?:(?P<conn>[^/@.]+)@)?(?P<container>[^/@.]+)"
    r"(?:@(?P<account>[^./]+)\.[^/]*)?(?:/(?P<path>.*))?$"
)


def blob_url(uri: str, account: str | None, suffix: str = "core.windows.net") -> str:
    """``abfs://container[@account...]/path`` -> ``https://<account>.blob.<suffix>/...``, where
    ``suffix`` is the storage suffix of the workspace's cloud."""
    m = _ABFS.match(uri)
    if m is None:
        raise AzureMLConfigError(
            f"An input of this step is the artifact {uri}, which an Azure ML job cannot read "
            "(only abfs:// and az:// artifacts travel as job inputs). Give the upstream task an "
            "abfs://, az:// or azureml://datastores/ artifact_root, or pass the value itself."
        )
    name = m["account"] or account
    if not name:
        raise AzureMLConfigError(
            f"The storage account of {uri} is unknown: write it as "
            "abfs://<container>@<account>.dfs.core.windows.net/<path>."
        )
    return f"https://{name}.blob.{suffix}/{m['container']}/{m['path'] or ''}".rstrip("/")


def job_uri(
    uri: str,
    account: str | None,
    datastore: tuple[str, str] | None = None,
    suffix: str = "core.windows.net",
) -> str:
    """How the job names an artifact URI: a datastore path under ``datastore`` (the blob
    prefix the worker writes, the datastore's path prefix), else a blob URL (``suffix``: the
    cloud's storage suffix)."""
    if datastore is not None:
        blob, paths = datastore
        if uri == blob or uri.startswith(blob.rstrip("/") + "/"):
            return paths.rstrip("/") + "/" + uri[len(blob) :].strip("/")
    return blob_url(uri, account, suffix)


def input_dirs(uris: list[str]) -> list[str]:
    """The directories holding ``uris``, without any that another one already contains."""
    kept: list[str] = []
    for item in sorted({uri.rstrip("/").rsplit("/", 1)[0] for uri in uris}):
        if not any(item == k or item.startswith(k + "/") for k in kept):
            kept.append(item)
    return kept


def build_launch(
    request: JobRequest,
    spec: dict[str, Any],
    account: str | None,
    datastore: tuple[str, str] | None = None,
    suffix: str = "core.windows.net",
    *,
    entry_source: bytes,
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any], str, str]:
    """(inputs, outputs, launch document, command, output_uri) of one job; ``datastore`` and
    ``suffix`` as in ``job_uri``; ``entry_source``, the entry script the command checks."""

    def locate(uri: str) -> str:
        return job_uri(uri, account, datastore, suffix)

    run_uri = request.run_uri.rstrip("/")
    output_uri = f"{run_uri}/{request.job_name}/result"
    inputs: dict[str, Any] = {
        "code": {"jobInputType": "uri_file", "uri": locate(request.code_uri),
                 "mode": "Download"},
        "run": {"jobInputType": "uri_folder", "uri": locate(run_uri) + "/",
                "mode": "ReadOnlyMount"},
    }  # fmt: skip
    outputs: dict[str, Any] = {
        "result": {"jobOutputType": "uri_folder", "uri": locate(output_uri) + "/",
                   "mode": "Upload"},
    }  # fmt: skip
    path_map = {request.code_uri: "code", run_uri: "run", output_uri: "result"}
    upstream = [
        uri
        for uri in input_uris(spec)
        if not uri.startswith(run_uri + "/")  # staged by the worker into this run
    ]
    for i, prefix in enumerate(input_dirs(upstream), start=1):
        inputs[f"in{i}"] = {"jobInputType": "uri_folder", "uri": locate(prefix) + "/",
                            "mode": "ReadOnlyMount"}  # fmt: skip
        path_map[prefix] = f"in{i}"
    launch: dict[str, Any] = {
        "spec_uri": request.spec_uri,
        "output_uri": output_uri,
        "path_map": path_map,
    }
    # every job's, shared by the task instance's tries: a retry resumes as a spot job does
    outputs["checkpoints"] = {
        "jobOutputType": "uri_folder",
        "uri": locate(request.checkpoint_uri) + "/",
        "mode": "ReadWriteMount",
    }
    launch["checkpoints"] = "checkpoints"
    names = [*(f"{n}=${{{{inputs.{n}}}}}" for n in inputs),
             *(f"{n}=${{{{outputs.{n}}}}}" for n in outputs)]  # fmt: skip
    checked = [
        CheckedFile(ENTRY_FILE, f"${{{{inputs.run}}}}/{ENTRY_FILE}", sha256_of(entry_source)),
        CheckedFile(
            LAUNCH_FILE, f"${{{{inputs.run}}}}/{LAUNCH_FILE}", sha256_of(launch_bytes(launch))
        ),
        CheckedFile("code.zip", "${{inputs.code}}", request.code_sha256),
    ]
    arguments = bootstrap_arguments(checked, [ENTRY_FILE, LAUNCH_FILE, *names])
    # a shell runs it: each argument quoted, the ${{...}} paths Azure ML fills in double quotes
    command = " ".join(["python3", *map(_shell_word, arguments)])
    return inputs, outputs, launch, command, output_uri


def launch_bytes(launch: dict[str, Any]) -> bytes:
    """The launch document as the run directory holds it (and the bootstrap checks it)."""
    return json.dumps(launch).encode()


def _shell_word(argument: str) -> str:
    if "${{" in argument:  # Azure ML's placeholder, replaced by a path before the shell runs
        return f'"{argument}"'
    return shlex.quote(argument)


def job_body(
    request: JobRequest,
    job: AzureMLJobConfig,
    *,
    environment_id: str,
    compute_id: str | None,
    inputs: dict[str, Any],
    outputs: dict[str, Any],
    command: str,
    properties: dict[str, str],
    tags: dict[str, str],
) -> dict[str, Any]:
    """The ARM body of ``PUT .../jobs/{name}`` for a command job."""
    environment = dict(request.environment)
    environment["PYTHONUNBUFFERED"] = "1"
    environment.update(bootstrap_environment(request.spec_sha256, request.try_id))
    resources: dict[str, Any] = {"instanceCount": job.instance_count}
    if job.instance_type:
        resources["instanceType"] = job.instance_type
    if job.shm_size:
        resources["shmSize"] = job.shm_size
    props: dict[str, Any] = {
        "jobType": "Command",
        "command": command,
        "environmentId": environment_id,
        "experimentName": job.experiment_name,
        "displayName": request.labels.get("task_id") or request.job_name,
        "computeId": compute_id,
        "resources": resources,
        "limits": {"jobLimitsType": "Command", "timeout": f"PT{job.max_runtime_s}S"},
        "environmentVariables": environment,
        "inputs": inputs,
        "outputs": outputs,
        "tags": tags,
        "properties": properties,
    }
    if job.processes > 1:
        props["distribution"] = {
            "distributionType": "PyTorch",
            "processCountPerInstance": job.processes_per_instance,
        }
    if job.job_tier:
        props["queueSettings"] = {"jobTier": job.job_tier}
    if job.job_priority:
        queue = props.setdefault("queueSettings", {})
        queue["priority"] = JOB_PRIORITIES[job.job_priority]
    if job.identity:
        props["identity"] = dict(job.identity)
    return {"properties": props}


# A user error quotes the end of the job's log after this ("... Please check log file
# 'user_logs/std_log.txt' for error details. Error: <the last lines>"). The step's failure
# message shows the remote exception and the log's tail itself: the quote would repeat them.
LOG_QUOTE = "for error details. Error:"


def map_status(status: str, error: dict[str, Any] | None = None) -> JobStatus:
    """An Azure ML job status as a step state; Paused and NotResponding are failures."""
    message = (error or {}).get("message")
    if message and LOG_QUOTE in message:
        message = message.split(LOG_QUOTE, 1)[0] + "for error details."
    if status == "Completed":
        return JobStatus("succeeded")
    if status == "Failed":
        code = (error or {}).get("code")
        reason = f"{code}: {message}" if code and message else message
        return JobStatus("failed", reason or "the job failed", capacity=short_of_quota(error))
    if status == "Canceled":
        return JobStatus("stopped", message or "the job was canceled")
    if status in ("NotResponding", "Paused"):
        reason = f"the job is {status}" + (f": {message}" if message else "")
        return JobStatus("failed", reason, held=True)  # not ended: cancelled with the step
    if status in PENDING:  # Queued: waiting for its compute's VMs (a cluster's, or serverless)
        return JobStatus("pending", queued=status == "Queued")
    # Running, Finalizing, CancelRequested, anything newer
    return JobStatus("running", stopping=status == "CancelRequested")


# Azure ML's codes for a job that failed for want of quota for its VM size: the vCPU quota of
# the subscription (or workspace) for the size's family is less than the job's nodes need.
QUOTA_CODES = frozenset({"JobNodeCountExceedsCoreQuota"})
# Run history files such a failure under the code ``UserError``, its message naming the code the
# compute service answered with: "Job submission to AzureML Compute encountered an Exception
# with status code JobNodeCountExceedsCoreQuota, The specified subscription has a vCPU quota of
# ...", or "...: JobNodeCountExceedsCoreQuota: ..." in other clients' wording.
_STATUS_CODE = re.compile(r"(?:\bstatus code |^|[:.] )([A-Z][A-Za-z]+)(?=[,:])")


def short_of_quota(error: dict[str, Any] | None) -> bool:
    """Whether run history's ``error`` is a quota failure (``QUOTA_CODES``), by the codes the
    service gives: the error's own code, its inner errors' and details', and the compute
    service's status code that the message quotes in its fixed form (never a word such as
    "quota" anywhere in free text)."""
    codes: set[str] = set()
    pending = [error] if isinstance(error, dict) else []
    for _ in range(32):  # nested inner errors and details, boundedly
        if not pending:
            break
        item = pending.pop()
        if isinstance(item.get("code"), str):
            codes.add(item["code"])
        if isinstance(item.get("innerError"), dict):
            pending.append(item["innerError"])
        pending.extend(d for d in (item.get("details") or [])[:8] if isinstance(d, dict))
        message = item.get("message")
        if isinstance(message, str):  # never the user's log that a user error quotes
            codes.update(_STATUS_CODE.findall(message[:4096].split(LOG_QUOTE, 1)[0]))
    return bool(codes & QUOTA_CODES)


def low_priority(props: dict[str, Any]) -> bool:
    """Whether a job (its resource's ``properties``) runs on low-priority VMs: the Spot tier of
    serverless compute, or a cluster created with ``LowPriority`` VMs (``submit`` records its
    ``vmPriority``; a cluster's priority is fixed when it is created)."""
    own = props.get("properties") or {}
    tier = (props.get("queueSettings") or {}).get("jobTier")
    return tier == "Spot" or own.get("stepop_vm_priority") == "LowPriority"


def user_logs(details: dict[str, Any]) -> dict[str, str]:
    """The job's own output files (``user_logs/``) of run history details: name -> URL."""
    return {k: v for k, v in (details.get("logFiles") or {}).items() if "user_logs/" in k}


def rank_of(path: str) -> str:
    stem = path.rsplit("/", 1)[-1].removesuffix(".txt")
    return "rank " + stem.rsplit("_", 1)[-1] if "process_" in stem else stem


def billing_facts(resource: dict[str, Any], details: dict[str, Any]) -> dict[str, Any]:
    """What billing needs from the job resource and its run history details (small, JSON)."""
    props = resource.get("properties", {})
    started, ended = epoch(details.get("startTimeUtc")), epoch(details.get("endTimeUtc"))
    seconds = math.ceil(ended - started) if started is not None and ended is not None else 0
    stepop = props.get("properties") or {}
    return {
        "job_name": resource.get("name"),
        "instance_type": stepop.get("stepop_vm_size")
        or (props.get("resources") or {}).get("instanceType"),
        "instance_count": int((props.get("resources") or {}).get("instanceCount") or 1),
        "job_tier": (props.get("queueSettings") or {}).get("jobTier"),
        "low_priority": low_priority(props),
        "run_seconds": max(0, seconds),
    }


def studio_links(workspace: Any, job_name: str, experiment: str | None) -> dict[str, str]:
    """The job and its experiment in the Azure ML studio of the workspace's cloud."""
    studio = workspace.cloud.studio
    suffix = f"?wsid={workspace.path}" + (
        f"&tid={workspace.tenant_id}" if workspace.tenant_id else ""
    )
    links = {"job": f"{studio}/runs/{job_name}{suffix}"}
    if experiment:
        links["experiment"] = f"{studio}/experiments/{experiment}{suffix}"
    return links
