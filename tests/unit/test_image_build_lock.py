"""``build_lock``: this host's lock on building one image tag (an ``flock`` under the cache)."""

from __future__ import annotations

import fcntl
import logging
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from airflow_stepop.images.builder import build_lock, lock_dir

REF = "127.0.0.1:5000/airflow-stepop-env:0123456789abcdef01234567"


def _lock_files(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.lock"))


def _free(path: Path) -> bool:
    """Whether another open file description can take the lock now (released right after)."""
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


class _Signal(logging.Handler):
    """Sets ``event`` when the builder logs a message containing ``text``."""

    def __init__(self, text: str) -> None:
        super().__init__(logging.INFO)
        self.text = text
        self.event = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if self.text in record.getMessage():
            self.event.set()


@pytest.fixture
def signal():
    logger = logging.getLogger("airflow_stepop.images.builder")
    handlers: list[_Signal] = []
    level = logger.level

    def make(text: str) -> _Signal:
        handler = _Signal(text)
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        handlers.append(handler)
        return handler

    yield make
    for handler in handlers:
        logger.removeHandler(handler)
    logger.setLevel(level)


def test_the_lock_lives_under_airflow_home(monkeypatch, tmp_path):
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path))
    assert lock_dir() == tmp_path / "stepop-cache" / "image-locks"
    with build_lock(REF) as waited:
        assert waited is False
        (path,) = _lock_files(tmp_path / "stepop-cache" / "image-locks")
        assert not _free(path)
    assert _free(path)


def test_a_second_taker_waits_until_the_first_releases(tmp_path, signal):
    waiting = signal("Waiting for another task on this host that is building")
    entered = threading.Event()
    outcome: dict[str, object] = {}

    def second() -> None:
        try:
            with build_lock(REF, tmp_path) as waited:
                entered.set()
                outcome["waited"] = waited
        except BaseException as exc:  # reported by the assertions below
            outcome["error"] = exc

    with build_lock(REF, tmp_path) as waited:
        assert waited is False
        thread = threading.Thread(target=second)
        thread.start()
        # the second taker says it waits, then blocks in flock: it cannot get in while we hold
        assert waiting.event.wait(60), outcome
        assert not entered.is_set()
    thread.join(60)
    assert not thread.is_alive()
    assert outcome == {"waited": True}


def test_other_tags_do_not_wait(tmp_path):
    with build_lock(REF, tmp_path), build_lock(REF + "-other", tmp_path) as waited:
        assert waited is False
    assert len(_lock_files(tmp_path)) == 2


def test_the_lock_is_released_when_the_build_raises(tmp_path):
    with pytest.raises(RuntimeError, match="build failed"), build_lock(REF, tmp_path):
        raise RuntimeError("build failed")
    (path,) = _lock_files(tmp_path)
    assert _free(path)


def test_the_lock_is_released_when_its_process_is_killed(tmp_path):
    code = (
        "import sys\n"
        "from pathlib import Path\n"
        "from airflow_stepop.images.builder import build_lock\n"
        f"with build_lock({REF!r}, Path({str(tmp_path)!r})):\n"
        "    print('locked', flush=True)\n"
        "    sys.stdin.read()\n"  # holds the lock until killed
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        (path,) = _lock_files(tmp_path)
        assert not _free(path)
    finally:
        holder.kill()
        holder.wait(60)
    assert holder.returncode == -9
    assert _free(path)


def test_an_unwritable_directory_means_no_lock_not_a_failure(tmp_path, caplog):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with caplog.at_level(logging.WARNING), build_lock(REF, blocker / "locks") as waited:
        assert waited is False
    assert "No build lock for" in caplog.text
