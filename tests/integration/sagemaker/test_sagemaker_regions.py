"""docs/sagemaker.md "One region per connection": the second region's step, as a user pastes
it, runs when the first region has no capacity for any fitting type, and only then."""

from __future__ import annotations

from tests.doc_blocks import run_dag_block
from tests.integration.sagemaker.conftest import BUNDLES, training_jobs, xcoms

T4_TYPES = ("ml.g4dn.xlarge", "ml.g4dn.2xlarge", "ml.g4dn.4xlarge")  # the three tried


def _stand_ins(aws):
    """The docs' buckets and ECR images stand for the emulated cloud's bucket and base image."""
    base = f"{aws['registry']}/stepop-base/python:3.11-bookworm"
    return {
        "s3://ml-us-east-1/stepop": f"{aws['root']}/east",
        "s3://ml-us-west-2/stepop": f"{aws['root']}/west",
        "123456789012.dkr.ecr.us-east-1.amazonaws.com/train:1.0": base,
        "123456789012.dkr.ecr.us-west-2.amazonaws.com/train:1.0": base,
    }


def test_the_second_region_runs_when_the_first_has_no_capacity(aws, ctl, tmp_path, monkeypatch):
    rules = [{"kind": "capacity", "machine": name, "at": "create", "region": "us-east-1"}
             for name in T4_TYPES]  # fmt: skip
    with ctl.faulted(*rules):
        run = run_dag_block("docs/sagemaker.md", "train_anywhere", tmp_path, monkeypatch,
                            BUNDLES, _stand_ins(aws))  # fmt: skip
    assert run.state == "success"
    states = {ti.task_id: ti.state for ti in run.get_task_instances()}
    assert states == {"train_east": "failed", "train_west": "success"}
    assert xcoms(run)[("train_west", "return_value", -1)] == "trained in us-west-2"
    assert ctl.counters()["CreateTrainingJob"] == 4  # three refused in us-east-1, one in us-west-2
    (job,) = [j for j in training_jobs("train-anywhere") if j["TrainingJobStatus"] == "Completed"]
    assert ":us-west-2:" in job["TrainingJobArn"]


def test_the_second_region_is_skipped_when_the_first_ran(aws, ctl, tmp_path, monkeypatch):
    run = run_dag_block("docs/sagemaker.md", "train_anywhere", tmp_path, monkeypatch, BUNDLES,
                        _stand_ins(aws))  # fmt: skip
    assert run.state == "success"
    states = {ti.task_id: ti.state for ti in run.get_task_instances()}
    assert states == {"train_east": "success", "train_west": "skipped"}
    assert ctl.counters()["CreateTrainingJob"] == 1
