"""Where Vertex steps push built images: Artifact Registry with a token login, others as given."""

from __future__ import annotations

import pytest

from airflow_stepop.images.registry import prepare_google


def test_artifact_registry_logs_in_with_an_oauth_token_and_gets_an_image_name():
    tokens = iter(["ya29.token"])
    target = prepare_google(
        "us-central1-docker.pkg.dev/my-project/airflow-stepop", lambda: next(tokens)
    )
    assert (
        target.repository
        == "us-central1-docker.pkg.dev/my-project/airflow-stepop/airflow-stepop-env"
    )
    assert target.auth_config == {"username": "oauth2accesstoken", "password": "ya29.token"}


def test_a_named_image_in_artifact_registry_is_kept():
    target = prepare_google("europe-west4-docker.pkg.dev/p/repo/train", lambda: "t")
    assert target.repository == "europe-west4-docker.pkg.dev/p/repo/train"


def test_any_other_registry_is_used_as_given_without_asking_for_a_token():
    def no_token() -> str:
        raise AssertionError("no token for a plain registry")

    target = prepare_google("127.0.0.1:5000/stepop-env", no_token)
    assert target.repository == "127.0.0.1:5000/stepop-env" and target.auth_config is None


def test_anonymous_credentials_name_the_repository_and_the_ways_out():
    with pytest.raises(RuntimeError) as refused:
        prepare_google("us-central1-docker.pkg.dev/p/airflow-stepop", lambda: None)
    message = str(refused.value)
    assert "Artifact Registry (us-central1-docker.pkg.dev/p/airflow-stepop/" in message
    assert "image_repository= or [stepop] vertex_image_repository" in message
