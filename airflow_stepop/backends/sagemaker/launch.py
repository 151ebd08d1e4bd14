"""How a step becomes a SageMaker training job's channels, launch document and environment.

Pure functions (no API call, unit-tested): the code bundle and the attempt's run directory are
channels ``code`` and ``run``; upstream ``ArtifactRef`` inputs are grouped into at most 20
channels; the path map (S3 prefix -> channel directory) lets the runtime read those URIs as
local files; environment values over SageMaker's 512 characters travel in the launch document.
"""

from __future__ import annotations

import re
from typing import Any

from airflow_stepop.backends.base import JobRequest
from airflow_stepop.backends.bootstrap import CheckedFile, bootstrap_arguments, sha256_of
from airflow_stepop.runtime.values import input_uris

ML_ROOT = "/opt/ml"
ENTRY_FILE = "stepop_entry.py"  # entry.py, as the run channel has it
LAUNCH_FILE = "stepop_launch.json"
MAX_CHANNELS = 20
ENV_VALUE_MAX = 512
ENV_ENTRIES_MAX = 100
TAG_VALUE = re.compile(r"[^\w.:/=+\-@ ]", re.UNICODE)


class SageMakerConfigError(ValueError):
    """A request SageMaker would refuse, caught before any API call."""


def sanitize_tag(value: str, limit: int = 256) -> str:
    return TAG_VALUE.sub("_", value)[:limit]


def _common_prefix(a: str, b: str) -> str:
    parts_a, parts_b = a.split("/"), b.split("/")
    common = []
    for x, y in zip(parts_a, parts_b, strict=False):
        if x != y:
            break
        common.append(x)
    return "/".join(common)


def group_prefixes(uris: list[str], limit: int) -> list[str]:
    """Directory prefixes covering ``uris``, merged to common ancestors to stay within ``limit``.

    A merged prefix never goes above its bucket (s3://bucket); fewer, broader channels download
    more than needed but keep every input readable as a local file.
    """
    prefixes = sorted({uri.rstrip("/").rsplit("/", 1)[0] for uri in uris})

    def dedupe(items: list[str]) -> list[str]:
        kept: list[str] = []
        for item in sorted(set(items)):
            if not any(item == k or item.startswith(k + "/") for k in kept):
                kept.append(item)
        return kept

    prefixes = dedupe(prefixes)
    while len(prefixes) > limit:
        best = max(
            range(len(prefixes) - 1),
            key=lambda i: len(_common_prefix(prefixes[i], prefixes[i + 1])),
        )
        merged = _common_prefix(prefixes[best], prefixes[best + 1])
        if merged.count("/") < 2:  # "s3:" + "" + bucket: the bucket itself
            merged = "/".join(prefixes[best].split("/")[:3])
        prefixes = dedupe([*prefixes[:best], merged, *prefixes[best + 2 :]])
    return prefixes


def _channel(name: str, s3_uri: str) -> dict[str, Any]:
    return {
        "ChannelName": name,
        "DataSource": {
            "S3DataSource": {
                "S3DataType": "S3Prefix",
                "S3Uri": s3_uri,
                "S3DataDistributionType": "FullyReplicated",
            }
        },
        "InputMode": "File",
    }


def code_path(request: JobRequest) -> str:
    """Where the code channel puts the bundle, relative to /opt/ml."""
    return f"input/data/code/{request.code_uri.rsplit('/', 1)[1]}"


def entrypoint(request: JobRequest, entry_source: bytes, launch: bytes) -> list[str]:
    """The job's ContainerEntrypoint: the bootstrap, which checks the entry script and launch
    document (in the run channel) and the code bundle (in the code channel) against the
    digests it carries, then runs the entry script's checked copy."""
    run_channel = f"{ML_ROOT}/input/data/run"
    checked = [
        CheckedFile(ENTRY_FILE, f"{run_channel}/{ENTRY_FILE}", sha256_of(entry_source)),
        CheckedFile(LAUNCH_FILE, f"{run_channel}/{LAUNCH_FILE}", sha256_of(launch)),
        CheckedFile("code.zip", f"{ML_ROOT}/{code_path(request)}", request.code_sha256),
    ]
    return ["python3", *bootstrap_arguments(checked, [ENTRY_FILE, LAUNCH_FILE, ML_ROOT])]


def build_launch(
    request: JobRequest, spec: dict[str, Any], job_name: str
) -> tuple[list[dict[str, Any]], dict[str, Any], dict[str, str], str]:
    """Channels, launch document, service Environment and output URI for one job.

    Pure: no API call (unit-tested). Raises SageMakerConfigError for inputs a job cannot read.
    """
    run_uri = request.run_uri.rstrip("/")
    output_uri = f"{run_uri}/{job_name}/output/model"
    channels = [_channel("code", request.code_uri), _channel("run", run_uri + "/")]
    path_map = {
        request.code_uri: code_path(request),
        run_uri: "input/data/run",
        output_uri: "model",
    }
    inputs = []
    for uri in input_uris(spec):
        if uri.startswith(run_uri + "/"):
            continue  # staged by the worker into this run: the run channel has it
        if not uri.startswith("s3://"):
            raise SageMakerConfigError(
                f"An input of this step is the artifact {uri}, which a SageMaker job cannot "
                "read (only s3:// artifacts travel as input channels). Give the upstream task an "
                "s3:// artifact_root, or pass the value itself."
            )
        inputs.append(uri)
    for i, prefix in enumerate(group_prefixes(inputs, MAX_CHANNELS - len(channels)), start=1):
        channels.append(_channel(f"in{i}", prefix + "/"))
        path_map[prefix] = f"input/data/in{i}"

    environment: dict[str, str] = {}
    launch_env: dict[str, str] = {}
    # PYTHONUNBUFFERED, STEPOP_CHECKPOINT_DIR, the bootstrap's three (bootstrap.py), one spare
    reserved = 6
    for key, value in request.environment.items():
        if len(value) > ENV_VALUE_MAX or len(environment) >= ENV_ENTRIES_MAX - reserved:
            launch_env[key] = value  # travels in the launch document, never chunked
        else:
            environment[key] = value
    environment["PYTHONUNBUFFERED"] = "1"
    launch = {
        "spec_uri": request.spec_uri,
        "output_uri": output_uri,
        "path_map": path_map,
        "environment": launch_env,
    }
    return channels, launch, environment, output_uri
