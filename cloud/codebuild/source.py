"""A build's S3 source, from moto into the build's source directory (``CODEBUILD_SRC_DIR``).

CodeBuild's S3 source location is ``<bucket>/<key>`` (or ``arn:aws:s3:::<bucket>/<key>``): a
zip object, extracted, or a folder prefix ending with ``/``, every object under it copied. What
cannot be fetched fails DOWNLOAD_SOURCE with ``CLIENT_ERROR`` and S3's own words
(:class:`SourceError`).
"""

from __future__ import annotations

import io
import os
import zipfile
from pathlib import Path
from typing import Any

import botocore.exceptions


class SourceError(Exception):
    """The source could not be fetched (phase context ``CLIENT_ERROR``)."""


def split_location(location: str) -> tuple[str, str]:
    """``bucket/key`` or ``arn:aws:s3:::bucket/key`` -> (bucket, key)."""
    rest = location.removeprefix("arn:aws:s3:::").removeprefix("s3://")
    bucket, _, key = rest.partition("/")
    return bucket, key


def fetch(s3: Any, location: str, dest: Path) -> str:
    """Fetch the source at ``location`` into ``dest``; returns its resolved version."""
    bucket, key = split_location(location)
    arn = f"arn:aws:s3:::{bucket}/{key}"
    try:
        if not key or key.endswith("/"):
            return _fetch_prefix(s3, bucket, key, dest, arn)
        obj = s3.get_object(Bucket=bucket, Key=key)
        body = obj["Body"].read()
    except botocore.exceptions.ClientError as exc:
        err = exc.response.get("Error", {})
        raise SourceError(
            f"{err.get('Code', 'ClientError')}: {err.get('Message', exc)} for primary source "
            f"and source version {arn}"
        ) from exc
    try:
        _extract(body, dest)
    except zipfile.BadZipFile as exc:
        raise SourceError(f"zip: not a valid zip file for primary source {arn}") from exc
    return str(obj.get("VersionId") or obj.get("ETag", "").strip('"'))


def _fetch_prefix(s3: Any, bucket: str, prefix: str, dest: Path, arn: str) -> str:
    keys: list[tuple[str, str]] = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        keys += [(o["Key"], o["ETag"].strip('"')) for o in page.get("Contents", [])]
    files = [(k, etag) for k, etag in keys if not k.endswith("/")]
    if not files:
        raise SourceError(f"NoSuchKey: no objects under the prefix for primary source {arn}")
    for key, _ in files:
        target = _inside(dest, key[len(prefix) :])
        target.parent.mkdir(parents=True, exist_ok=True)
        s3.download_file(bucket, key, str(target))
    return ",".join(etag for _, etag in files)[:128]


def _extract(body: bytes, dest: Path) -> None:
    """Extract a zip, keeping executable bits; no entry may land outside ``dest``."""
    with zipfile.ZipFile(io.BytesIO(body)) as archive:
        for info in archive.infolist():
            target = _inside(dest, info.filename)
            if info.is_dir():
                target.mkdir(parents=True, exist_ok=True)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            with archive.open(info) as src, open(target, "wb") as out:
                out.write(src.read())
            mode = (info.external_attr >> 16) & 0o777
            if mode:
                os.chmod(target, mode)


def _inside(root: Path, rel: str) -> Path:
    target = (root / rel.lstrip("/")).resolve()
    if not target.is_relative_to(root.resolve()):
        raise SourceError(f"zip: illegal file path {rel!r} in the source archive")
    return target
