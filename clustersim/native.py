"""The simulation's hot core, compiled to C with mypyc when the install could build it.

``pip install`` (``setup.py``) compiles the modules in :data:`MODULES` with mypyc when a C
compiler is there, and writes a stamp with the hash of each source it compiled. At import,
clustersim uses the compiled modules only if every one of them was built from the source
beside it; otherwise (no compiler, a failed build, a source edited since, or
``CLUSTERSIM_PURE=1``) it imports the pure Python modules: the same results, slower.
:func:`status` says which and why (``clustersim --version`` prints it).

This file imports only the standard library: ``setup.py`` runs it before clustersim's
dependencies are installed.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

MODULES = (
    "clustersim.engine.request",
    "clustersim.engine.step_plan",
    "clustersim.engine.kv_manager",
    "clustersim.engine.decode_set",
    "clustersim.engine.decode_run",
    "clustersim.engine.run_timer",
    "clustersim.engine.clock",
    "clustersim.engine.scheduler",
    "clustersim.engine.steplog",
    "clustersim.engine.instance",
    "clustersim.engine.data_parallel",
    "clustersim.cluster.flows",
    "clustersim.cluster.router",
    "clustersim.cluster.connectors",
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


def source_digests(root: Path, modules: Sequence[str] = MODULES) -> dict[str, str]:
    """SHA-256 of each module's source under ``root``."""
    return {m: hashlib.sha256(source_path(m, root).read_bytes()).hexdigest() for m in modules}


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
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    root = package_dir.parent
    digests = stamp.get("sources", {})
    for module in MODULES:
        name = module.rsplit(".", 1)[-1]
        if not source_path(module, root).with_name(name + suffix).exists():
            return f"{module} has no compiled file"
        if digests.get(module) != source_digests(root, (module,))[module]:
            return f"{source_path(module, root).relative_to(root)} changed since it was compiled"
    return None


class _PureFinder:
    """Finds the core modules' ``.py`` files ahead of their compiled ones."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def find_spec(self, fullname: str, path: object = None, target: ModuleType | None = None):
        if fullname not in MODULES:
            return None
        return importlib.util.spec_from_file_location(fullname, source_path(fullname, self.root))


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
