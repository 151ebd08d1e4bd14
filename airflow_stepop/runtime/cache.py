"""A bounded on-disk cache of verified downloads, shared by every process of one user.

Many tasks on one worker (mapped tasks loading one model, say) use one cache at once, so::

    <root>/                    a private directory (private.py)
      <key>/                   one entry per digest (64 hex digits)
        .lock                  shared-locked (flock) by each process using the entry
        .fetch                 exclusively locked while one process downloads into the entry
        .tmp-<random>/<name>   a download in progress, verified before it is published
        <name>                 a verified file or tree, published whole by a rename

A process takes the entry's shared lock before it looks inside and keeps it while it uses what
it found: a value read into memory releases it at once, a ``Path`` handed to the caller keeps it
until the process exits. Eviction (least recently used first, once the entries pass
``max_bytes``) takes an entry's exclusive lock without waiting, so an entry in use is skipped,
and renames the entry away before deleting it, so no process ever sees half an entry. A process
that opened a file before keeps reading it whatever happens to its name. Where ``fcntl`` is
missing there is no locking, and so no eviction.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

from airflow_stepop.runtime.private import private_dir

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

KEY = re.compile(r"[0-9a-f]{64}")
# A job's bound on each of its caches, in bytes (the local backend passes the worker's
# [stepop] artifact_cache_max_bytes); unset: DEFAULT_MAX_BYTES.
MAX_BYTES_ENV = "STEPOP_CACHE_MAX_BYTES"
DEFAULT_MAX_BYTES = 10 * 1024**3
LOCK_NAME = ".lock"
FETCH_NAME = ".fetch"
EVICT_NAME = ".evict"
# entries whose lock files this process holds until it exits (paths it handed out)
_HELD: dict[str, int] = {}


def max_bytes_from_env() -> int:
    """``$STEPOP_CACHE_MAX_BYTES``, else ``DEFAULT_MAX_BYTES``; a wrong value says so."""
    value = os.environ.get(MAX_BYTES_ENV, "")
    if not value:
        return DEFAULT_MAX_BYTES
    try:
        bound = int(value)
    except ValueError:
        bound = -1
    if bound < 0:
        raise ValueError(f"{MAX_BYTES_ENV}={value!r} must be a whole number of bytes >= 0")
    return bound


def tree_size(path: Path) -> int:
    """Bytes in the files under ``path`` (not following links)."""
    total = 0
    for directory, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(directory, name)).st_size
    return total


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


class Entry:
    """One digest's entry, shared-locked by this process while it is open."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def open(self) -> Entry:
        """Take the entry's shared lock; an entry evicted meanwhile is made anew."""
        if self._fd is not None:
            return self
        for _ in range(100):  # each turn loses only to an eviction, which is rare
            self.path.mkdir(mode=0o700, exist_ok=True)
            try:
                fd = os.open(self.path / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
            except FileNotFoundError:  # evicted between the two calls
                continue
            if fcntl is None:
                self._fd = fd
                return self
            fcntl.flock(fd, fcntl.LOCK_SH)
            try:
                same = os.stat(self.path / LOCK_NAME).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                self._fd = fd
                now = time.time_ns()  # not the file system's coarser clock: uses in a row
                os.utime(self.path, ns=(now, now))  # keep their order, for eviction
                return self
            os.close(fd)  # its entry was renamed away while we waited: start again
        raise RuntimeError(f"Could not open the cache entry {self.path}: evicted 100 times over")

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def keep(self) -> None:
        """Hold the entry until this process exits: the caller got a path inside it."""
        if self._fd is None:
            return
        key = str(self.path)
        if key in _HELD:  # held already: one lock per entry is enough
            os.close(self._fd)
        else:
            _HELD[key] = self._fd
        self._fd = None

    @contextlib.contextmanager
    def fetching(self) -> Iterator[None]:
        """One process at a time downloads into the entry; the others wait, then find it."""
        fd = os.open(self.path / FETCH_NAME, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        try:
            if fcntl is not None:
                fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def scratch(self) -> Path:
        """A new directory in the entry for a download, removed by ``discard``."""
        path = self.path / f".tmp-{secrets.token_hex(8)}"
        path.mkdir(mode=0o700)
        return path

    def publish(self, item: Path, name: str) -> Path:
        """Rename a verified ``item`` (in a scratch directory) to ``<entry>/<name>``. A tree
        another process published first is kept and ours dropped (the same digest)."""
        target = self.path / name
        try:
            os.replace(item, target)
        except OSError:
            if not target.is_dir():
                raise
        return target

    def set_aside(self, name: str) -> None:
        """Move ``<entry>/<name>`` (which failed its check) out of the way of a fresh copy: a
        process still reading it keeps what it opened; the entry's eviction removes it."""
        with contextlib.suppress(FileNotFoundError):
            os.rename(self.path / name, self.path / f".tmp-{secrets.token_hex(8)}")

    @staticmethod
    def discard(scratch: Path) -> None:
        shutil.rmtree(scratch, ignore_errors=True)

    def __enter__(self) -> Entry:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()


class DiskCache:
    """Entries named by digest under a private ``root``, at most ``max_bytes`` (None: no bound)
    once the entries in use are left out."""

    def __init__(self, root: Path, max_bytes: int | None = None) -> None:
        self.root = root
        self.max_bytes = max_bytes
        self._ready = False

    def entry(self, key: str) -> Entry:
        """The entry of a digest (not yet open)."""
        if not KEY.fullmatch(key):
            raise ValueError(
                f"Cache key {key!r} is not a sha256 (64 lowercase hex digits): the reference "
                "it came from was not written by airflow-stepop."
            )
        if not self._ready:
            private_dir(self.root)
            self._ready = True
        return Entry(self.root / key)

    def evict(self) -> int:
        """Remove the least recently used entries not in use until the cache fits in
        ``max_bytes``; bytes removed. Skipped while another process evicts."""
        if self.max_bytes is None or fcntl is None or not self.root.is_dir():
            return 0
        guard = os.open(self.root / EVICT_NAME, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        try:
            try:
                fcntl.flock(guard, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return 0
            return self._evict()
        finally:
            os.close(guard)

    def _evict(self) -> int:
        entries: list[tuple[float, int, Path]] = []
        for child in os.scandir(self.root):
            path = Path(child.path)
            if child.name.startswith(".evicted-"):  # left by an evictor that was killed
                _remove(path)
            elif KEY.fullmatch(child.name) and child.is_dir(follow_symlinks=False):
                mtime = child.stat(follow_symlinks=False).st_mtime
                entries.append((mtime, tree_size(path), path))
        total = sum(size for _, size, _ in entries)
        removed = 0
        for _, size, path in sorted(entries):
            if total <= self.max_bytes:  # type: ignore[operator]
                break
            if self._evict_one(path):
                total -= size
                removed += size
        return removed

    def _evict_one(self, path: Path) -> bool:
        try:
            fd = os.open(path / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        except OSError:
            return False
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False  # a process is using it
            gone = self.root / f".evicted-{secrets.token_hex(8)}"
            try:
                os.rename(path, gone)
            except OSError:
                return False
        finally:
            os.close(fd)
        _remove(gone)
        return True
