"""What a job runs is what the worker submitted (issue 39, points 2 and 7): the runtime checks
the spec's bytes against ``STEPOP_SPEC_SHA256`` before it parses them, extracts the code bundle
from the very bytes it verified, and reuses code extracted by an earlier job only from a cache
directory of its own user, and only while it matches the bundle."""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

from airflow_stepop.packaging.staging import StepIdentity, stage_step
from airflow_stepop.runtime.storage import Storage
from tests.step_modules import step_module


@pytest.fixture
def steps(tmp_path, monkeypatch):
    yield from step_module(
        tmp_path,
        monkeypatch,
        "trusted_steps",
        """
            def double(x):
                return {"doubled": x * 2, "by": "the step as submitted"}
        """,
    )


def _stage(tmp_path: Path, function, args, try_number: int = 1):
    return stage_step(
        function,
        args,
        {},
        root=f"file://{tmp_path}/root",
        step=StepIdentity("dag", "run", function.__name__, -1, try_number),
        storage=Storage(),
    )


def _run(staged, cache: Path, env=None, prelude: str = ""):
    """The runtime in a process of its own, as a job runs it; what it left."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "STEPOP"))} | {
        "STEPOP_CACHE_DIR": str(cache),
        **(env or {}),
    }
    code = f"{prelude}\nimport sys\nfrom airflow_stepop.runtime.main import main\nsys.exit(main())"
    process = subprocess.run(
        [sys.executable, "-c", code, staged.spec_uri],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    storage = Storage()
    out = {}
    for name in ("result.json", "error.json"):
        uri = f"{staged.run_uri}/{name}"
        out[name] = storage.read_json(uri) if storage.exists(uri) else None
    return process, out["result.json"], out["error.json"]


def _spec_path(staged) -> Path:
    return Path(staged.spec_uri.removeprefix("file://"))


def _submitted(staged) -> dict[str, str]:
    """What every backend puts in the job's environment: the spec's sha256 as staged."""
    return {"STEPOP_SPEC_SHA256": hashlib.sha256(_spec_path(staged).read_bytes()).hexdigest()}


def test_a_spec_rewritten_after_submit_fails_the_step_before_it_runs(tmp_path, steps):
    staged = _stage(tmp_path, steps.double, [21])
    submitted = _submitted(staged)
    spec = json.loads(_spec_path(staged).read_bytes())
    spec["args"] = [{"inline": 1000}]  # what a writer of the bucket would change
    _spec_path(staged).write_text(json.dumps(spec))

    process, result, error = _run(staged, tmp_path / "cache", submitted)

    assert process.returncode == 1 and result is None, process.stderr
    assert error["type"] == "SpecTamperedError"
    assert "STEPOP_SPEC_SHA256=" + submitted["STEPOP_SPEC_SHA256"] in error["message"]
    assert "rewritten in the artifact root after the step was submitted" in error["message"]


def test_the_spec_digest_is_checked_before_the_spec_is_parsed(tmp_path, steps):
    staged = _stage(tmp_path, steps.double, [21])
    submitted = _submitted(staged)
    _spec_path(staged).write_bytes(b"{not json")

    _, _, error = _run(staged, tmp_path / "cache", submitted)

    assert error["type"] == "SpecTamperedError"


def test_the_spec_as_submitted_runs(tmp_path, steps):
    staged = _stage(tmp_path, steps.double, [21])

    process, result, _ = _run(staged, tmp_path / "cache", _submitted(staged))

    assert process.returncode == 0, process.stderr
    assert result["outputs"]["inline"]["doubled"] == 42


def _swapped(bundle: bytes, module: str) -> bytes:
    """The bundle with the step's module replaced by someone else's code."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(bundle)) as source, zipfile.ZipFile(out, "w") as target:
        for info in source.infolist():
            data = source.read(info)
            if info.filename == f"code/{module}.py":
                data = b"def double(x):\n    return {'doubled': 0, 'by': 'someone else'}\n"
            target.writestr(info, data)
    return out.getvalue()


def test_a_bundle_changed_between_its_check_and_its_extraction_never_runs(tmp_path, steps):
    """On Vertex AI the bundle is read through a live GCS FUSE mount: the file may change
    between two reads. The second time the job opens it, it has changed."""
    staged = _stage(tmp_path, steps.double, [21])
    bundle = Path(staged.code_uri.removeprefix("file://"))
    swapped = tmp_path / "swapped.zip"
    swapped.write_bytes(_swapped(bundle.read_bytes(), steps.__name__))
    prelude = textwrap.dedent(
        f"""
        import os, sys
        opened = []
        def swap_on_second_open(event, args):
            if event == "open" and str(args[0]) == {str(bundle)!r} and "busy" not in opened:
                opened.append("open")
                if opened.count("open") == 2:
                    opened.append("busy")
                    os.replace({str(swapped)!r}, {str(bundle)!r})
        sys.addaudithook(swap_on_second_open)
        """
    )

    process, result, _ = _run(staged, tmp_path / "cache", prelude=prelude)

    assert process.returncode == 0, process.stderr
    assert result["outputs"]["inline"] == {"doubled": 42, "by": "the step as submitted"}


def test_code_extracted_by_an_earlier_job_is_reused_only_while_it_matches(tmp_path, steps):
    cache = tmp_path / "cache"
    first, _, _ = _run(_stage(tmp_path, steps.double, [1]), cache)
    assert first.returncode == 0, first.stderr
    [extracted] = cache.rglob(f"code/{steps.__name__}.py")
    extracted.write_text("def double(x):\n    return {'doubled': 0, 'by': 'someone else'}\n")

    process, result, _ = _run(_stage(tmp_path, steps.double, [21], try_number=2), cache)

    assert process.returncode == 0, process.stderr
    assert result["outputs"]["inline"] == {"doubled": 42, "by": "the step as submitted"}


def test_a_cache_directory_others_may_write_is_refused_naming_it(tmp_path, steps):
    cache = tmp_path / "cache"
    shared = cache / f"airflow-stepop-cache-{os.geteuid()}"
    shared.mkdir(parents=True)
    shared.chmod(0o777)

    process, result, error = _run(_stage(tmp_path, steps.double, [21]), cache)

    assert process.returncode == 1 and result is None
    assert error["type"] == "PrivateDirectoryError"
    assert str(shared) in error["message"] and "may be written by others" in error["message"]
    assert f"chmod 700 {shared}" in error["message"]
    assert not any(shared.iterdir())  # nothing of the step went there


def test_a_cache_directory_of_another_user_is_refused(tmp_path):
    from airflow_stepop.runtime.private import PrivateDirectoryError, private_dir

    if os.geteuid() == 0:
        theirs = tmp_path / "theirs"
        theirs.mkdir(mode=0o700)
        os.chown(theirs, 65534, 65534)
    else:
        theirs = Path("/")  # root's
    with pytest.raises(PrivateDirectoryError, match=r"is owned by uid \d+, not by this user"):
        private_dir(theirs)


def test_a_new_cache_directory_is_private(tmp_path, monkeypatch):
    from airflow_stepop.runtime.private import job_cache_root

    monkeypatch.setenv("STEPOP_CACHE_DIR", str(tmp_path / "base"))
    root = job_cache_root()

    assert root.parent == tmp_path / "base"
    assert root.stat().st_mode & 0o777 == 0o700
