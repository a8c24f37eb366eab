"""Private native module; the documented API is in :mod:`seqbalance.partition`."""

from collections.abc import Sequence
from typing import Any, Literal, TypedDict, final, overload

import numpy as np
import numpy.typing as npt

__version__: str
"""The version of seqbalance, as its native extension was built (``seqbalance.__version__``)."""

__all__ = [
    "__version__",
    "MAX_ITEMS",
    "ArgumentError",
    "ArgumentOverflowError",
    "ArgumentTypeError",
    "ArgumentValueError",
    "PartitionError",
    "_StreamCore",
    "_dlpack_bfloat16",
    "_order_micro_batches",
    "_own_count",
    "_pack",
    "_plan_context_parallel",
    "_plan_packed_steps",
    "_plan_ranks",
    "_plan_step",
    "_step_time",
    "_refine",
    "_refine_candidate",
    "_refine_ids",
    "build_profile",
    "get_seqlen_balanced_partitions",
    "greedy_partition",
    "karmarkar_karp",
    "partition_ids",
]

# The package's exceptions, defined when the module initialises (seqbalance.errors documents them).
class PartitionError(ValueError, AssertionError): ...

class ArgumentError(Exception):
    argument: str | None
    loc: tuple[Any, ...]
    kind: str | None
    input: Any
    ctx: dict[str, Any] | None

class ArgumentValueError(ArgumentError, ValueError): ...
class ArgumentTypeError(ArgumentError, TypeError): ...
class ArgumentOverflowError(ArgumentError, OverflowError): ...

#: The most items any call takes (item positions are 32-bit in the core): 2**32 - 2.
MAX_ITEMS: int

# The partitioners read certainly valid input themselves and hand anything else, inside the same
# call, to seqbalance._inputs.request.partition_request (which raises or normalises).
def karmarkar_karp(seqlen_list: Any, k_partitions: Any, equal_size: Any) -> list[list[int]]: ...
def get_seqlen_balanced_partitions(
    seqlen_list: Any, k_partitions: Any, equal_size: Any, refine: Any
) -> list[list[int]]: ...
def greedy_partition(seqlen_list: Any, k_partitions: Any, equal_size: Any) -> list[list[int]]: ...
def partition_ids(
    lengths: Any, k_partitions: Any, equal_size: Any, refine: Any
) -> npt.NDArray[np.int64]: ...
def build_profile() -> str: ...
def _plan_context_parallel(
    lengths: npt.NDArray[np.int64],
    costs: npt.NDArray[np.float64],
    comm: npt.NDArray[np.float64],
    degrees: npt.NDArray[np.int64],
    world_size: int,
    cap: int,
    method: str = "best",
) -> tuple[list[list[tuple[int, list[int], list[int]]]], float, str]: ...
def _plan_packed_steps(
    lengths: npt.NDArray[np.int64],
    weights: npt.NDArray[Any],
    ranks: int,
    steps: int,
    pack_max_length: int,
    refine: str,
    max_sequences: int | None = None,
    padded: bool = False,
) -> list[list[list[list[int]]]]: ...
@overload
def _pack(
    lengths: npt.NDArray[np.int64],
    pack_max_length: int,
    algorithm: str,
    as_ids: Literal[False] = False,
    max_sequences: int | None = None,
    padded: bool = False,
    keys: npt.NDArray[np.int64] | None = None,
) -> list[list[int]]: ...
@overload
def _pack(
    lengths: npt.NDArray[np.int64],
    pack_max_length: int,
    algorithm: str,
    as_ids: Literal[True],
    max_sequences: int | None = None,
    padded: bool = False,
    keys: npt.NDArray[np.int64] | None = None,
) -> npt.NDArray[np.int64]: ...
@overload
def _pack(
    lengths: npt.NDArray[np.int64],
    pack_max_length: int,
    algorithm: str,
    as_ids: bool,
    max_sequences: int | None = None,
    padded: bool = False,
    keys: npt.NDArray[np.int64] | None = None,
) -> list[list[int]] | npt.NDArray[np.int64]: ...
def _refine(
    values: npt.NDArray[np.int64] | npt.NDArray[np.float64] | npt.NDArray[np.float32],
    partitions: Any,
    equal_size: bool,
    exact: bool,
    effort: int | None = None,
) -> list[list[int]]: ...
def _refine_ids(
    values: npt.NDArray[np.int64] | npt.NDArray[np.float64] | npt.NDArray[np.float32],
    ids: npt.NDArray[np.int64],
    k: int,
    equal_size: bool,
    exact: bool,
    as_ids: bool,
) -> list[list[int]] | npt.NDArray[np.int64]: ...
def _dlpack_bfloat16(
    capsule: Any,
) -> tuple[npt.NDArray[np.float32], list[int]] | None: ...

class _PlanRequest(TypedDict):
    n_ranks: int
    cap: int
    multiple: int
    minimum: int
    order: str
    as_ids: bool
    max_sequences: int | None
    padded: bool

_Costs = npt.NDArray[np.int64] | npt.NDArray[np.float64] | npt.NDArray[np.float32]

def _own_count(
    tokens: npt.NDArray[np.int64],
    costs: _Costs,
    request: _PlanRequest,
    sizes: npt.NDArray[np.int64] | None = None,
    longest: npt.NDArray[np.int64] | None = None,
    keys: npt.NDArray[np.int64] | None = None,
) -> int: ...
def _plan_ranks(
    tokens: npt.NDArray[np.int64],
    costs: _Costs,
    starts: npt.NDArray[np.int64],
    sizes: npt.NDArray[np.int64],
    candidates: Sequence[npt.NDArray[np.int64]],
    request: _PlanRequest,
    longest: npt.NDArray[np.int64] | None = None,
    keys: npt.NDArray[np.int64] | None = None,
) -> tuple[
    int,
    int,
    list[list[list[int]]] | tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]],
]: ...
def _refine_candidate(
    weights: npt.NDArray[np.int64], ids: npt.NDArray[np.int64], k: int, equal_size: bool
) -> npt.NDArray[np.int64] | None: ...
def _order_micro_batches(
    costs: _Costs,
    firsts: npt.NDArray[np.int64],
    sizes: npt.NDArray[np.int64],
    order: str,
) -> list[int]: ...

class _StepRequest(TypedDict):
    sync: str
    stages: int
    forward_share: float
    micro_batch_time: float
    max_count: int | None
    equal_counts: str
    n_samples: int
    progress_after: float
    progress_label: str

_PlanAnswer = list[list[list[int]]] | tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]

def _plan_step(
    tokens: npt.NDArray[np.int64],
    costs: _Costs,
    starts: npt.NDArray[np.int64],
    sizes: npt.NDArray[np.int64],
    candidates: Sequence[npt.NDArray[np.int64]],
    request: _PlanRequest,
    step: _StepRequest,
    longest: npt.NDArray[np.int64] | None = None,
    keys: npt.NDArray[np.int64] | None = None,
) -> tuple[int, _PlanAnswer, float, int, float, _PlanAnswer | None]: ...
def _step_time(
    times: npt.NDArray[np.float64],
    counts: npt.NDArray[np.int64],
    sync: str,
    stages: int,
    forward_share: float,
) -> tuple[float, npt.NDArray[np.float64]]: ...

@final
class _StreamCore:
    def __new__(
        cls, pack_max_length: int, max_open: int, max_sequences: int | None, padded: bool
    ) -> _StreamCore: ...
    def add(self, length: int, key: int) -> list[list[int]]: ...
    def add_many(
        self, lengths: npt.NDArray[np.int64], keys: npt.NDArray[np.int64] | None = None
    ) -> list[list[int]]: ...
    def flush(self) -> list[list[int]]: ...
    def open_packs(self) -> list[list[int]]: ...
    @property
    def open_count(self) -> int: ...
    def open_keys(self) -> list[int]: ...
    @property
    def next_index(self) -> int: ...
    def state(
        self,
    ) -> tuple[int, int, int | None, bool, int, list[tuple[int, int, int, list[int]]]]: ...
    @staticmethod
    def from_state(
        pack_max_length: int,
        max_open: int,
        max_sequences: int | None,
        padded: bool,
        next_index: int,
        packs: list[tuple[int, int, int, list[int]]],
    ) -> _StreamCore: ...

# The tests' entry points: in the test build only (cargo feature `test-hooks`, which make install,
# make inplace, make lint and make docs turn on); the release wheel has none of them, and
# .ci/stubtest-allowlist.txt lets stubtest accept either build (they are not in __all__, in
# either build).
def _input_reads() -> int: ...
def _purge_delay() -> int: ...
def _internal_error_check(detached: bool) -> None: ...
