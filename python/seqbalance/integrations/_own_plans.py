"""The trainers' own micro-batching, reproduced: the plans `seqbalance.integrations._step`
keeps where seqbalance's is not below them."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from .. import partition as _partition
from ._step import Plan, UnmetConstraint, _groups_of

__all__ = ["verl_micro_batches"]


def verl_micro_batches(
    rank_lengths: Sequence[np.ndarray],
    max_token_len: int,
    *,
    weights: Callable[[np.ndarray], np.ndarray],
    min_num_micro_batch: int | None = None,
    num_batches_divided_by: int | None = None,
    force_group_size: int = 1,
    use_dynamic_bsz_balance: bool = True,
) -> Plan:
    """verl 0.9.1's ``rearrange_micro_batches`` on every rank, the count agreed across them.

    The count: the largest over ranks of ``min(groups, ceil(tokens / cap))``, at least
    ``min_num_micro_batch``, rounded up to ``num_batches_divided_by``, raised by that step
    until every rank's largest-differencing split of its workloads keeps the cap; each rank's
    micro-batches then sorted by workload (heaviest first) and, with
    ``use_dynamic_bsz_balance``, laid out small at both ends. Raises `UnmetConstraint` where
    verl raises (a group over the cap; more micro-batches than a rank has groups).
    """
    groups = [_groups_of(len(lengths), force_group_size) for lengths in rank_lengths]
    count = max(
        min(g, -(-int(lengths.sum()) // max_token_len))
        for g, lengths in zip(groups, rank_lengths, strict=True)
    )
    if min_num_micro_batch is not None:
        count = max(min_num_micro_batch, count)
    step = num_batches_divided_by or 1
    if num_batches_divided_by is not None:
        count = -(-count // step) * step
    group_tokens = [
        lengths.reshape(-1, force_group_size).sum(axis=1) if len(lengths) else lengths
        for lengths in rank_lengths
    ]
    group_weights = [
        weights(lengths).reshape(-1, force_group_size).sum(axis=1) if len(lengths) else lengths
        for lengths in rank_lengths
    ]
    largest = max((int(t.max()) for t in group_tokens if t.size), default=0)
    if largest > max_token_len:
        raise UnmetConstraint(
            f"a group of {largest} tokens is over max_token_len = {max_token_len} on some rank"
        )
    fewest = min(groups)
    while True:
        if count > fewest:
            raise UnmetConstraint(
                f"{count} non-empty micro-batches under max_token_len = {max_token_len}, but a "
                f"rank has only {fewest} groups"
            )
        parts = [
            _partition.get_seqlen_balanced_partitions(w.tolist(), count, False)
            for w in group_weights
        ]
        if all(
            int(tokens[part].sum()) <= max_token_len
            for tokens, rank in zip(group_tokens, parts, strict=True)
            for part in rank
        ):
            break
        count += step
    plan: Plan = []
    for w, rank in zip(group_weights, parts, strict=True):
        # Back to sample indexes, sorted heaviest first (ties: the first index, higher first).
        samples = [
            [g * force_group_size + i for g in part for i in range(force_group_size)]
            for part in rank
        ]
        if use_dynamic_bsz_balance:
            samples.sort(
                key=lambda s: (
                    sum(int(w[i // force_group_size]) for i in s[::force_group_size]),
                    s[0] if s else 0,
                ),
                reverse=True,
            )
            samples = samples[::2][::-1] + samples[1::2]
        plan.append(samples)
    return plan
