"""ModelCost: the spec's FLOPs formula, its config reading rules, and its use as a ``cost=``.

The oracle is a plain transcription of the planning spec ("Model-aware costs"), written per
layer with no shared code; the model-card checks count parameters from public config.json
shapes with a second, independent transcription.
"""

from __future__ import annotations

import contextlib
import io
import re
import sys
import textwrap
import types
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, note
from hypothesis import strategies as st

import seqbalance as sb
from seqbalance import ModelCost, TransformerCost

KINDS = ("full_attention", "sliding_attention", "linear_attention")


# -- the oracle: the spec's formula, layer by layer ------------------------------------------


def _value(config: dict[str, Any], name: str, default: Any = None) -> Any:
    """A config field, null counting as absent."""
    value = config.get(name)
    return default if value is None else value


def oracle_layers(config: dict[str, Any]) -> tuple[list[str], list[bool]]:
    """Each layer's attention type and whether its MLP is MoE, by the spec's reading rules."""
    n = config["num_hidden_layers"]
    if config.get("layer_types") is not None:
        kinds = list(config["layer_types"])
    elif config.get("sliding_window") is not None and config.get("use_sliding_window") is not False:
        kinds = ["sliding_attention"] * n
    else:
        kinds = ["full_attention"] * n
    experts = 0
    for name in ("num_experts", "n_routed_experts", "num_local_experts"):
        if config.get(name) is not None:
            experts = config[name]
    first_dense = _value(config, "first_k_dense_replace", 0)
    only = _value(config, "mlp_only_layers", [])
    step = _value(config, "decoder_sparse_step", 1)
    moe = []
    for i in range(n):
        moe.append(experts > 0 and i >= first_dense and i not in only and (i + 1) % step == 0)
    return kinds, moe


def oracle_pairs(length: int, window: int | None, causal: bool) -> int:
    if not causal:
        return length * length
    if window is None:
        return length * (length + 1) // 2
    if length <= window:
        return length * (length + 1) // 2
    return window * (window + 1) // 2 + (length - window) * window


def oracle_forward(
    config: dict[str, Any],
    length: int,
    *,
    gated_mlp: bool = True,
    include_head: bool = True,
    causal: bool = True,
) -> tuple[int, int]:
    """(linear part, attention part) of one sequence's forward FLOPs, as the spec writes them."""
    h = config["hidden_size"]
    kinds, moe = oracle_layers(config)
    g = 6 if gated_mlp else 4
    linear = attention = 0
    for i, kind in enumerate(kinds):
        if kind == "linear_attention":
            n_k, d_k = config["linear_num_key_heads"], config["linear_key_head_dim"]
            n_v, d_v = config["linear_num_value_heads"], config["linear_value_head_dim"]
            # in: queries, keys (n_k heads), values, output gate (n_v heads), decay and beta
            # (one each per value head); out: n_v * d_v back to h.
            proj = 2 * h * (2 * n_k * d_k + 2 * n_v * d_v + 2 * n_v) + 2 * n_v * d_v * h
            core = 4 * n_v * d_k * d_v * length
        else:
            window = config["sliding_window"] if kind == "sliding_attention" else None
            pairs = oracle_pairs(length, window, causal)
            n_q = config["num_attention_heads"]
            if config.get("kv_lora_rank") is not None:
                r_q, r_kv = _value(config, "q_lora_rank", 0), config["kv_lora_rank"]
                d_n, d_r = config["qk_nope_head_dim"], config["qk_rope_head_dim"]
                d_v = config["v_head_dim"]
                if r_q:
                    q = h * r_q + r_q * n_q * (d_n + d_r)
                else:
                    q = h * n_q * (d_n + d_r)
                proj = (
                    2 * q + 2 * h * (r_kv + d_r) + 2 * r_kv * n_q * (d_n + d_v) + 2 * n_q * d_v * h
                )
                core = 2 * n_q * (d_n + d_r) * pairs + 2 * n_q * d_v * pairs
            else:
                n_kv = _value(config, "num_key_value_heads", n_q)
                d = _value(config, "head_dim", h // n_q)
                proj = 2 * h * d * (2 * n_q + 2 * n_kv)
                core = 4 * n_q * d * pairs
        if moe[i]:
            experts = next(
                config[name]
                for name in ("num_experts", "n_routed_experts", "num_local_experts")
                if config.get(name) is not None
            )
            i_e = _value(config, "moe_intermediate_size", config.get("intermediate_size"))
            if config.get("shared_expert_intermediate_size") is not None:
                i_s = config["shared_expert_intermediate_size"]
            elif _value(config, "n_shared_experts", 0):
                i_s = config["n_shared_experts"] * config["moe_intermediate_size"]
            else:
                i_s = 0
            mlp = 2 * h * experts + config["num_experts_per_tok"] * g * h * i_e + g * h * i_s
        else:
            mlp = g * h * config["intermediate_size"]
        linear += proj * length + mlp * length
        attention += core
    if include_head:
        linear += 2 * h * config["vocab_size"] * length
    return linear, attention


def oracle_flops(config: dict[str, Any], length: int, flags: dict[str, bool]) -> int:
    linear, attention = oracle_forward(
        config,
        length,
        gated_mlp=flags.get("gated_mlp", True),
        include_head=flags.get("include_head", True),
        causal=flags.get("causal", True),
    )
    return (4 if flags.get("recompute") else 3) * (linear + attention)


# -- random configs ---------------------------------------------------------------------------


@st.composite
def configs(draw: Any) -> tuple[dict[str, Any], dict[str, bool]]:
    """A random readable config (some optional fields given as null) and random flags."""
    h = draw(st.integers(1, 300))
    n = draw(st.integers(1, 6))
    config: dict[str, Any] = {
        "hidden_size": h,
        "num_hidden_layers": n,
        "vocab_size": draw(st.integers(1, 5000)),
        "intermediate_size": draw(st.integers(1, 600)),
    }
    if draw(st.booleans()):
        config["layer_types"] = draw(st.lists(st.sampled_from(KINDS), min_size=n, max_size=n))
        if draw(st.booleans()):
            config["full_attention_interval"] = 4  # ignored beside layer_types
    if draw(st.booleans()):
        config["sliding_window"] = draw(st.integers(1, 80))
        config["use_sliding_window"] = draw(st.sampled_from([None, True, False]))
    elif "layer_types" in config and "sliding_attention" in config["layer_types"]:
        config["sliding_window"] = draw(st.integers(1, 80))
    n_q = draw(st.integers(1, min(h, 12)))
    config["num_attention_heads"] = n_q
    if draw(st.booleans()):
        config["kv_lora_rank"] = draw(st.integers(1, 40))
        config["q_lora_rank"] = draw(st.sampled_from([None, 0, 1, 7, 33]))
        config["qk_nope_head_dim"] = draw(st.integers(0, 20))
        config["qk_rope_head_dim"] = draw(st.integers(0, 20))
        config["v_head_dim"] = draw(st.integers(1, 20))
        config["head_dim"] = draw(st.sampled_from([None, 64]))  # ignored under MLA
    else:
        config["num_key_value_heads"] = draw(st.one_of(st.none(), st.integers(1, n_q)))
        config["head_dim"] = draw(st.one_of(st.none(), st.integers(1, 64)))
    if "linear_attention" in config.get("layer_types", ()):
        for name in (
            "linear_num_key_heads",
            "linear_key_head_dim",
            "linear_num_value_heads",
            "linear_value_head_dim",
        ):
            config[name] = draw(st.integers(1, 24))
    if draw(st.booleans()):
        experts = draw(st.integers(0, 16))
        config[draw(st.sampled_from(["num_experts", "n_routed_experts", "num_local_experts"]))] = (
            experts
        )
        config["num_experts_per_tok"] = draw(st.integers(1, max(experts, 1)))
        config["moe_intermediate_size"] = draw(st.one_of(st.none(), st.integers(1, 300)))
        shared = draw(st.sampled_from(["none", "count", "size", "both"]))
        if shared in ("count", "both") and config["moe_intermediate_size"] is not None:
            config["n_shared_experts"] = draw(st.integers(0, 3))
        if shared in ("size", "both"):
            config["shared_expert_intermediate_size"] = draw(st.integers(1, 300))
        config["first_k_dense_replace"] = draw(st.one_of(st.none(), st.integers(0, n)))
        config["mlp_only_layers"] = draw(st.one_of(st.none(), st.lists(st.integers(0, n - 1))))
        config["decoder_sparse_step"] = draw(st.one_of(st.none(), st.integers(1, 3)))
        config["moe_layer_freq"] = draw(st.sampled_from([None, 1]))
    kinds, _ = oracle_layers(config)
    flags = {
        "gated_mlp": draw(st.booleans()),
        "include_head": draw(st.booleans()),
        "recompute": draw(st.booleans()),
        "causal": draw(st.booleans()) or "sliding_attention" in kinds,
    }
    return config, flags


lengths_strategy = st.lists(st.one_of(st.integers(0, 5000), st.integers(0, 2**63 - 1)), max_size=12)


@given(configs(), lengths_strategy)
def test_flops_equal_the_spec_formula_for_random_configs(case, lengths):
    config, flags = case
    note(f"{config} {flags}")
    cost = ModelCost.from_config(config, **flags)
    expected = [oracle_flops(config, length, flags) for length in lengths]
    assert cost.flops(lengths) == expected
    assert cost.flops(np.array(lengths, dtype=np.uint64)) == expected
    assert cost.flops(tuple(lengths)) == expected
    assert all(type(value) is int for value in cost.flops(lengths))
    weights = cost(np.array(lengths, dtype=np.int64))
    assert weights.dtype == np.float64 and weights.shape == (len(lengths),)
    # Correctly rounded from the exact integers: float(int) rounds to nearest, ties to even.
    assert weights.tolist() == [float(value) for value in expected]


@given(configs(), st.data())
def test_exact_and_correctly_rounded_near_int64_overflow(case, data):
    # Lengths around the longest whose FLOPs fit in int64: results above 2**53 (where float64
    # rounds) on both sides of the hand-over from int64 arithmetic to exact ints.
    config, flags = case
    cost = ModelCost.from_config(config, **flags)
    low, high = 0, 2**62
    while high - low > 1:
        middle = (low + high) // 2
        if oracle_flops(config, middle, flags) <= 2**63 - 1:
            low = middle
        else:
            high = middle
    lengths = data.draw(st.lists(st.integers(low // 8, 2 * low + 2), min_size=1, max_size=8))
    expected = [oracle_flops(config, s, flags) for s in lengths]
    assert cost.flops(np.array(lengths, dtype=np.int64)) == expected
    assert cost(np.array(lengths, dtype=np.int64)).tolist() == [float(v) for v in expected]


@given(configs(), st.integers(1, 10**7))
def test_per_token_splits_the_cost_into_linear_and_attention(case, length):
    config, flags = case
    cost = ModelCost.from_config(config, **flags)
    linear, attention = oracle_forward(
        config,
        length,
        gated_mlp=flags["gated_mlp"],
        include_head=flags["include_head"],
        causal=flags["causal"],
    )
    factor = 4 if flags["recompute"] else 3
    split = cost.per_token(length)
    assert split == {
        "linear": float(Fraction(factor * linear, length)),
        "attention": float(Fraction(factor * attention, length)),
    }
    assert linear % length == 0  # the linear part is the same for every token


@given(configs())
def test_crossover_is_the_first_length_where_attention_reaches_the_linear_part(case):
    config, flags = case
    cost = ModelCost.from_config(config, **flags)
    kwargs = {k: v for k, v in flags.items() if k != "recompute"}

    def dominates(length: int) -> bool:
        linear, attention = oracle_forward(config, length, **kwargs)
        return attention >= linear

    crossover = cost.crossover_length()
    text = cost.describe()
    if crossover is None:
        assert "full_attention" not in oracle_layers(config)[0]
        assert not any(dominates(10**k) for k in range(0, 19, 3))
        assert "never" in text
    else:
        assert dominates(crossover)
        assert crossover == 1 or not dominates(crossover - 1)
        assert f"from {crossover:,} tokens" in text


@given(
    st.integers(1, 16),
    st.integers(1, 32),
    st.integers(1, 6),
    st.integers(1, 2048),
    st.lists(st.integers(0, 10**5), max_size=10),
)
def test_identity_with_transformer_cost(heads, head_dim, layers, ffn, lengths):
    h = heads * head_dim
    shape = {
        "hidden_size": h,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "intermediate_size": ffn,
    }
    bidirectional = ModelCost(**shape, gated_mlp=False, include_head=False, causal=False)
    assert bidirectional.flops(lengths) == TransformerCost(h, layers, ffn, causal=False).flops(
        lengths
    )
    causal = ModelCost(**shape, gated_mlp=False, include_head=False)
    dense = TransformerCost(h, layers, ffn, causal=True).flops(lengths)
    assert [a - b for a, b in zip(causal.flops(lengths), dense, strict=True)] == [
        6 * layers * h * s for s in lengths
    ]


def test_training_is_three_forward_passes_or_four_with_recompute():
    shape = {"hidden_size": 64, "num_hidden_layers": 3, "num_attention_heads": 4}
    shape.update(intermediate_size=200, vocab_size=999)
    lengths = [0, 1, 17, 4096]
    forward = [sum(oracle_forward(shape, s)) for s in lengths]
    assert ModelCost(**shape).flops(lengths) == [3 * f for f in forward]
    assert ModelCost(**shape, recompute=True).flops(lengths) == [4 * f for f in forward]


def test_exact_around_the_int64_boundary():
    # Results around 2**63: the int64 fast path must hand over to exact ints, and float64
    # weights must round from the exact values (the spacing of float64 there is 2048).
    config = {
        "hidden_size": 4096,
        "num_hidden_layers": 61,
        "num_attention_heads": 128,
        "intermediate_size": 18432,
        "vocab_size": 129280,
        "layer_types": ["full_attention", "sliding_attention"] * 30 + ["full_attention"],
        "sliding_window": 4096,
    }
    cost = ModelCost.from_config(config)
    low, high = 1, 2**40
    while high - low > 1:  # the longest length whose FLOPs fit in int64
        middle = (low + high) // 2
        if oracle_flops(config, middle, {}) <= 2**63 - 1:
            low = middle
        else:
            high = middle
    lengths = [low - 1, low, low + 1, low + 2, 3, 0]
    expected = [oracle_flops(config, s, {}) for s in lengths]
    assert expected[1] <= 2**63 - 1 < expected[2]
    for given_lengths in (lengths, np.array(lengths), np.array(lengths[:2] + lengths[4:])):
        exact = [oracle_flops(config, int(s), {}) for s in given_lengths]
        assert cost.flops(given_lengths) == exact
        assert cost(given_lengths).tolist() == [float(v) for v in exact]


def test_empty_and_zero_lengths():
    cost = ModelCost(
        hidden_size=8, num_hidden_layers=1, num_attention_heads=2, intermediate_size=8,
        vocab_size=10,
    )  # fmt: skip
    assert cost.flops([]) == []
    assert cost(np.array([], dtype=np.int64)).dtype == np.float64
    assert cost([]).shape == (0,)
    assert cost.flops([0, 0]) == [0, 0]
    assert cost.flops(np.zeros(3, dtype=np.int8)) == [0, 0, 0]


@pytest.mark.parametrize(
    "lengths, error",
    [
        ([1, -1], ValueError),
        ([1.5], TypeError),
        (["3"], TypeError),
        (np.array([[1, 2]]), ValueError),
        (np.array([1.0]), TypeError),
        ([2**63], OverflowError),
        (5, TypeError),
    ],
)
def test_bad_lengths_are_refused_with_the_shared_checks(lengths, error):
    cost = ModelCost(
        hidden_size=8, num_hidden_layers=1, num_attention_heads=2, intermediate_size=8,
        include_head=False,
    )  # fmt: skip
    with pytest.raises(error, match="lengths"):
        cost.flops(lengths)
    with pytest.raises(error, match="lengths"):
        cost(lengths)


# -- model cards: public config.json shapes -------------------------------------------------

LLAMA_3_8B = {
    "hidden_size": 4096,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "intermediate_size": 14336,
    "vocab_size": 128256,
    "tie_word_embeddings": False,
}
DEEPSEEK_V3 = {
    "hidden_size": 7168,
    "num_hidden_layers": 61,
    "num_attention_heads": 128,
    "num_key_value_heads": 128,
    "intermediate_size": 18432,
    "moe_intermediate_size": 2048,
    "vocab_size": 129280,
    "n_routed_experts": 256,
    "n_shared_experts": 1,
    "num_experts_per_tok": 8,
    "first_k_dense_replace": 3,
    "moe_layer_freq": 1,
    "q_lora_rank": 1536,
    "kv_lora_rank": 512,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "tie_word_embeddings": False,
}
QWEN3_30B_A3B = {
    "hidden_size": 2048,
    "num_hidden_layers": 48,
    "num_attention_heads": 32,
    "num_key_value_heads": 4,
    "head_dim": 128,
    "intermediate_size": 6144,
    "moe_intermediate_size": 768,
    "num_experts": 128,
    "num_experts_per_tok": 8,
    "decoder_sparse_step": 1,
    "mlp_only_layers": [],
    "vocab_size": 151936,
    "use_sliding_window": False,
    "sliding_window": None,
    "max_window_layers": 48,
    "tie_word_embeddings": False,
}
MISTRAL_7B_V01 = {
    "hidden_size": 4096,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "intermediate_size": 14336,
    "vocab_size": 32000,
    "sliding_window": 4096,
    "tie_word_embeddings": False,
}
GEMMA_2_9B = {  # its config.json predates layer_types: layers alternate sliding and full
    "hidden_size": 3584,
    "num_hidden_layers": 42,
    "num_attention_heads": 16,
    "num_key_value_heads": 8,
    "head_dim": 256,
    "intermediate_size": 14336,
    "vocab_size": 256000,
    "sliding_window": 4096,
    "tie_word_embeddings": True,
}
GEMMA_2_LAYERS = ["sliding_attention", "full_attention"] * 21
QWEN3_NEXT_80B_A3B = {
    "hidden_size": 2048,
    "num_hidden_layers": 48,
    "num_attention_heads": 16,
    "num_key_value_heads": 2,
    "head_dim": 256,
    "intermediate_size": 5120,
    "vocab_size": 151936,
    "full_attention_interval": 4,
    "num_experts": 512,
    "num_experts_per_tok": 10,
    "moe_intermediate_size": 512,
    "shared_expert_intermediate_size": 512,
    "decoder_sparse_step": 1,
    "mlp_only_layers": [],
    "linear_num_key_heads": 16,
    "linear_key_head_dim": 128,
    "linear_num_value_heads": 32,
    "linear_value_head_dim": 128,
    "linear_conv_kernel_dim": 4,
    "attn_output_gate": True,
    "tie_word_embeddings": False,
}
QWEN3_NEXT_LAYERS = (["linear_attention"] * 3 + ["full_attention"]) * 12


def parameter_counts(config: dict[str, Any]) -> dict[str, int]:
    """Parameters of a decoder-only model from its config, module by module.

    ``total``: every weight; ``active``: those one token uses (its routed experts only);
    ``embedding``: the input embedding table (a lookup, no FLOPs); ``left_out``: the
    weights a token does not multiply as a matrix (Qwen3-Next's short convolutions, a
    per-token term of the attention part, and its per-head decay and norm vectors).
    """
    h, n, vocab = config["hidden_size"], config["num_hidden_layers"], config["vocab_size"]
    n_q = config["num_attention_heads"]
    n_kv = _value(config, "num_key_value_heads", n_q)
    d = _value(config, "head_dim", h // n_q)
    kinds = config.get("layer_types") or ["full_attention"] * n
    experts = max(
        _value(config, name, 0) for name in ("num_experts", "n_routed_experts", "num_local_experts")
    )
    counts = {"total": 0, "active": 0, "embedding": vocab * h, "left_out": 0}
    for i, kind in enumerate(kinds):
        norms = 2 * h
        if kind == "linear_attention":
            n_k, d_k = config["linear_num_key_heads"], config["linear_key_head_dim"]
            n_v, d_v = config["linear_num_value_heads"], config["linear_value_head_dim"]
            query_key_value = h * (2 * n_k * d_k + n_v * d_v)
            output = n_v * d_v * h
            output_gate, decay_gates = h * n_v * d_v, h * 2 * n_v
            conv = (2 * n_k * d_k + n_v * d_v) * config["linear_conv_kernel_dim"]
            gates = output_gate + decay_gates + conv + 2 * n_v + d_v
            attention = query_key_value + output + gates
            counts["left_out"] += conv + 2 * n_v + d_v
        elif config.get("kv_lora_rank"):
            r_q, r_kv = _value(config, "q_lora_rank", 0), config["kv_lora_rank"]
            d_n, d_r = config["qk_nope_head_dim"], config["qk_rope_head_dim"]
            d_v = config["v_head_dim"]
            query = h * r_q + r_q + r_q * n_q * (d_n + d_r) if r_q else h * n_q * (d_n + d_r)
            attention = query + h * (r_kv + d_r) + r_kv + r_kv * n_q * (d_n + d_v) + n_q * d_v * h
        else:
            attention = h * n_q * d + 2 * h * n_kv * d + n_q * d * h
            if config.get("attn_output_gate"):
                attention += h * n_q * d
        dense_layer = (
            not experts
            or i < _value(config, "first_k_dense_replace", 0)
            or i in _value(config, "mlp_only_layers", [])
            or (i + 1) % _value(config, "decoder_sparse_step", 1)
        )
        if dense_layer:
            total = active = attention + norms + 3 * h * config["intermediate_size"]
        else:
            expert = (
                3 * h * _value(config, "moe_intermediate_size", config.get("intermediate_size"))
            )
            shared = (
                3
                * h
                * _value(
                    config,
                    "shared_expert_intermediate_size",
                    _value(config, "n_shared_experts", 0)
                    * _value(config, "moe_intermediate_size", 0),
                )
            )
            router = experts * h
            total = attention + norms + router + experts * expert + shared
            active = attention + norms + router + config["num_experts_per_tok"] * expert + shared
        counts["total"] += total
        counts["active"] += active
    head = 0 if config.get("tie_word_embeddings") else vocab * h
    for key in ("total", "active"):
        counts[key] += counts["embedding"] + head + h  # embedding, head, final norm
    return counts


# (name, config, layer_types override, the model card's total and active parameters)
MODEL_CARDS = [
    ("Llama-3-8B", LLAMA_3_8B, None, 8.03e9, 8.03e9),
    ("DeepSeek-V3", DEEPSEEK_V3, None, 671e9, 37e9),
    ("Qwen3-30B-A3B", QWEN3_30B_A3B, None, 30.5e9, 3.3e9),
    ("Mistral-7B-v0.1", MISTRAL_7B_V01, None, 7.24e9, 7.24e9),
    ("Gemma-2-9B", GEMMA_2_9B, GEMMA_2_LAYERS, 9.24e9, 9.24e9),
    ("Qwen3-Next-80B-A3B", QWEN3_NEXT_80B_A3B, QWEN3_NEXT_LAYERS, 80e9, None),
]


@pytest.mark.parametrize("name, config, layers, card_total, card_active", MODEL_CARDS)
def test_linear_flops_per_token_match_the_model_cards(
    name, config, layers, card_total, card_active
):
    overrides = {} if layers is None else {"layer_types": layers}
    counts = parameter_counts({**config, **overrides})
    # The transcription agrees with the model card (to the precision the card states).
    assert abs(counts["total"] / card_total - 1) < 0.01, counts
    if card_active is not None:
        assert abs(counts["active"] / card_active - 1) < 0.03, counts
    cost = ModelCost.from_config(config, **overrides)
    forward_linear = cost.per_token(1)["linear"] / 3
    # Every weight a token multiplies: all but the input embedding (a lookup), and the head
    # counted as a matmul even when it shares the embedding's weights.
    matmul = counts["active"] - counts["embedding"]
    if config.get("tie_word_embeddings"):
        matmul += counts["embedding"]
    assert abs(forward_linear / (2 * (matmul - counts["left_out"])) - 1) < 0.03
    assert cost.per_token(1)["linear"] == 3 * forward_linear


def test_llama_3_8b_is_about_15_gflops_forward_per_token():
    cost = ModelCost.from_config(LLAMA_3_8B)
    assert 14.9e9 < cost.per_token(1)["linear"] / 3 < 15.1e9
    assert cost.flops([1]) == [int(cost.per_token(1)["linear"] + cost.per_token(1)["attention"])]


def test_deepseek_v3_is_mla_with_three_dense_layers():
    cost = ModelCost.from_config(DEEPSEEK_V3)
    assert cost.moe_layers == tuple(range(3, 61))
    assert "multi-latent" in cost.describe()
    # Active parameters near 37B: about 2 x 37e9 forward FLOPs per token.
    assert 72e9 < cost.per_token(1)["linear"] / 3 < 76e9


def test_qwen3_next_counts_its_gates_and_leaves_out_only_the_convolutions_and_vectors():
    counts = parameter_counts({**QWEN3_NEXT_80B_A3B, "layer_types": QWEN3_NEXT_LAYERS})
    cost = ModelCost.from_config(QWEN3_NEXT_80B_A3B, layer_types=QWEN3_NEXT_LAYERS)
    modelled = counts["active"] - counts["embedding"] - counts["left_out"]
    # The remaining difference is the RMSNorm weights (2 per layer + 1 final, of h each).
    norms = (2 * 48 + 1) * 2048
    assert cost.per_token(1)["linear"] / 3 == 2 * (modelled - norms)


def test_sliding_window_costs_less_only_past_the_window():
    full = ModelCost.from_config(MISTRAL_7B_V01, sliding_window=None)
    sliding = ModelCost.from_config(MISTRAL_7B_V01)
    assert sliding.layer_types == ("sliding_attention",) * 32
    assert full.layer_types == ("full_attention",) * 32
    assert sliding.flops([1, 4095, 4096]) == full.flops([1, 4095, 4096])
    below = [
        a < b for a, b in zip(sliding.flops([4097, 32768]), full.flops([4097, 32768]), strict=True)
    ]
    assert below == [True, True]
    assert sliding.crossover_length() is None and full.crossover_length() is not None


def test_repr_is_readable_and_evaluates_to_the_same_cost():
    cost = ModelCost.from_config(QWEN3_NEXT_80B_A3B, layer_types=QWEN3_NEXT_LAYERS, recompute=True)
    text = repr(cost)
    assert "layer_types=['linear_attention', 'linear_attention', 'linear_attention', " in text
    assert "'full_attention'] * 12" in text
    assert text.endswith("recompute=True)")
    again = eval(text, {"ModelCost": ModelCost})
    lengths = [1, 1000, 100_000]
    assert again.flops(lengths) == cost.flops(lengths)
    assert repr(ModelCost.from_config(LLAMA_3_8B, include_head=False)) == (
        "ModelCost(hidden_size=4096, num_hidden_layers=32, num_attention_heads=32, "
        "num_key_value_heads=8, intermediate_size=14336, vocab_size=128256, include_head=False)"
    )


def test_describe_names_layers_mlps_and_the_crossover():
    text = ModelCost.from_config(QWEN3_NEXT_80B_A3B, layer_types=QWEN3_NEXT_LAYERS).describe()
    assert "48 layers (12 full attention, 36 linear attention)" in text
    assert "MoE MLPs" in text and "3 x forward" in text
    crossover = ModelCost.from_config(LLAMA_3_8B).crossover_length()
    assert crossover is not None
    assert f"from {crossover:,} tokens" in ModelCost.from_config(LLAMA_3_8B).describe()
    linear_only = ModelCost.from_config(
        QWEN3_NEXT_80B_A3B, layer_types=["linear_attention"] * 48, recompute=True
    )
    assert linear_only.crossover_length() is None
    assert "never" in linear_only.describe() and "4 x forward" in linear_only.describe()


# -- reading configs ------------------------------------------------------------------------

SMALL = {
    "hidden_size": 64,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "intermediate_size": 128,
    "vocab_size": 1000,
}
MOE = {**SMALL, "num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 32}
MLA = {
    **SMALL,
    "kv_lora_rank": 16,
    "qk_nope_head_dim": 8,
    "qk_rope_head_dim": 4,
    "v_head_dim": 8,
}
HYBRID = {
    **SMALL,
    "layer_types": ["linear_attention", "linear_attention", "sliding_attention", "full_attention"],
    "sliding_window": 32,
    "linear_num_key_heads": 2,
    "linear_key_head_dim": 8,
    "linear_num_value_heads": 4,
    "linear_value_head_dim": 8,
}


def _without(config: dict[str, Any], *names: str) -> dict[str, Any]:
    return {k: v for k, v in config.items() if k not in names}


# (config, overrides, the field the ValueError must name)
UNREADABLE = [
    pytest.param(_without(SMALL, "hidden_size"), {}, "hidden_size", id="no hidden_size"),
    pytest.param(
        _without(SMALL, "num_hidden_layers"), {}, "num_hidden_layers", id="no num_hidden_layers"
    ),
    pytest.param(
        _without(SMALL, "num_attention_heads"), {}, "num_attention_heads", id="no attention heads"
    ),
    pytest.param(_without(SMALL, "intermediate_size"), {}, "intermediate_size", id="no mlp"),
    pytest.param(
        _without(MOE, "intermediate_size"),
        {"first_k_dense_replace": 1},
        "intermediate_size",
        id="no dense mlp size",
    ),
    pytest.param(_without(SMALL, "vocab_size"), {}, "vocab_size", id="no vocab_size"),
    pytest.param(
        _without(HYBRID, "sliding_window"), {}, "sliding_window", id="sliding without window"
    ),
    pytest.param(
        SMALL,
        {"layer_types": ["full_attention"] * 3 + ["retention"]},
        "layer_types[3]",
        id="unknown",
    ),
    pytest.param(SMALL, {"layer_types": ["full_attention"] * 3}, "layer_types", id="3 of 4"),
    pytest.param(_without(MOE, "num_experts_per_tok"), {}, "num_experts_per_tok", id="no top-k"),
    pytest.param(MOE, {"num_experts_per_tok": 9}, "num_experts_per_tok", id="top-k > experts"),
    pytest.param(
        _without(MOE, "moe_intermediate_size", "intermediate_size"),
        {},
        "moe_intermediate_size",
        id="no expert size",
    ),
    pytest.param(
        _without(MOE, "moe_intermediate_size"),
        {"n_shared_experts": 1},
        "moe_intermediate_size",
        id="shared experts without size",
    ),
    pytest.param(MOE, {"n_routed_experts": 16}, "n_routed_experts", id="two expert counts"),
    *[
        pytest.param(_without(MLA, name), {}, name, id=f"MLA without {name}")
        for name in ("qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
    ],
    *[
        pytest.param(_without(HYBRID, name), {}, name, id=f"linear without {name}")
        for name in (
            "linear_num_key_heads",
            "linear_key_head_dim",
            "linear_num_value_heads",
            "linear_value_head_dim",
        )
    ],
    pytest.param(
        {**SMALL, "full_attention_interval": 4}, {}, "full_attention_interval", id="interval"
    ),
    pytest.param(
        {**SMALL, "use_sliding_window": True, "sliding_window": 64, "max_window_layers": 2},
        {},
        "max_window_layers",
        id="max_window_layers",
    ),
    pytest.param(
        {**SMALL, "sliding_window": 64, "sliding_window_pattern": 6},
        {},
        "sliding_window_pattern",
        id="sliding_window_pattern",
    ),
    pytest.param({**MOE, "moe_layer_freq": 2}, {}, "moe_layer_freq", id="moe_layer_freq"),
    pytest.param(
        {**MOE, "interleave_moe_layer_step": 1}, {}, "interleave_moe_layer_step", id="interleave"
    ),
    pytest.param({**SMALL, "attention_chunk_size": 8192}, {}, "attention_chunk_size", id="chunked"),
    pytest.param(HYBRID, {"causal": False}, "causal", id="bidirectional sliding"),
    pytest.param({**SMALL, "hidden_size": 0}, {}, "hidden_size", id="hidden_size 0"),
    pytest.param({**SMALL, "num_attention_heads": 128}, {}, "head_dim", id="head_dim 0"),
    pytest.param({**SMALL, "sliding_window": -1}, {}, "sliding_window", id="negative window"),
    pytest.param({**MOE, "mlp_only_layers": [1, -2]}, {}, "mlp_only_layers[1]", id="bad index"),
    pytest.param({**SMALL, "vocab_size": 2**63}, {}, "vocab_size", id="vocab over int64"),
]


@pytest.mark.parametrize("config, overrides, field", UNREADABLE)
def test_an_unreadable_config_is_a_value_error_naming_the_field(config, overrides, field):
    with pytest.raises(ValueError, match=re.escape(field)):
        ModelCost.from_config(config, **overrides)
    with pytest.raises(ValueError, match=re.escape(field)):
        ModelCost(**{**config, **overrides})


WRONG_TYPES = [
    pytest.param({"hidden_size": 64.0}, "hidden_size", id="float"),
    pytest.param({"hidden_size": True}, "hidden_size", id="bool"),
    pytest.param({"num_hidden_layers": "4"}, "num_hidden_layers", id="string"),
    pytest.param({"use_sliding_window": "yes"}, "use_sliding_window", id="use_sliding_window"),
    pytest.param({"layer_types": "full_attention"}, "layer_types", id="layer_types string"),
    pytest.param({"mlp_only_layers": 3}, "mlp_only_layers", id="mlp_only_layers int"),
    pytest.param({"gated_mlp": 1}, "gated_mlp", id="gated_mlp"),
    pytest.param({"causal": None}, "causal", id="causal"),
    pytest.param({"recompute": "no"}, "recompute", id="recompute"),
    pytest.param({"include_head": 0}, "include_head", id="include_head"),
]


@pytest.mark.parametrize("change, field", WRONG_TYPES)
def test_a_value_of_the_wrong_type_is_a_type_error_naming_it(change, field):
    with pytest.raises(TypeError, match=re.escape(field)):
        ModelCost(**{**SMALL, **change})


def test_a_flag_of_the_wrong_type_is_worded_as_every_flag_is():
    with pytest.raises(TypeError, match=r"^gated_mlp must be True or False, got 1 \(int\)$"):
        ModelCost(**{**SMALL, "gated_mlp": 1})
    with pytest.raises(TypeError, match=r"^use_sliding_window must be True or False, got 'no'"):
        ModelCost.from_config({**SMALL, "use_sliding_window": "no"})


def test_config_and_override_errors():
    with pytest.raises(TypeError, match="unknown override 'hidden'"):
        ModelCost.from_config(SMALL, hidden=3)
    for config in ("config.json", None, 42, [SMALL]):
        with pytest.raises(TypeError, match="config"):
            ModelCost.from_config(config)
    with pytest.raises(TypeError):
        ModelCost(64, 4)  # type: ignore[misc]  # keywords only


ACCEPTED = [
    pytest.param({**HYBRID, "full_attention_interval": 4}, id="interval beside layer_types"),
    pytest.param(
        {**SMALL, "use_sliding_window": False, "sliding_window": 4096, "max_window_layers": 28},
        id="Qwen2-style window switched off",
    ),
    pytest.param({**MOE, "moe_layer_freq": 1}, id="moe_layer_freq 1"),
    pytest.param(
        {**SMALL, "sliding_window_pattern": None, "attention_chunk_size": None}, id="null"
    ),
]


@pytest.mark.parametrize("config", ACCEPTED)
def test_fields_that_change_nothing_here_are_accepted(config):
    lengths = [1, 100, 5000]
    assert ModelCost.from_config(config).flops(lengths) == [
        oracle_flops(config, s, {}) for s in lengths
    ]


def test_null_counts_as_absent():
    lengths = [3, 300]
    for config in (SMALL, MOE, MLA, HYBRID):
        nulls = {
            "head_dim": None,
            "num_key_value_heads": None,
            "q_lora_rank": None,
            "first_k_dense_replace": None,
            "mlp_only_layers": None,
            "decoder_sparse_step": None,
            "shared_expert_intermediate_size": None,
            "n_shared_experts": None,
            "moe_layer_freq": None,
        }
        if "layer_types" not in config:
            nulls["sliding_window"] = None
        expected = ModelCost.from_config(config).flops(lengths)
        assert ModelCost.from_config({**config, **nulls}).flops(lengths) == expected
    # An override of None removes a field the config has.
    windowed = {**SMALL, "sliding_window": 8}
    assert ModelCost.from_config(windowed).layer_types == ("sliding_attention",) * 4
    assert (
        ModelCost.from_config(windowed, sliding_window=None).layer_types == ("full_attention",) * 4
    )
    assert (
        ModelCost.from_config(windowed, use_sliding_window=False).layer_types
        == ("full_attention",) * 4
    )


def test_head_dim_defaults_and_mla_ignores_it():
    assert ModelCost.from_config(SMALL).flops([10]) == ModelCost.from_config(
        SMALL, head_dim=16
    ).flops([10])
    assert ModelCost.from_config(SMALL, head_dim=32).flops([10]) != ModelCost.from_config(
        SMALL
    ).flops([10])
    assert ModelCost.from_config(MLA, head_dim=999).flops([10]) == ModelCost.from_config(MLA).flops(
        [10]
    )
    assert ModelCost.from_config(MLA, q_lora_rank=0).flops([10]) == ModelCost.from_config(
        MLA
    ).flops([10])


def test_which_layers_are_moe():
    config = {**MOE, "num_hidden_layers": 8}
    rules = {"first_k_dense_replace": 2, "mlp_only_layers": [4], "decoder_sparse_step": 2}
    assert ModelCost.from_config(config, **rules).moe_layers == (3, 5, 7)
    assert ModelCost.from_config(config).moe_layers == tuple(range(8))
    assert ModelCost.from_config(config, num_experts=0).moe_layers == ()
    for name in ("n_routed_experts", "num_local_experts"):
        renamed = {**_without(config, "num_experts"), name: 8}
        assert ModelCost.from_config(renamed).flops([7]) == ModelCost.from_config(config).flops([7])


def test_shared_expert_size_wins_over_the_count():
    both = {**MOE, "n_shared_experts": 2, "shared_expert_intermediate_size": 100}
    size_only = {**MOE, "shared_expert_intermediate_size": 100}
    count_only = {**MOE, "n_shared_experts": 2}
    assert ModelCost.from_config(both).flops([5]) == ModelCost.from_config(size_only).flops([5])
    assert ModelCost.from_config(both).flops([5]) != ModelCost.from_config(count_only).flops([5])
    h, layers = MOE["hidden_size"], MOE["num_hidden_layers"]
    no_shared = ModelCost.from_config(MOE).flops([1])[0]
    assert ModelCost.from_config(count_only).flops([1])[0] - no_shared == 3 * layers * 6 * h * 64


class _HFLikeConfig:
    """A stand-in for a transformers config: attributes, ``to_dict()``, an ``attribute_map``."""

    attribute_map = {"hidden_size": "n_embd"}

    def __init__(self, **fields: Any) -> None:
        for name, value in fields.items():
            setattr(self, self.attribute_map.get(name, name), value)

    def __getattr__(self, name: str) -> Any:
        if name in type(self).attribute_map:
            return getattr(self, type(self).attribute_map[name])
        raise AttributeError(name)

    def to_dict(self) -> dict[str, Any]:
        return {k: (v.to_dict() if hasattr(v, "to_dict") else v) for k, v in vars(self).items()}


@pytest.mark.parametrize("config", [SMALL, MOE, MLA, HYBRID])
def test_config_objects_read_like_mappings(config, monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)  # importing it would fail
    lengths = [1, 64, 1000]
    expected = ModelCost.from_config(config).flops(lengths)
    assert ModelCost.from_config(_HFLikeConfig(**config)).flops(lengths) == expected
    assert ModelCost.from_config(types.SimpleNamespace(**config)).flops(lengths) == expected
    # Multimodal: the text model's fields are under text_config (object or mapping).
    outer = {"vocab_size": 7, "hidden_size": 3, "vision_config": {"hidden_size": 1152}}
    assert ModelCost.from_config({**outer, "text_config": config}).flops(lengths) == expected
    nested = _HFLikeConfig(**outer, text_config=_HFLikeConfig(**config))
    assert ModelCost.from_config(nested).flops(lengths) == expected
    namespace = types.SimpleNamespace(**outer, text_config=types.SimpleNamespace(**config))
    assert ModelCost.from_config(namespace).flops(lengths) == expected
    assert ModelCost.from_config({**config, "text_config": None}).flops(lengths) == expected


# -- as a cost= -------------------------------------------------------------------------------

LENGTHS = [300, 200, 100, 400, 50, 250, 700, 20, 4000, 1000, 90, 3000]
SMALL_COST = ModelCost.from_config(SMALL)


def test_group_balanced_partitions_takes_it():
    uids = [0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5]
    weights = SMALL_COST(np.array(LENGTHS)).tolist()
    assert sb.group_balanced_partitions(
        LENGTHS, uids, 2, cost=SMALL_COST
    ) == sb.group_balanced_partitions(LENGTHS, uids, 2, cost=weights)


def test_the_sampler_takes_it():
    class Partition:
        def get_custom_meta(self, indexes):
            return {i: {"total_lengths": LENGTHS[i]} for i in indexes}

    sampler = sb.SeqlenBalancedSampler(n_samples_per_prompt=2, dp_size=3, cost=SMALL_COST)
    shares = [
        sampler(list(range(12)) if rank == 0 else [], 4, dp_rank=rank, batch_index=0,
                partition=Partition())[0]
        for rank in range(3)
    ]  # fmt: skip
    weights = SMALL_COST(np.array(LENGTHS))
    groups = [weights[2 * g] + weights[2 * g + 1] for g in range(6)]
    expected = sb.get_seqlen_balanced_partitions(groups, 3, equal_size=True)
    assert sorted(map(sorted, shares)) == sorted(
        sorted(i for g in part for i in (2 * g, 2 * g + 1)) for part in expected
    )


def test_integer_planners_take_its_exact_flops():
    # The micro-batch planners cap integer tokens and take integer costs today.
    exact = lambda lengths: SMALL_COST.flops(lengths)  # noqa: E731
    weights = SMALL_COST.flops(LENGTHS)
    assert sb.plan_dp_micro_batches(LENGTHS, 2, 5000, cost=exact) == sb.plan_dp_micro_batches(
        LENGTHS, 2, 5000, cost=weights
    )
    assert sb.plan_micro_batches(LENGTHS, 5000, cost=exact) == sb.plan_micro_batches(
        LENGTHS, 5000, cost=weights
    )
    assert sb.min_num_micro_batches_for(LENGTHS, 5000, cost=exact) == sb.min_num_micro_batches_for(
        LENGTHS, 5000, cost=weights
    )
    assert sb.plan_packed_steps(LENGTHS, 2, 2, 5000, cost=exact) == sb.plan_packed_steps(
        LENGTHS, 2, 2, 5000, cost=weights
    )


@pytest.mark.parametrize(
    "planner",
    [
        lambda cost: sb.plan_dp_micro_batches(LENGTHS, 2, 5000, cost=cost),
        lambda cost: sb.plan_micro_batches(LENGTHS, 5000, cost=cost),
        lambda cost: [sb.min_num_micro_batches_for(LENGTHS, 5000, cost=cost)],
        lambda cost: sb.plan_packed_steps(LENGTHS, 2, 2, 5000, cost=cost),
    ],
    ids=["plan_dp_micro_batches", "plan_micro_batches", "min_num_micro_batches_for", "packed"],
)
def test_micro_batch_planners_take_it(planner):
    # As its weights passed explicitly (float per-sample weights, the other half of that item).
    assert planner(SMALL_COST) == planner(SMALL_COST(np.array(LENGTHS)).tolist())


# -- the docs page ----------------------------------------------------------------------------

DOCS_PAGE = Path(__file__).resolve().parents[2] / "docs" / "model-costs.md"


def test_docs_page_examples_run_and_print_what_the_page_shows():
    # Every ```python block runs, in order, in one namespace (later blocks use earlier names);
    # a block followed by a ```text block prints exactly that. The one block that needs
    # transformers says so on its first line and is skipped.
    blocks = re.findall(r"^ *```(\w*)\n(.*?)^ *```", DOCS_PAGE.read_text(), flags=re.S | re.M)
    namespace: dict[str, Any] = {}
    ran = compared = 0
    for number, (language, body) in enumerate(blocks):
        if language != "python":
            continue
        code = textwrap.dedent(body)
        if code.startswith("# needs transformers"):
            continue
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(code, f"{DOCS_PAGE.name} block {number}", "exec"), namespace)
        ran += 1
        if number + 1 < len(blocks) and blocks[number + 1][0] == "text":
            shown = textwrap.dedent(blocks[number + 1][1])
            assert out.getvalue().strip() == shown.strip(), f"block {number}"
            compared += 1
    assert ran >= 6 and compared == ran


def test_docstring_examples():
    import doctest

    from seqbalance.costs import model as model_cost

    result = doctest.testmod(model_cost, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted >= 5 and result.failed == 0


def test_it_pickles_and_reprs_numpy_fields_as_ints():
    # Samplers travel to Ray actors (TransferQueue's controller) by pickle.
    import pickle

    numpy_config = {k: np.int64(v) for k, v in SMALL.items()}
    numpy_config["layer_types"] = list(np.array(["full_attention"] * 4))  # np.str_ items
    cost = ModelCost.from_config({**numpy_config, "mlp_only_layers": (np.int32(1),)})
    assert "np." not in repr(cost)
    assert "mlp_only_layers=[1]" in repr(cost)
    again = pickle.loads(pickle.dumps(cost))
    assert again.flops([5, 500]) == cost.flops([5, 500]) == ModelCost(**SMALL).flops([5, 500])
    assert repr(again) == repr(cost)
