"""Cost models: what a sample weighs when planners and samplers balance ranks and micro-batches.

A planner's ``cost=`` is one of

- ``"tokens"``: the lengths themselves;
- ``"workload"``: `seqbalance.calculate_workload` (verl's proxy ``24576 * s + s**2``);
- per-sample weights: a sequence or 1-D array (or tensor) of non-negative integers or floats,
  one per sample, used as given (e.g. FLOPs a trainer already computed);
- a callable taking the lengths as a 1-D ``int64`` array and returning such weights, called
  once per plan; `TransformerCost` is a named one for dense transformers.

Float weights (costs, FLOPs estimates) are taken by every planner, in the precision of their
kind as the partitioners compute (partition spec, "Float weights"): a group's weight is its
members' sum left to right, a micro-batch's cost the fold of its members' in placement order.
The token caps always count integer tokens.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from .._deprecation import keyword_only_from
from .._inputs import (
    MAX_VALUE,
    _describe,
    check_flag,
    check_k_partitions,
    normalize_lengths,
    normalize_weights,
    show_number,
)
from ._time_saved import KIND
from .time_cost import TimeCost

__all__ = [
    "COST_NAMES",
    "Cost",
    "TransformerCost",
    "calculate_workload",
    "check_total",
    "group_sums",
    "nanoseconds",
    "pad_lengths",
    "resolve_cost",
    "sample_costs",
    "saved_cost_hint",
    "unit_scale",
]


def calculate_workload(lengths: Any, *, hidden_size: int = 4096) -> list[int] | np.ndarray:
    """Attention-aware cost of a dense transformer per sequence: ``6 * hidden_size * s + s * s``.

    The linear term is the per-token matmul cost and the square term the attention cost; with the
    default ``hidden_size`` this is ``24576 * s + s**2``, the constant verl uses.

    Args:
        lengths: sequence lengths (list/tuple of ints, or a 1-D integer array).
        hidden_size: model width, an int >= 1.

    Returns:
        A list of exact Python ints for list-like input; an ``int64`` array for NumPy input.

    Raises:
        TypeError, ValueError, OverflowError: bad lengths or ``hidden_size`` (see
            `seqbalance._inputs.normalize_lengths`); ``OverflowError`` also when a workload
            of an array input, or ``6 * hidden_size`` itself, would not fit in int64 (it is never
            wrapped around).

    Example:
        >>> calculate_workload([1, 100])
        [24577, 2467600]
    """
    hidden = check_k_partitions(hidden_size, "hidden_size")
    linear = 6 * hidden
    values = normalize_lengths(lengths, "lengths")
    if not isinstance(values, np.ndarray):
        return [linear * s + s * s for s in values]
    # NumPy cannot multiply by a factor above int64 at all, and the fault is hidden_size's.
    if linear > MAX_VALUE:
        raise OverflowError(
            f"6 * hidden_size = {linear} (hidden_size={hidden}) does not fit in int64; "
            "pass a list to get exact Python ints"
        )
    if values.size:
        # The workload grows with s, so the longest sequence decides whether int64 suffices.
        position = int(np.argmax(values))
        longest = int(values[position])
        if linear * longest + longest * longest > MAX_VALUE:
            raise OverflowError(
                f"workload of lengths[{position}] = {longest} with hidden_size={hidden} "
                "does not fit in int64; pass a list to get exact Python ints"
            )
    return linear * values + values * values


#: Nanoseconds per second: a `TimeCost`'s predicted seconds are weighed as int64 nanoseconds.
NANOSECONDS_PER_SECOND = 1e9


def nanoseconds(cost: TimeCost, lengths: Any) -> np.ndarray:
    """Each sample's predicted seconds under ``cost`` as int64 nanoseconds,
    ``rint(cost(lengths) * 1e9)``: the one weight a `TimeCost` has in the library, on the
    command line and in ``install()`` (integers keep the exact planners and their refined rank
    split; a nanosecond is far below what a GPU's timer resolves).

    Raises ``OverflowError`` naming the first length predicted past ``2**63 - 1`` nanoseconds
    (292 years).

    Example:
        >>> batches = [[1024], [2048], [4096], [512, 512], [1024, 3072], [8192], [256] * 8]
        >>> seconds = [0.001 + sum(2e-7 * L + 1e-11 * L * (L + 1) / 2 for L in b)
        ...            for b in batches]
        >>> nanoseconds(TimeCost.fit(batches, seconds), np.array([1024, 0])).tolist()
        [210048, 0]
    """
    seconds = np.asarray(cost(lengths), dtype=np.float64)
    values = np.rint(seconds * NANOSECONDS_PER_SECOND)
    if values.size and not values.max() < 2.0**63:  # NaN fails too
        position = int(np.argmax(values))
        raise OverflowError(
            f"lengths[{position}] = {int(lengths[position])} is predicted to take "
            f"{seconds[position]:.4g} s, beyond int64 nanoseconds"
        )
    return values.astype(np.int64)


def unit_scale(cost: Any) -> float:
    """What one of ``cost``'s units is in the weights the planners use: ``1e9`` for a
    `TimeCost` (seconds weighed as nanoseconds, see `nanoseconds`), ``1.0`` for every other
    cost."""
    return NANOSECONDS_PER_SECOND if isinstance(cost, TimeCost) else 1.0


#: The named costs every planner accepts.
COST_NAMES = ("tokens", "workload")

#: What ``cost=`` accepts (see the module docstring).
Cost = str | Sequence[Any] | np.ndarray | Callable[[np.ndarray], Any]


@keyword_only_from("default", where="seqbalance.costs.workload.resolve_cost")
def resolve_cost(cost: Any, default: str = "tokens") -> Any:
    """The cost to use: ``cost``, or ``default`` for ``cost=None``. (The retired
    ``balance_workload=`` spelling is read by the planners' deprecation decorators.)"""
    return default if cost is None else cost


def pad_lengths(lengths: np.ndarray, multiple: int) -> np.ndarray:
    """Each length rounded up to a multiple of ``multiple`` (an int64 array; a copy when > 1).

    Raises ``OverflowError`` naming the first length whose padded value passes ``2**63 - 1``.
    """
    if multiple == 1:
        return lengths
    if lengths.size:
        position = int(np.argmax(lengths))
        longest = int(lengths[position])
        if -(-longest // multiple) * multiple > MAX_VALUE:
            raise OverflowError(
                f"lengths[{position}] = {longest} padded to a multiple of "
                f"{show_number(multiple)} is above 2**63 - 1"
            )
    if multiple > MAX_VALUE:
        # Only zeros remain (anything else was refused above): they stay zero.
        return lengths.copy()
    return -(-lengths // multiple) * multiple


def _weights(values: Any, n: int, name: str) -> np.ndarray:
    """Validate explicit per-sample weights: one non-negative number per sample, ints or floats
    in their own precision (see `seqbalance._inputs.normalize_weights`)."""
    array = normalize_weights(values, name).values
    if array.size != n:
        raise ValueError(f"{name} has {array.size} weights but there are {n} samples")
    return array


@keyword_only_from("name", where="seqbalance.costs.workload.sample_costs")
def sample_costs(cost: Any, lengths: np.ndarray, name: str = "cost") -> np.ndarray:
    """Per-sample weights for ``cost`` on these (padded) lengths: a 1-D ``int64`` array, or for
    float weights (explicit or computed) a ``float64`` or ``float32`` array, the partitioners'
    precision for them (see `seqbalance._inputs.normalize_weights`). A `TimeCost` weighs its
    predicted seconds as int64 nanoseconds (`nanoseconds`), as the command line and
    ``install()`` weigh it.

    Raises ``ValueError`` for an unknown name, a wrong number of weights or a NaN/negative
    weight, ``TypeError`` for non-numeric weights, ``OverflowError`` for an int weight above
    ``2**63 - 1`` or floats totalling past half the largest finite value.
    """
    if isinstance(cost, str):
        if cost == "tokens":
            return lengths
        if cost == "workload":
            return np.asarray(calculate_workload(lengths), dtype=np.int64)
        raise ValueError(
            f"{name} must be 'tokens', 'workload', per-sample weights or a callable, got {cost!r}"
        )
    if cost is None or isinstance(cost, (bytes, bool, int, float, Mapping, set)):
        raise TypeError(
            f"{name} must be 'tokens', 'workload', per-sample weights or a callable, "
            f"got {_describe(cost)}{saved_cost_hint(cost)}"
        )
    if isinstance(cost, TimeCost):
        return _weights(nanoseconds(cost, lengths.copy()), lengths.size, f"{name}(lengths)")
    if callable(cost):
        weights = cost(lengths.copy())
        return _weights(weights, lengths.size, f"{name}(lengths)")
    return _weights(cost, lengths.size, name)


def saved_cost_hint(cost: Any) -> str:
    """What to call on a mapping passed as a cost: a saved `TimeCost` (what ``to_dict``
    returns, e.g. read back from JSON) is loaded with ``TimeCost.from_dict``; a model's config
    becomes a cost through ``ModelCost.from_config``. ``''`` for anything else.

    Examples:
        >>> saved_cost_hint({"kind": "seqbalance.TimeCost", "version": 1})
        '; a saved TimeCost is a cost once loaded: seqbalance.TimeCost.from_dict(...)'
    """
    if not isinstance(cost, Mapping):
        return ""
    if cost.get("kind") == KIND:
        return "; a saved TimeCost is a cost once loaded: seqbalance.TimeCost.from_dict(...)"
    if "hidden_size" in cost or "model_type" in cost:
        return "; a model's config is a cost through seqbalance.ModelCost.from_config(...)"
    return ""


@keyword_only_from("name", where="seqbalance.costs.workload.check_total")
def check_total(values: np.ndarray, name: str = "cost") -> None:
    """Raise ``OverflowError`` when ``values`` sum above ``2**63 - 1``.

    Below that, no group sum and no sum of groups a partitioner forms can wrap around. The
    advice fits the sum: weights from a cost can fall back to ``cost='tokens'``; the lengths
    themselves (whatever the cost) can only be planned in smaller batches.
    """
    if values.size == 0:
        return
    largest = int(values.max())
    if largest * values.size > MAX_VALUE:
        total = sum(values.tolist())
        if total > MAX_VALUE:
            advice = (
                "plan them in smaller batches (every planner adds lengths up in int64)"
                if name == "lengths"
                else "pass cost='tokens' or smaller weights"
            )
            raise OverflowError(
                f"the {name} of all samples sums to {total}, above 2**63 - 1; {advice}"
            )


@keyword_only_from("name", where="seqbalance.costs.workload.group_sums")
def group_sums(values: np.ndarray, starts: np.ndarray, name: str = "cost") -> np.ndarray:
    """Sum ``values`` over the groups beginning at ``starts`` (ascending, ``starts[0] == 0``).

    Raises the ``OverflowError`` of `check_total`. Float weights are summed in their own
    precision, each group left to right in member order (``np.add.reduceat`` sums long groups
    pairwise, which rounds differently); the partitioner then checks the group sums as its
    input.
    """
    if values.size == 0:
        return values[:0].copy()
    if values.dtype.kind == "f":
        return _sequential_group_sums(values, starts)
    check_total(values, name=name)
    return np.add.reduceat(values, starts)


#: Groups up to this size are summed by a loop over member positions, the others one by one.
_SHORT_GROUP = 64


def _sequential_group_sums(values: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Each group's left-to-right sum in the values' precision: the j-th members of all short
    groups are added at once, j = 0, 1, ...; a long group is one sequential accumulate."""
    sizes = np.diff(np.append(starts, values.size))
    sums = np.zeros(starts.size, dtype=values.dtype)
    short = np.flatnonzero(sizes <= _SHORT_GROUP)
    for j in range(int(sizes[short].max(initial=0))):
        members = short[sizes[short] > j]
        sums[members] += values[starts[members] + j]
    for group in np.flatnonzero(sizes > _SHORT_GROUP).tolist():
        start = int(starts[group])
        sums[group] = np.add.accumulate(values[start : start + int(sizes[group])])[-1]
    return sums


class TransformerCost:
    """Training FLOPs of a dense transformer per sequence, as a ``cost=`` for the planners.

    For a sequence of ``s`` tokens, with ``h = hidden_size``, ``f = ffn_hidden_size`` (default
    ``4 * h``) and ``L = num_layers``, one training step (forward + backward = 3 x forward,
    2 FLOPs per multiply-add) costs:

        FLOPs(s) = 6 * L * h * ((4 * h + 2 * f) * s + c * s**2)

    The linear term is per token: the Q, K, V and output projections (``4 * h * h``
    multiply-adds) and the feed-forward block (``2 * h * f``). The quadratic term is attention:
    ``Q @ K.T`` and ``softmax @ V`` take ``2 * h * s**2`` multiply-adds, halved under a causal
    mask (``c = 1`` when ``causal``, ``c = 2`` otherwise). Embeddings and the output head are
    left out.

    Calling the object returns ``weight(s) = (4 * h + 2 * f) * s + c * s**2``, the FLOPs
    divided by the constant ``6 * L * h``: an exact integer that balances exactly as the FLOPs
    do (dividing every weight by one positive constant changes no comparison) and stays far
    from int64 overflow; `flops` gives the FLOPs themselves.

    Relation to `seqbalance.calculate_workload` (``6 * hidden_size * s + s**2``, verl's
    ``24576 * s + s**2`` for ``hidden_size=4096``): with ``f = 4 * h`` and ``causal=False`` the
    weight is ``12 * h * s + 2 * s**2``, exactly twice ``calculate_workload(s, hidden_size=h)``,
    so the plans are the same; ``causal=True`` (the default, as in decoder training) weighs
    attention half as much, like ``calculate_workload(s, hidden_size=2 * h)``.

    Raises:
        TypeError: a size that is not an int, or a ``causal`` that is not a bool.
        ValueError: a size below 1, or a ``hidden_size``/``ffn_hidden_size`` so large that the
            per-token weight ``4 * h + 2 * f`` leaves int64 (the message names the argument).

    Example:
        >>> cost = TransformerCost(hidden_size=4096, causal=False)
        >>> cost(np.array([1, 100])).tolist() == [2 * w for w in calculate_workload([1, 100])]
        True
    """

    def __init__(
        self,
        hidden_size: int,
        num_layers: int = 1,
        ffn_hidden_size: int | None = None,
        causal: bool = True,
    ) -> None:
        self.hidden_size = check_k_partitions(hidden_size, "hidden_size")
        self.num_layers = check_k_partitions(num_layers, "num_layers")
        # The per-token coefficient 4 * h + 2 * f must fit in int64, or even a length of 1 (and
        # the arithmetic on an empty array) overflows.
        if ffn_hidden_size is None:
            largest = MAX_VALUE // 12
            if self.hidden_size > largest:
                raise ValueError(
                    f"hidden_size must be <= {largest} (the per-token weight 12 * hidden_size "
                    f"must fit in int64), got {self.hidden_size}"
                )
            self.ffn_hidden_size = 4 * self.hidden_size
        else:
            if self.hidden_size > (MAX_VALUE - 2) // 4:
                raise ValueError(
                    f"hidden_size must be <= {(MAX_VALUE - 2) // 4} (the per-token weight "
                    f"4 * hidden_size + 2 * ffn_hidden_size must fit in int64), got "
                    f"{self.hidden_size}"
                )
            self.ffn_hidden_size = check_k_partitions(ffn_hidden_size, "ffn_hidden_size")
            largest = (MAX_VALUE - 4 * self.hidden_size) // 2
            if self.ffn_hidden_size > largest:
                raise ValueError(
                    f"ffn_hidden_size must be <= {largest} with hidden_size={self.hidden_size} "
                    "(the per-token weight 4 * hidden_size + 2 * ffn_hidden_size must fit in "
                    f"int64), got {self.ffn_hidden_size}"
                )
        self.causal = check_flag(causal, "causal")

    def __repr__(self) -> str:
        return (
            f"TransformerCost(hidden_size={self.hidden_size}, num_layers={self.num_layers}, "
            f"ffn_hidden_size={self.ffn_hidden_size}, causal={self.causal})"
        )

    def _linear(self) -> int:
        return 4 * self.hidden_size + 2 * self.ffn_hidden_size

    def __call__(self, lengths: Any) -> np.ndarray:
        """``(4 * h + 2 * f) * s + c * s**2`` per length, an ``int64`` array.

        Raises ``OverflowError`` when a weight does not fit in int64.
        """
        values = np.asarray(normalize_lengths(lengths, "lengths"), dtype=np.int64).reshape(-1)
        linear, quadratic = self._linear(), (1 if self.causal else 2)
        if values.size:
            longest = int(values.max())
            if linear * longest + quadratic * longest * longest > MAX_VALUE:
                raise OverflowError(
                    f"the cost of a length of {longest} under {self!r} does not fit in int64"
                )
        return linear * values + quadratic * values * values

    def flops(self, lengths: Any) -> list[int]:
        """The training FLOPs of each sequence, as exact Python ints."""
        scale = 6 * self.num_layers * self.hidden_size
        return [scale * int(w) for w in self(lengths).tolist()]
