"""The build's one hook: say so when the optional C kernel is not built.

pyproject.toml declares the whole build, the model checker's compiled kernel
(``asynclookup.modelcheck._cvisited``) included, as optional: without a C
compiler the install still succeeds, and the model checker runs its
pure-Python kernel (``asynclookup/modelcheck/_visited.py``), with the same
results, slower.  This hook only adds one line saying so to the build's output
(pip shows it with ``-v``); ``asynclookup model-check`` names the kernel it ran
on its ``storage:`` line.
"""

import sys

from setuptools import setup
from setuptools.command.build_ext import build_ext
from setuptools.errors import CCompilerError, CompileError, ExecError, LinkError, PlatformError

NOT_BUILT = (CCompilerError, CompileError, ExecError, LinkError, PlatformError)


class BuildExt(build_ext):
    """build_ext that names the fallback when an optional extension fails to build."""

    def build_extension(self, ext):  # type: ignore[no-untyped-def]
        try:
            super().build_extension(ext)
        except NOT_BUILT as exc:
            if getattr(ext, "optional", False):
                print(f"asynclookup: {ext.name} not built ({exc}); the model checker will "
                      "use its pure-Python kernel (same results, slower)", file=sys.stderr)
            raise  # setuptools skips an optional extension that failed, and says so too


setup(cmdclass={"build_ext": BuildExt})
