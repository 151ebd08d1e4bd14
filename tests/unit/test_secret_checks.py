"""A value Airflow masks as a secret never leaves the worker with a step: not in what its
callable captures (pickled into the code bundle), its arguments in any container, its
DockerSettings (baked into an image), however short the masker lets a secret be. Each refusal
comes before anything is written to the artifact root or built, names where the value is, and
does not show it."""

from __future__ import annotations

import collections
import dataclasses
import functools
import sys
import uuid
from pathlib import Path
from types import SimpleNamespace

import pytest
from airflow.sdk import BaseHook
from airflow.sdk.bases.operator import ExecutorSafeguard

from airflow_stepop import LocalStepOperator
from airflow_stepop.backends.local.backend import LocalBackend
from airflow_stepop.settings import DockerSettings, SettingsError

TI = SimpleNamespace(
    dag_id="d", run_id="r", task_id="t", map_index=-1, try_number=1, id=str(uuid.uuid4())
)
# What a DAG file's module-level ``BaseHook.get_connection(...)`` leaves in its globals.
CONNECTION = None


class Unreached(RuntimeError):
    """The step went on to its submit (where an image is built and pushed)."""


@dataclasses.dataclass
class Database:
    host: str
    password: str


Login = collections.namedtuple("Login", "user password")


class Client:
    def __init__(self, token: str) -> None:
        self.headers = {"Authorization": f"Bearer {token}"}


def _connection(monkeypatch: pytest.MonkeyPatch, password: str) -> object:
    """A connection read as a task reads one: Airflow masks its password from then on."""
    conn_id = f"stepop_secret_{uuid.uuid4().hex[:8]}"
    uri = f"postgresql://app:{password}@db.example:5432/app"
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", uri)
    return BaseHook.get_connection(conn_id)


def _password() -> str:
    return f"PW-{uuid.uuid4().hex}-stepop"


def _uses_the_connection() -> str:
    return CONNECTION.host


def _two(token: str, rows: int) -> int:
    return rows


def _refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **arguments: object) -> str:
    """Run a local step's execute() to its refusal; nothing may be staged or submitted."""
    root = tmp_path / "root"
    monkeypatch.setattr(LocalBackend, "submit", lambda self, request: (_ for _ in ()).throw(
        Unreached()))  # fmt: skip
    op = LocalStepOperator(task_id="t", artifact_root=f"file://{root}", **arguments)
    with pytest.raises(SettingsError) as refused:
        op.execute({"ti": TI}, LocalStepOperator__sentinel=ExecutorSafeguard.sentinel_value)
    assert not root.exists() or not any(root.rglob("*")), "something was written to the root"
    return str(refused.value)


def test_a_connection_captured_as_a_closure_variable_is_refused(tmp_path, monkeypatch):
    """Before: the closure's value was pickled into callable.pkl, uploaded for ever."""
    password = _connection(monkeypatch, _password()).password

    def step() -> int:
        return len(password)

    message = _refused(tmp_path, monkeypatch, python_callable=step)
    assert "its closure variable 'password' holds a value Airflow masks as a secret" in message
    assert "Capture the connection id or the Variable's key, not the value" in message
    assert password not in message


def test_a_connection_read_at_module_level_and_used_by_the_step_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "CONNECTION", _connection(monkeypatch, _password()))
    message = _refused(tmp_path, monkeypatch, python_callable=_uses_the_connection)
    assert "its global 'CONNECTION'.password holds a value Airflow masks" in message
    assert CONNECTION.password not in message


@pytest.mark.parametrize("as_keyword", [False, True])
def test_a_secret_bound_by_a_partial_is_refused(tmp_path, monkeypatch, as_keyword):
    token = _connection(monkeypatch, _password()).password
    step = functools.partial(_two, token=token) if as_keyword else functools.partial(_two, token)
    message = _refused(tmp_path, monkeypatch, python_callable=step, op_kwargs={"rows": 1})
    where = "python_callable.keywords['token']" if as_keyword else "python_callable.args[0]"
    assert f"{where} holds a value Airflow masks as a secret" in message
    assert token not in message


def test_a_secret_added_to_the_masker_after_its_bundle_was_cached_is_refused(tmp_path):
    """A cached bundle's callable is pickled again at each lookup, and checked again: a task
    process may know a secret the one that built the bundle did not."""
    from airflow.sdk.log import mask_secret

    from airflow_stepop.packaging.bundle import build_bundle
    from airflow_stepop.packaging.cache import BundleCache

    token = _password()

    def step() -> str:
        return token

    cache = BundleCache(tmp_path / "bundles", settle_seconds=0)
    build_bundle(step, cache)  # not a secret yet: built and cached
    assert cache.find(step, rebuild=lambda: b"") is not None
    mask_secret(token)
    with pytest.raises(SettingsError, match="its closure variable 'token' holds a value Airflow"):
        cache.find(step, rebuild=lambda: b"")


@pytest.mark.parametrize(
    ("value", "where"),
    [
        ({"db1", "{secret}"}, "op_kwargs['rows'] (an item of the set)"),
        (frozenset({"{secret}"}), "op_kwargs['rows'] (an item of the set)"),
        (Database("db1", "{secret}"), "op_kwargs['rows'].password"),
        (Login("app", "{secret}"), "op_kwargs['rows'].password"),
        (Client("{secret}"), "op_kwargs['rows'].headers['Authorization']"),
        (b"user:{secret}", "op_kwargs['rows']"),
        ({"hosts": [("db1", ["{secret}"])]}, "op_kwargs['rows']['hosts'][0][1][0]"),
    ],
    ids=["set", "frozenset", "dataclass", "namedtuple", "object", "bytes", "nested"],
)
def test_a_secret_in_any_container_of_an_argument_is_refused(tmp_path, monkeypatch, value, where):
    """Before: only strings inside lists, tuples and dicts were looked at."""
    secret = _connection(monkeypatch, _password()).password
    value = _with(value, secret)
    message = _refused(
        tmp_path, monkeypatch, python_callable=_two, op_args=["t"], op_kwargs={"rows": value}
    )
    assert f"{where} holds a value Airflow masks" in message
    assert secret not in message


def _with(value: object, secret: str) -> object:
    """``value`` with "{secret}" replaced by the secret, in whatever holds it."""
    if isinstance(value, str):
        return value.replace("{secret}", secret)
    if isinstance(value, bytes):
        return value.replace(b"{secret}", secret.encode())
    if isinstance(value, (set, frozenset)):
        return type(value)(_with(v, secret) for v in value)
    if isinstance(value, Database):
        return Database(value.host, _with(value.password, secret))
    if isinstance(value, Login):
        return Login(value.user, _with(value.password, secret))
    if isinstance(value, Client):
        return Client(secret)
    if isinstance(value, dict):
        return {k: _with(v, secret) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_with(v, secret) for v in value)
    return value


def test_a_five_character_password_is_refused_as_airflow_masks_it(tmp_path, monkeypatch):
    """Airflow masks a secret of [logging] min_length_masked_secret characters (5) or more;
    before, one shorter than 8 passed into the spec."""
    password = _connection(monkeypatch, "q~Z7v").password
    message = _refused(
        tmp_path, monkeypatch, python_callable=_two, op_args=[f"pg://app:{password}@db"],
        op_kwargs={"rows": 1},
    )  # fmt: skip
    assert "op_args[0] holds a value Airflow masks as a secret" in message
    assert password not in message


@pytest.mark.parametrize("field", ["environment", "build_args"])
def test_a_secret_in_docker_settings_is_refused_before_any_build_or_push(
    tmp_path, monkeypatch, field
):
    """Before: baked into the image's layers and pushed to its registry."""
    secret = _connection(monkeypatch, _password()).password
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text("FROM python:3.11-slim\nARG DB_PASSWORD\n")
    docker = DockerSettings(dockerfile=dockerfile, **{field: {"DB_PASSWORD": secret}})
    message = _refused(tmp_path, monkeypatch, python_callable=_two, op_args=["t", 1],
                       docker=docker)  # fmt: skip
    assert f".docker.{field}['DB_PASSWORD'] holds a value Airflow masks" in message
    assert "Build the image without it" in message
    assert secret not in message


def test_values_airflow_does_not_mask_pass(monkeypatch):
    from airflow_stepop.packaging.by_value import pickle_by_value
    from airflow_stepop.packaging.secret_checks import refuse_secret_arguments

    _connection(monkeypatch, _password())
    given = {"hosts": {"db1"}, "db": Database("db1", "conn-id-not-its-password"), "raw": b"x"}
    refuse_secret_arguments("LocalStepOperator", ["s3://models/x"], given)
    conn_id = "stepop_db"

    def step() -> str:
        return conn_id

    assert pickle_by_value(step).pickle


@pytest.mark.parametrize(
    ("make", "where"),
    [
        (lambda s: __import__("numpy").array(["db1", s]), "op_kwargs['rows'][1]"),
        (lambda s: __import__("numpy").array([["a", s]], dtype=object), "op_kwargs['rows'][1]"),
        (lambda s: __import__("pandas").Series(["db1", s]), "op_kwargs['rows'][1]"),
        (
            lambda s: __import__("pandas").DataFrame({"host": ["db1"], "password": [s]}),
            "op_kwargs['rows']['password'][0]",
        ),
    ],
    ids=["str array", "object array", "series", "dataframe"],
)
def test_a_secret_in_an_array_or_a_frame_is_refused(tmp_path, monkeypatch, make, where):
    """An array keeps its text in its buffer (a '<U' array as UTF-32, a frame compressed as
    parquet): neither its attributes nor a byte scan of what is uploaded would find it."""
    secret = _connection(monkeypatch, _password()).password
    message = _refused(
        tmp_path, monkeypatch, python_callable=_two, op_args=["t"], op_kwargs={"rows": make(secret)}
    )
    assert f"{where} holds a value Airflow masks" in message
    assert secret not in message
