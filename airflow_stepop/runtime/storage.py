"""Reads and writes artifact URIs from inside a job or from the worker.

Local paths and ``file://`` URIs use the standard library. Other schemes (``s3://``, ``gs://``,
``abfs://``...) go through fsspec, imported only then. Services that mount or stage object
storage into the container (SageMaker channels, GCS FUSE under /gcs, Azure ML inputs) tell the
runtime through ``STEPOP_PATH_MAP``, a JSON object of URI prefix -> local directory; a mapped
URI is read and written as a plain local path, so the image needs no cloud SDK.
"""

from __future__ import annotations

import hashlib
import io
import json
import mmap
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, BinaryIO
from urllib.parse import unquote, urlsplit

PATH_MAP_ENV = "STEPOP_PATH_MAP"
CHUNK = 4 * 1024 * 1024
# Data at least this large is hashed on a helper thread while the file I/O runs: sha256 and
# the read/write system calls both release the GIL, so a pass costs max(I/O, hash), not the sum.
OVERLAP_MIN = 2 * CHUNK

# (uri) -> (fsspec filesystem, path within it); lets the worker attach Airflow connections.
FilesystemResolver = Callable[[str], tuple[Any, str]]


def _default_resolver(uri: str) -> tuple[Any, str]:
    try:
        import fsspec
    except ImportError as exc:  # pragma: no cover - depends on the image
        raise RuntimeError(
            f"Reading {uri!r} needs fsspec (and the filesystem for its scheme) in the job's "
            "environment: add them to DockerSettings.requirements, or use a backend that "
            "stages object storage into the container."
        ) from exc
    return fsspec.core.url_to_fs(uri)


def join(base: str, *parts: str) -> str:
    """Join URI segments with '/' whatever the scheme."""
    out = base.rstrip("/")
    for part in parts:
        out += "/" + part.strip("/")
    return out


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(CHUNK):
            digest.update(block)
    return digest.hexdigest()


def iter_tree(root: Path) -> Iterator[Path]:
    """Files under a directory, in a stable order."""
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            yield Path(dirpath) / name


def tree_digest(root: Path) -> tuple[str, int]:
    """A directory's content hash (over relative paths, sizes and file hashes) and total size."""
    digest = hashlib.sha256()
    total = 0
    for path in iter_tree(root):
        size = path.stat().st_size
        total += size
        rel = path.relative_to(root).as_posix()
        digest.update(f"{rel}\0{size}\0{sha256_file(path)}\n".encode())
    return digest.hexdigest(), total


def digest_of(path: Path) -> tuple[str, int]:
    """sha256 and size of a file, or of a directory tree."""
    if path.is_dir():
        return tree_digest(path)
    return sha256_file(path), path.stat().st_size


class _Overlap:
    """Runs each digest update on one helper thread, in order, while the caller does I/O.

    Made per file (never shared or kept), so a process forked while one exists is unharmed.
    """

    def __init__(self, digest: Any) -> None:
        self.digest = digest
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="stepop-sha256")
        self.pending: Future[None] | None = None

    def update(self, data: memoryview) -> None:
        """Hash ``data`` in the background; the caller must not change it until ``wait()``."""
        self.wait()
        self.pending = self.pool.submit(self.digest.update, data)

    def wait(self) -> None:
        if self.pending is not None:
            pending, self.pending = self.pending, None
            pending.result()

    def close(self) -> None:
        try:
            self.wait()
        finally:
            self.pool.shutdown()


class HashingWriter(io.RawIOBase):
    """A binary stream over an open file that hashes exactly the bytes written, in the same pass.

    Materializers write through it, so an artifact's sha256 costs no second read of its bytes.
    Closing it leaves the file open.
    """

    def __init__(self, file: BinaryIO) -> None:
        super().__init__()
        self.file = file
        self.digest = hashlib.sha256()
        self.size = 0
        self._overlap: _Overlap | None = None

    def writable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.size

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        if len(view) < OVERLAP_MIN:
            self.digest.update(view)
            self.file.write(view)
        else:
            self._overlap = self._overlap or _Overlap(self.digest)
            for start in range(0, len(view), CHUNK):
                chunk = view[start : start + CHUNK]
                self._overlap.update(chunk)
                try:
                    self.file.write(chunk)
                finally:
                    self._overlap.wait()
        self.size += len(view)
        return len(view)

    def hexdigest(self) -> str:
        return self.digest.hexdigest()

    def close(self) -> None:
        if self._overlap is not None:
            self._overlap.close()
            self._overlap = None
        super().close()


def read_hashed(file: BinaryIO, size: int) -> tuple[memoryview, str]:
    """Exactly ``size`` bytes of an open (unbuffered) file and their sha256, in one pass.

    Raises EOFError when the file ends early. The caller deserializes these very bytes, so
    what was verified is what is loaded, whatever happens to the file afterwards. The memory
    is writable (arrays loaded over it stay writable); a large buffer is an anonymous mapping,
    which the kernel hands out without first filling it with zeros.
    """
    buffer = mmap.mmap(-1, size) if size >= OVERLAP_MIN else bytearray(size)
    view = memoryview(buffer)
    digest = hashlib.sha256()
    overlap = _Overlap(digest) if size >= OVERLAP_MIN else None
    try:
        for start in range(0, size, CHUNK):
            chunk = view[start : start + CHUNK]
            filled = 0
            while filled < len(chunk):
                count = file.readinto(chunk[filled:])
                if not count:
                    raise EOFError(f"the file ended after {start + filled} of {size} bytes")
                filled += count
            if overlap is not None:
                overlap.update(chunk)  # hashed while the next chunk is read
            else:
                digest.update(chunk)
    finally:
        if overlap is not None:
            overlap.close()
    return view, digest.hexdigest()


def copy_hashed(source: Path, target: Path) -> tuple[str, int]:
    """Copy a file or directory tree, hashing what is written (same digests as ``digest_of``)."""
    if not source.is_dir():
        with open(source, "rb") as reader, open(target, "wb") as file, HashingWriter(file) as out:
            while block := reader.read(OVERLAP_MIN):
                out.write(block)
            return out.hexdigest(), out.size
    tree = hashlib.sha256()
    total = 0
    target.mkdir(parents=True)
    for path in iter_tree(source):
        rel = path.relative_to(source).as_posix()
        (target / rel).parent.mkdir(parents=True, exist_ok=True)
        sha256, size = copy_hashed(path, target / rel)
        total += size
        tree.update(f"{rel}\0{size}\0{sha256}\n".encode())
    return tree.hexdigest(), total


class Storage:
    """URI-level file operations shared by the runtime and the worker."""

    def __init__(
        self,
        path_map: dict[str, str] | None = None,
        resolver: FilesystemResolver | None = None,
    ) -> None:
        self.path_map = dict(path_map or {})
        self.resolver = resolver or _default_resolver

    @classmethod
    def from_env(cls) -> Storage:
        raw = os.environ.get(PATH_MAP_ENV)
        return cls(path_map=json.loads(raw) if raw else None)

    def local_path(self, uri: str) -> Path | None:
        """The local path a URI maps to, or None when it needs a remote filesystem."""
        for prefix, local in sorted(self.path_map.items(), key=lambda kv: -len(kv[0])):
            if uri == prefix or uri.startswith(prefix.rstrip("/") + "/"):
                return Path(local) / uri[len(prefix) :].lstrip("/")
        parts = urlsplit(uri)
        if parts.scheme in ("", "file", "local"):
            return Path(unquote(parts.path) if parts.scheme else uri)
        return None

    def exists(self, uri: str) -> bool:
        local = self.local_path(uri)
        if local is not None:
            return local.exists()
        fs, path = self.resolver(uri)
        return fs.exists(path)

    def read_bytes(self, uri: str) -> bytes:
        local = self.local_path(uri)
        if local is not None:
            return local.read_bytes()
        fs, path = self.resolver(uri)
        return fs.cat_file(path)

    def write_bytes(self, uri: str, data: bytes) -> None:
        """Write a whole object; local writes are atomic (temp file + rename)."""
        local = self.local_path(uri)
        if local is not None:
            local.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=local.parent, prefix=".tmp-")
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
            os.replace(tmp, local)
            return
        fs, path = self.resolver(uri)
        fs.pipe_file(path, data)

    def read_json(self, uri: str) -> Any:
        return json.loads(self.read_bytes(uri))

    def write_json(self, uri: str, value: Any) -> None:
        self.write_bytes(uri, json.dumps(value, indent=1, sort_keys=True).encode())

    def put(self, source: Path, uri: str) -> None:
        """Copy a local file or directory tree to a URI."""
        local = self.local_path(uri)
        if local is not None:
            if local.resolve() == source.resolve():
                return
            if source.is_dir():
                shutil.copytree(source, local, dirs_exist_ok=True)
            else:
                local.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(source, local)
            return
        fs, path = self.resolver(uri)
        if source.is_dir():
            for file in iter_tree(source):
                fs.put_file(str(file), path + "/" + file.relative_to(source).as_posix())
        else:
            fs.put_file(str(source), path)

    def fetch(self, uri: str, cache_dir: Path) -> Path:
        """A local path with the object or tree at ``uri``: itself when local, else a download."""
        local = self.local_path(uri)
        if local is not None:
            return local
        fs, path = self.resolver(uri)
        target = cache_dir / Path(path).name
        if fs.isdir(path):
            fs.get(path.rstrip("/") + "/", str(target), recursive=True)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            fs.get_file(path, str(target))
        return target
