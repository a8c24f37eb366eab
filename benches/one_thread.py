"""Pin BLAS and OpenMP pools to one thread, before NumPy loads.

Every benchmark states its figures as ratios against a floor timed in the same run, often
NumPy's sort or another library's call, and several measure process CPU time. NumPy's BLAS
(OpenBLAS here) starts a pool of threads that spin while they wait: a floor measured in process
CPU then counts every spinning thread, and the ratio against it comes out too small. One thread
keeps floor and subject on the same footing. The variables only take effect when they are set
before NumPy is first imported, so each benchmark file and script imports this module first (and
child processes inherit the setting). Importing it after NumPy has loaded warns, since the pools
are already sized.
"""

from __future__ import annotations

import os
import sys
import warnings

#: The thread-count variables of the BLAS and OpenMP runtimes NumPy may load.
THREAD_VARIABLES = (
    "OPENBLAS_NUM_THREADS",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "BLIS_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "NUMEXPR_NUM_THREADS",
)

for _name in THREAD_VARIABLES:
    os.environ[_name] = "1"

if "numpy" in sys.modules and "pytest" not in sys.modules:
    # Under pytest the tests' own modules may load NumPy first when tests and benchmarks are
    # collected together; benchmarks then run disabled (pyproject's addopts), so nothing is timed.
    warnings.warn(
        "NumPy was imported before benches/one_thread.py: its BLAS pool may already use several "
        "threads; import one_thread first",
        RuntimeWarning,
        stacklevel=2,
    )
