"""The C parts of brokkr, built when a C compiler and Python's headers are there: the record
walk (core/protocol/_recordscan.c) and the hot parts of a Produce request
(core/protocol/_produce.c). Both are optional: without them brokkr runs the same code in
Python (brokkr.core.protocol.records, brokkr.core.validation), slower. Everything else is in
pyproject.toml."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "brokkr.core.protocol._recordscan",
            ["core/protocol/_recordscan.c"],
            extra_compile_args=["-O2"],
            optional=True,
        ),
        Extension(
            "brokkr.core.protocol._produce",
            ["core/protocol/_produce.c"],
            extra_compile_args=["-O2"],
            optional=True,
        ),
    ]
)
