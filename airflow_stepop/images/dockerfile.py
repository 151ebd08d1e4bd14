"""The Dockerfile that adds a DockerSettings' packages and environment to a parent image.

The environment reaches the image so that Docker never parses a value: an engine build passes
each value as a build argument (``ARG STEPOP_ENV_X`` then ``ENV X="${STEPOP_ENV_X}"``: an
argument's value is substituted once and never re-read, so ``$``, quotes, backslashes and line
breaks arrive as given). A builder that takes no build arguments (Azure ML's) gets each value
single-quoted in the ``ENV`` line (nothing is expanded or unescaped within single quotes) and a
value with a line break is refused there: a Dockerfile line cannot hold one.
"""

from __future__ import annotations

import re

from airflow_stepop.settings import ENV_ARG_PREFIX, DockerSettings, SettingsError

CA_FILE = "stepop-build-ca.pem"


def dockerfile_text(
    settings: DockerSettings, parent: str, with_ca: bool, *, env_as_build_args: bool = False
) -> str:
    """The Dockerfile that adds ``settings`` to ``parent``. ``env_as_build_args``: the build is
    given ``env_build_args(settings)`` (an engine's build); else the values are inline."""
    lines = [f"FROM {parent}"]
    if settings.apt_packages:
        packages = " ".join(settings.apt_packages)
        lines.append(
            "RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y "
            f"--no-install-recommends {packages} && rm -rf /var/lib/apt/lists/*"
        )
    if settings.requirements:
        lines.append("COPY stepop-requirements.txt /tmp/stepop-requirements.txt")
        cert = ""
        if with_ca:
            lines.append(f"COPY {CA_FILE} /tmp/{CA_FILE}")
            cert = f" --cert /tmp/{CA_FILE}"
        lines.append(
            "RUN PIP_BREAK_SYSTEM_PACKAGES=1 python3 -m pip install --no-cache-dir"
            f"{cert} -r /tmp/stepop-requirements.txt"
            f" && rm -f /tmp/stepop-requirements.txt /tmp/{CA_FILE}"
        )
    for key, value in sorted(settings.environment.items()):
        if env_as_build_args:
            lines.append(f"ARG {ENV_ARG_PREFIX}{key}")
            lines.append(f'ENV {key}="${{{ENV_ARG_PREFIX}{key}}}"')
        else:
            lines.append(f"ENV {key}={_single_quoted(key, value)}")
    return "\n".join(lines) + "\n"


def env_build_args(settings: DockerSettings) -> dict[str, str]:
    """The build arguments of ``dockerfile_text(..., env_as_build_args=True)``."""
    return {f"{ENV_ARG_PREFIX}{key}": value for key, value in settings.environment.items()}


def _single_quoted(key: str, value: str) -> str:
    """``value`` as a Dockerfile word that means exactly it: single-quoted (no ``$`` expansion,
    no escapes inside), a single quote as ``\\'`` between two quoted parts."""
    if re.search(r"[\x00-\x08\x0a-\x1f\x7f]", value):
        raise SettingsError(
            f"DockerSettings.environment[{key!r}]={value!r} has a line break or another control "
            "character, which a Dockerfile line cannot hold, and this image is built by a "
            "service that takes no build arguments. Give the value to the operator's "
            "environment= instead (set on the job, not baked into the image), or build the "
            "image with a container engine on the worker."
        )
    return "'" + value.replace("'", "'\\''") + "'"
