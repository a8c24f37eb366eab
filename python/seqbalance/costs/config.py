"""Reading a model's shape for `ModelCost`: config fields, their checks,
the layer types, and the FLOPs coefficients the layers add up to (no transformers import)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .._inputs import MAX_VALUE, _describe
from .layers import (
    FULL,
    LAYER_TYPES,
    LINEAR_FIELDS,
    MAX_LAYERS,
    MLA_FIELDS,
    MLP_KINDS,
    SLIDING,
    LayerShape,
    layer_shape,
    missing,
)

_MAMBA_FIELDS = (
    "mamba_n_heads",
    "mamba_n_groups",
    "mamba_d_state",
    "mamba_d_conv",
    "mamba_expand",
    "mamba_d_ssm",
    "mamba_dt_rank",
)
# Config fields read as ints: those that must be >= 1 when given, and those that may be 0.
_POSITIVE = (
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "intermediate_size",
    "vocab_size",
    "sliding_window",
    "num_experts_per_tok",
    "moe_intermediate_size",
    "shared_expert_intermediate_size",
    "decoder_sparse_step",
    "kv_lora_rank",
    "v_head_dim",
    "linear_num_key_heads",
    "linear_key_head_dim",
    "linear_num_value_heads",
    "linear_value_head_dim",
    "global_head_dim",
    "num_global_key_value_heads",
    "conv_L_cache",
    *_MAMBA_FIELDS,
    "linear_conv_kernel_dim",
    "hidden_size_per_layer_input",
)
_NON_NEGATIVE = (
    "num_experts",
    "n_routed_experts",
    "num_local_experts",
    "n_shared_experts",
    "first_k_dense_replace",
    "q_lora_rank",
    "qk_nope_head_dim",
    "qk_rope_head_dim",
)
_EXPERT_COUNTS = ("num_experts", "n_routed_experts", "num_local_experts")
# Fields that change layer shapes in ways the formula does not model (see _check_unmodelled).
_UNMODELLED = (
    "full_attention_interval",
    "max_window_layers",
    "sliding_window_pattern",
    "moe_layer_freq",
    "interleave_moe_layer_step",
    "attention_chunk_size",
    "index_topk",
)
#: Every config field `ModelCost.from_config` reads, in the order ``repr`` shows them.
CONFIG_FIELDS = (
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "intermediate_size",
    "vocab_size",
    "sliding_window",
    "use_sliding_window",
    "layer_types",
    *_EXPERT_COUNTS,
    "num_experts_per_tok",
    "moe_intermediate_size",
    "n_shared_experts",
    "shared_expert_intermediate_size",
    "first_k_dense_replace",
    "mlp_only_layers",
    "decoder_sparse_step",
    "q_lora_rank",
    "kv_lora_rank",
    *MLA_FIELDS,
    *LINEAR_FIELDS,
    "global_head_dim",
    "num_global_key_value_heads",
    "conv_L_cache",
    *_MAMBA_FIELDS,
    "linear_conv_kernel_dim",
    "hidden_size_per_layer_input",
    "attn_output_gate",
    "is_moe",
    "mlp_layer_types",
    *_UNMODELLED,
)
_FLAGS = {"gated_mlp": True, "include_head": True, "recompute": False, "causal": True}


def _int_field(name: str, value: Any, minimum: int) -> int:
    """``value`` as an int in ``[minimum, 2**63 - 1]``, or the error naming ``name``."""
    if not _is_int(value):
        raise TypeError(f"{name} must be an int, got {_describe(value)}")
    number = int(value)
    if number < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {number}")
    if number > MAX_VALUE:
        raise ValueError(f"{name} must be <= 2**63 - 1, got {number}")
    return number


def _is_int(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def _check_unmodelled(fields: dict[str, Any]) -> None:
    """A field that changes layer shapes in a way the formula does not model is an error."""
    every_layer = "pass layer_types= with one entry per layer"
    moe_rule = "say which layers are MoE with first_k_dense_replace=, mlp_only_layers= or decoder_sparse_step="

    def refuse(name: str, what: str, remedy: str) -> ValueError:
        return ValueError(f"ModelCost cannot model {name}={fields[name]!r} ({what}): {remedy}")

    has_layer_types = fields.get("layer_types") is not None
    if fields.get("full_attention_interval") is not None and not has_layer_types:
        raise refuse("full_attention_interval", "which layers use full attention", every_layer)
    if fields.get("sliding_window_pattern") is not None and not has_layer_types:
        raise refuse("sliding_window_pattern", "which layers use a sliding window", every_layer)
    if fields.get("max_window_layers") is not None and fields.get("use_sliding_window") is True:
        raise refuse(
            "max_window_layers",
            "which layers use a sliding window",
            f"{every_layer} and max_window_layers=None",
        )
    freq = fields.get("moe_layer_freq")
    if freq is not None and not (_is_int(freq) and int(freq) == 1):
        raise refuse(
            "moe_layer_freq", "which layers are MoE", f"{moe_rule} and moe_layer_freq=None"
        )
    if fields.get("interleave_moe_layer_step") is not None:
        raise refuse(
            "interleave_moe_layer_step",
            "which layers are MoE",
            f"{moe_rule} and interleave_moe_layer_step=None",
        )
    if fields.get("index_topk") is not None:
        raise refuse(
            "index_topk",
            "sparse attention over the top-k keys",
            "pass index_topk=None to count it as full causal attention (an overestimate)",
        )
    if fields.get("attention_chunk_size") is not None:
        raise refuse(
            "attention_chunk_size",
            "chunked attention",
            "pass attention_chunk_size=None to count it as full attention (an overestimate)",
        )


def _index_list(name: str, value: Any) -> tuple[int, ...]:
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, (Sequence, np.ndarray)):
        raise TypeError(f"{name} must be a list of layer indexes, got {_describe(value)}")
    return tuple(_int_field(f"{name}[{i}]", item, 0) for i, item in enumerate(value))


def _kind_list(name: str, value: Any, n_layers: int, known: tuple[str, ...]) -> tuple[str, ...]:
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Sequence):
        raise TypeError(f"{name} must be a list of strings, got {_describe(value)}")
    if len(value) != n_layers:
        raise ValueError(
            f"{name} must have num_hidden_layers ({n_layers}) entries, got {len(value)}"
        )
    for i, kind in enumerate(value):
        if not isinstance(kind, str) or kind not in known:
            raise ValueError(
                f"{name}[{i}] is {kind!r}, a layer type ModelCost does not know "
                f"(it knows {', '.join(map(repr, known))})"
            )
    return tuple(str(kind) for kind in value)


def _layer_types(value: Any, n_layers: int) -> tuple[str, ...]:
    return _kind_list("layer_types", value, n_layers, LAYER_TYPES)


def read_layers(
    ints: dict[str, int], fields: dict[str, Any], only: tuple[int, ...], flags: dict[str, bool]
) -> LayerShape:
    """The layer kinds and MLP kinds of checked config fields, then their `LayerShape`."""
    for name in ("hidden_size", "num_hidden_layers"):
        if name not in ints:
            raise missing(name, "every model has it")
    n_layers = ints["num_hidden_layers"]
    if n_layers > MAX_LAYERS:
        raise ValueError(f"num_hidden_layers must be <= {MAX_LAYERS:,}, got {n_layers}")
    if "layer_types" in fields:
        kinds = _layer_types(fields["layer_types"], n_layers)
        fields["layer_types"] = list(kinds)
    elif "sliding_window" in ints and fields.get("use_sliding_window") is not False:
        kinds = (SLIDING,) * n_layers
    else:
        kinds = (FULL,) * n_layers
    mlp_kinds = None
    if "mlp_layer_types" in fields:
        mlp_kinds = _kind_list("mlp_layer_types", fields["mlp_layer_types"], n_layers, MLP_KINDS)
        fields["mlp_layer_types"] = list(mlp_kinds)
    return layer_shape(ints, fields, kinds, mlp_kinds, only, flags)


def _config_items(config: Any, name: str) -> dict[str, Any]:
    """The fields of a config: a mapping as it is, an object through ``to_dict()`` or its
    attributes (a field missing there is looked up as an attribute, which follows a Hugging
    Face config's ``attribute_map``)."""
    if isinstance(config, Mapping):
        return dict(config)
    if isinstance(config, (str, bytes, Sequence)) or config is None:
        raise TypeError(
            f"{name} must be a config object or a mapping of its fields, got {_describe(config)}"
        )
    to_dict = getattr(config, "to_dict", None)
    if callable(to_dict):
        items = to_dict()
        if not isinstance(items, Mapping):
            raise TypeError(f"{name}.to_dict() must return a mapping, got {_describe(items)}")
        items = dict(items)
    else:
        try:
            items = dict(vars(config))
        except TypeError:
            raise TypeError(
                f"{name} must be a config object or a mapping of its fields, "
                f"got {_describe(config)}"
            ) from None
    for field in (*CONFIG_FIELDS, "text_config"):
        if items.get(field) is None:
            value = getattr(config, field, None)
            if value is not None and not callable(value):
                items[field] = value
    return items
