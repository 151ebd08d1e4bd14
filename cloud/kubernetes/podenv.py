"""What a pod's container runs with: its environment, its volumes, and the runner's launch.

Environment, in the kubelet's order: ``envFrom`` (Secrets), then ``env``: ``value`` with
``$(VAR)`` references to the variables before it expanded (``$$(`` escapes), ``valueFrom``
``fieldRef`` (``metadata.name``, ``.namespace``, ``.uid``, ``.labels['k']``,
``.annotations['k']``, ``spec.nodeName``, ``spec.serviceAccountName``, ``status.podIP``,
``status.hostIP``), ``secretKeyRef`` and ``resourceFieldRef``; plus ``HOSTNAME``. A missing
Secret or key (not ``optional``) keeps the container waiting with ``CreateContainerConfigError``.

Volumes: ``secret`` (files from the Secret's keys, or ``items``, with ``defaultMode``/``mode``;
a missing Secret keeps the pod ``ContainerCreating`` with a ``FailedMount`` event until it
exists), ``emptyDir`` (a directory of the pod's), ``hostPath`` (that directory of this machine;
``DirectoryOrCreate`` makes it) and ``persistentVolumeClaim`` (a directory per namespace and
claim under the fake's data directory, kept across pods; claims are not API objects here).
Other volume types are refused with a ``FailedMount`` that says so. ``subPath`` and
``readOnly`` mounts are honoured (read-only only in a container).

The DNS names of a Job's pods (``<job>-<i>.<subdomain>[.<ns>[.svc[.cluster.local]]]``) resolve
to this machine: in a container through its hosts file, in a process by rewriting an env value
that is exactly such a name to ``127.0.0.1`` (a process has no resolver of its own).
"""

from __future__ import annotations

import base64
import os
import re
from collections.abc import Callable
from fractions import Fraction
from math import ceil
from pathlib import Path
from typing import Any

from cloud.kubernetes.quantities import parse_quantity
from cloud.runner import Mount

SecretLookup = Callable[[str], dict[str, Any] | None]  # name -> the Secret in the pod's namespace
_REF = re.compile(r"\$\$|\$\(([-._a-zA-Z][-._a-zA-Z0-9]*)\)")
_KEYED = re.compile(r"^metadata\.(labels|annotations)\['(.+)'\]$")


class NotReady(Exception):
    """The container cannot be created yet: it waits with ``reason``; ``event`` is what the
    kubelet records about it (reason, message)."""

    def __init__(self, reason: str, message: str, event: tuple[str, str]) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.event = event


def expand(text: str, env: dict[str, str]) -> str:
    """``$(VAR)`` replaced by its value when defined (else kept), ``$$`` by ``$``."""

    def one(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        return env.get(m.group(1), m.group(0))

    return _REF.sub(one, text)


def field_value(pod: dict[str, Any], path: str) -> str:
    """The downward API value of ``fieldPath`` for ``pod``."""
    meta, spec, status = pod["metadata"], pod["spec"], pod.get("status") or {}
    simple = {
        "metadata.name": meta.get("name"),
        "metadata.namespace": meta.get("namespace"),
        "metadata.uid": meta.get("uid"),
        "spec.nodeName": spec.get("nodeName"),
        "spec.serviceAccountName": spec.get("serviceAccountName"),
        "status.podIP": status.get("podIP"),
        "status.hostIP": status.get("hostIP"),
        "status.podIPs": status.get("podIP"),
        "status.hostIPs": status.get("hostIP"),
    }
    if path in simple:
        return str(simple[path] or "")
    m = _KEYED.match(path)
    if m:
        return str((meta.get(m.group(1)) or {}).get(m.group(2), ""))
    return ""


def _resource_value(container: dict[str, Any], ref: dict[str, Any]) -> str:
    resources = container.get("resources") or {}
    part, _, name = str(ref.get("resource", "")).partition(".")
    amounts = resources.get(part) or {}
    if part == "requests":
        amounts = {**(resources.get("limits") or {}), **amounts}
    amount = parse_quantity(amounts.get(name, 0))
    divisor = parse_quantity(ref.get("divisor") or 1)
    return str(ceil(Fraction(amount) / divisor))


def _secret_value(namespace: str, ref: dict[str, Any], secrets: SecretLookup) -> str | None:
    secret = secrets(ref.get("name", ""))
    optional = bool(ref.get("optional"))
    if secret is None:
        if optional:
            return None
        why = f'secret "{ref.get("name")}" not found'
        raise NotReady("CreateContainerConfigError", why, ("Failed", f"Error: {why}"))
    data = secret.get("data") or {}
    if ref.get("key") not in data:
        if optional:
            return None
        why = f"couldn't find key {ref.get('key')} in Secret {namespace}/{ref.get('name')}"
        raise NotReady("CreateContainerConfigError", why, ("Failed", f"Error: {why}"))
    return base64.b64decode(data[ref["key"]]).decode("utf-8", "replace")


def container_env(
    pod: dict[str, Any], container: dict[str, Any], secrets: SecretLookup
) -> dict[str, str]:
    """The container's environment; :class:`NotReady` while a Secret it needs is missing."""
    namespace = pod["metadata"]["namespace"]
    env: dict[str, str] = {}
    for source in container.get("envFrom") or []:
        ref = source.get("secretRef")
        if ref is None:
            why = "the kubernetes fake serves no ConfigMaps"
            raise NotReady("CreateContainerConfigError", why, ("Failed", f"Error: {why}"))
        secret = secrets(ref.get("name", ""))
        if secret is None:
            if ref.get("optional"):
                continue
            why = f'secret "{ref.get("name")}" not found'
            raise NotReady("CreateContainerConfigError", why, ("Failed", f"Error: {why}"))
        for key, value in (secret.get("data") or {}).items():
            env[source.get("prefix", "") + key] = base64.b64decode(value).decode("utf-8", "replace")
    for var in container.get("env") or []:
        source = var.get("valueFrom")
        if source is None:
            env[var["name"]] = expand(str(var.get("value") or ""), env)
        elif "fieldRef" in source:
            env[var["name"]] = field_value(pod, source["fieldRef"].get("fieldPath", ""))
        elif "secretKeyRef" in source:
            value = _secret_value(namespace, source["secretKeyRef"], secrets)
            if value is not None:
                env[var["name"]] = value
        elif "resourceFieldRef" in source:
            env[var["name"]] = _resource_value(container, source["resourceFieldRef"])
        else:
            why = "the kubernetes fake serves no ConfigMaps"
            raise NotReady("CreateContainerConfigError", why, ("Failed", f"Error: {why}"))
    env.setdefault("HOSTNAME", pod["spec"].get("hostname") or pod["metadata"]["name"])
    return env


def _mount_failure(volume: str, why: str) -> NotReady:
    message = f'MountVolume.SetUp failed for volume "{volume}" : {why}'
    return NotReady("ContainerCreating", message, ("FailedMount", message))


def prepare_volumes(
    pod: dict[str, Any], pod_dir: Path, data_dir: Path, secrets: SecretLookup
) -> dict[str, str]:
    """Volume name -> the host directory that backs it, secret files written;
    :class:`NotReady` (FailedMount) while one cannot be set up."""
    namespace = pod["metadata"]["namespace"]
    dirs: dict[str, str] = {}
    for volume in pod["spec"].get("volumes") or []:
        name = volume["name"]
        if "secret" in volume:
            dirs[name] = _secret_volume(volume, pod_dir / "volumes" / name, secrets)
        elif "emptyDir" in volume:
            dirs[name] = str(pod_dir / "volumes" / name)
            os.makedirs(dirs[name], exist_ok=True)
        elif "hostPath" in volume:
            path = volume["hostPath"].get("path", "")
            if volume["hostPath"].get("type") == "DirectoryOrCreate":
                os.makedirs(path, exist_ok=True)
            if not os.path.isdir(path):
                raise _mount_failure(name, f"hostPath type check failed: {path} is not a directory")
            dirs[name] = path
        elif "persistentVolumeClaim" in volume:
            claim = volume["persistentVolumeClaim"].get("claimName", "")
            dirs[name] = str(data_dir / "pvc" / namespace / claim)
            os.makedirs(dirs[name], exist_ok=True)
        else:
            kind = next((k for k in volume if k != "name"), "unknown")
            raise _mount_failure(name, f"the kubernetes fake does not serve {kind} volumes")
    return dirs


def _secret_volume(volume: dict[str, Any], target: Path, secrets: SecretLookup) -> str:
    source = volume["secret"]
    secret = secrets(source.get("secretName", ""))
    if secret is None:
        if source.get("optional"):
            secret = {"data": {}}
        else:
            raise _mount_failure(volume["name"], f'secret "{source.get("secretName")}" not found')
    data = secret.get("data") or {}
    items = source.get("items") or [{"key": key, "path": key} for key in data]
    default_mode = int(source.get("defaultMode", 0o644))
    for item in items:
        if item.get("key") not in data:
            raise _mount_failure(
                volume["name"],
                f"couldn't find key {item.get('key')} in Secret {source.get('secretName')}",
            )
        path = target / item.get("path", item["key"])
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data[item["key"]]))
        os.chmod(path, int(item.get("mode", default_mode)))
    target.mkdir(parents=True, exist_ok=True)
    return str(target)


def container_mounts(container: dict[str, Any], dirs: dict[str, str]) -> list[Mount]:
    """The runner's mounts for the container's ``volumeMounts``."""
    mounts = []
    for mount in container.get("volumeMounts") or []:
        host = dirs[mount["name"]]
        if mount.get("subPath"):
            host = os.path.join(host, mount["subPath"])
            os.makedirs(host, exist_ok=True)
        mounts.append(Mount(host, mount["mountPath"], read_only=bool(mount.get("readOnly"))))
    return mounts


def peer_names(pod: dict[str, Any], hostnames: list[str]) -> list[str]:
    """The DNS names of the pods ``hostnames`` under this pod's ``subdomain``."""
    subdomain = pod["spec"].get("subdomain")
    if not subdomain:
        return []
    namespace = pod["metadata"]["namespace"]
    suffixes = ("", f".{namespace}", f".{namespace}.svc", f".{namespace}.svc.cluster.local")
    return [f"{host}.{subdomain}{suffix}" for host in hostnames for suffix in suffixes]


def local_peers(env: dict[str, str], names: list[str]) -> dict[str, str]:
    """``env`` with each value that is one of ``names`` replaced by ``127.0.0.1``."""
    wanted = set(names)
    return {key: "127.0.0.1" if value in wanted else value for key, value in env.items()}
