"""Reading a model's shape for `ModelCost`: config fields, their checks,
the layer types, and the FLOPs coefficients the layers add up to (no transformers import)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from .._inputs import MAX_VALUE, _describe

FULL, SLIDING, LINEAR = "full_attention", "sliding_attention", "linear_attention"
LAYER_TYPES = (FULL, SLIDING, LINEAR)

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
_LINEAR_FIELDS = (
    "linear_num_key_heads",
    "linear_key_head_dim",
    "linear_num_value_heads",
    "linear_value_head_dim",
)
_MLA_FIELDS = ("qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
# Fields that change layer shapes in ways the formula does not model (see _check_unmodelled).
_UNMODELLED = (
    "full_attention_interval",
    "max_window_layers",
    "sliding_window_pattern",
    "moe_layer_freq",
    "interleave_moe_layer_step",
    "attention_chunk_size",
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
    *_MLA_FIELDS,
    *_LINEAR_FIELDS,
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


def _missing(name: str, needed_by: str) -> ValueError:
    return ValueError(
        f"ModelCost cannot read the model: {name} is missing ({needed_by}); pass {name}=..."
    )


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


def _layer_types(value: Any, n_layers: int) -> tuple[str, ...]:
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Sequence):
        raise TypeError(f"layer_types must be a list of strings, got {_describe(value)}")
    if len(value) != n_layers:
        raise ValueError(
            f"layer_types must have num_hidden_layers ({n_layers}) entries, got {len(value)}"
        )
    for i, kind in enumerate(value):
        if not isinstance(kind, str) or kind not in LAYER_TYPES:
            raise ValueError(
                f"layer_types[{i}] is {kind!r}, a layer type ModelCost does not know "
                f"(it knows {', '.join(map(repr, LAYER_TYPES))})"
            )
    return tuple(str(kind) for kind in value)


class LayerShape(NamedTuple):
    """A model's forward FLOPs per token and per attention pair, summed over its layers."""

    layer_types: tuple[str, ...]
    moe_layers: tuple[int, ...]
    #: per token, independent of the length: the head, every projection, every MLP
    linear: int
    #: per token: the linear-attention cores
    recurrent: int
    #: per causal pair of the full-attention layers
    full: int
    #: (window, per pair) of the sliding-window layers
    windows: tuple[tuple[int, int], ...]


def layer_shape(
    ints: dict[str, int],
    fields: dict[str, Any],
    only: tuple[int, ...],
    gated_mlp: bool,
    include_head: bool,
    causal: bool,
) -> LayerShape:
    """The `LayerShape` of checked config fields (``ints``: the integer ones; ``only``:
    ``mlp_only_layers``), or the ``ValueError`` naming a field the layers need.
    """
    for name in ("hidden_size", "num_hidden_layers"):
        if name not in ints:
            raise _missing(name, "every model has it")
    h, n_layers = ints["hidden_size"], ints["num_hidden_layers"]
    if "layer_types" in fields:
        kinds = _layer_types(fields["layer_types"], n_layers)
        fields["layer_types"] = list(kinds)
    elif "sliding_window" in ints and fields.get("use_sliding_window") is not False:
        kinds = (SLIDING,) * n_layers
    else:
        kinds = (FULL,) * n_layers
    n_sliding, n_linear = kinds.count(SLIDING), kinds.count(LINEAR)
    n_softmax = n_layers - n_linear
    if n_sliding and "sliding_window" not in ints:
        raise _missing("sliding_window", f"{n_sliding} layers use a sliding window")
    if n_sliding and not causal:
        raise ValueError(
            f"causal=False with {n_sliding} sliding-window layers: ModelCost models sliding "
            "windows under a causal mask only; pass causal=True"
        )

    # Softmax attention (full or sliding): projections per token, coefficient of pairs(L).
    attention_proj = attention_core = 0
    if n_softmax:
        if "num_attention_heads" not in ints:
            raise _missing("num_attention_heads", f"{n_softmax} attention layers")
        n_q = ints["num_attention_heads"]
        if "kv_lora_rank" in ints:
            for name in _MLA_FIELDS:
                if name not in ints:
                    raise _missing(name, "multi-latent attention, kv_lora_rank is set")
            r_q, r_kv = ints.get("q_lora_rank", 0), ints["kv_lora_rank"]
            d_n, d_r, d_v = (ints[name] for name in _MLA_FIELDS)
            query = h * r_q + r_q * n_q * (d_n + d_r) if r_q else h * n_q * (d_n + d_r)
            attention_proj = (
                2 * query + 2 * h * (r_kv + d_r) + 2 * r_kv * n_q * (d_n + d_v) + 2 * n_q * d_v * h
            )
            attention_core = 2 * n_q * (d_n + d_r) + 2 * n_q * d_v
        else:
            n_kv = ints.get("num_key_value_heads", n_q)
            d = ints["head_dim"] if "head_dim" in ints else h // n_q
            if d == 0:
                raise ValueError(
                    f"head_dim = hidden_size // num_attention_heads = {h} // {n_q} is 0; "
                    "pass head_dim=..."
                )
            attention_proj = 2 * h * d * (2 * n_q + 2 * n_kv)
            attention_core = 4 * n_q * d
    recurrent_proj = recurrent_core = 0
    if n_linear:
        for name in _LINEAR_FIELDS:
            if name not in ints:
                raise _missing(name, f"{n_linear} linear-attention layers")
        n_k, d_k, n_v, d_v = (ints[name] for name in _LINEAR_FIELDS)
        recurrent_proj = 2 * h * (2 * n_k * d_k + 2 * n_v * d_v)
        recurrent_core = 4 * n_v * d_k * d_v

    moe_layers, mlp_total = _mlps(ints, only, h, n_layers, gated_mlp)
    head = 0
    if include_head:
        if "vocab_size" not in ints:
            raise _missing("vocab_size", "the output head; include_head=False leaves it out")
        head = 2 * h * ints["vocab_size"]

    window = ints.get("sliding_window", 0)
    return LayerShape(
        layer_types=kinds,
        moe_layers=moe_layers,
        linear=head + n_softmax * attention_proj + n_linear * recurrent_proj + mlp_total,
        recurrent=n_linear * recurrent_core,
        full=(n_softmax - n_sliding) * attention_core,
        windows=((window, n_sliding * attention_core),) if n_sliding else (),
    )


def _mlps(
    ints: dict[str, int], only: tuple[int, ...], h: int, n_layers: int, gated_mlp: bool
) -> tuple[tuple[int, ...], int]:
    """(the MoE layers, forward MLP FLOPs per token over all layers)."""
    gate = 6 if gated_mlp else 4
    counts = {name: ints[name] for name in _EXPERT_COUNTS if name in ints}
    if len(set(counts.values())) > 1:
        raise ValueError(
            "the expert count is ambiguous: "
            + ", ".join(f"{name}={value}" for name, value in counts.items())
            + "; pass the right one and the others =None"
        )
    experts = next(iter(counts.values()), 0)
    moe_layers: tuple[int, ...] = ()
    moe = 0
    if experts:
        first_dense = ints.get("first_k_dense_replace", 0)
        step = ints.get("decoder_sparse_step", 1)
        moe_layers = tuple(
            i for i in range(n_layers) if i >= first_dense and i not in only and (i + 1) % step == 0
        )
    if moe_layers:
        if "num_experts_per_tok" not in ints:
            raise _missing("num_experts_per_tok", f"{len(moe_layers)} MoE layers")
        top_k = ints["num_experts_per_tok"]
        if top_k > experts:
            raise ValueError(f"num_experts_per_tok ({top_k}) is more than the {experts} experts")
        expert_size = ints.get("moe_intermediate_size", ints.get("intermediate_size"))
        if expert_size is None:
            raise _missing("moe_intermediate_size", "the size of each expert")
        if "shared_expert_intermediate_size" in ints:
            shared = ints["shared_expert_intermediate_size"]
        elif ints.get("n_shared_experts", 0):
            if "moe_intermediate_size" not in ints:
                raise _missing("moe_intermediate_size", "the size of each shared expert")
            shared = ints["n_shared_experts"] * ints["moe_intermediate_size"]
        else:
            shared = 0
        moe = 2 * h * experts + top_k * gate * h * expert_size + gate * h * shared
    n_dense = n_layers - len(moe_layers)
    dense = 0
    if n_dense:
        if "intermediate_size" not in ints:
            raise _missing("intermediate_size", f"{n_dense} dense MLP layers")
        dense = gate * h * ints["intermediate_size"]
    return moe_layers, len(moe_layers) * moe + n_dense * dense


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
