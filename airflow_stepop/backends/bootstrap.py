"""The first code a step's job runs: it checks what came from the artifact store first.

Whoever may write the artifact root could otherwise change what a job runs: a service's entry
script, its launch document and the code bundle (the step runtime included) all come from
there, and a job's execution role may write the whole root. So a job does not start from the
store: its command runs ``BOOTSTRAP``, a few lines of standard library that travel in the job's
environment (which the service stores with the job, out of reach of the store's writers), and
its arguments carry the sha256 of each file the worker staged. The bootstrap reads each file
once, checks its digest, and writes the checked bytes into a private directory (``mkdtemp``,
mode 0700); a mismatch ends the job before anything of it ran, with a message saying so. Then
it puts the checked code bundle(s) (``*.zip``) in front of ``PYTHONPATH`` and replaces itself
(``execv``: the same process, so the service's stop signals reach the step) with the Python
command that follows ``--``, where a file's name stands for its checked copy.

The runtime, imported from the checked bundle, then checks the spec against
``STEPOP_SPEC_SHA256`` (also in the job's environment) and every input against the spec.

Why so terse: SageMaker takes an environment value of at most 512 characters. Line by line:
read the arguments up to ``--`` as (name, path, sha256) triples; for each, read the bytes,
compare the digest, write the copy; set ``PYTHONPATH``; exec.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from airflow_stepop.runtime.spec import SPEC_SHA256_ENV

if TYPE_CHECKING:
    from airflow_stepop.backends.base import JobRequest

BOOTSTRAP_ENV = "STEPOP_BOOTSTRAP"
TRY_ID_ENV = "STEPOP_TRY_ID"
# What the job's command runs: the bootstrap, from the job's own environment.
LOADER = f"import os;exec(os.environ['{BOOTSTRAP_ENV}'])"
BOOTSTRAP = "\n".join(
    (
        "import hashlib,os,sys,tempfile as t",
        "a=sys.argv[1:];i=a.index('--');d=t.mkdtemp();n={};e=os.environ",
        "for k,p,x in zip(*[iter(a[:i])]*3):",
        " b=open(p,'rb').read()",
        " if hashlib.sha256(b).hexdigest()!=x:sys.exit('stepop: '+p+' is not the file this "
        "job was submitted with (sha256 differs); nothing ran')",
        " q=n[k]=d+'/'+k;open(q,'wb').write(b)",
        "e['PYTHONPATH']=':'.join([q for q in n.values() if q[-4:]=='.zip']"
        "+[e.get('PYTHONPATH','')]).rstrip(':')",
        "os.execv(sys.executable,[sys.executable]+[n.get(x,x) for x in a[i+1:]])",
    )
)
BOOTSTRAP_MAX_CHARS = 512  # SageMaker's limit on an environment value


class CheckedFile(NamedTuple):
    """A file the bootstrap checks: its name in the private directory, where the job finds it
    (a path inside the job), and the sha256 of the bytes the worker staged."""

    name: str
    path: str
    sha256: str


def bootstrap_arguments(files: Sequence[CheckedFile], command: Sequence[str]) -> list[str]:
    """``-I -c LOADER`` and its arguments: after the interpreter, the job's whole command line.
    Isolated mode (``-I``): the bootstrap's own imports come from the interpreter, never from
    the working directory, a ``PYTHONPATH`` or a user site the image or the job may have."""
    names = [f.name for f in files]
    if len(set(names)) != len(names) or any("/" in n or n in ("", "--") for n in names):
        raise ValueError(f"bootstrap file names must be distinct plain names, got {names}")
    triples = [part for f in files for part in (f.name, f.path, f.sha256)]
    return ["-I", "-c", LOADER, *triples, "--", *command]


def bootstrap_environment(spec_sha256: str, try_id: str) -> dict[str, str]:
    """What the job's environment carries for the checks, set after the user's environment so
    a step's own variables cannot replace it."""
    env = {BOOTSTRAP_ENV: BOOTSTRAP}
    if spec_sha256:  # every operator's request has it; a request made by hand may not
        env[SPEC_SHA256_ENV] = spec_sha256
    if try_id:
        env[TRY_ID_ENV] = try_id
    return env


def sha256_of(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class StagedFileChangedError(RuntimeError):
    """A file the worker staged was not the same when read back: someone else writes there."""


def read_staged_spec(storage: Any, request: JobRequest) -> dict[str, Any]:
    """The spec the worker staged, read back by a backend for what the job needs (its input
    channels, its mounts): checked against its digest, so a spec rewritten in between cannot
    give the job other inputs than the step's."""
    data = storage.read_bytes(request.spec_uri)
    if request.spec_sha256 and sha256_of(data) != request.spec_sha256:
        raise StagedFileChangedError(
            f"The step's spec {request.spec_uri} changed between the worker's write and its "
            "read back before the submit: something else writes to this run directory. No job "
            "was started. Check who may write to the artifact root (docs/security.md).",
        )
    return json.loads(data)
