"""The step cache on the emulated SageMaker: a DAG with default_args={"cache": True}, run three
times through dag.test()."""

from __future__ import annotations

import re
from collections import Counter

from tests.integration.sagemaker.conftest import dags, training_jobs, xcoms


def _jobs_made() -> dict[str, int]:
    """Training jobs created so far for sm_cached, per task."""
    made = Counter()
    for job in training_jobs("sm-cached"):
        made[re.match(r"sm-cached-([a-z]+)-", job["TrainingJobName"]).group(1)] += 1
    return dict(made)


def test_an_unchanged_rerun_makes_no_job_and_a_changed_param_reruns_that_step_and_downstream(
    aws, ctl
):
    first = dags().sm_cached().test()
    assert first.state == "success"
    assert _jobs_made() == {"prepare": 1, "train": 1, "evaluate": 1, "square": 3, "report": 1}
    made = xcoms(first)

    second = dags().sm_cached().test()
    assert second.state == "success"
    # report has cache=False: it always runs; every other step made no job
    assert _jobs_made() == {"prepare": 1, "train": 1, "evaluate": 1, "square": 3, "report": 2}
    reused = xcoms(second)
    for key in [
        ("prepare", "return_value", -1),  # an ArtifactRef: the same uri and sha256
        ("train", "return_value", -1),
        ("evaluate", "score", -1),  # multiple_outputs
        ("evaluate", "rows", -1),
        *[("square", "return_value", index) for index in range(3)],  # each map index its own
    ]:
        assert reused[key] == made[key], key
    assert reused[("report", "return_value", -1)].endswith("squares [1, 4, 9]")
    # the billing of a hit costs nothing and names the job that made the result
    billing = reused[("train", "sagemaker_billing", -1)]
    assert billing["cache_hit"] is True and billing["estimated_cost_usd"] == 0
    assert billing["original_job"] == made[("train", "sagemaker_billing", -1)]["job_name"]
    assert billing["saved_usd"] == made[("train", "sagemaker_billing", -1)]["estimated_cost_usd"]

    third = dags().sm_cached().test(run_conf={"scale": 3})
    assert third.state == "success"
    # train reads params: it runs again, and evaluate downstream of it; the rest is reused
    assert _jobs_made() == {"prepare": 1, "train": 2, "evaluate": 2, "square": 3, "report": 3}
    changed = xcoms(third)
    assert changed[("prepare", "return_value", -1)] == made[("prepare", "return_value", -1)]
    assert changed[("evaluate", "score", -1)] == 1.5 * made[("evaluate", "score", -1)]
