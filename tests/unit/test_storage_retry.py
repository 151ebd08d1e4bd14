"""The worker's object-store calls survive transient faults (5xx, throttling) and only those."""

from __future__ import annotations

import collections

import pytest
from botocore.exceptions import ClientError
from fsspec.implementations.memory import MemoryFileSystem

from airflow_stepop.artifacts import retry
from airflow_stepop.artifacts.retry import RetryingStorage, is_transient
from airflow_stepop.packaging.staging import StepIdentity, stage_step


def _slow_down() -> OSError:
    """What s3fs raises for S3's 503 SlowDown: an OSError caused by the ClientError."""
    error = ClientError(
        {"Error": {"Code": "SlowDown", "Message": "Please reduce your request rate."},
         "ResponseMetadata": {"HTTPStatusCode": 503}}, "PutObject",
    )  # fmt: skip
    try:
        raise OSError(5, "Please reduce your request rate.") from error
    except OSError as exc:
        return exc


class FlakyStore(MemoryFileSystem):
    """An in-memory object store whose every first call per (operation, path) answers 503."""

    protocol = "flaky"

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.calls: collections.Counter[tuple[str, str]] = collections.Counter()

    def _flaky(self, operation: str, path: str) -> None:
        self.calls[(operation, path)] += 1
        if self.calls[(operation, path)] == 1:
            raise _slow_down()

    def pipe_file(self, path, value, **kwargs):
        self._flaky("pipe_file", path)
        return super().pipe_file(path, value, **kwargs)

    def cat_file(self, path, *args, **kwargs):
        self._flaky("cat_file", path)
        return super().cat_file(path, *args, **kwargs)

    def exists(self, path, **kwargs):
        self._flaky("exists", path)
        return super().exists(path, **kwargs)


@pytest.fixture
def flaky(monkeypatch):
    monkeypatch.setattr(retry, "FIRST_DELAY_SECONDS", 0.001)
    store = FlakyStore(skip_instance_cache=True)
    store.store.clear()
    return store, RetryingStorage(resolver=lambda uri: (store, uri.split("://", 1)[1]))


def _step(x: int) -> int:
    return x + 1


def test_staging_a_step_and_reading_back_survive_a_503_on_every_first_call(flaky):
    store, storage = flaky
    staged = stage_step(
        _step, [41], {}, root="flaky://bucket/root",
        step=StepIdentity("dag", "run", "task", -1, 1), storage=storage,
    )  # fmt: skip
    spec = storage.read_json(staged.spec_uri)
    assert spec["args"] == [{"inline": 41}]
    assert max(store.calls.values()) == 2  # each call failed once, then succeeded
    assert storage.exists(staged.code_uri)


def test_a_missing_object_is_not_retried(flaky):
    store, storage = flaky
    store.calls[("cat_file", "bucket/none")] = 1  # past its transient fault
    with pytest.raises(FileNotFoundError):
        storage.read_bytes("flaky://bucket/none")
    assert store.calls[("cat_file", "bucket/none")] == 2  # one call only


def test_a_fault_that_lasts_fails_after_the_last_attempt(flaky, monkeypatch):
    store, storage = flaky
    monkeypatch.setattr(
        store, "_flaky", lambda operation, path: (_ for _ in ()).throw(_slow_down())
    )
    with pytest.raises(OSError, match="reduce your request rate"):
        storage.write_bytes("flaky://bucket/x", b"data")


@pytest.mark.parametrize(
    ("error", "transient"),
    [
        (_slow_down(), True),
        (ConnectionResetError("reset by peer"), True),
        (TimeoutError("read timed out"), True),
        (FileNotFoundError("no such key"), False),
        (PermissionError("AccessDenied"), False),
        (ValueError("bad"), False),
    ],
)
def test_which_errors_are_transient(error, transient):
    assert is_transient(error) is transient
