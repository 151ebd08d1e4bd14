"""The Airflow context a step's parameters name: what its job gets, and what is refused."""

from __future__ import annotations

import datetime as dt
import pickle

import pendulum
import pytest

from airflow_stepop.operators.context import context_arguments
from airflow_stepop.settings import SettingsError

LOGICAL = pendulum.datetime(2026, 11, 24, 6, 30, tz="Europe/Paris")
CONTEXT = {
    "ds": "2026-11-24",
    "run_id": "manual__1",
    "logical_date": LOGICAL,
    "data_interval_start": None,
    "params": {"n": 9},
    "ti": object(),
    "dag_run": object(),
}


def _given(function, op_args=(), op_kwargs=None, context=CONTEXT):
    return context_arguments("LocalStepOperator", function, op_args, op_kwargs or {}, context)


def test_parameters_named_like_context_values_get_them_as_plain_data():
    def step(x, ds, params, logical_date=None, data_interval_start=None, other=None):
        return x

    given = _given(step, op_args=[1])
    assert given == {
        "ds": "2026-11-24",
        "params": {"n": 9},
        "logical_date": LOGICAL,
        "data_interval_start": None,
    }
    when = given["logical_date"]
    assert type(when) is dt.datetime  # the job may have no pendulum to unpickle one
    assert when.utcoffset() == dt.timedelta(hours=1)
    assert b"pendulum" not in pickle.dumps(given)


def test_a_kwargs_step_gets_every_sendable_value_and_nothing_of_the_worker():
    def step(**context):
        return context

    assert set(_given(step)) == {"ds", "run_id", "logical_date", "data_interval_start", "params"}


def test_given_arguments_win_over_the_context():
    def step(ds, run_id=None, **rest):
        return ds

    given = _given(step, op_args=["2020-01-01"], op_kwargs={"run_id": "mine"})
    assert "ds" not in given and "run_id" not in given
    assert given["params"] == {"n": 9}


def test_a_value_missing_from_the_context_leaves_the_parameter_to_its_default():
    def step(ds=None):  # a run without a logical date has no ds
        return ds

    assert _given(step, context={"run_id": "manual__1"}) == {}


@pytest.mark.parametrize("name", ["ti", "dag_run", "conn"])
def test_a_parameter_named_like_a_worker_only_value_is_refused_with_the_fix(name):
    namespace: dict = {}
    exec(f"def step(x, {name}=None):\n    return x\n", namespace)
    with pytest.raises(SettingsError) as error:
        _given(namespace["step"], op_args=[1])
    message = str(error.value)
    assert f"parameter {name!r} is named like Airflow's context value" in message
    assert "op_kwargs={'try_number': '{{ ti.try_number }}'}" in message
    assert "rename the parameter" in message


def test_a_worker_only_name_given_as_an_argument_is_the_user_s_own():
    def step(task):
        return task

    assert _given(step, op_kwargs={"task": "classify"}) == {}
    assert _given(step, op_args=["classify"]) == {}
