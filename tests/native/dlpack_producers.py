"""Stand-in DLPack producers built with ctypes: any shape, strides, dtype code and byte offset.

Not a test module. A :class:`FakeTensor` exports a legacy ``"dltensor"`` capsule describing
memory the test owns (a NumPy buffer), or no memory at all for shapes that must be refused
before anything is read. Torch is not needed: this is how CI checks what a tensor library could
hand over (expanded stride-0 tensors of 2**40 elements, negative strides, bfloat16, complex).
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

KDLCPU = 1
# DLPack type codes.
KDLINT, KDLUINT, KDLFLOAT, KDLBFLOAT, KDLCOMPLEX, KDLBOOL = 0, 1, 2, 4, 5, 6


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class DLManagedTensor(ctypes.Structure):
    _fields_ = [
        ("dl_tensor", DLTensor),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),  # NULL: the test owns everything
    ]


_api = ctypes.pythonapi
_api.PyCapsule_New.restype = ctypes.py_object
_api.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_CAPSULE_NAME = ctypes.create_string_buffer(b"dltensor")

# Everything a capsule points at, kept for the life of the test process: NumPy's views of a
# capsule outlive the producer object, and a freed shape or buffer under them would be a crash.
_KEPT: list[Any] = []

_CODES = {"i": KDLINT, "u": KDLUINT, "f": KDLFLOAT, "c": KDLCOMPLEX, "b": KDLBOOL}


def dtype_code(dtype: np.dtype[Any]) -> tuple[int, int]:
    """The DLPack (code, bits) of a NumPy dtype."""
    return _CODES[dtype.kind], dtype.itemsize * 8


class FakeTensor:
    """A CPU producer exporting ``buffer`` as a tensor of ``shape`` and element ``strides``.

    ``buffer`` (a NumPy array) owns the memory; ``offset`` is the first element's index in it (in
    elements of ``buffer``'s item size). ``strides=None`` exports a null strides pointer (compact
    row-major). ``code``/``bits`` give the dtype (default: ``buffer``'s own). ``buffer=None``
    exports a null data pointer: for shapes that must be refused before any read.
    """

    def __init__(
        self,
        buffer: np.ndarray | None,
        shape: tuple[int, ...],
        strides: tuple[int, ...] | None,
        offset: int = 0,
        code: int | None = None,
        bits: int | None = None,
        device: int = KDLCPU,
        ndim: int | None = None,
    ) -> None:
        self.buffer = buffer
        self.shape = tuple(shape)
        self.strides = strides
        self.offset = offset
        if buffer is not None and code is None:
            code, bits = dtype_code(buffer.dtype)
        self.code = code
        self.bits = bits
        self.device = device
        self.ndim = len(shape) if ndim is None else ndim
        self.exports = 0

    def __dlpack_device__(self) -> tuple[int, int]:
        return (self.device, 0)

    def __dlpack__(self, **_keywords: Any) -> Any:
        self.exports += 1
        n = len(self.shape)
        shape = (ctypes.c_int64 * max(n, 1))(*self.shape)
        strides = None if self.strides is None else (ctypes.c_int64 * max(n, 1))(*self.strides)
        managed = DLManagedTensor()
        tensor = managed.dl_tensor
        if self.buffer is not None:
            tensor.data = self.buffer.ctypes.data
            tensor.byte_offset = self.offset * self.buffer.dtype.itemsize
        tensor.device = DLDevice(self.device, 0)
        tensor.ndim = self.ndim
        tensor.dtype = DLDataType(self.code, self.bits, 1)
        tensor.shape = ctypes.cast(shape, ctypes.POINTER(ctypes.c_int64))
        if strides is not None:
            tensor.strides = ctypes.cast(strides, ctypes.POINTER(ctypes.c_int64))
        _KEPT.extend((self.buffer, shape, strides, managed))
        return _api.PyCapsule_New(ctypes.addressof(managed), _CAPSULE_NAME, None)


def bfloat16_bits(values: np.ndarray) -> np.ndarray:
    """bfloat16 bit patterns (uint16) of float32 ``values`` (the top half of each)."""
    return (np.ascontiguousarray(values, np.float32).view(np.uint32) >> 16).astype(np.uint16)


def widened(bits: np.ndarray) -> np.ndarray:
    """bfloat16 bit patterns as the float32 values they stand for."""
    return (np.asarray(bits, np.uint16).astype(np.uint32) << 16).view(np.float32)


def laid_out(values: np.ndarray, step: int, lead: int = 3) -> tuple[np.ndarray, int]:
    """A buffer holding ``values`` every ``step`` elements (``step`` may be negative or 0).

    Returns the buffer and the index of the first value in it, so that a tensor of shape
    ``(len(values),)`` and stride ``step`` starting there reads ``values`` (for ``step == 0``,
    ``values`` must all be equal: one element is stored).
    """
    n = len(values)
    if step == 0:
        buffer = np.zeros(lead + 1, values.dtype)
        buffer[lead] = values[0] if n else 0
        return buffer, lead
    span = (n - 1) * abs(step) + 1 if n else 1
    buffer = np.zeros(span + 2 * lead, values.dtype)
    start = lead if step > 0 else lead + span - 1
    if n:
        buffer[start + np.arange(n) * step] = values
    return buffer, start
