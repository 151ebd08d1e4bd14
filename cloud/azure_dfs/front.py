"""The front: directory SAS checked as ADLS Gen2 does, everything else forwarded to Azurite."""

from __future__ import annotations

import datetime
import hmac
import http.client
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from cloud.stack.processes import azurite_bin
from cloud.stack.settings import AZURITE_ACCOUNT, AZURITE_KEY

FLAGS = ["--inMemoryPersistence", "--skipApiVersionCheck", "--disableTelemetry", "--loose"]
HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "host"}
OWN = HOP | {"server", "date"}  # send_response writes its own


class Refused(Exception):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code = status, code


def _time(value: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))


def check_directory_sas(method: str, path: str, query: dict[str, str]) -> tuple[str, str]:
    """(container, blob) a ``sr=d`` request may write; :class:`Refused` otherwise."""
    from azure.storage.filedatalake import generate_directory_sas

    account, _, rest = unquote(path).lstrip("/").partition("/")
    container, _, blob = rest.partition("/")
    segments = blob.split("/")
    try:
        depth = int(query.get("sdd", ""))
    except ValueError:
        raise Refused(403, "AuthenticationFailed", "sdd is not a number") from None
    if account != AZURITE_ACCOUNT or depth < 1 or len(segments) <= depth or "" in segments:
        raise Refused(403, "AuthorizationFailure", "the blob is not below an sdd-deep directory")
    directory = "/".join(segments[:depth])
    if "skoid" in query:  # a user delegation SAS: this front knows only the account key
        raise Refused(403, "AuthenticationFailed", "user delegation SAS are not emulated")
    expected = generate_directory_sas(
        account, container, directory, AZURITE_KEY, permission=query.get("sp"),
        expiry=query.get("se"), start=query.get("st"), protocol=query.get("spr"),
        ip=query.get("sip"),
    )  # fmt: skip
    signed = {k: v[0] for k, v in parse_qs(expected).items()}
    if signed.get("sv") != query.get("sv") or not hmac.compare_digest(
        signed["sig"].encode(), query.get("sig", "").encode()
    ):
        raise Refused(403, "AuthenticationFailed", "Signature did not match.")
    now = datetime.datetime.now(datetime.UTC)
    if now >= _time(query["se"]) or ("st" in query and now < _time(query["st"])):
        raise Refused(403, "AuthenticationFailed", "Signed expiry time has passed.")
    if method != "PUT" or not set(query.get("sp", "")) & {"c", "w"}:
        raise Refused(403, "AuthorizationPermissionMismatch",
                      "This request is not authorized to perform this operation using this "
                      "permission.")  # fmt: skip
    return container, blob


class Front(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    azurite: tuple[str, int]  # set on the subclass serve() makes

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            parts = []
            while size := int(self.rfile.readline().split(b";")[0], 16):
                parts.append(self.rfile.read(size))
                self.rfile.readline()
            self.rfile.readline()
            return b"".join(parts)
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _answer(self, status: int, headers: list[tuple[str, str]], body: bytes) -> None:
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        if self.command != "HEAD" or not any(n.lower() == "content-length" for n, _ in headers):
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _handle(self) -> None:
        body = self._body()
        parts = urlsplit(self.path)
        query = {k: v[0] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
        if query.get("sr") == "d":
            self._directory_sas(parts.path, query, body)
            return
        upstream = http.client.HTTPConnection(*self.azurite, timeout=60)
        try:
            headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP}
            headers["Host"] = "{}:{}".format(*self.azurite)
            if body or self.command in ("PUT", "POST"):
                headers["Content-Length"] = str(len(body))
            upstream.request(self.command, self.path, body=body, headers=headers)
            answer = upstream.getresponse()
            data = answer.read()
            kept = [(k, v) for k, v in answer.getheaders() if k.lower() not in OWN]
            if query.get("restype") == "account" and query.get("comp") == "properties":
                kept = [(k, v) for k, v in kept if k.lower() != "x-ms-is-hns-enabled"]
                kept.append(("x-ms-is-hns-enabled", "true"))  # what this front emulates
            if self.command == "HEAD":
                kept += [(k, v) for k, v in answer.getheaders() if k.lower() == "content-length"]
            self._answer(answer.status, kept, data)
        finally:
            upstream.close()

    def _directory_sas(self, path: str, query: dict[str, str], body: bytes) -> None:
        from azure.storage.blob import BlobServiceClient

        try:
            if self.headers.get("x-ms-blob-type") != "BlockBlob":
                raise Refused(400, "MissingRequiredHeader", "x-ms-blob-type must be BlockBlob")
            container, blob = check_directory_sas(self.command, path, query)
        except Refused as refused:
            xml = (f'<?xml version="1.0" encoding="utf-8"?><Error><Code>{refused.code}</Code>'
                   f"<Message>{refused}</Message></Error>").encode()  # fmt: skip
            self._answer(refused.status, [("Content-Type", "application/xml"),
                                          ("x-ms-error-code", refused.code)], xml)  # fmt: skip
            return
        host, port = self.azurite
        client = BlobServiceClient(
            f"http://{host}:{port}/{AZURITE_ACCOUNT}",
            credential={"account_name": AZURITE_ACCOUNT, "account_key": AZURITE_KEY},
        )
        stored = client.get_blob_client(container, blob).upload_blob(body, overwrite=True)
        self._answer(201, [("ETag", str(stored["etag"]))], b"")

    do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = do_OPTIONS = _handle


def connection_string(endpoint: str) -> str:
    """Azurite's account, reached at ``endpoint`` (the front's)."""
    return (
        f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};"
        f"AccountKey={AZURITE_KEY};BlobEndpoint={endpoint};"
    )


class Running:
    """A front and its Azurite; ``endpoint`` is the account's blob endpoint through the front."""

    def __init__(
        self, azurite: subprocess.Popen, server: ThreadingHTTPServer, host: str, azurite_port: int
    ) -> None:
        self._azurite, self._front = azurite, server
        self.endpoint = f"http://{host}:{server.server_address[1]}/{AZURITE_ACCOUNT}"
        # Azurite itself: a storage account without a hierarchical namespace
        self.plain_connection_string = connection_string(
            f"http://{host}:{azurite_port}/{AZURITE_ACCOUNT}"
        )
        self.connection_string = connection_string(self.endpoint)

    def stop(self) -> None:
        self._front.shutdown()
        self._front.server_close()
        self._azurite.terminate()
        self._azurite.wait(timeout=30)


def front(host: str, port: int, azurite: tuple[str, int]) -> ThreadingHTTPServer:
    """The front on ``port`` before the Azurite at ``azurite`` (host, port), serving in a
    thread (``.shutdown()`` it)."""
    handler = type("BoundFront", (Front,), {"azurite": azurite})
    server = ThreadingHTTPServer((host, port), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def serve(host: str, port: int, azurite_port: int) -> Running:
    """A private in-memory Azurite on ``azurite_port`` and the front on ``port`` (``.stop()``)."""
    argv = [str(azurite_bin()), "--blobHost", host, "--blobPort", str(azurite_port), *FLAGS]
    azurite = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    for line in azurite.stdout:  # type: ignore[union-attr]  # its start message, no polling
        lines.append(line)
        if "successfully listens" in line:
            break
    else:
        raise RuntimeError("azurite exited before listening:\n" + "".join(lines[-20:]))
    assert azurite.stdout is not None
    threading.Thread(target=azurite.stdout.read, daemon=True).start()  # drain it
    return Running(azurite, front(host, port, (host, azurite_port)), host, azurite_port)
