"""The provider's ``[stepop]`` configuration section: one place that reads it, with defaults."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

SECTION = "stepop"

# name -> (type, default, description); get_provider_info() publishes these to Airflow.
OPTIONS: dict[str, tuple[str, str, str]] = {
    "artifact_root": (
        "string",
        "",
        "Where steps keep code bundles, inputs and results: any fsspec URL (file://, s3://, "
        "gs://, abfs://). Empty means file://$AIRFLOW_HOME/stepop-artifacts.",
    ),
    **{
        f"{service}_artifact_root": (
            "string",
            "",
            f"Artifact root of {name} steps ({scheme}); empty means [stepop] artifact_root. "
            "Lets one deployment run local steps on file:// and cloud steps on object storage.",
        )
        for service, name, scheme in (
            ("sagemaker", "SageMaker", "s3://"),
            ("vertex", "Vertex AI", "gs://"),
            ("azureml", "Azure ML", "abfs://, az:// or azureml://datastores/"),
            ("kubernetes", "Kubernetes", "s3://, or file:// on a shared volume"),
        )
    },
    "poll_interval": ("float", "5.0", "Seconds between two job-state polls of a trigger."),
    "list_calls_per_second": (
        "float",
        "1.0",
        "List calls per second that one process makes to one service account and region (the "
        "batched poller's and re-attach checks'); services throttle List calls account-wide.",
    ),
    "log_calls_per_second": (
        "float",
        "5.0",
        "Log-service calls per second that one triggerer process makes for all the steps of one "
        "service account and region; with many steps, each step's lines arrive less often.",
    ),
    "end_from_trigger": (
        "boolean",
        "True",
        "A step's trigger ends its task itself when the job has ended (result verified, XComs "
        "pushed, the task marked success or failed): no second task process, no wait. A task "
        "with a success callback, outlets, post_execute or Airflow listeners resumes in a "
        "worker instead, and after a failure one with a failure or retry callback, email, "
        "retry_policy or a fail_fast DAG; every task does when this is off.",
    ),
    "resume_hold_seconds": (
        "integer",
        "10",
        "When a step's task resumes in a worker after its job (see end_from_trigger), the "
        "event of a job that ends within this many seconds of its trigger's start "
        "waits until then, so that the executor has reported the deferring try's exit before "
        "the task resumes: Airflow 3.3 fails a task that resumes before that "
        "(apache/airflow#67287, #72716). 0 turns it off. dag.test() and airflow dags test "
        "(without --use-executor) never wait.",
    ),
    "inline_result_max_bytes": (
        "integer",
        "65536",
        "A JSON result at most this large comes back as a plain XCom value; larger or "
        "non-JSON results come back as ArtifactRef.",
    ),
    "artifact_cache_max_bytes": (
        "integer",
        "10737418240",
        "Bytes the worker's cache of downloaded artifacts (a plain task's ArtifactRef.load()) "
        "may hold before the least recently used entries not in use are removed; a local step's "
        "job bounds its own caches with it too. 0 keeps nothing once it has been used.",
    ),
    "bundle_cache_max_bytes": (
        "integer",
        "536870912",
        "Bytes of code bundles the worker keeps under $AIRFLOW_HOME/stepop-cache/bundles for "
        "later tasks before the least recently used are removed.",
    ),
    "capacity_attempts": (
        "integer",
        "3",
        "How many machine types a step tries, the cheapest fitting first, when the service "
        "has no capacity or quota for one (a step's capacity_attempts= wins); 1: no failover.",
    ),
    "cache": (
        "boolean",
        "False",
        "Whether steps reuse the result of an earlier job with the same code, inputs and "
        "environment (the step cache) when they do not say so themselves (cache=). Off: a step "
        "that reads the outside world must not silently return an old result.",
    ),
    "worker_unpickle": (
        "boolean",
        "False",
        "Let ArtifactRef.load() in a plain task unpickle a step's pickled result. A step's job "
        "writes it, and so may anyone who can write the artifact root: unpickling runs code. "
        "False: only load(allow_pickle=True) does. Steps given the reference load it anyway, "
        "inside their own job.",
    ),
    "local_jobs_dir": (
        "string",
        "",
        "Where the local backend keeps its job records (pid, log, exit code). Empty means "
        "$AIRFLOW_HOME/stepop-jobs.",
    ),
    "build_network_mode": (
        "string",
        "",
        "Docker network mode for image builds (e.g. 'host' where the engine has no bridge).",
    ),
    "build_ca_bundle": (
        "string",
        "",
        "A CA bundle (PEM file) that pip trusts while building environment images, for "
        "networks whose TLS is re-signed by a corporate proxy. Not part of the image hash.",
    ),
    "sagemaker_role": (
        "string",
        "",
        "Default execution role (ARN or name) of SageMaker step jobs when the operator's role= "
        "is not set.",
    ),
    "sagemaker_image_repository": (
        "string",
        "",
        "Where SageMaker steps push environment images they build: an ECR repository "
        "('<account>.dkr.ecr.<region>.amazonaws.com/<name>', created on demand) or any "
        "'host[:port]/<name>'. Empty means <account>.dkr.ecr.<region>.amazonaws.com/"
        "airflow-stepop-env of the AWS connection.",
    ),
    "vertex_location": (
        "string",
        "us-central1",
        "Vertex AI region of step jobs when neither the operator's location= nor the Google "
        "connection names one.",
    ),
    "vertex_image_repository": (
        "string",
        "",
        "Where Vertex steps push environment images they build: an Artifact Registry "
        "repository 'LOCATION-docker.pkg.dev/PROJECT/REPOSITORY' or any 'host[:port]/<name>'. "
        "Empty means the repository <location>-docker.pkg.dev/<project>/airflow-stepop "
        "(create it once); images are named airflow-stepop-env in it.",
    ),
    "vertex_default_machine_type": (
        "string",
        "n1-standard-4",
        "Vertex machine type of a step that gives neither resources= nor machine_type=. A GPU "
        "type the catalog lists gets its GPUs; another names them after a '+', e.g. "
        "'a3-megagpu-8g+NVIDIA_H100_MEGA_80GBx8'.",
    ),
    "azureml_image_repository": (
        "string",
        "",
        "Where Azure ML steps push environment images they build: an Azure Container Registry "
        "repository '<registry>.azurecr.io/<name>' or any 'host[:port]/<name>'. Empty means "
        "the workspace's own container registry.",
    ),
    "azureml_image_build": (
        "string",
        "auto",
        "Who builds an Azure ML step's environment image: 'engine' (a container engine on the "
        "worker, pushed to the registry), 'service' (Azure ML builds it from the Dockerfile), "
        "or 'auto' (the engine when one answers, else the service).",
    ),
    "sagemaker_image_build": (
        "string",
        "auto",
        "Who builds a SageMaker step's environment image: 'engine' (a container engine on the "
        "worker, pushed to ECR), 'service' (AWS CodeBuild builds and pushes it while the task "
        "is deferred), or 'auto' (the engine when one answers, else CodeBuild).",
    ),
    "sagemaker_codebuild_project": (
        "string",
        "airflow-stepop-image-build",
        "The AWS CodeBuild project that builds SageMaker steps' images; created on first use "
        "when missing (with [stepop] sagemaker_codebuild_role) where the connection may.",
    ),
    "sagemaker_codebuild_role": (
        "string",
        "",
        "The service role (name or ARN) of a CodeBuild project created on first use. Empty "
        "means the role airflow-stepop-codebuild, itself created on first use where the "
        "connection may (see docs/sagemaker.md, IAM).",
    ),
    "sagemaker_codebuild_compute_type": (
        "string",
        "BUILD_GENERAL1_MEDIUM",
        "The compute type of a CodeBuild project created on first use (BUILD_GENERAL1_SMALL, "
        "_MEDIUM, _LARGE...): large CUDA images build faster on more memory.",
    ),
    "vertex_image_build": (
        "string",
        "auto",
        "Who builds a Vertex AI step's environment image: 'engine' (a container engine on the "
        "worker, pushed to Artifact Registry), 'service' (Cloud Build builds and pushes it "
        "while the task is deferred), or 'auto' (the engine when one answers, else Cloud Build).",
    ),
    "vertex_cloud_build_service_account": (
        "string",
        "",
        "The service account Cloud Build runs Vertex AI steps' image builds as "
        "('projects/PROJECT/serviceAccounts/EMAIL' or an email). Empty means Cloud Build's "
        "default one.",
    ),
    "image_build_timeout_minutes": (
        "integer",
        "60",
        "How long a service's build of a step's image (CodeBuild, Cloud Build) may take before "
        "the service stops it and the step fails.",
    ),
    "azureml_default_instance_type": (
        "string",
        "Standard_DS3_v2",
        "Azure ML VM size of a serverless step that gives neither resources= nor instance_type=.",
    ),
    "kubernetes_namespace": (
        "string",
        "",
        "Namespace of Kubernetes steps' Jobs when the operator's namespace= is not set. Empty "
        "means the connection's namespace extra, else 'default'.",
    ),
    "kubernetes_schedule_timeout": (
        "float",
        "1800",
        "Seconds a Kubernetes step's pod may stay unschedulable (no node with room for its "
        "requests, selectors and tolerations) before the step fails; time queued in Kueue, "
        "where the Job waits suspended, does not count.",
    ),
    "kubernetes_gpu_resource": (
        "string",
        "nvidia.com/gpu",
        "The extended resource a Kubernetes step's GPUs are requested as (amd.com/gpu, "
        "gpu.intel.com/i915...).",
    ),
    "kubernetes_gpu_label": (
        "string",
        "nvidia.com/gpu.product",
        "The node label that names a node's GPU model, which ResourceSettings.gpu_type selects "
        "on: NVIDIA GPU feature discovery's nvidia.com/gpu.product, or GKE's "
        "cloud.google.com/gke-accelerator (docs/kubernetes.md has both tables).",
    ),
    "kubernetes_image_repository": (
        "string",
        "",
        "Where Kubernetes steps push environment images they build: 'host[:port]/<name>' of a "
        "registry the cluster pulls from. Needed by a step with docker= that builds.",
    ),
    "sagemaker_default_instance_type": (
        "string",
        "ml.m5.large",
        "SageMaker instance type of a step that gives neither resources= nor instance_type=.",
    ),
}


def _conf() -> Any:
    from airflow.sdk import conf

    return conf


def get(name: str) -> str:
    _, default, _ = OPTIONS[name]
    return _conf().get(SECTION, name, fallback=default) or default


def get_bool(name: str) -> bool:
    value = get(name).strip().lower()
    if value not in ("true", "false", "1", "0", "yes", "no", "on", "off"):
        raise ValueError(
            f"[{SECTION}] {name}={get(name)!r} (AIRFLOW__{SECTION.upper()}__{name.upper()}) must "
            f"be True or False; the default is {OPTIONS[name][1]}."
        )
    return value in ("true", "1", "yes", "on")


def get_float(name: str) -> float:
    return _number(name, float)


def get_int(name: str) -> int:
    return _number(name, int)


def check_numbers() -> None:
    """Read every number option and the options read after the submit, so that a wrong one
    fails the task before its job starts, not after the submit (``poll_interval``,
    ``end_from_trigger``) or in the triggerer (``log_calls_per_second``)."""
    for name, (kind, _, _) in OPTIONS.items():
        if kind in ("float", "integer"):
            _number(name, float if kind == "float" else int)
    get_bool("end_from_trigger")


def _number(name: str, kind: type) -> Any:
    value = get(name)
    try:
        number = kind(value)
    except ValueError:
        number = None
    # a float is a duration or a rate (> 0, finite); an int is a size (0 allowed: e.g. never
    # inline a result)
    if number is None or not math.isfinite(number) or number < 0 or (number == 0 and kind is float):
        wanted = "a whole number >= 0" if kind is int else "a number > 0"
        raise ValueError(
            f"[{SECTION}] {name}={value!r} (AIRFLOW__{SECTION.upper()}__{name.upper()}) must be "
            f"{wanted}; the default is {OPTIONS[name][1]}."
        )
    return number


def airflow_home() -> str:
    return os.environ.get("AIRFLOW_HOME") or os.path.expanduser("~/airflow")


def worker_cache_dir() -> Path:
    """``$AIRFLOW_HOME/stepop-cache``: what a worker keeps between its task processes."""
    return Path(airflow_home()) / "stepop-cache"


def artifact_root(service: str | None = None) -> str:
    """``[stepop] <service>_artifact_root``, else ``artifact_root``, else a local directory."""
    root = (get(f"{service}_artifact_root") if service else "") or get("artifact_root")
    return root or f"file://{airflow_home()}/stepop-artifacts"


def artifact_root_options(service: str | None) -> str:
    """How a user sets the root of a service's steps, for error messages."""
    own = f"[stepop] {service}_artifact_root, " if service else ""
    return f"artifact_root=, {own}or [stepop] artifact_root"


def provider_config() -> dict[str, Any]:
    return {
        SECTION: {
            "description": "airflow-stepop: step operators that run one task on a ML service.",
            "options": {
                name: {
                    "description": description,
                    "version_added": "0.1.0",
                    "type": kind,
                    "example": None,
                    "default": default,
                }
                for name, (kind, default, description) in OPTIONS.items()
            },
        }
    }
