"""A 256 MiB numpy array between two steps, against a raw fsspec copy of the same bytes.

Step one materializes its result (.npy, hashed as it is written) under the artifact root; step
two reads it once, verifies the sha256 and loads it. The baseline writes the same bytes with
fsspec and reads them back, with no hashing and no format. The two alternate, run after run
(the machine may be shared), and each run's files are deleted before the next. Prints both
medians and our speed as a fraction of raw (raw time / our time; target >= 0.8x), and the time
of the two sha256 passes alone (the writer's and the reader's): each is sequential, so however
well the I/O hides behind them, a verified transfer cannot take less on this CPU.

    .venv/bin/python bench/artifact_transfer.py [--mib 256] [--root file:///tmp/x] [--runs 7]

``--root`` takes any fsspec URL (e.g. s3://bucket/prefix with AWS_ENDPOINT_URL pointing at the
emulated cloud of `make cloud-up`).
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import fsspec
import numpy as np

from airflow_stepop.runtime import values
from airflow_stepop.runtime.storage import Storage, join


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mib", type=int, default=256)
    parser.add_argument("--root", default=None)
    parser.add_argument("--runs", type=int, default=7)
    options = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="stepop-bench-"))
    root = options.root or f"file://{scratch}/root"
    array = np.random.default_rng(0).random(options.mib * 2**20 // 8)
    raw = array.tobytes()
    storage = Storage()

    def ours(i: int) -> float:
        start = time.perf_counter()
        ref = values.write_artifact(array, join(root, f"ours{i}", "return_value"), storage)
        back = values.read_artifact(ref, storage, scratch / f"cache{i}")
        elapsed = time.perf_counter() - start
        assert back.shape == array.shape
        fs, path = fsspec.core.url_to_fs(ref["uri"])
        fs.rm(path)
        return elapsed

    def baseline(i: int) -> float:
        fs, path = fsspec.core.url_to_fs(join(root, f"raw{i}", "data.bin"))
        start = time.perf_counter()
        fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
        fs.pipe_file(path, raw)
        back = fs.cat_file(path)
        elapsed = time.perf_counter() - start
        assert len(back) == len(raw)
        fs.rm(path)
        return elapsed

    def two_hashes(i: int) -> float:
        start = time.perf_counter()
        hashlib.sha256(raw).digest()
        hashlib.sha256(raw).digest()
        return time.perf_counter() - start

    ours(-1), baseline(-1)  # warm up: imports, first allocations
    ours_s, base_s, hash_s = [], [], []
    for i in range(options.runs):
        runs = [(ours, ours_s), (baseline, base_s), (two_hashes, hash_s)]
        for run, samples in runs if i % 2 == 0 else reversed(runs):
            samples.append(run(i))
    ours_m, base_m = statistics.median(ours_s), statistics.median(base_s)
    hash_m = statistics.median(hash_s)
    print(f"{options.mib} MiB array via {root.split('://')[0]}://, {options.runs} runs each")
    print(f"step -> step (materialize, hash, verify, load): {ours_m:7.3f} s")
    print(f"raw fsspec write + read of the same bytes:      {base_m:7.3f} s")
    print(f"sha256 of the bytes, twice (writer + reader):   {hash_m:7.3f} s (no I/O)")
    print(f"speed ours/raw (raw time / our time):           {base_m / ours_m:7.2f}x (>= 0.8x)")
    print(f"our time / the two sha256 passes alone:         {ours_m / hash_m:7.2f}x")
    shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
