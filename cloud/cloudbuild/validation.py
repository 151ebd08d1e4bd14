"""What the Cloud Build fake refuses at CreateBuild (400 INVALID_ARGUMENT, ``invalid build:
...``), and the substitutions it applies to what it accepts.

Refused: no steps; a step without ``name``; a step with both ``script`` and ``args`` or
``entrypoint``; duplicate step ids and ``waitFor`` naming no earlier step; a ``logsBucket``
that is not ``gs://<bucket>[/<prefix>]``; an ``options.logging`` the service does not know; a
``timeout`` outside (0, 24h]; tags not matching ``^[\\w][\\w.-]{0,127}$``; substitution keys
not matching ``^_[A-Z0-9_]+$``; and, unless ``options.substitutionOption`` is ALLOW_LOOSE, a
``$VAR`` that is neither built in nor given, or a given ``_VAR`` no template uses.
"""

from __future__ import annotations

import re
from typing import Any

from cloud.cloudbuild.api import invalid

MAX_TIMEOUT = 24 * 3600.0
LOGGING = ("LOGGING_UNSPECIFIED", "LEGACY", "GCS_ONLY", "STACKDRIVER_ONLY",
           "CLOUD_LOGGING_ONLY", "NONE")  # fmt: skip
_BUCKET = re.compile(r"^gs://([a-z0-9][a-z0-9._-]{1,61}[a-z0-9])(/.*)?$")
_TAG = re.compile(r"^[\w][\w.-]{0,127}$")
_USER_KEY = re.compile(r"^_[A-Z0-9_]+$")
# $$ (an escaped dollar), ${NAME} or $NAME
_TEMPLATE = re.compile(r"\$\$|\$\{([A-Za-z0-9_]+)\}|\$([A-Za-z_][A-Za-z0-9_]*)")
BUILT_IN = ("PROJECT_ID", "PROJECT_NUMBER", "BUILD_ID", "LOCATION", "SERVICE_ACCOUNT_EMAIL",
            "SERVICE_ACCOUNT")  # fmt: skip


def seconds(duration: str) -> float:
    """``"3.5s"`` -> 3.5 (the JSON mapping of a Duration, already checked by the parser)."""
    return float(duration.rstrip("s"))


def logs_bucket(value: str) -> tuple[str, str]:
    """``gs://bucket/prefix`` -> (bucket, prefix without slashes at either end)."""
    m = _BUCKET.match(value)
    if m is None:
        raise invalid(
            f'invalid logs bucket "{value}": must be gs://<bucket>[/<path>] with a valid bucket '
            "name"
        )
    return m.group(1), (m.group(2) or "").strip("/")


def check_build(build: dict[str, Any]) -> None:
    """Everything CreateBuild refuses in ``build`` (its JSON mapping)."""
    steps = build.get("steps") or []
    if not steps:
        raise invalid("a build must have at least one step")
    ids: set[str] = set()
    for i, step in enumerate(steps):
        if not step.get("name"):
            raise invalid(f"build step {i} must specify name")
        if step.get("script") and (step.get("args") or step.get("entrypoint")):
            raise invalid(f"build step {i}: script cannot be used with args or entrypoint")
        for dep in step.get("waitFor", []):
            if dep != "-" and dep not in ids:
                raise invalid(f'build step {i} depends on "{dep}", which is not an earlier step')
        if step.get("id"):
            if step["id"] in ids:
                raise invalid(f'duplicate build step id "{step["id"]}"')
            ids.add(step["id"])
        if "timeout" in step and not 0 < seconds(step["timeout"]) <= MAX_TIMEOUT:
            raise invalid(f"build step {i} timeout {step['timeout']} is not within (0s, 24h]")
    if "logsBucket" in build:
        logs_bucket(build["logsBucket"])
    logging = (build.get("options") or {}).get("logging", "LOGGING_UNSPECIFIED")
    if logging not in LOGGING:
        raise invalid(f"unknown logging mode {logging!r}: use one of {', '.join(LOGGING)}")
    if "timeout" in build and not 0 < seconds(build["timeout"]) <= MAX_TIMEOUT:
        raise invalid(f"timeout {build['timeout']} is not within (0s, 24h]")
    for tag in build.get("tags", []):
        if not _TAG.match(tag):
            raise invalid(f'invalid build tag "{tag}": must match format "{_TAG.pattern}"')
    for key in build.get("substitutions", {}):
        if not _USER_KEY.match(key):
            raise invalid(
                f'invalid substitution key "{key}": user-defined keys must match '
                f'"{_USER_KEY.pattern}"'
            )


def templates(build: dict[str, Any]) -> list[str]:
    """Every string substitutions apply to: steps (name, args, env, dir, entrypoint, script)
    and images."""
    out: list[str] = list(build.get("images", []))
    for step in build.get("steps", []):
        out += [step.get("name", ""), step.get("dir", ""), step.get("entrypoint", "")]
        out += [step.get("script", ""), *step.get("args", []), *step.get("env", [])]
    return out


def substitute(build: dict[str, Any], values: dict[str, str]) -> dict[str, Any]:
    """``build`` with ``$VAR``/``${VAR}`` replaced (``values``: built-ins and user keys)."""
    loose = (build.get("options") or {}).get("substitutionOption") == "ALLOW_LOOSE"
    used: set[str] = set()
    for text in templates(build):
        for m in _TEMPLATE.finditer(text):
            key = m.group(1) or m.group(2)
            if key is None:
                continue
            used.add(key)
            if key not in values and not loose:
                if key.startswith("_"):
                    raise invalid(
                        f'key in the template "{key}" is not matched in the substitution list'
                    )
                raise invalid(f'key in the template "{key}" is not a valid built-in substitution')
    if not loose:
        for key in build.get("substitutions", {}):
            if key not in used:
                raise invalid(
                    f'key "{key}" in the substitution data is not matched in the template'
                )

    def apply(text: str) -> str:
        def one(m: re.Match[str]) -> str:
            key = m.group(1) or m.group(2)
            return "$" if key is None else values.get(key, "")

        return _TEMPLATE.sub(one, text)

    out = dict(build)
    out["images"] = [apply(i) for i in build.get("images", [])]
    steps = []
    for step in build.get("steps", []):
        step = dict(step)
        for key in ("name", "dir", "entrypoint", "script"):
            if key in step:
                step[key] = apply(step[key])
        for key in ("args", "env"):
            if key in step:
                step[key] = [apply(a) for a in step[key]]
        steps.append(step)
    out["steps"] = steps
    return out
