"""A build's buildspec: where it comes from, and what CodeBuild's agent makes of it.

The buildspec is ``buildspecOverride`` (or the project's ``source.buildspec``): inline YAML, or
a path relative to the source directory; without either, ``buildspec.yml`` at the source's root.
What the fake reads of it (version 0.2): ``env.variables``, ``env.shell`` (bash or sh), and for
each of ``install``, ``pre_build``, ``build``, ``post_build``: ``commands``, ``finally`` and
``on-failure`` (ABORT, CONTINUE). A buildspec CodeBuild's agent would refuse fails the build in
DOWNLOAD_SOURCE with ``YAML_FILE_ERROR`` and the agent's message (:class:`BuildspecError`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

PHASES = ("install", "pre_build", "build", "post_build")
VERSIONS = ("0.1", "0.2")


class BuildspecError(Exception):
    """A buildspec the agent refuses (phase context ``YAML_FILE_ERROR``)."""


@dataclass
class Phase:
    """One phase's commands."""

    commands: list[str] = field(default_factory=list)
    finally_: list[str] = field(default_factory=list)
    on_failure: str | None = None  # None: the service's transitions (BUILD -> POST_BUILD...)


@dataclass
class Buildspec:
    """What a build runs."""

    variables: dict[str, str]
    shell: str
    phases: dict[str, Phase]
    location: str


def load(text: str | None, src_dir: Path) -> Buildspec:
    """The buildspec of a build whose source is in ``src_dir``."""
    if text and ("\n" in text or not _is_path(text, src_dir)):
        return parse(text, "/codebuild/readonly/buildspec.yml")
    rel = text or "buildspec.yml"
    path = src_dir / rel
    if not path.is_file():
        if not text:
            raise BuildspecError("YAML file does not exist")
        raise BuildspecError(f"stat {path}: no such file or directory")
    return parse(path.read_text(errors="replace"), str(path))


def _is_path(text: str, src_dir: Path) -> bool:
    """One line that names a file (or does not parse as a mapping): a path, as the agent reads."""
    if (src_dir / text).is_file():
        return True
    try:
        return not isinstance(yaml.safe_load(text), dict)
    except yaml.YAMLError:
        return True


def parse(text: str, location: str) -> Buildspec:
    """Parse and check a buildspec's YAML as the agent does."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise BuildspecError(f"{exc.problem or exc.context}{where}") from exc
    except yaml.YAMLError as exc:
        raise BuildspecError(str(exc)) from exc
    if not isinstance(data, dict):
        raise BuildspecError("invalid buildspec: the document is not a YAML mapping")
    version = data.get("version")
    if version is None:
        raise BuildspecError("invalid buildspec: missing required field 'version'")
    if str(version) not in VERSIONS:
        raise BuildspecError(f"invalid buildspec version: {version}")
    phases = data.get("phases")
    if not isinstance(phases, dict) or not phases:
        raise BuildspecError("invalid buildspec: missing required field 'phases'")
    for name in phases:
        if name not in PHASES:
            raise BuildspecError(f"Unknown phase name: {name}")
    env = data.get("env") or {}
    if not isinstance(env, dict):
        raise BuildspecError("invalid buildspec: env must be a mapping")
    variables = env.get("variables") or {}
    if not isinstance(variables, dict):
        raise BuildspecError("invalid buildspec: env/variables must be a mapping")
    shell = str(env.get("shell", "sh"))  # CodeBuild's default on Linux images: sh
    if shell not in ("bash", "sh", "/bin/sh"):
        raise BuildspecError(f"Unsupported shell: {shell}")
    return Buildspec(
        variables={str(k): "" if v is None else str(v) for k, v in variables.items()},
        shell="sh" if shell != "bash" else "bash",
        phases={name: _phase(name, phases[name], node) for name in phases},
        location=location,
    )


def _phase(name: str, spec: Any, root: yaml.Node | None) -> Phase:
    if spec is None:
        return Phase()
    if not isinstance(spec, dict):
        raise BuildspecError(f"invalid buildspec: phase {name} must be a mapping")
    on_failure = spec.get("on-failure")
    if on_failure not in (None, "ABORT", "CONTINUE"):
        raise BuildspecError(f"Unknown on-failure value: {on_failure}")
    return Phase(
        commands=_commands(name, "commands", spec.get("commands"), root),
        finally_=_commands(name, "finally", spec.get("finally"), root),
        on_failure=on_failure,
    )


def _commands(phase: str, key: str, items: Any, root: yaml.Node | None) -> list[str]:
    if items is None:
        return []
    if not isinstance(items, list):
        raise BuildspecError(f"Expected {key.capitalize()} to be of array type")
    for i, item in enumerate(items):
        if not isinstance(item, str | int | float | bool):
            # The agent's words for `- echo "a: b"`, a command YAML reads as a mapping.
            line = _line_of(root, phase, key, i)
            where = f" at line {line}, value of the key tag on line {line - 1} might be empty"
            raise BuildspecError(
                f"Expected {key.capitalize()}[{i}] to be of string type: found subkeys instead"
                + (where if line else "")
            )
    return [str(item) for item in items]


def _line_of(root: yaml.Node | None, phase: str, key: str, index: int) -> int:
    """1-based line of ``phases.<phase>.<key>[index]`` in the document, 0 when unknown."""
    node: Any = root
    for name in ("phases", phase, key):
        if not isinstance(node, yaml.MappingNode):
            return 0
        node = next((v for k, v in node.value if getattr(k, "value", None) == name), None)
    if not isinstance(node, yaml.SequenceNode) or index >= len(node.value):
        return 0
    return int(node.value[index].start_mark.line) + 1
