"""Capacity failover on the emulated SageMaker: no capacity for the cheapest fitting type."""

from __future__ import annotations

import pytest

from tests.integration.sagemaker.conftest import dags, training_jobs, xcoms

CHEAPEST_T4 = "ml.g4dn.xlarge"  # the catalog's cheapest type with one T4
NEXT_T4 = "ml.g4dn.2xlarge"


@pytest.mark.parametrize("at", ["provision", "create"])
def test_no_capacity_for_the_cheapest_type_runs_the_step_on_the_next_one(aws, ctl, capfd, at):
    with ctl.faulted({"kind": "capacity", "machine": CHEAPEST_T4, "count": None, "at": at}):
        run = dags().sm_capacity().test()
    assert run.state == "success"
    assert ctl.counters()["CreateTrainingJob"] == 2  # the refused type's, then the next's
    rows = xcoms(run)
    assert rows[("fit", "return_value", -1)] == 42
    assert rows[("fit", "sagemaker_billing", -1)]["instance_type"] == NEXT_T4
    ran = [j for j in training_jobs("sm-capacity") if j["TrainingJobStatus"] == "Completed"]
    assert ran[-1]["ResourceConfig"]["InstanceType"] == NEXT_T4
    log = capfd.readouterr()
    assert f"No capacity for {CHEAPEST_T4}: " in log.out + log.err
    assert f"Trying {NEXT_T4} (about $" in log.out + log.err


def test_a_training_plan_step_waits_pending_for_its_capacity_and_says_since_when(aws, ctl, capfd):
    """No failover: the plan's reserved instances are what the job waits for."""
    from tests.integration.sagemaker.dags.sagemaker_step_dags import TRAINING_PLAN

    held = {"kind": "capacity", "machine": CHEAPEST_T4, "at": "provision", "seconds": 8}
    with ctl.faulted(held):  # the first poll comes at 5 s and sees it waiting
        run = dags().sm_training_plan().test()
    assert run.state == "success"
    assert ctl.counters()["CreateTrainingJob"] == 1
    assert xcoms(run)[("fit", "return_value", -1)] == 42
    (job,) = training_jobs("sm-training-plan")
    assert job["ResourceConfig"]["TrainingPlanArn"] == TRAINING_PLAN
    assert "Pending" in [t["Status"] for t in job["SecondaryStatusTransitions"]]
    log = capfd.readouterr()
    assert ": pending, " in log.out + log.err and "queued for capacity since " in log.out + log.err


def test_a_retry_re_attaches_to_the_live_later_attempt_and_goes_on_from_it(aws, ctl):
    """Try 1 failed over to the next type and its worker died before deferring: try 2 finds
    attempt 2's job in the task state store, waits for it, and never asks for the first type."""
    with ctl.faulted({"kind": "capacity", "machine": CHEAPEST_T4, "at": "provision"}):
        run = dags().sm_capacity_retry().test()
    assert run.state == "success"
    assert ctl.counters()["CreateTrainingJob"] == 2  # attempt 1 and 2 of try 1; none of try 2
    rows = xcoms(run)
    assert rows[("held", "return_value", -1)] == "done by the first job"
    assert rows[("held", "sagemaker_billing", -1)]["instance_type"] == NEXT_T4
    jobs = {j["TrainingJobName"]: j for j in training_jobs("sm-capacity-retry")}
    (ran,) = [name for name, j in jobs.items() if j["TrainingJobStatus"] == "Completed"]
    assert ran.endswith("-t1-a2") and rows[("held", "sagemaker_billing", -1)]["job_name"] == ran
