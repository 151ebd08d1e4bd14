"""The Airflow context a step's parameters name, and the secrets its arguments may not hold:
what its job gets, and what is refused."""

from __future__ import annotations

import datetime as dt
import pickle

import pendulum
import pytest

from airflow_stepop.operators.context import context_arguments, without_pendulum
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
    "conn": object(),
    "task": object(),
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


def test_dates_rendered_natively_reach_the_job_as_the_standard_library_s():
    """``{{ logical_date }}`` with render_template_as_native_obj is a pendulum DateTime: pickled
    as it is, a job without pendulum (a slim cloud image) fails to read its arguments."""
    when = pendulum.datetime(2026, 11, 24, 6, tz="Europe/Paris")
    rendered = ([when, {"day": when.date()}], {"window": pendulum.duration(hours=6), "n": 3})

    args, kwargs = without_pendulum(rendered)

    assert b"pendulum" not in pickle.dumps((args, kwargs))
    assert args[0] == when and type(args[0]) is dt.datetime
    assert args[1]["day"] == dt.date(2026, 11, 24)
    assert kwargs == {"window": dt.timedelta(hours=6), "n": 3}


def test_values_with_no_pendulum_in_them_are_passed_as_they_are():
    rows = [1.0] * 1000
    assert without_pendulum(rows) is rows  # no copy of a big argument
    assert type(without_pendulum(pendulum.now().naive())) is dt.datetime


def test_kwargs_stay_the_step_s_own():
    """``def train(**hp): Model(**hp)`` must not get a dozen context values."""

    def step(ds=None, **hp):
        return hp

    assert _given(step) == {"ds": "2026-11-24"}


def test_a_missing_earlier_success_is_none_not_airflow_s_lazy_proxy():
    """The job may lack lazy_object_proxy: its pickle would not load there."""
    import lazy_object_proxy

    def step(prev_end_date_success=None, prev_start_date_success=None):
        return prev_end_date_success

    context = {
        "prev_end_date_success": lazy_object_proxy.Proxy(lambda: None),
        "prev_start_date_success": lazy_object_proxy.Proxy(lambda: LOGICAL),
    }
    given = _given(step, context=context)
    assert given["prev_end_date_success"] is None
    assert type(given["prev_start_date_success"]) is dt.datetime
    assert b"proxy" not in pickle.dumps(given)


def test_what_a_partial_binds_is_not_replaced():
    import functools

    def step(params=None, run_id=None):
        return params

    bound = functools.partial(step, params={"lr": 0.1})
    assert _given(bound) == {"run_id": "manual__1"}


def test_given_arguments_win_over_the_context():
    def step(ds, run_id=None, params=None):
        return ds

    given = _given(step, op_args=["2020-01-01"], op_kwargs={"run_id": "mine"})
    assert given == {"params": {"n": 9}}


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


def test_a_name_the_running_context_lacks_is_the_user_s_own():
    def step(x, reason=None, exception=None):  # never in a running task's context
        return x

    assert _given(step, op_args=[1]) == {}


def test_a_worker_only_name_given_as_an_argument_is_the_user_s_own():
    def step(task):
        return task

    assert _given(step, op_kwargs={"task": "classify"}) == {}
    assert _given(step, op_args=["classify"]) == {}
