"""The layers of a model for `ModelCost`: each layer's kind, its FLOPs per token and per
attention pair, summed into a `LayerShape` (checked config fields in, no transformers import)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, NamedTuple

FULL, SLIDING, LINEAR = "full_attention", "sliding_attention", "linear_attention"
MAMBA, CONV, HYBRID, MLP_ONLY = "mamba", "conv", "hybrid", "mlp"
#: The most layers a model may have: checked before anything per layer is allocated.
MAX_LAYERS = 100_000
#: The layer kinds ``layer_types`` may name; ``hybrid`` (attention and a Mamba mixer side by
#: side, Falcon-H1) is reported as ``full_attention``, ``mlp`` is a layer with no mixer.
LAYER_TYPES = (FULL, SLIDING, LINEAR, MAMBA, CONV, HYBRID, MLP_ONLY)
#: The kinds a `ModelCost` reports, in the order `describe` counts them.
REPORTED = (FULL, SLIDING, LINEAR, MAMBA, CONV, MLP_ONLY)
#: ``mlp_layer_types`` entries: a dense MLP, a MoE one, no MLP.
MLP_KINDS = ("dense", "sparse", "none")

LINEAR_FIELDS = (
    "linear_num_key_heads",
    "linear_key_head_dim",
    "linear_num_value_heads",
    "linear_value_head_dim",
)
MLA_FIELDS = ("qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
MAMBA2_FIELDS = ("mamba_n_heads", "mamba_d_state", "mamba_d_conv")
MAMBA1_FIELDS = ("mamba_d_state", "mamba_d_conv", "mamba_dt_rank")


def _pairs(length: int, window: int | None, causal: bool) -> int:
    """Query-key pairs attention computes for one sequence (see `ModelCost`)."""
    if not causal:
        return length * length
    if window is None or length <= window:
        return length * (length + 1) // 2
    return window * (window + 1) // 2 + (length - window) * window


def _pattern(items: Sequence[str]) -> str:
    """``items`` as Python source, written ``[...] * n`` when it repeats a shorter list."""
    n = len(items)
    for period in range(1, n // 2 + 1):
        if n % period == 0 and list(items) == list(items[:period]) * (n // period):
            return f"{list(items[:period])!r} * {n // period}"
    return repr(list(items))


def missing(name: str, needed_by: str) -> ValueError:
    return ValueError(
        f"ModelCost cannot read the model: {name} is missing ({needed_by}); pass {name}=..."
    )


class LayerShape(NamedTuple):
    """A model's forward FLOPs per token and per attention pair, summed over its layers."""

    layer_types: tuple[str, ...]
    moe_layers: tuple[int, ...]
    #: per token, independent of the length: the head, every projection, every MLP
    linear: int
    #: per token: the linear-attention cores, SSM scans and short convolutions
    recurrent: int
    #: per causal pair of the full-attention layers
    full: int
    #: (window, per pair) of the sliding-window layers
    windows: tuple[tuple[int, int], ...]


def _softmax(ints: dict[str, int], h: int, global_layer: bool) -> tuple[int, int]:
    """(projections per token, coefficient of pairs(L)) of one softmax-attention layer."""
    if "num_attention_heads" not in ints:
        raise missing("num_attention_heads", "attention layers")
    n_q = ints["num_attention_heads"]
    if "kv_lora_rank" in ints:
        for name in MLA_FIELDS:
            if name not in ints:
                raise missing(name, "multi-latent attention, kv_lora_rank is set")
        r_q, r_kv = ints.get("q_lora_rank", 0), ints["kv_lora_rank"]
        d_n, d_r, d_v = (ints[name] for name in MLA_FIELDS)
        query = h * r_q + r_q * n_q * (d_n + d_r) if r_q else h * n_q * (d_n + d_r)
        proj = 2 * query + 2 * h * (r_kv + d_r) + 2 * r_kv * n_q * (d_n + d_v) + 2 * n_q * d_v * h
        return proj, 2 * n_q * (d_n + d_r) + 2 * n_q * d_v
    n_kv = ints.get("num_key_value_heads", n_q)
    d = ints["head_dim"] if "head_dim" in ints else h // n_q
    if global_layer:
        d = ints.get("global_head_dim", d)
        n_kv = ints.get("num_global_key_value_heads", n_kv)
    if d == 0:
        raise ValueError(
            f"head_dim = hidden_size // num_attention_heads = {h} // {n_q} is 0; pass head_dim=..."
        )
    gate = 2 * h * n_q * d if ints.get("attn_output_gate") else 0
    return 2 * h * d * (2 * n_q + 2 * n_kv) + gate, 4 * n_q * d


def _mamba(ints: dict[str, int], h: int) -> tuple[int, int]:
    """(projections, scan and convolution) per token of one Mamba mixer: Mamba-1 when
    ``mamba_dt_rank`` is set, else Mamba-2."""
    mamba1 = "mamba_dt_rank" in ints
    for name in MAMBA1_FIELDS if mamba1 else MAMBA2_FIELDS:
        if name not in ints:
            raise missing(name, "Mamba layers")
    if "mamba_d_ssm" in ints:
        d_in = ints["mamba_d_ssm"]
    elif "mamba_expand" in ints:
        d_in = ints["mamba_expand"] * h
    else:
        raise missing("mamba_expand", "the width of the Mamba layers")
    state, kernel = ints["mamba_d_state"], ints["mamba_d_conv"]
    if mamba1:
        rank = ints["mamba_dt_rank"]
        proj = 2 * (h * 2 * d_in + d_in * (rank + 2 * state) + rank * d_in + d_in * h)
        return proj, 2 * d_in * kernel + 4 * d_in * state
    heads, groups = ints["mamba_n_heads"], ints.get("mamba_n_groups", 1)
    conv_dim = d_in + 2 * groups * state
    proj = 2 * (h * (d_in + conv_dim + heads) + d_in * h)
    return proj, 2 * conv_dim * kernel + 4 * d_in * state


def _conv(ints: dict[str, int], h: int) -> tuple[int, int]:
    """(projections, convolution) per token of one gated short-convolution layer (LFM2)."""
    if "conv_L_cache" not in ints:
        raise missing("conv_L_cache", "convolution layers")
    return 2 * (h * 3 * h + h * h), 2 * h * ints["conv_L_cache"]


def _moe_layers(
    ints: dict[str, int], only: tuple[int, ...], n_layers: int, experts: int
) -> set[int]:
    if not experts:
        return set()
    first_dense = ints.get("first_k_dense_replace", 0)
    step = ints.get("decoder_sparse_step", 1)
    return {
        i for i in range(n_layers) if i >= first_dense and i not in only and (i + 1) % step == 0
    }


def _expert_count(ints: dict[str, int]) -> int:
    counts = {
        name: ints[name]
        for name in ("num_experts", "n_routed_experts", "num_local_experts")
        if name in ints
    }
    if len(set(counts.values())) > 1:
        raise ValueError(
            "the expert count is ambiguous: "
            + ", ".join(f"{name}={value}" for name, value in counts.items())
            + "; pass the right one and the others =None"
        )
    return next(iter(counts.values()), 0)


def _moe_mlp(ints: dict[str, int], h: int, experts: int, gate: int, n_moe: int) -> int:
    if "num_experts_per_tok" not in ints:
        raise missing("num_experts_per_tok", f"{n_moe} MoE layers")
    top_k = ints["num_experts_per_tok"]
    if top_k > experts:
        raise ValueError(f"num_experts_per_tok ({top_k}) is more than the {experts} experts")
    if ints.get("is_moe"):
        # Doge's cross-domain MoE: the dense MLP, a product-key router over 2 * isqrt(E)
        # keys, and top_k one-neuron experts (a row in, a row out).
        if "intermediate_size" not in ints:
            raise missing("intermediate_size", "Doge's dense MLP")
        router = 2 * h * 2 * math.isqrt(experts)
        return gate * h * ints["intermediate_size"] + router + top_k * 4 * h
    expert_size = ints.get("moe_intermediate_size", ints.get("intermediate_size"))
    if expert_size is None:
        raise missing("moe_intermediate_size", "the size of each expert")
    if "shared_expert_intermediate_size" in ints:
        shared = ints["shared_expert_intermediate_size"]
    elif ints.get("n_shared_experts", 0):
        if "moe_intermediate_size" not in ints:
            raise missing("moe_intermediate_size", "the size of each shared expert")
        shared = ints["n_shared_experts"] * ints["moe_intermediate_size"]
    else:
        shared = 0
    return 2 * h * experts + top_k * gate * h * expert_size + gate * h * shared


def layer_shape(
    ints: dict[str, int],
    fields: dict[str, Any],
    kinds: tuple[str, ...],
    mlp_kinds: tuple[str, ...] | None,
    only: tuple[int, ...],
    flags: dict[str, bool],
) -> LayerShape:
    """The `LayerShape` of checked config fields: ``ints`` the integer ones, ``kinds`` the
    layer types, ``mlp_kinds`` the ``mlp_layer_types`` (or ``None``: the MoE rule of
    `ModelCost.from_config`), ``only`` ``mlp_only_layers``; or the ``ValueError`` naming a
    field the layers need."""
    h, n_layers = ints["hidden_size"], len(kinds)
    n_sliding = kinds.count(SLIDING)
    if n_sliding and "sliding_window" not in ints:
        raise missing("sliding_window", f"{n_sliding} layers use a sliding window")
    if n_sliding and not flags["causal"]:
        raise ValueError(
            f"causal=False with {n_sliding} sliding-window layers: ModelCost models sliding "
            "windows under a causal mask only; pass causal=True"
        )
    # Per layer kind: (projections per token, per-token core, per-pair core).
    mixers: dict[str, tuple[int, int, int]] = {MLP_ONLY: (0, 0, 0)}
    for kind in set(kinds):
        if kind in (FULL, SLIDING):
            proj, pair = _softmax(ints, h, kind == FULL)
            mixers[kind] = (proj, 0, pair)
        elif kind == LINEAR:
            for name in LINEAR_FIELDS:
                if name not in ints:
                    raise missing(name, f"{kinds.count(LINEAR)} linear-attention layers")
            n_k, d_k, n_v, d_v = (ints[name] for name in LINEAR_FIELDS)
            # q, k, v, the output gate, the decay and beta gates in; the output projection out.
            proj = 2 * h * (2 * n_k * d_k + 2 * n_v * d_v + 2 * n_v) + 2 * n_v * d_v * h
            conv = 2 * (2 * n_k * d_k + n_v * d_v) * ints.get("linear_conv_kernel_dim", 0)
            mixers[kind] = (proj, 4 * n_v * d_k * d_v + conv, 0)
        elif kind in (MAMBA, HYBRID):
            proj, scan = _mamba(ints, h)
            if kind == HYBRID:
                attention, pair = _softmax(ints, h, True)
                mixers[kind] = (proj + attention, scan, pair)
            else:
                mixers[kind] = (proj, scan, 0)
        elif kind == CONV:
            proj, scan = _conv(ints, h)
            mixers[kind] = (proj, scan, 0)

    gate = 6 if flags["gated_mlp"] else 4
    experts = _expert_count(ints)
    if mlp_kinds is None:
        sparse = _moe_layers(ints, only, n_layers, experts)
        mlp_kinds = tuple("sparse" if i in sparse else "dense" for i in range(n_layers))
    if ints.get("is_moe") and not experts:
        raise missing("num_experts", "is_moe is set")
    moe_layers = tuple(i for i, kind in enumerate(mlp_kinds) if kind == "sparse")
    if moe_layers and not experts:
        raise missing("num_experts", f"{len(moe_layers)} MoE layers")
    costs = {"none": 0}
    if moe_layers:
        costs["sparse"] = _moe_mlp(ints, h, experts, gate, len(moe_layers))
    n_dense = mlp_kinds.count("dense")
    if n_dense:
        if "intermediate_size" not in ints:
            raise missing("intermediate_size", f"{n_dense} dense MLP layers")
        costs["dense"] = gate * h * ints["intermediate_size"]
    # Gemma's per-layer inputs: one projection to every layer's input, a gate and a
    # projection back in each layer.
    per_layer = 6 * h * ints.get("hidden_size_per_layer_input", 0) * n_layers
    head = 0
    if flags["include_head"]:
        if "vocab_size" not in ints:
            raise missing("vocab_size", "the output head; include_head=False leaves it out")
        head = 2 * h * ints["vocab_size"]

    linear, recurrent, full, sliding = head + per_layer, 0, 0, 0
    for kind, mlp in zip(kinds, mlp_kinds, strict=True):
        proj, per_token, pair = mixers[kind]
        linear += proj + costs[mlp]
        recurrent += per_token
        if kind == SLIDING:
            sliding += pair
        else:
            full += pair
    window = ints.get("sliding_window", 0)
    return LayerShape(
        layer_types=tuple(FULL if kind == HYBRID else kind for kind in kinds),
        moe_layers=moe_layers,
        linear=linear,
        recurrent=recurrent,
        full=full,
        windows=((window, sliding),) if n_sliding else (),
    )
