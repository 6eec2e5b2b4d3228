"""Build: clustersim's hot core (``clustersim/native.py``'s MODULES) compiled with mypyc.

Everything else is in ``pyproject.toml``. The compiled modules are optional: without a C
compiler, or with ``CLUSTERSIM_PURE=1``, or when the build fails, the install goes on and
clustersim runs the same modules as pure Python (slower, same results).
"""

from __future__ import annotations

import json
import os
import runpy
import sys
import tempfile
from pathlib import Path

from setuptools import setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
native = runpy.run_path(str(ROOT / "clustersim" / "native.py"))


class OptionalBuildExt(build_ext):
    """Compiles the core if it can; writes the stamp that tells clustersim it may use it."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as error:  # noqa: BLE001  any build failure leaves pure Python
            print(f"clustersim: compiling the core failed ({error}); it runs as pure Python",
                  file=sys.stderr)
            return
        package_dir = Path(self.get_ext_fullpath(native["GROUP"] + "__mypyc")).parent
        stamp = {"cache_tag": sys.implementation.cache_tag,
                 "sources": native["source_digests"](ROOT)}
        (package_dir / native["STAMP"]).write_text(json.dumps(stamp, indent=1) + "\n")


def core_extensions() -> list:
    if os.environ.get(native["PURE_ENV"], "") not in ("", "0"):
        return []
    try:
        from mypyc.build import mypycify
    except ImportError:
        print("clustersim: mypyc is not installed; the core runs as pure Python",
              file=sys.stderr)
        return []
    paths = [str(native["source_path"](m, Path("."))) for m in native["MODULES"]]
    # the modules they import are type-checked only as far as the core needs (and may be
    # absent: the build runs before clustersim's dependencies are installed)
    # a fresh cache: types read in another environment must not leak into this build
    cache = tempfile.mkdtemp(prefix="clustersim-mypy-")
    options = ["--ignore-missing-imports", "--follow-imports=silent", f"--cache-dir={cache}"]
    try:
        return mypycify([*options, *paths], opt_level="3", group_name=native["GROUP"])
    except BaseException as error:  # noqa: BLE001  mypyc exits on a type error
        print(f"clustersim: mypyc could not compile the core ({error!r}; pip install -v shows"
              " why); it runs as pure Python",
              file=sys.stderr)
        return []


setup(ext_modules=core_extensions(), cmdclass={"build_ext": OptionalBuildExt})
