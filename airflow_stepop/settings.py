"""User-facing settings: hardware (ResourceSettings) and environment image (DockerSettings).

Both validate when constructed, which is DAG parse time, so a wrong value fails the DAG import
with a message that names the field, the value and what would work. Every rule is a full match
(``re.fullmatch``): with ``re.match`` and ``$``, a value ending in a line break passed, and
became a Dockerfile instruction, or a requirements line, of its own.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

# SettingsError is public here too (``from airflow_stepop.settings import SettingsError``)
from airflow_stepop.setting_values import (
    MACHINE_COUNT_NAMES,
    SettingsError,
    check_image_reference,
    parse_memory,
    refuse_reserved_env,
    shown_size,
)

__all__ = ["DockerSettings", "ResourceSettings", "SettingsError"]


def _positive_int(name: str, value: Any) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise SettingsError(f"ResourceSettings.{name}={value!r} must be a whole number >= 1.")


def _named_fields(cls: type) -> type:
    """A misspelt field (``ResourceSettings(memroy=...)``) is named with the closest real one;
    a dataclass's own error is a bare TypeError that lists nothing."""
    import functools

    init = cls.__init__
    names = tuple(f.name for f in fields(cls))

    @functools.wraps(init)
    def checked_init(self: Any, *args: Any, **kwargs: Any) -> None:
        unknown = [k for k in kwargs if k not in names]
        if unknown:
            import difflib

            close = difflib.get_close_matches(unknown[0], names, n=1)
            hint = f" (did you mean {close[0]}=?)" if close else ""
            if unknown[0] in MACHINE_COUNT_NAMES:
                hint = (
                    " (the number of machines is the operator's argument: instance_count= on "
                    "SageMaker and Azure ML, replica_count= on Vertex AI)"
                )
            raise SettingsError(
                f"{cls.__name__} has no field {unknown[0]!r}{hint}; its fields are "
                f"{', '.join(names)}."
            )
        init(self, *args, **kwargs)

    cls.__init__ = checked_init  # type: ignore[misc]
    return cls


@_named_fields
@dataclass(frozen=True, repr=False)
class ResourceSettings:
    """Hardware for one step, in the same words on every service.

    ``gpu_type`` is a GPU model such as "A100", "H100", "L4", "T4" or "A10G"; alone it means one
    GPU of that model. Each backend maps the whole request to its cheapest fitting instance or
    machine type.
    """

    cpu_count: int | None = None
    gpu_count: int | None = None
    gpu_type: str | None = None
    memory: int | str | None = None

    def __post_init__(self) -> None:
        _positive_int("cpu_count", self.cpu_count)
        if self.gpu_count is not None and (
            isinstance(self.gpu_count, bool)
            or not isinstance(self.gpu_count, int)
            or self.gpu_count < 0
        ):
            raise SettingsError(
                f"ResourceSettings.gpu_count={self.gpu_count!r} must be a whole number >= 0."
            )
        if self.gpu_type is not None:
            if not isinstance(self.gpu_type, str) or not re.fullmatch(
                r"[A-Za-z0-9_-]+", self.gpu_type
            ):
                raise SettingsError(
                    f"ResourceSettings.gpu_type={self.gpu_type!r} must be a GPU model name such "
                    "as 'A100', 'H100', 'L4' or 'T4'."
                )
            if self.gpu_count == 0:
                raise SettingsError(
                    f"ResourceSettings.gpu_type={self.gpu_type!r} with gpu_count=0 asks for no "
                    "GPU of that type; set gpu_count >= 1 or drop gpu_type."
                )
            if self.gpu_count is None:
                object.__setattr__(self, "gpu_count", 1)
        if self.memory is not None:
            object.__setattr__(self, "memory", parse_memory(self.memory, "ResourceSettings.memory"))

    @property
    def memory_bytes(self) -> int | None:
        return self.memory  # type: ignore[return-value]  # normalized to bytes above

    def to_dict(self) -> dict[str, Any]:
        return {
            "cpu_count": self.cpu_count,
            "gpu_count": self.gpu_count,
            "gpu_type": self.gpu_type,
            "memory": self.memory,
        }

    def shown(self) -> str:
        """The settings as a user writes them, for messages: memory in GiB or MiB, not bytes."""
        fields = []
        for key, value in self.to_dict().items():
            if value is None:
                continue
            if key == "memory":
                value = shown_size(value)
            fields.append(f"{key}={value!r}")
        return f"ResourceSettings({', '.join(fields)})"

    __repr__ = shown  # in a log or a printed dict too: ResourceSettings(memory='16GiB')


_ENV_NAME = r"[A-Za-z_][A-Za-z0-9_]*"

_APT_NAME = r"[a-z0-9][a-z0-9+.\-]*(=[A-Za-z0-9.+~:\-]+)?"

# One line of a requirements file: no line break or other control character (it would start
# another line: an option such as --index-url), including those pip's str.splitlines() breaks
# at (NEL, the line and paragraph separators), and no trailing backslash (pip's line
# continuation, which would join the next entry to this one).
_REQUIREMENT = r"[^\x00-\x1f\x7f\x85\u2028\u2029]*[^\x00-\x1f\x7f\x85\u2028\u2029\\]"

# The build arguments that carry the environment's values into the image (``ENV NAME=
# "${STEPOP_ENV_NAME}"``: a value passed so is never parsed by Docker, so ``$``, quotes,
# backslashes and line breaks arrive as given). A name of the user's with this prefix would
# shadow one of them.
ENV_ARG_PREFIX = "STEPOP_ENV_"
# What Dockerfile quoting used to change the meaning of: ``$``, backslashes, control characters.
_REQUOTED = re.compile(r"[$\\\x00-\x1f\x7f]")


def _string_tuple(owner: str, name: str, value: Any) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise SettingsError(
            f"{owner}.{name}={value!r} must be a list of strings, e.g. {value.split()!r}."
            if isinstance(value, str) and value.split()
            else f"{owner}.{name}={value!r} must be a list of strings."
        )
    for item in value:
        if not isinstance(item, str) or not item.strip():
            raise SettingsError(
                f"{owner}.{name} has {item!r}; every entry must be a non-empty string."
            )
    return tuple(value)


def _requirements(owner: str, value: Any) -> tuple[str, ...]:
    """Entries of the image's requirements file, one line each."""
    entries = _string_tuple(owner, "requirements", value)
    for entry in entries:
        if not re.fullmatch(_REQUIREMENT, entry):
            raise SettingsError(
                f"{owner}.requirements has {entry!r}: each entry is one line of a requirements "
                "file, with no line break or other control character and no trailing "
                "backslash (either would start or join another line). Give each requirement "
                "or option as an entry of its own, e.g. ['numpy==2.1.0', 'pandas']."
            )
    return entries


def _string_map(owner: str, name: str, value: Any) -> dict[str, str]:
    if not isinstance(value, Mapping):
        raise SettingsError(f"{owner}.{name}={value!r} must be a dict of str -> str.")
    out: dict[str, str] = {}
    for key, item in value.items():
        if not isinstance(key, str) or not re.fullmatch(_ENV_NAME, key):
            raise SettingsError(
                f"{owner}.{name} has the key {key!r}; keys must be names like MY_VAR "
                "(letters, digits and _, not starting with a digit)."
            )
        if key.startswith(ENV_ARG_PREFIX):
            raise SettingsError(
                f"{owner}.{name} has the key {key!r}; names starting with {ENV_ARG_PREFIX} "
                "carry the environment's values into the image. Rename it, e.g. "
                f"{'MY_' + key.removeprefix(ENV_ARG_PREFIX)!r}."
            )
        if not isinstance(item, (str, int, float, bool)):
            raise SettingsError(
                f"{owner}.{name}[{key!r}]={item!r} must be a string (a number or a bool is "
                "taken as its text)."
            )
        if "\x00" in str(item):
            raise SettingsError(
                f"{owner}.{name}[{key!r}]={item!r} has a NUL character, which no environment "
                "variable or build argument can hold; remove it."
            )
        out[key] = str(item)
    return out


def _dockerfile(owner: str, value: Any) -> str:
    """An existing Dockerfile's absolute path. A relative one is refused: DAG files are parsed,
    and their tasks run, from whatever working directory each Airflow process has."""
    if not isinstance(value, (str, os.PathLike)):
        raise SettingsError(
            f"{owner}.dockerfile={value!r} is not a path; give the path of a Dockerfile, e.g. "
            'dockerfile=Path(__file__).parent / "Dockerfile".'
        )
    path = Path(value)
    if not path.is_absolute():
        raise SettingsError(
            f"{owner}.dockerfile={str(value)!r} is a relative path, which each Airflow process "
            "would read from its own working directory; give an absolute one, e.g. "
            'dockerfile=Path(__file__).parent / "Dockerfile" for one next to the DAG file.'
        )
    if not path.is_file():
        raise SettingsError(
            f"{owner}.dockerfile={str(value)!r} is not an existing file; give the path of a "
            "Dockerfile (its directory is the build context)."
        )
    return str(path)


@_named_fields
@dataclass(frozen=True)
class DockerSettings:
    """The step's environment image; its tag is a hash of everything that shapes it.

    ``parent_image`` alone (no requirements, apt packages, environment or Dockerfile) is used
    as it is, with no build. Code never goes into the image: it travels in the code bundle.
    """

    parent_image: str | None = None
    requirements: Sequence[str] = ()
    apt_packages: Sequence[str] = ()
    environment: Mapping[str, str] = field(default_factory=dict)
    dockerfile: str | os.PathLike[str] | None = None  # kept as an absolute path string
    build_args: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        owner = "DockerSettings"
        if self.parent_image is not None:
            check_image_reference(
                f"{owner}.parent_image",
                self.parent_image,
                "pytorch/pytorch:2.4.0-cuda12.1-cudnn9-runtime",
            )
        object.__setattr__(self, "requirements", _requirements(owner, self.requirements))
        apt = _string_tuple(owner, "apt_packages", self.apt_packages)
        for package in apt:
            if not re.fullmatch(_APT_NAME, package):
                raise SettingsError(
                    f"{owner}.apt_packages has {package!r}, which is not a Debian package name "
                    "(lowercase letters, digits, '+', '-', '.', optionally '=version')."
                )
        object.__setattr__(self, "apt_packages", apt)
        environment = _string_map(owner, "environment", self.environment)
        refuse_reserved_env(f"{owner}.environment", environment)
        object.__setattr__(self, "environment", environment)
        object.__setattr__(self, "build_args", _string_map(owner, "build_args", self.build_args))
        if self.dockerfile is not None:
            object.__setattr__(self, "dockerfile", _dockerfile(owner, self.dockerfile))
        elif self.build_args:
            raise SettingsError(
                f"{owner}.build_args={dict(self.build_args)!r} has no Dockerfile to go to: "
                "build arguments fill the ARGs of your own dockerfile=. Give dockerfile= too, "
                "or drop build_args."
            )

    def to_dict(self) -> dict[str, Any]:
        """The settings as JSON (``DockerSettings(**d)`` makes them again)."""
        return {
            "parent_image": self.parent_image,
            "requirements": list(self.requirements),
            "apt_packages": list(self.apt_packages),
            "environment": dict(self.environment),
            "dockerfile": self.dockerfile and str(self.dockerfile),
            "build_args": dict(self.build_args),
        }

    @property
    def needs_build(self) -> bool:
        return bool(self.requirements or self.apt_packages or self.environment or self.dockerfile)

    def content_hash(self, parent_image: str, recipe_version: str) -> str:
        """Hash of everything that shapes the image: same hash, same image, no rebuild."""
        document = {
            "parent_image": parent_image,
            "requirements": list(self.requirements),
            "apt_packages": list(self.apt_packages),
            "environment": dict(sorted(self.environment.items())),
            "build_args": dict(sorted(self.build_args.items())),
            "dockerfile": (
                hashlib.sha256(Path(self.dockerfile).read_bytes()).hexdigest()
                if self.dockerfile
                else None
            ),
            "recipe": recipe_version,
        }
        if any(_REQUOTED.search(value) for value in self.environment.values()):
            # Before values were passed as build arguments, these were mangled in the image (a
            # ``$`` expanded, a line break split the Dockerfile): such settings get a new tag,
            # not the old image; every other tag names the same environment as before.
            document["environment_as_build_args"] = True
        return hashlib.sha256(json.dumps(document, sort_keys=True).encode()).hexdigest()
