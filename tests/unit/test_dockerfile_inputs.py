"""What a DockerSettings puts into a Dockerfile cannot add an instruction, a requirements line or
a reinterpreted value.

Before, the rules were ``re.match`` with ``$``, which a value ending in a line break passes:
``apt_packages=["curl\\n", ...]`` became an instruction of its own. Environment values were
double-quoted with ``$`` left as it was (Docker expanded it) and a line break in one split the
Dockerfile.
"""

from __future__ import annotations

import pytest

from airflow_stepop.images.dockerfile import dockerfile_text, env_build_args
from airflow_stepop.settings import DockerSettings, SettingsError

TRICKY = "a $HOME ${PATH} \"double\" 'single' back\\slash \\$x end\\\nline two\r\n\ttab"


@pytest.fixture
def dockerfile(tmp_path):
    path = tmp_path / "Dockerfile"
    path.write_text("ARG BASE\nFROM ${BASE}\n")
    return path


@pytest.mark.parametrize(
    ("kwargs", "field", "value"),
    [
        ({"parent_image": "python:3.11\nRUN id"}, "parent_image", "'python:3.11\\nRUN id'"),
        ({"apt_packages": ["curl\n", "vim"]}, "apt_packages", "'curl\\n'"),
        ({"apt_packages": ["curl\nRUN id"]}, "apt_packages", "'curl\\nRUN id'"),
        ({"requirements": ["six\n--index-url=http://x"]}, "requirements", "'six\\n--index-url"),
        ({"requirements": ["six \\", "numpy"]}, "requirements", "'six \\\\'"),
        ({"requirements": ["six\r"]}, "requirements", "'six\\r'"),
        # pip splits a requirements file with str.splitlines(): these break lines too
        ({"requirements": ["six\u2028--index-url=http://x"]}, "requirements", "'six\\u2028"),
        ({"requirements": ["six\x85--pre"]}, "requirements", "'six\\x85--pre'"),
        ({"environment": {"MODE\n": "x"}}, "environment", "'MODE\\n'"),
        ({"environment": {"MODE": "a\x00b"}}, "environment['MODE']", "'a\\x00b'"),
        ({"environment": {"STEPOP_ENV_X": "1"}}, "environment", "'STEPOP_ENV_X'"),
        ({"build_args": {"BASE\n": "x"}, "dockerfile": True}, "build_args", "'BASE\\n'"),
    ],
)
def test_a_line_break_or_a_reserved_name_is_refused_naming_the_field(
    dockerfile, kwargs, field, value
):
    if kwargs.pop("dockerfile", None):
        kwargs["dockerfile"] = dockerfile
    with pytest.raises(SettingsError) as refused:
        DockerSettings(**kwargs)
    assert f"DockerSettings.{field}" in str(refused.value)
    assert value in str(refused.value)


def test_an_engine_build_gets_the_values_as_build_args_never_in_the_dockerfile():
    settings = DockerSettings(environment={"TRICKY": TRICKY, "PLAIN": "x"})
    text = dockerfile_text(settings, "base:1", False, env_as_build_args=True)
    assert text == (
        "FROM base:1\n"
        "ARG STEPOP_ENV_PLAIN\n"
        'ENV PLAIN="${STEPOP_ENV_PLAIN}"\n'
        "ARG STEPOP_ENV_TRICKY\n"
        'ENV TRICKY="${STEPOP_ENV_TRICKY}"\n'
    )
    assert env_build_args(settings) == {"STEPOP_ENV_TRICKY": TRICKY, "STEPOP_ENV_PLAIN": "x"}


def test_a_builder_without_build_args_gets_single_quoted_values():
    """Azure ML's builds take no build arguments: each value is single-quoted (no ``$`` is
    expanded and no backslash read within), a single quote closes, is escaped, reopens."""
    value = 'a $HOME ${PATH} "double" it\'s back\\slash \\$x end\\'
    text = dockerfile_text(DockerSettings(environment={"V": value}), "base:1", False)
    assert text.splitlines()[-1] == (
        "ENV V='a $HOME ${PATH} \"double\" it'\\''s back\\slash \\$x end\\'"
    )


def test_a_builder_without_build_args_refuses_a_line_break_naming_the_way_that_works():
    settings = DockerSettings(environment={"TRICKY": TRICKY})
    with pytest.raises(SettingsError) as refused:
        dockerfile_text(settings, "base:1", False)
    message = str(refused.value)
    assert "DockerSettings.environment['TRICKY']" in message
    assert "operator's environment=" in message and "container engine" in message


def test_the_tag_of_settings_whose_image_is_unchanged_stays_the_same():
    """Computed by the version before: an image built then for these settings is reused."""
    settings = DockerSettings(
        parent_image="python:3.11-slim",
        requirements=["numpy==2.1.0"],
        apt_packages=["curl"],
        environment={"MODE": 'fast "quoted" it\'s', "N": 3},
    )
    assert settings.content_hash("python:3.11-slim", "1") == (
        "82b78d5b3bedbc2bd128cc345ad60b7b59d18734c92e4f35b4f21775f2ef8d7c"
    )


def test_settings_whose_value_the_old_quoting_mangled_get_a_new_tag():
    """``$HOME`` was expanded in the image built before: that image must not be reused."""
    settings = DockerSettings(parent_image="python:3.11-slim", environment={"HOME_DIR": "$HOME"})
    before = "b4d4e33bd5a25ea6a157f9c4571c8a83d5f3f6c5a7ce2485b5c2ebe0ab2dfcea"
    assert settings.content_hash("python:3.11-slim", "1") != before
