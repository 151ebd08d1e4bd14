"""S3 for the SageMaker fake's jobs: channels down, model/output/checkpoints up (moto).

What the service does around the container: S3Prefix channels copied to
``/opt/ml/input/data/<channel>``, checkpoints synced from and to ``CheckpointConfig.S3Uri``,
``/opt/ml/model`` and ``/opt/ml/output/data`` of every host uploaded to
``<S3OutputPath>/<job>/output/`` (tar.gz, or plain files with CompressionType NONE).
"""

from __future__ import annotations

import contextlib
import io
import os
import tarfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cloud.sagemaker.validation import ClientError

if TYPE_CHECKING:
    from cloud.sagemaker.state import Job


class JobStorage:
    """A job's S3 transfers, through one boto3 S3 client."""

    def __init__(self, s3: Any) -> None:
        self.s3 = s3

    def objects(self, uri: str) -> list[tuple[str, str]]:
        """(key, path relative to the prefix) of every object under an S3 prefix."""
        bucket, prefix = _s3_split(uri)
        out = []
        pages = self.s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        for page in pages:
            for obj in page.get("Contents", []):
                key = obj["Key"]
                rel = key[len(prefix) :].lstrip("/") or os.path.basename(key)
                if not key.endswith("/"):
                    out.append((key, rel))
        return out

    def write_channels(self, job: Job, root: Path) -> dict[str, Any]:
        config: dict[str, Any] = {}
        algo_mode = job.request["AlgorithmSpecification"].get("TrainingInputMode", "File")
        for channel in job.request.get("InputDataConfig", []):
            name = channel["ChannelName"]
            mode = channel.get("InputMode", algo_mode)
            source = channel["DataSource"].get("S3DataSource")
            if source is None:
                raise ClientError(f"channel {name}: the fake supports S3DataSource only")
            if mode == "Pipe" or source["S3DataType"] != "S3Prefix":
                raise ClientError(
                    f"channel {name}: the fake supports S3Prefix channels "
                    "in File/FastFile mode only"
                )
            target = root / name
            target.mkdir(parents=True, exist_ok=True)
            bucket, _ = _s3_split(source["S3Uri"])
            try:
                objects = self.objects(source["S3Uri"])
            except self.s3.exceptions.NoSuchBucket as exc:
                raise ClientError(f"Data download failed: bucket {bucket} does not exist") from exc
            if not objects:
                raise ClientError(
                    f'Data download failed:No S3 objects found under S3 URL "{source["S3Uri"]}" '
                    "given in input data source. Please ensure that the bucket exists in the "
                    "selected region, that objects exist under that S3 prefix, and that the role "
                    f'"{job.request["RoleArn"]}" has "s3:ListBucket" permissions on bucket '
                    f'"{bucket}".'
                )
            for key, rel in objects:
                dest = target / rel
                dest.parent.mkdir(parents=True, exist_ok=True)
                self.s3.download_file(bucket, key, str(dest))
            config[name] = {
                "TrainingInputMode": mode,
                "S3DistributionType": source.get("S3DataDistributionType", "FullyReplicated"),
                "RecordWrapperType": channel.get("RecordWrapperType", "None"),
            }
            if "ContentType" in channel:
                config[name]["ContentType"] = channel["ContentType"]
        return config

    def download_checkpoints(self, job: Job, local: Path) -> None:
        local.mkdir(parents=True, exist_ok=True)
        uri = job.request["CheckpointConfig"]["S3Uri"]
        bucket, _ = _s3_split(uri)
        with contextlib.suppress(self.s3.exceptions.NoSuchBucket):
            for key, rel in self.objects(uri):
                dest = local / rel
                dest.parent.mkdir(parents=True, exist_ok=True)
                self.s3.download_file(bucket, key, str(dest))

    def upload_checkpoints(self, job: Job, workdir: Path) -> None:
        cfg = job.request.get("CheckpointConfig")
        if not cfg:
            return
        bucket, prefix = _s3_split(cfg["S3Uri"])
        for rel, path in _merged(workdir / "checkpoints", job.hosts, "").items():
            self.s3.upload_file(str(path), bucket, _key(prefix, rel))

    def upload(self, job: Job, workdir: Path) -> None:
        """Model, output data and checkpoints to S3, as the service does at the end."""
        out = job.request["OutputDataConfig"]
        bucket, prefix = _s3_split(out["S3OutputPath"])
        base = _key(prefix, f"{job.name}/output")
        hosts = job.hosts
        model = _merged(workdir / "model", hosts, "")
        data = _merged(workdir / "output", hosts, "data")
        if out.get("CompressionType", "GZIP") == "NONE":
            for rel, path in model.items():
                self.s3.upload_file(str(path), bucket, f"{base}/model/{rel}")
            for rel, path in data.items():
                self.s3.upload_file(str(path), bucket, f"{base}/data/{rel}")
            artifacts = f"s3://{bucket}/{base}/model/"
        else:
            self.s3.put_object(Bucket=bucket, Key=f"{base}/model.tar.gz", Body=_targz(model))
            if data:
                self.s3.put_object(Bucket=bucket, Key=f"{base}/output.tar.gz", Body=_targz(data))
            artifacts = f"s3://{bucket}/{base}/model.tar.gz"
        with job.lock:
            job.model_artifacts = artifacts
        self.upload_checkpoints(job, workdir)

    def failure_tail(self, job: Job, workdir: Path) -> str:
        for host in job.hosts:
            failure = workdir / "output" / host / "failure"
            if failure.is_file():
                return failure.read_text(errors="replace")[-900:].strip()
        return ""


def _s3_split(uri: str) -> tuple[str, str]:
    rest = uri.split("://", 1)[1]
    bucket, _, key = rest.partition("/")
    return bucket, key


def _key(prefix: str, rel: str) -> str:
    prefix = prefix.strip("/")
    return f"{prefix}/{rel}" if prefix else rel


def _merged(root: Path, hosts: list[str], sub: str) -> dict[str, Path]:
    """Files under ``root/<host>/<sub>`` of every host; algo-1 wins a name clash."""
    files: dict[str, Path] = {}
    for host in reversed(hosts):
        base = root / host / sub if sub else root / host
        if not base.is_dir():
            continue
        for path in sorted(base.rglob("*")):
            if path.is_file():
                files[path.relative_to(base).as_posix()] = path
    return files


def _targz(files: dict[str, Path]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for rel, path in sorted(files.items()):
            tar.add(str(path), arcname=rel)
    return buf.getvalue()
