"""Artifact digests: sha256 over fixed-size chunks, hashed on every core while the I/O runs.

The side that writes an artifact records its digest (``ArtifactRef.sha256``) and the kind of
digest it took (``ArtifactRef.digest_kind``); a reader recomputes the same kind over the bytes
it is about to load and refuses them when the two differ. The kinds:

``sha256-chunked-8MiB`` (what artifacts are written with)
    The sha256 of the concatenated binary sha256s of the file's consecutive 8 MiB (8,388,608
    byte) chunks, the last one possibly shorter; an empty file has no chunk, so its digest is
    the sha256 of nothing. Each chunk is hashed on its own, so all cores hash at once while
    the file is written or read. It is as strong as sha256: two files with the same digest
    have the same list of chunk sha256s (or the outer sha256 collides), and with a fixed
    chunk size that list fixes every byte (or a chunk's sha256 collides).
``sha256`` (references written by earlier releases)
    The sha256 of the whole file: one sequential pass, about 1.5 GB/s on one x86 core with
    SHA extensions, which holds a verified transfer (a writer's pass and a reader's) near
    half the speed of a raw copy.

A directory's digest is the sha256 of one line per file,
``<path relative to the directory>\\0<size>\\0<the file's digest of the same kind>\\n``, in
``iter_tree`` order: a directory's files by name, then its subdirectories by name, each the
same way; a symbolic link to a directory counts as the directory it points to.
"""

from __future__ import annotations

import hashlib
import os
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, ClassVar

SHA256 = "sha256"
CHUNKED = "sha256-chunked-8MiB"
CHUNK_SIZE = 8 * 1024 * 1024
WRITTEN_KIND = CHUNKED  # what new artifacts record
LEGACY_KIND = SHA256  # what a reference that names no kind was written with
# Less than this is hashed in the calling thread: handing it to another costs more than it saves.
THREAD_MIN = 1024 * 1024
# Hashing threads at most: 8 hash about 12 GB/s, more than storage delivers; each may hold
# two chunks in flight (bounded memory when a reader outruns the hashing).
WORKERS_MAX = 8


def _cpus() -> int:
    """Cores this process may run on (a container's CPU set, not the host's core count)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - macOS
        return os.cpu_count() or 1


def _finish(hasher: Any, piece: memoryview) -> bytes:
    hasher.update(piece)
    return hasher.digest()


def _sha256(piece: memoryview) -> bytes:
    return hashlib.sha256(piece).digest()


def _fill_and_hash(fill: Callable[[memoryview], None], chunk: memoryview) -> bytes:
    fill(chunk)
    return hashlib.sha256(chunk).digest()


class Digest:
    """The digest of one file's bytes, fed in order, in pieces of any size.

    ``update`` may hash on other threads (hashlib releases the GIL): the caller keeps the bytes
    unchanged until ``wait()`` returns. Use as a context manager, or call ``hexdigest()``,
    which waits and releases the threads.
    """

    kind: ClassVar[str]

    def __init__(self, workers: int) -> None:
        self._workers = workers
        self._pool: ThreadPoolExecutor | None = None
        self._inflight: deque[Future[Any]] = deque()

    def _submit(self, call: Any, *args: Any) -> Future[Any]:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self._workers, thread_name_prefix="stepop-digest")
        future = self._pool.submit(call, *args)
        self._inflight.append(future)
        while len(self._inflight) > 2 * self._workers:  # bounds what a fast reader holds
            self._inflight.popleft().result()
        return future

    def update(self, data: Any) -> None:
        raise NotImplementedError

    def update_from(self, chunk: memoryview, fill: Callable[[memoryview], None]) -> None:
        """``update(chunk)`` once ``fill(chunk)`` has put the chunk's bytes there.

        The chunked kind runs both on a worker thread for a whole chunk, so filling (reading
        a file) runs on every core too; other kinds fill here, in order.
        """
        fill(chunk)
        self.update(chunk)

    def wait(self) -> None:
        """Return once every byte handed to ``update`` so far is hashed."""
        while self._inflight:
            self._inflight.popleft().result()

    def _root(self) -> bytes:
        raise NotImplementedError

    def hexdigest(self) -> str:
        try:
            self.wait()
            return self._root().hex()
        finally:
            self.close()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
            self._pool = None

    def __enter__(self) -> Digest:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Sha256Digest(Digest):
    """sha256 of the whole file; large pieces are hashed on one helper thread, in order."""

    kind = SHA256

    def __init__(self) -> None:
        super().__init__(workers=1)
        self._hasher = hashlib.sha256()

    def update(self, data: Any) -> None:
        view = memoryview(data).cast("B")
        if len(view) < THREAD_MIN:
            self.wait()
            self._hasher.update(view)
        else:  # one worker runs the updates in the order they were handed over
            self._submit(self._hasher.update, view)

    def _root(self) -> bytes:
        return self._hasher.digest()


class ChunkedDigest(Digest):
    """sha256 of the chunks' sha256s; whole chunks are hashed on a thread per core."""

    kind = CHUNKED

    def __init__(self) -> None:
        super().__init__(workers=min(_cpus(), WORKERS_MAX))
        self._chunks: list[bytes | Future[bytes]] = []
        self._current = hashlib.sha256()  # the chunk begun by earlier pieces
        self._filled = 0

    def _digest(self, call: Any, *args: Any) -> bytes | Future[bytes]:
        if len(args[-1]) < THREAD_MIN:
            return call(*args)
        return self._submit(call, *args)

    def update(self, data: Any) -> None:
        view = memoryview(data).cast("B")
        while len(view):
            take = min(CHUNK_SIZE - self._filled, len(view))
            piece, view = view[:take], view[take:]
            if self._filled + take < CHUNK_SIZE:  # the chunk goes on in a later piece
                self._current.update(piece)  # in order: earlier parts were hashed here too
                self._filled += take
            elif self._filled == 0:
                self._chunks.append(self._digest(_sha256, piece))
            else:
                self._chunks.append(self._digest(_finish, self._current, piece))
                self._current, self._filled = hashlib.sha256(), 0

    def update_from(self, chunk: memoryview, fill: Callable[[memoryview], None]) -> None:
        if self._filled or len(chunk) != CHUNK_SIZE:
            super().update_from(chunk, fill)
        else:
            self._chunks.append(self._submit(_fill_and_hash, fill, chunk))

    def _root(self) -> bytes:
        parts = [c if isinstance(c, bytes) else c.result() for c in self._chunks]
        if self._filled:
            parts.append(self._current.digest())
        return hashlib.sha256(b"".join(parts)).digest()


KINDS: dict[str, type[Digest]] = {SHA256: Sha256Digest, CHUNKED: ChunkedDigest}


def require_kind(kind: str) -> str:
    """``kind`` itself; one this runtime does not know is a clear error."""
    if kind not in KINDS:
        raise ValueError(
            f"Unknown artifact digest kind {kind!r}; this runtime knows {sorted(KINDS)}. The "
            "artifact was written by a newer airflow-stepop: upgrade the worker."
        )
    return kind


def new_digest(kind: str) -> Digest:
    """An empty digest of ``kind``."""
    return KINDS[require_kind(kind)]()


def file_digest(path: Path, kind: str) -> tuple[str, int]:
    """The digest of a file's bytes and their count, read once in chunk-sized blocks."""
    size = 0
    with open(path, "rb", buffering=0) as handle, new_digest(kind) as digest:
        while block := handle.read(CHUNK_SIZE):
            digest.update(block)  # a new bytes object per block: nothing to wait for
            size += len(block)
        return digest.hexdigest(), size


class SymlinkLoopError(ValueError):
    """A directory tree with a symbolic link to a directory that holds the link."""


def iter_tree(root: Path) -> Iterator[Path]:
    """Files under a directory, in a stable order: a directory's files by name, then its
    subdirectories by name, each the same way. A symbolic link to a directory is followed (a
    returned checkpoint's ``latest -> step-100`` keeps its files); one that leads back into
    a directory above it is refused, as the tree would have no end."""
    yield from _walk(Path(root), [_identity(root)])


def _identity(path: Path | str) -> tuple[int, int]:
    info = os.stat(path)
    return info.st_dev, info.st_ino


def _walk(directory: Path, above: list[tuple[int, int]]) -> Iterator[Path]:
    with os.scandir(directory) as scan:
        entries = sorted(scan, key=lambda entry: entry.name)
    subdirectories = []
    for entry in entries:
        if entry.is_dir():  # follows a link
            subdirectories.append(entry)
        else:
            yield directory / entry.name
    for entry in subdirectories:
        identity = _identity(entry.path)
        if identity in above:
            raise SymlinkLoopError(
                f"{entry.path} is a symbolic link to {os.path.realpath(entry.path)}, a directory "
                "that holds it: its files would repeat without end. Remove the link, or make it "
                "point outside the directory."
            )
        yield from _walk(directory / entry.name, [*above, identity])


class TreeDigest:
    """A directory's digest, fed one file at a time in ``iter_tree`` order."""

    def __init__(self) -> None:
        self._hasher = hashlib.sha256()
        self.size = 0

    def add(self, relative: str, size: int, hexdigest: str) -> None:
        self._hasher.update(f"{relative}\0{size}\0{hexdigest}\n".encode())
        self.size += size

    def hexdigest(self) -> str:
        return self._hasher.hexdigest()


# The digest of a directory with no file in it. Object stores keep no empty directory, so such an
# artifact has nothing to read back: its reference alone says what it was.
EMPTY_TREE = TreeDigest().hexdigest()


def digest_of(path: Path, kind: str) -> tuple[str, int]:
    """The digest of ``kind`` and the size of a file, or of a directory tree."""
    if not path.is_dir():
        return file_digest(path, kind)
    tree = TreeDigest()
    for file in iter_tree(path):
        hexdigest, size = file_digest(file, kind)
        tree.add(file.relative_to(path).as_posix(), size, hexdigest)
    return tree.hexdigest(), tree.size
