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
