"""Private native module; the documented API is in :mod:`seqbalance.partition`."""

from collections.abc import Sequence
from typing import Any, final

import numpy as np
import numpy.typing as npt

__version__: str

__all__ = [
    "__version__",
    "_StreamCore",
    "_dlpack_bfloat16",
    "_input_reads",
    "_internal_error_check",
    "_own_count",
    "_pack",
    "_plan_ranks",
    "_refine",
    "_refine_ids",
    "_set_partition_error",
    "build_profile",
    "get_seqlen_balanced_partitions",
    "greedy_partition",
    "karmarkar_karp",
    "partition_ids",
]

# The partitioners return None when an argument is not certainly valid: seqbalance.partition then
# checks the arguments with seqbalance._inputs and calls again with checked=True.
def karmarkar_karp(
    seqlen_list: Any, k_partitions: Any, equal_size: Any, *, checked: bool = False
) -> list[list[int]] | None: ...
def get_seqlen_balanced_partitions(
    seqlen_list: Any,
    k_partitions: Any,
    equal_size: Any,
    refine: Any = None,
    *,
    checked: bool = False,
) -> list[list[int]] | None: ...
def greedy_partition(
    seqlen_list: Any, k_partitions: Any, equal_size: Any, *, checked: bool = False
) -> list[list[int]] | None: ...
def partition_ids(
    seqlen_list: Any,
    k_partitions: Any,
    equal_size: Any,
    refine: Any = None,
    *,
    checked: bool = False,
) -> npt.NDArray[np.int64] | None: ...
def _set_partition_error(cls: type[ValueError]) -> None: ...
def build_profile() -> str: ...
def _input_reads() -> int: ...
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
def _plan_ranks(
    tokens: npt.NDArray[np.int64],
    costs: npt.NDArray[np.int64],
    starts: npt.NDArray[np.int64],
    sizes: npt.NDArray[np.int64],
    candidates: Sequence[npt.NDArray[np.int64]],
    n_ranks: int,
    cap: int,
    multiple: int,
    minimum: int,
    bubble: bool,
) -> tuple[int, int, int, int, list[list[list[int]]]]: ...

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
