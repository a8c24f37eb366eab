"""seqbalance samplers that TransferQueue's controller accepts.

TransferQueue's controller only takes instances (or subclasses) of its own
``transfer_queue.sampler.BaseSampler``. The classes here are the seqbalance samplers with that
class added as a second base: same constructor, same behaviour (thread safety, reservations,
bounded cache, input checks), and ``isinstance(sampler, transfer_queue.sampler.BaseSampler)``
holds. Importing this module imports ``transfer_queue`` (and with it torch and Ray); without the
``transferqueue`` package it raises ``ImportError`` saying so.

Example (needs a running Ray, see the README for the whole loop):

    import transfer_queue as tq
    from omegaconf import OmegaConf
    from seqbalance.integrations.transfer_queue import SeqlenBalancedSampler

    sampler = SeqlenBalancedSampler(n_samples_per_prompt=4, dp_size=8)
    tq.init(OmegaConf.create({"controller": {"sampler": sampler, "polling_mode": True}},
                             flags={"allow_objects": True}))

Tested with transferqueue 0.1.11, whose controller imports ``transfer_queue.sampler.BaseSampler``.
"""

from __future__ import annotations

try:
    from transfer_queue.sampler import BaseSampler as TransferQueueBaseSampler
except ImportError as exc:  # the message must tell users which package to install
    raise ImportError(
        "seqbalance.integrations.transfer_queue needs TransferQueue: the 'transfer_queue' module "
        "could not be imported. Install it with `pip install transferqueue` (it pulls in torch and "
        "Ray), or use the plain samplers from `seqbalance` in your own loop."
    ) from exc

from .. import samplers as _samplers

__all__ = [
    "GRPOGroupNSampler",
    "RankAwareSampler",
    "SeqlenBalancedSampler",
    "SequentialSampler",
    "TransferQueueBaseSampler",
]

# The seqbalance class comes first in each MRO, so every method (including has_cached_result,
# clear_cache and the checkpoint pair) is seqbalance's; TransferQueue's base only adds identity.


class SequentialSampler(_samplers.SequentialSampler, TransferQueueBaseSampler):
    """`seqbalance.SequentialSampler`, accepted by TransferQueue's controller."""


class GRPOGroupNSampler(_samplers.GRPOGroupNSampler, TransferQueueBaseSampler):
    """`seqbalance.GRPOGroupNSampler`, accepted by TransferQueue's controller."""


class RankAwareSampler(_samplers.RankAwareSampler, TransferQueueBaseSampler):
    """`seqbalance.RankAwareSampler`, accepted by TransferQueue's controller."""


class SeqlenBalancedSampler(_samplers.SeqlenBalancedSampler, TransferQueueBaseSampler):
    """`seqbalance.SeqlenBalancedSampler`, accepted by TransferQueue's controller."""
