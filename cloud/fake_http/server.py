"""The HTTP server a fake runs in: :class:`FakeServer`, plain HTTP and HTTPS on one port.

A ``ThreadingHTTPServer`` (no framework: the official clients only need HTTP/1.1 and JSON) whose
handler turns each request into a :class:`~cloud.fake_http.routing.Request` for the service.
"""

from __future__ import annotations

import json
import socket
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from cloud.fake_http.routing import Request, Response
from cloud.fake_http.service import FakeService
from cloud.fake_http.tls import self_signed_cert


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    service: FakeService  # set on the subclass made per server

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        """Quiet: the fakes log nothing per request."""

    def _handle(self) -> None:
        parts = urlsplit(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        req = Request(
            method=self.command,
            path=parts.path,
            query=parse_qs(parts.query, keep_blank_values=True),
            headers={k.lower(): v for k, v in self.headers.items()},
            body=body,
            base_url=("https" if isinstance(self.connection, ssl.SSLSocket) else "http")
            + "://"
            + (self.headers.get("Host") or "{}:{}".format(*self.server.server_address[:2])),
        )
        try:
            resp = self.service.dispatch(req)
        except Exception as exc:  # a fake's bug answers 500 instead of hanging the client
            resp = self.service.error_response(500, f"fake internal error: {exc!r}", "error")
        if resp.stream is not None:
            self._send_stream(resp)
            return
        if resp.raw is not None:
            payload = resp.raw
        elif resp.body is None:
            payload = b""
        else:
            payload = json.dumps(resp.body).encode()
        self.send_response(resp.status)
        self.send_header("Content-Type", resp.content_type)
        self.send_header("Content-Length", str(len(payload)))
        for key, value in resp.headers.items():
            self.send_header(key, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(payload)

    def _send_stream(self, resp: Response) -> None:
        """Send ``resp.stream`` chunked; stop early (closing the connection) when the client
        goes away, and always close the iterator so its generator can clean up."""
        self.send_response(resp.status)
        self.send_header("Content-Type", resp.content_type)
        self.send_header("Transfer-Encoding", "chunked")
        for key, value in resp.headers.items():
            self.send_header(key, value)
        self.end_headers()
        chunks = resp.stream
        assert chunks is not None
        try:
            for chunk in chunks:
                if not chunk:
                    if self._client_gone():
                        self.close_connection = True
                        return
                    continue
                self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            self.wfile.write(b"0\r\n\r\n")
        except OSError:  # the client hung up mid-write
            self.close_connection = True
        finally:
            close = getattr(chunks, "close", None)
            if close is not None:
                close()

    def _client_gone(self) -> bool:
        """Whether the client closed its end (a readable socket with nothing to read)."""
        if isinstance(self.connection, ssl.SSLSocket):  # no MSG_PEEK on TLS: never known
            return False
        try:
            return self.connection.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
        except BlockingIOError:  # nothing to read: still there
            return False
        except OSError:
            return True

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = _handle


class _DualServer(ThreadingHTTPServer):
    """HTTP and, when a TLS context is set, HTTPS on the same port (sniffs the first byte).

    The stack health-checks every fake over plain HTTP, while azure-core refuses to send a
    bearer token over http for some MLClient calls; one port that speaks both keeps both happy.
    """

    daemon_threads = True
    ssl_context: ssl.SSLContext | None = None

    def finish_request(self, request: Any, client_address: Any) -> None:
        if self.ssl_context is not None:
            try:
                first = request.recv(1, socket.MSG_PEEK)
            except OSError:
                return
            if first == b"\x16":  # a TLS handshake record
                try:
                    request = self.ssl_context.wrap_socket(request, server_side=True)
                except (ssl.SSLError, OSError):
                    return
        super().finish_request(request, client_address)


class FakeServer:
    """A running fake: ``.url`` (http), ``.https_url`` (when TLS), ``.port``, ``.shutdown()``."""

    def __init__(
        self, service: FakeService, host: str, port: int, tls_dir: str | None = None
    ) -> None:
        handler = type(f"{service.name}Handler", (_Handler,), {"service": service})
        self.service = service
        self.httpd = _DualServer((host, port), handler)
        self.host = host
        self.port = int(self.httpd.server_address[1])
        self.url = f"http://{host}:{self.port}"
        self.https_url: str | None = None
        self.ca_bundle: str | None = None
        if tls_dir is not None:
            cert, key = self_signed_cert(tls_dir)
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(cert, key)
            self.httpd.ssl_context = ctx
            self.https_url = f"https://{host}:{self.port}"
            self.ca_bundle = cert
        self._thread = threading.Thread(
            target=self.httpd.serve_forever, name=f"{service.name}-http", daemon=True
        )
        self._thread.start()

    def shutdown(self) -> None:
        """Stop serving and stop every job still running."""
        self.httpd.shutdown()
        self.httpd.server_close()
        self.service.shutdown()

    def serve_until_interrupted(self) -> None:
        """Block (the ``python -m`` entry points) until SIGINT/SIGTERM."""
        import signal

        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        try:
            while not stop.wait(0.5):
                pass
        except KeyboardInterrupt:
            pass
        finally:
            self.shutdown()
