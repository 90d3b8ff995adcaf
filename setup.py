"""The compiled part of rootcause: parsers._cubin, the cubin decoder `rootcause inspect` uses
when it is built (parsers/cubin.py is the reference and the fallback). Everything else is in
pyproject.toml."""
from setuptools import Extension, setup

setup(ext_modules=[Extension("parsers._cubin", ["parsers/_cubin.c"], extra_compile_args=["-O2", "-std=c11"])])
