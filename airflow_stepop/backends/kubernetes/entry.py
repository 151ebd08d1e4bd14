"""The Kubernetes pod's entry point: fetches the step's files, runs the runtime, uploads results.

Standard library only: the image needs Python and nothing of ours or of any cloud. The worker
puts this file and ``stepop_launch.json`` into the Job's Secret, mounted read-only; the pod's
command is the bootstrap (``backends/bootstrap.py``), which checks both against the digests the
command carries, then runs ``python3 <checked copy of this file> <checked launch file>``.

The launch document holds the URIs of the step (``spec_uri``, ``run_uri``, ``output_uri``,
``checkpoint_uri``), the code bundle's sha256, the rank layout (``world``) and, for an object
store root, the ``transfer`` document (``transfer.py``): signed URLs to download and the upload
grants. With it, this script

1. downloads every file into a private work directory and checks the code bundle's sha256
   before anything of it runs (the runtime checks the spec and every input itself);
2. runs ``python3 -m airflow_stepop.runtime <spec>`` from the checked bundle, with
   ``STEPOP_PATH_MAP`` mapping each URI to its local copy, so the runtime reads and writes
   local files; SIGTERM (the Job's deletion) is passed on, and the runtime writes error.json;
3. on rank 0, uploads what the runtime wrote to the output prefix, ``result.json`` (or
   ``error.json``) last, since its presence means the step ended; then the checkpoints.

Without ``transfer`` (a ``file://`` root on a volume every pod mounts at the same path) the
URIs are read where they are, and only the code bundle is checked and copied first.

A signed URL is a credential: no message here ever shows one, only the file it is for.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from urllib.parse import quote, unquote, urlsplit

DEFAULT_MASTER_PORT = "29500"
LAST = ("result.json", "error.json")  # what says the step ended: uploaded after the rest
ATTEMPTS = 4
CHUNK = 1 << 20


class TransferError(RuntimeError):
    """A download or upload that failed after its retries (the message names the file)."""


def rank_environment(world: dict, index: str) -> dict:
    """torch-style rank variables from the Indexed Job's completion index (one per node)."""
    return {
        "MASTER_ADDR": world.get("master_addr") or "localhost",
        "MASTER_PORT": os.environ.get("MASTER_PORT") or DEFAULT_MASTER_PORT,
        "WORLD_SIZE": str(world.get("size", 1)),
        "RANK": index,
        "NODE_RANK": index,
        "LOCAL_RANK": "0",
    }


def _error_code(exc: urllib.error.HTTPError) -> str:
    """The store's error code (Azure's ``x-ms-error-code``, S3's and GCS's ``<Code>``), and
    nothing else of its answer: an S3 SignatureDoesNotMatch body echoes the string it signed."""
    code = (exc.headers or {}).get("x-ms-error-code") or ""
    if not code:
        try:
            found = re.search(rb"<Code>([A-Za-z]{1,64})</Code>", exc.read(4096))
        except (OSError, http.client.HTTPException):
            found = None
        code = found.group(1).decode() if found else ""
    return code if re.fullmatch(r"[A-Za-z]{1,64}", code) else ""


def _retrying(what: str, call):
    """``call()`` again after a pause on a network error, a 5xx or a 429; anything else (a
    403 from an expired or wrong signature) at once."""
    for attempt in range(1, ATTEMPTS + 1):
        try:
            return call()
        except urllib.error.HTTPError as exc:
            if exc.code < 500 and exc.code != 429 or attempt == ATTEMPTS:
                code = _error_code(exc)
                raise TransferError(
                    f"{what}: the store answered HTTP {exc.code}" + (f" {code}" if code else "")
                ) from None
        except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
            if attempt == ATTEMPTS:
                reason = getattr(exc, "reason", exc)
                raise TransferError(f"{what}: {type(exc).__name__} ({reason})") from None
        time.sleep(min(8.0, 0.5 * 2**attempt))
    raise AssertionError("unreachable")


def download(url: str, target: str) -> None:
    os.makedirs(os.path.dirname(target), exist_ok=True)

    def fetch() -> None:
        with urllib.request.urlopen(url, timeout=60) as answer, open(target, "wb") as file:
            shutil.copyfileobj(answer, file, CHUNK)

    _retrying(f"downloading {os.path.basename(target)}", fetch)


def _form_body(fields: dict, key: str, path: str):
    """A multipart/form-data POST of ``fields``, the key and the file, streamed from disk: its
    content type, its length, and a function that yields it from the start."""
    boundary = uuid.uuid4().hex
    head = b"".join(
        f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'.encode()
        for name, value in [*fields.items(), ("key", key)]
    )
    head += (
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="blob"'
        "\r\nContent-Type: application/octet-stream\r\n\r\n"
    ).encode()
    tail = f"\r\n--{boundary}--\r\n".encode()
    size = len(head) + os.path.getsize(path) + len(tail)

    def chunks():
        yield head
        with open(path, "rb") as file:
            while block := file.read(CHUNK):
                yield block
        yield tail

    return f"multipart/form-data; boundary={boundary}", size, chunks


def _file_chunks(path: str):
    """A function that yields the file ``path`` from the start (a retry sends it again)."""

    def chunks():
        with open(path, "rb") as file:
            while block := file.read(CHUNK):
                yield block

    return chunks


def upload(grant: dict, relative: str, path: str) -> None:
    """One file to ``<grant's prefix><relative>``, as the grant allows: ``post``, a form under
    a POST policy (S3, GCS); ``put``, a Put Blob under a directory SAS (Azure)."""
    size = os.path.getsize(path)
    if size > grant.get("max_bytes", size):
        raise TransferError(
            f"uploading {relative}: it is {size} bytes, more than one upload takes "
            f"({grant['max_bytes']}); split it into smaller files"
        )
    if grant["kind"] == "post":
        content_type, length, chunks = _form_body(grant["fields"], grant["prefix"] + relative,
                                                  path)  # fmt: skip
        url, method, headers = grant["url"], "POST", {"Content-Type": content_type}
    elif grant["kind"] == "put":
        length, chunks = size, _file_chunks(path)
        url = f"{grant['url']}{quote(grant['prefix'] + relative)}?{grant['query']}"
        method = "PUT"
        headers = {"x-ms-blob-type": "BlockBlob", "Content-Type": "application/octet-stream"}
    else:
        raise TransferError(f"uploading {relative}: unknown upload kind {grant['kind']!r}")

    def send() -> None:
        request = urllib.request.Request(
            url, data=chunks(), method=method, headers={**headers, "Content-Length": str(length)}
        )
        with urllib.request.urlopen(request, timeout=300) as answer:
            answer.read()

    _retrying(f"uploading {relative}", send)


def tree_state(directory: str) -> dict:
    """relative path -> (size, mtime) of each regular file under ``directory``."""
    state = {}
    for root, dirs, names in os.walk(directory):
        dirs.sort()
        for name in sorted(names):
            path = os.path.join(root, name)
            if os.path.isfile(path) and not os.path.islink(path):
                info = os.stat(path)
                relative = os.path.relpath(path, directory).replace(os.sep, "/")
                state[relative] = (info.st_size, info.st_mtime_ns)
    return state


def upload_tree(grant: dict, directory: str, unchanged: dict | None = None) -> int:
    """Every regular file under ``directory`` (links are not followed) but those as they were
    in ``unchanged`` (checkpoints as downloaded), ``LAST`` last."""
    state = tree_state(directory)
    files = [rel for rel, facts in state.items() if (unchanged or {}).get(rel) != facts]
    files.sort(key=lambda relative: relative in LAST)
    for relative in files:
        try:
            relative.encode("utf-8")
        except UnicodeEncodeError:
            raise TransferError(
                f"uploading {relative!r}: its name is not UTF-8, which no object key can be; "
                "rename it"
            ) from None
        upload(grant, relative, os.path.join(directory, relative))
    return len(files)


def inside(work: str, relative: str) -> str:
    """``relative`` under ``work``, refused when it would lead out of it."""
    target = os.path.normpath(os.path.join(work, relative))
    if not target.startswith(os.path.normpath(work) + os.sep):
        raise TransferError(f"the file {relative!r} would be written outside the step's directory")
    return target


def local_path(uri: str) -> str:
    parts = urlsplit(uri)
    return unquote(parts.path) if parts.scheme in ("file", "local") else uri


def checked_code(source: str, sha256: str, target: str) -> str:
    """A private copy of the code bundle whose digest is the one the worker staged."""
    with open(source, "rb") as file:
        data = file.read()
    if hashlib.sha256(data).hexdigest() != sha256:
        raise TransferError(
            "the code bundle is not the one this job was submitted with (sha256 differs); "
            "nothing ran"
        )
    with open(target, "wb") as file:
        file.write(data)
    return target


def fetch_all(launch: dict, work: str) -> tuple[dict, str, str, str]:
    """Download (or find) everything; the path map, code bundle, output and checkpoint dirs."""
    transfer = launch.get("transfer")
    if transfer is None:  # a shared volume: every URI is a path here
        code = checked_code(local_path(launch["code_uri"]), launch["code_sha256"],
                            os.path.join(work, "code.zip"))  # fmt: skip
        return {}, code, launch["output_uri"], local_path(launch["checkpoint_uri"])
    started = time.monotonic()
    for item in transfer["downloads"]:
        download(item["url"], inside(work, item["path"]))
    print(f"[stepop] fetched {len(transfer['downloads'])} files in "
          f"{time.monotonic() - started:.1f}s", flush=True)  # fmt: skip
    path_map = {uri: os.path.join(work, rel) for uri, rel in transfer["path_map"].items()}
    code = path_map[launch["code_uri"]]
    checked_code(code, launch["code_sha256"], code)
    output_dir = os.path.join(work, "out")
    checkpoints = os.path.join(work, "checkpoints")
    os.makedirs(output_dir, exist_ok=True)
    os.makedirs(checkpoints, exist_ok=True)
    path_map[launch["output_uri"]] = output_dir
    return path_map, code, output_dir, checkpoints


def main(argv: list) -> int:
    with open(argv[1]) as handle:
        launch = json.load(handle)
    work = tempfile.mkdtemp(prefix="stepop-")
    env = dict(os.environ)
    rank = env.get("JOB_COMPLETION_INDEX") or "0"
    env.update(rank_environment(launch.get("world", {}), rank))
    try:
        path_map, code, output_dir, checkpoints = fetch_all(launch, work)
    except (TransferError, OSError, KeyError) as exc:
        print(f"[stepop] the step's files could not be fetched: {exc}", file=sys.stderr)
        return 1
    output_uri = launch["output_uri"]
    if rank != "0":  # only rank 0's outputs are the step's result
        output_dir = tempfile.mkdtemp(prefix=f"stepop-rank{rank}-")
        path_map.pop(output_uri, None)
        output_uri = output_dir
    env["STEPOP_OUTPUT_URI"] = output_uri
    env["STEPOP_PATH_MAP"] = json.dumps(path_map)
    env["STEPOP_CHECKPOINT_DIR"] = checkpoints
    env["PYTHONPATH"] = os.pathsep.join(p for p in (code, env.get("PYTHONPATH")) if p)
    downloaded = tree_state(checkpoints) if launch.get("transfer") else {}
    command = [sys.executable, "-m", "airflow_stepop.runtime", launch["spec_uri"]]
    child = subprocess.Popen(command, env=env)
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda number, _frame: child.send_signal(number))
    exit_code = child.wait()
    if exit_code < 0:  # ended by a signal before the runtime could answer it: as a shell says
        exit_code = 128 - exit_code
    transfer = launch.get("transfer")
    if transfer is None or rank != "0":
        return exit_code
    try:
        upload_tree(transfer["uploads"]["checkpoint"], checkpoints, downloaded)
        sent = upload_tree(transfer["uploads"]["output"], output_dir)  # result.json last
    except (TransferError, OSError) as exc:
        print(f"[stepop] the step's results could not be uploaded: {exc}", file=sys.stderr)
        return exit_code or 1
    print(f"[stepop] uploaded the step's results ({sent} files)", flush=True)
    return exit_code


if __name__ == "__main__":
    sys.exit(main(sys.argv))
