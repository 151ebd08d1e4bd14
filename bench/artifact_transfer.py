"""A 256 MiB numpy array between two steps, against a raw fsspec copy of the same bytes.

Step one materializes its result (.npy, its digest taken as it is written) under the artifact
root; step two reads it once, verifies the digest and loads it. The baseline writes the same
bytes with fsspec and reads them back, with no hashing and no format. The sides alternate, run
after run (the machine may be shared), and each run's files are deleted before the next.
Prints medians of wall and CPU time (all threads) for each side and our speed as a fraction of
raw (raw time / our time; target >= 0.8x), then each side by phase (writing; reading, with our
verification and load). For scale it also times the hashing alone, no I/O:
the two digests a transfer takes (the writer's and the reader's, ``sha256-chunked-8MiB``, on
every core) and two plain sha256 passes (the digest of earlier releases: sequential, so a
transfer verified with it cannot take less). Our CPU time divided by the usable cores is the
least wall time our side can take; on a busy machine the other processes take cores from the
hashing threads, and the wall-time ratio falls towards the CPU-time ratio.

    .venv/bin/python bench/artifact_transfer.py [--mib 256] [--root file:///tmp/x] [--runs 7]
        [--quick]

``--root`` takes any fsspec URL (e.g. s3://bucket/prefix with AWS_ENDPOINT_URL pointing at the
emulated cloud of `make cloud-up`).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import fsspec
import numpy as np

from airflow_stepop.runtime import values
from airflow_stepop.runtime.digest import CHUNKED, _cpus, new_digest
from airflow_stepop.runtime.storage import Storage, join

# --quick: a smoke run (the same lines, figures of no weight): 8 MiB, two runs each side
QUICK = {"mib": 8, "runs": 2}
QUICK_HELP = f"a smoke run of a second or so: {QUICK}; the figures mean nothing"


def timed(call: Callable[[], object]) -> tuple[float, float]:
    """Wall and CPU seconds (this process, all threads) of one call."""
    wall, cpu = time.perf_counter(), time.process_time()
    call()
    return time.perf_counter() - wall, time.process_time() - cpu


class Phases:
    """Wall and CPU seconds of the phases of one timed call, each from the end of the last."""

    def __init__(self) -> None:
        self.samples: dict[str, list[tuple[float, float]]] = {}
        self._mark = (0.0, 0.0)

    def start(self) -> None:
        self._mark = (time.perf_counter(), time.process_time())

    def end(self, name: str) -> None:
        wall, cpu = time.perf_counter(), time.process_time()
        self.samples.setdefault(name, []).append((wall - self._mark[0], cpu - self._mark[1]))
        self._mark = (wall, cpu)

    def median(self, name: str) -> tuple[float, float]:
        samples = self.samples[name]
        return statistics.median(w for w, _ in samples), statistics.median(c for _, c in samples)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mib", type=int, default=256)
    parser.add_argument("--root", default=None)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help=QUICK_HELP)
    options = parser.parse_args()
    if options.quick:  # its sizes become the defaults: an argument given still wins
        parser.set_defaults(**QUICK)
        options = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="stepop-bench-"))
    root = options.root or f"file://{scratch}/root"
    array = np.random.default_rng(0).random(options.mib * 2**20 // 8)
    raw = array.tobytes()
    storage = Storage()
    phases = Phases()

    def ours(i: int) -> tuple[float, float]:
        uri = join(root, f"ours{i}", "return_value")

        def transfer() -> None:
            phases.start()
            ref = values.write_artifact(array, uri, storage)
            phases.end("ours write")
            back = values.read_artifact(ref, storage, scratch / f"cache{i}")
            assert back.shape == array.shape
            del back  # its memory is unmapped here, as raw's bytes are below
            phases.end("ours read")

        elapsed = timed(transfer)
        fs, path = fsspec.core.url_to_fs(uri + ".npy")
        fs.rm(path)
        return elapsed

    def baseline(i: int) -> tuple[float, float]:
        fs, path = fsspec.core.url_to_fs(join(root, f"raw{i}", "data.bin"))

        def transfer() -> None:
            phases.start()
            fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
            fs.pipe_file(path, raw)
            phases.end("raw write")
            assert len(fs.cat_file(path)) == len(raw)
            phases.end("raw read")

        elapsed = timed(transfer)
        fs.rm(path)
        return elapsed

    def chunked_digests(i: int) -> tuple[float, float]:
        def twice() -> None:
            for _ in range(2):
                digest = new_digest(CHUNKED)
                digest.update(raw)
                digest.hexdigest()

        return timed(twice)

    def sha256_passes(i: int) -> tuple[float, float]:
        return timed(lambda: [hashlib.sha256(raw).digest() for _ in range(2)])

    sides: list[tuple[Callable[[int], tuple[float, float]], list[tuple[float, float]]]] = [
        (ours, []),
        (baseline, []),
        (chunked_digests, []),
        (sha256_passes, []),
    ]
    ours(-1), baseline(-1)  # warm up: imports, first allocations
    phases.samples.clear()
    load_before = os.getloadavg()[0]
    for i in range(options.runs):
        for run, samples in sides if i % 2 == 0 else reversed(sides):
            samples.append(run(i))
    load_after = os.getloadavg()[0]
    (o_wall, o_cpu), (b_wall, b_cpu), (c_wall, c_cpu), (s_wall, s_cpu) = [
        (statistics.median(w for w, _ in samples), statistics.median(c for _, c in samples))
        for _, samples in sides
    ]
    cores = _cpus()
    print(
        f"{options.mib} MiB array via {root.split('://')[0]}://, {options.runs} runs each, "
        f"{cores} usable cores, load average {load_before:.1f} -> {load_after:.1f}"
    )
    print("                                                  wall s   CPU s")
    print(f"step -> step (materialize, hash, verify, load):  {o_wall:6.3f}  {o_cpu:6.3f}")
    print(f"raw fsspec write + read of the same bytes:       {b_wall:6.3f}  {b_cpu:6.3f}")
    print(f"our two chunked digests alone (no I/O):          {c_wall:6.3f}  {c_cpu:6.3f}")
    print(f"two plain sha256 passes alone (no I/O):          {s_wall:6.3f}  {s_cpu:6.3f}")
    print(f"speed ours/raw (raw time / our time):            {b_wall / o_wall:6.2f}x (>= 0.8x)")
    print("by phase (medians)                       ours wall  CPU s   raw wall  CPU s")
    for phase, what in (
        ("write", "write (ours: hashed as written)"),
        ("read", "read (ours: verified, loaded)"),
    ):
        (ow, oc), (rw, rc) = phases.median(f"ours {phase}"), phases.median(f"raw {phase}")
        print(f"{what:40s} {ow:6.3f}  {oc:6.3f}     {rw:6.3f}  {rc:6.3f}")
    shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
