"""The object store: every object as JSON, one resourceVersion counter, the change history.

Like etcd behind kube-apiserver, each change bumps one cluster-wide counter and stamps the
changed object's ``metadata.resourceVersion`` with it, so versions only ever grow. The history
of changes is what a watch replays from a ``resourceVersion``; :meth:`Store.compact` forgets it
(a watch from before then gets 410 Expired, as after an etcd compaction).

An object whose ``metadata.deletionTimestamp`` is set goes away when its last finalizer does
and no grace period is left (a pod deleted gracefully keeps ``deletionGracePeriodSeconds``
until its kubelet has stopped its container and sets it to 0): :meth:`Store.put` removes it
instead of storing it.

All methods expect the caller to hold :attr:`Store.lock`; :attr:`Store.changed` is notified on
every change (watches and the controllers wait on it).
"""

from __future__ import annotations

import copy
import threading
from dataclasses import dataclass
from typing import Any

# How many changes a watch can replay; older resourceVersions answer 410 Expired.
HISTORY = 10_000

Key = tuple[str, str]  # (namespace or "", name)


@dataclass(frozen=True)
class Change:
    """One change: ADDED, MODIFIED or DELETED, the object after it and, if modified, before."""

    rv: int
    type: str
    resource: str
    obj: dict[str, Any]
    old: dict[str, Any] | None


def key_of(obj: dict[str, Any]) -> Key:
    meta = obj["metadata"]
    return meta.get("namespace", ""), meta["name"]


class Store:
    """Objects by resource and key, with their change history."""

    def __init__(self, lock: threading.RLock) -> None:
        self.lock = lock
        self.changed = threading.Condition(lock)
        self.rv = 0
        self.objects: dict[str, dict[Key, dict[str, Any]]] = {}
        self.history: list[Change] = []
        self.oldest = 1  # a watch may start from resourceVersion oldest - 1 or later

    # --- reads --------------------------------------------------------------------------
    def get(self, resource: str, namespace: str, name: str) -> dict[str, Any] | None:
        """The stored object itself (copy it before changing or answering it)."""
        return self.objects.get(resource, {}).get((namespace, name))

    def items(self, resource: str, namespace: str | None = None) -> list[dict[str, Any]]:
        """Stored objects in key order (etcd's), of one namespace or all."""
        table = self.objects.get(resource, {})
        keys = sorted(k for k in table if namespace is None or k[0] == namespace)
        return [table[k] for k in keys]

    def since(self, rv: int) -> list[Change]:
        """The changes after resourceVersion ``rv`` (it must be >= oldest - 1)."""
        start = max(0, rv + 1 - self.oldest)
        return self.history[start:]

    # --- writes -------------------------------------------------------------------------
    def add(self, resource: str, obj: dict[str, Any]) -> dict[str, Any]:
        """Store a new object; returns it as stored."""
        self._stamp(obj)
        self.objects.setdefault(resource, {})[key_of(obj)] = obj
        self._record("ADDED", resource, obj, None)
        return obj

    def put(self, resource: str, obj: dict[str, Any]) -> dict[str, Any] | None:
        """Replace an object with ``obj`` (a changed copy); nothing happens when nothing
        changed. A deleted object with neither finalizers nor grace left is removed instead.
        Returns what is stored now (None once removed)."""
        table = self.objects.setdefault(resource, {})
        key = key_of(obj)
        old = table.get(key)
        meta = obj["metadata"]
        if (
            meta.get("deletionTimestamp")
            and not meta.get("finalizers")
            and not meta.get("deletionGracePeriodSeconds")
        ):
            if old is not None:
                self.remove(resource, *key)
            return None
        if old is not None and old == obj:
            return old
        self._stamp(obj)
        table[key] = obj
        self._record("MODIFIED" if old is not None else "ADDED", resource, obj, old)
        return obj

    def mutate(
        self, resource: str, namespace: str, name: str, change: Any
    ) -> dict[str, Any] | None:
        """Apply ``change(copy)`` to a copy of the object and :meth:`put` it; None if absent."""
        current = self.get(resource, namespace, name)
        if current is None:
            return None
        updated = copy.deepcopy(current)
        change(updated)
        return self.put(resource, updated)

    def remove(self, resource: str, namespace: str, name: str) -> dict[str, Any] | None:
        """Delete an object now; returns its last state."""
        obj = self.objects.get(resource, {}).pop((namespace, name), None)
        if obj is None:
            return None
        obj = copy.deepcopy(obj)
        self._stamp(obj)
        self._record("DELETED", resource, obj, None)
        return obj

    def compact(self) -> int:
        """Forget the history: watches from an older resourceVersion get 410. Returns the
        current resourceVersion."""
        self.history = []
        self.oldest = self.rv + 1
        return self.rv

    def clear(self) -> None:
        """Forget every object (the history stays, so running watches end cleanly)."""
        for resource, table in self.objects.items():
            for key in list(table):
                self.remove(resource, *key)

    def _stamp(self, obj: dict[str, Any]) -> None:
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)

    def _record(
        self, kind: str, resource: str, obj: dict[str, Any], old: dict[str, Any] | None
    ) -> None:
        self.history.append(Change(self.rv, kind, resource, copy.deepcopy(obj), old))
        if len(self.history) > HISTORY:
            drop = len(self.history) - HISTORY // 2
            self.history = self.history[drop:]
            self.oldest += drop
        self.changed.notify_all()
