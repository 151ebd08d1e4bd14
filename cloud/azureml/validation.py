"""What the Azure ML fake refuses in a job or environment body, in MFE's words.

The checks run before anything is stored, so a refused PUT leaves no trace, as on the service.
They raise :class:`cloud.azureml.arm.ArmError` (400 ``UserError`` or ``ValidationError``).
"""

from __future__ import annotations

import re
from typing import Any

from cloud.azureml.arm import ArmError, bad, invalid
from cloud.azureml.catalog import canonical_instance_type
from cloud.azureml.storage import parse_uri

JOB_NAME = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_-]{0,254}$")
ASSET_NAME = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9._-]{0,254}$")
EXPERIMENT_NAME = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_-]{0,254}$")
_ISO_DURATION = re.compile(r"^P(?!$)(\d+D)?(T(?=\d)(\d+H)?(\d+M)?(\d+(\.\d+)?S)?)?$")
# ``${{inputs.x}}`` / ``${{outputs.y}}`` in a command; the runner replaces them with paths.
PLACEHOLDER = re.compile(r"\$\{\{\s*(inputs|outputs)\.([A-Za-z0-9_]+)\s*\}\}")

INPUT_TYPES = ("uri_folder", "uri_file", "literal", "mltable", "custom_model", "mlflow_model",
               "triton_model")  # fmt: skip
OUTPUT_TYPES = ("uri_folder", "uri_file", "mltable", "custom_model", "mlflow_model",
                "triton_model")  # fmt: skip
INPUT_MODES = ("ReadOnlyMount", "ReadWriteMount", "Download", "Direct", "EvalMount",
               "EvalDownload")  # fmt: skip
OUTPUT_MODES = ("ReadWriteMount", "Upload", "Direct")
JOB_TYPES = ("Command", "Sweep", "Pipeline", "AutoML", "Spark")
DISTRIBUTIONS = ("PyTorch", "TensorFlow", "Mpi", "Ray")
JOB_TIERS = ("Null", "Spot", "Basic", "Standard", "Premium")


def check_job_name(name: str) -> None:
    if not JOB_NAME.match(name):
        raise bad(
            f"Job name '{name}' is invalid: it may contain only letters, digits, '-' and '_', "
            "must start with a letter or digit and be at most 255 characters long."
        )


def check_environment_name(name: str) -> None:
    if not ASSET_NAME.match(name):
        raise bad(
            f"Environment name '{name}' is invalid: use letters, digits, '-', '_' and '.', "
            "starting with a letter or digit, at most 255 characters."
        )


def validate_environment(props: Any, datastores: dict[str, str]) -> None:
    """An environment version's properties: either an image reference or a build context."""
    if not isinstance(props, dict):
        raise invalid("The request body must contain 'properties'.")
    if not props.get("image") and not props.get("build"):
        raise bad("An environment needs either 'image' or 'build'.")
    build = props.get("build")
    if build:
        if props.get("image"):
            raise bad("An environment has either 'image' or 'build', not both.")
        try:
            parse_uri(str(build.get("contextUri") or ""), datastores)
        except ValueError as exc:
            raise bad(f"build.contextUri: {exc}") from exc
    image = props.get("image")
    if image is not None and (
        not re.match(r"^[a-z0-9][a-z0-9._\-/:@]*$", image, re.IGNORECASE) or " " in image
    ):
        raise bad(f"Image '{image}' is not a valid image reference.")


def validate_job(
    props: dict[str, Any],
    workspace: str,
    computes: dict[str, str],
    region: str,
    datastores: dict[str, str],
) -> None:
    """A new Command job's properties; canonicalizes ``resources.instanceType`` in place."""
    job_type = props.get("jobType")
    if not job_type:
        raise invalid("The field 'jobType' is required.")
    if job_type not in JOB_TYPES:
        raise invalid(f"Invalid jobType '{job_type}'. Allowed values: {', '.join(JOB_TYPES)}.")
    if job_type != "Command":
        raise ArmError(
            400,
            "UserError",
            f"Job type {job_type} is not supported by the fake.",
            "NotSupported",
        )
    if not (props.get("command") or "").strip():
        raise invalid("The field 'command' is required for a Command job.")
    if not props.get("environmentId"):
        raise invalid("The field 'environmentId' is required for a Command job.")
    exp = props.get("experimentName")
    if exp is not None and not EXPERIMENT_NAME.match(exp):
        raise bad(
            f"Experiment name '{exp}' is invalid: use letters, digits, '-' and '_', starting "
            "with a letter or digit, at most 255 characters."
        )
    display = props.get("displayName")
    if display is not None and len(display) > 256:
        raise bad("Display name must be at most 256 characters long.")
    _check_resources(props, workspace, computes, region)
    tier = (props.get("queueSettings") or {}).get("jobTier")
    if tier is not None and tier not in JOB_TIERS:
        raise invalid(f"Invalid jobTier '{tier}'. Allowed values: {', '.join(JOB_TIERS)}.")
    priority = (props.get("queueSettings") or {}).get("priority")
    if priority is not None and priority not in (1, 2, 3):  # the SDK's low, medium, high
        raise invalid(f"Invalid queueSettings.priority '{priority}'. Allowed values: 1, 2, 3.")
    timeout = (props.get("limits") or {}).get("timeout")
    if timeout is not None and not _ISO_DURATION.match(str(timeout)):
        raise invalid(f"Invalid limits.timeout '{timeout}': use an ISO 8601 duration (PT1H).")
    for key, val in (props.get("environmentVariables") or {}).items():
        if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", key):
            raise bad(f"Environment variable name '{key}' is invalid.")
        if not isinstance(val, str):
            raise invalid(f"Environment variable '{key}' must be a string.")
    _check_data(props, datastores)


def _check_resources(
    props: dict[str, Any], workspace: str, computes: dict[str, str], region: str
) -> None:
    """Compute target, instance type and count, distribution."""
    compute = props.get("computeId")
    resources = props.get("resources") or {}
    if compute:
        cname = compute.rstrip("/").rsplit("/", 1)[-1]
        if cname not in computes:
            raise bad(f"Compute '{cname}' does not exist in workspace '{workspace}'.", "NotFound")
    itype = resources.get("instanceType")
    if itype is not None:
        canonical = canonical_instance_type(itype)
        if canonical is None:
            raise bad(
                f"The specified instance type '{itype}' is not supported for serverless "
                f"compute in region {region}. Choose a supported VM size such as "
                "Standard_DS3_v2 or Standard_NC6s_v3.",
                "InvalidInstanceType",
            )
        resources["instanceType"] = canonical
    count = resources.get("instanceCount", 1)
    if not isinstance(count, int) or count < 1:
        raise bad(f"instanceCount must be a positive integer, got {count!r}.")
    dist = props.get("distribution")
    if dist:
        dtype = dist.get("distributionType")
        if dtype not in DISTRIBUTIONS:
            raise invalid(
                f"Invalid distributionType '{dtype}'. Allowed values: {', '.join(DISTRIBUTIONS)}."
            )
        pcount = dist.get("processCountPerInstance", 1)
        if pcount is not None and (not isinstance(pcount, int) or pcount < 1):
            raise bad(f"processCountPerInstance must be a positive integer, got {pcount!r}.")


def _check_data(props: dict[str, Any], datastores: dict[str, str]) -> None:
    """Inputs, outputs and the command's ``${{...}}`` references to them."""
    inputs = props.get("inputs") or {}
    outputs = props.get("outputs") or {}
    for name, spec in inputs.items():
        itype_ = spec.get("jobInputType")
        if itype_ not in INPUT_TYPES:
            raise invalid(f"Input '{name}': invalid jobInputType '{itype_}'.")
        mode = spec.get("mode")
        if mode is not None and mode not in INPUT_MODES:
            raise invalid(f"Input '{name}': invalid mode '{mode}'.")
        if itype_ != "literal" and not spec.get("uri"):
            raise invalid(f"Input '{name}': 'uri' is required.")
        if itype_ in ("uri_folder", "uri_file"):
            try:
                parse_uri(spec["uri"], datastores)
            except ValueError as exc:
                raise bad(f"Input '{name}': {exc}") from exc
    for name, spec in outputs.items():
        otype = spec.get("jobOutputType")
        if otype not in OUTPUT_TYPES:
            raise invalid(f"Output '{name}': invalid jobOutputType '{otype}'.")
        mode = spec.get("mode")
        if mode is not None and mode not in OUTPUT_MODES:
            raise invalid(f"Output '{name}': invalid mode '{mode}'.")
        if spec.get("uri"):
            try:
                parse_uri(spec["uri"], datastores)
            except ValueError as exc:
                raise bad(f"Output '{name}': {exc}") from exc
    for kind, ref in PLACEHOLDER.findall(props["command"]):
        if ref not in (inputs if kind == "inputs" else outputs):
            raise bad(
                f"The command refers to ${{{{{kind}.{ref}}}}} but the job defines no "
                f"{kind[:-1]} named '{ref}'."
            )


def same_output_defaults(key: str, current: dict[str, Any], new: Any) -> bool:
    """A re-PUT of the same job differs only by what the service filled in (output URIs...)."""
    if key not in ("outputs", "inputs") or not isinstance(new, dict):
        return False
    old = current.get(key) or {}
    if set(old) != set(new):
        return False
    for name, spec in new.items():
        for field_name, val in spec.items():
            if val is not None and old[name].get(field_name) != val:
                return False
    return True


def iso_seconds(value: str | None) -> float | None:
    """``limits.timeout`` (ISO 8601 duration such as ``PT1H30M``) in seconds; None if unset."""
    if not value:
        return None
    m = re.match(r"^P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?$", str(value))
    if m is None:
        return None
    days, hours, minutes, seconds = (float(g) if g else 0.0 for g in m.groups())
    return days * 86400 + hours * 3600 + minutes * 60 + seconds
