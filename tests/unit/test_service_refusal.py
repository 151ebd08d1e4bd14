"""A job request the service refuses (HTTP 400) at submit: its reason, and a typo's fix."""

from __future__ import annotations

from airflow_stepop.backends.base import service_refusal

KNOWN = {"n1-standard-4", "n1-standard-8", "g2-standard-4"}


def test_a_machine_type_the_reason_names_gets_the_closest_ones_the_catalog_lists():
    refused = service_refusal(
        "Vertex AI",
        'POST https://x.googleapis.com/v1/customJobs?alt=json: List of found errors:\t1.Field: '
        'machine_spec; Message: Machine type "n1-standrd-4" is not supported.',
        "machine_type", "n1-standrd-4", KNOWN,
    )  # fmt: skip
    assert str(refused) == (
        "Vertex AI refused the job and started nothing: List of found errors: 1.Field: "
        'machine_spec; Message: Machine type "n1-standrd-4" is not supported. '
        "machine_type='n1-standrd-4' is not in our catalog; the closest there: "
        "'n1-standard-4', 'n1-standard-8', 'g2-standard-4'."
    )


def test_a_refusal_about_something_else_does_not_point_at_the_machine_type():
    """An uncatalogued machine type that is right must not be blamed for a label's refusal."""
    reason = "GPU nvidia-tesla-t4: not available in us-west1\nmore detail"
    refused = service_refusal("Vertex AI", reason, "machine_type", "n2-standard-4", KNOWN)
    assert str(refused) == (
        "Vertex AI refused the job and started nothing: GPU nvidia-tesla-t4: not available in "
        "us-west1"
    )
