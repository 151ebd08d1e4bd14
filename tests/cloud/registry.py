"""What the stack's registry holds, asked over its HTTP API (v2), for the build fakes' tests."""

from __future__ import annotations

import urllib.error
import urllib.request

ACCEPT = ", ".join([
    "application/vnd.docker.distribution.manifest.v2+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.oci.image.index.v1+json",
])  # fmt: skip


def manifest_digest(image: str) -> str | None:
    """The digest of ``host:port/repo:tag`` in its registry, None when it holds no such tag."""
    host, _, rest = image.partition("/")
    repo, _, tag = rest.rpartition(":")
    req = urllib.request.Request(f"http://{host}/v2/{repo}/manifests/{tag}", method="HEAD")
    req.add_header("Accept", ACCEPT)
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.headers.get("Docker-Content-Digest") or "present"
    except (urllib.error.URLError, OSError):
        return None
