"""Reading a failed image build's log: plain text, and the setting that fixes a known failure.

A build that cannot reach the package index fails deep in pip's output ("Temporary failure in
name resolution", "CERTIFICATE_VERIFY_FAILED"), and nothing there names the ``[stepop]`` option
that fixes it on this worker. The error says which, with a value to try. A build that fails at
its first step (``FROM``) could not pull the parent image: the error says what to give instead.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

NETWORK_MODE_EXAMPLE = "AIRFLOW__STEPOP__BUILD_NETWORK_MODE=host"
CA_BUNDLE_EXAMPLE = "AIRFLOW__STEPOP__BUILD_CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt"

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")

# The build's container could not resolve or reach any host: an engine whose builds get no
# network of their own (no bridge), or a host that reaches the index only through its own.
_NO_NETWORK = (
    "temporary failure in name resolution",  # pip (urllib3), Python
    "name or service not known",
    "temporary failure resolving",  # apt-get
    "could not resolve host",  # curl, git
    "network is unreachable",
)
# The index's certificate is signed by a CA the image does not trust: a proxy that re-signs TLS.
_UNTRUSTED_TLS = (
    "certificate_verify_failed",
    "certificate verify failed",
    "self-signed certificate",
    "self signed certificate",
    "unable to get local issuer certificate",
)


def plain(text: str) -> str:
    """``text`` without terminal colour codes (the engine wraps a step's stderr in red)."""
    return _ANSI.sub("", text)


def hints(lines: Iterable[str], network_mode: str | None, ca_bundle: str | None) -> list[str]:
    """What to set for the failures the build log shows (none when it shows no known one).

    ``network_mode`` and ``ca_bundle`` are the build's ``[stepop]`` settings, said back when the
    failure happened with them set (so the value is wrong rather than missing).
    """
    lines = list(lines)
    found = []
    first_step = re.match(r"step 1/\d+ : from (\S+)", lines[-1], re.I) if lines else None
    if first_step:
        parent = first_step.group(1)
        found.append(
            f"The engine could not pull the parent image {parent} (the build's first step). "
            "Give DockerSettings(parent_image=) an image in a registry this engine reaches (or "
            "one it already has), or give the engine a mirror of Docker Hub (registry-mirrors "
            "in its daemon.json)."
        )
        return found
    text = "\n".join(lines).lower()
    if any(words in text for words in _NO_NETWORK):
        now = f" (it is {network_mode!r} now)" if network_mode else ""
        found.append(
            "The build could not reach the network (name resolution failed): this engine may "
            "give builds no network of their own (no bridge network). Build on another network "
            f"with [stepop] build_network_mode{now}, e.g. {NETWORK_MODE_EXAMPLE}"
        )
    if any(words in text for words in _UNTRUSTED_TLS):
        now = f" (it is {ca_bundle!r} now, which does not verify it)" if ca_bundle else ""
        found.append(
            "The build could not verify the package index's TLS certificate (a proxy that "
            "re-signs TLS?): give pip a PEM bundle on the worker that verifies it with "
            f"[stepop] build_ca_bundle{now}, e.g. {CA_BUNDLE_EXAMPLE}"
        )
    return found


def unreadable_ca_bundle(path: str, exc: OSError) -> str:
    """The error for a ``build_ca_bundle`` that cannot be read: the option, its value, a fix."""
    return (
        f"[stepop] build_ca_bundle is {path!r}, which cannot be read ({exc.strerror or exc}): "
        f"set it to a PEM file on the worker, e.g. {CA_BUNDLE_EXAMPLE}, or unset it."
    )
