"""Reads and writes artifact URIs from inside a job or from the worker.

Local paths and ``file://`` URIs use the standard library. Other schemes (``s3://``, ``gs://``,
``abfs://``...) go through fsspec, imported only then. Services that mount or stage object
storage into the container (SageMaker channels, GCS FUSE under /gcs, Azure ML inputs) tell the
runtime through ``STEPOP_PATH_MAP``, a JSON object of URI prefix -> local directory; a mapped
URI is read and written as a plain local path, so the image needs no cloud SDK.
"""

from __future__ import annotations

import functools
import io
import json
import mmap
import os
import secrets
import shutil
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO
from urllib.parse import unquote, urlsplit

from airflow_stepop.runtime.digest import (
    CHUNK_SIZE,
    THREAD_MIN,
    WRITTEN_KIND,
    TreeDigest,
    iter_tree,
    new_digest,
)

PATH_MAP_ENV = "STEPOP_PATH_MAP"

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


def temporary_beside(path: Path) -> Path:
    """A new name in ``path``'s directory, to write ``path`` whole and rename it into place: a
    reader sees the old content or the new, never part. (``mkstemp`` would make the file private
    to this user, and re-seeds its name generator in every forked task process.)"""
    return path.parent / f".tmp-{secrets.token_hex(8)}"


class HashingWriter(io.RawIOBase):
    """A binary stream over an open file that hashes exactly the bytes written, in the same pass.

    Materializers write through it, so an artifact's digest costs no second read of its bytes:
    each chunk is handed to the digest's threads just before it is written, so hashing runs
    on the other cores while this thread is in the write call. Closing it leaves the file open.
    """

    def __init__(self, file: BinaryIO, kind: str = WRITTEN_KIND) -> None:
        super().__init__()
        self.file = file
        self.digest = new_digest(kind)
        self.size = 0

    def writable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.size

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        try:
            for start in range(0, len(view), CHUNK_SIZE):
                chunk = view[start : start + CHUNK_SIZE]
                self.digest.update(chunk)
                self.file.write(chunk)
        finally:
            self.digest.wait()  # the caller may reuse its buffer once this returns
        self.size += len(view)
        return len(view)

    def hexdigest(self) -> str:
        return self.digest.hexdigest()

    def close(self) -> None:
        self.digest.close()
        super().close()


def _private_memory(size: int) -> memoryview:
    """Writable memory for ``size`` bytes. A large buffer is a private anonymous mapping: the
    kernel zeroes its pages on first touch, by the threads that read into them (a shared
    mapping is backed by shared memory and costs about half as much again to fill).

    No ``MADV_HUGEPAGE`` (tried twice): one fault per 2 MiB fills 256 MiB from page cache in
    0.05-0.09 s of CPU instead of 0.15-0.20 s while the process reuses memory it freed a moment
    ago, but a fresh process on a VM whose balloon reports free pages to the host (as on the
    development machine) gets host-discarded huge pages: 0.3-0.5 s. A private file mapping
    copied on write (``MADV_POPULATE_WRITE``) costs the same as reading into this one."""
    if size < THREAD_MIN or not hasattr(mmap, "MAP_PRIVATE"):
        return memoryview(bytearray(size))
    return memoryview(mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS))


def _fill(read: Callable[[memoryview], int], chunk: memoryview, offset: int) -> None:
    """Fill ``chunk`` with ``read`` (the bytes from ``offset`` on); EOFError when they end."""
    filled = 0
    while filled < len(chunk):
        count = read(chunk[filled:])
        if not count:
            raise EOFError(f"the file ended after {offset + filled} bytes")
        filled += count


def _pread_chunk(fd: int, offset: int, chunk: memoryview) -> None:
    _fill(lambda rest: os.preadv(fd, [rest], offset + len(chunk) - len(rest)), chunk, offset)


def read_hashed(file: BinaryIO, size: int, kind: str) -> tuple[memoryview, str]:
    """Exactly ``size`` bytes of an open (unbuffered) file, from its start, and their digest of
    ``kind``, in one pass. Chunks of a local file are read and hashed on every core at once
    (positional reads); other files are read in order while the chunks already read are hashed.

    Raises EOFError when the file ends early; leaves the file's position after ``size``
    bytes. The caller deserializes these very bytes, so what was verified is what is loaded,
    whatever happens to the file afterwards. The memory is writable (arrays loaded over it
    stay writable).
    """
    view = _private_memory(size)
    try:
        fd: int | None = file.fileno() if hasattr(os, "preadv") else None
    except (AttributeError, OSError):  # io.UnsupportedOperation is an OSError
        fd = None
    with new_digest(kind) as digest:
        for start in range(0, size, CHUNK_SIZE):
            chunk = view[start : start + CHUNK_SIZE]
            if fd is not None:
                digest.update_from(chunk, functools.partial(_pread_chunk, fd, start))
            else:
                _fill(file.readinto, chunk, start)
                digest.update(chunk)
        hexdigest = digest.hexdigest()
    if fd is not None:
        file.seek(size)
    return view, hexdigest


def copy_hashed(source: Path, target: Path) -> tuple[str, int]:
    """Copy a file or directory tree, hashing what is written (the digest ``digest_of`` takes
    with ``WRITTEN_KIND``)."""
    if not source.is_dir():
        with open(source, "rb") as reader, open(target, "wb") as file, HashingWriter(file) as out:
            while block := reader.read(4 * CHUNK_SIZE):  # several chunks: hashed side by side
                out.write(block)
            return out.hexdigest(), out.size
    tree = TreeDigest()
    target.mkdir(parents=True)
    for path in iter_tree(source):
        rel = path.relative_to(source).as_posix()
        (target / rel).parent.mkdir(parents=True, exist_ok=True)
        hexdigest, size = copy_hashed(path, target / rel)
        tree.add(rel, size, hexdigest)
    return tree.hexdigest(), tree.size


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

    def read_bounded(self, uri: str, limit: int) -> bytes:
        """A small document the job could have written (its run directory), read as at most
        ``limit`` bytes: a larger one is refused (ValueError). A local one must be a regular
        file, opened without following a link and without waiting: a FIFO or a device in its
        place must not block the reader (the triggerer's one I/O thread, say)."""
        local = self.local_path(uri)
        if local is not None:
            flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | os.O_CLOEXEC
            try:
                fd = os.open(local, flags)
            except OSError as exc:
                if isinstance(exc, FileNotFoundError):
                    raise
                raise ValueError(f"it cannot be opened as a plain file ({exc})") from None
            with os.fdopen(fd, "rb") as file:
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    raise ValueError("it is not a regular file")
                data = file.read(limit + 1)
        else:
            fs, path = self.resolver(uri)
            data = fs.cat_file(path, start=0, end=limit + 1)
        if len(data) > limit:
            raise ValueError(f"it is larger than {limit} bytes: not a document of ours")
        return data

    def write_bytes(self, uri: str, data: bytes) -> None:
        """Write a whole object; local writes are atomic (temp file + rename)."""
        local = self.local_path(uri)
        if local is not None:
            local.parent.mkdir(parents=True, exist_ok=True)
            temporary = temporary_beside(local)
            try:
                with open(temporary, "xb") as file:  # buffered: writes every byte
                    file.write(data)
                os.replace(temporary, local)
            except BaseException:
                temporary.unlink(missing_ok=True)
                raise
            return
        fs, path = self.resolver(uri)
        fs.pipe_file(path, data)

    def create_new(self, uri: str, data: bytes) -> bool:
        """Write ``data`` only where nothing is yet; False when something is. Workers on many
        hosts claim a thing this way (one image build per tag): a conditional write where the
        store has one (S3's ``If-None-Match``, GCS's ``ifGenerationMatch=0``: fsspec's
        ``mode="create"``; a local ``O_EXCL``), else a look, then a write, which two writers
        racing in the same instant may both pass."""
        local = self.local_path(uri)
        if local is not None:
            local.parent.mkdir(parents=True, exist_ok=True)
            try:
                fd = os.open(local, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
            except FileExistsError:
                return False
            with os.fdopen(fd, "wb") as file:
                file.write(data)
            return True
        fs, path = self.resolver(uri)
        try:
            fs.pipe_file(path, data, mode="create")
        except FileExistsError:
            return False
        except TypeError:  # a filesystem without exclusive writes
            if fs.exists(path):
                return False
            fs.pipe_file(path, data)
        return True

    def read_json(self, uri: str) -> Any:
        return json.loads(self.read_bytes(uri))

    def write_json(self, uri: str, value: Any) -> None:
        """Keys in their order: a step's dict result comes back as a plain task's would."""
        self.write_bytes(uri, json.dumps(value, indent=1).encode())

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

    def download(self, uri: str, target: Path) -> None:
        """Copy the remote object or tree at ``uri`` to ``target`` (a new path). A tree's keys
        are listed first and each must name a file under it (``unsafe_key``), whatever checks
        the installed fsspec makes; a retried call overwrites what an earlier one wrote."""
        fs, path = self.resolver(uri)
        if not fs.isdir(path):
            fs.get_file(path, str(target))
            return
        prefix = path.rstrip("/") + "/"
        files: list[tuple[str, str]] = []
        for key in sorted(fs.find(path.rstrip("/"))):
            if key.endswith("/"):  # a folder marker some tools write: no file
                continue
            relative = key.removeprefix(prefix)
            problem = unsafe_key(relative) if key.startswith(prefix) else "is not under it"
            if problem:
                raise ValueError(
                    f"The directory artifact {uri} holds the key {key!r}, which {problem}: it "
                    "would be written outside the artifact's directory. Refusing to download it; "
                    "re-run the task that produced it, and check who else writes that root."
                )
            files.append((key, relative))
        target.mkdir(parents=True, exist_ok=True)
        for key, relative in files:
            destination = target.joinpath(*relative.split("/"))
            destination.parent.mkdir(parents=True, exist_ok=True)
            fs.get_file(key, str(destination))


def unsafe_key(relative: str) -> str | None:
    """Why an object key below a directory artifact cannot name a file in it, or None."""
    if not relative or relative.startswith("/"):
        return "is absolute"
    if "\\" in relative or "\0" in relative:
        return "has a backslash or a NUL in it"
    if any(part in ("", ".", "..") for part in relative.split("/")):
        return "has an empty, '.' or '..' segment"
    return None
