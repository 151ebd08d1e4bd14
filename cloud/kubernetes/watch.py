"""Watch streams: ``?watch=true`` as kube-apiserver answers it.

One JSON event per line (``{"type": "ADDED|MODIFIED|DELETED|BOOKMARK|ERROR", "object": ...}``)
in a chunked ``application/json;stream=watch`` body:

* without ``resourceVersion`` (or ``"0"``), or with ``sendInitialEvents=true``, first an ADDED
  event for every object that matches, then the changes; with ``sendInitialEvents`` a BOOKMARK
  annotated ``k8s.io/initial-events-end: "true"`` closes the initial ones;
* from a ``resourceVersion``, every change after it; one older than the kept history is an ERROR
  event carrying a 410 ``Expired`` Status ``too old resource version: 5 (90)`` (HTTP 200, as the
  watch cache answers);
* selectors apply to both sides of a change: an object that stops matching is DELETED for this
  watch, one that starts matching ADDED;
* with ``allowWatchBookmarks=true`` a BOOKMARK (``{kind, apiVersion, metadata:
  {resourceVersion}}``) every minute and just before ``timeoutSeconds`` ends the stream.
"""

from __future__ import annotations

import copy
import json
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from cloud.kubernetes.api import Kind, status_body
from cloud.kubernetes.store import Change, Store

BOOKMARK_EVERY = 60.0


def _line(event_type: str, obj: dict[str, Any]) -> bytes:
    return json.dumps({"type": event_type, "object": obj}, separators=(",", ":")).encode() + b"\n"


def _bookmark(kind: Kind, rv: int, initial_end: bool = False) -> bytes:
    meta: dict[str, Any] = {"resourceVersion": str(rv)}
    if initial_end:
        meta["annotations"] = {"k8s.io/initial-events-end": "true"}
    return _line("BOOKMARK", {"kind": kind.kind, "apiVersion": kind.api_version, "metadata": meta})


def _translate(
    change: Change, matches: Callable[[dict[str, Any]], bool]
) -> tuple[str, dict[str, Any]] | None:
    """The event this watch sees for ``change``, if any (selectors on both sides)."""
    now = matches(change.obj)
    if change.type == "MODIFIED":
        before = change.old is not None and matches(change.old)
        if before and now:
            return "MODIFIED", change.obj
        if now:
            return "ADDED", change.obj
        return ("DELETED", change.obj) if before else None
    return (change.type, change.obj) if now else None


def watch_stream(
    store: Store,
    kind: Kind,
    namespace: str | None,
    matches: Callable[[dict[str, Any]], bool],
    rv: str | None,
    timeout: float,
    bookmarks: bool,
    initial: bool,
    stopping: threading.Event,
) -> Iterator[bytes]:
    """The lines of one watch, until ``timeout`` seconds pass or the fake stops."""
    deadline = time.monotonic() + timeout
    with store.lock:
        start = _start_version(store, rv)
        if start is None:
            expired = status_body(
                410, "Expired", f"too old resource version: {rv} ({store.oldest})"
            )
            yield _line("ERROR", expired)
            return
        cursor = start
        first: list[bytes] = []
        if rv in (None, "", "0") or initial:
            first = [
                _line("ADDED", kind.typed(copy.deepcopy(obj)))
                for obj in store.items(kind.resource, namespace)
                if matches(obj)
            ]
            cursor = store.rv
            if initial and bookmarks:
                first.append(_bookmark(kind, cursor, initial_end=True))
    yield b"".join(first)
    next_bookmark = time.monotonic() + BOOKMARK_EVERY
    while not stopping.is_set():
        with store.lock:
            changes = store.since(cursor)
            if not changes:
                left = deadline - time.monotonic()
                if left > 0:
                    store.changed.wait(min(1.0, left))
                    changes = store.since(cursor)
            if changes:
                cursor = changes[-1].rv
            current = store.rv
        lines = []
        for change in changes:
            if change.resource != kind.resource or namespace not in (
                None,
                change.obj["metadata"].get("namespace"),
            ):
                continue
            seen = _translate(change, matches)
            if seen is not None:
                lines.append(_line(seen[0], kind.typed(seen[1])))
        now = time.monotonic()
        if bookmarks and (now >= next_bookmark or now >= deadline):
            lines.append(_bookmark(kind, current))
            next_bookmark = now + BOOKMARK_EVERY
        yield b"".join(lines)
        if now >= deadline:
            return


def _start_version(store: Store, rv: str | None) -> int | None:
    """The resourceVersion a watch replays from; None when it is older than the history."""
    if rv in (None, "", "0"):
        return store.rv
    wanted = int(rv)
    if wanted < store.oldest - 1:
        return None
    return min(wanted, store.rv)
