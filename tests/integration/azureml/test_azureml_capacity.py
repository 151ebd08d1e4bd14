"""Capacity on the emulated Azure ML: a spent vCPU quota for the cheapest fitting VM size fails
the step over to the next size; a size with no VM to allocate holds the job Queued, and the step
waits for it (Azure ML allocates when VMs come back), saying why in the task log."""

from __future__ import annotations

from tests.integration.azureml.conftest import dags, jobs, xcoms

CHEAPEST_T4 = "Standard_NC4as_T4_v3"  # the catalog's cheapest size with one T4
NEXT_T4 = "Standard_NC8as_T4_v3"


def test_a_spent_quota_for_the_cheapest_size_runs_the_step_on_the_next_one(azure, ctl, capfd):
    with ctl.faulted({"kind": "capacity", "machine": CHEAPEST_T4, "count": None,
                      "at": "provision"}):  # fmt: skip
        run = dags().aml_capacity_failover().test()
    assert run.state == "success"
    assert ctl.counters()["Jobs_CreateOrUpdate"] == 2  # the refused size's, then the next's
    rows = xcoms(run)
    assert rows[("fit", "return_value", -1)] == 42
    billing = rows[("fit", "azureml_billing", -1)]
    assert billing["machine"] == NEXT_T4 and billing["price_per_hour_usd"] == 0.752
    made = jobs(azure["fake"], "aml-capacity-failover-fit")
    assert [j["properties"]["status"] for j in made] == ["Failed", "Completed"]
    assert [j["properties"]["resources"]["instanceType"] for j in made] == [CHEAPEST_T4, NEXT_T4]
    assert made[1]["name"] == billing["job_name"] and made[1]["name"].endswith("-a2")
    log = capfd.readouterr()
    refused = (
        f"No capacity for {CHEAPEST_T4}: UserError: Job submission to AzureML Compute "
        "encountered an Exception with status code JobNodeCountExceedsCoreQuota"
    )
    assert refused in log.out + log.err
    assert f"Trying {NEXT_T4} (about $0.75/h): attempt 2 of 3" in log.out + log.err


def test_a_size_with_no_vm_to_allocate_keeps_the_step_waiting_and_says_why(
    azure, ctl, capfd, monkeypatch
):
    from airflow_stepop.backends.azureml import logs

    # the first poll comes 5 s after the create: held 10 s, the job is seen Queued
    monkeypatch.setattr(logs, "QUEUED_WARNINGS_AFTER", 0.5)  # the trigger runs in this process
    monkeypatch.setattr(logs, "LOG_FILES_INTERVAL", 0.5)
    with ctl.faulted({"kind": "capacity", "machine": CHEAPEST_T4, "count": None, "at": "queue",
                      "seconds": 10}):  # fmt: skip
        run = dags().aml_capacity_queue().test()
    assert run.state == "success"
    assert ctl.counters()["Jobs_CreateOrUpdate"] == 1  # no failover: it ran once VMs came back
    assert xcoms(run)[("fit", "azureml_billing", -1)]["machine"] == CHEAPEST_T4
    log = capfd.readouterr()
    said = "Azure ML: Run requested 1 node(s). Instances of the specified VM size are not currently"
    assert (log.out + log.err).count(said) == 1  # relayed once, however often it was read
    assert ": pending, " in log.out + log.err and "queued for capacity since " in log.out + log.err
    made = jobs(azure["fake"], "aml-capacity-queue-fit")
    assert made[0]["properties"]["queueSettings"] == {"priority": 3}  # job_priority="high"
