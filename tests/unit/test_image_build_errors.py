"""A failed image build says which ``[stepop]`` build option fixes it, in plain text.

The build streams below are what the engine sent for ``requirements=["tomli-w==1.2.0"]`` on an
engine with no bridge network (pip cannot resolve the index), and on the host's network behind
a proxy that re-signs TLS (pip does not trust its certificate), with the red colour codes the
engine wraps the step's stderr in.
"""

from __future__ import annotations

import docker.errors
import pytest

from airflow_stepop import DockerSettings
from airflow_stepop.images import builder
from airflow_stepop.images.builder import BuildOptions, ImageBuildError, ensure_image

RED, RESET = "\x1b[91m", "\x1b[0m"
PIP = "PIP_BREAK_SYSTEM_PACKAGES=1 python3 -m pip install --no-cache-dir tomli-w==1.2.0"
NO_NAMES = (
    "WARNING: Retrying (Retry(total=0, connect=None, read=None, redirect=None, status=None)) "
    "after connection broken by 'NewConnectionError('<pip._vendor.urllib3.connection."
    "HTTPSConnection object at 0x7f44ed65e590>: Failed to establish a new connection: "
    "[Errno -3] Temporary failure in name resolution')': /simple/tomli-w/"
)
UNTRUSTED = (
    "WARNING: Retrying (Retry(total=0, connect=None, read=None, redirect=None, status=None)) "
    "after connection broken by 'SSLError(SSLCertVerificationError(1, '[SSL: "
    "CERTIFICATE_VERIFY_FAILED] certificate verify failed: self-signed certificate in "
    "certificate chain (_ssl.c:992)'))': /simple/tomli-w/"
)


def _stream(failure: str) -> list[dict[str, str]]:
    return [
        {"stream": "Step 1/2 : FROM stepop-base/python:3.11-bookworm"},
        {"stream": "\n"},
        {"stream": f"Step 2/2 : RUN {PIP}"},
        {"stream": "\n"},
        {"stream": f"{RED}{failure}\n{RESET}"},
        {"stream": f"{RED}ERROR: No matching distribution found for tomli-w==1.2.0\n{RESET}"},
        {"error": f"The command '/bin/sh -c {PIP}' returned a non-zero code: 1"},
    ]


class _Engine:
    """A container engine without the image, whose builds send ``stream``."""

    def __init__(self, stream: list[dict[str, str]]) -> None:
        self.stream = stream
        self.builds: list[str] = []
        self.images = self
        self.api = self

    def get(self, reference):
        raise docker.errors.ImageNotFound(reference)

    def build(self, tag, **kwargs):
        self.builds.append(tag)
        yield from self.stream


@pytest.fixture(autouse=True)
def _locks(monkeypatch, tmp_path):
    monkeypatch.setattr(builder, "lock_dir", lambda: tmp_path / "locks")


SETTINGS = DockerSettings(parent_image="python:3.11-slim", requirements=["tomli-w==1.2.0"])


def _failure(stream: list[dict[str, str]], options: BuildOptions) -> str:
    with pytest.raises(ImageBuildError) as failed:
        ensure_image(SETTINGS, _Engine(stream), options=options)
    return str(failed.value)


def test_a_build_without_name_resolution_names_build_network_mode():
    message = _failure(_stream(NO_NAMES), BuildOptions())
    assert "Temporary failure in name resolution" in message  # pip's own words stay
    assert "No matching distribution found for tomli-w==1.2.0" in message
    assert "[stepop] build_network_mode, e.g. AIRFLOW__STEPOP__BUILD_NETWORK_MODE=host" in message
    assert "build_ca_bundle" not in message
    assert "\x1b" not in message  # no colour codes


def test_a_build_behind_a_tls_re_signing_proxy_names_build_ca_bundle():
    message = _failure(_stream(UNTRUSTED), BuildOptions(network_mode="host"))
    assert "CERTIFICATE_VERIFY_FAILED" in message
    assert (
        "[stepop] build_ca_bundle, e.g. "
        "AIRFLOW__STEPOP__BUILD_CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt" in message
    )
    assert "build_network_mode" not in message
    assert "\x1b" not in message


def test_a_hint_says_the_value_that_did_not_help(tmp_path):
    bundle = tmp_path / "proxy-ca.pem"
    bundle.write_text("-----BEGIN CERTIFICATE-----\n")
    message = _failure(_stream(UNTRUSTED), BuildOptions("host", str(bundle)))
    assert f"[stepop] build_ca_bundle (it is {str(bundle)!r} now, which does not verify it)" in (
        message
    )
    message = _failure(_stream(NO_NAMES), BuildOptions(network_mode="none"))
    assert "[stepop] build_network_mode (it is 'none' now)" in message


def test_a_parent_image_the_engine_cannot_pull_names_parent_image_and_a_mirror():
    """An engine with no way to Docker Hub fails at FROM, with Go's resolver error only."""
    stream = [
        {"stream": "Step 1/4 : FROM python:3.11-slim"},
        {"stream": "\n"},
        {
            "error": 'Get "https://registry-1.docker.io/v2/": dial tcp: lookup '
            "registry-1.docker.io on 127.0.0.53:53: no such host"
        },
    ]
    message = _failure(stream, BuildOptions())
    assert "could not pull the parent image python:3.11-slim" in message
    assert "DockerSettings(parent_image=)" in message and "registry-mirrors" in message
    assert "build_network_mode" not in message  # the build's own network is not the cause


def test_a_parent_copied_for_a_service_says_it_was_copying_not_building():
    """SageMaker pulls from ECR only: a parent image alone is copied there, with no build of
    the user's; the failure says so, with the same hint."""
    stream = [
        {"stream": "Step 1/1 : FROM python:3.99-slim"},
        {"stream": "\n"},
        {"error": 'Get "https://registry-1.docker.io/v2/": dial tcp: no such host'},
    ]
    engine = _Engine(stream)
    with pytest.raises(ImageBuildError) as failed:
        ensure_image(DockerSettings(parent_image="python:3.99-slim"), engine, copy=True)
    message = str(failed.value)
    assert message.startswith(
        f"Copying the parent image python:3.99-slim to {engine.builds[0]} (the service pulls "
        'from there) failed: Get "https://registry-1.docker.io/v2/"'
    )
    assert "could not pull the parent image python:3.99-slim" in message


def test_a_build_failure_of_another_kind_gets_no_hint():
    stream = _stream("ERROR: Invalid requirement: 'tomli-w===='")
    message = _failure(stream, BuildOptions())
    assert "Invalid requirement" in message
    assert "[stepop]" not in message


def test_a_missing_build_ca_bundle_names_the_option_and_its_value(tmp_path):
    missing = str(tmp_path / "no-such-ca.pem")
    engine = _Engine(_stream(UNTRUSTED))
    with pytest.raises(ImageBuildError) as failed:
        ensure_image(SETTINGS, engine, options=BuildOptions("host", missing))
    assert str(failed.value) == (
        f"[stepop] build_ca_bundle is {missing!r}, which cannot be read (No such file or "
        "directory): set it to a PEM file on the worker, e.g. "
        "AIRFLOW__STEPOP__BUILD_CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt, or unset it."
    )
    assert engine.builds == []  # refused before anything is sent to the engine
