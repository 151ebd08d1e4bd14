"""The log relay's memory on the triggerer while a step prints gigabytes without a newline.

A local step (process mode) prints ``--mib`` MiB of printable bytes with no line end, then a
``\\r`` progress bar of ``--frames`` frames. A separate process relays its log as a trigger
does (the backend's ``alogs``, one relay round a poll, ``triggers/log_drain.relay_round``
reading on while more waits) and hashes what the task log would get, undoing only the relay's
marks (a piece's ``[line continues]``, one record a line). It reports the relay process's peak
RSS over its RSS before the relay (``resource.getrusage``), and whether the relayed text is
the step's log, each byte once and in order (line ends as ``\\n``).

    .venv/bin/python bench/log_relay.py [--mib 2048] [--frames 100000] [--poll 1.0] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a script: the repository's package, not an installed one

# What the relay's memory may grow by, whatever the step printed: a read of 256 KiB, its text
# and records, the threads the reads run in, and the allocator's slack (measured: 6 MiB).
RSS_BOUND_MIB = 16

STEP_SOURCE = '''
import sys

def noisy(mib, frames):
    """mib MiB without a line end, then a progress bar of frames \\r frames."""
    write = sys.stdout.buffer.write
    block = (bytes(range(33, 127)) * 11200)[: 1 << 20]
    for _ in range(mib):
        write(block)
    for i in range(frames):
        write(b"\\r%7d/%d |" % (i, frames) + b"#" * (i % 64))
    write(b"\\n")
    sys.stdout.flush()
    return mib
'''


def submit(workdir: Path, mib: int, frames: int) -> tuple[Any, dict[str, Any]]:
    """Stage and start the noisy step as a local process job; its backend and handle."""
    from airflow_stepop.backends.base import JobRequest
    from airflow_stepop.backends.local.backend import LocalBackend
    from airflow_stepop.backends.naming import job_name, task_key
    from airflow_stepop.packaging.staging import StepIdentity, stage_step
    from airflow_stepop.runtime.storage import Storage

    code = workdir / "code"
    code.mkdir(parents=True)
    module = f"noisy_{uuid.uuid4().hex[:8]}"
    (code / f"{module}.py").write_text(STEP_SOURCE)
    sys.path.insert(0, str(code))
    step = __import__(module).noisy
    identity = StepIdentity("bench", f"run-{uuid.uuid4().hex[:8]}", "noisy", -1, 1)
    staged = stage_step(
        step, [mib, frames], {}, root=f"file://{workdir}/root", step=identity, storage=Storage()
    )
    key = task_key(identity.dag_id, identity.run_id, identity.task_id, identity.map_index)
    backend = LocalBackend(jobs_dir=str(workdir / "jobs"))
    handle = backend.submit(
        JobRequest(
            job_name=job_name(key, 1),
            task_key=key,
            spec_uri=staged.spec_uri,
            run_uri=staged.run_uri,
            code_uri=staged.code_uri,
            spec_sha256=staged.spec_sha256,
            code_sha256=staged.code_sha256,
        )
    )
    return backend, handle


async def relay(backend_kwargs: dict[str, Any], handle: dict[str, Any], poll: float) -> dict:
    """Relay the job's log to its end as a trigger does; what the relay saw and held."""
    from airflow_stepop.backends.local.backend import LocalBackend
    from airflow_stepop.backends.log_lines import CONTINUES
    from airflow_stepop.triggers.log_drain import relay_round

    backend = LocalBackend(**backend_kwargs)
    digest, size, records, reads = hashlib.sha256(), 0, 0, 0
    before = _memory_kib("VmRSS")

    async def show(lines: list[str], cursor: Any) -> None:
        nonlocal size, records, reads
        reads += 1
        records += len(lines)
        for line in lines:
            text = line[: -len(CONTINUES)] if line.endswith(CONTINUES) else line + "\n"
            data = text.encode()
            digest.update(data)
            size += len(data)

    started, cursor = time.monotonic(), None
    while True:
        ended = (await backend.astatus(handle)).terminal
        cursor = await relay_round(lambda c: backend.alogs(handle, c), show, cursor, final=ended)
        if ended:
            break
        await asyncio.sleep(poll)  # the trigger's poll interval
    peak = _memory_kib("VmHWM")
    return {
        "before_kib": before,
        "peak_kib": peak,
        "bytes": size,
        "sha256": digest.hexdigest(),
        "records": records,
        "reads": reads,
        "seconds": time.monotonic() - started,
    }


def _memory_kib(field: str) -> int:
    """``VmRSS`` (resident now) or ``VmHWM`` (the peak) of this process, in KiB. Not
    ``getrusage``'s ``ru_maxrss``: Linux carries it over ``execve`` from the parent (the
    bench, with its staging imports), while this process's own peak starts at its exec."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def expected(log: Path) -> tuple[str, int]:
    """The sha256 and size of the job's log as the task log should get it: ``\\r`` line ends
    as ``\\n``, and a last line without its end closed (the step's data has no other
    control character)."""
    digest, size, last = hashlib.sha256(), 0, b"\n"
    with open(log, "rb") as file:
        while chunk := file.read(1 << 22):
            chunk = chunk.replace(b"\r", b"\n")
            digest.update(chunk)
            size, last = size + len(chunk), chunk[-1:]
    if last != b"\n":
        digest.update(b"\n")
        size += 1
    return digest.hexdigest(), size


def measure(mib: int, frames: int, poll: float = 1.0, workdir: Path | None = None) -> dict:
    """Run the noisy step and relay it in a process of its own; the relay's figures, with
    ``ok``: whether the relayed text is the job's log, each byte once and in order."""
    with tempfile.TemporaryDirectory(prefix="stepop-log-relay-", dir=workdir) as tmp:
        backend, handle = submit(Path(tmp), mib, frames)
        command = [sys.executable, __file__, "--relay", json.dumps([backend.serialize(), handle])]
        done = subprocess.run(
            [*command, "--poll", str(poll)], capture_output=True, text=True, check=False
        )
        if done.returncode:
            raise RuntimeError(f"the relay process failed:\n{done.stderr}")
        figures = json.loads(done.stdout.splitlines()[-1])
        log = Path(handle["job_dir"]) / "output.log"
        figures["log_bytes"] = log.stat().st_size
        sha, size = expected(log)
        figures["ok"] = (figures["sha256"], figures["bytes"]) == (sha, size)
        figures["growth_mib"] = (figures["peak_kib"] - figures["before_kib"]) / 1024
        return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=2048)
    parser.add_argument("--frames", type=int, default=100_000)
    parser.add_argument("--poll", type=float, default=1.0)
    parser.add_argument("--quick", action="store_true", help="a smoke run: 16 MiB")
    parser.add_argument("--relay", help=argparse.SUPPRESS)  # the relay process's own
    args = parser.parse_args()
    if args.relay:
        kwargs, handle = json.loads(args.relay)
        print(json.dumps(asyncio.run(relay(kwargs, handle, args.poll))))
        return
    mib, frames = (16, 1000) if args.quick else (args.mib, args.frames)
    figures = measure(mib, frames, args.poll)
    print(
        f"log of {figures['log_bytes'] / 2**20:.1f} MiB ({mib} MiB without a line end, "
        f"{frames} progress-bar frames) relayed in {figures['seconds']:.1f} s, "
        f"{figures['reads']} reads, {figures['records']} task-log records"
    )
    print(
        f"relay process RSS: {figures['before_kib'] / 1024:.1f} MiB before, "
        f"{figures['peak_kib'] / 1024:.1f} MiB at its peak"
    )
    print(
        f"relay memory growth: {figures['growth_mib']:.1f} MiB (bound {RSS_BOUND_MIB} MiB); "
        f"every byte once, in order: {'yes' if figures['ok'] else 'NO'}"
    )
    sys.exit(0 if figures["ok"] and figures["growth_mib"] < RSS_BOUND_MIB else 1)


if __name__ == "__main__":
    main()
