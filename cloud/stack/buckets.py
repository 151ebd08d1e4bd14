"""The demo bucket: one name in S3 (moto), GCS (the emulator) and Azurite, for the docs' blocks."""

from __future__ import annotations

import contextlib

from cloud.stack.settings import REGION, log


def create_buckets(env: dict[str, str], name: str) -> None:
    """Create ``name`` in S3 (moto), GCS (the emulator) and Azurite, unless it exists there.

    Each client is imported here: the stack itself needs only what the ``cloud`` extra has, and
    a store whose client is not installed (no ``gcp``/``azure`` extra) gets no bucket.
    """
    import boto3

    s3 = boto3.client(
        "s3",
        endpoint_url=env["STEPOP_MOTO_ENDPOINT"],
        region_name=REGION,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    with contextlib.suppress(s3.exceptions.BucketAlreadyOwnedByYou):
        s3.create_bucket(Bucket=name)
    made = ["S3"]
    try:
        from google.api_core.exceptions import Conflict
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import storage
    except ImportError:
        log(f"google-cloud-storage is not installed: no gs://{name}")
    else:
        gcs = storage.Client(
            project=env["GOOGLE_CLOUD_PROJECT"],
            credentials=AnonymousCredentials(),
            client_options={"api_endpoint": env["STORAGE_EMULATOR_HOST"]},
        )
        with contextlib.suppress(Conflict):
            gcs.create_bucket(name)
        made.append("GCS")
    try:
        from azure.core.exceptions import ResourceExistsError
        from azure.storage.blob import BlobServiceClient
    except ImportError:
        log(f"azure-storage-blob is not installed: no Blob container {name}")
    else:
        blobs = BlobServiceClient.from_connection_string(env["AZURE_STORAGE_CONNECTION_STRING"])
        with contextlib.suppress(ResourceExistsError):
            blobs.create_container(name)
        made.append("Azure Blob")
    log(f"the bucket {name} is there ({', '.join(made)})")
