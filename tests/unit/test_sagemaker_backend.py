"""The SageMaker backend's request building, status mapping and the job's entry script.

No API call here: these are the pure parts (channels, path map, environment limits, names,
links, cost) and the entry script run as the service would run it, on a local /opt/ml tree.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from airflow_stepop.backends.base import JobRequest
from airflow_stepop.backends.bootstrap import bootstrap_environment
from airflow_stepop.backends.naming import job_name, key_prefix, task_key
from airflow_stepop.backends.sagemaker import backend as sm
from airflow_stepop.backends.sagemaker import job as sagemaker_job
from airflow_stepop.backends.sagemaker import launch as launch_module
from airflow_stepop.backends.sagemaker import launch as sagemaker_launch
from airflow_stepop.packaging.staging import StepIdentity, stage_step
from airflow_stepop.runtime.storage import Storage
from tests.step_modules import step_module

ROOT = "s3://bucket/stepop"
RUN = f"{ROOT}/dag/manual__2026-01-01T00_00_00_00_00/train/-1/1"
CODE = f"{ROOT}/code/{'a' * 64}.zip"
NAME_RULE = re.compile(r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$")


def _request(**environment: str) -> JobRequest:
    return JobRequest(
        job_name="dag-train-0123456789-t1",
        task_key="dag/run/train/-1",
        spec_uri=f"{RUN}/spec.json",
        run_uri=RUN,
        code_uri=CODE,
        environment=environment,
    )


def _ref(uri: str) -> dict:
    return {"ref": {"uri": uri, "sha256": "0" * 64, "size": 1, "materializer": "json"}}


def test_channels_carry_code_run_dir_and_upstream_prefixes_with_a_path_map():
    up = f"{ROOT}/dag/run/prep/-1/1/prep-job-t1/output/model/outputs"
    spec = {
        "args": [_ref(f"{up}/a.npy"), _ref(f"{RUN}/inputs/arg1.pkl")],
        "kwargs": {"more": {"list": [_ref(f"{up}/b.npy")], "tuple": False}},
    }
    channels, launch, env, output = sm.build_launch(_request(), spec, "dag-train-0123456789-t1")
    by_name = {c["ChannelName"]: c["DataSource"]["S3DataSource"]["S3Uri"] for c in channels}
    assert by_name == {"code": CODE, "run": RUN + "/", "in1": up + "/"}
    assert output == f"{RUN}/dag-train-0123456789-t1/output/model"
    assert launch["path_map"] == {
        CODE: f"input/data/code/{'a' * 64}.zip",
        RUN: "input/data/run",
        output: "model",
        up: "input/data/in1",
    }
    assert launch_module.code_path(_request()) == f"input/data/code/{'a' * 64}.zip"
    assert "PYTHONPATH" not in env  # the image's own PYTHONPATH stays; the entry script prepends
    # the runtime maps a ref URI to the channel's file
    storage = Storage(path_map={k: f"/opt/ml/{v}" for k, v in launch["path_map"].items()})
    assert storage.local_path(f"{up}/a.npy") == Path("/opt/ml/input/data/in1/a.npy")


def test_many_upstream_prefixes_are_merged_to_fit_twenty_channels():
    uris = [f"{ROOT}/dag/run/t{i}/-1/1/j{i}/output/model/outputs/x.npy" for i in range(30)]
    prefixes = sagemaker_launch.group_prefixes(uris, 18)
    assert len(prefixes) <= 18
    assert all(any(u.startswith(p + "/") for p in prefixes) for u in uris)


def test_an_input_outside_s3_is_refused_with_the_fix():
    spec = {"args": [_ref("file:///tmp/x.npy")], "kwargs": {}}
    with pytest.raises(sagemaker_launch.SageMakerConfigError, match="s3:// artifact_root"):
        sm.build_launch(_request(), spec, "j")


def test_environment_values_over_512_chars_travel_in_the_launch_document_whole():
    long = "x" * 2000
    _, launch, env, _ = sm.build_launch(_request(SHORT="1", LONG=long), {}, "j")
    assert env["SHORT"] == "1" and "LONG" not in env
    assert launch["environment"] == {"LONG": long}
    assert all(len(v) <= 512 for v in env.values())


@pytest.mark.parametrize(
    ("status", "secondary", "state"),
    [
        ("InProgress", "Starting", "pending"),
        ("InProgress", "Training", "running"),
        ("Stopping", "Stopping", "running"),
        ("Completed", "Completed", "succeeded"),
        ("Stopped", "Stopped", "stopped"),
        ("Stopped", "MaxRuntimeExceeded", "failed"),
    ],
)
def test_statuses_map_to_job_states(status, secondary, state):
    description = {"TrainingJobStatus": status, "SecondaryStatus": secondary}
    assert sagemaker_job.map_status(description).state == state


def test_a_failed_job_carries_its_failure_reason():
    status = sagemaker_job.map_status(
        {"TrainingJobStatus": "Failed", "FailureReason": "CapacityError: no ml.p5 capacity"}
    )
    assert status.state == "failed" and status.reason == "CapacityError: no ml.p5 capacity"


def test_job_names_are_valid_deterministic_and_share_the_key_hash_across_tries():
    key = task_key("a" * 200, "manual__2026-01-01T00:00:00+00:00", "t" * 200, 3)
    names = [job_name(key, n) for n in (1, 2, 10, 100)]
    assert all(NAME_RULE.match(n) and len(n) <= 63 for n in names)
    assert job_name(key, 1) == names[0]
    digest = key_prefix(key).rsplit("-", 1)[1]  # what find_active looks for
    own = sm.own_name_pattern(digest)
    assert all(own.search(n) for n in names)
    # the name a try takes when another try's job holds its own is found too (a retry after a
    # worker lost between that submit and its record re-attaches, no second job)
    assert own.search(job_name(key, 2, salt="aa1234"))
    assert not own.search(job_name(task_key("a", "r", "t", 3), 2))


def test_links_point_at_the_console_and_the_log_streams():
    links = sagemaker_job.console_links("eu-west-1", "my-job-t1")
    assert links["job"] == (
        "https://eu-west-1.console.aws.amazon.com/sagemaker/home?region=eu-west-1#/jobs/my-job-t1"
    )
    # the log group's streams, filtered on the job's: the console's own fragment encoding
    assert links["logs"] == (
        "https://eu-west-1.console.aws.amazon.com/cloudwatch/home?region=eu-west-1#logsV2:"
        "log-groups/log-group/$252Faws$252Fsagemaker$252FTrainingJobs"
        "$3FlogStreamNameFilter$3Dmy-job-t1$252F"
    )


def test_cost_is_price_times_billable_seconds_times_instance_count():
    description = {
        "TrainingJobName": "j",
        "BillableTimeInSeconds": 3600,
        "ResourceConfig": {"InstanceType": "ml.g5.xlarge", "InstanceCount": 2},
    }
    billing = sagemaker_job.estimate_cost(description, 1.408)
    assert billing["estimated_cost_usd"] == pytest.approx(2 * 1.408)
    assert billing["billable_seconds"] == 3600 and billing["instance_count"] == 2


def test_tags_are_sanitized():
    assert sm.sanitize_tag("manual__2026-01-01T00:00:00+00:00") == (
        "manual__2026-01-01T00:00:00+00:00"
    )
    assert sm.sanitize_tag("a;b|c") == "a_b_c"


def test_throttling_and_5xx_are_transient_a_validation_error_is_not():
    from botocore.exceptions import ClientError

    def error(code, status):
        return ClientError(
            {"Error": {"Code": code}, "ResponseMetadata": {"HTTPStatusCode": status}}, "Op"
        )

    assert sagemaker_job.is_transient_error(error("ThrottlingException", 400))
    assert sagemaker_job.is_transient_error(error("InternalFailure", 500))
    assert not sagemaker_job.is_transient_error(error("ValidationException", 400))


# ---- the entry script, as the service runs it ---------------------------------------------


@pytest.fixture
def steps(tmp_path, monkeypatch):
    """The steps, in a module of their own: the job imports them by name from the bundle."""
    yield from step_module(
        tmp_path,
        monkeypatch,
        "sagemaker_entry_steps",
        """
        import os

        def step(x):
            path = os.environ["PYTHONPATH"].split(os.pathsep)
            kept = path[0].endswith(".zip") and path[-1].endswith("image-site")
            return {"x": x, "rank": os.environ["RANK"], "world": os.environ["WORLD_SIZE"],
                    "path": kept}

        def fail(x):
            raise ValueError(f"bad {x}")
        """,
    )


def _job_tree(tmp_path: Path, function, host: str) -> tuple[Path, dict]:
    """A local /opt/ml as SageMaker lays it out for ``host`` of a two-node job."""
    root = tmp_path / "artifacts"
    staged = stage_step(
        function, [7], {}, root=f"file://{root}",
        step=StepIdentity("dag", "run", "task", -1, 1), storage=Storage(),
    )  # fmt: skip
    ml = tmp_path / "ml"
    run_dir = ml / "input" / "data" / "run"
    code_dir = ml / "input" / "data" / "code"
    run_dir.mkdir(parents=True)
    code_dir.mkdir(parents=True)
    (ml / "model").mkdir()
    (ml / "input" / "config").mkdir()
    bundle = Storage().local_path(staged.code_uri)
    (code_dir / bundle.name).write_bytes(bundle.read_bytes())
    (run_dir / "spec.json").write_bytes(Storage().local_path(staged.spec_uri).read_bytes())
    entry = Path(sm.__file__).parent / "entry.py"
    (run_dir / launch_module.ENTRY_FILE).write_bytes(entry.read_bytes())
    (ml / "input" / "config" / "resourceconfig.json").write_text(
        json.dumps({"current_host": host, "hosts": ["algo-1", "algo-2"]})
    )
    request = JobRequest(
        "j", "k", staged.spec_uri, staged.run_uri, staged.code_uri,
        spec_sha256=staged.spec_sha256, code_sha256=staged.code_sha256,
    )  # fmt: skip
    _, launch, env, _ = sm.build_launch(request, {}, "j")
    launch_bytes = json.dumps(launch).encode()
    (run_dir / launch_module.LAUNCH_FILE).write_bytes(launch_bytes)
    env.update(bootstrap_environment(request.spec_sha256, request.try_id))
    env["PYTHONPATH"] = str(tmp_path / "image-site")  # an image's own path is kept
    entry_point = launch_module.entrypoint(request, entry.read_bytes(), launch_bytes)
    # the job's own command line, with /opt/ml where this test lays it out
    env["COMMAND"] = json.dumps(
        [sys.executable, *(a.replace(launch_module.ML_ROOT, str(ml)) for a in entry_point[1:])]
    )
    return ml, env


def _run_entry(ml: Path, env: dict) -> subprocess.CompletedProcess:
    env = dict(env)
    command = json.loads(env.pop("COMMAND"))
    clean = {"PATH": os.environ["PATH"], "HOME": str(ml), **env}
    return subprocess.run(  # in the job's working directory: not this checkout, whose
        command, env=clean, cwd=ml, capture_output=True, text=True, timeout=60
    )  # airflow_stepop would come before the checked bundle on sys.path


def test_rank_zero_writes_the_result_into_the_model_dir(tmp_path, steps):
    ml, env = _job_tree(tmp_path, steps.step, "algo-1")
    done = _run_entry(ml, env)
    assert done.returncode == 0, done.stderr
    result = json.loads((ml / "model" / "result.json").read_text())
    assert result["outputs"] == {"inline": {"x": 7, "rank": "0", "world": "2", "path": True}}


def test_other_ranks_run_the_step_but_write_no_result(tmp_path, steps):
    ml, env = _job_tree(tmp_path, steps.step, "algo-2")
    done = _run_entry(ml, env)
    assert done.returncode == 0, done.stderr
    assert list((ml / "model").iterdir()) == []


def test_a_raising_step_leaves_its_exception_as_the_failure_reason(tmp_path, steps):
    ml, env = _job_tree(tmp_path, steps.fail, "algo-1")
    done = _run_entry(ml, env)
    assert done.returncode == 1
    assert (ml / "output" / "failure").read_text() == "ValueError: bad 7"
    assert "Traceback" in done.stderr


def _evil_bundle(marker: Path) -> bytes:
    """A code bundle whose step runtime writes ``marker`` as soon as it is imported."""
    import io
    import zipfile

    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as bundle:
        evil = f"open({str(marker)!r}, 'w').write('ran')\n"
        bundle.writestr("airflow_stepop/__init__.py", evil)
        bundle.writestr("airflow_stepop/runtime/__init__.py", evil)
        bundle.writestr("airflow_stepop/runtime/__main__.py", evil)
    return buffer.getvalue()


@pytest.mark.parametrize("replaced", ["code bundle", "entry script", "launch document"])
def test_a_file_rewritten_in_the_bucket_after_submit_never_runs(tmp_path, steps, replaced):
    """Whoever may write the artifact root cannot change what a submitted job runs: the job's
    command carries the digests, and nothing of a rewritten file runs."""
    ml, env = _job_tree(tmp_path, steps.step, "algo-1")
    marker = tmp_path / "attacker-code-ran"
    run_dir = ml / "input" / "data" / "run"
    if replaced == "code bundle":
        (bundle,) = (ml / "input" / "data" / "code").iterdir()
        bundle.write_bytes(_evil_bundle(marker))
        target = bundle
    elif replaced == "entry script":
        target = run_dir / launch_module.ENTRY_FILE
        target.write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    else:
        target = run_dir / launch_module.LAUNCH_FILE
        launch = json.loads(target.read_text())
        launch["environment"]["PYTHONSTARTUP"] = str(marker)
        target.write_text(json.dumps(launch))
    done = _run_entry(ml, env)
    assert done.returncode != 0
    assert f"{target} is not the file this job was submitted with" in done.stderr
    assert not marker.exists()
    assert list((ml / "model").iterdir()) == []  # no result: the worker sees a failed job
