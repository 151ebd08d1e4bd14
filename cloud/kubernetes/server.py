"""A Kubernetes API server fake whose Jobs really run (``cloud.serve cloud.kubernetes``).

The official clients (``kubernetes``, ``kubernetes_asyncio``) and the cncf provider's
``KubernetesHook``/``AsyncKubernetesHook`` talk to it unchanged, over plain http with a bearer
token (any other token, or none: 401 ``Unauthorized``). What it serves (JSON; errors are
``Status`` objects with kube-apiserver's code, reason and wording; one cluster-wide
resourceVersion that only grows; ``watch=true`` on every list):

``/version``, ``/api``, ``/apis``, ``/api/v1``, ``/apis/batch/v1``     discovery
``/api/v1/namespaces[/{ns}]``                 list, create, get (``default``, ``stepop``,
                                              ``kube-system``... exist at start)
``/apis/batch/v1[/namespaces/{ns}]/jobs``     list (``labelSelector``, ``fieldSelector``,
                                              ``limit``/``continue``), create
``/apis/batch/v1/namespaces/{ns}/jobs/{name}[/status]``  get, patch, delete
``/api/v1[/namespaces/{ns}]/pods[/{name}]``   list, get, delete; ``.../{name}/log``
``/api/v1[/namespaces/{ns}]/events``          list (``involvedObject.*`` field selectors)
``/api/v1/nodes[/{name}]``                    list, get
``/api/v1/namespaces/{ns}/secrets|services``  create, get, list, patch, replace, delete
``/api/v1/namespaces/{ns}/resourcequotas``    create, get, list, delete (``spec.hard``
                                              enforced on the job controller's pods)

Behind them a small cluster (:mod:`cloud.kubernetes.cluster`): the job controller (backoff
limit, active deadline, TTL, suspend, Indexed completions, conditions and events), the
scheduler (requests against allocatable, node selectors and affinity, taints and tolerations),
a kubelet per pod running its first container through :mod:`cloud.runner` (process mode for the
plain base image, a container otherwise; logs, image pulls, secret volumes, the downward API),
the garbage collector of ``ownerReferences`` and a minimal Kueue. Each module's docstring says
what it does and how.

Known gaps: no RBAC, admission webhooks (besides Kueue's suspend), ConfigMaps, Deployments or
other workload kinds, CRDs (no Kueue Workload objects), server-side apply, PUT of Jobs,
deleting a collection or a namespace, the ``/watch/`` paths, protobuf/YAML/CBOR bodies,
exec/attach/port-forward, init containers and sidecars (only a pod's first container runs);
pods are not restarted (``restartPolicy: OnFailure`` acts as ``Never``); ``podFailurePolicy``'s
``FailIndex``, ``backoffLimitPerIndex``, ``successPolicy``, ``managedBy`` and
``podReplacementPolicy: Failed`` are not honoured; list pages are not a snapshot of the first
page; nodes have no real capacity (the scheduler's arithmetic is all there is) and every pod
IP is 127.0.0.1.

Control API (``/_fake/``, :class:`cloud.control.FakeControl`): the shared paths of
:mod:`cloud.fake_http` (``faults``, ``counters`` under the OpenAPI operation ids such as
``createBatchV1NamespacedJob``, ``reset`` (``{"jobs": true}`` forgets every object and
stops every pod), ``mode``) and this fake's own (:mod:`cloud.kubernetes.control`: ``nodes``,
``queues``, ``ran``, ``compact``). Fault kinds:

* ``throttle``: 429 ``TooManyRequests`` with ``Retry-After`` (the rule's ``retry_after``,
  default 1) and ``details.retryAfterSeconds``;
* ``error``: the rule's ``status`` (500 ``InternalError``, 503 ``ServiceUnavailable``, 504
  ``Timeout``...);
* ``provisioning_delay``: new pods stay unscheduled that many more seconds;
* ``evict`` / ``oom_kill`` (``match``: part of the pod name; once unless ``count`` says):
  the next running pod that matches is evicted / OOM-killed;
* ``image_pull`` (``match``: part of the image; while the rule stands unless ``count``):
  pulls of that image fail;
* ``log_delay``: log lines are readable only ``seconds`` after they were written.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from cloud import runner as runner_mod
from cloud.fake_http import FakeServer, Request, Response
from cloud.kubernetes.api import REASONS, ApiError, status_body
from cloud.kubernetes.cluster import Cluster
from cloud.kubernetes.control import ControlRoutes
from cloud.kubernetes.core import CoreRoutes
from cloud.kubernetes.discovery import DiscoveryRoutes
from cloud.kubernetes.jobs import JobRoutes
from cloud.kubernetes.pods import PodRoutes
from cloud.kubernetes.state import DEFAULT_TOKEN

CONTEXT = "stepop-fake"


class KubernetesFake(JobRoutes, CoreRoutes, PodRoutes, DiscoveryRoutes, ControlRoutes, Cluster):
    """The fake: its parts' routes on one router, bearer auth, ``Status`` errors, reset."""

    def __init__(self, **settings: Any) -> None:
        """The settings of :class:`~cloud.kubernetes.state.KubernetesState`."""
        super().__init__(**settings)
        self.init_kueue()
        self._add_discovery_routes()
        self._add_job_routes()
        self._add_pod_routes()
        self._add_core_routes()
        self.start_cluster()

    def _authorized(self, req: Request) -> bool:
        scheme, _, token = req.headers.get("authorization", "").partition(" ")
        return scheme.lower() == "bearer" and token.strip() == self.token

    def dispatch(self, req: Request) -> Response:
        if req.path.startswith("/_fake/"):
            return self.own_control(req) or super().dispatch(req)
        if not self._authorized(req):
            return Response(401, status_body(401, "Unauthorized", "Unauthorized"))
        req.path = req.path.rstrip("/") or "/"  # the client asks for "/version/"
        try:
            return super().dispatch(req)
        except ApiError as err:
            return Response(err.code, err.status(), headers=err.headers)

    def error_response(self, status: int, message: str, kind: str) -> Response:
        if kind == "throttle":
            seconds = int((self.current_fault() or {}).get("retry_after", 1))
            return Response(
                429,
                status_body(
                    429,
                    "TooManyRequests",
                    "Too many requests, please try again later.",
                    {"retryAfterSeconds": seconds},
                ),
                headers={"Retry-After": str(seconds)},
            )
        if kind == "not_found":
            body = status_body(
                404, "NotFound", "the server could not find the requested resource", {}
            )
            return Response(404, body)
        if kind == "bad":
            return Response(
                405,
                status_body(
                    405,
                    "MethodNotAllowed",
                    "the server does not allow this method on the requested resource",
                    {},
                ),
            )
        words = {
            503: "the server is currently unable to handle the request",
            504: "the server was unable to return a response in the time allotted",
        }
        text = words.get(status, f"Internal error occurred: {message}")
        return Response(status, status_body(status, REASONS.get(status, "InternalError"), text))

    def reset(self, jobs: bool) -> None:
        if not jobs:
            return
        self.runner.stop_all(grace=1)
        with self.lock:
            self.store.clear()
            self.tracks.clear()
            self.ran.clear()
            self.init_kueue()
        self.seed()

    def shutdown(self) -> None:
        self.stop_cluster()
        self.runner.stop_all(grace=2)


# --- entry points ------------------------------------------------------------------------------
def settings_from_env(env: dict[str, str]) -> dict[str, Any]:
    """Settings from the stack's env: the token, where pods' files go, the runner mode."""
    settings: dict[str, Any] = {"token": env.get("STEPOP_KUBERNETES_TOKEN") or DEFAULT_TOKEN}
    if env.get("STEPOP_CLOUD_DIR"):
        # pod roots under .cloud/jobs, where `cloud.stack down` looks for leftover job PIDs
        jobs = os.path.join(env["STEPOP_CLOUD_DIR"], "jobs", "kubernetes")
        os.makedirs(jobs, exist_ok=True)
        settings["tmp_base"] = jobs
        settings["data_dir"] = os.path.join(env["STEPOP_CLOUD_DIR"], "kubernetes")
    if env.get("STEPOP_FAKE_MODE"):
        settings["mode"] = env["STEPOP_FAKE_MODE"]
    settings["base_image"] = runner_mod.BaseImage.from_env(env)
    return settings


def serve(host: str, port: int, env: dict[str, str]) -> None:
    """Serve the fake until SIGTERM/SIGINT, then stop every pod it runs (cloud.stack entry)."""
    server = FakeServer(KubernetesFake(**settings_from_env({**os.environ, **env})), host, port)
    print(f"[kubernetes] serving on {server.url}", flush=True)
    server.serve_until_interrupted()


def start(env: dict[str, str] | None = None, host: str = "127.0.0.1", port: int = 0) -> FakeServer:
    """Start the fake in this process (tests); ``.shutdown()`` stops it and its pods."""
    return FakeServer(
        KubernetesFake(**settings_from_env({**os.environ, **(env or {})})), host, port
    )


def kubeconfig(url: str, token: str, namespace: str = "default") -> dict[str, Any]:
    """A kubeconfig (as a dict) that points the clients at ``url`` with ``token``."""
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": CONTEXT, "cluster": {"server": url}}],
        "users": [{"name": CONTEXT, "user": {"token": token}}],
        "contexts": [
            {
                "name": CONTEXT,
                "context": {"cluster": CONTEXT, "user": CONTEXT, "namespace": namespace},
            }
        ],
        "current-context": CONTEXT,
    }


def stack_env(url: str, env: dict[str, str]) -> dict[str, str]:
    """``AIRFLOW_CONN_KUBERNETES_DEFAULT`` (an inline kubeconfig and ``namespace: default``)
    and ``STEPOP_KUBECONFIG`` (the same kubeconfig as a file in the stack's directory)."""
    token = env.get("STEPOP_KUBERNETES_TOKEN") or DEFAULT_TOKEN
    config = kubeconfig(url, token)
    extra = {"kube_config": config, "namespace": "default"}
    out = {
        "AIRFLOW_CONN_KUBERNETES_DEFAULT": json.dumps(
            {"conn_type": "kubernetes", "extra": extra}, separators=(",", ":")
        )
    }
    if env.get("STEPOP_CLOUD_DIR"):
        path = Path(env["STEPOP_CLOUD_DIR"]) / "kubeconfig"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(config, indent=2) + "\n")
        out["STEPOP_KUBECONFIG"] = str(path)
    return out


def main(argv: list[str] | None = None) -> None:
    """``python -m cloud.kubernetes [--host H] [--port P] [--mode process|container|timer]``,
    with the settings of the stack's ``.cloud/env`` when there is one."""
    from cloud.stack import read_env

    parser = argparse.ArgumentParser(prog="python -m cloud.kubernetes", description=main.__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--mode", choices=runner_mod.MODES, default=None)
    args = parser.parse_args(argv)
    env = read_env()
    if args.mode:
        env["STEPOP_FAKE_MODE"] = args.mode
    serve(args.host, args.port, env)
