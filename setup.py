"""Build of qtrace's optional C extensions (project metadata is in pyproject.toml).

``qtrace.graph._native`` is the compiled recorder, ``qtrace.devices._workers`` the CPU's
worker threads. Both are optional: where no C compiler is available the build skips them
and qtrace records in Python (see qtrace/graph/native.py) and runs its worker threads in
Python (see qtrace/devices/cpu.py).
"""

from setuptools import Extension, setup

setup(ext_modules=[
    Extension("qtrace.graph._native", ["qtrace/graph/_native.c"], optional=True,
              extra_compile_args=["-O2"]),
    Extension("qtrace.devices._workers", ["qtrace/devices/_workers.c"], optional=True,
              extra_compile_args=["-O2"]),
])
