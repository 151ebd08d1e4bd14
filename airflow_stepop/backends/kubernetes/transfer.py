"""How a pod with no cloud SDK and no credentials reads a step's inputs and writes its results.

The worker, which holds the artifact store's connection, signs what the pod may do, for as
long as the Job may take, and nothing more:

* a GET URL for each file the step reads: the code bundle, the spec and the inputs staged in
  this try's run directory, every upstream artifact (each file of a directory artifact) and the
  checkpoints earlier tries left;
* an upload grant for two prefixes, this try's output directory and the task's checkpoints:
  a POST policy on S3 and GCS (``signers.py``: a ``starts-with $key`` condition and a size
  range), a directory SAS on Azure (``signers_azure.py``: create and write under one
  directory), which lets the pod write any key under the prefix and no other, and read nothing.

The URLs are bearer credentials, so they travel in a Secret (the ``transfer`` document that
``manifest`` mounts as a file), never in the Job's spec, environment or log, and the Secret
goes with its Job. The pod's entry script (``entry.py``, standard library) downloads, runs
the step runtime on local files (``STEPOP_PATH_MAP``) and uploads the outputs, the result
manifest last.

Limits (docs/kubernetes.md): a signature lives at most 7 days (V4 on S3 and GCS, a user
delegation key on Azure), and no longer than the signing credentials (an STS session's URLs end
with it); one object is at most 5 GiB (a POST upload), 5000 MiB on Azure (a Put Blob); the
document holds at most ``MAX_DOCUMENT_BYTES`` (a Secret takes
1 MiB), some thousands of files.
"""

from __future__ import annotations

import json
import math
from typing import Any

from airflow_stepop.backends.base import JobRequest
from airflow_stepop.backends.kubernetes.signers import MAX_EXPIRY_S, Signer
from airflow_stepop.runtime.storage import Storage, unsafe_key
from airflow_stepop.runtime.values import input_uris
from airflow_stepop.setting_values import SettingsError

MAX_DOCUMENT_BYTES = 900 * 1024  # a Secret holds 1 MiB, its other keys included
# Where the entry script puts what it downloads, relative to its work directory.
RUN_DIR, CODE_FILE, CHECKPOINT_DIR, INPUTS_DIR = "run", "code.zip", "checkpoints", "in"


def url_lifetime(max_runtime_s: int, schedule_timeout_s: float, queued: bool = False) -> int:
    """Seconds the URLs must stay valid: the Job's wait to be placed, its run, and an hour for
    pulling its image and uploading its results; at most a signature's longest. A Job in a
    Kueue queue may wait for admission for any time, so its URLs get the longest."""
    if queued:
        return MAX_EXPIRY_S
    return min(MAX_EXPIRY_S, int(max_runtime_s + math.ceil(schedule_timeout_s) + 3600))


def _files(storage: Storage, uri: str) -> list[tuple[str, str]]:
    """(uri of each file, its path relative to ``uri``) of a file or directory artifact."""
    fs, path = storage.resolver(uri)
    if not fs.isdir(path):
        return [(uri, "")] if fs.exists(path) else []
    scheme = uri.split("://", 1)[0]
    base = path.rstrip("/") + "/"
    out = []
    for key in sorted(fs.find(path.rstrip("/"))):
        if key.endswith("/") or not key.startswith(base):  # a folder marker, or not below it
            continue
        relative = key.removeprefix(base)
        problem = unsafe_key(relative)
        if problem:  # a job's upload grant lets it name keys: never a path out of the pod's dir
            raise ValueError(
                f"The artifact {uri} holds the key {key!r}, which {problem}: a pod would write "
                "it outside its own directory. Refusing to start the step; re-run the task that "
                "produced it, and check who else writes that root."
            )
        out.append((f"{scheme}://{key}", relative))
    return out


def plan(
    request: JobRequest,
    spec: dict[str, Any],
    storage: Storage,
    signer: Signer,
    *,
    output_uri: str,
    expires_s: int,
) -> dict[str, Any]:
    """The transfer document of one Job: what the pod downloads (``downloads``: URL -> path
    under its work directory), the path map of those URIs, and the two upload grants."""
    run_uri = request.run_uri.rstrip("/")
    downloads: list[dict[str, str]] = []

    def add(uri: str, relative: str) -> None:
        downloads.append({"url": signer.get_url(uri, expires_s), "path": relative})

    add(request.code_uri, CODE_FILE)
    for uri, relative in _files(storage, run_uri):
        if relative == "spec.json" or relative.startswith("inputs/"):
            add(uri, f"{RUN_DIR}/{relative}")
    path_map = {request.code_uri: CODE_FILE, run_uri: RUN_DIR}
    outside = sorted({uri for uri in input_uris(spec) if not uri.startswith(run_uri + "/")})
    scheme = run_uri.split("://", 1)[0]
    for uri in outside:
        if not uri.startswith(f"{scheme}://"):
            raise SettingsError(
                f"An input of this step is the artifact {uri}, which a Kubernetes step on a "
                f"{scheme}:// root cannot read (its pod gets signed URLs for that store only). "
                f"Give the upstream task a {scheme}:// artifact root, or pass the value itself."
            )
    for index, uri in enumerate(outside):
        local = f"{INPUTS_DIR}/{index}"
        files = _files(storage, uri)
        if not files:
            raise FileNotFoundError(f"The step's input artifact {uri} is not in the store.")
        for file_uri, relative in files:
            add(file_uri, f"{local}/{relative}" if relative else local)
        path_map[uri] = local
    for uri, relative in _files(storage, request.checkpoint_uri):
        add(uri, f"{CHECKPOINT_DIR}/{relative}")
    return {
        "downloads": downloads,
        "path_map": path_map,
        "uploads": {
            "output": signer.upload_grant(output_uri, expires_s),
            "checkpoint": signer.upload_grant(request.checkpoint_uri, expires_s),
        },
    }


def secret_bytes(document: dict[str, Any]) -> bytes:
    """The document as the Secret holds it; refused when a Secret cannot hold it."""
    data = json.dumps(document, separators=(",", ":")).encode()
    if len(data) > MAX_DOCUMENT_BYTES:
        count = len(document.get("downloads", []))
        raise SettingsError(
            f"The step reads {count} files, and their signed URLs take {len(data)} bytes, more "
            f"than a Kubernetes Secret holds ({MAX_DOCUMENT_BYTES} bytes here). Pass fewer, "
            "larger artifacts (an archive of a directory of many small files), or use a "
            "file:// artifact root on a shared volume (artifact_volume=)."
        )
    return data
