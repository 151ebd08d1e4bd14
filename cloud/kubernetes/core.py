"""``core/v1`` objects other than pods: Namespaces, Nodes, Events, Secrets, Services, quotas.

* Namespaces: create (422 for a bad name, 409 when it exists), get, list, watch.
* Nodes: get, list, watch (the set itself comes from the control API).
* Events: list and watch, per namespace and across namespaces (``fieldSelector``
  ``involvedObject.name=``, ``involvedObject.kind=``, ``involvedObject.uid=``, ``reason=``...).
* Secrets: create (``data`` in base64, ``stringData`` folded into it; ``type`` Opaque by
  default), get, list, watch, delete.
* Services: create (a ``clusterIP`` from 10.96.0.0/12 unless ``None``: headless), get, list,
  watch, delete.
* ResourceQuotas: create (``spec.hard`` quantities checked), get, list, watch, delete; what
  they limit is ``quota.py``'s.

Creating anything in a namespace that does not exist is 404 ``namespaces "x" not found``.
"""

from __future__ import annotations

import copy
import ipaddress
from collections.abc import Callable
from typing import Any

from cloud.fake_http import Request, Response
from cloud.kubernetes.api import (
    EVENTS,
    NAMESPACES,
    NODES,
    RESOURCE_QUOTAS,
    SECRETS,
    SERVICES,
    Kind,
    already_exists,
    bad_request,
    k8s_time,
    new_uid,
    not_found,
)
from cloud.kubernetes.deletion import Deletion, check_preconditions, delete_options
from cloud.kubernetes.patching import apply_patch
from cloud.kubernetes.podspec import generated_name
from cloud.kubernetes.quota import validate_quota
from cloud.kubernetes.reads import ReadRoutes
from cloud.kubernetes.state import namespace_object
from cloud.kubernetes.validation import (
    check_decodable,
    secret_data,
    validate_namespace,
    validate_service,
)

CORE = "/api/v1"
IN_NS = CORE + r"/namespaces/(?P<ns>[^/]+)/"
NAME = r"/(?P<name>[^/]+)"
SERVICE_RANGE = ipaddress.ip_network("10.96.0.0/12")


class CoreRoutes(ReadRoutes, Deletion):
    """Namespaces, Nodes, Events, Secrets and Services."""

    def _add_core_routes(self) -> None:
        r = self.router
        r.add(
            "GET",
            CORE + "/namespaces",
            "listCoreV1Namespace",
            lambda req: self.list_or_watch(NAMESPACES, req, None),
        )
        r.add("POST", CORE + "/namespaces", "createCoreV1Namespace", self._create_namespace)
        r.add(
            "GET",
            CORE + "/namespaces" + NAME,
            "readCoreV1Namespace",
            lambda req: self._read(NAMESPACES, req),
        )
        r.add(
            "GET",
            CORE + "/nodes",
            "listCoreV1Node",
            lambda req: self.list_or_watch(NODES, req, None),
        )
        r.add("GET", CORE + "/nodes" + NAME, "readCoreV1Node", lambda req: self._read(NODES, req))
        r.add(
            "GET",
            CORE + "/events",
            "listCoreV1EventForAllNamespaces",
            lambda req: self.list_or_watch(EVENTS, req, None),
        )
        r.add(
            "GET",
            IN_NS + "events",
            "listCoreV1NamespacedEvent",
            lambda req: self.list_or_watch(EVENTS, req, self._ns(req)),
        )
        r.add(
            "GET",
            IN_NS + "events" + NAME,
            "readCoreV1NamespacedEvent",
            lambda req: self._read(EVENTS, req),
        )
        for kind, create in (
            (SECRETS, self._secret),
            (SERVICES, self._service),
            (RESOURCE_QUOTAS, lambda body: validate_quota(RESOURCE_QUOTAS, body)),
        ):
            self._add_simple(kind, create)

    def _add_simple(self, kind: Kind, prepare: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
        """Create, get, list (and watch), patch, replace and delete of a namespaced kind."""
        r = self.router
        r.add(
            "POST",
            IN_NS + kind.resource,
            f"createCoreV1Namespaced{kind.kind}",
            lambda req: self._create(kind, req, prepare),
        )
        r.add(
            "GET",
            IN_NS + kind.resource,
            f"listCoreV1Namespaced{kind.kind}",
            lambda req: self.list_or_watch(kind, req, self._ns(req)),
        )
        r.add(
            "GET",
            CORE + "/" + kind.resource,
            f"listCoreV1{kind.kind}ForAllNamespaces",
            lambda req: self.list_or_watch(kind, req, None),
        )
        r.add(
            "GET",
            IN_NS + kind.resource + NAME,
            f"readCoreV1Namespaced{kind.kind}",
            lambda req: self._read(kind, req),
        )
        r.add(
            "DELETE",
            IN_NS + kind.resource + NAME,
            f"deleteCoreV1Namespaced{kind.kind}",
            lambda req: self._delete(kind, req),
        )
        r.add(
            "PATCH",
            IN_NS + kind.resource + NAME,
            f"patchCoreV1Namespaced{kind.kind}",
            lambda req: self._change(kind, req, prepare, patch=True),
        )
        r.add(
            "PUT",
            IN_NS + kind.resource + NAME,
            f"replaceCoreV1Namespaced{kind.kind}",
            lambda req: self._change(kind, req, prepare, patch=False),
        )

    @staticmethod
    def _ns(req: Request) -> str:
        assert req.match is not None
        return req.match["ns"]

    def _read(self, kind: Kind, req: Request) -> Response:
        assert req.match is not None
        namespace = req.match["ns"] if kind.namespaced else ""
        return Response(200, self.get_object(kind, namespace, req.match["name"]))

    def _body(self, kind: Kind, req: Request) -> dict[str, Any]:
        try:
            body = check_decodable(kind, req.json())
        except ValueError:
            raise bad_request("the body of the request was not valid JSON") from None
        meta = body.setdefault("metadata", {})
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = generated_name(meta["generateName"])
        body.pop("kind", None)
        body.pop("apiVersion", None)
        return body

    def _create(
        self, kind: Kind, req: Request, prepare: Callable[[dict[str, Any]], dict[str, Any]]
    ) -> Response:
        namespace = self._ns(req)
        body = self._body(kind, req)
        meta = body["metadata"]
        if meta.get("namespace") not in (None, "", namespace):
            raise bad_request(
                "the namespace of the provided object does not match the "
                "namespace sent on the request"
            )
        obj = prepare(body)
        with self.lock:
            self.require_namespace(namespace)
            if self.store.get(kind.resource, namespace, meta["name"]) is not None:
                raise already_exists(kind, meta["name"])
            meta.update(namespace=namespace, uid=new_uid(), creationTimestamp=k8s_time())
            if kind == SERVICES:
                self._assign_cluster_ip(obj)
            if req.arg("dryRun") == "All":
                return Response(201, kind.typed(obj))
            stored = self.store.add(kind.resource, obj)
            return Response(201, kind.typed(copy.deepcopy(stored)))

    def _change(
        self,
        kind: Kind,
        req: Request,
        prepare: Callable[[dict[str, Any]], dict[str, Any]],
        *,
        patch: bool,
    ) -> Response:
        """PATCH (merge, strategic merge or JSON patch) or PUT (replace) of an object: its
        identity (name, namespace, uid, creation time) is kept whatever the body says."""
        assert req.match is not None
        namespace, name = req.match["ns"], req.match["name"]
        try:
            body = req.json()
        except ValueError:
            raise bad_request("the body of the request was not valid JSON") from None
        with self.lock:
            current = self.store.get(kind.resource, namespace, name)
            if current is None:
                raise not_found(kind, name)
            if patch:
                changed = apply_patch(req.headers.get("content-type", ""), current, body)
            else:
                if (body.get("metadata") or {}).get("name") not in (None, name):
                    raise bad_request("the name of the object does not match the name on the URL")
                changed = copy.deepcopy(body)
            changed.pop("kind", None)
            changed.pop("apiVersion", None)
            meta = changed.setdefault("metadata", {})
            for key in ("name", "namespace", "uid", "creationTimestamp", "resourceVersion"):
                meta[key] = current["metadata"].get(key)
            stored = self.store.put(kind.resource, prepare(changed))
            return Response(200, kind.typed(copy.deepcopy(stored or changed)))

    def _delete(self, kind: Kind, req: Request) -> Response:
        assert req.match is not None
        namespace, name = req.match["ns"], req.match["name"]
        policy, _grace, preconditions = delete_options(req, "Background")
        with self.lock:
            obj = self.store.get(kind.resource, namespace, name)
            if obj is None:
                raise not_found(kind, name)
            check_preconditions(kind, obj, preconditions)
            return Response(200, self.delete_object(kind, obj, policy))

    def _create_namespace(self, req: Request) -> Response:
        body = self._body(NAMESPACES, req)
        validate_namespace(NAMESPACES, body)
        name = body["metadata"]["name"]
        with self.lock:
            if self.store.get(NAMESPACES.resource, "", name) is not None:
                raise already_exists(NAMESPACES, name)
            obj = namespace_object(name, body["metadata"].get("labels"))
            if body["metadata"].get("annotations"):
                obj["metadata"]["annotations"] = body["metadata"]["annotations"]
            stored = self.store.add(NAMESPACES.resource, obj)
            return Response(201, NAMESPACES.typed(copy.deepcopy(stored)))

    @staticmethod
    def _secret(body: dict[str, Any]) -> dict[str, Any]:
        data = secret_data(SECRETS, body)
        body.pop("stringData", None)
        body["data"] = data
        body.setdefault("type", "Opaque")
        return body

    @staticmethod
    def _service(body: dict[str, Any]) -> dict[str, Any]:
        validate_service(SERVICES, body)
        spec = body.setdefault("spec", {})
        spec.setdefault("type", "ClusterIP")
        spec.setdefault("sessionAffinity", "None")
        spec.setdefault("ipFamilies", ["IPv4"])
        spec.setdefault("ipFamilyPolicy", "SingleStack")
        spec.setdefault("internalTrafficPolicy", "Cluster")
        for port in spec.get("ports") or []:
            port.setdefault("protocol", "TCP")
            port.setdefault("targetPort", port.get("port"))
        body["status"] = {"loadBalancer": {}}
        return body

    def _assign_cluster_ip(self, service: dict[str, Any]) -> None:
        """A free address of the service range, unless headless (``clusterIP: None``)."""
        spec = service["spec"]
        if spec.get("clusterIP") == "None":
            spec["clusterIPs"] = ["None"]
            return
        taken = {s["spec"].get("clusterIP") for s in self.store.items(SERVICES.resource)}
        for offset in range(10, SERVICE_RANGE.num_addresses - 1):
            address = str(SERVICE_RANGE[offset])
            if address not in taken:
                spec["clusterIP"] = address
                spec["clusterIPs"] = [address]
                return
