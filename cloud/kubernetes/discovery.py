"""What a client asks before anything else: ``/version``, ``/api``, ``/apis`` and the resource
lists of ``/api/v1`` and ``/apis/batch/v1``, plus ``/healthz``, ``/livez`` and ``/readyz``.

The version is 1.31 (Jobs have the ``SuccessCriteriaMet`` and ``FailureTarget`` conditions);
the cncf provider's ``test_connection`` reads ``/version``.
"""

from __future__ import annotations

from typing import Any

from cloud.fake_http import Request, Response
from cloud.kubernetes.api import CORE_KINDS, JOBS, Kind
from cloud.kubernetes.state import KubernetesState

VERSION = {
    "major": "1",
    "minor": "31",
    "gitVersion": "v1.31.0",
    "gitCommit": "9edcffcde5595e8a5b1a35f88c421764e575afce",
    "gitTreeState": "clean",
    "buildDate": "2024-08-13T07:28:49Z",
    "goVersion": "go1.22.5",
    "compiler": "gc",
    "platform": "linux/amd64",
}
READ = ["get", "list", "watch"]
VERBS = {
    "jobs": ["create", "delete", "get", "list", "patch", "watch"],
    "pods": ["delete", "get", "list", "watch"],
    "events": READ,
    "secrets": ["create", "delete", "get", "list", "watch"],
    "services": ["create", "delete", "get", "list", "watch"],
    "namespaces": ["create", "get", "list", "watch"],
    "nodes": READ,
    "resourcequotas": ["create", "delete", "get", "list", "watch"],
}
SUBRESOURCES = {"jobs": ["status"], "pods": ["log", "status"]}


def _resource(kind: Kind) -> list[dict[str, Any]]:
    main = {
        "name": kind.resource,
        "singularName": kind.kind.lower(),
        "namespaced": kind.namespaced,
        "kind": kind.kind,
        "verbs": VERBS[kind.resource],
    }
    if kind.short_names:
        main["shortNames"] = list(kind.short_names)
    subs = [
        {
            "name": f"{kind.resource}/{sub}",
            "singularName": "",
            "namespaced": kind.namespaced,
            "kind": kind.kind if sub == "status" else "Pod",
            "verbs": ["get"],
        }
        for sub in SUBRESOURCES.get(kind.resource, [])
    ]
    return [main, *subs]


class DiscoveryRoutes(KubernetesState):
    """Version, API groups and resource lists."""

    def _add_discovery_routes(self) -> None:
        r = self.router
        r.add("GET", "/version", "getCodeVersion", lambda req: Response(200, VERSION))
        r.add("GET", "/api", "getCoreAPIVersions", self._api)
        r.add("GET", "/apis", "getAPIVersions", lambda req: Response(200, self._groups()))
        r.add(
            "GET",
            "/apis/batch",
            "getBatchAPIGroup",
            lambda req: Response(200, {"kind": "APIGroup", "apiVersion": "v1", **self._batch()}),
        )
        r.add(
            "GET",
            "/api/v1",
            "getCoreV1APIResources",
            lambda req: Response(200, self._resources("v1", CORE_KINDS)),
        )
        r.add(
            "GET",
            "/apis/batch/v1",
            "getBatchV1APIResources",
            lambda req: Response(200, self._resources("batch/v1", (JOBS,))),
        )
        for path in ("/healthz", "/livez", "/readyz"):
            r.add(
                "GET",
                path,
                "health",
                lambda req: Response(200, raw=b"ok", content_type="text/plain"),
            )

    @staticmethod
    def _api(req: Request) -> Response:
        host = req.base_url.split("://", 1)[-1]
        return Response(
            200,
            {
                "kind": "APIVersions",
                "versions": ["v1"],
                "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": host}],
            },
        )

    @staticmethod
    def _batch() -> dict[str, Any]:
        version = {"groupVersion": "batch/v1", "version": "v1"}
        return {"name": "batch", "versions": [version], "preferredVersion": version}

    def _groups(self) -> dict[str, Any]:
        return {"kind": "APIGroupList", "apiVersion": "v1", "groups": [self._batch()]}

    @staticmethod
    def _resources(group_version: str, kinds: tuple[Kind, ...]) -> dict[str, Any]:
        resources = [entry for kind in kinds for entry in _resource(kind)]
        return {
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": group_version,
            "resources": resources,
        }
