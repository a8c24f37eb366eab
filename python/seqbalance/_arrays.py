"""Array acceptance: any array-like argument as one NumPy array in host memory.

The input seam (`seqbalance._inputs`) calls `host_array` for every argument that is not
a list or tuple, then checks the dtype, the number of dimensions and the values. This module only
decides how the array is read, never whether its values are acceptable:

* a NumPy array of any dtype and stride, read-only or not, including subclasses such as
  ``np.memmap``: viewed as a plain ``ndarray`` (the same memory, no copy);
* an object exposing ``__dlpack__`` (torch, JAX, CuPy, ...): read through ``np.from_dlpack``
  without importing its library. On an accelerator (``__dlpack_device__`` not host memory) it is
  copied to host memory once, by DLPack's copy-to-host request
  (``__dlpack__(dl_device=(kDLCPU, 0), copy=True)``) where the producer supports it, else by the
  object's own ``.cpu()``, else by its ``__array__``. bfloat16, which NumPy has no dtype for, is
  read by the binding and widened exactly to float32;
* anything else NumPy can view as an array (``__array__``, ``range``, nested sequences).

Values are read as the producer holds them, never as raw memory meaning something else: a
tensor with the negative or conjugate bit set (torch's lazy ``neg()``/``conj()`` views, which
DLPack cannot describe) is resolved first through its own ``resolve_neg()``/``resolve_conj()``,
a tensor that requires grad is read through ``detach()`` (the same memory), and an array in
non-native byte order is read by value (one copy in native order). An array of more than
``MAX_ITEMS`` elements (an expanded, stride-0 tensor of ``2**40`` elements takes no memory, but
no call could take it) is a ``ValueError`` before any of it is read.

Errors are ``TypeError`` naming the argument and the object's type, dtype and device; the
object's repr (a whole tensor) is never printed.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._native import MAX_ITEMS, _dlpack_bfloat16

__all__ = ["MAX_ITEMS", "host_array", "item_scalar"]

#: DLPack device types whose memory the CPU reads directly (kDLCPU, kDLCUDAHost, kDLROCMHost,
#: kDLCUDAManaged): what ``np.from_dlpack`` accepts.
_HOST_DEVICES = frozenset({1, 3, 11, 13})
_KDLCPU = 1
_DEVICE_NAMES = {
    2: "CUDA",
    4: "OpenCL",
    7: "Vulkan",
    8: "Metal",
    9: "VPI",
    10: "ROCm",
    12: "extension",
    14: "oneAPI",
    15: "WebGPU",
    16: "Hexagon",
    17: "MAIA",
}
# What a producer raises when it cannot export (DLPack names BufferError; older producers raise
# TypeError for the newer keywords, torch RuntimeError for some tensors).
_EXPORT_ERRORS = (BufferError, TypeError, ValueError, RuntimeError, NotImplementedError)


def _what(obj: Any) -> str:
    """The object's type, dtype, shape and device, never its values."""
    parts = [type(obj).__name__]
    for attribute in ("dtype", "shape", "device"):
        try:
            value = getattr(obj, attribute, None)
        except Exception:  # a property that raises tells nothing worth an error of its own
            value = None
        if value is not None and not callable(value):
            text = str(tuple(value)) if attribute == "shape" else str(value)
            parts.append(f"{attribute} {text[:40]}")
    return ", ".join(parts)


class _Capsule:
    """A DLPack capsule handed to ``np.from_dlpack``, which takes producers, not capsules."""

    def __init__(self, capsule: Any) -> None:
        self.capsule = capsule

    def __dlpack__(self, **_ignored: Any) -> Any:
        return self.capsule

    def __dlpack_device__(self) -> tuple[int, int]:
        return (_KDLCPU, 0)


def _device_type(obj: Any, name: str) -> int:
    device = getattr(obj, "__dlpack_device__", None)
    if device is None:
        return _KDLCPU  # DLPack 0.x producers without it are CPU-only (NumPy assumes the same)
    try:
        return int(device()[0])
    except Exception as exc:
        raise TypeError(f"{name} ({_what(obj)}) does not report a DLPack device: {exc}") from None


def _copy_to_host(obj: Any, name: str, device_type: int) -> Any:
    """A host-memory version of ``obj``: one device-to-host copy."""
    try:
        return _Capsule(obj.__dlpack__(dl_device=(_KDLCPU, 0), copy=True))
    except _EXPORT_ERRORS:
        pass  # a producer from before DLPack 1.0's copy-to-host request
    cpu = getattr(obj, "cpu", None)
    if callable(cpu):
        try:
            return cpu()
        except Exception as exc:
            raise TypeError(f"{name} ({_what(obj)}): .cpu() failed: {exc}") from None
    if hasattr(obj, "__array__"):
        return obj  # np.asarray makes the copy
    where = _DEVICE_NAMES.get(device_type, f"DLPack device type {device_type}")
    raise TypeError(
        f"{name} ({_what(obj)}) is in {where} memory and its producer offers no way to copy it "
        "to host memory (no DLPack copy-to-host, .cpu() or __array__); copy it to the CPU first"
    )


#: Lazy views a tensor library may flag on a tensor, the question that tells, and the method
#: that gives the values as a plain tensor (torch's negative and conjugate bits).
_LAZY_VIEWS = (("negative", "is_neg", "resolve_neg"), ("conjugate", "is_conj", "resolve_conj"))


def _flagged(obj: Any, question: str, name: str) -> bool:
    ask = getattr(obj, question, None)
    if not callable(ask):
        return False
    try:
        return bool(ask())
    except Exception as exc:
        raise TypeError(f"{name} ({_what(obj)}): {question}() failed: {exc}") from None


def _plain_view(obj: Any, name: str) -> Any:
    """``obj`` without lazy negative/conjugate bits and without autograd (duck-typed, torch's API).

    DLPack has no way to describe a negative or conjugate bit, so a flagged tensor exported as it
    is would read as the values of its memory (the negation of what it holds). Such a tensor is
    resolved by its own method, or refused with ``TypeError`` when it has none.
    """
    for what, question, method in _LAZY_VIEWS:
        if not _flagged(obj, question, name):
            continue
        resolve = getattr(obj, method, None)
        try:
            resolved = resolve() if callable(resolve) else None
        except Exception as exc:
            raise TypeError(f"{name} ({_what(obj)}): {method}() failed: {exc}") from None
        if resolved is None or _flagged(resolved, question, name):
            raise TypeError(
                f"{name} ({_what(obj)}) has its {what} bit set and cannot be resolved; "
                f"pass {name}.{method}() or a copy of its values"
            )
        obj = resolved
    if getattr(obj, "requires_grad", False) is True:
        detach = getattr(obj, "detach", None)
        if callable(detach):
            try:
                obj = detach()
            except Exception as exc:
                raise TypeError(f"{name} ({_what(obj)}): detach() failed: {exc}") from None
    return obj


def _is_capsule(obj: Any) -> bool:
    return type(obj).__name__ == "PyCapsule"


def _from_dlpack(obj: Any, name: str) -> tuple[np.ndarray, bool]:
    """The host array, and whether it was widened from bfloat16."""
    obj = _plain_view(obj, name)
    device_type = _device_type(obj, name)
    source = obj if device_type in _HOST_DEVICES else _copy_to_host(obj, name, device_type)
    if hasattr(source, "__dlpack__"):
        try:
            return np.from_dlpack(source), False
        except _EXPORT_ERRORS as exc:
            numpy_error: Exception = exc
        # NumPy has no bfloat16: read such a tensor in the binding, widened exactly to float32.
        try:
            capsule = source.__dlpack__()
        except _EXPORT_ERRORS:
            capsule = None
        read = None
        if _is_capsule(capsule):
            try:
                read = _dlpack_bfloat16(capsule)
            except ValueError as exc:  # a shape or strides no call can take
                raise ValueError(f"{name} ({_what(obj)}): {exc}") from None
        if read is not None:
            values, shape = read
            return values.reshape(shape), True
        if not hasattr(source, "__array__"):
            raise TypeError(
                f"{name} ({_what(obj)}) could not be read through DLPack: {numpy_error}"
            ) from None
    try:
        return np.asarray(source), False
    except MemoryError:
        raise
    except Exception as exc:
        raise TypeError(f"{name} ({_what(obj)}) could not be read as an array: {exc}") from None


def _readable(array: np.ndarray, obj: Any, name: str) -> np.ndarray:
    """``array`` once its size is known to be takeable, in native byte order."""
    if array.size > MAX_ITEMS:
        raise ValueError(
            f"{name} ({_what(obj)}) has {array.size} elements, more than the {MAX_ITEMS} items "
            "seqbalance takes"
        )
    if not array.dtype.isnative and array.dtype.kind in "biufc":
        # '>f8', '>i4', ...: the same values in this machine's byte order (one copy).
        return array.astype(array.dtype.newbyteorder("="))
    return array


def host_array(obj: Any, name: str) -> np.ndarray:
    """``obj`` as a plain NumPy ``ndarray`` in host memory (any shape and dtype; the caller checks).

    ``obj`` is not a list or tuple (those are read item by item). Copies nothing that NumPy can
    view in native byte order; copies an accelerator array to host memory once, and an array in
    the other byte order once. Raises ``TypeError`` when ``obj`` is not an array-like (or a tensor
    whose negative or conjugate bit cannot be resolved), naming ``name`` and the object's type
    (never printing its values); ``ValueError`` for more than ``MAX_ITEMS`` elements, before
    reading any; ``MemoryError`` when a needed copy does not fit.

    >>> host_array(np.array([3, 1], dtype=">f8"), "x").tolist()
    [3.0, 1.0]
    """
    if isinstance(obj, np.ma.MaskedArray):
        raise TypeError(
            f"{name} is a masked array; pass {name}.compressed() or {name}.filled(0) instead"
        )
    if isinstance(obj, np.ndarray):
        # Subclasses (np.memmap, ...) as the base class: the same memory, one set of fast paths.
        return _readable(obj.view(np.ndarray), obj, name)
    if hasattr(obj, "__dlpack__") and not isinstance(obj, type):
        return _readable(_from_dlpack(obj, name)[0], obj, name)
    try:
        array = np.asarray(obj)
    except (TypeError, ValueError, OverflowError) as exc:
        raise TypeError(
            f"{name} must be a sequence or 1-D array of numbers, got {_what(obj)}: {exc}"
        ) from None
    return _readable(array, obj, name)


def item_scalar(item: Any, name: str) -> Any:
    """A list item that is a 0-d array or tensor as a NumPy scalar of its dtype; others as given.

    For the seam's item check: a list of 0-d tensors (even on an accelerator, copied one by one)
    or of NumPy scalars then reads like a list of their values, with their precision. A 0-d
    bfloat16 tensor is a ``TypeError``, as a float16 scalar in a list is.
    """
    if isinstance(item, (int, float, np.generic)) or item is None:
        return item
    if not (hasattr(item, "__dlpack__") or hasattr(item, "__array__")):
        return item
    if isinstance(item, (str, bytes, type)) or getattr(item, "ndim", 0) != 0:
        return item
    if hasattr(item, "__dlpack__") and not isinstance(item, np.ndarray):
        array, widened = _from_dlpack(item, name)
        if widened:
            # As float32 it would pass for a float32 scalar, but the reference would add it in
            # bfloat16, a precision no list of scalars has here (as float16 scalars).
            raise TypeError(
                f"{name} is a bfloat16 scalar, which has no reference precision in a list; "
                "pass an array or tensor of the values instead (widened exactly to float32)"
            )
    else:
        array = host_array(item, name)
    return array[()] if array.ndim == 0 else item
