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
PACKAGE = ROOT / "clustersim"
native = runpy.run_path(str(PACKAGE / "native.py"))
compiled_sources: dict[str, str] = {}
"""The hashes of the package's sources as mypyc read them (the stamp's)."""
EDITABLE = len(sys.argv) > 1 and sys.argv[1] == "editable_wheel"
"""pip install -e: the compiled files live in the checkout itself."""
REUSE = EDITABLE and native["_why_pure"](PACKAGE) is None
"""An editable install over a checkout whose compiled core matches every source and this
Python (a second ``pip install -e``, for the test extras): keep it rather than compile the
same files again. Any source changed, another Python or CLUSTERSIM_PURE set: compile."""


class OptionalBuildExt(build_ext):
    """Compiles the core if it can; writes the stamp that tells clustersim it may use it."""

    def run(self) -> None:
        if REUSE:
            return
        target = Path(self.get_ext_fullpath(native["GROUP"] + "__mypyc")).parent
        self._clear(target)  # nothing from an older build may outlive this one
        if not self.extensions:
            return
        try:
            super().run()
        except Exception as error:  # noqa: BLE001  any build failure leaves pure Python
            self._clear(target)
            print(f"clustersim: compiling the core failed ({error}); it runs as pure Python",
                  file=sys.stderr)
            return
        stamp = {"cache_tag": sys.implementation.cache_tag, "sources": compiled_sources}
        (target / native["STAMP"]).write_text(json.dumps(stamp, indent=1) + "\n")

    @staticmethod
    def _clear(package_dir: Path) -> None:
        """Remove the stamp and every compiled file under ``package_dir``."""
        (package_dir / native["STAMP"]).unlink(missing_ok=True)
        if package_dir.is_dir():
            for path in native["package_files"](package_dir)[1]:
                path.unlink()


METADATA_ONLY = {"egg_info", "dist_info", "sdist"}
"""setup.py commands (pip runs two before the build) that need no compiled extension."""


def core_extensions() -> list:
    if os.environ.get(native["PURE_ENV"], "") not in ("", "0"):
        return []
    if len(sys.argv) > 1 and sys.argv[1] in METADATA_ONLY:
        return []  # mypyc reads and type-checks the core: only for the build itself
    if REUSE:
        print("clustersim: the compiled core matches every source; kept, not compiled again",
              file=sys.stderr)
        return []
    try:
        from mypyc.build import mypycify
    except ImportError:
        print("clustersim: mypyc is not installed; the core runs as pure Python",
              file=sys.stderr)
        return []
    paths = [str(native["source_path"](m, Path("."))) for m in native["MODULES"]]
    compiled_sources.update(native["source_digests"](PACKAGE))  # before mypyc reads them
    # the modules they import are type-checked only as far as the core needs (and may be
    # absent: the build runs before clustersim's dependencies are installed); a fresh cache,
    # so that types read in another environment cannot leak into this build
    with tempfile.TemporaryDirectory(prefix="clustersim-mypy-") as cache:
        options = ["--ignore-missing-imports", "--follow-imports=silent", f"--cache-dir={cache}"]
        try:
            return mypycify([*options, *paths], opt_level="3", group_name=native["GROUP"])
        except (Exception, SystemExit) as error:  # noqa: BLE001  mypyc exits on a type error
            print(f"clustersim: mypyc could not compile the core ({error!r}; pip install -v "
                  "shows why); it runs as pure Python", file=sys.stderr)
            return []


setup(ext_modules=core_extensions(), cmdclass={"build_ext": OptionalBuildExt})
