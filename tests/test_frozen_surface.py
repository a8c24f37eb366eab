"""The frozen surface (api-spec.md, "Frozen"): the upstream drop-ins, `seqbalance.reference`,
every function `install()` puts into verl or OpenRLHF, and the TransferQueue samplers'
constructors and methods keep their signatures exactly. Each is pinned here as written on the
day the pin was made (parameter name, kind, default's ``repr``); any change fails, on purpose:
the frozen surface is never renamed, re-typed or re-defaulted (annotations are not pinned)."""

from __future__ import annotations

import importlib
import inspect
import types
from typing import Any

import pytest

from seqbalance import samplers
from seqbalance.integrations import (
    _learn_openrlhf,
    _learn_patches,
    _openrlhf_step,
    _verl_step,
    openrlhf,
    verl,
)

#: "module:qualname" -> ((name, kind, repr(default) or None), ...), literally.
FROZEN = {
    "seqbalance:karmarkar_karp": (
        ("seqlen_list", "POSITIONAL_OR_KEYWORD", None),
        ("k_partitions", "POSITIONAL_OR_KEYWORD", None),
        ("equal_size", "POSITIONAL_OR_KEYWORD", None),
        ("cost", "KEYWORD_ONLY", "None"),
    ),
    "seqbalance:get_seqlen_balanced_partitions": (
        ("seqlen_list", "POSITIONAL_OR_KEYWORD", None),
        ("k_partitions", "POSITIONAL_OR_KEYWORD", None),
        ("equal_size", "POSITIONAL_OR_KEYWORD", None),
        ("refine", "KEYWORD_ONLY", "False"),
        ("cost", "KEYWORD_ONLY", "None"),
    ),
    "seqbalance:greedy_partition": (
        ("seqlen_list", "POSITIONAL_OR_KEYWORD", None),
        ("k_partitions", "POSITIONAL_OR_KEYWORD", None),
        ("equal_size", "POSITIONAL_OR_KEYWORD", None),
        ("cost", "KEYWORD_ONLY", "None"),
    ),
    "seqbalance:log_seqlen_unbalance": (
        ("seqlen_list", "POSITIONAL_OR_KEYWORD", None),
        ("partitions", "POSITIONAL_OR_KEYWORD", None),
        ("prefix", "POSITIONAL_OR_KEYWORD", None),
    ),
    "seqbalance.reference:karmarkar_karp": (
        ("seqlen_list", "POSITIONAL_OR_KEYWORD", None),
        ("k_partitions", "POSITIONAL_OR_KEYWORD", None),
        ("equal_size", "POSITIONAL_OR_KEYWORD", None),
    ),
    "seqbalance.reference:get_seqlen_balanced_partitions": (
        ("seqlen_list", "POSITIONAL_OR_KEYWORD", None),
        ("k_partitions", "POSITIONAL_OR_KEYWORD", None),
        ("equal_size", "POSITIONAL_OR_KEYWORD", None),
    ),
    "seqbalance.reference:greedy_partition": (
        ("seqlen_list", "POSITIONAL_OR_KEYWORD", None),
        ("k_partitions", "POSITIONAL_OR_KEYWORD", None),
        ("equal_size", "POSITIONAL_OR_KEYWORD", None),
    ),
    "seqbalance.integrations._learn_openrlhf:_actor_ppo_train": (
        ("self", "POSITIONAL_OR_KEYWORD", None),
        ("kl_ctl", "POSITIONAL_OR_KEYWORD", None),
    ),
    "seqbalance.integrations._learn_openrlhf:_actor_training_step": (
        ("self", "POSITIONAL_OR_KEYWORD", None),
        ("experience", "POSITIONAL_OR_KEYWORD", None),
        ("kl_ctl", "POSITIONAL_OR_KEYWORD", None),
        ("step", "POSITIONAL_OR_KEYWORD", None),
        ("loss_batch_info", "POSITIONAL_OR_KEYWORD", "None"),
    ),
    "seqbalance.integrations._learn_openrlhf:_strategy_optimizer_step": (
        ("self", "POSITIONAL_OR_KEYWORD", None),
        ("_optimizer", "POSITIONAL_OR_KEYWORD", None),
        ("model", "POSITIONAL_OR_KEYWORD", None),
        ("_scheduler", "POSITIONAL_OR_KEYWORD", None),
        ("name", "POSITIONAL_OR_KEYWORD", "'model'"),
        ("kwargs", "VAR_KEYWORD", None),
    ),
    "seqbalance.integrations._learn_patches:_fsdp_forward_backward_batch": (
        ("self", "POSITIONAL_OR_KEYWORD", None),
        ("data", "POSITIONAL_OR_KEYWORD", None),
        ("loss_function", "POSITIONAL_OR_KEYWORD", None),
        ("forward_only", "POSITIONAL_OR_KEYWORD", "False"),
    ),
    "seqbalance.integrations._learn_patches:_fsdp_gradient_sync_context": (
        ("self", "POSITIONAL_OR_KEYWORD", None),
        ("is_last_micro_batch", "KEYWORD_ONLY", None),
    ),
    "seqbalance.integrations._learn_patches:_fsdp_prepare_micro_batches": (
        ("data", "POSITIONAL_OR_KEYWORD", None),
        ("dp_group", "POSITIONAL_OR_KEYWORD", "None"),
        ("num_batches_divided_by", "POSITIONAL_OR_KEYWORD", "None"),
        ("same_micro_num_in_dp", "POSITIONAL_OR_KEYWORD", "True"),
        ("min_num_micro_batch", "POSITIONAL_OR_KEYWORD", "None"),
        ("use_dynamic_bsz_balance", "POSITIONAL_OR_KEYWORD", "True"),
    ),
    "seqbalance.integrations._learn_patches:_megatron_forward_backward_batch": (
        ("self", "POSITIONAL_OR_KEYWORD", None),
        ("data", "POSITIONAL_OR_KEYWORD", None),
        ("loss_function", "POSITIONAL_OR_KEYWORD", None),
        ("forward_only", "POSITIONAL_OR_KEYWORD", "False"),
    ),
    "seqbalance.integrations._openrlhf_step:balance_experiences": (
        ("experiences", "POSITIONAL_OR_KEYWORD", None),
        ("args", "POSITIONAL_OR_KEYWORD", None),
    ),
    "seqbalance.integrations._openrlhf_step:setup_dynamic_batch": (
        ("self", "POSITIONAL_OR_KEYWORD", None),
        ("strategy", "POSITIONAL_OR_KEYWORD", None),
    ),
    "seqbalance.integrations._verl_step:_balance_batch_v0": (
        ("self", "POSITIONAL_OR_KEYWORD", None),
        ("batch", "POSITIONAL_OR_KEYWORD", None),
        ("metrics", "POSITIONAL_OR_KEYWORD", None),
        ("logging_prefix", "POSITIONAL_OR_KEYWORD", "'global_seqlen'"),
        ("keep_minibatch", "POSITIONAL_OR_KEYWORD", "False"),
    ),
    "seqbalance.integrations._verl_step:_balance_batch_v1": (
        ("self", "POSITIONAL_OR_KEYWORD", None),
        ("batch", "POSITIONAL_OR_KEYWORD", None),
        ("metrics", "POSITIONAL_OR_KEYWORD", None),
        ("logging_prefix", "POSITIONAL_OR_KEYWORD", "'global_seqlen'"),
        ("keep_minibatch", "POSITIONAL_OR_KEYWORD", "False"),
    ),
    "seqbalance.integrations._verl_worker:rearrange_micro_batches": (
        ("batch", "POSITIONAL_OR_KEYWORD", None),
        ("max_token_len", "POSITIONAL_OR_KEYWORD", None),
        ("dp_group", "POSITIONAL_OR_KEYWORD", "None"),
        ("num_batches_divided_by", "POSITIONAL_OR_KEYWORD", "None"),
        ("same_micro_num_in_dp", "POSITIONAL_OR_KEYWORD", "True"),
        ("min_num_micro_batch", "POSITIONAL_OR_KEYWORD", "None"),
        ("use_dynamic_bsz_balance", "POSITIONAL_OR_KEYWORD", "True"),
        ("force_group_size", "POSITIONAL_OR_KEYWORD", "1"),
    ),
    "seqbalance.integrations.openrlhf:get_minimum_num_micro_batch_size": (
        ("total_lengths", "POSITIONAL_OR_KEYWORD", None),
        ("max_tokens_per_gpu", "POSITIONAL_OR_KEYWORD", None),
        ("ring_attn_size", "POSITIONAL_OR_KEYWORD", None),
        ("ds_tensor_parallel_size", "POSITIONAL_OR_KEYWORD", None),
    ),
    "seqbalance.integrations.openrlhf:get_seqlen_balanced_partitions": (
        ("seqlen_list", "POSITIONAL_OR_KEYWORD", None),
        ("k_partitions", "POSITIONAL_OR_KEYWORD", None),
        ("equal_size", "POSITIONAL_OR_KEYWORD", None),
    ),
    "seqbalance.integrations.openrlhf:greedy_partition": (
        ("seqlen_list", "POSITIONAL_OR_KEYWORD", None),
        ("k_partitions", "POSITIONAL_OR_KEYWORD", None),
        ("equal_size", "POSITIONAL_OR_KEYWORD", None),
    ),
    "seqbalance.integrations.openrlhf:karmarkar_karp": (
        ("seqlen_list", "POSITIONAL_OR_KEYWORD", None),
        ("k_partitions", "POSITIONAL_OR_KEYWORD", None),
        ("equal_size", "POSITIONAL_OR_KEYWORD", None),
    ),
    "seqbalance.integrations.verl:calculate_workload": (
        ("seqlen_list", "POSITIONAL_OR_KEYWORD", None),
    ),
    "seqbalance.integrations.verl:get_group_balanced_partitions": (
        ("seqlen_list", "POSITIONAL_OR_KEYWORD", None),
        ("uid_list", "POSITIONAL_OR_KEYWORD", None),
        ("k_partitions", "POSITIONAL_OR_KEYWORD", None),
    ),
    "seqbalance.integrations.verl:get_seqlen_balanced_partitions": (
        ("seqlen_list", "POSITIONAL_OR_KEYWORD", None),
        ("k_partitions", "POSITIONAL_OR_KEYWORD", None),
        ("equal_size", "POSITIONAL_OR_KEYWORD", None),
    ),
    "seqbalance.integrations.verl:greedy_partition": (
        ("seqlen_list", "POSITIONAL_OR_KEYWORD", None),
        ("k_partitions", "POSITIONAL_OR_KEYWORD", None),
        ("equal_size", "POSITIONAL_OR_KEYWORD", None),
    ),
    "seqbalance.integrations.verl:karmarkar_karp": (
        ("seqlen_list", "POSITIONAL_OR_KEYWORD", None),
        ("k_partitions", "POSITIONAL_OR_KEYWORD", None),
        ("equal_size", "POSITIONAL_OR_KEYWORD", None),
    ),
    "seqbalance.integrations.verl:rearrange_micro_batches": (
        ("args", "VAR_POSITIONAL", None),
        ("kwargs", "VAR_KEYWORD", None),
    ),
    "seqbalance.samplers:BaseSampler.__call__": (
        ("self", "POSITIONAL_OR_KEYWORD", None),
        ("args", "VAR_POSITIONAL", None),
        ("kwargs", "VAR_KEYWORD", None),
    ),
    "seqbalance.samplers:BaseSampler.__init__": (
        ("self", "POSITIONAL_OR_KEYWORD", None),
        ("max_cached_batches", "KEYWORD_ONLY", "64"),
    ),
    "seqbalance.samplers:BaseSampler.clear_cache": (
        ("self", "POSITIONAL_OR_KEYWORD", None),
        ("partition_id", "POSITIONAL_OR_KEYWORD", None),
    ),
    "seqbalance.samplers:BaseSampler.has_cached_result": (
        ("self", "POSITIONAL_OR_KEYWORD", None),
        ("partition_id", "POSITIONAL_OR_KEYWORD", None),
        ("task_name", "POSITIONAL_OR_KEYWORD", None),
        ("sampling_config", "POSITIONAL_OR_KEYWORD", "None"),
    ),
    "seqbalance.samplers:BaseSampler.load_checkpoint": (
        ("self", "POSITIONAL_OR_KEYWORD", None),
        ("state", "POSITIONAL_OR_KEYWORD", None),
    ),
    "seqbalance.samplers:BaseSampler.sample": (
        ("self", "POSITIONAL_OR_KEYWORD", None),
        ("ready_indexes", "POSITIONAL_OR_KEYWORD", None),
        ("batch_size", "POSITIONAL_OR_KEYWORD", None),
        ("args", "VAR_POSITIONAL", None),
        ("kwargs", "VAR_KEYWORD", None),
    ),
    "seqbalance.samplers:BaseSampler.save_checkpoint": (("self", "POSITIONAL_OR_KEYWORD", None),),
    "seqbalance.samplers:GRPOGroupNSampler.__call__": (
        ("self", "POSITIONAL_OR_KEYWORD", None),
        ("args", "VAR_POSITIONAL", None),
        ("kwargs", "VAR_KEYWORD", None),
    ),
    "seqbalance.samplers:GRPOGroupNSampler.__init__": (
        ("self", "POSITIONAL_OR_KEYWORD", None),
        ("n_samples_per_prompt", "POSITIONAL_OR_KEYWORD", "1"),
        ("max_cached_batches", "KEYWORD_ONLY", "64"),
    ),
    "seqbalance.samplers:GRPOGroupNSampler.clear_cache": (
        ("self", "POSITIONAL_OR_KEYWORD", None),
        ("partition_id", "POSITIONAL_OR_KEYWORD", None),
    ),
    "seqbalance.samplers:GRPOGroupNSampler.has_cached_result": (
        ("self", "POSITIONAL_OR_KEYWORD", None),
        ("partition_id", "POSITIONAL_OR_KEYWORD", None),
        ("task_name", "POSITIONAL_OR_KEYWORD", None),
        ("sampling_config", "POSITIONAL_OR_KEYWORD", "None"),
    ),
    "seqbalance.samplers:GRPOGroupNSampler.load_checkpoint": (
        ("self", "POSITIONAL_OR_KEYWORD", None),
        ("state", "POSITIONAL_OR_KEYWORD", None),
    ),
    "seqbalance.samplers:GRPOGroupNSampler.sample": (
        ("self", "POSITIONAL_OR_KEYWORD", None),
        ("ready_indexes", "POSITIONAL_OR_KEYWORD", None),
        ("batch_size", "POSITIONAL_OR_KEYWORD", None),
        ("task_name", "POSITIONAL_OR_KEYWORD", "''"),
        ("partition_id", "POSITIONAL_OR_KEYWORD", "''"),
        ("args", "VAR_POSITIONAL", None),
        ("kwargs", "VAR_KEYWORD", None),
    ),
    "seqbalance.samplers:GRPOGroupNSampler.save_checkpoint": (
        ("self", "POSITIONAL_OR_KEYWORD", None),
    ),
    "seqbalance.samplers:RankAwareSampler.__call__": (
        ("self", "POSITIONAL_OR_KEYWORD", None),
        ("args", "VAR_POSITIONAL", None),
        ("kwargs", "VAR_KEYWORD", None),
    ),
    "seqbalance.samplers:RankAwareSampler.__init__": (
        ("self", "POSITIONAL_OR_KEYWORD", None),
        ("max_cached_batches", "KEYWORD_ONLY", "64"),
    ),
    "seqbalance.samplers:RankAwareSampler.clear_cache": (
        ("self", "POSITIONAL_OR_KEYWORD", None),
        ("partition_id", "POSITIONAL_OR_KEYWORD", None),
    ),
    "seqbalance.samplers:RankAwareSampler.has_cached_result": (
        ("self", "POSITIONAL_OR_KEYWORD", None),
        ("partition_id", "POSITIONAL_OR_KEYWORD", None),
        ("task_name", "POSITIONAL_OR_KEYWORD", None),
        ("sampling_config", "POSITIONAL_OR_KEYWORD", "None"),
    ),
    "seqbalance.samplers:RankAwareSampler.load_checkpoint": (
        ("self", "POSITIONAL_OR_KEYWORD", None),
        ("state", "POSITIONAL_OR_KEYWORD", None),
    ),
    "seqbalance.samplers:RankAwareSampler.sample": (
        ("self", "POSITIONAL_OR_KEYWORD", None),
        ("ready_indexes", "POSITIONAL_OR_KEYWORD", None),
        ("batch_size", "POSITIONAL_OR_KEYWORD", None),
        ("dp_rank", "POSITIONAL_OR_KEYWORD", None),
        ("batch_index", "POSITIONAL_OR_KEYWORD", None),
        ("task_name", "POSITIONAL_OR_KEYWORD", None),
        ("partition_id", "POSITIONAL_OR_KEYWORD", None),
        ("args", "VAR_POSITIONAL", None),
        ("kwargs", "VAR_KEYWORD", None),
    ),
    "seqbalance.samplers:RankAwareSampler.save_checkpoint": (
        ("self", "POSITIONAL_OR_KEYWORD", None),
    ),
    "seqbalance.samplers:SeqlenBalancedSampler.__call__": (
        ("self", "POSITIONAL_OR_KEYWORD", None),
        ("args", "VAR_POSITIONAL", None),
        ("kwargs", "VAR_KEYWORD", None),
    ),
    "seqbalance.samplers:SeqlenBalancedSampler.__init__": (
        ("self", "POSITIONAL_OR_KEYWORD", None),
        ("n_samples_per_prompt", "POSITIONAL_OR_KEYWORD", "1"),
        ("dp_size", "POSITIONAL_OR_KEYWORD", "1"),
        ("max_cached_batches", "KEYWORD_ONLY", "64"),
        ("refine", "KEYWORD_ONLY", "False"),
        ("cost", "KEYWORD_ONLY", "'tokens'"),
        ("cost_field", "KEYWORD_ONLY", "None"),
        ("uneven_groups", "KEYWORD_ONLY", "'free'"),
    ),
    "seqbalance.samplers:SeqlenBalancedSampler.clear_cache": (
        ("self", "POSITIONAL_OR_KEYWORD", None),
        ("partition_id", "POSITIONAL_OR_KEYWORD", None),
    ),
    "seqbalance.samplers:SeqlenBalancedSampler.has_cached_result": (
        ("self", "POSITIONAL_OR_KEYWORD", None),
        ("partition_id", "POSITIONAL_OR_KEYWORD", None),
        ("task_name", "POSITIONAL_OR_KEYWORD", None),
        ("sampling_config", "POSITIONAL_OR_KEYWORD", "None"),
    ),
    "seqbalance.samplers:SeqlenBalancedSampler.load_checkpoint": (
        ("self", "POSITIONAL_OR_KEYWORD", None),
        ("state", "POSITIONAL_OR_KEYWORD", None),
    ),
    "seqbalance.samplers:SeqlenBalancedSampler.sample": (
        ("self", "POSITIONAL_OR_KEYWORD", None),
        ("ready_indexes", "POSITIONAL_OR_KEYWORD", None),
        ("batch_size", "POSITIONAL_OR_KEYWORD", None),
        ("task_name", "POSITIONAL_OR_KEYWORD", "''"),
        ("partition_id", "POSITIONAL_OR_KEYWORD", "''"),
        ("args", "VAR_POSITIONAL", None),
        ("kwargs", "VAR_KEYWORD", None),
    ),
    "seqbalance.samplers:SeqlenBalancedSampler.save_checkpoint": (
        ("self", "POSITIONAL_OR_KEYWORD", None),
    ),
    "seqbalance.samplers:SequentialSampler.__call__": (
        ("self", "POSITIONAL_OR_KEYWORD", None),
        ("args", "VAR_POSITIONAL", None),
        ("kwargs", "VAR_KEYWORD", None),
    ),
    "seqbalance.samplers:SequentialSampler.__init__": (("self", "POSITIONAL_OR_KEYWORD", None),),
    "seqbalance.samplers:SequentialSampler.clear_cache": (
        ("self", "POSITIONAL_OR_KEYWORD", None),
        ("partition_id", "POSITIONAL_OR_KEYWORD", None),
    ),
    "seqbalance.samplers:SequentialSampler.has_cached_result": (
        ("self", "POSITIONAL_OR_KEYWORD", None),
        ("partition_id", "POSITIONAL_OR_KEYWORD", None),
        ("task_name", "POSITIONAL_OR_KEYWORD", None),
        ("sampling_config", "POSITIONAL_OR_KEYWORD", "None"),
    ),
    "seqbalance.samplers:SequentialSampler.load_checkpoint": (
        ("self", "POSITIONAL_OR_KEYWORD", None),
        ("state", "POSITIONAL_OR_KEYWORD", None),
    ),
    "seqbalance.samplers:SequentialSampler.sample": (
        ("self", "POSITIONAL_OR_KEYWORD", None),
        ("ready_indexes", "POSITIONAL_OR_KEYWORD", None),
        ("batch_size", "POSITIONAL_OR_KEYWORD", None),
        ("args", "VAR_POSITIONAL", None),
        ("kwargs", "VAR_KEYWORD", None),
    ),
    "seqbalance.samplers:SequentialSampler.save_checkpoint": (
        ("self", "POSITIONAL_OR_KEYWORD", None),
    ),
}


def _resolve(key: str) -> Any:
    module, _, qualname = key.partition(":")
    found: Any = importlib.import_module(module)
    for part in qualname.split("."):
        found = getattr(found, part)
    return found


def _declared(function: Any) -> Any:
    """``function`` as written: a pass-through that copies the signature of what it wraps at
    install (``__signature__``, as the verl pin does) is pinned by its own declaration, so the
    pin does not depend on whether an earlier test installed it."""
    if isinstance(function, types.FunctionType) and "__signature__" in vars(function):
        copy = types.FunctionType(
            function.__code__, function.__globals__, function.__name__, function.__defaults__,
            function.__closure__,
        )  # fmt: skip
        copy.__kwdefaults__ = function.__kwdefaults__
        return copy
    return function


def _shape(function: Any) -> tuple[tuple[str, str, str | None], ...]:
    function = _declared(function)
    return tuple(
        (
            parameter.name,
            parameter.kind.name,
            None if parameter.default is inspect.Parameter.empty else repr(parameter.default),
        )
        for parameter in inspect.signature(function).parameters.values()
    )


@pytest.mark.parametrize("key", sorted(FROZEN))
def test_a_frozen_signature_is_what_it_was(key):
    assert _shape(_resolve(key)) == FROZEN[key]


def _key(function: Any) -> str:
    return f"{function.__module__}:{function.__qualname__}"


def test_every_function_install_puts_into_verl_or_openrlhf_is_pinned():
    # The partitioners' wrappers, the cost's and counts' replacements (ModulePatch), the
    # planned step's and the cost learner's patches: a new one must be pinned here too.
    patched = [
        replacement
        for patch in (verl._PATCH, verl._WORKLOAD, verl._PIN, openrlhf._PATCH, openrlhf._COUNT)
        for replacement in patch.replacements.values()
    ]
    patched += [
        _verl_step.rearrange_micro_batches,
        *_verl_step._DRIVER_WRAPPERS.values(),
        _learn_patches._fsdp_forward_backward_batch,
        _learn_patches._fsdp_gradient_sync_context,
        _learn_patches._fsdp_prepare_micro_batches,
        _learn_patches._megatron_forward_backward_batch,
        _learn_openrlhf._actor_training_step,
        _learn_openrlhf._actor_ppo_train,
        _learn_openrlhf._strategy_optimizer_step,
        _openrlhf_step.balance_experiences,
        _openrlhf_step.setup_dynamic_batch,
    ]
    pinned = {key for key in FROZEN if key.startswith("seqbalance.integrations.")}
    assert {_key(function) for function in patched} == pinned
    for function in patched:
        assert _resolve(_key(function)) is function


def test_every_sampler_constructor_and_public_method_is_pinned():
    pinned = {key for key in FROZEN if key.startswith("seqbalance.samplers:")}
    found = set()
    for name in samplers.__all__:
        cls = getattr(samplers, name)
        if not isinstance(cls, type):
            continue
        for attribute in dir(cls):
            if attribute.startswith("_") and attribute not in ("__init__", "__call__"):
                continue
            value = inspect.getattr_static(cls, attribute)
            if isinstance(value, property) or not callable(value):
                continue
            found.add(f"seqbalance.samplers:{name}.{attribute}")
    assert found == pinned


def test_the_pin_can_fail():
    # The comparison sees a renamed parameter, a changed kind and a changed default.
    def today(seqlen_list, k_partitions, equal_size, *, cost=None):
        return None

    def renamed(lengths, k_partitions, equal_size, *, cost=None):
        return None

    def kind(seqlen_list, k_partitions, equal_size, cost=None):
        return None

    def default(seqlen_list, k_partitions, equal_size, *, cost="tokens"):
        return None

    pinned = FROZEN["seqbalance:karmarkar_karp"]
    assert _shape(today) == pinned
    assert all(_shape(other) != pinned for other in (renamed, kind, default))
