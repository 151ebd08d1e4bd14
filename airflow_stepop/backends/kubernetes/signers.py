"""Signatures that let a pod with no credentials of its own read and write one object store.

Each store's signer makes two things, locally where its credentials allow (no request to the
store): a GET URL for one object, and an upload grant for one prefix, a POST policy (an HTML
form upload) whose ``starts-with $key`` condition lets the pod write any key under the prefix
and no other, of at most ``MAX_OBJECT_BYTES``, and read nothing; ``entry.upload`` sends such a
form on S3 and GCS. Azure has no POST policy: its upload grant is a directory SAS, and the pod
PUTs each file (``signers_azure.py``). All end at ``expires_s``, at most ``MAX_EXPIRY_S`` (a
V4 signature's longest on S3 and on GCS, a user delegation key's on Azure).
"""

from __future__ import annotations

import base64
import datetime
import json
import os
from typing import Any, Protocol

from airflow_stepop.backends.kubernetes.config import AZURE_SCHEMES
from airflow_stepop.backends.kubernetes.signers_azure import AzureSigner
from airflow_stepop.setting_values import SettingsError

MAX_EXPIRY_S = 7 * 24 * 3600  # SigV4's and GCS V4's longest
MAX_OBJECT_BYTES = 5 * 1024**3  # one POST upload (S3's limit; the same bound on GCS)


class Signer(Protocol):
    """Signs requests on one object store for a pod that has no credentials of its own."""

    def get_url(self, uri: str, expires_s: int) -> str: ...

    def upload_grant(self, prefix_uri: str, expires_s: int) -> dict[str, Any]: ...

    def credentials_end(self) -> float | None:
        """When the signatures stop working whatever their expiry (the end of a temporary
        session's credentials, epoch seconds), or None."""


def _split(uri: str) -> tuple[str, str]:
    bucket, _, key = uri.split("://", 1)[1].partition("/")
    return bucket, key


class S3Signer:
    """S3 (and S3-compatible stores: the connection's endpoint) through the amazon provider's
    S3Hook: botocore signs with the connection's keys, always SigV4 (botocore presigns SigV2
    in older regions, which a bucket encrypted with SSE-KMS refuses and AWS retires); the
    connection's region must be the bucket's."""

    def __init__(self, aws_conn_id: str | None) -> None:
        from airflow.providers.amazon.aws.hooks.s3 import S3Hook
        from botocore.config import Config

        hook = S3Hook(aws_conn_id=aws_conn_id)
        sigv4 = hook.config.merge(Config(signature_version="s3v4"))  # the connection's, and v4
        self._client = hook.get_client_type(config=sigv4)

    def get_url(self, uri: str, expires_s: int) -> str:
        bucket, key = _split(uri)
        return self._client.generate_presigned_url(
            "get_object", Params={"Bucket": bucket, "Key": key}, ExpiresIn=expires_s
        )

    def upload_grant(self, prefix_uri: str, expires_s: int) -> dict[str, Any]:
        bucket, prefix = _split(prefix_uri.rstrip("/") + "/")
        post = self._client.generate_presigned_post(
            bucket,
            prefix + "${filename}",  # botocore adds the condition: starts-with $key <prefix>
            Conditions=[["content-length-range", 0, MAX_OBJECT_BYTES]],
            ExpiresIn=expires_s,
        )
        fields = {k: v for k, v in post["fields"].items() if k != "key"}
        return {"kind": "post", "url": post["url"], "fields": fields, "prefix": prefix,
                "max_bytes": MAX_OBJECT_BYTES}  # fmt: skip

    def credentials_end(self) -> float | None:
        """The end of the session the client signs with (an assumed role, IRSA, SSO): SigV4
        URLs die with it. botocore keeps it only on its refreshable credentials, as
        ``_expiry_time``, known once they are fetched (deferred ones are fetched here)."""
        credentials = self._client._request_signer._credentials  # what signs the URLs
        if credentials is None:
            return None
        credentials.get_frozen_credentials()
        expiry = getattr(credentials, "_expiry_time", None)
        return expiry.timestamp() if expiry is not None else None


class GCSSigner:
    """Google Cloud Storage through the google provider's connection (GoogleBaseHook).

    Its credentials must sign: a service-account key signs locally; impersonation
    (``impersonation_chain``) and a workload's attached service account (Composer, GKE, GCE)
    sign through IAM's signBlob, which needs ``roles/iam.serviceAccountTokenCreator`` on that
    account. URLs point at the connection's ``gcs.endpoint``, else ``STORAGE_EMULATOR_HOST``
    (as gcsfs and google-cloud-storage read them), else storage.googleapis.com.
    """

    def __init__(self, gcp_conn_id: str | None) -> None:
        from airflow.providers.google.common.hooks.base_google import GoogleBaseHook

        hook = GoogleBaseHook(gcp_conn_id=gcp_conn_id or "google_cloud_default")
        self._credentials = signing_credentials(hook.get_credentials(), gcp_conn_id)
        self._endpoint = (
            hook.extras.get("gcs.endpoint")
            or os.environ.get("STORAGE_EMULATOR_HOST")
            or "https://storage.googleapis.com"
        ).rstrip("/")
        if "://" not in self._endpoint:
            self._endpoint = f"https://{self._endpoint}"
        from google.cloud.storage import Client

        # no request is made: the client only carries the credentials and the endpoint
        self._client = Client(
            project=hook.project_id or "unset", credentials=self._credentials,
            client_options={"api_endpoint": self._endpoint},
        )  # fmt: skip

    def get_url(self, uri: str, expires_s: int) -> str:
        bucket, key = _split(uri)
        return self._client.bucket(bucket).blob(key).generate_signed_url(
            version="v4", method="GET", credentials=self._credentials,
            expiration=datetime.timedelta(seconds=expires_s), api_access_endpoint=self._endpoint,
        )  # fmt: skip

    def upload_grant(self, prefix_uri: str, expires_s: int) -> dict[str, Any]:
        """A V4 POST policy with ``starts-with $key``. google-cloud-storage's
        ``generate_signed_post_policy_v4`` always adds an exact ``key`` condition (one object
        per policy), so the policy is written here in its documented form and signed by the
        credentials' own signer."""
        bucket, prefix = _split(prefix_uri.rstrip("/") + "/")
        now = datetime.datetime.now(datetime.UTC)
        stamp = now.strftime("%Y%m%dT%H%M%SZ")
        credential = f"{self._credentials.signer_email}/{stamp[:8]}/auto/storage/goog4_request"
        expires = (now + datetime.timedelta(seconds=expires_s)).strftime("%Y-%m-%dT%H:%M:%SZ")
        signed = {
            "x-goog-algorithm": "GOOG4-RSA-SHA256",
            "x-goog-credential": credential,
            "x-goog-date": stamp,
        }
        conditions: list[Any] = [
            {"bucket": bucket},
            ["starts-with", "$key", prefix],
            ["content-length-range", 0, MAX_OBJECT_BYTES],
            *({name: value} for name, value in signed.items()),
        ]
        document = {"conditions": conditions, "expiration": expires}
        policy = base64.b64encode(json.dumps(document, separators=(",", ":")).encode())
        signature = self._credentials.sign_bytes(policy).hex()
        fields = {**signed, "policy": policy.decode(), "x-goog-signature": signature}
        return {"kind": "post", "url": f"{self._endpoint}/{bucket}/", "fields": fields,
                "prefix": prefix, "max_bytes": MAX_OBJECT_BYTES}  # fmt: skip

    def credentials_end(self) -> None:
        """A V4 signature of a service account's key lives its own time (at most 7 days),
        however short the token that asked IAM for it."""
        return None


def signing_credentials(credentials: Any, conn_id: str | None) -> Any:
    """``credentials`` when they sign; a workload's service account signs as itself through
    IAM (impersonated credentials); anything else (anonymous, a user's login) is refused."""
    from google.auth import credentials as auth
    from google.auth import impersonated_credentials
    from google.auth.transport.requests import Request

    if isinstance(credentials, auth.Signing):
        return credentials
    email = getattr(credentials, "service_account_email", None)
    if email == "default":  # a metadata server's account: its email comes with a token
        credentials.refresh(Request())
        email = credentials.service_account_email
    if not email or isinstance(credentials, auth.AnonymousCredentials):
        raise SettingsError(
            f"The connection {conn_id or 'google_cloud_default'!r} has credentials that cannot "
            f"sign ({type(credentials).__name__}): a Kubernetes step's pod reaches a gs:// "
            "artifact root through signed URLs. Give the connection a service-account key "
            "(keyfile_dict or key_path), an impersonation_chain, or run the worker as a "
            "service account allowed to sign for itself (roles/iam.serviceAccountTokenCreator)."
        )
    return impersonated_credentials.Credentials(
        source_credentials=credentials,
        target_principal=email,
        target_scopes=["https://www.googleapis.com/auth/devstorage.read_write"],
    )


def signer_for(root: str, storage_conn_id: str | None) -> Signer:
    """The signer of the store ``root`` is on (``config.SCHEMES`` lists them)."""
    scheme = root.split("://", 1)[0]
    if scheme == "s3":
        return S3Signer(storage_conn_id)
    if scheme == "gs":
        return GCSSigner(storage_conn_id)
    if scheme in AZURE_SCHEMES:
        return AzureSigner.for_root(root, storage_conn_id)
    raise SettingsError(
        f"The artifact root {root!r}: a Kubernetes step's pod reaches its artifacts through "
        "signed URLs, which airflow-stepop makes for s3://, gs:// and abfs:// (abfss://, az://) "
        "roots (or use a file:// root on a shared volume, artifact_volume=)."
    )
