"""What an image build runs, the same whether the worker's engine or a service builds it.

An environment image is one or two ``docker build``s: the user's own Dockerfile (its directory
is its context, ``.dockerignore`` applies), tagged ``<image>-base``, then our layer on top of it
or of the parent image (``layer_files``: a Dockerfile adding requirements, apt packages and
environment, the requirements file, and the CA bundle pip trusts behind a re-signing proxy).
The engine path builds these from the worker's files; a service build (``BuildPlan``) gets them
in one archive, ``user/`` and ``stepop/``, and runs the same builds with the same arguments, so
an image is the same whoever built it.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import tarfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from airflow_stepop.images.dockerfile import CA_FILE, dockerfile_text, env_build_args
from airflow_stepop.settings import DockerSettings

log = logging.getLogger(__name__)

LAYER_DIR = "stepop"
USER_DIR = "user"
# A user's Dockerfile directory goes to the builder whole (less .dockerignore's paths): one far
# larger than an environment needs is a mistake worth naming before it is uploaded.
MAX_USER_CONTEXT_BYTES = 128 << 20
MANIFEST = "stepop-manifest.sha256"  # in the archive: every other file's sha256


class BuildContextError(ValueError):
    """The build context cannot be made (an unreadable CA bundle, a context too large)."""


@dataclass(frozen=True)
class DockerBuild:
    """One ``docker build``: of ``directory`` in the archive, with its Dockerfile and args."""

    tag: str
    directory: str
    dockerfile: str = "Dockerfile"
    build_args: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class BuildPlan:
    """The builds of one image, in order (the last one's tag is ``reference``), and the files
    they read. ``network_mode`` is ``docker build --network``'s (None: the builder's default)."""

    reference: str
    builds: tuple[DockerBuild, ...]
    files: dict[str, bytes] = field(repr=False)
    network_mode: str | None = None
    what: str = ""  # what the build does, in a sentence for the task log
    executables: frozenset[str] = frozenset()  # files that keep their executable bit

    @property
    def digest(self) -> str:
        """sha256 of everything a builder is given: the same plan, the same archive name."""
        h = hashlib.sha256()
        h.update(json.dumps([self.reference, self.network_mode, [vars(b) for b in self.builds]],
                            sort_keys=True).encode())  # fmt: skip
        for name in sorted(self.files):
            h.update(f"\0{name}\0{len(self.files[name])}\0".encode())
            h.update(self.files[name])
        return h.hexdigest()

    def manifest(self) -> bytes:
        """``sha256sum``'s lines for every file, the manifest the archive carries."""
        names = sorted(self.files)
        return "".join(f"{hashlib.sha256(self.files[n]).hexdigest()}  ./{n}\n" for n in names
                       ).encode()  # fmt: skip

    def verify_script(self) -> str:
        """A bash script the build runs first, in the extracted archive: the manifest must be
        the one this worker wrote (its sha256 is in the script), every file must match it and
        no other file may be there. The archive lies where jobs can write (the artifact root);
        the script travels in the build's own request, which they cannot, and its size does not
        grow with the files. A subshell: its ``set`` stays in it; no ``$`` (Cloud Build would
        read one as a substitution), no file of its own (a host may run several builds)."""
        digest = hashlib.sha256(self.manifest()).hexdigest()
        return "\n".join([
            "(",
            "set -eu",
            f"echo '{digest}  ./{MANIFEST}' | sha256sum --check --strict --quiet -",
            f"sha256sum --check --strict --quiet ./{MANIFEST}",
            "diff <(find . -type f | LC_ALL=C sort) "
            f"<( (cut -c67- ./{MANIFEST}; echo ./{MANIFEST}) | LC_ALL=C sort)",
            "echo 'stepop: the build context is the one the worker wrote'",
            ")",
        ])  # fmt: skip

    def archive(self, kind: str) -> bytes:
        """The files as a ``zip`` (AWS CodeBuild's S3 source) or ``tar.gz`` (Cloud Build's),
        with fixed times and modes, so one plan always makes the same bytes."""
        buffer = io.BytesIO()
        files = {**self.files, MANIFEST: self.manifest()}
        if kind == "zip":
            with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
                for name in sorted(files):
                    info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
                    info.external_attr = self._mode(name) << 16
                    info.compress_type = zipfile.ZIP_DEFLATED
                    archive.writestr(info, files[name])
        elif kind == "tar.gz":
            import gzip

            with (
                gzip.GzipFile(fileobj=buffer, mode="wb", mtime=0) as gz,
                tarfile.open(fileobj=gz, mode="w") as tar,  # type: ignore[call-overload]
            ):
                for name in sorted(files):
                    info = tarfile.TarInfo(name)
                    info.size = len(files[name])
                    info.mode = self._mode(name)
                    tar.addfile(info, io.BytesIO(files[name]))
        else:
            raise ValueError(f"archive kind {kind!r}: use 'zip' or 'tar.gz'")
        return buffer.getvalue()

    def _mode(self, name: str) -> int:
        return 0o755 if name in self.executables else 0o644


def layer_files(
    settings: DockerSettings, parent: str, ca_bundle: str | None
) -> tuple[dict[str, bytes], dict[str, str]]:
    """Our layer's files (the Dockerfile, the requirements, the CA bundle when pip needs one)
    and its build arguments (the environment's values: ``dockerfile.py``)."""
    ca_bundle = ca_bundle if settings.requirements else None  # pip's alone
    text = dockerfile_text(settings, parent, bool(ca_bundle), env_as_build_args=True)
    files = {"Dockerfile": text.encode()}
    if settings.requirements:
        files["stepop-requirements.txt"] = ("\n".join(settings.requirements) + "\n").encode()
    if ca_bundle:
        try:
            files[CA_FILE] = Path(ca_bundle).read_bytes()
        except OSError as exc:
            from airflow_stepop.images.build_log import unreadable_ca_bundle

            raise BuildContextError(unreadable_ca_bundle(ca_bundle, exc)) from exc
    return files, env_build_args(settings)


def build_plan(
    settings: DockerSettings,
    reference: str,
    parent: str,
    *,
    network_mode: str | None = None,
    ca_bundle: str | None = None,
) -> BuildPlan:
    """The plan of ``reference`` for a service's builder (see the module's docstring)."""
    files: dict[str, bytes] = {}
    executables: set[str] = set()
    builds: list[DockerBuild] = []
    on_top = bool(settings.apt_packages or settings.requirements or settings.environment)
    if settings.dockerfile:
        dockerfile = Path(settings.dockerfile)
        base_tag = f"{reference}-base" if on_top else reference
        for name, (data, executable) in _user_context(dockerfile).items():
            files[f"{USER_DIR}/{name}"] = data
            if executable:
                executables.add(f"{USER_DIR}/{name}")
        user_args = dict(sorted(settings.build_args.items()))
        builds.append(DockerBuild(base_tag, USER_DIR, dockerfile.name, user_args))
        parent = base_tag
    if on_top or not settings.dockerfile:
        layer, args = layer_files(settings, parent, ca_bundle)
        files.update({f"{LAYER_DIR}/{name}": data for name, data in layer.items()})
        builds.append(DockerBuild(reference, LAYER_DIR, "Dockerfile", dict(sorted(args.items()))))
    what = _what(settings, reference, parent)
    return BuildPlan(reference, tuple(builds), files, network_mode, what, frozenset(executables))


def _what(settings: DockerSettings, reference: str, parent: str) -> str:
    if settings.needs_build:
        return f"Building environment image {reference}"
    return f"Copying the parent image {parent} to {reference} (the service pulls from there)"


def _user_context(dockerfile: Path) -> dict[str, tuple[bytes, bool]]:
    """The files of the user's Dockerfile directory that ``docker build`` would send (the SDK's
    own ``.dockerignore`` rules), read into memory with whether each is executable, refused past
    ``MAX_USER_CONTEXT_BYTES``; a symbolic link is left out, and the task log says so."""
    from docker.utils.build import exclude_paths

    root = dockerfile.parent
    ignore = root / ".dockerignore"
    patterns: list[str] = []
    if ignore.is_file():
        patterns = [line.strip() for line in ignore.read_text().splitlines()]
        patterns = [p for p in patterns if p and not p.startswith("#")]
    files: dict[str, tuple[bytes, bool]] = {}
    total = 0
    for name in sorted(exclude_paths(str(root), patterns, dockerfile=dockerfile.name)):
        path = root / name
        if path.is_symlink():
            log.warning("%s is a symbolic link: the service's build context leaves it out", path)
            continue
        if not path.is_file():
            continue
        if any(c in name for c in "\\\n\r"):
            raise BuildContextError(
                f"DockerSettings.dockerfile={str(dockerfile)!r}: its directory holds {name!r}, a "
                "name with a backslash or a line break, which the build's check of its files "
                "cannot name. Rename it, or list it in a .dockerignore there."
            )
        total += path.stat().st_size
        if total > MAX_USER_CONTEXT_BYTES:
            raise BuildContextError(
                f"DockerSettings.dockerfile={str(dockerfile)!r}: its directory {str(root)!r} "
                f"holds more than {MAX_USER_CONTEXT_BYTES >> 20} MiB, all of which a service's "
                "builder would be sent. Put the Dockerfile in a directory of its own (with only "
                "what it COPYs), or list what it does not need in a .dockerignore there."
            )
        executable = bool(path.stat().st_mode & 0o111)
        files[name.replace(os.sep, "/")] = (path.read_bytes(), executable)
    return files
