"""Reading collections: list (selectors, ``limit``/``continue``), get, and watch.

A list answers ``<Kind>List`` with the store's current resourceVersion, items in key order
(namespace, then name) without ``kind``/``apiVersion``, and with ``limit`` a ``continue`` token
and ``remainingItemCount``. A token from before a compaction (``POST /_fake/compact``) is 410
Expired; one that does not decode is 400. Pages are read from the store as it is when each is
asked for, not from a snapshot of the first.

``watch=true`` turns the same request into a stream (:mod:`cloud.kubernetes.watch`).
"""

from __future__ import annotations

import base64
import copy
import json
from typing import Any

from cloud.fake_http import Request, Response
from cloud.kubernetes.api import ApiError, Kind, bad_request, not_found
from cloud.kubernetes.selectors import (
    fields_match,
    labels_match,
    parse_field_selector,
    parse_label_selector,
)
from cloud.kubernetes.state import KubernetesState
from cloud.kubernetes.store import key_of
from cloud.kubernetes.watch import watch_stream

EXPIRED_CONTINUE = (
    "The provided continue parameter is too old to display a consistent list result. You can "
    "start a new list without the continue parameter."
)


def flag(raw: str | None) -> bool:
    return (raw or "").lower() in ("true", "1")


def _encode_continue(rv: int, last: tuple[str, str]) -> str:
    start = f"{last[0]}/{last[1]}\x00" if last[0] else f"{last[1]}\x00"
    token = json.dumps({"v": "meta.k8s.io/v1", "rv": rv, "start": start}, separators=(",", ":"))
    return base64.urlsafe_b64encode(token.encode()).decode().rstrip("=")


def _decode_continue(token: str) -> tuple[int, tuple[str, str]]:
    try:
        raw = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
        rv, start = int(raw["rv"]), str(raw["start"]).rstrip("\x00")
        if raw.get("v") != "meta.k8s.io/v1":
            raise ValueError("unknown version")
    except (ValueError, KeyError, TypeError) as exc:
        raise bad_request(f"continue key is not valid: {exc}") from None
    namespace, _, name = start.rpartition("/")
    return rv, (namespace, name)


class ReadRoutes(KubernetesState):
    """List, get and watch for every kind, on the shared store."""

    def list_or_watch(self, kind: Kind, req: Request, namespace: str | None) -> Response:
        """GET on a collection: a list, or with ``watch=true`` a watch stream."""
        labels = parse_label_selector(req.arg("labelSelector"))
        fields = parse_field_selector(kind.resource, req.arg("fieldSelector"))
        if flag(req.arg("watch")):
            rv = req.arg("resourceVersion")
            if rv and not rv.isdigit():
                raise bad_request(f'resourceVersion: Invalid value: "{rv}": must be a number')
            timeout = req.arg("timeoutSeconds")
            try:
                seconds = float(timeout) if timeout else 1800.0
            except ValueError:
                raise bad_request(f"timeoutSeconds: invalid value {timeout!r}") from None
            stream = watch_stream(
                self.store,
                kind,
                namespace,
                lambda obj: (
                    labels_match(labels, obj["metadata"].get("labels"))
                    and fields_match(fields, obj)
                ),
                rv=rv,
                timeout=seconds,
                bookmarks=flag(req.arg("allowWatchBookmarks")),
                initial=flag(req.arg("sendInitialEvents")),
                stopping=self.stopping,
            )
            return Response(200, stream=stream, content_type="application/json;stream=watch")
        return Response(200, self._list(kind, req, namespace, labels, fields))

    def _list(
        self, kind: Kind, req: Request, namespace: str | None, labels: Any, fields: Any
    ) -> dict[str, Any]:
        try:
            limit = int(req.arg("limit") or 0)
        except ValueError:
            raise bad_request(f"limit: invalid value {req.arg('limit')!r}") from None
        token = req.arg("continue")
        with self.lock:
            rv = self.store.rv
            items = [
                obj
                for obj in self.store.items(kind.resource, namespace)
                if labels_match(labels, obj["metadata"].get("labels")) and fields_match(fields, obj)
            ]
            if token:
                token_rv, after = _decode_continue(token)
                if token_rv < self.store.oldest - 1:
                    raise ApiError(410, EXPIRED_CONTINUE, "Expired")
                items = [obj for obj in items if key_of(obj) > after]
            meta: dict[str, Any] = {"resourceVersion": str(rv)}
            if 0 < limit < len(items):
                meta["continue"] = _encode_continue(rv, key_of(items[limit - 1]))
                meta["remainingItemCount"] = len(items) - limit
                items = items[:limit]
            page = copy.deepcopy(items)
        return {
            "kind": f"{kind.kind}List",
            "apiVersion": kind.api_version,
            "metadata": meta,
            "items": page,
        }

    def get_object(self, kind: Kind, namespace: str, name: str) -> dict[str, Any]:
        """A copy of the object with its kind and apiVersion; 404 when absent."""
        with self.lock:
            obj = self.store.get(kind.resource, namespace if kind.namespaced else "", name)
            if obj is None:
                raise not_found(kind, name)
            return kind.typed(copy.deepcopy(obj))
