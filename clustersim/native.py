"""The simulation's hot core, compiled to C with mypyc when the install could build it.

``pip install`` (``setup.py``) compiles the modules in :data:`MODULES` with mypyc when a C
compiler is there, and writes a stamp with the hash of every ``.py`` file of the package as
it compiled them (the compiled modules also carry the types of the modules they import). At
import, clustersim uses the compiled modules only if the stamp matches the sources beside it,
every compiled file it expects is there and none other is; otherwise (no compiler, a failed
build, any source edited since, a file left from another build, or ``CLUSTERSIM_PURE=1``) it
imports the pure Python modules: the same results, slower. :func:`status` says which and why
(``clustersim --version`` prints it).

This file imports only the standard library: ``setup.py`` runs it before clustersim's
dependencies are installed.

Why the compiled modules read as they do (said once here, not at each place): mypyc turns typed
Python into C calls only where it knows the types, and falls back to generic CPython calls
elsewhere. So the hot paths bind module-level functions and constants as ``Final`` (``pack:
Final = struct.pack``: read directly, not looked up), write ``__init__`` out in full for
dataclasses, use ``//`` and a multiply rather than ``divmod`` (no boxed tuple), loops rather
than ``sum()`` or ``list.extend(dict)`` over a generic iterable, ``del d[k]`` rather than
``d.pop(k)``, a named loop variable rather than ``_`` (which it boxes), an index rather than a
slice of a list's tail, callbacks bound once (binding a method builds an object each time), a
class's own ``__call__`` as an event's callback, and return a shared empty list
(``step_plan.NOTHING``) when there is nothing to say. Where a value may be one of the core's
own classes or anything else (a ``Clock`` or SimPy's environment, the clock's events or
SimPy's), an ``isinstance`` test comes first and its two arms read the same: in the first, the
compiler knows the class and reads its fields and calls its methods directly; in the second, it
goes through Python's attribute lookup. Every one of these was measured in instructions
(``docs/how-it-works.md``).
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import json
import os
import sys
from pathlib import Path
from types import ModuleType

MODULES = (
    "clustersim.engine.config",
    "clustersim.engine.request",
    "clustersim.engine.step_plan",
    "clustersim.engine.kv_manager",
    "clustersim.engine.offload",
    "clustersim.engine.queues",
    "clustersim.engine.fastforward.decode_set",
    "clustersim.engine.fastforward.run",
    "clustersim.engine.fastforward.timer",
    "clustersim.engine.event_queue",
    "clustersim.engine.watch",
    "clustersim.engine.clock",
    "clustersim.engine.events",
    "clustersim.engine.scheduler",
    "clustersim.engine.steplog",
    "clustersim.engine.fastforward.engine",
    "clustersim.engine.fastforward.lockstep",
    "clustersim.engine.instance",
    "clustersim.engine.data_parallel",
    "clustersim.cluster.flows",
    "clustersim.cluster.dispatch",
    "clustersim.cluster.router",
    "clustersim.cluster.connectors",
    "clustersim.workload.sources",
    "clustersim.cost.prices",
)
"""Compiled together, as one group: a compiled module calls another's classes natively."""
GROUP = "clustersim._core"
"""The group's shared library (``clustersim/_core__mypyc*.so``)."""
STAMP = "_core_stamp.json"
"""Written beside this file by a build that compiled the group."""
PURE_ENV = "CLUSTERSIM_PURE"

_PACKAGE_DIR = Path(__file__).resolve().parent


def source_path(module: str, root: Path) -> Path:
    """The ``.py`` file of ``module`` under ``root`` (the directory holding ``clustersim``)."""
    return root.joinpath(*module.split(".")).with_suffix(".py")


def package_files(package_dir: Path) -> tuple[list[Path], list[Path]]:
    """The package's ``.py`` files and its extension-module files, each sorted."""
    suffixes = tuple(importlib.machinery.EXTENSION_SUFFIXES)
    sources, extensions = [], []
    for folder, _, names in os.walk(package_dir):
        for name in names:
            if name.endswith(".py"):
                sources.append(Path(folder, name))
            elif name.endswith(suffixes):
                extensions.append(Path(folder, name))
    return sorted(sources), sorted(extensions)


def source_digests(package_dir: Path) -> dict[str, str]:
    """SHA-256 of every ``.py`` file of the package, by its path relative to the package's
    parent (``clustersim/engine/scheduler.py``)."""
    root = package_dir.parent
    return {path.relative_to(root).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()
            for path in package_files(package_dir)[0]}


def extension_path(module: str, root: Path, suffix: str) -> Path:
    """The compiled file of ``module`` under ``root`` with the extension ``suffix``."""
    return source_path(module, root).with_name(module.rsplit(".", 1)[-1] + suffix)


def expected_extensions(package_dir: Path) -> set[Path]:
    """The files a build of :data:`MODULES` leaves in the package: a loader per module and
    the group's library."""
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    return {extension_path(m, package_dir.parent, suffix) for m in (*MODULES, GROUP + "__mypyc")}


def _why_pure(package_dir: Path) -> str | None:
    """None when the compiled group can be used; else the reason it cannot."""
    if os.environ.get(PURE_ENV, "") not in ("", "0"):
        return f"{PURE_ENV} is set"
    try:
        stamp = json.loads((package_dir / STAMP).read_text())
    except FileNotFoundError:
        return "not compiled at install (no C compiler, or the build failed)"
    except (OSError, ValueError):
        return f"unreadable {STAMP}"
    if stamp.get("cache_tag") != sys.implementation.cache_tag:
        return f"compiled for {stamp.get('cache_tag')}, running {sys.implementation.cache_tag}"
    root = package_dir.parent
    _, extensions = package_files(package_dir)
    expected = expected_extensions(package_dir)
    for path in sorted(expected - set(extensions)):
        return f"{path.relative_to(root).as_posix()} is missing"
    for path in extensions:
        if path not in expected:
            return f"{path.relative_to(root).as_posix()} is left from another build"
    built = stamp.get("sources", {})
    now = source_digests(package_dir)
    for name in sorted(built.keys() | now.keys()):
        if built.get(name) != now.get(name):
            change = "changed" if name in built and name in now else (
                "added" if name in now else "removed")
            return f"{name} {change} since the core was compiled"
    return None


class _PureFinder:
    """Imports a clustersim module from its ``.py`` file when a compiled file sits beside it."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.suffixes = tuple(importlib.machinery.EXTENSION_SUFFIXES)

    def find_spec(self, fullname: str, path: object = None, target: ModuleType | None = None):
        if not fullname.startswith("clustersim."):
            return None
        source = source_path(fullname, self.root)
        if not source.is_file() or not any(
                extension_path(fullname, self.root, s).exists() for s in self.suffixes):
            return None
        return importlib.util.spec_from_file_location(fullname, source)


_WHY_PURE = _why_pure(_PACKAGE_DIR)


def use_pure_when_needed() -> None:
    """Called once by ``clustersim/__init__``: route imports to the pure modules if needed."""
    if _WHY_PURE is None or any(isinstance(f, _PureFinder) for f in sys.meta_path):
        return
    sys.meta_path.insert(0, _PureFinder(_PACKAGE_DIR.parent))


def status() -> str:
    """One line: which core this process runs, and why."""
    if _WHY_PURE is None:
        return "core compiled with mypyc"
    return f"core in pure Python: {_WHY_PURE}"


def is_compiled() -> bool:
    """True when the core modules this process imports are the compiled ones."""
    return _WHY_PURE is None
