"""Private directories: caches that code is imported from or artifacts are loaded from.

On a shared host, a cache another user can write is a way to run their code as ours (an
extracted code tree imported by the job) or to feed our tasks their bytes. Every cache of the
provider lives under a directory made here: created 0700, and an existing one is used only when
this user owns it, nobody else may write to it, and its parent cannot be used to swap it (a
parent others may write to must be sticky, as ``/tmp`` is). Standard library only: the job's
runtime and the worker's caches use it alike.
"""

from __future__ import annotations

import contextlib
import getpass
import os
import stat
import tempfile
from pathlib import Path

CACHE_DIR_ENV = "STEPOP_CACHE_DIR"


class PrivateDirectoryError(PermissionError):
    """A cache directory that another user owns or may write to."""


def _owner() -> int | None:
    """This process's user id (None where the platform has none)."""
    return os.geteuid() if hasattr(os, "geteuid") else None


def user_tag() -> str:
    """What makes a directory name per user: the uid (the login name where there is none)."""
    uid = _owner()
    return str(uid) if uid is not None else getpass.getuser()


def _refuse(path: Path, problem: str) -> PrivateDirectoryError:
    return PrivateDirectoryError(
        f"The cache directory {path} {problem}: another user could put their code or bytes in "
        f"it. Use a directory of your own that only you may write to (chmod 700 {path}), or "
        f"set ${CACHE_DIR_ENV} to one."
    )


def check_private(path: Path) -> None:
    """Raise PrivateDirectoryError unless ``path`` is a directory only this user may change."""
    uid = _owner()
    if uid is None:  # pragma: no cover - Windows has no such owners or modes
        return
    link = os.lstat(path)
    if stat.S_ISLNK(link.st_mode) and link.st_uid != uid:
        raise _refuse(path, f"is a symbolic link owned by uid {link.st_uid}, not {uid}")
    info = os.stat(path)
    if not stat.S_ISDIR(info.st_mode):
        raise _refuse(path, "is not a directory")
    if info.st_uid != uid:
        raise _refuse(path, f"is owned by uid {info.st_uid}, not by this user (uid {uid})")
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise _refuse(path, f"may be written by others (mode {stat.filemode(info.st_mode)})")
    parent = os.stat(path.resolve().parent)
    # others may rename entries of a directory they may write, unless it is sticky (/tmp); a
    # group-writable parent of ours is a personal group's (umask 002), not another user's
    writers = stat.S_IWOTH | (stat.S_IWGRP if parent.st_uid != uid else 0)
    if parent.st_mode & writers and not parent.st_mode & stat.S_ISVTX:
        raise _refuse(
            path,
            f"is in {path.resolve().parent}, which others may write to without the sticky bit "
            f"(mode {stat.filemode(parent.st_mode)}), so they could rename it and put theirs",
        )


def private_dir(path: Path) -> Path:
    """``path``, created 0700 (its parents as usual) or checked when it exists."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, 0o700)
    check_private(path)
    return path


def job_cache_root() -> Path:
    """Where a job keeps the code and inputs it fetched: ``$STEPOP_CACHE_DIR`` (the local
    backend sets it to a directory of the worker's) or the temporary directory, then
    ``airflow-stepop-cache-<uid>``, private."""
    base = os.environ.get(CACHE_DIR_ENV) or tempfile.gettempdir()
    return private_dir(Path(base) / f"airflow-stepop-cache-{user_tag()}")
