"""Capacity failover on the emulated Vertex AI: no capacity for the cheapest fitting machine."""

from __future__ import annotations

import pytest

from tests.integration.vertex.conftest import custom_jobs, dags, xcoms

# the catalog's cheapest machine with one T4, and the next: a capacity rule names the machine
# type, which only the first has (one naming NVIDIA_TESLA_T4 would take every T4 machine away)
CHEAPEST_T4 = "n1-standard-4+NVIDIA_TESLA_T4x1"
NEXT_T4 = "n1-standard-8+NVIDIA_TESLA_T4x1"


@pytest.mark.parametrize("at", ["provision", "create"])
def test_no_capacity_for_the_cheapest_machine_runs_the_step_on_the_next_one(gcp, ctl, capfd, at):
    rule = {"kind": "capacity", "machine": "n1-standard-4", "count": None, "at": at}
    before = {j["name"] for j in custom_jobs(gcp["fake"], "vx-capacity")}  # the fake keeps them
    with ctl.faulted(rule):
        run = dags().vx_capacity().test()
    assert run.state == "success"
    assert ctl.counters()["CreateCustomJob"] == 2  # the refused machine's, then the next's
    rows = xcoms(run)
    assert rows[("doubled", "return_value", -1)] == 42
    billing = rows[("doubled", "vertex_billing", -1)]
    assert billing["machine"] == NEXT_T4
    assert (billing["machine_type"], billing["accelerator_count"]) == ("n1-standard-8", 1)
    jobs = [j for j in custom_jobs(gcp["fake"], "vx-capacity") if j["name"] not in before]
    ran = [j for j in jobs if j["state"] == "JOB_STATE_SUCCEEDED"]
    assert len(ran) == 1
    spec = ran[0]["job_spec"]["worker_pool_specs"][0]["machine_spec"]
    assert (spec["machine_type"], spec["accelerator_type"]) == ("n1-standard-8", "NVIDIA_TESLA_T4")
    assert ran[0]["display_name"].endswith("-a2")  # the second attempt's own name
    refused = [j for j in jobs if j["state"] == "JOB_STATE_FAILED"]
    if at == "provision":  # created, then failed for want of machines: code 8, never run
        (stockout,) = refused
        assert stockout["error"]["code"] == 8
        assert "Resources are insufficient in region" in stockout["error"]["message"]
    else:  # CreateCustomJob refused with 429 RESOURCE_EXHAUSTED: no job at all
        assert refused == [] and len(jobs) == 1
    log = capfd.readouterr()
    assert f"No capacity for {CHEAPEST_T4}: " in log.out + log.err
    assert f"Trying {NEXT_T4} (about $0.84/h): attempt 2 of 3" in log.out + log.err


CHEAPEST_L4 = "g2-standard-4+NVIDIA_L4x1"
NEXT_L4 = "g2-standard-8+NVIDIA_L4x1"


def test_a_flex_start_step_waits_in_the_queue_for_its_machine_and_says_since_when(gcp, ctl, capfd):
    held = {"kind": "capacity", "machine": "g2-standard-4", "at": "provision", "seconds": 8}
    with ctl.faulted(held):  # the first poll comes at 5 s and sees it waiting
        run = dags().vx_flex_start().test()
    assert run.state == "success"
    assert ctl.counters()["CreateCustomJob"] == 1  # it waited: no failover
    rows = xcoms(run)
    assert rows[("queued", "return_value", -1)] == 42
    assert rows[("queued", "vertex_billing", -1)]["machine"] == CHEAPEST_L4
    (job,) = custom_jobs(gcp["fake"], "vx-flex-start-queued")
    assert job["job_spec"]["scheduling"]["strategy"] == "FLEX_START"
    assert job["job_spec"]["scheduling"]["max_wait_duration"] == "3600s"
    log = capfd.readouterr()
    assert ": pending, " in log.out + log.err and "queued for capacity since " in log.out + log.err


def test_a_flex_start_step_whose_wait_runs_out_fails_over_to_the_next_machine(gcp, ctl, capfd):
    held = {"kind": "capacity", "machine": "g2-standard-4", "at": "provision"}  # no end
    with ctl.faulted(held):
        run = dags().vx_flex_start_short_wait().test()
    assert run.state == "success"
    assert ctl.counters()["CreateCustomJob"] == 2
    assert xcoms(run)[("impatient", "vertex_billing", -1)]["machine"] == NEXT_L4
    log = capfd.readouterr()
    assert f"No capacity for {CHEAPEST_L4}: JOB_STATE_FAILED: No resources became available" in (
        log.out + log.err
    )
