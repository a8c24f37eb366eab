"""One native call per operation: the input is validated and read once, refinement included.

``_native._input_reads()`` counts the inputs the extension has read into a buffer of its own; the
Python validation step the extension calls when its own reading is unsure
(``_inputs.weights.normalize_weights``, from ``_inputs.request``) is watched by replacing it with
a counting wrapper, and the extension's entry points by wrapping the module's functions.
"""

from __future__ import annotations

import numpy as np
import pytest

import seqbalance
from seqbalance import _native, partition
from seqbalance._inputs import weights

DROP_INS = ["karmarkar_karp", "get_seqlen_balanced_partitions", "greedy_partition", "partition_ids"]


@pytest.fixture
def normalisations(monkeypatch):
    """How many times the partitioners ran the Python validation of the weights."""
    calls = []
    original = weights.normalize_weights

    def counting(values, *args, **kwargs):
        calls.append(1)
        return original(values, *args, **kwargs)

    monkeypatch.setattr(weights, "normalize_weights", counting)
    return calls


@pytest.fixture
def native_calls(monkeypatch):
    """The names of the extension's partitioners, once per call into them."""
    calls: list[str] = []
    for name in DROP_INS:
        original = getattr(_native, name)

        def counting(*args, _name=name, _original=original):
            calls.append(_name)
            return _original(*args)

        monkeypatch.setattr(partition._native, name, counting)
    return calls


def reads_of(call) -> tuple[int, object]:
    before = _native._input_reads()
    answer = call()
    return _native._input_reads() - before, answer


CERTAINLY_VALID = [
    pytest.param(lambda: list(range(1, 97)), id="list of ints"),
    pytest.param(lambda: np.arange(1, 97, dtype=np.int64), id="int64 array"),
    pytest.param(lambda: np.arange(1, 97, dtype=np.uint16), id="uint16 array"),
    pytest.param(lambda: [v / 4 for v in range(1, 97)], id="list of floats"),
    pytest.param(lambda: np.arange(1, 97, dtype=np.float32), id="float32 array"),
]


@pytest.mark.parametrize("make", CERTAINLY_VALID)
@pytest.mark.parametrize("refine", [False, True, "exact"])
@pytest.mark.parametrize("equal_size", [True, "nearly", False])
def test_certainly_valid_input_is_read_once_and_never_by_python(
    make, refine, equal_size, normalisations
):
    values = make()
    for function in (seqbalance.get_seqlen_balanced_partitions, _ids):
        reads, answer = reads_of(lambda f=function: f(values, 8, equal_size, refine=refine))
        assert reads == 1
        assert len(answer) in (8, 96)
    assert normalisations == []


def _ids(values, k, equal_size, *, refine):
    return seqbalance.partition_ids(values, k, equal_size=equal_size, refine=refine)


class _ArrayLike:
    """An object NumPy reads through ``__array__`` (as a CPU tensor would be)."""

    def __init__(self, array):
        self.array = array

    def __array__(self, dtype=None, copy=None):
        return self.array


@pytest.mark.parametrize(
    "values",
    [
        pytest.param([1, 2.5, *range(3, 97)], id="ints and floats"),
        pytest.param(np.arange(1, 97, dtype=np.float16), id="float16 array"),
        pytest.param(_ArrayLike(np.arange(1, 97)), id="array-like"),
    ],
)
def test_other_input_is_validated_once_by_python_then_read_once(values, normalisations):
    reads, answer = reads_of(
        lambda: seqbalance.get_seqlen_balanced_partitions(values, 8, True, refine=True)
    )
    # The first look gives up (it may read part of a list), the extension has Python validate
    # once, and reads the normalised array once.
    assert normalisations == [1]
    assert reads == 1
    assert sorted(i for part in answer for i in part) == list(range(96))


ANY_INPUT = [
    pytest.param([1, 2, 3, 4], id="certainly valid"),
    pytest.param([1, 2.5, 3, 4], id="ints and floats"),
    pytest.param(np.arange(1, 5, dtype=np.float16), id="float16 array"),
    pytest.param(_ArrayLike(np.arange(1, 5)), id="array-like"),
    pytest.param([1, -2, 3, 4], id="a negative item"),
    pytest.param([1, "2", 3, 4], id="a string item"),
]


@pytest.mark.parametrize("values", ANY_INPUT)
@pytest.mark.parametrize("equal_size", [True, "nearly", None])
@pytest.mark.parametrize("name", DROP_INS)
def test_every_drop_in_calls_the_extension_once_whatever_the_input(
    values, equal_size, name, native_calls
):
    function = getattr(seqbalance, name)
    try:
        if name == "partition_ids":
            function(values, 2, equal_size=equal_size)
        else:
            function(values, 2, equal_size)
    except (TypeError, ValueError):
        pass  # a refusal is one call too
    assert native_calls == [name]


def test_an_unsure_first_reading_needs_no_second_entry(native_calls):
    # refine=None is refused by the Python check the extension calls, inside the one call.
    with pytest.raises(TypeError, match="refine"):
        seqbalance.get_seqlen_balanced_partitions([1, 2], 1, False, refine=None)
    assert native_calls == ["get_seqlen_balanced_partitions"]


def test_the_refined_answer_is_the_two_step_answer():
    # One call gives what partitioning and then refining the partition separately gives.
    values = np.random.default_rng(7).integers(1, 1000, size=200)
    lists = seqbalance.get_seqlen_balanced_partitions(values, 8, True, refine=True)
    start = seqbalance.get_seqlen_balanced_partitions(values, 8, True)
    assert lists == seqbalance.refine_partitions(values, start, equal_size=True)
    ids = seqbalance.partition_ids(values, 8, equal_size=True, refine=True)
    for number, part in enumerate(lists):
        assert (ids[part] == number).all()


def test_a_native_partition_error_is_the_package_class():
    # The extension defines PartitionError at init; its shape check raises that class.
    with pytest.raises(seqbalance.PartitionError, match=r"number of items \(3\)"):
        seqbalance.karmarkar_karp([1, 2, 3], 2, True)


def test_version_comes_from_the_extension():
    assert seqbalance.__version__ == _native.__version__
