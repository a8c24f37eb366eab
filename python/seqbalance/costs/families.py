"""Family-specific config fields, read for `ModelCost.from_config` by ``model_type``.

Transformers' families name the same quantities differently (shared experts, dense layers,
SSM widths) or add layer kinds of their own. `normalize` maps a config's fields onto the
fields `ModelCost` takes, or raises the ``ValueError`` naming the field it cannot model. No
transformers import.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from .._inputs import _describe
from .config import _index_list, _int_field, _is_int
from .layers import MAX_LAYERS

#: Families whose MLP is two matrices (up, activation, down), not gated.
TWO_MATRIX = frozenset(
    {
        "apertus", "arcee", "biogpt", "fuyu", "gpt_neox", "jais2", "nanochat", "nemotron",
        "persimmon", "phi", "starcoder2",
    }
)  # fmt: skip

_ENCODER = "an encoder family run as a causal LM (bidirectional; its LM head adds a transform)"
_CROSS = "the decoder of an encoder-decoder model (cross-attention to the encoder)"
#: Families transformers ships that ModelCost refuses by ``model_type``, with the reason.
REFUSED: dict[str, str] = {
    **dict.fromkeys(
        (
            "bert",
            "bert-generation",
            "big_bird",
            "camembert",
            "data2vec-text",
            "electra",
            "ernie",
            "megatron-bert",
            "rembert",
            "roberta",
            "roberta-prelayernorm",
            "roc_bert",
            "roformer",
            "xlm",
            "xlm-roberta",
            "xlm-roberta-xl",
            "xmod",
            "xlnet",
            "reformer",
        ),
        _ENCODER,
    ),
    **dict.fromkeys(
        (
            "bart",
            "bigbird_pegasus",
            "blenderbot",
            "blenderbot-small",
            "marian",
            "mbart",
            "mvp",
            "pegasus",
            "plbart",
            "prophetnet",
            "trocr",
            "whisper",
            "musicgen",
            "musicgen_melody",
            "moshi",
        ),
        _CROSS,
    ),
    **dict.fromkeys(
        (
            "bloom",
            "codegen",
            "ctrl",
            "dbrx",
            "falcon",
            "gpt2",
            "gpt_bigcode",
            "gpt_neo",
            "gptj",
            "mpt",
            "openai-gpt",
            "opt",
            "xglm",
        ),
        "its MLP size or expert layout under names of its own (n_inner, ffn_dim, ffn_config"
        ", ...) and attention flags such as multi_query",
    ),
    "git": "a vision-text model whose text layers are BERT-style",
    "blt": "byte latent transformer: local and global models of different widths",
    "cpmant": "segment and position-bias layers of its own",
    "gpt_neox_japanese": "an MLP size given as intermediate_multiple_size",
    "gemma3n": "per-layer MLP sizes, AltUp and Laurel projections",
    "gemma3n_text": "per-layer MLP sizes, AltUp and Laurel projections",
    "hrm_text": "layers run several cycles per token (H_cycles, L_cycles)",
    "recurrent_gemma": "RG-LRU recurrent blocks",
    "rwkv": "RWKV time-mixing blocks",
    "xlstm": "xLSTM blocks",
    "zamba": "a shared attention block reused across layers",
    "zamba2": "shared attention blocks reused across layers, with LoRA adapters",
    "granitemoehybrid": "Mamba layers with MoE and shared MLPs of its own",
    "minimax": "lightning attention layers",
    "longcat_flash": "zero-computation experts and two attention blocks per layer",
    "deepseek_v4": "compressed attention layers",
    "aria_text": "MoE experts whose size is not a config field",
    "phi4_multimodal": "vision and speech LoRA adapters on its projections",
}

# Canonical name <- family names of the same quantity (read when the canonical one is absent).
_RENAMES = {
    "n_shared_experts": ("num_shared_experts", "moe_num_shared_experts"),
    "num_experts": ("moe_num_experts",),
    "num_experts_per_tok": ("moe_topk", "moe_k"),
    "first_k_dense_replace": ("num_dense_layers",),
}


def _layer_count(items: dict[str, Any]) -> int | None:
    """``num_hidden_layers`` when it is an int small enough to build a list per layer from
    (the constructor refuses the others, by name)."""
    n = items.get("num_hidden_layers")
    if isinstance(n, int) and not isinstance(n, bool) and 0 <= n <= MAX_LAYERS:
        return n
    return None


def _refuse(name: str, value: Any, what: str, remedy: str = "") -> ValueError:
    tail = f": {remedy}" if remedy else ""
    return ValueError(f"ModelCost cannot model {name}={value!r} ({what}){tail}")


def _uniform(name: str, value: Any) -> Any:
    """A per-layer list whose entries are all equal, as its one value."""
    if isinstance(value, Sequence) and not isinstance(value, (str, bytes)):
        if len(set(map(repr, value))) > 1:
            raise _refuse(name, value, "a different value per layer")
        return value[0] if value else None
    return value


def _lfm2(items: dict[str, Any], out: dict[str, Any]) -> None:
    size = items.get("intermediate_size")
    if (
        items.get("block_auto_adjust_ff_dim")
        and isinstance(size, int)
        and not isinstance(size, bool)
    ):
        # The MLP LFM2 builds: 2/3 of the size, times the multiplier, rounded up.
        size = int(2 * size / 3)
        multiplier, multiple = items.get("block_ffn_dim_multiplier"), items.get("block_multiple_of")
        if multiplier is not None:
            if isinstance(multiplier, bool) or not isinstance(multiplier, (int, float)):
                raise TypeError(
                    f"block_ffn_dim_multiplier must be a number, got {_describe(multiplier)}"
                )
            if not isinstance(multiple, int) or multiple < 1:
                raise _refuse("block_multiple_of", multiple, "an LFM2 MLP size rounding")
            size = multiple * ((int(multiplier * size) + multiple - 1) // multiple)
        out["intermediate_size"] = size
    kinds = items.get("layer_types")
    n = _layer_count(items)
    if kinds is None and n is not None:
        # transformers' Lfm2Config without layer_types: full attention at full_attn_idxs,
        # and at every layer when that is null too (what its model then builds).
        indexes = items.get("full_attn_idxs")
        attention = (
            set(range(n)) if indexes is None else set(_index_list("full_attn_idxs", indexes))
        )
        kinds = ["full_attention" if i in attention else "conv" for i in range(n)]
    if kinds is not None:
        out["layer_types"] = kinds


def _doge(items: dict[str, Any], out: dict[str, Any]) -> None:
    out["is_moe"] = bool(items.get("is_moe"))
    if not out["is_moe"]:  # the expert fields are defaults the dense model does not use
        for name in ("num_experts", "num_experts_per_tok"):
            out.pop(name, None)


def _gemma4(items: dict[str, Any], out: dict[str, Any]) -> None:
    for name in ("enable_moe_block", "use_double_wide_mlp", "attention_k_eq_v"):
        if items.get(name):
            raise _refuse(name, items[name], "a Gemma 4 layer shape ModelCost does not model")
    if items.get("num_kv_shared_layers"):
        raise _refuse("num_kv_shared_layers", items["num_kv_shared_layers"], "shared KV layers")


def _hunyuan(items: dict[str, Any], out: dict[str, Any]) -> None:
    # Every layer: the routed experts and one shared MLP, all of intermediate_size.
    if out.get("num_experts") is not None and "intermediate_size" in out:
        out["shared_expert_intermediate_size"] = out["intermediate_size"]


def _jamba(items: dict[str, Any], out: dict[str, Any]) -> None:
    rank = items.get("mamba_dt_rank")
    if rank == "auto" and _is_int(items.get("hidden_size")):
        rank = math.ceil(items["hidden_size"] / 16)
    out["mamba_dt_rank"] = rank
    n = _layer_count(items)
    if n is None:
        return
    values = []
    for name in (
        "attn_layer_period",
        "attn_layer_offset",
        "expert_layer_period",
        "expert_layer_offset",
    ):
        value = items.get(name)
        if not isinstance(value, int) or value < (1 if "period" in name else 0):
            raise _refuse(name, value, "which Jamba layers are attention or MoE")
        values.append(value)
    attn_period, attn_offset, moe_period, moe_offset = values
    out["layer_types"] = [
        "full_attention" if i % attn_period == attn_offset else "mamba" for i in range(n)
    ]
    moe = _int_field("num_experts", items.get("num_experts", 0), 0) > 1
    out["mlp_layer_types"] = [
        "sparse" if moe and i % moe_period == moe_offset else "dense" for i in range(n)
    ]
    if not moe:
        out.pop("num_experts", None)


def _bamba(items: dict[str, Any], out: dict[str, Any]) -> None:
    n = _layer_count(items)
    attention = _index_list("attn_layer_indices", items.get("attn_layer_indices") or ())
    if n is not None:
        out["layer_types"] = ["full_attention" if i in attention else "mamba" for i in range(n)]


def _falcon_h1(items: dict[str, Any], out: dict[str, Any]) -> None:
    n = _layer_count(items)
    if n is not None:
        out["layer_types"] = ["hybrid"] * n


def _nemotron_h(items: dict[str, Any], out: dict[str, Any]) -> None:
    blocks = items.get("layers_block_type") or items.get("layer_types")
    pattern = items.get("hybrid_override_pattern")
    if blocks is None and isinstance(pattern, str):  # older config.json files: "M-M*-ME..."
        letters = {"M": "mamba", "*": "attention", "-": "mlp", "E": "moe"}
        blocks = [letters.get(letter, letter) for letter in pattern]
    if not isinstance(blocks, Sequence) or isinstance(blocks, (str, bytes)):
        raise _refuse("layers_block_type", blocks, "NemotronH's layers; a list is needed")
    mixer = {"mamba": "mamba", "attention": "full_attention", "mlp": "mlp", "moe": "mlp"}
    mlp = {"mamba": "none", "attention": "none", "mlp": "dense", "moe": "sparse"}
    for i, block in enumerate(blocks):
        if not isinstance(block, str) or block not in mixer:
            raise _refuse(f"layers_block_type[{i}]", block, "a NemotronH block kind")
    if items.get("moe_latent_size") is not None:
        raise _refuse("moe_latent_size", items["moe_latent_size"], "latent MoE projections")
    out["num_hidden_layers"] = len(blocks)
    out["layer_types"] = [mixer[block] for block in blocks]
    out["mlp_layer_types"] = [mlp[block] for block in blocks]
    _copy(items, out, mamba_n_heads="mamba_num_heads", mamba_n_groups="n_groups")
    _copy(items, out, mamba_d_state="ssm_state_size", mamba_d_conv="conv_kernel")
    heads, dim = items.get("mamba_num_heads"), items.get("mamba_head_dim")
    if isinstance(heads, int) and isinstance(dim, int):
        out["mamba_d_ssm"] = heads * dim
    shared, size = items.get("n_shared_experts"), items.get("moe_shared_expert_intermediate_size")
    if isinstance(shared, int) and isinstance(size, int):
        out["shared_expert_intermediate_size"] = shared * size
    out["gated_mlp"] = False  # relu2: up and down


def _mamba(items: dict[str, Any], out: dict[str, Any]) -> None:
    n = _layer_count(items)
    if n is not None:
        out["layer_types"] = ["mamba"] * n
        out["mlp_layer_types"] = ["none"] * n
    _copy(items, out, mamba_d_state="state_size", mamba_d_conv="conv_kernel")
    if items.get("model_type") == "mamba2":
        _copy(
            items, out, mamba_n_heads="num_heads", mamba_n_groups="n_groups", mamba_expand="expand"
        )
    else:
        _copy(items, out, mamba_d_ssm="intermediate_size", mamba_dt_rank="time_step_rank")
        out.pop("intermediate_size", None)


def _copy(items: dict[str, Any], out: dict[str, Any], **names: str) -> None:
    for canonical, family in names.items():
        if items.get(family) is not None:  # checked under the name the config gives it
            out[canonical] = _int_field(family, items[family], 1)


def _jetmoe(items: dict[str, Any], out: dict[str, Any]) -> None:
    # Mixture of attention heads: top_k query/output experts of kv_channels * n_kv each, the
    # same weights per token as n_q = top_k * n_kv heads of kv_channels (its router, h x
    # experts per layer, is left out: under 0.1 %).
    _copy(items, out, head_dim="kv_channels")
    heads, kv, top_k = (
        items.get(name)
        for name in ("num_attention_heads", "num_key_value_heads", "num_experts_per_tok")
    )
    if (
        isinstance(heads, int)
        and isinstance(kv, int)
        and isinstance(top_k, int)
        and heads != kv * top_k
    ):
        raise _refuse(
            "num_attention_heads", heads, f"JetMoE attention runs {top_k} experts of {kv} heads"
        )


def _output_gate(items: dict[str, Any], out: dict[str, Any]) -> None:
    out.setdefault("attn_output_gate", True)  # the query projection also makes the gate


_FAMILIES: dict[str, Callable[[dict[str, Any], dict[str, Any]], None]] = {
    "lfm2": _lfm2,
    "lfm2_moe": _lfm2,
    "doge": _doge,
    "jetmoe": _jetmoe,
    "gemma4_text": _gemma4,
    "hunyuan_v1_moe": _hunyuan,
    "jamba": _jamba,
    "bamba": _bamba,
    "falcon_h1": _falcon_h1,
    "nemotron_h": _nemotron_h,
    "mamba": _mamba,
    "mamba2": _mamba,
    "falcon_mamba": _mamba,
    **dict.fromkeys(("afmoe", "qwen3_next", "qwen3_5_text", "qwen3_5_moe_text"), _output_gate),
}


# Families whose layer pattern only layer_types gives (null in the config: refused, not guessed).
_NEEDS_LAYER_TYPES = {
    # Lfm2MoeConfig() leaves layer_types null and, unlike Lfm2Config, reads no full_attn_idxs:
    # which layers are convolutions is nowhere in the config, and its model cannot be built.
    "lfm2_moe": "an LFM2 MoE model mixes convolution and attention layers; its config must "
    "list which layer is which",
}

# Fields only a family reader above understands: without one (no or another model_type) and
# without layer_types, a config that has them would be read as plain attention layers.
_FAMILY_ONLY = (
    "attn_layer_period", "attn_layer_indices", "layers_block_type", "hybrid_override_pattern",
    "full_attn_idxs", "block_auto_adjust_ff_dim", "ssm_state_size", "mamba_d_state",
)  # fmt: skip


def _moe_range(items: dict[str, Any], out: dict[str, Any]) -> None:
    """ERNIE's MoE layers: from ``moe_layer_start_index`` to ``moe_layer_end_index`` (-1: the
    last) every ``moe_layer_interval`` layers."""
    n = _layer_count(items)
    bounds = []
    for name, default in (("moe_layer_start_index", None), ("moe_layer_end_index", -1)):
        value = items.get(name, default)
        if not isinstance(value, int):
            raise _refuse(name, value, "which layers are MoE")
        bounds.append(value)
    start, end = bounds
    step = items.get("moe_layer_interval", 1)
    if not isinstance(step, int) or step < 1:
        raise _refuse("moe_layer_interval", step, "which layers are MoE")
    if n is not None:
        last = n - 1 if end == -1 else end
        out["mlp_layer_types"] = [
            "sparse" if start <= i <= last and (i - start) % step == 0 else "dense"
            for i in range(n)
        ]


def normalize(
    items: Mapping[str, Any], fields: tuple[str, ...], overridden: Collection[str] = ()
) -> dict[str, Any]:
    """The `ModelCost` fields (names in ``fields``, plus ``gated_mlp`` when the family says)
    of a config's items, read by its ``model_type``; or the ``ValueError`` naming the field.

    ``overridden``: the fields the caller replaces afterwards (``from_config``'s overrides). A
    layer pattern the config leaves unreadable is not refused when ``layer_types`` is among
    them: the refusal's remedy is to pass it."""
    items = {name: value for name, value in items.items() if value is not None}
    family = items.get("model_type")
    if family is not None and not isinstance(family, str):
        raise TypeError(f"model_type must be a string, got {_describe(family)}")
    if family in REFUSED:
        raise _refuse(
            "model_type", family, REFUSED[family], "pass its shape to ModelCost(...) explicitly"
        )
    out = {name: items[name] for name in fields if name in items}
    for canonical, names in _RENAMES.items():
        for name in names:
            if canonical not in out and name in items:
                minimum = 1 if canonical == "num_experts_per_tok" else 0
                out[canonical] = _int_field(name, _uniform(name, items[name]), minimum)
    if "num_experts_per_tok" in out:
        out["num_experts_per_tok"] = _uniform("num_experts_per_tok", out["num_experts_per_tok"])
    per_layer = items.get("num_attention_heads_per_layer")
    if per_layer is not None:
        per_layer = _index_list("num_attention_heads_per_layer", per_layer)
    if per_layer is not None and any(
        heads != items.get("num_attention_heads") for heads in per_layer
    ):
        raise _refuse("num_attention_heads_per_layer", per_layer, "a head count per layer")
    if out.get("sliding_window") == 0 and not isinstance(out["sliding_window"], bool):
        del out["sliding_window"]  # transformers writes 0 for "no sliding window"
    if "moe_layer_start_index" in items and "mlp_layer_types" not in out:
        _moe_range(items, out)
    if family in TWO_MATRIX:
        out["gated_mlp"] = False
    given = "layer_types" in overridden
    if family in _NEEDS_LAYER_TYPES and "layer_types" not in items and not given:
        raise _refuse(
            "layer_types",
            None,
            _NEEDS_LAYER_TYPES[family],
            "pass layer_types= with one entry per layer",
        )
    if family in _FAMILIES:
        _FAMILIES[family](items, out)
    elif "layer_types" not in out and not given:
        for name in _FAMILY_ONLY:
            if name in items:
                raise _refuse(
                    name, items[name], f"a field of a family ModelCost reads by model_type, "
                    f"not of model_type={family!r}", "pass layer_types= or the model_type",
                )  # fmt: skip
    return out
