"""The task's failure message: the remote exception once, then what the job said before it."""

from __future__ import annotations

import json
import traceback

import pytest

from airflow_stepop import StepFailedError
from airflow_stepop.backends.outcome import step_failure
from airflow_stepop.runtime.storage import Storage


def _chained_traceback() -> str:
    try:
        try:
            {}["merchant_id"]
        except KeyError as exc:
            raise ValueError("no merchant column") from exc
    except ValueError:
        return traceback.format_exc()


@pytest.mark.parametrize("chained_by", ["raise from", "while handling"])
def test_the_log_tail_stops_before_the_whole_chain_of_the_remote_exception(tmp_path, chained_by):
    printed = _chained_traceback()
    if chained_by == "while handling":
        printed = printed.replace(
            "The above exception was the direct cause of the following exception:",
            "During handling of the above exception, another exception occurred:",
        )
    (tmp_path / "error.json").write_text(
        json.dumps({"type": "ValueError", "message": "no merchant column", "traceback": printed})
    )
    tail = ["loading features", "42 rows", *printed.rstrip().splitlines()]
    event = {"status": "failed", "handle": {"job_id": "j1", "run_uri": f"file://{tmp_path}"},
             "log_tail": tail}  # fmt: skip

    error = step_failure(event, Storage())

    assert isinstance(error, StepFailedError)
    message = str(error)
    assert message.count("Traceback (most recent call last):") == 2  # the remote one, once
    assert message.endswith("Last lines of the job's log:\nloading features\n42 rows")


def test_a_line_printed_before_the_exception_but_logged_after_it_stays(tmp_path):
    """stdout and stderr reach a service's log as two streams: their lines can cross."""
    printed = _chained_traceback()
    (tmp_path / "error.json").write_text(
        json.dumps({"type": "ValueError", "message": "no merchant column", "traceback": printed})
    )
    lines = printed.rstrip().splitlines()
    tail = ["[stepop] step d.t map_index=-1", *lines[:3], "about to fail", *lines[3:]]
    event = {"status": "failed", "handle": {"job_id": "j1", "run_uri": f"file://{tmp_path}"},
             "log_tail": tail}  # fmt: skip

    message = str(step_failure(event, Storage()))

    tail_shown = message.split("Last lines of the job's log:\n", 1)[1]
    assert tail_shown == "[stepop] step d.t map_index=-1\nabout to fail"


def test_an_entry_scripts_summary_line_after_the_traceback_is_not_shown_again(tmp_path):
    """Azure ML's entry script prints the exception's summary last, for the service's error."""
    printed = _chained_traceback()
    (tmp_path / "error.json").write_text(
        json.dumps({"type": "ValueError", "message": "no merchant column", "traceback": printed})
    )
    tail = ["loading features", *printed.rstrip().splitlines(), "ValueError: no merchant column"]
    event = {"status": "failed", "handle": {"job_id": "j1", "run_uri": f"file://{tmp_path}"},
             "log_tail": tail}  # fmt: skip

    message = str(step_failure(event, Storage()))

    assert message.endswith("Last lines of the job's log:\nloading features")
    assert message.count("ValueError: no merchant column") == 2  # "raised" and the traceback


def test_a_traceback_line_the_tail_keeps_cut_is_not_shown_again(tmp_path):
    """A long message (a large repr) is cut in the event's tail: still the traceback's line."""
    from airflow_stepop.backends.outcome import tail_line

    summary = f"ValueError: {'x' * 9000}"
    printed = f'Traceback (most recent call last):\n  File "s.py", line 1\n{summary}\n'
    (tmp_path / "error.json").write_text(
        json.dumps({"type": "ValueError", "message": "x" * 9000, "traceback": printed})
    )
    tail = ["loading", *map(tail_line, printed.rstrip().splitlines())]
    event = {"status": "failed", "handle": {"job_id": "j1", "run_uri": f"file://{tmp_path}"},
             "log_tail": tail}  # fmt: skip

    message = str(step_failure(event, Storage()))

    assert message.endswith("Last lines of the job's log:\nloading")


def _missing(module: str, tmp_path) -> str:
    """The task's failure message for a job whose step could not import ``module``."""
    said = f"No module named '{module}'"
    (tmp_path / "error.json").write_text(json.dumps({
        "type": "ModuleNotFoundError", "message": said,
        "traceback": f"Traceback (most recent call last):\nModuleNotFoundError: {said}\n",
    }))  # fmt: skip
    event = {"status": "failed", "handle": {"job_id": "j1", "run_uri": f"file://{tmp_path}"},
             "log_tail": []}  # fmt: skip
    return str(step_failure(event, Storage()))


def test_a_missing_module_the_worker_has_names_the_package_that_installs_it(tmp_path):
    """The import name is not always the package's: dateutil comes from python-dateutil."""
    from importlib.metadata import version

    message = _missing("dateutil", tmp_path)

    assert "The job's Python has no module 'dateutil'" in message
    pinned = f"python-dateutil=={version('python-dateutil')}"
    assert f"docker=DockerSettings(requirements=[{pinned!r}])" in message


def test_a_missing_part_of_a_package_the_job_has_is_a_version_mismatch(tmp_path):
    """A numpy 2 pickle read by numpy 1 says "No module named 'numpy._core'": numpy is there."""
    import numpy

    message = _missing("numpy._core", tmp_path)

    assert "The job has the package 'numpy' but not its module 'numpy._core'" in message
    assert "another version than the worker's" in message
    assert f"requirements=['numpy=={numpy.__version__}']" in message


def test_a_module_of_a_namespace_package_names_the_package_that_installs_it(tmp_path):
    """Many packages share google.*: the job lacking google.cloud.storage lacks
    google-cloud-storage, not another version of whichever package made google first."""
    from importlib.metadata import version

    message = _missing("google.cloud.storage", tmp_path)

    assert "The job's Python has no module 'google.cloud.storage'" in message
    pinned = f"google-cloud-storage=={version('google-cloud-storage')}"
    assert f"requirements=[{pinned!r}]" in message and "another version" not in message


def test_a_module_of_the_dags_folder_the_bundle_missed_says_to_import_it_by_name(
    tmp_path, monkeypatch
):
    dags = tmp_path / "dags"
    (dags / "stepop_features").mkdir(parents=True)
    (dags / "stepop_features" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(dags))

    message = _missing("stepop_features.scaling", tmp_path)

    assert "The job has no module 'stepop_features.scaling', which the worker has at" in message
    assert "Add `import stepop_features.scaling` to the module that defines the step" in message
    assert "requirements=" not in message  # never a PyPI name for a module of one's own


def test_a_module_nobody_has_says_its_package_name_may_differ(tmp_path):
    message = _missing("stepop_no_such_module", tmp_path)

    assert "The job's Python has no module 'stepop_no_such_module'" in message
    assert "its name on PyPI may differ" in message
    assert "requirements=['<the package that provides it>']" in message


def _error_of(code: str, tmp_path) -> dict:
    """The error.json the runtime writes for ``code`` run where a job runs: outside Airflow."""
    import subprocess
    import sys

    probe = (
        "import json, sys\n"
        f"try:\n    {code}\n"
        "except Exception as exc:\n"
        "    json.dump({'type': type(exc).__name__, 'module': type(exc).__module__,\n"
        "               'message': str(exc), 'traceback': ''}, sys.stdout)\n"
    )
    env = {"AIRFLOW_HOME": str(tmp_path / "home"), "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=120
    )
    return json.loads(done.stdout)


_READ_IN_THE_DAG = (
    "it cannot read Airflow's Variables or Connections (only AIRFLOW_VAR_* and AIRFLOW_CONN_* of "
    "its own environment, or a secrets backend its image configures). Read the value in the DAG "
    "instead and pass it as an argument, e.g. op_kwargs={'table': '{{ var.value.table }}'}"
)


@pytest.mark.parametrize(
    ("code", "said"),
    [
        ("from airflow.sdk import Variable; Variable.get('table')", _READ_IN_THE_DAG),
        ("from airflow.sdk import BaseHook; BaseHook.get_connection('warehouse')",
         _READ_IN_THE_DAG),
        ("from airflow.sdk import get_current_context; get_current_context()['ds']",
         "get_current_context() has no task there. Name what the step needs from the context "
         "as its parameters, e.g. def step(rows, ds, params):"),
    ],
)  # fmt: skip
def test_reading_airflow_from_a_step_says_the_job_runs_outside_airflow(tmp_path, code, said):
    (tmp_path / "error.json").write_text(json.dumps(_error_of(code, tmp_path)))
    event = {"status": "failed", "handle": {"job_id": "j1", "run_uri": f"file://{tmp_path}"}}

    message = str(step_failure(event, Storage()))

    assert "A step's job runs outside Airflow: " in message
    assert said in message


def test_a_data_file_missing_beside_the_bundled_modules_says_only_py_files_travel(tmp_path):
    said = (
        "[Errno 2] No such file or directory: '/tmp/airflow-stepop-cache/code/3f2a/code/"
        "helpers/config.json'"
    )
    (tmp_path / "error.json").write_text(json.dumps({
        "type": "FileNotFoundError", "module": "builtins", "message": said,
        "traceback": f"Traceback (most recent call last):\nFileNotFoundError: {said}\n",
    }))  # fmt: skip
    event = {"status": "failed", "handle": {"job_id": "j1", "run_uri": f"file://{tmp_path}"}}

    message = str(step_failure(event, Storage()))

    # right below what the step raised: a long traceback must not hide it
    raised, hint, traceback = message.split("\n\n")[1:4]
    assert raised == f"The step raised FileNotFoundError: {said}"
    assert hint.startswith("Only .py files travel in a step's code bundle")
    assert traceback.startswith("Remote traceback:")


def test_a_job_without_airflow_says_to_move_the_airflow_import(tmp_path):
    said = "No module named 'airflow'"
    (tmp_path / "error.json").write_text(json.dumps({
        "type": "ModuleNotFoundError", "message": said,
        "traceback": f"Traceback (most recent call last):\nModuleNotFoundError: {said}\n",
    }))  # fmt: skip
    event = {"status": "failed", "handle": {"job_id": "j1", "run_uri": f"file://{tmp_path}"}}

    message = str(step_failure(event, Storage()))

    assert "The job's Python has no Airflow" in message
    assert "Move the Airflow imports to the DAG file" in message


def test_a_missing_module_of_pythons_own_says_the_images_python_lacks_it(tmp_path):
    message = _missing("sqlite3", tmp_path)

    assert "which is part of Python itself" in message and "requirements=" not in message


def test_a_part_the_workers_package_lacks_too_is_no_version_mismatch(tmp_path):
    import numpy

    message = _missing("numpy.stepop_no_such_part", tmp_path)

    assert message.count(
        f"Neither the job nor the worker (numpy {numpy.__version__}) has the module "
        "'numpy.stepop_no_such_part': check the name"
    )
    assert "another version" not in message and "requirements=" not in message


@pytest.mark.parametrize("module", ["google", "google.cloud.stepop_not_installed"])
def test_a_namespace_no_one_package_makes_gets_the_plain_hint_not_the_dags_folder_one(
    tmp_path, module
):
    """google lives in site-packages, made by many packages: not a DAGs-folder module."""
    message = _missing(module, tmp_path)

    assert f"The job's Python has no module {module!r}" in message
    assert "its name on PyPI may differ" in message and "Add `import" not in message


def test_a_hint_that_cannot_be_made_leaves_the_failure_whole(tmp_path, monkeypatch):
    """A broken install (a dist-info without a name) must not replace the job's error."""
    from importlib import metadata

    def broken():
        raise ValueError("A distribution name is required.")

    monkeypatch.setattr(metadata, "packages_distributions", broken)
    message = _missing("stepop_anything", tmp_path)

    assert message.startswith("Step job j1 failed")
    assert "ModuleNotFoundError: No module named 'stepop_anything'" in message


@pytest.mark.parametrize(
    ("document", "said"),
    [
        ({"message": "boom"}, "The step raised : boom"),  # a job's own, without type or traceback
        (["not", "an", "object"], "is not an object"),
        ({"type": "E", "message": "x" * (2 << 20)}, "larger than 1048576 bytes"),
    ],
    ids=["fields missing", "not an object", "too large"],
)
def test_an_error_document_the_job_garbled_still_fails_the_step_with_the_job_s_failure(
    tmp_path, document, said
):
    """The job writes error.json: a field it lacks used to raise a KeyError of ours, which hid
    the step's failure, and the document was read whole whatever its size."""
    (tmp_path / "error.json").write_text(json.dumps(document))
    handle = {"job_id": "job-t1", "run_uri": tmp_path.as_uri()}
    event = {"status": "failed", "reason": "exit code 1", "handle": handle, "log_tail": ["end"]}
    error = step_failure(event, Storage())
    assert isinstance(error, StepFailedError)
    assert "Step job job-t1 failed: exit code 1" in str(error) and said in str(error)
