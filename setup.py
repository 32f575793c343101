"""The C parts of brokkr, built when a C compiler and Python's headers are there: the record
walk (core/protocol/_recordscan.c), the hot parts of a Produce request
(core/protocol/_produce.c) and the segment storage's durable small writes
(plugins/storage/segment/_files.c). All are optional: without them brokkr runs the same code
in Python (brokkr.core.protocol.records, brokkr.core.validation,
brokkr.plugins.storage.segment.files), slower. Everything else is in pyproject.toml."""

from setuptools import Extension, setup

#: (module, source) of each optional C module.
C_MODULES = [
    ("brokkr.core.protocol._recordscan", "core/protocol/_recordscan.c"),
    ("brokkr.core.protocol._produce", "core/protocol/_produce.c"),
    ("brokkr.plugins.storage.segment._files", "plugins/storage/segment/_files.c"),
]

setup(ext_modules=[Extension(name, [source], extra_compile_args=["-O2"], optional=True) for name, source in C_MODULES])
