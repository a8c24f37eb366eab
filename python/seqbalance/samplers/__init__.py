"""Samplers that choose which ready samples each data-parallel rank consumes next.

They follow TransferQueue's sampler interface (``sampler(ready_indexes, batch_size, **config)``
returning ``(sampled, consumed)``); `seqbalance.integrations.transfer_queue` provides
variants that TransferQueue's controller accepts.
"""

from __future__ import annotations

from .base import DEFAULT_MAX_CACHED_BATCHES, BaseSampler, SequentialSampler
from .grpo import GRPOGroupNSampler, RankAwareSampler
from .seqlen_balanced import SeqlenBalancedSampler

__all__ = [
    "DEFAULT_MAX_CACHED_BATCHES",
    "BaseSampler",
    "GRPOGroupNSampler",
    "RankAwareSampler",
    "SeqlenBalancedSampler",
    "SequentialSampler",
]
