"""The local backend's argument rules, checked when a DAG declares a step (no heavy imports).

The local backend's jobs read the code bundle, the inputs and the spec from the worker's own
disk (a process, or a container with the artifact root mounted at the same path), so its
artifact root must be a local directory: a ``file://`` URL or an absolute path.
"""

from __future__ import annotations

from urllib.parse import unquote, urlsplit

from airflow_stepop.settings import SettingsError

EXAMPLE = "file:///data/stepop"


def check_root(field: str, value: str) -> None:
    """Refuse an artifact root the local backend's jobs cannot read; ``field`` names where it
    was set (``LocalStepOperator.artifact_root`` or ``[stepop] artifact_root``)."""
    parts = urlsplit(value)
    if parts.scheme in ("file", "local"):
        path = unquote(parts.path)
        # file://data/x is not data/x: the host part is dropped, the files go to /x
        local = parts.netloc in ("", "localhost") and path.startswith("/")
    else:
        local = parts.scheme == "" and value.startswith("/")
    if local:
        return
    problem = (
        "is not a local directory"
        if parts.scheme not in ("", "file", "local")
        else "is not an absolute local path"
    )
    raise SettingsError(
        f"{field}={value!r} {problem}: the local backend's jobs read code, inputs and results "
        f"from the worker's disk. Use a file:// URL or an absolute path such as {EXAMPLE!r}. "
        "To keep cloud steps on object storage in the same deployment, set [stepop] "
        "sagemaker_artifact_root, vertex_artifact_root or azureml_artifact_root for them and "
        "leave [stepop] artifact_root local (or unset)."
    )
