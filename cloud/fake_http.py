"""HTTP plumbing shared by the service fakes: routing, counters, faults.

The SageMaker, Vertex AI and Azure ML fakes are plain ``ThreadingHTTPServer``s (no framework:
the official clients only need HTTP/1.1 and JSON). This module holds what they have in common:

* :class:`Router`: ``(method, regex) -> handler`` with an operation name per route, so every
  API call is counted under the service's own operation name (``CreateCustomJob``,
  ``Jobs_CreateOrUpdate``...).
* :class:`FaultBook`: fault rules settable at run time through the control API. Rates are
  deterministic (an accumulator, not a random draw), so a test that sets ``rate: 0.5`` sees
  exactly every second call fail: no flakiness.
* the control API under ``/_fake/``:

  ``GET  /_fake/health``    ``{"ok": true, "service": ...}``
  ``GET  /_fake/counters``  ``{"counters": {"<Operation>": n, ...}}``
  ``POST /_fake/faults``    one rule, or ``{"faults": [rule, ...], "replace": false}``
  ``GET  /_fake/faults``    the rules now in force
  ``DELETE /_fake/faults``  clear the rules
  ``POST /_fake/reset``     clear rules and counters (``{"jobs": true}`` also forgets jobs)
  ``GET|POST /_fake/mode``  the runner mode of new jobs, ``{"mode": "process"|"container"}``

Fault rules (``kind`` picks the behaviour; unknown kinds are refused with 400):

``{"kind": "throttle", "operation": "*", "rate": 1.0, "count": null}``
    answer with the service's real throttling error (Vertex: 429 RESOURCE_EXHAUSTED;
    ARM: 429 with ``Retry-After``).
``{"kind": "error", "status": 503, "operation": "*", "rate": 1.0, "count": null}``
    answer with a 5xx in the service's error shape.
``{"kind": "provisioning_delay", "seconds": 3}``
    jobs stay queued/provisioning that much longer before they start.
``{"kind": "job_failure", "reason": "...", "code": ..., "match": null, "count": 1}``
    the next matching job (name or display name contains ``match``) fails with that reason
    instead of running.
``{"kind": "preempt", "after_seconds": 1.0, "match": null, "count": 1}``
    spot preemption of a running job (what happens next is the service's rule; see the fake).
``{"kind": "log_delay", "seconds": 2}``
    log lines become readable only that long after they were written.

``operation`` is an operation name or ``"*"``; ``count`` is how many times the rule fires before
it retires itself (default: no limit; 1 for ``job_failure`` and ``preempt``; ``null`` for no
limit).
"""

from __future__ import annotations

import json
import os
import re
import socket
import ssl
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

JOB_FAULT_KINDS = ("provisioning_delay", "job_failure", "preempt", "log_delay")
REQUEST_FAULT_KINDS = ("throttle", "error")


@dataclass
class Request:
    """One parsed HTTP request, as a route handler sees it."""

    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes
    match: re.Match[str] | None = None
    base_url: str = ""  # scheme://host:port as the client reached us

    def json(self) -> Any:
        """The body as JSON (None when empty); raises ValueError on malformed JSON."""
        if not self.body.strip():
            return None
        return json.loads(self.body)

    def arg(self, name: str, default: str | None = None) -> str | None:
        """One query parameter."""
        values = self.query.get(name)
        return values[0] if values else default


@dataclass
class Response:
    """What a route handler answers."""

    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    raw: bytes | None = None
    content_type: str = "application/json; charset=utf-8"


Handler = Callable[[Request], Response]


@dataclass
class Route:
    method: str
    pattern: re.Pattern[str]
    operation: str
    handler: Handler


class Router:
    """Method + path regex -> handler, with the operation name each call is counted under."""

    def __init__(self) -> None:
        self.routes: list[Route] = []

    def add(self, method: str, pattern: str, operation: str, handler: Handler) -> None:
        self.routes.append(Route(method, re.compile(f"^{pattern}$"), operation, handler))

    def find(self, method: str, path: str) -> tuple[Route | None, re.Match[str] | None, bool]:
        """The route, its match, and whether the path exists under another method."""
        other = False
        for route in self.routes:
            m = route.pattern.match(path)
            if m is None:
                continue
            if route.method == method:
                return route, m, True
            other = True
        return None, None, other


class FaultBook:
    """Fault rules in force, with deterministic rates."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.rules: list[dict[str, Any]] = []

    @staticmethod
    def validate(rule: Any) -> dict[str, Any]:
        if not isinstance(rule, dict) or "kind" not in rule:
            raise ValueError('a fault rule is an object with a "kind"')
        kind = rule["kind"]
        if kind not in REQUEST_FAULT_KINDS + JOB_FAULT_KINDS:
            raise ValueError(
                f"fault kind {kind!r}: use one of {REQUEST_FAULT_KINDS + JOB_FAULT_KINDS}"
            )
        rate = float(rule.get("rate", 1.0))
        if not 0.0 <= rate <= 1.0:
            raise ValueError(f"fault rate {rate}: use 0..1")
        clean = dict(rule)
        clean["rate"] = rate
        clean.setdefault("operation", "*")
        if kind in ("job_failure", "preempt"):  # "the next matching job": once, unless told
            clean.setdefault("count", 1)
        clean["_acc"] = 0.0
        return clean

    def add(self, rules: list[Any], replace: bool = False) -> None:
        clean = [self.validate(r) for r in rules]
        with self._lock:
            if replace:
                self.rules = []
            self.rules.extend(clean)

    def clear(self) -> None:
        with self._lock:
            self.rules = []

    def public(self) -> list[dict[str, Any]]:
        with self._lock:
            return [{k: v for k, v in r.items() if not k.startswith("_")} for r in self.rules]

    def _fire(self, rule: dict[str, Any]) -> bool:
        """Deterministic rate: fires whenever the accumulated rate crosses 1."""
        rule["_acc"] += rule["rate"]
        if rule["_acc"] + 1e-9 < 1.0:
            return False
        rule["_acc"] -= 1.0
        if rule.get("count") is not None:
            rule["count"] = int(rule["count"]) - 1
            if rule["count"] <= 0:
                self.rules.remove(rule)
        return True

    def request_fault(self, operation: str) -> dict[str, Any] | None:
        """The throttle/error rule that fires for this call, if any."""
        with self._lock:
            for rule in list(self.rules):
                if rule["kind"] not in REQUEST_FAULT_KINDS:
                    continue
                if rule["operation"] not in ("*", operation):
                    continue
                if self._fire(rule):
                    return dict(rule)
        return None

    def take_job_fault(self, kind: str, name: str) -> dict[str, Any] | None:
        """Consume a job-level rule of ``kind`` matching the job ``name`` (by substring)."""
        with self._lock:
            for rule in list(self.rules):
                if rule["kind"] != kind:
                    continue
                match = rule.get("match")
                if match and match not in name:
                    continue
                if self._fire(rule):
                    return dict(rule)
        return None

    def seconds(self, kind: str) -> float:
        """Sum of ``seconds`` of every standing rule of ``kind`` (delays do not retire)."""
        with self._lock:
            return sum(float(r.get("seconds", 0)) for r in self.rules if r["kind"] == kind)


class FakeService:
    """What a fake plugs into the server: routes, error shapes, and reset of its own state."""

    name = "fake"

    def __init__(self) -> None:
        self.router = Router()
        self.faults = FaultBook()
        self.counters: Counter[str] = Counter()
        self._count_lock = threading.Lock()
        self._local = threading.local()

    # --- hooks for the service -------------------------------------------------------------
    def error_response(self, status: int, message: str, kind: str) -> Response:
        """The service's error shape; ``kind`` is "throttle", "error", "not_found", "bad"."""
        return Response(status, {"error": {"code": status, "message": message}})

    def current_fault(self) -> dict[str, Any] | None:
        """The fault rule that fired for the request this thread is answering, if any."""
        return getattr(self._local, "fault", None)

    def reset(self, jobs: bool) -> None:
        """Forget state (counters and faults are cleared by the caller)."""

    def shutdown(self) -> None:
        """Stop running jobs."""

    # --- plumbing ----------------------------------------------------------------------------
    def count(self, operation: str) -> None:
        with self._count_lock:
            self.counters[operation] += 1

    def control(self, req: Request) -> Response | None:
        """The /_fake/ control API; None when the path is not a control path."""
        path = req.path
        if path == "/_fake/health":
            return Response(200, {"ok": True, "service": self.name})
        if path == "/_fake/counters" and req.method == "GET":
            with self._count_lock:
                return Response(200, {"counters": dict(self.counters)})
        if path == "/_fake/faults":
            if req.method == "GET":
                return Response(200, {"faults": self.faults.public()})
            if req.method == "DELETE":
                self.faults.clear()
                return Response(200, {"faults": []})
            if req.method == "POST":
                try:
                    body = req.json() or {}
                    rules = body.get("faults", [body])
                    self.faults.add(rules, replace=bool(body.get("replace", False)))
                except (ValueError, KeyError, TypeError) as exc:
                    return Response(400, {"error": str(exc)})
                return Response(200, {"faults": self.faults.public()})
        if path == "/_fake/mode":
            runner = getattr(self, "runner", None)
            if runner is None:
                return Response(404, {"error": f"{self.name} has no runner mode"})
            if req.method == "POST":
                try:
                    mode = (req.json() or {}).get("mode")
                except ValueError:
                    mode = None
                if mode not in ("process", "container"):
                    return Response(400, {"error": f"mode {mode!r}: use process or container"})
                runner.mode = mode
            return Response(200, {"mode": runner.mode})
        if path == "/_fake/reset" and req.method == "POST":
            try:
                body = req.json() or {}
            except ValueError:
                body = {}
            self.faults.clear()
            with self._count_lock:
                self.counters.clear()
            self.reset(jobs=bool(body.get("jobs", False)))
            return Response(200, {"ok": True})
        return None

    def dispatch(self, req: Request) -> Response:
        if req.path.startswith("/_fake/"):
            resp = self.control(req)
            if resp is not None:
                return resp
        route, match, other = self.router.find(req.method, req.path)
        if route is None:
            if other:
                return self.error_response(405, f"method {req.method} not allowed", "bad")
            return self.error_response(404, f"no such resource: {req.path}", "not_found")
        self.count(route.operation)
        fault = self.faults.request_fault(route.operation)
        self._local.fault = fault  # error_response() may read the rule (e.g. retry_after)
        if fault is not None:
            if fault["kind"] == "throttle":
                return self.error_response(429, "throttled (injected)", "throttle")
            status = int(fault.get("status", 503))
            return self.error_response(status, f"injected server error {status}", "error")
        req.match = match
        return route.handler(req)


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


def _is_ip(name: str) -> bool:
    import ipaddress

    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def self_signed_cert(directory: str) -> tuple[str, str]:
    """A self-signed certificate for this machine: (cert.pem, key.pem) in ``directory``.

    Valid for 127.0.0.1, localhost, ``host.docker.internal`` (how Airflow's containers reach
    the stack in docker compose's ``emulated`` profile) and ``$STEPOP_CLOUD_HOST`` when set.
    Clients trust it with ``REQUESTS_CA_BUNDLE=<cert.pem>`` or ``connection_verify=<cert.pem>``.
    Reused when already there for the same names (the directory may be a kept volume).
    """
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    names = {"127.0.0.1", "localhost", "host.docker.internal", os.environ.get("STEPOP_CLOUD_HOST")}
    alternatives = [
        x509.IPAddress(ipaddress.ip_address(name)) if _is_ip(name) else x509.DNSName(name)
        for name in sorted(filter(None, names))
    ]

    os.makedirs(directory, exist_ok=True)
    cert_path = os.path.join(directory, "cert.pem")
    key_path = os.path.join(directory, "key.pem")
    if os.path.exists(cert_path) and os.path.exists(key_path):
        with open(cert_path, "rb") as f:
            existing = x509.load_pem_x509_certificate(f.read())
        san = existing.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        if set(san) == set(alternatives):
            return cert_path, key_path
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "stepop fake cloud")])
    now = datetime.datetime.now(datetime.UTC)
    ski = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=3650))
        .add_extension(
            x509.SubjectAlternativeName(alternatives),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(ski, critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski), critical=False
        )
        .sign(key, hashes.SHA256())
    )
    tmp_key = key_path + ".tmp"
    with open(tmp_key, "wb") as f:
        f.write(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
    tmp_cert = cert_path + ".tmp"
    with open(tmp_cert, "wb") as f:
        f.write(cert.public_bytes(serialization.Encoding.PEM))
    os.replace(tmp_key, key_path)
    os.replace(tmp_cert, cert_path)
    return cert_path, key_path


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


def rfc3339(ts: float | None) -> str | None:
    """Epoch seconds -> RFC 3339 UTC with microseconds (what Google and Azure both answer)."""
    if ts is None:
        return None
    whole = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ts))
    return f"{whole}.{int((ts % 1) * 1e6):06d}Z"
