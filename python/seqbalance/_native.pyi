"""Private native module; the documented API is in :mod:`seqbalance.partition`."""

from collections.abc import Sequence
from typing import Any, TypedDict

import numpy as np
import numpy.typing as npt

__all__ = [
    "_dlpack_bfloat16",
    "_internal_error_check",
    "_order_micro_batches",
    "_own_count",
    "_pack",
    "_plan_ranks",
    "_refine",
    "_refine_candidate",
    "_refine_ids",
    "build_profile",
    "get_seqlen_balanced_partitions",
    "greedy_partition",
    "karmarkar_karp",
    "partition_ids",
]

def karmarkar_karp(seqlen_list: Any, k_partitions: Any, equal_size: Any) -> list[list[int]]: ...
def get_seqlen_balanced_partitions(
    seqlen_list: Any, k_partitions: Any, equal_size: Any
) -> list[list[int]]: ...
def greedy_partition(seqlen_list: Any, k_partitions: Any, equal_size: Any) -> list[list[int]]: ...
def partition_ids(
    seqlen_list: Any, k_partitions: Any, equal_size: Any
) -> npt.NDArray[np.int64]: ...
def build_profile() -> str: ...
def _pack(
    lengths: npt.NDArray[np.int64], pack_max_length: int, algorithm: str
) -> list[list[int]]: ...
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
def _internal_error_check(detached: bool) -> None: ...
def _own_count(
    tokens: npt.NDArray[np.int64], costs: npt.NDArray[np.int64], cap: int, multiple: int
) -> int: ...

class _PlanRequest(TypedDict):
    n_ranks: int
    cap: int
    multiple: int
    minimum: int
    order: str
    as_ids: bool

def _plan_ranks(
    tokens: npt.NDArray[np.int64],
    costs: npt.NDArray[np.int64],
    starts: npt.NDArray[np.int64],
    sizes: npt.NDArray[np.int64],
    candidates: Sequence[npt.NDArray[np.int64]],
    request: _PlanRequest,
) -> tuple[
    int,
    int,
    int,
    int,
    list[list[list[int]]] | tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]],
]: ...
def _refine_candidate(
    weights: npt.NDArray[np.int64], ids: npt.NDArray[np.int64], k: int, equal_size: bool
) -> npt.NDArray[np.int64] | None: ...
def _order_micro_batches(
    costs: npt.NDArray[np.int64],
    firsts: npt.NDArray[np.int64],
    sizes: npt.NDArray[np.int64],
    order: str,
) -> list[int]: ...
