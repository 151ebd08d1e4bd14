"""The routes added to gcp-storage-emulator's router, and a server that has them."""

from __future__ import annotations

import json
import uuid
from http import HTTPStatus
from pathlib import Path
from typing import Any

from cloud.gcs import forms

BUCKET_FORM = r"^/(?P<bucket_name>[-.\w]+)/?$"


def _routes(signer_file: Path) -> tuple:
    from cryptography.hazmat.primitives import serialization
    from gcp_storage_emulator.exceptions import NotFound
    from gcp_storage_emulator.handlers import objects

    info = json.loads(signer_file.read_text())
    public_key = serialization.load_pem_private_key(
        info["private_key"].encode(), password=None
    ).public_key()

    def token(request: Any, response: Any, storage: Any) -> None:
        response.json({"access_token": f"emulated-{uuid.uuid4().hex}", "expires_in": 3600,
                       "token_type": "Bearer"})  # fmt: skip

    def post_form(request: Any, response: Any, storage: Any) -> None:
        handler = request._request_handler  # the raw form: the emulator's parser wants JSON
        body = handler.rfile.read(int(handler.headers.get("Content-Length") or 0))
        bucket = request.params["bucket_name"]
        try:
            fields = forms.parse(handler.headers.get("Content-Type", ""), body)
            forms.check(fields, bucket, public_key, info["client_email"])
        except forms.FormRefused as refused:
            response.status = HTTPStatus(refused.status)
            response.write_file(
                f"<Error><Code>{refused.code}</Code><Message>{refused}</Message></Error>",
                "application/xml",
            )
            return
        key, content = fields["key"].decode(), fields["file"]
        obj = objects._make_object_resource(
            request.base_url, bucket, key, "application/octet-stream", str(len(content))
        )
        try:
            storage.create_file(bucket, key, content, objects._checksums(content, obj))
        except NotFound:
            response.status = HTTPStatus.NOT_FOUND
            return
        response.status = HTTPStatus.NO_CONTENT  # GCS's default success_action_status

    return ((r"^/token$", {"POST": token}), (BUCKET_FORM, {"POST": post_form}))


def install(signer_file: Path) -> None:
    """Put the routes first in the emulator's router (it matches in order)."""
    from gcp_storage_emulator import server as emulator

    emulator.HANDLERS = (*_routes(signer_file), *emulator.HANDLERS)


def server(host: str, port: int, signer_file: Path) -> Any:
    """A started in-memory emulator with the routes (``.stop()`` it)."""
    from gcp_storage_emulator.server import create_server

    install(signer_file)
    emulated = create_server(host, port, in_memory=True)
    emulated.start()
    return emulated


def main(argv: list[str]) -> None:
    """``start ... --signer-file F``: the emulator's own command line, with the routes."""
    from gcp_storage_emulator.__main__ import main as emulator_main

    if "--signer-file" not in argv:
        raise SystemExit("usage: python -m cloud.gcs start <emulator options> --signer-file F")
    at = argv.index("--signer-file")
    install(Path(argv[at + 1]))
    emulator_main(argv[:at] + argv[at + 2 :])
