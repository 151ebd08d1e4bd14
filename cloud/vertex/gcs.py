"""/gcs/<bucket> for the Vertex fake: copy buckets down before a job, changes up after it.

Real Vertex mounts every bucket the job's service account can read with Cloud Storage FUSE
under /gcs/<bucket>, reading and writing lazily. The fake approximates that with a copy: before
the job starts, every bucket the job spec names (``gs://<bucket>`` or ``/gcs/<bucket>`` in the
command, args, env values or ``baseOutputDirectory``) is downloaded from the gcp-storage-emulator
into the job's /gcs directory; after the job exits (success or failure) new and changed files
are uploaded and files the job deleted are deleted. Differences a test could notice: writes
become visible in the bucket only when the job ends, and buckets nobody named are not there.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterable
from typing import Any

_BUCKET = re.compile(r"(?:gs://|(?<![\w.-])/gcs/)([a-z0-9][a-z0-9._-]{1,221}[a-z0-9])")

Snapshot = dict[str, tuple[int, int]]  # relative path -> (size, mtime_ns)


def referenced_buckets(texts: Iterable[str]) -> list[str]:
    """Bucket names that appear as gs://<b> or /gcs/<b> in any of ``texts``."""
    found: set[str] = set()
    for text in texts:
        found.update(_BUCKET.findall(text or ""))
    return sorted(found)


def storage_client(emulator_host: str) -> Any:
    """A google-cloud-storage client bound to the emulator (never a real endpoint)."""
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    if not emulator_host.startswith("http"):
        emulator_host = f"http://{emulator_host}"
    return storage.Client(
        project="stepop-fake",
        credentials=AnonymousCredentials(),
        client_options={"api_endpoint": emulator_host},
    )


def _scan(root: str) -> Snapshot:
    snap: Snapshot = {}
    for dirpath, _dirs, files in os.walk(root):
        for fname in files:
            full = os.path.join(dirpath, fname)
            st = os.stat(full)
            snap[os.path.relpath(full, root).replace(os.sep, "/")] = (st.st_size, st.st_mtime_ns)
    return snap


def sync_down(client: Any, bucket: str, local_dir: str) -> Snapshot | None:
    """Copy every object of ``bucket`` under ``local_dir``; None when the bucket is missing."""
    from google.api_core import exceptions

    os.makedirs(local_dir, exist_ok=True)
    try:
        blobs = list(client.list_blobs(bucket))
    except exceptions.NotFound:
        return None
    for blob in blobs:
        if blob.name.endswith("/"):
            os.makedirs(os.path.join(local_dir, blob.name), exist_ok=True)
            continue
        target = os.path.join(local_dir, blob.name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        blob.download_to_filename(target)
    return _scan(local_dir)


def sync_up(client: Any, bucket: str, local_dir: str, before: Snapshot) -> list[str]:
    """Upload new/changed files, delete removed ones; returns the object names written."""
    from google.api_core import exceptions

    after = _scan(local_dir)
    bkt = client.bucket(bucket)
    written: list[str] = []
    for rel, sig in sorted(after.items()):
        if before.get(rel) == sig:
            continue
        bkt.blob(rel).upload_from_filename(os.path.join(local_dir, rel))
        written.append(rel)
    for rel in sorted(set(before) - set(after)):
        with contextlib.suppress(exceptions.NotFound):
            bkt.blob(rel).delete()
    return written
