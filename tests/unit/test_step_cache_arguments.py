"""The step cache's key and arguments: what changes the key, what does not, what is refused."""

from __future__ import annotations

from datetime import timedelta

import pytest

from airflow_stepop import LocalStepOperator
from airflow_stepop.artifacts.ref import ArtifactRef
from airflow_stepop.operators import step_cache
from airflow_stepop.packaging.cache_key import cache_key, shown_parts
from airflow_stepop.packaging.staging import StepIdentity, encode_step
from airflow_stepop.runtime.storage import Storage
from airflow_stepop.setting_values import SettingsError


def fit(data, rate=0.1):
    return data


def _key(tmp_path, *args, step="train", run="run_1", env=None, version=None, **kwargs):
    encoded = encode_step(
        fit, args, kwargs, root=f"file://{tmp_path}/root", storage=Storage(),
        step=StepIdentity("dag", run, step, -1, 1, "abc"),
    )  # fmt: skip
    try:
        return cache_key(encoded, dag_id="dag", backend="LocalBackend",
                         environment="process:python", env_vars=env or {},
                         cache_version=version)  # fmt: skip
    finally:
        encoded.discard()


@pytest.fixture(autouse=True)
def _bundle_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path / "home"))


def _ref(uri: str) -> ArtifactRef:
    return ArtifactRef(uri=uri, sha256="ab" * 32, size=10, materializer="numpy",
                       type_name="numpy.ndarray", digest_kind="written")  # fmt: skip


def test_the_run_try_and_task_are_not_in_the_key(tmp_path):
    assert _key(tmp_path, [1, 2]).digest == _key(tmp_path, [1, 2], step="other", run="r2").digest


def test_an_artifact_is_keyed_by_its_digest_not_where_it_lies(tmp_path):
    here = _key(tmp_path, _ref(f"file://{tmp_path}/root/a/return_value.npy"))
    there = _key(tmp_path, _ref(f"file://{tmp_path}/root/b/return_value.npy"))
    assert here.digest == there.digest


def test_a_dict_is_keyed_as_the_step_gets_it_its_keys_in_order(tmp_path):
    """A step may depend on the order (columns, say): two orders are two keys, never a hit of
    the other's result."""
    assert _key(tmp_path, {"a": 1, "b": 2}).digest != _key(tmp_path, {"b": 2, "a": 1}).digest
    assert _key(tmp_path, {"a": 1, "b": 2}).digest == _key(tmp_path, {"a": 1, "b": 2}).digest


@pytest.mark.parametrize(
    "changed",
    [
        {"args": ([1, 3],)},
        {"rate": 0.2},
        {"env": {"MODE": "fast"}},
        {"version": "2"},
    ],
    ids=["an input", "a keyword input", "the job's environment", "cache_version"],
)
def test_what_the_result_depends_on_changes_the_key(tmp_path, changed):
    args = changed.pop("args", ([1, 2],))
    assert _key(tmp_path, *args, **changed).digest != _key(tmp_path, [1, 2]).digest


def test_the_key_s_parts_are_shown_for_the_log(tmp_path):
    key = _key(tmp_path, [1, 2], rate=0.5, version="v3")
    shown = shown_parts(key)
    assert shown.startswith(key.digest[:16])
    for part in ("op_args[0]=[1,2]", "rate=0.5", "cache_version='v3'", "backend=LocalBackend"):
        assert part in shown


@pytest.mark.parametrize(
    ("argument", "value", "named"),
    [
        ("cache", "yes", "cache='yes' must be True or False"),
        ("cache", 1, "cache=1 must be True or False"),
        ("cache_version", "", "cache_version='' must be a non-empty string"),
        ("cache_version", "  ", "cache_version='  ' must be a non-empty string"),
        ("cache_version", 2, "cache_version=2 must be a non-empty string"),
        ("cache_expires_after", 0, "cache_expires_after=0 must be a positive"),
        ("cache_expires_after", timedelta(seconds=-1), "must be a positive"),
        ("cache_expires_after", "7d", "cache_expires_after='7d' must be a positive"),
        ("cache_expires_after", True, "cache_expires_after=True must be a positive"),
    ],
)
def test_a_bad_cache_argument_fails_the_dag_import_naming_it(argument, value, named):
    with pytest.raises(SettingsError, match=named.replace("(", r"\(").replace("[", r"\[")):
        LocalStepOperator(task_id="t", python_callable=fit, op_args=[1], **{argument: value})


def test_the_expiry_takes_a_timedelta_or_seconds():
    step = LocalStepOperator(task_id="t", python_callable=fit, op_args=[1], cache=True,
                             cache_expires_after=timedelta(days=2))  # fmt: skip
    assert step.cache_expires_after == 2 * 86400.0
    step = LocalStepOperator(task_id="t", python_callable=fit, op_args=[1], cache_expires_after=60)
    assert step.cache_expires_after == 60.0


def test_a_cache_version_rendered_natively_to_a_number_is_its_text():
    step = LocalStepOperator(task_id="t", python_callable=fit, op_args=[1], cache=True,
                             cache_version="{{ var.value.v }}")  # fmt: skip
    step.cache_version = 2  # render_template_as_native_obj=True made "2" the int 2
    assert step_cache.settings(step)[1] == "2"


def test_a_cache_version_templated_to_empty_fails_the_task_naming_it():
    step = LocalStepOperator(task_id="t", python_callable=fit, op_args=[1], cache=True,
                             cache_version="{{ params.v }}")  # fmt: skip
    step.cache_version = ""  # as Airflow rendered it
    with pytest.raises(SettingsError, match=r"cache_version rendered to ''"):
        step_cache.settings(step)


def test_caching_is_off_unless_asked(monkeypatch):
    step = LocalStepOperator(task_id="t", python_callable=fit, op_args=[1])
    assert step_cache.settings(step)[0] is False
    monkeypatch.setenv("AIRFLOW__STEPOP__CACHE", "True")
    assert step_cache.settings(step)[0] is True
    step = LocalStepOperator(task_id="t", python_callable=fit, op_args=[1], cache=False)
    assert step_cache.settings(step)[0] is False  # the step's own word wins
