"""The step cache's key: what a step's result depends on, as one sha256.

Its parts are what the job reads and what it runs in: the code bundle's digest (the function
and every module it carries), how the runtime finds the callable, the Python version, every
input (inline values as JSON, a dict's keys in the order the step gets them; artifacts by their
digest, never by URI: an upstream step whose result came from the cache hands the same bytes,
so downstream keys stay equal), the job's environment variables, the shape the result is
returned in, the environment the job runs in (``StepBackend.environment_id``), the backend and
``cache_version``. Not the run, the try or the logical date: a step that names ``ds`` or
``run_id`` as a parameter gets it as an input, so its key changes with it. Not ``resources``:
the same function on another machine type reuses the result (the README says when to set
``cache_version`` instead).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any, NamedTuple

from airflow_stepop.packaging.staging import EncodedStep

KEY_VERSION = 1
# What of an artifact reference its key keeps: the bytes and how they are read back.
_REF_FIELDS = ("sha256", "digest_kind", "materializer", "type_name", "python")


class CacheKey(NamedTuple):
    digest: str  # sha256 hex of the canonical JSON of ``parts``
    parts: dict[str, Any]
    dag_id: str  # whose entries it is among (``entry_uri``); not in the digest


def cache_key(
    encoded: EncodedStep,
    *,
    dag_id: str,
    backend: str,
    environment: str,
    env_vars: Mapping[str, str],
    cache_version: str | None,
) -> CacheKey:
    spec = encoded.spec
    parts = {
        "key_version": KEY_VERSION,
        "backend": backend,
        "environment": environment,
        "code": spec["code"]["sha256"],
        "callable": spec["callable"],
        "python": spec["python"],
        "args": [_keyed(node) for node in spec["args"]],
        "kwargs": [[name, _keyed(node)] for name, node in spec["kwargs"].items()],
        "env": dict(sorted(env_vars.items())),
        "returns": {
            "multiple_outputs": spec["multiple_outputs"],
            "inline_limit_bytes": spec["inline_limit_bytes"],
            "mapped_downstream": spec["mapped_downstream"],
        },
        "cache_version": cache_version,
    }
    return CacheKey(_sha256(parts), parts, dag_id)


def _keyed(node: dict[str, Any]) -> dict[str, Any]:
    """A value node as the key takes it: a reference by its content, not its place."""
    if "ref" in node:
        ref = node["ref"]
        return {"ref": {name: ref[name] for name in _REF_FIELDS if name in ref}}
    if "list" in node:
        return {"list": [_keyed(item) for item in node["list"]], "tuple": node.get("tuple")}
    if "dict" in node:
        return {"dict": [[name, _keyed(item)] for name, item in node["dict"].items()]}
    # as the step gets it: a dict's keys in their order (the key's own JSON sorts its keys)
    return {"inline": json.dumps(node["inline"], separators=(",", ":"), ensure_ascii=False)}


def _sha256(value: Any) -> str:
    """Of canonical JSON: sorted keys, no spaces, so equal values give equal digests."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


def shown_parts(key: CacheKey, limit: int = 60) -> str:
    """The key and its parts as the task log shows them: short digests and values, enough to
    see which part changed between two runs."""
    parts = key.parts
    target = parts["callable"]
    if target.get("kind") == "import":
        callable_name = f"{target.get('module')}.{target.get('qualname')}"
    else:
        callable_name = f"{target.get('qualname')} (pickled)"
    inputs = [f"op_args[{i}]={_shown_node(node, limit)}" for i, node in enumerate(parts["args"])]
    inputs += [f"{name}={_shown_node(node, limit)}" for name, node in parts["kwargs"]]
    fields = [
        f"code={parts['code'][:12]}",
        f"callable={callable_name}",
        f"inputs=[{', '.join(inputs)}]",
        f"environment={parts['environment']}",
        f"env={_sha256(parts['env'])[:12] if parts['env'] else 'none'}",
        f"returns={_sha256(parts['returns'])[:12]}",
        f"python={parts['python']}",
        f"backend={parts['backend']}",
        f"cache_version={parts['cache_version']!r}",
    ]
    return f"{key.digest[:16]} ({'; '.join(fields)})"


def _shown_node(node: dict[str, Any], limit: int) -> str:
    if "ref" in node:
        return f"artifact sha256:{node['ref']['sha256'][:12]}"
    if "inline" in node:
        text = node["inline"]
        return text if len(text) <= limit else f"{text[: limit - 3]}... ({_sha256(node)[:12]})"
    return f"{'list' if 'list' in node else 'dict'} {_sha256(node)[:12]}"


def entry_uri(root: str, dag_id: str, digest: str) -> str:
    """Where a key's entry is kept: ``<root>/cache/<dag_id>/<key>.json``. Per DAG, so a layout
    that gives each DAG's jobs their own prefix keeps one DAG's jobs from another's entries
    (only workers write there)."""
    from airflow_stepop.packaging.staging import _segment
    from airflow_stepop.runtime.storage import join

    return join(root, "cache", _segment(dag_id), f"{digest}.json")
