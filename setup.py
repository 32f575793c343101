"""The C parts of brokkr, built when a C compiler and Python's headers are there: the record
walk (core/protocol/_recordscan.c), the hot parts of a Produce request
(core/protocol/_produce.c), the segment storage's durable small writes
(plugins/storage/segment/_files.c), the log cleaner's key map and record walks
(plugins/storage/segment/_cleaner.c) and, with liblz4's headers too (Debian's liblz4-dev), the
lz4 codec's decompression (plugins/codecs/_lz4frame.c). All are optional: without them
brokkr runs the same code in Python (brokkr.core.protocol.records, brokkr.core.validation,
brokkr.plugins.storage.segment.files, brokkr.plugins.storage.segment.cleaner,
brokkr.plugins.codecs.lz4), slower. Everything else is
in pyproject.toml."""

from setuptools import Extension, setup

#: (module, source, libraries it links) of each optional C module.
C_MODULES = [
    ("brokkr.core.protocol._recordscan", "core/protocol/_recordscan.c", []),
    ("brokkr.core.protocol._produce", "core/protocol/_produce.c", []),
    ("brokkr.plugins.storage.segment._files", "plugins/storage/segment/_files.c", []),
    ("brokkr.plugins.storage.segment._cleaner", "plugins/storage/segment/_cleaner.c", []),
    ("brokkr.plugins.codecs._lz4frame", "plugins/codecs/_lz4frame.c", ["lz4"]),
]

setup(
    ext_modules=[
        Extension(name, [source], libraries=libraries, extra_compile_args=["-O2"], optional=True)
        for name, source, libraries in C_MODULES
    ]
)
