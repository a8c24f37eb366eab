"""Array acceptance: every array form reads as its values, everywhere, with one host copy.

CI has no torch and no GPU, so small stand-ins cover the DLPack logic: a producer with only
``__dlpack__``, a fake accelerator that supports only DLPack's copy-to-host request, one that only
has ``.cpu()``, one that can do neither, and a bfloat16 producer (a uint16 capsule relabelled as
bfloat16). The torch tests at the end run where torch is installed.
"""

from __future__ import annotations

import ctypes
import os
import tempfile

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import seqbalance
from seqbalance import _arrays, _native, reference
from tests.helpers import outcome

INT_DTYPES = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64]
FLOAT_DTYPES = [np.float16, np.float32, np.float64]
KDLCPU, KDLCUDA, KDLBFLOAT = 1, 2, 4

_api = ctypes.pythonapi
_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_IsValid.restype = ctypes.c_int
_api.PyCapsule_IsValid.argtypes = [ctypes.py_object, ctypes.c_char_p]
# Offset of DLTensor.dtype.code: data (8) + device (8) + ndim (4); a versioned managed tensor
# starts with version (8), manager_ctx (8), deleter (8) and flags (8) before its DLTensor.
_DTYPE_CODE = 20
_VERSIONED_HEADER = 32


def bfloat16_capsule(bits: np.ndarray, versioned: bool = False):
    """A DLPack capsule of ``bits`` (uint16) relabelled as bfloat16, as torch would export it."""
    assert bits.dtype == np.uint16
    if versioned:
        capsule = bits.__dlpack__(max_version=(1, 0))
        address = _api.PyCapsule_GetPointer(capsule, b"dltensor_versioned") + _VERSIONED_HEADER
    else:
        capsule = bits.__dlpack__()
        address = _api.PyCapsule_GetPointer(capsule, b"dltensor")
    ctypes.c_uint8.from_address(address + _DTYPE_CODE).value = KDLBFLOAT
    return capsule


def as_bfloat16_bits(values: np.ndarray) -> np.ndarray:
    """bfloat16 bit patterns of float32 ``values`` (truncated: the top half of each float32)."""
    return (np.ascontiguousarray(values, np.float32).view(np.uint32) >> 16).astype(np.uint16)


class DLPackOnly:
    """A CPU producer with ``__dlpack__`` and ``__dlpack_device__`` only (no ``__array__``)."""

    def __init__(self, array: np.ndarray, bfloat16: bool = False) -> None:
        self.array = array
        self.bfloat16 = bfloat16
        self.exports = 0

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        self.exports += 1
        if self.bfloat16:
            return bfloat16_capsule(self.array, versioned=max_version is not None)
        return self.array.__dlpack__(max_version=max_version, dl_device=dl_device, copy=copy)

    def __dlpack_device__(self):
        return (KDLCPU, 0)


class FakeAccelerator:
    """Memory on a 'CUDA' device: exportable only through DLPack's copy-to-host request."""

    def __init__(self, array: np.ndarray, bfloat16: bool = False) -> None:
        self.array = array
        self.bfloat16 = bfloat16
        self.copies = 0

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        if dl_device is None or tuple(dl_device) != (KDLCPU, 0) or copy is False:
            raise BufferError("device memory: only a copy to the CPU can be exported")
        self.copies += 1
        host = self.array.copy()
        if self.bfloat16:
            return bfloat16_capsule(host, versioned=max_version is not None)
        return host.__dlpack__(max_version=max_version)

    def __dlpack_device__(self):
        return (KDLCUDA, 0)

    def __repr__(self) -> str:
        return "FakeAccelerator(SECRET-VALUES)"


class CpuMethodAccelerator:
    """An older device producer: ``__dlpack__`` without the copy-to-host keywords, and ``.cpu()``."""

    def __init__(self, array: np.ndarray, bfloat16: bool = False) -> None:
        self.array = array
        self.bfloat16 = bfloat16
        self.copies = 0

    def __dlpack__(self, stream=None):
        raise BufferError("device memory cannot be read by a CPU consumer")

    def __dlpack_device__(self):
        return (KDLCUDA, 0)

    def cpu(self):
        self.copies += 1
        return DLPackOnly(self.array.copy(), bfloat16=self.bfloat16)

    def __repr__(self) -> str:
        return "CpuMethodAccelerator(SECRET-VALUES)"


class Stranded(CpuMethodAccelerator):
    """Device memory with no way to the host."""

    cpu = None  # type: ignore[assignment]


class ArrayOnly:
    """Only ``__array__``, as pandas or an old tensor library."""

    def __init__(self, array: np.ndarray) -> None:
        self.array = array

    def __array__(self, dtype=None, copy=None):
        return self.array if dtype is None else self.array.astype(dtype)


class Sub(np.ndarray):
    pass


# --- host_array -----------------------------------------------------------------------------


def test_subclasses_and_memmap_read_as_plain_arrays_without_copy(tmp_path):
    base = np.arange(6, dtype=np.int32)
    mm = np.memmap(tmp_path / "m.bin", dtype=np.int32, mode="w+", shape=(6,))
    mm[:] = base
    for array in (base.view(Sub), mm, mm[::2]):
        read = _arrays.host_array(array, "x")
        assert type(read) is np.ndarray
        assert np.shares_memory(read, array)
        assert read.tolist() == np.asarray(array).tolist()


def test_masked_array_refused():
    with pytest.raises(TypeError, match="masked array"):
        _arrays.host_array(np.ma.masked_array([1, 2], mask=[0, 1]), "seqlen_list")


def test_dlpack_only_producer_read_without_copy():
    array = np.arange(5, dtype=np.int16)
    read = _arrays.host_array(DLPackOnly(array), "x")
    assert read.dtype == np.int16 and read.tolist() == array.tolist()
    assert np.shares_memory(read, array)


@pytest.mark.parametrize("kind", [FakeAccelerator, CpuMethodAccelerator])
def test_accelerator_copied_to_host_once(kind):
    array = np.array([7, 0, 3], dtype=np.int64)
    producer = kind(array)
    read = _arrays.host_array(producer, "x")
    assert read.tolist() == [7, 0, 3]
    assert producer.copies == 1


def test_stranded_accelerator_names_the_problem_not_the_values():
    with pytest.raises(TypeError) as info:
        _arrays.host_array(Stranded(np.arange(3)), "seqlen_list")
    message = str(info.value)
    assert "seqlen_list" in message and "CUDA" in message and "copy it to the CPU" in message
    assert "SECRET" not in message


@pytest.mark.parametrize("versioned", [False, True])
def test_bfloat16_capsule_widened_exactly(versioned):
    bits = np.array([0x0000, 0x8000, 0x3F80, 0x4049, 0x7F7F, 0x0001, 0x7F80, 0xFFC0], np.uint16)
    values, shape = _native._dlpack_bfloat16(bfloat16_capsule(bits, versioned))
    assert shape == [len(bits)]
    expected = (bits.astype(np.uint32) << 16).view(np.float32)
    assert values.dtype == np.float32
    assert values.view(np.uint32).tolist() == expected.view(np.uint32).tolist()


def test_bfloat16_capsule_strided_and_zero_d():
    bits = as_bfloat16_bits(np.arange(12, dtype=np.float32))
    strided = bits[::3]  # a non-compact DLPack view: strides in elements
    values, shape = _native._dlpack_bfloat16(bfloat16_capsule(strided))
    assert shape == [4] and values.tolist() == [0.0, 3.0, 6.0, 9.0]
    values, shape = _native._dlpack_bfloat16(bfloat16_capsule(bits[5:6].reshape(())))
    assert shape == [] and values.tolist() == [5.0]
    values, shape = _native._dlpack_bfloat16(bfloat16_capsule(bits.reshape(3, 4)[:, ::2]))
    assert shape == [3, 2] and values.tolist() == [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]


def test_bfloat16_reader_leaves_other_dtypes_and_capsules_alone():
    capsule = np.arange(3, dtype=np.uint16).__dlpack__()
    assert _native._dlpack_bfloat16(capsule) is None
    # Not consumed: NumPy (or the producer's destructor) still owns it.
    assert _api.PyCapsule_IsValid(capsule, b"dltensor") == 1
    with pytest.raises(ValueError, match="DLPack capsule"):
        _native._dlpack_bfloat16(object())


@pytest.mark.parametrize("kind", [DLPackOnly, FakeAccelerator, CpuMethodAccelerator])
def test_bfloat16_producers_read_as_float32(kind):
    floats = np.array([1.0, 0.5, 3.0, 2.5, 2.0**100, 0.0], np.float32)
    producer = kind(as_bfloat16_bits(floats), bfloat16=True)
    read = _arrays.host_array(producer, "x")
    assert read.dtype == np.float32 and read.tolist() == floats.tolist()
    assert getattr(producer, "copies", 1) == 1


def test_item_scalar():
    assert _arrays.item_scalar(5, "x") == 5
    scalar = _arrays.item_scalar(np.array(7, np.uint8), "x")
    assert isinstance(scalar, np.uint8) and scalar == 7
    scalar = _arrays.item_scalar(DLPackOnly(np.array(3, np.int32)), "x")
    assert isinstance(scalar, np.int32) and scalar == 3
    one_d = np.arange(2)
    assert _arrays.item_scalar(one_d, "x") is one_d


# --- every public function ------------------------------------------------------------------


def _forms(values: np.ndarray, tmp: str):
    """``values`` in every accepted array form (each built fresh: producers count copies)."""
    mm = np.memmap(os.path.join(tmp, "v.bin"), dtype=values.dtype, mode="w+", shape=values.shape)
    mm[:] = values
    readonly = values.copy()
    readonly.flags.writeable = False
    spaced = np.zeros(values.size * 3, values.dtype)
    spaced[::3] = values
    return {
        "subclass": values.view(Sub),
        "memmap": mm,
        "readonly": readonly,
        "strided": spaced[::3],
        "reversed": values[::-1].copy()[::-1],
        "array_only": ArrayOnly(values),
        "dlpack_only": DLPackOnly(values.copy()),
        "accelerator": FakeAccelerator(values),
        "cpu_method": CpuMethodAccelerator(values),
    }


PUBLIC_CALLS = {
    "karmarkar_karp": lambda x: seqbalance.karmarkar_karp(x, 2, False),
    "get_seqlen_balanced_partitions": lambda x: seqbalance.get_seqlen_balanced_partitions(
        x, 2, True
    ),
    "greedy_partition": lambda x: seqbalance.greedy_partition(x, 2, False),
    "partition_ids": lambda x: seqbalance.partition_ids(x, 2),
    "refine": lambda x: seqbalance.get_seqlen_balanced_partitions(x, 2, True, refine=True),
    "refine_ids": lambda x: seqbalance.partition_ids(x, 2, equal_size=True, refine=True),
    "refine_partitions": lambda x: seqbalance.refine_partitions(x, [[0, 1, 2], [3, 4, 5]]),
    "groups": lambda x: seqbalance.group_balanced_partitions(x, [0, 0, 1, 1, 2, 2], 3),
    "calculate_workload": lambda x: seqbalance.calculate_workload(x),
    "balance_report": lambda x: seqbalance.balance_report(x, [[0, 1, 2], [3, 4, 5]]),
    "plan_micro_batches": lambda x: seqbalance.plan_micro_batches(x, max_token_len=100),
    "pack_sequences": lambda x: seqbalance.pack_sequences(x, 100),
    "plan_packed_steps": lambda x: seqbalance.plan_packed_steps(x, 2, 1, 100),
    "cost_weights": lambda x: seqbalance.plan_micro_batches([10] * 6, 40, cost=x),
    "plan_dp_micro_batches": lambda x: seqbalance.plan_dp_micro_batches(x, 2, 100),
    "min_num_micro_batches_for": lambda x: seqbalance.min_num_micro_batches_for(x, 100),
    "log_seqlen_unbalance": lambda x: seqbalance.log_seqlen_unbalance(
        x, [[0, 1, 2], [3, 4, 5]], "p"
    ),
}


@pytest.mark.parametrize("call", PUBLIC_CALLS)
def test_every_public_function_takes_every_form_with_one_copy(call):
    function = PUBLIC_CALLS[call]
    values = np.array([30, 5, 17, 0, 42, 9], np.int32)
    expected = outcome(function, values.tolist())
    assert expected[0] == "returned", expected
    with tempfile.TemporaryDirectory() as tmp:
        for form, argument in _forms(values, tmp).items():
            assert outcome(function, argument) == expected, form
            assert getattr(argument, "copies", 1) == 1, form


FORMS = [
    "subclass",
    "memmap",
    "readonly",
    "strided",
    "reversed",
    "array_only",
    "dlpack_only",
    "accelerator",
    "cpu_method",
]


@given(
    data=st.data(),
    dtype=st.sampled_from(INT_DTYPES + FLOAT_DTYPES),
    k=st.integers(1, 5),
    equal_size=st.booleans(),
    form=st.sampled_from(FORMS),
)
def test_any_form_equals_the_reference_on_the_same_values(data, dtype, k, equal_size, form):
    """For all dtypes, strides and forms: the native answer is the reference's on a plain array."""
    if np.dtype(dtype).kind == "f":
        top = float(np.finfo(dtype).max) / 64
        bound = float(dtype(min(top, 1e12)))  # representable in the dtype
        element = st.floats(0, bound, width=np.dtype(dtype).itemsize * 8)
    else:
        element = st.integers(0, min(int(np.iinfo(dtype).max), 2**40))
    plain = np.array(data.draw(st.lists(element, min_size=1, max_size=40)), dtype=dtype)
    with tempfile.TemporaryDirectory() as tmp:
        for name in ("karmarkar_karp", "get_seqlen_balanced_partitions", "greedy_partition"):
            argument = _forms(plain, tmp)[form]
            expected = outcome(getattr(reference, name), plain, k, equal_size)
            assert outcome(getattr(seqbalance, name), argument, k, equal_size) == expected
        ids = outcome(seqbalance.partition_ids, _forms(plain, tmp)[form], k, equal_size=equal_size)
        assert ids == outcome(seqbalance.partition_ids, plain, k, equal_size=equal_size)


@given(
    bits=st.lists(st.integers(0, 0x7F7F), min_size=1, max_size=30),
    k=st.integers(1, 4),
    form=st.sampled_from([DLPackOnly, FakeAccelerator, CpuMethodAccelerator]),
)
def test_bfloat16_equals_the_reference_on_float32(bits, k, form):
    """bfloat16 (finite, non-negative bit patterns) reads as float32, in single precision."""
    bits = np.array(bits, np.uint16)
    widened = (bits.astype(np.uint32) << 16).view(np.float32)
    for name in ("karmarkar_karp", "greedy_partition"):
        expected = outcome(getattr(reference, name), widened, k, False)
        assert outcome(getattr(seqbalance, name), form(bits, bfloat16=True), k, False) == expected


@given(
    values=st.lists(st.integers(0, 2**63 - 1), min_size=1, max_size=30),
    step=st.integers(-3, 3).filter(bool),
    k=st.integers(1, 4),
)
def test_strided_int64_equals_the_reference(values, step, k):
    spaced = np.zeros(len(values) * abs(step), np.int64)
    spaced[::step] = values
    view = spaced[::step]
    assert view.tolist() == values
    expected = outcome(reference.karmarkar_karp, values, k, False)
    assert outcome(seqbalance.karmarkar_karp, view, k, False) == expected


def test_lists_of_zero_d_arrays_and_scalars_read_as_their_values():
    values = [30, 5, 17, 0, 42, 9]
    expected = seqbalance.karmarkar_karp(values, 2, False)
    for items in (
        [np.int64(v) for v in values],
        [np.uint8(v) for v in values],
        [np.array(v, np.int16) for v in values],
        [DLPackOnly(np.array(v, np.int32)) for v in values],
        tuple(np.array(v) for v in values),
    ):
        assert seqbalance.karmarkar_karp(items, 2, False) == expected
        assert reference.karmarkar_karp(items, 2, False) == expected


def test_lists_of_zero_d_float_arrays_read_as_their_values():
    values = [0.1, 2.5, 1e-3, 7.0, 3.25, 0.0]
    for dtype in (np.float32, np.float64):
        scalars = [dtype(v) for v in values]
        expected = reference.karmarkar_karp(scalars, 2, False)
        for items in (
            [np.array(v, dtype) for v in values],
            [DLPackOnly(np.array(v, dtype)) for v in values],
        ):
            assert seqbalance.karmarkar_karp(items, 2, False) == expected
    bfloat16_items = [
        DLPackOnly(as_bfloat16_bits(np.array([1.0], np.float32))[0:1].reshape(()), True)
    ]
    with pytest.raises(TypeError, match=r"seqlen_list\[0\] is a bfloat16 scalar"):
        seqbalance.karmarkar_karp(bfloat16_items, 1, False)


def test_errors_never_print_the_values():
    for producer in (Stranded(np.arange(3)),):
        with pytest.raises(TypeError) as info:
            seqbalance.karmarkar_karp(producer, 1, False)
        assert "SECRET" not in str(info.value) and "seqlen_list" in str(info.value)


# --- torch, where installed -----------------------------------------------------------------


@pytest.fixture
def torch():
    return pytest.importorskip("torch")


@pytest.mark.integration
@pytest.mark.parametrize("dtype", ["int64", "int32", "int16", "uint8"])
def test_torch_cpu_tensors(torch, dtype):
    values = [30, 5, 17, 0, 42, 9, 11, 3]
    tensor = torch.tensor(values, dtype=getattr(torch, dtype))
    for form in (tensor, tensor.flip(0).flip(0), torch.stack([tensor, tensor], 1)[:, 0]):
        for name in ("karmarkar_karp", "get_seqlen_balanced_partitions", "greedy_partition"):
            assert getattr(seqbalance, name)(form, 2, True) == getattr(reference, name)(
                values, 2, True
            )
        assert seqbalance.partition_ids(form, 2, refine=True).tolist() == (
            seqbalance.partition_ids(values, 2, refine=True).tolist()
        )
    assert seqbalance.karmarkar_karp([torch.tensor(v) for v in values], 2, False) == (
        reference.karmarkar_karp(values, 2, False)
    )


@pytest.mark.integration
def test_torch_bfloat16_read_exactly(torch):
    tensor = torch.tensor([1.0, 0.5, 3.0, 2.5e30, 0.0078125], dtype=torch.bfloat16)
    read = _arrays.host_array(tensor, "x")
    assert read.dtype == np.float32
    assert read.tolist() == tensor.float().tolist()
    read = _arrays.host_array(tensor[::2], "x")
    assert read.tolist() == tensor[::2].float().tolist()


@pytest.mark.integration
def test_torch_float_tensors_in_their_precision(torch):
    values = [0.1, 2.5, 1e-3, 7.0, 3.25, 0.0, 1.5, 2.0]
    for dtype, numpy_dtype in ((torch.float32, np.float32), (torch.float64, np.float64)):
        tensor = torch.tensor(values, dtype=dtype)
        plain = np.array(values, numpy_dtype)
        for name in ("karmarkar_karp", "get_seqlen_balanced_partitions", "greedy_partition"):
            assert getattr(seqbalance, name)(tensor, 2, True) == getattr(reference, name)(
                plain, 2, True
            )
        items = [torch.tensor(v, dtype=dtype) for v in values]
        assert seqbalance.karmarkar_karp(items, 2, False) == reference.karmarkar_karp(
            [numpy_dtype(v) for v in values], 2, False
        )
    bf16 = torch.tensor(values, dtype=torch.bfloat16)
    widened = bf16.float().numpy()
    assert seqbalance.karmarkar_karp(bf16, 2, False) == reference.karmarkar_karp(widened, 2, False)
    with pytest.raises(TypeError, match="bfloat16 scalar"):
        seqbalance.karmarkar_karp(list(bf16), 2, False)


@pytest.mark.integration
def test_torch_requires_grad_reads_the_values(torch):
    # 0.2 reads such a tensor through detach() (0.1 refused it with a TypeError saying to detach):
    # the values, in the tensor's precision, and the tensor itself untouched.
    tensor = torch.tensor([1.0, 2.5, 4.0, 0.5], requires_grad=True)
    values = np.array([1.0, 2.5, 4.0, 0.5], dtype=np.float32)
    assert seqbalance.karmarkar_karp(tensor, 2, False) == reference.karmarkar_karp(values, 2, False)
    assert tensor.requires_grad and tensor.grad is None


def test_torch_cuda_copied_once(torch):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    values = [30, 5, 17, 0, 42, 9, 11, 3]
    for dtype in (torch.int64, torch.int32):
        tensor = torch.tensor(values, dtype=dtype, device="cuda")
        assert seqbalance.karmarkar_karp(tensor, 2, True) == reference.karmarkar_karp(
            values, 2, True
        )
        assert seqbalance.partition_ids(tensor[::2], 2, refine=True).tolist() == (
            seqbalance.partition_ids(values[::2], 2, refine=True).tolist()
        )
    bf16 = torch.tensor([1.0, 2.5, 3.0], dtype=torch.bfloat16, device="cuda")
    assert _arrays.host_array(bf16, "x").tolist() == [1.0, 2.5, 3.0]
    weights = torch.tensor([0.5, 2.25, 1.0, 3.0], dtype=torch.float32, device="cuda")
    assert seqbalance.karmarkar_karp(weights, 2, False) == reference.karmarkar_karp(
        weights.cpu().numpy(), 2, False
    )
