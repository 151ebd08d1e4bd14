"""The emulated cloud's service account that signs GCS URLs: a key made at ``cloud-up``."""

from __future__ import annotations

import json
from pathlib import Path

EMAIL = "stepop-signer@stepop-local.iam.gserviceaccount.com"
CONNECTION_ID = "google_cloud_signer"


def write_key(path: Path, token_uri: str) -> dict:
    """A new RSA key in the service-account JSON format google-auth reads; its token endpoint is
    the emulator's (``routes``). Throwaway: it only ever signs for the emulator."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()
    info = {
        "type": "service_account",
        "project_id": "stepop-local",
        "private_key_id": "stepop-emulated",
        "private_key": pem,
        "client_email": EMAIL,
        "client_id": "1",
        "token_uri": token_uri,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(info))
    path.chmod(0o600)
    return info


def connection(info: dict, project: str) -> str:
    """An Airflow connection (JSON) that signs with the key: what a gs:// root of a Kubernetes
    step needs (``storage_conn_id``)."""
    extra = {"project": project, "keyfile_dict": json.dumps(info)}
    return json.dumps({"conn_type": "google_cloud_platform", "extra": extra},
                      separators=(",", ":"))  # fmt: skip
