"""The step cache end to end on the local backend, through dag.test() with real jobs."""

from __future__ import annotations

import importlib
import json
import sys

from tests.e2e.test_local_steps import _xcom_rows


def _dag():
    sys.modules.pop("cache_dags", None)
    return importlib.import_module("cache_dags").pipeline


def _jobs(jobs_dir) -> dict[str, int]:
    """Jobs made so far, per task."""
    counts: dict[str, int] = {}
    for record in jobs_dir.glob("*/job.json"):
        task = json.loads(record.read_text())["task_key"].split("/")[2]
        counts[task] = counts.get(task, 0) + 1
    return counts


def _results(run_id: str) -> dict[str, object]:
    rows = _xcom_rows("cached_pipeline")
    return {task: value for (task, key, _), value in rows.items() if key == "return_value"}


def test_an_unchanged_rerun_makes_no_job_and_a_changed_param_reruns_its_step_and_downstream(
    results, artifact_root, tmp_path, capfd
):
    jobs_dir = tmp_path / "jobs"
    dag = _dag()
    first = dag.test()
    assert first.state == "success"
    assert _jobs(jobs_dir) == {"prepare": 1, "train": 1, "evaluate": 1, "report": 1,
                               "plain_rows": 1}  # fmt: skip
    made = _results(first.run_id)

    second = _dag().test()
    assert second.state == "success"
    # only the step with cache=False ran again; the rest returned the first run's references
    assert _jobs(jobs_dir) == {"prepare": 1, "train": 1, "evaluate": 1, "report": 2,
                               "plain_rows": 1}  # fmt: skip
    assert _results(second.run_id)["prepare"] == made["prepare"]  # same uri, same sha256
    log = capfd.readouterr()
    assert "Step cache hit: returning the result of job cached-pipeline-train-" in log.out + log.err

    third = _dag().test(run_conf={"scale": 3})
    assert third.state == "success"
    # train reads params: it ran again, and evaluate downstream of it; prepare did not
    assert _jobs(jobs_dir) == {"prepare": 1, "train": 2, "evaluate": 2, "report": 3,
                               "plain_rows": 1}  # fmt: skip
