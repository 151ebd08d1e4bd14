"""Deleting objects, and the garbage collector of ``ownerReferences``.

DELETE takes ``propagationPolicy`` from the query or a ``DeleteOptions`` body (or the old
``orphanDependents``); without one a Job's dependents are orphaned, the API's default for Jobs:

* ``Foreground``: the owner stays, with ``deletionTimestamp`` and the finalizer
  ``foregroundDeletion``, until its dependents are gone (a pod: once its container stopped and
  the job controller counted it); the answer is the object;
* ``Background``: the owner goes now (the answer is a ``Status`` Success) and the collector
  deletes the dependents after;
* ``Orphan``: the owner goes (briefly with the ``orphan`` finalizer) and its dependents lose
  their ``ownerReferences`` to it.

A pod on a node is deleted gracefully: ``deletionTimestamp`` and ``deletionGracePeriodSeconds``
are set, the kubelet stops the container (SIGTERM, the grace period, SIGKILL) and the pod goes
once that is done and its finalizers are gone (``gracePeriodSeconds=0``: at once, the
container stopped after). Any object whose owners are all gone is collected (Secrets and
Services owned by a Job go with it).
"""

from __future__ import annotations

import copy
import time
from typing import Any

from cloud.fake_http import Request
from cloud.kubernetes.api import (
    EVENTS,
    PODS,
    ApiError,
    Kind,
    bad_request,
    k8s_time,
    success_status,
)
from cloud.kubernetes.podspec import is_terminal
from cloud.kubernetes.state import KubernetesState

FOREGROUND = "foregroundDeletion"
ORPHAN = "orphan"
POLICIES = ("Foreground", "Background", "Orphan")


def delete_options(req: Request, default_policy: str) -> tuple[str, int | None, dict[str, Any]]:
    """(propagationPolicy, gracePeriodSeconds, preconditions) of a DELETE request."""
    try:
        body = req.json() or {}
    except ValueError:
        raise bad_request("the body of the request was not a DeleteOptions object") from None
    if not isinstance(body, dict):
        raise bad_request("the body of the request was not a DeleteOptions object")
    policy = req.arg("propagationPolicy") or body.get("propagationPolicy")
    orphan = req.arg("orphanDependents")
    if orphan is None and body.get("orphanDependents") is not None:
        orphan = str(body["orphanDependents"]).lower()
    if policy and orphan is not None:
        raise ApiError(
            422, "orphanDependents and deletionPropagation cannot be both set", "Invalid"
        )
    if policy is None and orphan is not None:
        policy = "Orphan" if orphan.lower() == "true" else "Background"
    policy = policy or default_policy
    if policy not in POLICIES:
        raise ApiError(
            422,
            f'propagationPolicy: Unsupported value: "{policy}": supported values: '
            '"Foreground", "Background", "Orphan"',
            "Invalid",
        )
    grace = req.arg("gracePeriodSeconds")
    if grace is None and body.get("gracePeriodSeconds") is not None:
        grace = str(body["gracePeriodSeconds"])
    try:
        seconds = None if grace is None else int(grace)
    except ValueError:
        raise bad_request(f"gracePeriodSeconds: invalid value {grace!r}") from None
    return policy, seconds, body.get("preconditions") or {}


def check_preconditions(kind: Kind, obj: dict[str, Any], preconditions: dict[str, Any]) -> None:
    """409 Conflict when the object is not the one (uid) or version the caller meant."""
    meta = obj["metadata"]
    for field in ("uid", "resourceVersion"):
        wanted = preconditions.get(field)
        if wanted is not None and str(wanted) != str(meta.get(field)):
            raise ApiError(
                409,
                f'Operation cannot be fulfilled on {kind.qualified} "{meta["name"]}": '
                f"Precondition failed: {field.capitalize() if field == 'uid' else field}: "
                f"{wanted}, {field.capitalize() if field == 'uid' else field}: {meta.get(field)}",
                "Conflict",
                {"name": meta["name"], "group": kind.group, "kind": kind.resource},
            )


class Deletion(KubernetesState):
    """DELETE with propagation, graceful pod deletion and the garbage collector."""

    def delete_object(self, kind: Kind, obj: dict[str, Any], policy: str) -> dict[str, Any]:
        """Delete ``obj`` (caller holds the lock); the answer: the object while it stays, a
        Status once it is gone."""
        meta = obj["metadata"]
        namespace, name = meta.get("namespace", ""), meta["name"]
        if kind == PODS:
            return self.delete_pod(obj, None)
        if meta.get("deletionTimestamp"):
            return kind.typed(copy.deepcopy(obj))
        finalizer = {"Foreground": FOREGROUND, "Orphan": ORPHAN}.get(policy)
        if finalizer is None and not meta.get("finalizers"):
            self.store.remove(kind.resource, namespace, name)
            return success_status(kind, name, meta["uid"])

        def mark(o: dict[str, Any]) -> None:  # another finalizer, if any, holds it too
            o["metadata"]["deletionTimestamp"] = k8s_time()
            o["metadata"]["deletionGracePeriodSeconds"] = 0
            if finalizer is not None:
                o["metadata"]["finalizers"] = [*(o["metadata"].get("finalizers") or []), finalizer]

        stored = self.store.mutate(kind.resource, namespace, name, mark)
        if stored is None:
            return success_status(kind, name, meta["uid"])
        return kind.typed(copy.deepcopy(stored))

    def delete_pod(self, pod: dict[str, Any], grace: int | None) -> dict[str, Any]:
        """Delete a pod gracefully (caller holds the lock); the pod as it is now."""
        meta = pod["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        if meta.get("deletionTimestamp"):
            return PODS.typed(copy.deepcopy(pod))
        running = bool(pod["spec"].get("nodeName")) and not is_terminal(pod)
        seconds = pod["spec"].get("terminationGracePeriodSeconds", 30) if grace is None else grace
        if not running:
            seconds = 0

        def mark(o: dict[str, Any]) -> None:
            o["metadata"]["deletionTimestamp"] = k8s_time(time.time() + seconds)
            o["metadata"]["deletionGracePeriodSeconds"] = seconds

        last = copy.deepcopy(pod)
        mark(last)
        stored = self.store.mutate(PODS.resource, namespace, name, mark)
        self.store.changed.notify_all()
        return PODS.typed(copy.deepcopy(stored if stored is not None else last))

    def collect_garbage(self) -> None:
        """One pass of the collector (caller holds the lock): foreground and orphan
        finalizers, then the dependents whose owners are all gone."""
        owners: dict[str, list[tuple[str, dict[str, Any]]]] = {}
        alive: set[str] = set()
        for resource, table in self.store.objects.items():
            if resource == EVENTS.resource:
                continue
            for obj in table.values():
                alive.add(obj["metadata"]["uid"])
                for ref in obj["metadata"].get("ownerReferences") or []:
                    owners.setdefault(ref.get("uid"), []).append((resource, obj))
        for resource, table in list(self.store.objects.items()):
            for obj in list(table.values()):
                meta = obj["metadata"]
                finalizers = meta.get("finalizers") or []
                if not meta.get("deletionTimestamp"):
                    continue
                dependents = owners.get(meta["uid"], [])
                if ORPHAN in finalizers:
                    for dep_resource, dep in dependents:
                        self._drop_owner(dep_resource, dep, meta["uid"])
                    self._drop_finalizer(resource, obj, ORPHAN)
                elif FOREGROUND in finalizers:
                    for dep_resource, dep in dependents:
                        self._delete_dependent(dep_resource, dep)
                    if not dependents:
                        self._drop_finalizer(resource, obj, FOREGROUND)
        for uid, dependents in owners.items():
            if uid in alive:
                continue
            for dep_resource, dep in dependents:
                refs = dep["metadata"].get("ownerReferences") or []
                if all(ref.get("uid") not in alive for ref in refs):
                    self._delete_dependent(dep_resource, dep)

    def _delete_dependent(self, resource: str, obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        if meta.get("deletionTimestamp"):
            return
        current = self.store.get(resource, meta.get("namespace", ""), meta["name"])
        if current is None:
            return
        if resource == PODS.resource:
            self.delete_pod(current, None)
        elif current["metadata"].get("finalizers"):
            self.store.mutate(
                resource,
                meta.get("namespace", ""),
                meta["name"],
                lambda o: o["metadata"].update(deletionTimestamp=k8s_time()),
            )
        else:
            self.store.remove(resource, meta.get("namespace", ""), meta["name"])

    def _drop_owner(self, resource: str, obj: dict[str, Any], owner: str) -> None:
        def drop(o: dict[str, Any]) -> None:
            refs = [r for r in o["metadata"].get("ownerReferences") or [] if r.get("uid") != owner]
            if refs:
                o["metadata"]["ownerReferences"] = refs
            else:
                o["metadata"].pop("ownerReferences", None)

        meta = obj["metadata"]
        self.store.mutate(resource, meta.get("namespace", ""), meta["name"], drop)

    def _drop_finalizer(self, resource: str, obj: dict[str, Any], finalizer: str) -> None:
        def drop(o: dict[str, Any]) -> None:
            left = [f for f in o["metadata"].get("finalizers") or [] if f != finalizer]
            if left:
                o["metadata"]["finalizers"] = left
            else:
                o["metadata"].pop("finalizers", None)

        meta = obj["metadata"]
        self.store.mutate(resource, meta.get("namespace", ""), meta["name"], drop)
