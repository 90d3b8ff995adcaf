"""The optional compiled parts of rootcause, each with its Python reference and fallback beside it:
parsers._cubin, the cubin decoder `rootcause inspect` uses when it is built (parsers/cubin.py),
and parsers._ncu_cut, which cuts the columns the events need out of an ncu raw CSV page before
pandas reads it (parsers/ncu_csv.py). Everything else is in pyproject.toml.

Both are optional: where no C compiler works (a slim container, CC=/bin/false) the install
succeeds without them, says so, and rootcause reads with the Python references
(`rootcause --version` names the readers in use)."""
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


class OptionalBuildExt(build_ext):
    """Build what the compiler can; an extension that fails is left out with one warning."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as err:  # noqa: BLE001  no compiler at all (distutils' own error types)
            self.warn(f"rootcause: compiled readers not built ({err}); the Python readers are used")

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except Exception as err:  # noqa: BLE001  CompileError, LinkError, a missing compiler
            self.warn(f"rootcause: {ext.name} not built ({err}); its Python reader is used")


setup(cmdclass={"build_ext": OptionalBuildExt},
      ext_modules=[Extension("parsers._cubin", ["parsers/_cubin.c"], extra_compile_args=["-O2", "-std=c11"],
                             optional=True),
                   Extension("parsers._ncu_cut", ["parsers/_ncu_cut.c"], extra_compile_args=["-O2", "-std=c11"],
                             optional=True)])
