"""SettingsError and the rules of the values settings and operator arguments take: sizes, job
environments, image references, the names of a machine count.

Apart from the settings classes (``settings.py``): every step's parse checks its arguments
with these, and few DAGs build a ResourceSettings or a DockerSettings, whose generated
dataclass methods cost each parse about a millisecond.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

_MEMORY_UNITS = {
    "": 1,
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "ki": 2**10,
    "kib": 2**10,
    "mi": 2**20,
    "mib": 2**20,
    "gi": 2**30,
    "gib": 2**30,
    "ti": 2**40,
    "tib": 2**40,
}
# "8G" means 8 GiB to docker and 8 * 10**9 bytes to Kubernetes: refused rather than guessed.
_AMBIGUOUS_UNITS = {"k", "m", "g", "t"}
_MEMORY_RE = r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*"


class SettingsError(ValueError):
    """A setting with a wrong value; the message names the field, the value and the fix."""

    __module__ = "airflow_stepop.settings"  # where users import it from, shown in tracebacks


def parse_memory(value: int | str, field_name: str = "memory") -> int:
    """Bytes from an int or a string such as "8GB", "8GiB", "512MiB" or "8Gi"."""
    if isinstance(value, bool):
        raise SettingsError(
            f"{field_name}={value!r} is not a size; use e.g. 16 * 2**30 or '16GiB'."
        )
    if isinstance(value, int):
        if value <= 0:
            raise SettingsError(f"{field_name}={value!r} must be a positive number of bytes.")
        _refuse_tiny(field_name, value, value)
        return value
    if isinstance(value, str):
        match = re.fullmatch(_MEMORY_RE, value)
        unit = match.group(2).lower() if match else None
        if match and unit in _AMBIGUOUS_UNITS:
            number, letter = match.group(1), match.group(2)
            raise SettingsError(
                f"{field_name}={value!r} is ambiguous ('{letter}' means powers of 1024 to docker "
                f"and of 1000 to Kubernetes). Write '{number}{letter.upper()}B' (powers of 1000) "
                f"or '{number}{letter.upper()}iB' (powers of 1024)."
            )
        if match and unit in _MEMORY_UNITS:
            amount = float(match.group(1)) * _MEMORY_UNITS[unit]
            if amount >= 1:
                _refuse_tiny(field_name, value, int(amount))
                return int(amount)
    raise SettingsError(
        f"{field_name}={value!r} is not a size. Use an int of bytes or a string like '8GB' "
        "(powers of 1000), '8GiB' / '8Gi' (powers of 1024) or '512MiB'."
    )


# Set for every job by the step's entry script (where its inputs, code and result go, its time
# limit), by the distribution setup (which rank writes the result) or by every backend for the
# log relay (PYTHONUNBUFFERED: lines reach the task log as they are printed): a user's value would
# be lost or make the step read or write the wrong place, so these are refused, not replaced.
# One has the same value in every job: giving that value (a common line of images) is harmless.
FIXED_ENV = {"PYTHONUNBUFFERED": "1"}
RESERVED_ENV = frozenset({
    "STEPOP_PATH_MAP", "STEPOP_SPEC_URI", "STEPOP_CODE_PATH", "STEPOP_OUTPUT_URI",
    "STEPOP_MAX_RUNTIME_S", "STEPOP_CHECKPOINT_DIR",
    "STEPOP_BOOTSTRAP", "STEPOP_SPEC_SHA256", "STEPOP_TRY_ID",  # the job's checks (bootstrap.py)
    "RANK", "LOCAL_RANK", "NODE_RANK", "WORLD_SIZE", "MASTER_ADDR", "PYTHONUNBUFFERED",
})  # fmt: skip


def refuse_reserved_env(field_name: str, env: Mapping[str, str]) -> None:
    """A job's environment (the operator's, or its image's) without the names we set."""
    for name, value in env.items():
        if FIXED_ENV.get(name) == value:
            continue  # what the job gets anyway
        if name in FIXED_ENV:
            raise SettingsError(
                f"{field_name}[{name!r}]={value!r}: every job runs with "
                f"{name}={FIXED_ENV[name]!r}, so that its lines reach the task log as they are "
                f"printed. Leave {name} out."
            )
        if name in RESERVED_ENV:
            raise SettingsError(
                f"{field_name} has {name!r}, which every job gets from the step's "
                f"runtime ({', '.join(sorted(RESERVED_ENV))}). Rename yours, e.g. 'MY_{name}'."
            )


# a bare number up to this is read as GiB meant (2 TiB: the largest machines' memory); above it,
# suggesting GiB would name petabytes
_LARGEST_GIB_GUESS = 2048


def _refuse_tiny(field_name: str, value: int | str, size: int) -> None:
    """Under a MiB no step runs (docker's least is 6 MiB): a number meant in GiB or GB."""
    if size >= 2**20:
        return
    number = str(value).strip().rstrip("bB")
    fix = (
        f"Give a unit: '{number}GiB' (or '{number}GB'), or an int of bytes such as "
        f"{number} * 2**30."
        if number.isdigit() and int(number) <= _LARGEST_GIB_GUESS
        else "Give at least '1MiB', e.g. '512MiB' or '16GiB'."
    )
    raise SettingsError(f"{field_name}={value!r} is {size} bytes, too little for any step. {fix}")


# what other tools call the number of machines of a job
MACHINE_COUNT_NAMES = frozenset(
    {"node_count", "nodes", "num_nodes", "instance_count", "replica_count", "machine_count"}
)


def shown_size(size: int) -> str:
    """Bytes as a user writes them: ``4GiB``, ``512MiB``, or ``16GB`` for powers of 1000."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("GB", 10**9), ("MB", 10**6)):
        if size % scale == 0:
            return f"{size // scale}{unit}"
    return f"{size / 2**30:g}GiB"


# The distribution project's reference grammar: [domain[:port]/]path[:tag][@digest], where the
# path's components are lowercase (a registry refuses ``Python``; docker says only "invalid
# reference format", at build time). As docker reads it, a first component is a domain only
# with a dot or a port, or as ``localhost``.
_DOMAIN_PART = r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
_DOMAIN = rf"(?={_DOMAIN_PART}[.:]|localhost/){_DOMAIN_PART}(?:\.{_DOMAIN_PART})*(?::[0-9]+)?"
_PATH_PART = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_IMAGE_REFERENCE = (
    rf"(?:{_DOMAIN}/)?{_PATH_PART}(?:/{_PATH_PART})*"
    r"(?::\w[\w.-]{0,127})?(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?"
)


def check_image_reference(field_name: str, value: Any, example: str) -> None:
    """Refuse what no registry takes as an image reference, naming the lowercase spelling when
    only the case is wrong (tags keep theirs)."""
    if isinstance(value, str) and re.fullmatch(_IMAGE_REFERENCE, value):
        return
    hint = ""
    if isinstance(value, str):
        name, at, digest = value.partition("@")
        slash = name.rfind("/")
        colon = name.rfind(":")
        path, tag = (name[:colon], name[colon:]) if colon > slash else (name, "")
        lowered = path.lower() + tag + at + digest
        if lowered != value and re.fullmatch(_IMAGE_REFERENCE, lowered):
            hint = f" Repository names are lowercase: {lowered!r}."
    raise SettingsError(
        f"{field_name}={value!r} is not an image reference; use e.g. {example!r}.{hint}"
    )
