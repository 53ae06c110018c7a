"""Build of qtrace's optional C extension (project metadata is in pyproject.toml).

``qtrace.graph._native`` is the compiled recorder. It is optional: where no C compiler is
available the build skips it and qtrace records in Python (see qtrace/graph/native.py).
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("qtrace.graph._native", ["qtrace/graph/_native.c"], optional=True,
                             extra_compile_args=["-O2"])])
