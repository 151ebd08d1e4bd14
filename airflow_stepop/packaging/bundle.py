"""Packages a task's callable into a content-addressed code bundle (a zip).

The bundle holds the step runtime (``airflow_stepop/runtime``, standard library only, with the
public names a step's modules may import: ``packaging/job_init.py``), the
callable's module and the local modules it imports (from the DAGs folder or the user's own
package, never site-packages), and, when the callable cannot be imported by name, the callable
pickled by value together with the worker's own cloudpickle and the source lines of the code
it carries (``by_value.py``). Entries are sorted and timestamps fixed, so the same code always
yields the same sha256 and is uploaded once.

The runtime imports a module-level function by module and qualified name. Functions defined in
a DAG file (a module that imports Airflow, which the job may not have), closures, lambdas and
nested functions travel pickled by value instead.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import io
import logging
import sys
import sysconfig
import types
import zipfile
from collections.abc import Callable, Iterable, Iterator
from functools import cache, lru_cache
from pathlib import Path
from typing import Any

import airflow_stepop.runtime as runtime_package
from airflow_stepop.packaging.by_value import PackagingError, pickle_by_value
from airflow_stepop.packaging.cache import BundleCache, CodeBundle, lookup
from airflow_stepop.runtime.spec import (
    BUNDLE_CALLABLE,
    BUNDLE_CODE_DIR,
    BUNDLE_DEPS_DIR,
    BUNDLE_SOURCES,
)

_FIXED_TIME = (1980, 1, 1, 0, 0, 0)
# A callable pickled by value above this size captured data (a closure's variables, globals of
# the DAG file it uses): worth a warning, since it is pickled and uploaded again at each change.
LARGE_PICKLE_BYTES = 10 * 2**20

log = logging.getLogger(__name__)


def _stdlib_and_site_dirs() -> tuple[Path, ...]:
    names = ("stdlib", "platstdlib", "purelib", "platlib")
    paths = sysconfig.get_paths()
    return tuple({Path(p).resolve() for n in names if (p := paths.get(n))})


@cache
def _excluded_dirs() -> tuple[Path, ...]:
    own = Path(runtime_package.__file__).resolve().parent.parent  # airflow_stepop itself
    return (*_stdlib_and_site_dirs(), own, Path(sys.prefix).resolve())


@lru_cache(maxsize=4096)
def _is_local_file(path: Path) -> bool:
    resolved = path.resolve()
    if "site-packages" in resolved.parts or "dist-packages" in resolved.parts:
        return False
    return not any(resolved.is_relative_to(d) for d in _excluded_dirs())


def _local_path_dirs() -> set[Path]:
    """The ``sys.path`` directories a local module could appear in (say, one an import of the
    callable's modules did not find when the bundle was built)."""
    dirs = (Path(entry) for entry in sys.path if entry)
    return {d for d in dirs if d.is_dir() and _is_local_file(d / "__init__.py")}


def _module_file(module: types.ModuleType) -> Path | None:
    file = getattr(module, "__file__", None)
    if not file or not file.endswith(".py"):
        return None
    return Path(file)


def _import_root(module_name: str, file: Path) -> Path:
    """The directory that ``module_name`` is importable from (the sys.path entry)."""
    depth = module_name.count(".") + (1 if file.name == "__init__.py" else 0)
    root = file.parent
    for _ in range(depth):
        root = root.parent
    return root


def _imported_names(file: Path, module_name: str, is_package: bool) -> frozenset[str]:
    """Absolute names of modules a source file imports (static: no code is run)."""
    return _names_in_source(file.read_bytes(), str(file), module_name, is_package)


@lru_cache(maxsize=1024)
def _names_in_source(
    source: bytes, filename: str, module_name: str, is_package: bool
) -> frozenset[str]:
    # keyed by the source itself: a warm execute() parses nothing, an edited file is re-parsed
    tree = ast.parse(source, filename=filename)
    package = module_name if is_package else module_name.rpartition(".")[0]
    names: set[str] = set()
    for node in _statements(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".") if package else []
                base = base[: len(base) - node.level + 1] if node.level > 1 else base
                prefix = ".".join(base)
                target = f"{prefix}.{node.module}" if node.module else prefix
            else:
                target = node.module or ""
            if target:
                names.add(target)
                names.update(f"{target}.{alias.name}" for alias in node.names)
    return frozenset(names)


def _statements(tree: ast.AST) -> Iterator[ast.AST]:
    """Every node but expressions (an import is a statement): most of a tree is expressions."""
    pending = [tree]
    while pending:
        node = pending.pop()
        yield node
        pending.extend(c for c in ast.iter_child_nodes(node) if not isinstance(c, ast.expr))


def airflow_importers(module: types.ModuleType) -> list[str]:
    """The modules that import Airflow among ``module`` and the local modules it imports at any
    depth: the job may have no Airflow, so none of them can be imported there."""
    files = collect_local_modules([module])
    if (own := _module_file(module)) is not None:
        files.setdefault(module.__name__, own)
    found = []
    for name, file in sorted(files.items()):
        names = _imported_names(file, name, file.name == "__init__.py")
        if any(n == "airflow" or n.startswith("airflow.") for n in names):
            found.append(name)
    return found


def _find_module(name: str) -> tuple[str, Path] | None:
    module = sys.modules.get(name)
    if module is not None:
        file = _module_file(module)
        return (name, file) if file else None
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError, AttributeError):
        return None
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return None
    return name, Path(spec.origin)


def collect_local_modules(roots: Iterable[types.ModuleType]) -> dict[str, Path]:
    """The given modules plus every local module they import, transitively: name -> file."""
    found: dict[str, Path] = {}
    pending = [(m.__name__, f) for m in roots if (f := _module_file(m)) and _is_local_file(f)]
    while pending:
        name, file = pending.pop()
        if name in found:
            continue
        found[name] = file
        # parent packages' __init__ files are needed to import a submodule
        parts = name.split(".")
        for i in range(1, len(parts)):
            parent = _find_module(".".join(parts[:i]))
            if parent and _is_local_file(parent[1]):
                pending.append(parent)
        for imported in _imported_names(file, name, file.name == "__init__.py"):
            hit = _find_module(imported)
            if hit and _is_local_file(hit[1]):
                pending.append(hit)
    return found


def _callable_entry(
    function: Callable[..., Any], airflow_modules: list[str]
) -> dict[str, Any] | None:
    """How the runtime imports the function by name, or None when it must be pickled (also when
    importing its module would import Airflow: ``airflow_modules``, from ``airflow_importers``)."""
    module = sys.modules.get(function.__module__)
    qualname = getattr(function, "__qualname__", "")
    if module is None or "<" in qualname or _module_file(module) is None:
        return None
    if airflow_modules:
        return None
    if lookup(module, qualname) is not function:
        return None
    return {"kind": "import", "module": function.__module__, "qualname": qualname}


def _package_files(package: types.ModuleType) -> list[Path]:
    root = Path(package.__file__).parent  # type: ignore[arg-type]
    return sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts)


def build_bundle(function: Callable[..., Any], cache: BundleCache | None = None) -> CodeBundle:
    """The callable's bundle: from ``cache`` when its sources are unchanged, else built (and
    kept in ``cache`` for the next task)."""
    module = sys.modules.get(function.__module__)
    if function.__module__ == "__main__" and _module_file(module) is None:
        raise PackagingError(
            f"The callable {function.__qualname__!r} is defined in __main__ without a source "
            "file (an interactive session, a notebook or `python -c`), so the job cannot get "
            "its code or the local modules it imports. Move it into a module file in the DAGs "
            "folder (or your own package) and import it from there."
        )
    if cache is not None:
        found = cache.find(function, rebuild=lambda: _build(function, module).data)
        if found is not None:
            return found
    return _build(function, module, cache)


def _build(
    function: Callable[..., Any],
    module: types.ModuleType | None,
    cache: BundleCache | None = None,
) -> CodeBundle:
    # what the step uses from a module that imports Airflow travels by value with it
    by_value = airflow_importers(module) if module is not None else []
    entry = _callable_entry(function, by_value)
    sources: dict[str, Path] = {}  # bundle member -> the file it is read from
    files: dict[str, bytes] = {}
    pickled = None

    if entry is None:
        import cloudpickle

        pickled = pickle_by_value(function, by_value)
        if len(pickled.pickle) > LARGE_PICKLE_BYTES:
            log.warning(
                "The step %s travels pickled with what it uses, %.0f MiB: it captures data (a "
                "closure's variables, or globals of its module). That data is uploaded with its "
                "code, again whenever it changes; pass it as an argument (an ArtifactRef from "
                "an upstream step) or load it inside the step instead.",
                function.__qualname__,
                len(pickled.pickle) / 2**20,
            )
        files[BUNDLE_CALLABLE] = pickled.pickle
        files[BUNDLE_SOURCES] = pickled.sources_json()
        for path in _package_files(cloudpickle):
            rel = path.relative_to(Path(cloudpickle.__file__).parent.parent).as_posix()
            sources[BUNDLE_DEPS_DIR + rel] = path
        entry = {"kind": "pickle", "member": BUNDLE_CALLABLE, "qualname": function.__qualname__}

    local = collect_local_modules([module] if module is not None else [])
    if entry["kind"] == "pickle":  # its module travels inside the pickle, not as a file
        local.pop(function.__module__, None)
    for name, file in local.items():
        sources[BUNDLE_CODE_DIR + file.relative_to(_import_root(name, file)).as_posix()] = file

    sources.update(_job_package())
    files.update((name, path.read_bytes()) for name, path in sources.items())

    data, sha256 = _zip(tuple(sorted(files.items())))
    if cache is not None:
        module_file = _module_file(module) if module is not None else None
        watched = [*sources.values(), *([module_file] if module_file else [])]
        record = {"sha256": sha256, "callable": entry}
        if pickled is not None:
            record["by_value_sha256"] = pickled.sha256()
            record["by_value"] = by_value
        # a module added beside them, or where an unresolved import looks, changes the bundle
        dirs = {p.parent for p in watched} | _local_path_dirs()
        cache.store(function, record, watched, dirs, data)
    return CodeBundle(sha256, entry, lambda: data)


def _job_package() -> dict[str, Path]:
    """``airflow_stepop`` as the job gets it: the runtime, the public names a step's modules may
    import (standard library only) and an ``__init__`` that offers just those."""
    own = Path(runtime_package.__file__).parent.parent
    members = {"airflow_stepop/__init__.py": own / "packaging" / "job_init.py"}
    for path in (*_package_files(runtime_package), own / "settings.py", own / "setting_values.py"):
        members["airflow_stepop/" + path.relative_to(own).as_posix()] = path
    for name in ("__init__.py", "ref.py"):
        members[f"airflow_stepop/artifacts/{name}"] = own / "artifacts" / name
    return members


def _zip(files: tuple[tuple[str, bytes], ...]) -> tuple[bytes, str]:
    """The zip of (name, content) pairs and its sha256."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, content in files:
            info = zipfile.ZipInfo(name, date_time=_FIXED_TIME)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, content)
    data = buffer.getvalue()
    return data, hashlib.sha256(data).hexdigest()
