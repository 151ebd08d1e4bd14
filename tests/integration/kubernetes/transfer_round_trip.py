"""The round trip each store's transfer test makes (s3://, gs://, abfs://): a step's files
staged under the root, the worker's transfer plan signed by the store's signer, the pod's entry
script fetching them and uploading what the runtime would write, and the worker reading the
results back through its own filesystem."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from airflow_stepop.artifacts.storage import worker_storage
from airflow_stepop.backends.base import JobRequest
from airflow_stepop.backends.kubernetes import entry, signers, transfer

CODE = b"PK\x05\x06" + b"\0" * 18  # an empty zip


def round_trip(
    root: str, conn: str, put: Callable[[str, bytes], None], tmp_path: Path
) -> dict[str, Any]:
    """Run it on ``root`` (reached with ``conn``; ``put(uri, data)`` writes an object there);
    the transfer document the pod had."""
    run = f"{root}/runs/dag/run/task/-1/1"
    upstream = f"{root}/runs/dag/run/prep/-1/1/outputs/model"
    code_uri = f"{root}/code/{hashlib.sha256(CODE).hexdigest()}.zip"
    spec = {"args": [{"ref": {"uri": upstream}}], "kwargs": {}}
    put(code_uri, CODE)
    put(f"{run}/spec.json", json.dumps(spec).encode())
    put(f"{run}/inputs/arg0.npy", b"array bytes")
    put(f"{upstream}/weights.bin", b"weights")
    put(f"{upstream}/config/model.json", b"{}")
    request = JobRequest(job_name="j", task_key="k", spec_uri=f"{run}/spec.json", run_uri=run,
                         code_uri=code_uri)  # fmt: skip
    put(f"{request.checkpoint_uri}/step-1.ckpt", b"epoch 1")
    output_uri = f"{run}/output"
    storage = worker_storage(conn)

    document = transfer.plan(request, spec, storage, signers.signer_for(root, conn),
                             output_uri=output_uri, expires_s=600)  # fmt: skip

    assert len(transfer.secret_bytes(document)) < transfer.MAX_DOCUMENT_BYTES
    launch = {"code_uri": code_uri, "code_sha256": hashlib.sha256(CODE).hexdigest(),
              "output_uri": output_uri, "checkpoint_uri": request.checkpoint_uri,
              "transfer": document}  # fmt: skip
    path_map, code, output_dir, checkpoints = entry.fetch_all(launch, str(tmp_path / "work"))
    local = {uri: Path(path) for uri, path in path_map.items()}
    assert Path(code).read_bytes() == CODE
    assert (local[run] / "spec.json").read_bytes() == json.dumps(spec).encode()
    assert (local[run] / "inputs" / "arg0.npy").read_bytes() == b"array bytes"
    assert (local[upstream] / "weights.bin").read_bytes() == b"weights"
    assert (local[upstream] / "config" / "model.json").read_bytes() == b"{}"
    assert (Path(checkpoints) / "step-1.ckpt").read_bytes() == b"epoch 1"
    assert local[output_uri] == Path(output_dir)

    out = Path(output_dir)  # what the runtime would write, then the entry's uploads
    (out / "outputs" / "model").mkdir(parents=True)
    (out / "outputs" / "model" / "w.bin").write_bytes(b"\x00" * 70_000)
    (out / "outputs" / "empty.txt").write_bytes(b"")
    (out / "result.json").write_text('{"ok": true}')
    downloaded = entry.tree_state(checkpoints)
    (Path(checkpoints) / "step-2.ckpt").write_bytes(b"epoch 2")
    assert entry.upload_tree(document["uploads"]["output"], output_dir) == 3
    assert entry.upload_tree(document["uploads"]["checkpoint"], checkpoints, downloaded) == 1

    storage.resolver(root)[0].invalidate_cache()  # its listings from the plan are old now
    assert storage.read_bytes(f"{output_uri}/outputs/model/w.bin") == b"\x00" * 70_000
    assert storage.read_bytes(f"{output_uri}/outputs/empty.txt") == b""
    assert storage.read_bytes(f"{output_uri}/result.json") == b'{"ok": true}'
    assert storage.read_bytes(f"{request.checkpoint_uri}/step-2.ckpt") == b"epoch 2"
    return document
