"""The array/DLPack boundary (reliability.md, "Arrays"): values are read as the producer holds them.

Stand-in producers (``dlpack_producers.FakeTensor``, ctypes capsules) describe any shape, stride,
dtype and byte offset a tensor library could hand over, so CI checks them without torch:

* absurd shapes (expanded, stride-0 tensors of ``2**40`` and ``2**62`` elements) are a
  ``ValueError``/``TypeError`` at once, before anything is read or allocated -- in a child
  process, since a regression aborts (``Vec::with_capacity``), panics or runs for minutes;
* a bfloat16 tensor within the item limit but too large for memory is a ``MemoryError`` under an
  address-space limit, and its widening stops promptly on Ctrl-C (child processes);
* a fuzz campaign (hypothesis): every dtype, byte order, stride (negative, zero, spaced,
  2-D views of a 1-D row), byte offset and producer form either answers exactly what the same
  values give as a plain array or list, or raises ``TypeError``/``ValueError``/``MemoryError``
  with a message;
* lazy negative/conjugate views (torch's bits, duck-typed) are resolved, never read as the raw
  memory, and a tensor that requires grad is read through ``detach()``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import seqbalance
from seqbalance import _arrays, _native, reference
from tests import helpers

from .dlpack_producers import KDLBFLOAT, FakeTensor, bfloat16_bits, laid_out, widened

MAX_ITEMS = 2**32 - 2

linux_only = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="RLIMIT_AS and /proc are Linux features"
)


def outcome(function, *args, **kwargs):
    """The answer, or the exception's type and message: what a caller can observe."""
    try:
        result = function(*args, **kwargs)
    except (TypeError, ValueError, MemoryError, OverflowError) as exc:
        return ("raised", type(exc), str(exc))
    return ("returned", result.tolist() if isinstance(result, np.ndarray) else result)


def test_the_item_limit_is_the_cores():
    assert _native.MAX_ITEMS == _arrays.MAX_ITEMS == MAX_ITEMS
    # One more item than the core takes is refused by the core's own shape check.
    assert MAX_ITEMS + 1 == 2**32 - 1


# --- crash-type promises, each in a child process ----------------------------------------------

CHILD_PRELUDE = helpers.CHILD_MEMORY + textwrap.dedent(
    """
    import resource, signal, sys, time
    import numpy as np
    import seqbalance
    from seqbalance import _native, reference
    sys.path.insert(0, {root!r})
    from tests.native.dlpack_producers import FakeTensor, KDLBFLOAT, KDLINT, KDLFLOAT, KDLUINT

    signal.signal(signal.SIGINT, signal.default_int_handler)

    def expanded(length, code, bits, itemsize):
        # One element of memory, `length` elements of tensor: torch's t.expand(length).
        return FakeTensor(np.ones(1, dtype=f"u{{itemsize}}"), (length,), (0,), code=code, bits=bits)

    def report(call):
        try:
            call()
        except (ValueError, TypeError, MemoryError) as error:
            print(type(error).__name__, "|", error, flush=True)
        else:
            print("returned", flush=True)
    """
).format(root=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def run_child(body: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", CHILD_PRELUDE + textwrap.dedent(body)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=os.environ.copy(),
    )


CALLS = {
    "partition_ids": "seqbalance.partition_ids(t, 2)",
    "karmarkar_karp": "seqbalance.karmarkar_karp(t, 2, False)",
    "refine_partitions": "seqbalance.refine_partitions(t, [[0]])",
    "group_cost": "seqbalance.group_balanced_partitions([1, 2], [0, 1], 2, cost=lambda x: t)",
    "reference": "reference.karmarkar_karp(t, 2, False)",
    "plan_micro_batches": "seqbalance.plan_micro_batches(t, max_token_len=100)",
}


@linux_only
@pytest.mark.parametrize(
    ("dtype", "length"),
    [
        # bfloat16 is widened in the binding; the others are NumPy views.
        ("KDLBFLOAT, 16, 2", 2**40),
        ("KDLBFLOAT, 16, 2", 2**62),
        ("KDLBFLOAT, 16, 2", MAX_ITEMS + 1),
        ("KDLINT, 64, 8", 2**40),
        ("KDLFLOAT, 32, 4", 2**40),
        ("KDLINT, 64, 8", 2**62),
        ("KDLUINT, 8, 1", 2**63 - 1),
    ],
)
def test_expanded_tensors_beyond_the_item_limit_are_refused_at_once(dtype, length):
    """``t.expand(2**40)``: refused before any read or allocation, under a memory limit too."""
    calls = "\n".join(f"report(lambda: {call})" for call in CALLS.values())
    child = run_child(
        f"""
        t = expanded({length}, {dtype})
        limit_memory(2000)
        started = time.monotonic()
        {textwrap.indent(calls, "        ").strip()}
        print("seconds", time.monotonic() - started)
        print(seqbalance.partition_ids([5, 4, 3, 2], 2, equal_size=True).tolist())
        """,
        timeout=120,
    )
    assert child.returncode == 0, child.stderr[-2000:]
    lines = child.stdout.splitlines()
    assert len(lines) == len(CALLS) + 2, child.stdout
    for name, line in zip(CALLS, lines[: len(CALLS)], strict=True):
        kind, _, message = line.partition(" | ")
        assert kind == "ValueError", (name, line)
        assert f"has {length} elements, more than the {MAX_ITEMS} items" in message, (name, line)
    # Refused without reading: nothing close to a read of 2**40 elements.
    assert float(lines[-2].split()[1]) < 30, child.stdout
    assert lines[-1] == "[1, 0, 0, 1]"
    assert "PanicException" not in child.stderr


@linux_only
def test_bfloat16_too_large_for_memory_is_a_memory_error_and_the_next_call_works():
    """Within the item limit, the float32 copy of an expanded bfloat16 tensor is fallible."""
    child = run_child(
        """
        t = expanded(2**31, KDLBFLOAT, 16, 2)   # 8 GiB once widened
        limit_memory(1000)
        report(lambda: seqbalance.partition_ids(t, 2))
        report(lambda: _native._dlpack_bfloat16(t.__dlpack__()))
        small = expanded(6, KDLBFLOAT, 16, 2)
        print(seqbalance.partition_ids(small, 2, equal_size=True).tolist())
        """
    )
    assert child.returncode == 0, child.stderr[-2000:]
    first, second, third = child.stdout.splitlines()
    for line in (first, second):
        assert line.startswith("MemoryError | seqbalance ran out of memory"), child.stdout
        assert "bfloat16" in line
    # bfloat16 0x0001 widens to a tiny positive float; six equal values, three and three.
    assert sorted(eval(third)) == [0, 0, 0, 1, 1, 1]


@linux_only
@pytest.mark.parametrize("shape", ["(2**29,), (0,)", "(2**14, 2**15), (0, 0)"])
def test_ctrl_c_stops_a_long_bfloat16_widening_promptly(shape):
    latency, _, rest = helpers.interrupt_child(
        CHILD_PRELUDE
        + textwrap.dedent(
            f"""
                shape, strides = {shape}
                t = FakeTensor(np.ones(1, np.uint16), shape, strides, code=KDLBFLOAT, bits=16)
                print("started", flush=True)
                try:
                    for _ in range(20):
                        _native._dlpack_bfloat16(t.__dlpack__())
                    print("finished", flush=True)
                except KeyboardInterrupt:
                    print("interrupted", time.monotonic(), flush=True)
                print(_native.partition_ids([5, 4, 3, 2], 2, True, False).tolist(), flush=True)
                """
        ),
        delay=0.5,
        timeout=120,
    )
    (second,) = rest
    # ~50 ms on an idle machine; 2 s of the child's own CPU time (whatever the load) leaves room
    # for a slow machine and still fails a widening deaf to signals (5 s per call at this size).
    helpers.assert_prompt(latency, 2.0)
    assert second == "[1, 0, 0, 1]"


# --- corrupt descriptions, refused before a read (in a child: read blindly they crash) -----------


@linux_only
def test_corrupt_bfloat16_descriptions_are_value_errors():
    cases = [
        ((-1,), (1,), None, "negative extent"),
        ((3, -2), (1, 1), None, "negative extent"),
        ((2**40, 2**40), (0, 0), None, str(2**80)),
        ((2**63 - 1,) * 3, (0, 0, 0), None, "more than 2**127"),
        ((4,), (2**61,), None, "offsets beyond"),
        ((4,), (-(2**61),), None, "offsets beyond"),
        ((2,), (1,), -1, "ndim -1"),
        ((2,), (1,), 65, "ndim 65"),
    ]
    child = run_child(
        f"""
        limit_memory(2000)
        for shape, strides, ndim, _ in {cases!r}:
            t = FakeTensor(np.ones(1, np.uint16), shape, strides, code=KDLBFLOAT, bits=16, ndim=ndim)
            report(lambda: _native._dlpack_bfloat16(t.__dlpack__()))
            report(lambda: seqbalance.karmarkar_karp(t, 2, False))
        """
    )
    assert child.returncode == 0, child.stderr[-2000:]
    lines = child.stdout.splitlines()
    assert len(lines) == 2 * len(cases), child.stdout
    for (*_, fragment), native, public in zip(cases, lines[::2], lines[1::2], strict=True):
        assert native.startswith("ValueError | DLPack tensor") and fragment in native, native
        # Through the public functions: the argument's name in front.
        assert public.startswith("ValueError | seqlen_list (FakeTensor") and fragment in public


def test_bfloat16_without_data_or_device_memory_is_refused():
    nodata = FakeTensor(None, (3,), (1,), code=KDLBFLOAT, bits=16)
    with pytest.raises(ValueError, match="no data"):
        _native._dlpack_bfloat16(nodata.__dlpack__())
    empty = FakeTensor(None, (0,), (1,), code=KDLBFLOAT, bits=16)
    values, shape = _native._dlpack_bfloat16(empty.__dlpack__())
    assert values.tolist() == [] and shape == [0]
    remote = FakeTensor(np.ones(2, np.uint16), (2,), (1,), code=KDLBFLOAT, bits=16, device=2)
    with pytest.raises(ValueError, match="device type 2, not in host memory"):
        _native._dlpack_bfloat16(remote.__dlpack__())


@linux_only
def test_arrays_beyond_the_item_limit_never_reach_the_native_fast_path():
    """A NumPy stride-0 view of 2**40 items: refused by size, not copied (8 TiB) by the binding."""
    child = run_child(
        """
        huge = np.broadcast_to(np.int64(7), (2**40,))
        limit_memory(2000)
        report(lambda: seqbalance.partition_ids(huge, 2))
        report(lambda: seqbalance.karmarkar_karp(np.broadcast_to(0.5, (2**40,)), 2, False))
        report(lambda: reference.karmarkar_karp(huge, 2, False))
        report(lambda: seqbalance.plan_micro_batches(huge, max_token_len=100))
        """
    )
    assert child.returncode == 0, child.stderr[-2000:]
    lines = child.stdout.splitlines()
    assert len(lines) == 4, child.stdout
    for line in lines:
        assert line.startswith("ValueError | "), line
        assert f"has {2**40} elements, more than the {MAX_ITEMS} items" in line


# --- the fuzz campaign --------------------------------------------------------------------------

INT_DTYPES = ["i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8"]
FLOAT_DTYPES = ["f2", "f4", "f8"]


def _values(draw, dtype: str, n: int) -> np.ndarray:
    kind = np.dtype(dtype).kind
    if kind == "f":
        width = np.dtype(dtype).itemsize * 8
        top = float(np.dtype(dtype).type(min(float(np.finfo(dtype).max) / 64, 1e12)))
        element = st.floats(0, top, width=width)
    elif kind == "b":
        element = st.booleans()
    else:
        element = st.integers(0, min(int(np.iinfo(dtype).max), 2**40))
    return np.array(draw(st.lists(element, min_size=n, max_size=n)), dtype=dtype)


LAYOUTS = ["compact", "null_strides", "spaced", "reversed", "zero", "column", "row"]


def _fake(values: np.ndarray, layout: str, step: int, code=None, bits=None) -> FakeTensor:
    """A producer whose tensor reads as ``values`` in ``layout``."""
    n = len(values)
    if layout in ("compact", "null_strides"):
        buffer, start = laid_out(values, 1)
        strides = None if layout == "null_strides" else (1,)
        return FakeTensor(buffer, (n,), strides, start, code, bits)
    if layout in ("spaced", "reversed"):
        signed = step if layout == "spaced" else -step
        buffer, start = laid_out(values, signed)
        return FakeTensor(buffer, (n,), (signed,), start, code, bits)
    if layout == "zero":
        buffer, start = laid_out(values[:1].repeat(n), 0)
        return FakeTensor(buffer, (n,), (0,), start, code, bits)
    # A 2-D view: (n, 1) or (1, n), the unit dimension with an arbitrary stride.
    buffer, start = laid_out(values, step)
    shape, strides = ((n, 1), (step, 12345)) if layout == "column" else ((1, n), (-777, step))
    return FakeTensor(buffer, shape, strides, start, code, bits)


@given(
    data=st.data(),
    dtype=st.sampled_from(INT_DTYPES + FLOAT_DTYPES + ["?", "bfloat16", "c8", "c16"]),
    layout=st.sampled_from(LAYOUTS),
    step=st.integers(1, 4),
    k=st.integers(1, 4),
    n=st.integers(1, 24),
)
def test_fuzz_dlpack_producers_read_the_values_they_hold(data, dtype, layout, step, k, n):
    """Every dtype and layout: the answer on the same values as a plain array, or a clean error."""
    if dtype == "bfloat16":
        bits = _values(data.draw, "u2", n) & np.uint16(0x7F7F)  # finite, non-negative
        plain = widened(bits)
        if layout == "zero":
            plain = plain[:1].repeat(n)
        producer = _fake(bits_of(plain), layout, step, KDLBFLOAT, 16)
    else:
        plain = _values(data.draw, "f8" if dtype[0] == "c" else dtype, n).astype(dtype)
        if layout == "zero":
            plain = plain[:1].repeat(n)
        producer = _fake(plain, layout, step)
    if layout in ("column", "row"):
        # 2-D: refused as such, as the plain 2-D array is.
        expected = outcome(seqbalance.karmarkar_karp, plain.reshape(producer.shape), k, False)
        assert expected[0] == "raised"
        assert outcome(seqbalance.karmarkar_karp, producer, k, False)[:2] == expected[:2]
        return
    for name in ("karmarkar_karp", "get_seqlen_balanced_partitions"):
        equal = name == "get_seqlen_balanced_partitions" and n % k == 0
        expected = outcome(getattr(seqbalance, name), plain, k, equal)
        assert outcome(getattr(seqbalance, name), producer, k, equal) == expected
        if expected[0] == "raised":
            assert issubclass(expected[1], (TypeError, ValueError, OverflowError)) and expected[2]
    ids = outcome(seqbalance.partition_ids, producer, k)
    assert ids == outcome(seqbalance.partition_ids, plain, k)
    if plain.dtype.kind in "iub":
        # Integers: also the plain Python list of the same values.
        as_list = [int(v) for v in plain]
        assert ids == outcome(seqbalance.partition_ids, as_list, k)
        assert outcome(reference.karmarkar_karp, producer, k, False) == outcome(
            reference.karmarkar_karp, as_list, k, False
        )


def bits_of(floats: np.ndarray) -> np.ndarray:
    """The bfloat16 bits of float32 values that are exactly bfloat16."""
    return bfloat16_bits(floats)


@given(
    data=st.data(),
    dtype=st.sampled_from(INT_DTYPES + FLOAT_DTYPES),
    order=st.sampled_from(["<", ">"]),
    step=st.integers(-3, 3),
    n=st.integers(1, 24),
    k=st.integers(1, 4),
)
def test_fuzz_numpy_byte_orders_and_strides_read_as_values(data, dtype, order, step, n, k):
    """'>f8', '<i2', negative, zero (broadcast) and spaced strides: the values, as a list."""
    k = min(k, n)
    values = _values(data.draw, dtype, n)
    if step == 0:
        values = values[:1].repeat(n)
        view = np.broadcast_to(values[:1].astype(values.dtype.newbyteorder(order)), (n,))
    else:
        buffer = np.zeros(n * abs(step), values.dtype.newbyteorder(order))
        buffer[::step] = values
        view = buffer[::step]
    assert view.tolist() == values.tolist()
    for name in ("karmarkar_karp", "greedy_partition"):
        expected = outcome(getattr(seqbalance, name), values, k, False)
        assert expected[0] == "returned", expected
        assert outcome(getattr(seqbalance, name), view, k, False) == expected
        assert outcome(getattr(reference, name), view, k, False) == expected
    if values.dtype.kind in "iu":
        as_list = [int(v) for v in values]
        assert outcome(seqbalance.partition_ids, view, k) == outcome(
            seqbalance.partition_ids, as_list, k
        )


@pytest.mark.parametrize("dtype", [">f8", ">f4", ">f2", ">i8", ">u4"])
def test_big_endian_arrays_read_by_value(dtype):
    values = [3.0, 1.0, 2.0, 2.0, 5.0, 0.0] if dtype[1] == "f" else [3, 1, 2, 2, 5, 0]
    native = np.array(values, dtype=dtype[1:])
    swapped = np.array(values, dtype=dtype)
    for name in ("karmarkar_karp", "get_seqlen_balanced_partitions", "greedy_partition"):
        expected = getattr(seqbalance, name)(native, 2, True)
        assert getattr(seqbalance, name)(swapped, 2, True) == expected
        assert getattr(reference, name)(swapped, 2, True) == expected
    for call in (seqbalance.calculate_workload, lambda x: seqbalance.partition_ids(x, 3)):
        assert outcome(call, swapped) == outcome(call, native)


# --- lazy views: negative and conjugate bits, autograd ------------------------------------------


def exported(array: np.ndarray) -> FakeTensor:
    """A compact producer of ``array`` (1-D or 0-d)."""
    buffer, start = laid_out(array.reshape(-1), 1)
    return FakeTensor(buffer, array.shape, None, start)


class FlaggedTensor:
    """A torch-like tensor whose memory holds ``raw`` and whose lazy bit makes it mean ``-raw``.

    Its ``__dlpack__`` exports the raw memory, as torch does for a tensor with the negative bit
    set (DLPack has no such bit): read blindly it is the wrong values.
    """

    def __init__(self, raw: np.ndarray, bit: str = "neg", resolvable: bool = True) -> None:
        self.raw = raw
        self.bit = bit
        if resolvable:
            self.resolve_neg = self._resolve if bit == "neg" else (lambda: self)
            self.resolve_conj = self._resolve if bit == "conj" else (lambda: self)
        self.dtype = raw.dtype
        self.shape = raw.shape

    def _resolve(self):
        return exported(-self.raw if self.bit == "neg" else self.raw.conj())

    def is_neg(self) -> bool:
        return self.bit == "neg"

    def is_conj(self) -> bool:
        return self.bit == "conj"

    def __dlpack_device__(self):
        return (1, 0)

    def __dlpack__(self, **keywords):
        return self.raw.__dlpack__()


def test_a_negative_bit_view_is_resolved_not_read_as_its_memory():
    held = np.array([1.0, 2.0, 3.0, 4.0, 10.0, 0.5])
    flagged = FlaggedTensor(-held)  # memory -held, meaning held
    expected = seqbalance.get_seqlen_balanced_partitions(held, 2, True)
    assert seqbalance.get_seqlen_balanced_partitions(flagged, 2, True) == expected
    assert reference.get_seqlen_balanced_partitions(flagged, 2, True) == expected
    assert _arrays.host_array(flagged, "x").tolist() == held.tolist()
    # Memory that holds the values the tensor means negated: refused as negative, not answered.
    wrong = FlaggedTensor(held)
    with pytest.raises(ValueError, match=r"seqlen_list\[0\] must be finite and >= 0"):
        seqbalance.get_seqlen_balanced_partitions(wrong, 2, True)


def test_lazy_views_that_cannot_be_resolved_are_refused():
    for bit in ("neg", "conj"):
        flagged = FlaggedTensor(np.array([1.0, 2.0]), bit=bit, resolvable=False)
        with pytest.raises(TypeError, match=rf"seqlen_list \(FlaggedTensor.*{bit}\w* bit set"):
            seqbalance.karmarkar_karp(flagged, 1, False)


def test_a_conjugate_view_is_resolved_then_refused_as_complex():
    flagged = FlaggedTensor(np.array([1 + 1j, 2 - 1j]), bit="conj")
    with pytest.raises(TypeError, match="complex"):
        seqbalance.karmarkar_karp(flagged, 1, False)


class GradTensor:
    """A torch-like tensor that requires grad: exportable only once detached."""

    requires_grad = True

    def __init__(self, array: np.ndarray) -> None:
        self.array = array
        self.detached = 0

    def detach(self):
        self.detached += 1
        return exported(self.array)

    def __dlpack_device__(self):
        return (1, 0)

    def __dlpack__(self, **keywords):
        raise RuntimeError("Can't export tensors that require gradient, use tensor.detach()")

    def __array__(self, dtype=None, copy=None):
        raise RuntimeError("Can't call numpy() on Tensor that requires grad.")


def test_tensors_requiring_grad_are_read_through_detach():
    values = np.array([3.5, 1.0, 2.25, 7.0], np.float32)
    expected = seqbalance.karmarkar_karp(values, 2, False)
    tensor = GradTensor(values)
    assert seqbalance.karmarkar_karp(tensor, 2, False) == expected
    assert tensor.detached == 1
    items = [GradTensor(np.array(v, np.float32)) for v in values]
    assert seqbalance.karmarkar_karp(items, 2, False) == expected
    assert reference.karmarkar_karp(items, 2, False) == expected
