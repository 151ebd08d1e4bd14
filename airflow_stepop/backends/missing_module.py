"""What to do about a module a step's job could not import, told apart on the worker.

The job's environment is the image's, not the worker's; the worker, which reads the failure,
still knows what it has: a package it installed (named as PyPI names it, which may differ from
the import name: ``sklearn`` is ``scikit-learn``), a package the job has in another version
(``numpy._core``: an array pickled by numpy 2, read by numpy 1), a module of the DAGs folder
the code bundle missed, or a module of Python's own.
"""

from __future__ import annotations

import re
import sys
from importlib import metadata
from pathlib import Path


def missing_module_hint(message: str) -> str:
    """The hint for ``No module named '<name>'`` raised in a job."""
    named = re.search(r"No module named '([^']+)'", message)
    missing = named.group(1) if named else "the package"
    top = missing.partition(".")[0]
    if top == "airflow":
        return (
            "The job's Python has no Airflow: a step runs outside Airflow, and what it imports "
            "must not import Airflow. Move the Airflow imports to the DAG file, or give the job "
            "docker=DockerSettings(requirements=['apache-airflow']) if the step needs Airflow's "
            "library."
        )
    if (origin := _own_module_origin(top)) is not None:  # the user's, whatever PyPI has
        return (
            f"The job has no module {missing!r}, which the worker has at {origin}, outside "
            "site-packages: the code bundle takes the modules of your DAGs folder that the "
            "step's code names in an import statement, and none names this one (an import by "
            f"a computed name, importlib.import_module(...), is not seen). Add `import "
            f"{missing}` to the module that defines the step."
        )
    owners = _distributions(top)
    if missing != top and len(owners) == 1:  # the job imported the package, not this part
        owner, version = owners[0], metadata.version(owners[0])
        if not _holds(owner, missing):
            return (
                f"Neither the job nor the worker ({owner} {version}) has the module "
                f"{missing!r}: check the name, or the {owner} version that has it."
            )
        return (
            f"The job has the package {top!r} but not its module {missing!r}: the job's "
            f"{owner} is another version than the worker's {version} (a value pickled by one "
            "version and read by another, or code written for the other). Give the job the "
            f"worker's version: docker=DockerSettings(requirements=['{owner}=={version}']), or "
            "return the value in a form that does not depend on it (an array, a DataFrame, JSON)."
        )
    owner = next((name for name in owners if _holds(name, missing)), None)
    if missing == top and len(owners) > 1:
        owner = None  # a namespace many packages share (google, azure): no one to name
    if owner is not None:
        version = metadata.version(owner)
        requirement = f"'{owner}=={version}'"
        where = f"the worker has it from {owner} {version}"
    elif top in sys.stdlib_module_names:
        return (
            f"The job's Python has no module {missing!r}, which is part of Python itself: the "
            "job's image has a Python built without it; use an image with a full Python."
        )
    else:
        requirement = "'<the package that provides it>'"
        where = f"its name on PyPI may differ from {top!r} (sklearn is scikit-learn)"
    return (
        f"The job's Python has no module {missing!r}: a step imports what its job's "
        f"environment has ({where}). Add it with docker=DockerSettings(requirements="
        f"[{requirement}]) (or use an image that has it); a local step without docker= runs "
        "in the worker's own Python, so install it there."
    )


def _distributions(top: str) -> list[str]:
    """The installed distributions that make the top-level package ``top`` (several for a
    namespace package such as ``google``)."""
    return [name for name in metadata.packages_distributions().get(top) or [] if name]


def _holds(distribution: str, module: str) -> bool:
    """Whether the distribution's files hold ``module`` (a package, a .py, an extension)."""
    path = module.replace(".", "/")
    return any(
        str(file).startswith((f"{path}/", f"{path}."))
        for file in metadata.distribution(distribution).files or []
    )


def _own_module_origin(module: str) -> str | None:
    """Where the worker finds ``module`` outside site-packages and Python's own library (a
    DAGs folder, a project on ``PYTHONPATH``); None when it has no such module."""
    import importlib.util
    import site
    import sysconfig

    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    locations = list(spec.submodule_search_locations or []) or [spec.origin]
    if not locations[0]:
        return None
    location = Path(locations[0]).resolve()
    installed = {Path(p).resolve() for p in site.getsitepackages() + [site.getusersitepackages()]}
    installed |= {
        Path(sysconfig.get_paths()[k]).resolve() for k in ("purelib", "platlib", "stdlib")
    }
    if any(location.is_relative_to(root) for root in installed):
        return None
    return str(location)
