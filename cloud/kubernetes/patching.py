"""PATCH bodies: JSON merge patch, strategic merge patch and JSON patch.

The sync client sends a dict body as ``application/strategic-merge-patch+json`` and a list as
``application/json-patch+json``; ``_content_type="application/merge-patch+json"`` forces a
merge patch. The strategic merge here knows the merge keys of the lists a Job's pod template
has (containers, env, volumes, volumeMounts, ports, tolerations are replaced) and the
``$patch: replace|delete`` directives; server-side apply is not served (415).
"""

from __future__ import annotations

import copy
from typing import Any

from cloud.kubernetes.api import ApiError, bad_request

MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"

# list field -> the key its items merge on, in a strategic merge patch
MERGE_KEYS = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "volumes": "name",
    "env": "name",
    "volumeMounts": "mountPath",
    "ports": "containerPort",
    "imagePullSecrets": "name",
    "conditions": "type",
    "ownerReferences": "uid",
}


def apply_patch(content_type: str, target: dict[str, Any], patch: Any) -> dict[str, Any]:
    """``target`` patched (a new object); 400 for a patch that does not apply, 415 for a
    content type that is not a patch."""
    kind = content_type.split(";")[0].strip().lower()
    if kind == JSON_PATCH:
        if not isinstance(patch, list):
            raise bad_request("json patch must be a list of operations")
        return json_patch(target, patch)
    if kind not in (MERGE, STRATEGIC):
        raise ApiError(
            415,
            f"the body of the request was in an unknown format - accepted media types include: "
            f"{JSON_PATCH}, {MERGE}, {STRATEGIC}",
        )
    if not isinstance(patch, dict):
        raise bad_request("the patch must be a JSON object")
    if kind == MERGE:
        return merge_patch(target, patch)
    return strategic_merge(target, patch)


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge key by key, ``null`` removes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def strategic_merge(target: Any, patch: Any, field: str = "") -> Any:
    """A strategic merge patch: a merge patch whose lists of keyed items merge item by item."""
    if not isinstance(patch, dict):
        if isinstance(patch, list) and field in MERGE_KEYS and isinstance(target, list):
            return _merge_list(target, patch, MERGE_KEYS[field])
        return copy.deepcopy(patch)
    if patch.get("$patch") == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if key.startswith("$"):  # $setElementOrder and other directives: order is not kept
            continue
        if value is None:
            result.pop(key, None)
        else:
            result[key] = strategic_merge(result.get(key), value, key)
    return result


def _merge_list(target: list[Any], patch: list[Any], merge_key: str) -> list[Any]:
    result = copy.deepcopy(target)
    for item in patch:
        if not isinstance(item, dict) or merge_key not in item:
            result.append(copy.deepcopy(item))
            continue
        at = next(
            (
                i
                for i, old in enumerate(result)
                if isinstance(old, dict) and old.get(merge_key) == item[merge_key]
            ),
            None,
        )
        if item.get("$patch") == "delete":
            if at is not None:
                del result[at]
        elif at is None:
            result.append({k: v for k, v in item.items() if k != "$patch"})
        else:
            result[at] = strategic_merge(result[at], item)
    return result


def json_patch(target: dict[str, Any], operations: list[Any]) -> dict[str, Any]:
    """RFC 6902: add, remove, replace, move, copy and test."""
    doc: Any = copy.deepcopy(target)
    for op in operations:
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise bad_request(f"invalid json patch operation: {op!r}")
        kind, path = op["op"], op["path"]
        if kind == "test":
            if _get(doc, path) != op.get("value"):
                raise ApiError(422, f"testing value {path} failed", "Invalid")
        elif kind == "remove":
            _remove(doc, path)
        elif kind in ("add", "replace"):
            if kind == "replace":
                _get(doc, path)
                _remove(doc, path)
            doc = _add(doc, path, copy.deepcopy(op.get("value")))
        elif kind in ("move", "copy"):
            value = copy.deepcopy(_get(doc, op.get("from", "")))
            if kind == "move":
                _remove(doc, op["from"])
            doc = _add(doc, path, value)
        else:
            raise bad_request(f"unexpected json patch operation {kind!r}")
    return dict(doc)


def _tokens(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise bad_request(f"json patch path {path!r} must start with /")
    return [t.replace("~1", "/").replace("~0", "~") for t in path[1:].split("/")]


def _get(doc: Any, path: str) -> Any:
    for token in _tokens(path):
        try:
            doc = doc[int(token)] if isinstance(doc, list) else doc[token]
        except (KeyError, IndexError, ValueError, TypeError) as exc:
            raise bad_request(f"jsonpatch: path {path!r} does not exist") from exc
    return doc


def _remove(doc: Any, path: str) -> None:
    *parents, last = _tokens(path)
    parent = _get(doc, "".join("/" + p.replace("~", "~0").replace("/", "~1") for p in parents))
    try:
        if isinstance(parent, list):
            del parent[int(last)]
        else:
            del parent[last]
    except (KeyError, IndexError, ValueError, TypeError) as exc:
        raise bad_request(f"jsonpatch: path {path!r} does not exist") from exc


def _add(doc: Any, path: str, value: Any) -> Any:
    tokens = _tokens(path)
    if not tokens:
        return value
    *parents, last = tokens
    parent = _get(doc, "".join("/" + p.replace("~", "~0").replace("/", "~1") for p in parents))
    if isinstance(parent, list):
        parent.insert(len(parent) if last == "-" else int(last), value)
    elif isinstance(parent, dict):
        parent[last] = value
    else:
        raise bad_request(f"jsonpatch: cannot add at {path!r}")
    return doc
