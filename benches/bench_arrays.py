"""What reading an array costs by its form: ratios against a plain int64 array, same run.

    python benches/bench_arrays.py [--cpu-time] [--n N]   # the ratio table (release build)
    pytest benches/bench_arrays.py --benchmark-enable

Every form is read without a Python object per item; the table shows what each adds to a
``partition_ids`` call (k = 1024) on the same values, against the same call on a plain int64
array: forms the binding cannot read directly (subclasses, memmap, DLPack producers, tensors)
pass through the Python input seam once, and the accelerator stand-in (a DLPack producer that
only exports a copy to the CPU) pays its one host copy. With benchmarks disabled (the default in
the test suite) each form runs once, on fewer items, and checks its answer.
"""

from __future__ import annotations

import one_thread  # noqa: F401  (BLAS on one thread, before NumPy loads)

# isort: split
import argparse
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

import seqbalance
from workloads import best_of

try:
    import torch
except ImportError:  # optional: a real tensor is timed where torch is installed
    torch = None

K = 1024
FORMS = [
    "int64 array (floor)",
    "np.memmap",
    "read-only array",
    "ndarray subclass",
    "strided view (step 2)",
    "int32 array",
    "DLPack producer (CPU)",
    "accelerator stand-in (one copy)",
] + (["torch CPU tensor"] if torch is not None else [])


class Sub(np.ndarray):
    pass


class DLPackProducer:
    """A CPU producer with only ``__dlpack__`` (as a JAX or torch array without ``__array__``)."""

    def __init__(self, array: np.ndarray) -> None:
        self.array = array

    def __dlpack__(self, **kwargs):
        return self.array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return (1, 0)


class AcceleratorStandIn(DLPackProducer):
    """Device memory: exports only a copy to the CPU (DLPack's copy-to-host request)."""

    def __dlpack__(self, *, dl_device=None, copy=None, **kwargs):
        if dl_device is None or tuple(dl_device) != (1, 0) or copy is False:
            raise BufferError("device memory: only a copy to the CPU can be exported")
        return self.array.copy().__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return (2, 0)


def forms(values: np.ndarray, directory: Path) -> dict[str, Callable[[], object]]:
    """Builders of ``values`` in each form (built outside the timed call)."""
    memmap = np.memmap(directory / "v.bin", dtype=np.int64, mode="w+", shape=values.shape)
    memmap[:] = values
    readonly = values.copy()
    readonly.flags.writeable = False
    spaced = np.zeros(values.size * 2, np.int64)
    spaced[::2] = values
    built: dict[str, Callable[[], object]] = {
        "int64 array (floor)": lambda: values,
        "np.memmap": lambda: memmap,
        "read-only array": lambda: readonly,
        "ndarray subclass": lambda: values.view(Sub),
        "strided view (step 2)": lambda: spaced[::2],
        "int32 array": lambda: values.astype(np.int32),
        "DLPack producer (CPU)": lambda: DLPackProducer(values),
        "accelerator stand-in (one copy)": lambda: AcceleratorStandIn(values),
    }
    if torch is not None:
        tensor = torch.from_numpy(values.copy())
        built["torch CPU tensor"] = lambda: tensor
    return built


@pytest.mark.parametrize("form", FORMS)
def test_array_form(benchmark, form, tmp_path):
    n = 2**16 if not benchmark.disabled else 2**10
    values = np.random.default_rng(2).integers(1, 32_768, size=n, dtype=np.int64)
    argument = forms(values, tmp_path)[form]()
    k = K if n >= K else 16
    ids = benchmark(seqbalance.partition_ids, argument, k)
    assert ids.tolist() == seqbalance.partition_ids(values, k).tolist()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2**16)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--cpu-time", action="store_true", help="process CPU time, not wall")
    args = parser.parse_args()
    clock = time.process_time if args.cpu_time else time.perf_counter
    values = np.random.default_rng(2).integers(1, 32_768, size=args.n, dtype=np.int64)
    with tempfile.TemporaryDirectory() as directory:
        built = forms(values, Path(directory))
        floor = None
        print(f"partition_ids, n = {args.n}, k = {K}, best of {args.rounds}")
        for name, build in built.items():
            argument = build()
            seconds = best_of(lambda a=argument: seqbalance.partition_ids(a, K), args.rounds, clock)
            floor = floor or seconds
            print(f"  {name:34s} {seconds / floor:6.2f}x the int64 array")


if __name__ == "__main__":
    main()
