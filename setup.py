"""The compiled parts of rootcause, each with its Python reference and fallback beside it:
parsers._cubin, the cubin decoder `rootcause inspect` uses when it is built (parsers/cubin.py),
and parsers._ncu_cut, which cuts the columns the events need out of an ncu raw CSV page before
pandas reads it (parsers/ncu_csv.py). Everything else is in pyproject.toml."""
from setuptools import Extension, setup

setup(ext_modules=[Extension("parsers._cubin", ["parsers/_cubin.c"], extra_compile_args=["-O2", "-std=c11"]),
                   Extension("parsers._ncu_cut", ["parsers/_ncu_cut.c"], extra_compile_args=["-O2", "-std=c11"])])
