"""A build's ``source.storageSource``, from the GCS emulator into its ``/workspace``.

Cloud Build takes a gzipped tarball or a zip archive (``gcloud builds submit`` uploads a
``.tgz``); the fake tells them apart by their first bytes, as the service's fetcher does, and
extracts it into the build's workspace directory. What cannot be fetched fails the build with
``failureInfo.type`` FETCH_SOURCE_FAILED (:class:`SourceError`).
"""

from __future__ import annotations

import io
import os
import tarfile
import zipfile
from pathlib import Path
from typing import Any


class SourceError(Exception):
    """The source could not be fetched or unpacked."""


def fetch(client: Any, source: dict[str, Any], dest: Path) -> dict[str, Any]:
    """Fetch ``{"bucket", "object", "generation"?}`` into ``dest``; the resolved source."""
    from google.api_core import exceptions

    bucket, name = source["bucket"], source["object"]
    generation = int(source["generation"]) if source.get("generation") else None
    url = f"gs://{bucket}/{name}" + (f"#{generation}" if generation else "")
    try:
        blob = client.bucket(bucket).blob(name, generation=generation)
        data = blob.download_as_bytes()
    except exceptions.NotFound as exc:
        raise SourceError(f"failed to fetch source {url}: object not found") from exc
    except exceptions.GoogleAPIError as exc:
        raise SourceError(f"failed to fetch source {url}: {exc}") from exc
    try:
        if data[:2] == b"\x1f\x8b":
            _untar(data, dest)
        elif data[:4] == b"PK\x03\x04":
            _unzip(data, dest)
        else:
            raise SourceError(f"failed to unpack source {url}: not a gzipped tarball nor a zip")
    except (tarfile.TarError, zipfile.BadZipFile, OSError) as exc:
        raise SourceError(f"failed to unpack source {url}: {exc}") from exc
    resolved = {"bucket": bucket, "object": name}
    if blob.generation:
        resolved["generation"] = str(blob.generation)
    return resolved


def _untar(data: bytes, dest: Path) -> None:
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as archive:
        archive.extractall(dest, filter="data")  # no path outside dest, no devices


def _unzip(data: bytes, dest: Path) -> None:
    root = dest.resolve()
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        for info in archive.infolist():
            target = (root / info.filename.lstrip("/")).resolve()
            if not target.is_relative_to(root):
                raise SourceError(f"illegal path {info.filename!r} in the source archive")
            if info.is_dir():
                target.mkdir(parents=True, exist_ok=True)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(archive.read(info))
            mode = (info.external_attr >> 16) & 0o777
            if mode:
                os.chmod(target, mode)
