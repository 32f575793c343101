"""The C part of brokkr: the record walk (core/protocol/_recordscan.c), built when a C
compiler and Python's headers are there. It is optional: without it brokkr runs the same
walk in Python (brokkr.core.protocol.records), slower. Everything else is in pyproject.toml."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "brokkr.core.protocol._recordscan",
            ["core/protocol/_recordscan.c"],
            extra_compile_args=["-O2"],
            optional=True,
        )
    ]
)
