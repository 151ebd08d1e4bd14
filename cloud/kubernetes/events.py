"""Events (``core/v1``), recorded as the cluster's components record them.

An event names the object it is about (``involvedObject``: kind, name, namespace, uid and, for
a container, ``fieldPath: spec.containers{main}``) and who said it (``source.component``:
``job-controller``, ``default-scheduler``, ``kubelet`` with its node as ``host``,
``kueue-admission``). The same reason and message about the same object again bump ``count``
and ``lastTimestamp`` of the one event, as client-go's recorder aggregates them. Clients list
them with ``fieldSelector=involvedObject.name=<pod>`` (what the cncf provider does).
"""

from __future__ import annotations

import time
from typing import Any

from cloud.kubernetes.api import EVENTS, Kind, k8s_time, new_uid
from cloud.kubernetes.store import Store

NORMAL = "Normal"
WARNING = "Warning"
# names end in the hex of a nanosecond time, as client-go's recorder names them, so that a
# list (in name order) is in the order they were recorded
_last_stamp = [0]


def _stamp() -> int:
    """A nanosecond time later than the last one given (callers hold the store's lock)."""
    _last_stamp[0] = max(_last_stamp[0] + 1, time.time_ns())
    return _last_stamp[0]


def record_event(
    store: Store,
    kind: Kind,
    obj: dict[str, Any],
    type_: str,
    reason: str,
    message: str,
    component: str,
    host: str | None = None,
    field_path: str | None = None,
) -> None:
    """Record (or bump) an event about ``obj``, an object of ``kind``. Caller holds the lock."""
    meta = obj["metadata"]
    namespace = meta.get("namespace") or "default"
    involved = {
        "kind": kind.kind,
        "namespace": meta.get("namespace", ""),
        "name": meta["name"],
        "uid": meta.get("uid", ""),
        "apiVersion": kind.api_version,
        "resourceVersion": meta.get("resourceVersion", ""),
    }
    if not meta.get("namespace"):
        del involved["namespace"]
    if field_path:
        involved["fieldPath"] = field_path
    now = time.time()
    for event in store.items(EVENTS.resource, namespace):
        seen = event["involvedObject"]
        if (seen.get("uid"), seen.get("name"), event["reason"], event["message"]) == (
            involved["uid"],
            involved["name"],
            reason,
            message,
        ):

            def bump(e: dict[str, Any]) -> None:
                e["count"] = e.get("count", 1) + 1
                e["lastTimestamp"] = k8s_time(now)

            store.mutate(EVENTS.resource, namespace, event["metadata"]["name"], bump)
            return
    source = {"component": component, **({"host": host} if host else {})}
    store.add(
        EVENTS.resource,
        {
            "metadata": {
                "name": f"{meta['name']}.{_stamp():x}",
                "namespace": namespace,
                "uid": new_uid(),
                "creationTimestamp": k8s_time(now),
            },
            "involvedObject": involved,
            "reason": reason,
            "message": message,
            "source": source,
            "firstTimestamp": k8s_time(now),
            "lastTimestamp": k8s_time(now),
            "count": 1,
            "type": type_,
            "eventTime": None,
            "reportingComponent": component,
            "reportingInstance": host or "",
        },
    )
