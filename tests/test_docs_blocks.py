"""Every "try it" block of the docs runs as pasted, and leaves nothing running: README.md and
docs/*.md, fenced ```bash try-it.

Each block runs in a fresh ``bash`` (``-e -o pipefail``: the first failing command fails it) in
the repository root, with the emulated clouds up (the blocks' own ``make cloud-up`` reuses the
stack of ``.cloud/env``), ``.venv/bin`` on PATH and a private, empty ``AIRFLOW_HOME``. The
machine's own settings (TLS bundles, pip options) pass; this session's Airflow, cloud and test
variables do not, so a block that forgets a step fails here as it would for a user.

The blocks run ``PARALLEL`` at a time, the longest first (:class:`BlockRuns`): most of a block is
waiting (a job's container starting, a trigger's poll, a scheduler's loop), so one after the
other they took about 2.5 times as long. What they share is settled first or kept apart: the
stack's env, buckets and build project are made once before any starts (``cloud.stack up``),
and two blocks whose steps push to the same image repository never build the same image at once
(a block waits until the first one's log says that image is in the registry, or until it ended:
so exactly one of them builds it, as one after the other). Each block's own ``make cloud-up``
reinstalls the editable package (uv's lock on .venv orders them; processes starting meanwhile
in other blocks were seen to find it every time). Each block's check that it left nothing
running is made as soon as it ends, as before.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from cloud import stack
from cloud.pytest_plugin import cloud_stack  # noqa: F401 - the fixture
from tests.processes import holding_files_under
from tests.waiting import wait_for

REPO = Path(__file__).resolve().parent.parent
FENCE = re.compile(r"^```bash try-it[^\n]*\n(.*?)^```\s*$", re.MULTILINE | re.DOTALL)
# What a user's fresh shell would not have: this session's Airflow, cloud and test settings.
# (STEPOP_ENGINE_STATE/STEPOP_REGISTRY_PORT pass: they select the engine `make cloud-up` reuses.)
SESSION_ONLY = re.compile(
    r"^(AIRFLOW|AWS_(?!CA_BUNDLE)|GOOGLE_|AZURE_|GCSFS_|STORAGE_EMULATOR_HOST|PYTEST_|VIRTUAL_ENV"
    r"|STEPOP_(?!ENGINE_STATE|REGISTRY_PORT|CLOUD_CACHE))"
)
TIMEOUT = 600  # seconds per block
PARALLEL = 3  # blocks at a time (on 2 cores: three use about one)
# About how long a block takes in CI, one at a time, named by what it runs (its line moves as
# the docs change): the longest start first. A block not named here: 10 s.
SECONDS = {
    "airflow dags test stepop_vertex_train": 130,
    "airflow dags test stepop_azureml_train": 120,
    "airflow dags trigger stepop_train_pipeline": 85,
    "airflow dags test stepop_sagemaker_train": 60,
    "airflow dags test stepop_kubernetes_train": 45,
    "airflow dags test no_engine_vertex": 30,
    "airflow dags test no_engine_sagemaker": 25,
}
EXPORTED_REPOSITORY = re.compile(r"^export AIRFLOW__STEPOP__\w+_IMAGE_REPOSITORY=(\S+)", re.M)
# The builder's line once a step's environment image is in the registry (found, or pushed).
IMAGE_READY = re.compile(
    r"Environment image (\S+):\S+ (?:is in the registry|was built by another task"
    r"|\((?:built and pushed|no build)\))"
)


def try_it_blocks() -> list[tuple[str, str]]:
    """(``file:line``, block) for every ```bash try-it block of README.md and docs/*.md."""
    blocks = []
    for path in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        text = path.read_text()
        for match in FENCE.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            blocks.append((f"{path.relative_to(REPO)}:{line}", match.group(1)))
    return blocks


BLOCKS = dict(try_it_blocks())


def image_repositories(block: str, stack_env: dict[str, str]) -> frozenset[str]:
    """Where a block's steps push the images they build: the repository it exports, else, for a
    block that defines steps of its own after sourcing .cloud/env, the stack's repositories."""
    exported = EXPORTED_REPOSITORY.findall(block)
    if exported:
        return frozenset(exported)
    if "_step(" in block and ".cloud/env" in block:
        return frozenset(v for k, v in stack_env.items() if k.endswith("_IMAGE_REPOSITORY"))
    return frozenset()


def user_env(home: Path) -> dict[str, str]:
    """A user's fresh shell: the machine's settings, .venv/bin on PATH, a private home."""
    env = {k: v for k, v in os.environ.items() if not SESSION_ONLY.match(k)}
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '/usr/bin:/bin')}"
    env["AIRFLOW_HOME"] = str(home)
    # Python's lines reach the log as they are written (a block's image gate reads them); it
    # changes no command's outcome, and this machine's shells have it set already.
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def stop_group(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM to a block's process group, as from a shell (its traps stop what it started),
    SIGKILL to what is still there 30 s later."""
    for sig, grace in ((signal.SIGTERM, 30), (signal.SIGKILL, 10)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue


@dataclass
class BlockRun:
    """One block's run: started by :class:`BlockRuns`, read by its test once ``finished``."""

    where: str
    block: str
    directory: Path  # holds its AIRFLOW_HOME (``airflow``) and its output (``output.log``)
    repositories: frozenset[str]
    seconds: float
    image_ready: threading.Event = field(default_factory=threading.Event)
    finished: threading.Event = field(default_factory=threading.Event)
    process: subprocess.Popen[bytes] | None = None
    began: float = 0.0  # seconds after the first block started
    status: int | None = None  # None: it ran past TIMEOUT (or never started)
    output: str = ""
    took: float = 0.0
    left_running: list[str] = field(default_factory=list)


class BlockRuns:
    """Runs blocks ``parallel`` at a time, the longest first, each in a thread of its own. A
    block waits while a running block that pushes to one of its image repositories has not yet
    logged that image as ready (nor ended): only the first of them builds it."""

    def __init__(self, runs: list[BlockRun], parallel: int) -> None:
        self.pending = sorted(runs, key=lambda run: -run.seconds)
        self.started: list[BlockRun] = []
        self.parallel = parallel
        self.changed = threading.Condition()
        self.stopping = False
        self.threads: list[threading.Thread] = []
        self.origin = time.monotonic()
        self.scheduler = threading.Thread(target=self._schedule, name="docs-blocks", daemon=True)
        self.scheduler.start()

    def _may_start(self, run: BlockRun) -> bool:
        return not any(
            other.repositories & run.repositories and not other.image_ready.is_set()
            for other in self.started
        )

    def _schedule(self) -> None:
        with self.changed:
            try:
                while self.pending and not self.stopping:
                    for run in list(self.pending):
                        running = sum(not other.finished.is_set() for other in self.started)
                        if running < self.parallel and self._may_start(run):
                            self.pending.remove(run)
                            self.started.append(run)
                            thread = threading.Thread(target=self._run, args=(run,), daemon=True)
                            self.threads.append(thread)
                            thread.start()
                    self.changed.wait(timeout=1)
            finally:
                for run in self.pending:  # never started: the session stopped first
                    run.output = "(not started)"
                    run.finished.set()

    def _notify(self) -> None:
        with self.changed:
            self.changed.notify_all()

    def _run(self, run: BlockRun) -> None:
        log = run.directory / "output.log"
        started = time.monotonic()
        run.began = started - self.origin
        try:
            with log.open("wb") as out:
                run.process = subprocess.Popen(
                    ["bash", "--noprofile", "--norc", "-e", "-o", "pipefail", "-c", run.block],
                    cwd=REPO,
                    env=user_env(run.directory / "airflow"),
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,  # its group: stopped as one on a timeout
                )
            self._follow(run, log, started)
            run.status = run.process.returncode
        finally:
            run.took = time.monotonic() - started
            run.output = log.read_text(errors="replace") if log.exists() else ""
            if run.status is None:
                run.output += f"\n(stopped: still running after {run.took:.0f} s)"
            # A block stops what it starts: a process still writing under its directory (a log,
            # its output) is one a user would find running after pasting it (a job ending right
            # now gets a moment).
            try:
                wait_for(lambda: not holding_files_under(str(run.directory)), timeout=10)
            except AssertionError:
                run.left_running = holding_files_under(str(run.directory))
            run.image_ready.set()
            run.finished.set()
            self._notify()

    def _follow(self, run: BlockRun, log: Path, started: float) -> None:
        """Wait for the block's end, reading its output for its image's line; past TIMEOUT,
        stop it."""
        assert run.process is not None
        with log.open("rb") as reader:
            partial = b""
            while run.process.poll() is None:
                if self.stopping or time.monotonic() - started > TIMEOUT:
                    stop_group(run.process)
                    run.process.returncode = None  # not its own end
                    return
                if not run.image_ready.is_set() and run.repositories:
                    *lines, partial = (partial + reader.read()).split(b"\n")
                    for line in lines:
                        ready = IMAGE_READY.search(line.decode(errors="replace"))
                        if ready and ready.group(1) in run.repositories:
                            run.image_ready.set()
                            self._notify()
                            break
                time.sleep(0.2)

    def stop(self) -> None:
        """Start no more blocks, stop the running ones, wait for their threads."""
        with self.changed:
            self.stopping = True
            self.changed.notify_all()
        self.scheduler.join()
        for thread in self.threads:
            thread.join()


@pytest.fixture(scope="module")
def block_runs(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, BlockRun]]:
    """The selected blocks' runs, all started now (``PARALLEL`` at a time)."""
    if stack.STATE != REPO / ".cloud":
        yield {}
        return
    here = Path(__file__)
    selected = [
        item.callspec.params["where"]
        for item in request.session.items
        if item.path == here and "where" in getattr(getattr(item, "callspec", None), "params", {})
    ]
    stack_env = request.getfixturevalue("cloud_stack")
    # Settle what every block's `make cloud-up` would otherwise settle at once: a stale
    # .cloud/env rewritten, the demo bucket and the build project made.
    settle = tmp_path_factory.mktemp("cloud-up")
    subprocess.run(
        [sys.executable, "-m", "cloud.stack", "up"],
        cwd=REPO,
        env=user_env(settle / "airflow"),
        capture_output=True,
        timeout=300,
    )
    runs = {}
    for where in selected:
        block = BLOCKS[where]
        runs[where] = BlockRun(
            where=where,
            block=block,
            directory=tmp_path_factory.mktemp(re.sub(r"\W", "_", where)),
            repositories=image_repositories(block, stack_env),
            seconds=next((s for text, s in SECONDS.items() if text in block), 10),
        )
    scheduler = BlockRuns(list(runs.values()), PARALLEL)
    try:
        yield runs
    finally:
        scheduler.stop()


def test_the_docs_have_try_it_blocks() -> None:
    """The extraction finds the blocks (a renamed fence would silently test nothing)."""
    assert any(where.startswith("docs/sagemaker.md") for where in BLOCKS), BLOCKS


# A block's test waits for its run, which may start after the others (each has TIMEOUT).
@pytest.mark.timeout(TIMEOUT * len(BLOCKS) + 120)
@pytest.mark.parametrize("where", list(BLOCKS), ids=list(BLOCKS))
def test_try_it_block_runs_as_pasted(
    where: str,
    cloud_stack: dict[str, str],  # noqa: F811
    block_runs: dict[str, BlockRun],
) -> None:
    if stack.STATE != REPO / ".cloud":
        pytest.skip(f"the docs read .cloud/env; this session's stack is {stack.STATE}")
    run = block_runs[where]
    run.finished.wait()
    status, output = run.status, run.output
    took = f"exit status {status} after {run.took:.1f} s"
    print(f"{where}: started at +{run.began:.0f} s, {took}")  # shown by pytest -rA
    assert status == 0, f"{took}:\n{output[-6000:]}"
    if run.left_running:
        pytest.fail(f"the block left processes running: {run.left_running}")
