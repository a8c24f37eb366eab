"""ModelCost.from_config on hand-written configs of the families it reads by model_type.

A stand-in for the integration job's zoo test (tests/integrations/test_model_cost_zoo.py), with
no torch: each config below is small, and the weights one token multiplies are written out
matrix by matrix from the family's modules (not from the implementation); the linear FLOPs
per token must be 6 times that exactly (2 per multiply-add, training = 3 x forward).
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from seqbalance import ModelCost
from seqbalance.costs.config import CONFIG_FIELDS

H, V = 16, 100  # hidden size and vocabulary of every config below
HEAD = H * V  # the output head


def _attention(n_q: int, n_kv: int, d: int, h: int = H) -> int:
    return h * n_q * d + 2 * h * n_kv * d + n_q * d * h  # q, k, v, o


def _gated(i: int, h: int = H) -> int:
    return 3 * h * i  # gate, up, down


def _plain(i: int, h: int = H) -> int:
    return 2 * h * i  # up, down


def _mamba2(d_in: int, heads: int, groups: int, state: int, h: int = H) -> int:
    # in_proj: z and x (d_in each), B and C (groups * state each), dt (one per head); out_proj
    return h * (2 * d_in + 2 * groups * state + heads) + d_in * h


BASE = {"hidden_size": H, "vocab_size": V, "num_attention_heads": 4, "num_key_value_heads": 2}

# (id, config, weights one token multiplies, layer kinds, MoE layers)
FAMILIES: list[tuple[str, dict[str, Any], int, list[str], list[int]]] = [
    (
        "gpt_neox: two matrices",
        {**BASE, "model_type": "gpt_neox", "num_hidden_layers": 2, "intermediate_size": 64},
        2 * (_attention(4, 2, 4) + _plain(64)) + HEAD,
        ["full_attention"] * 2,
        [],
    ),
    (
        "starcoder2: two matrices",
        {**BASE, "model_type": "starcoder2", "num_hidden_layers": 1, "intermediate_size": 48},
        _attention(4, 2, 4) + _plain(48) + HEAD,
        ["full_attention"],
        [],
    ),
    (
        "qwen2_moe: sliding_window 0 is off, shared expert",
        {
            **BASE, "model_type": "qwen2_moe", "num_hidden_layers": 2, "sliding_window": 0,
            "use_sliding_window": False, "intermediate_size": 64, "num_experts": 8,
            "num_experts_per_tok": 2, "moe_intermediate_size": 8,
            "shared_expert_intermediate_size": 32,
        },
        2 * (_attention(4, 2, 4) + H * 8 + 2 * _gated(8) + _gated(32)) + HEAD,
        ["full_attention"] * 2,
        [0, 1],
    ),
    (
        "afmoe: num_dense_layers, num_shared_experts, output gate",
        {
            **BASE, "model_type": "afmoe", "num_hidden_layers": 3, "head_dim": 8,
            "num_dense_layers": 1, "intermediate_size": 64, "num_experts": 8,
            "num_experts_per_tok": 2, "moe_intermediate_size": 8, "num_shared_experts": 2,
            "layer_types": ["sliding_attention", "sliding_attention", "full_attention"],
            "sliding_window": 4,
        },
        3 * (_attention(4, 2, 8) + H * 4 * 8)
        + _gated(64)
        + 2 * (H * 8 + 2 * _gated(8) + 2 * _gated(8))
        + HEAD,
        ["sliding_attention", "sliding_attention", "full_attention"],
        [1, 2],
    ),
    (
        "ernie4_5_moe: moe_ names, start and end index",
        {
            **BASE, "model_type": "ernie4_5_moe", "num_hidden_layers": 4, "intermediate_size": 64,
            "moe_num_experts": 8, "moe_k": 2, "moe_intermediate_size": 8,
            "moe_num_shared_experts": 1, "moe_layer_start_index": 1, "moe_layer_end_index": 2,
            "moe_layer_interval": 1,
        },
        4 * _attention(4, 2, 4) + 2 * _gated(64) + 2 * (H * 8 + 2 * _gated(8) + _gated(8)) + HEAD,
        ["full_attention"] * 4,
        [1, 2],
    ),
    (
        "hunyuan_v1_moe: every layer routed experts and one shared MLP",
        {
            **BASE, "model_type": "hunyuan_v1_moe", "num_hidden_layers": 2, "head_dim": 8,
            "intermediate_size": 32, "num_experts": 4, "moe_topk": [2, 2],
        },
        2 * (_attention(4, 2, 8) + H * 4 + 2 * _gated(32) + _gated(32)) + HEAD,
        ["full_attention"] * 2,
        [0, 1],
    ),
    (
        "hy_v3: mlp_layer_types, num_shared_experts",
        {
            **BASE, "model_type": "hy_v3", "num_hidden_layers": 2, "intermediate_size": 64,
            "num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 8,
            "num_shared_experts": 1, "mlp_layer_types": ["dense", "sparse"],
        },
        2 * _attention(4, 2, 4) + _gated(64) + H * 8 + 2 * _gated(8) + _gated(8) + HEAD,
        ["full_attention"] * 2,
        [1],
    ),
    (
        "doge dense: is_moe false leaves the expert fields unread",
        {
            **BASE, "model_type": "doge", "num_hidden_layers": 2, "intermediate_size": 32,
            "is_moe": False, "num_experts": 16384, "num_experts_per_tok": 64,
        },
        2 * (_attention(4, 2, 4) + _gated(32)) + HEAD,
        ["full_attention"] * 2,
        [],
    ),
    (
        "doge MoE: dense MLP, product-key router, one-neuron experts",
        {
            **BASE, "model_type": "doge", "num_hidden_layers": 2, "intermediate_size": 32,
            "is_moe": True, "num_experts": 16, "num_experts_per_tok": 4,
        },
        # router over 2 * sqrt(16) keys; each expert a row in (h) and a row out (h). Doge's
        # dynamic-mask projection (n_kv * d -> n_kv) is a documented omission.
        2 * (_attention(4, 2, 4) + _gated(32) + H * 2 * 4 + 4 * 2 * H) + HEAD,
        ["full_attention"] * 2,
        [0, 1],
    ),
    (
        "jetmoe: mixture of attention heads and of MLPs",
        {
            **BASE, "model_type": "jetmoe", "num_hidden_layers": 2, "kv_channels": 4,
            "num_local_experts": 4, "num_experts_per_tok": 2, "intermediate_size": 8,
        },
        # attention: 2 query experts h -> 2 * 4 and 2 output experts back, shared keys and
        # values h -> 2 * 2 * 4 (its router, h x 4, is a documented omission); MLP: router
        # h x 4, 2 experts of a gated 8-wide MLP.
        2 * (2 * (H * 8 + 8 * H) + H * 16 + H * 4 + 2 * (H * 16 + 8 * H)) + HEAD,
        ["full_attention"] * 2,
        [0, 1],
    ),
    (
        "lfm2: conv layers, MLP size adjusted",
        {
            **BASE, "model_type": "lfm2", "num_hidden_layers": 3, "intermediate_size": 96,
            "block_auto_adjust_ff_dim": True, "block_ffn_dim_multiplier": 1.0,
            "block_multiple_of": 16, "conv_L_cache": 3, "full_attn_idxs": [1],
        },
        # MLP: int(2 * 96 / 3) = 64, times 1.0, rounded up to 16: 64. conv: in 3h, out h.
        3 * _gated(64) + 2 * (H * 3 * H + H * H) + _attention(4, 2, 4) + HEAD,
        ["conv", "full_attention", "conv"],
        [],
    ),
    (
        "gemma4_text: global_head_dim, per-layer inputs",
        {
            **BASE, "model_type": "gemma4_text", "num_hidden_layers": 2, "head_dim": 4,
            "global_head_dim": 8, "intermediate_size": 32, "sliding_window": 8,
            "layer_types": ["sliding_attention", "full_attention"],
            "hidden_size_per_layer_input": 2,
        },
        # per-layer inputs: h -> 2 per layer once, then a gate and a projection per layer
        _attention(4, 2, 4) + _attention(4, 2, 8) + 2 * _gated(32) + H * 2 * 2 + 2 * 2 * H * 2
        + HEAD,
        ["sliding_attention", "full_attention"],
        [],
    ),
    (
        "qwen3_next: output gate, Gated DeltaNet's gates",
        {
            **BASE, "model_type": "qwen3_next", "num_hidden_layers": 2, "head_dim": 4,
            "layer_types": ["linear_attention", "full_attention"], "intermediate_size": 32,
            "linear_num_key_heads": 2, "linear_key_head_dim": 4, "linear_num_value_heads": 4,
            "linear_value_head_dim": 4, "linear_conv_kernel_dim": 4, "mlp_only_layers": [0, 1],
        },
        # q, k (2 x 4), v, z (4 x 4), a, b (one per value head); out 16 -> h
        H * (8 + 8 + 16 + 16 + 4 + 4) + 16 * H + _attention(4, 2, 4) + H * 16 + 2 * _gated(32)
        + HEAD,
        ["linear_attention", "full_attention"],
        [],
    ),
    (
        "jamba: Mamba-1 layers, attention and MoE by period",
        {
            **BASE, "model_type": "jamba", "num_hidden_layers": 4, "intermediate_size": 32,
            "num_experts": 4, "num_experts_per_tok": 2, "attn_layer_period": 4,
            "attn_layer_offset": 2, "expert_layer_period": 2, "expert_layer_offset": 1,
            "mamba_d_state": 4, "mamba_d_conv": 4, "mamba_expand": 2, "mamba_dt_rank": "auto",
        },
        # Mamba-1, d_in 32, dt rank ceil(16 / 16) = 1: in 2 * d_in, x_proj to 1 + 2 * 4,
        # dt_proj back to d_in, out to h
        3 * (H * 64 + 32 * 9 + 1 * 32 + 32 * H)
        + _attention(4, 2, 4)
        + 2 * _gated(32)
        + 2 * (H * 4 + 2 * _gated(32))
        + HEAD,
        ["mamba", "mamba", "full_attention", "mamba"],
        [1, 3],
    ),
    (
        "bamba: Mamba-2 layers, attention at attn_layer_indices",
        {
            **BASE, "model_type": "bamba", "num_hidden_layers": 3, "intermediate_size": 32,
            "attn_layer_indices": [1], "mamba_n_heads": 4, "mamba_d_head": 8,
            "mamba_n_groups": 1, "mamba_d_state": 8, "mamba_d_conv": 4, "mamba_expand": 2,
        },
        2 * _mamba2(32, 4, 1, 8) + _attention(4, 2, 4) + 3 * _gated(32) + HEAD,
        ["mamba", "full_attention", "mamba"],
        [],
    ),
    (
        "falcon_h1: attention and a Mamba-2 mixer side by side",
        {
            **BASE, "model_type": "falcon_h1", "num_hidden_layers": 2, "head_dim": 4,
            "intermediate_size": 32, "mamba_d_ssm": 24, "mamba_n_heads": 3, "mamba_d_head": 8,
            "mamba_n_groups": 1, "mamba_d_state": 4, "mamba_d_conv": 4, "mamba_expand": 2,
        },
        2 * (_attention(4, 2, 4) + _mamba2(24, 3, 1, 4) + _gated(32)) + HEAD,
        ["full_attention"] * 2,
        [],
    ),
    (
        "nemotron_h: one block per layer, relu2 MLPs",
        {
            **BASE, "model_type": "nemotron_h", "head_dim": 4,
            "layers_block_type": ["mamba", "moe", "attention", "mlp"], "intermediate_size": 32,
            "mamba_num_heads": 4, "mamba_head_dim": 8, "n_groups": 2, "ssm_state_size": 4,
            "conv_kernel": 4, "n_routed_experts": 4, "num_experts_per_tok": 2,
            "moe_intermediate_size": 8, "n_shared_experts": 1,
            "moe_shared_expert_intermediate_size": 16,
        },
        _mamba2(32, 4, 2, 4) + H * 4 + 2 * _plain(8) + _plain(16) + _attention(4, 2, 4)
        + _plain(32) + HEAD,
        ["mamba", "mlp", "full_attention", "mlp"],
        [1],
    ),
    (
        "mamba: Mamba-1 only",
        {
            "model_type": "mamba", "hidden_size": H, "vocab_size": V, "num_hidden_layers": 2,
            "intermediate_size": 32, "state_size": 4, "conv_kernel": 4, "time_step_rank": 2,
        },
        2 * (H * 64 + 32 * (2 + 8) + 2 * 32 + 32 * H) + HEAD,
        ["mamba"] * 2,
        [],
    ),
]  # fmt: skip


@pytest.mark.parametrize(
    "config, weights, kinds, moe", [case[1:] for case in FAMILIES], ids=[c[0] for c in FAMILIES]
)
def test_each_family_counts_the_weights_a_token_multiplies(config, weights, kinds, moe):
    cost = ModelCost.from_config(config)
    assert cost.per_token(1)["linear"] == 6 * weights
    assert list(cost.layer_types) == kinds
    assert list(cost.moe_layers) == moe


class _Object:
    """A config object whose to_dict() is its fields, and whose attributes follow an
    attribute_map as Hugging Face configs do."""

    def __init__(self, fields: dict[str, Any], attribute_map: dict[str, str]) -> None:
        self._fields = fields
        self._map = attribute_map

    def to_dict(self) -> dict[str, Any]:
        return dict(self._fields)

    def __getattr__(self, name: str) -> Any:
        name = self.__dict__["_map"].get(name, name)
        try:
            return self.__dict__["_fields"][name]
        except KeyError:
            raise AttributeError(name) from None


@pytest.mark.parametrize(
    "family, attribute_map",
    [
        ("ernie4_5_moe: moe_ names", {"num_experts": "moe_num_experts", "num_experts_per_tok": "moe_k"}),
        ("hunyuan_v1_moe: every layer routed experts and one shared MLP", {"num_experts_per_tok": "moe_topk"}),
        ("nemotron_h: one block per layer, relu2 MLPs", {"layer_types": "layers_block_type"}),
    ],
)  # fmt: skip
def test_a_config_object_and_its_dict_agree(family, attribute_map):
    config = next(case[1] for case in FAMILIES if case[0].startswith(family.split(":")[0]))
    from_object = ModelCost.from_config(_Object(config, attribute_map))
    from_dict = ModelCost.from_config(config)
    assert from_object.flops([1, 1000]) == from_dict.flops([1, 1000])
    assert from_object.moe_layers == from_dict.moe_layers


SMALL = {**BASE, "num_hidden_layers": 2, "intermediate_size": 32}
LFM2_MOE = {
    "model_type": "lfm2_moe", "conv_L_cache": 3, "num_experts": 4, "num_experts_per_tok": 2,
    "moe_intermediate_size": 8, "num_dense_layers": 1,
}  # fmt: skip
REFUSED = [
    ({**SMALL, "model_type": "bert"}, "model_type"),
    ({**SMALL, "model_type": "zamba2"}, "model_type"),
    ({**SMALL, "model_type": "glm_moe_dsa", "index_topk": 8}, "index_topk"),
    ({**SMALL, "model_type": "doge", "is_moe": True}, "num_experts"),
    ({**SMALL, "model_type": "jetmoe", "num_experts_per_tok": 3, "num_local_experts": 4}, "num_attention_heads"),
    ({**SMALL, "model_type": "hunyuan_v1_moe", "num_experts": 4, "moe_topk": [1, 2]}, "moe_topk"),
    ({**SMALL, "num_attention_heads_per_layer": [4, 8]}, "num_attention_heads_per_layer"),
    ({**SMALL, "model_type": "gemma4_text", "attention_k_eq_v": True}, "attention_k_eq_v"),
    ({**SMALL, "model_type": "nemotron_h", "layers_block_type": ["mamba", "x"]}, "layers_block_type[1]"),
    ({**SMALL, "model_type": "jamba", "attn_layer_period": 0}, "attn_layer_period"),
    ({**SMALL, "moe_layer_start_index": 1, "moe_layer_interval": 0}, "moe_layer_interval"),
    ({**SMALL, "layer_types": ["mamba", "mamba"]}, "mamba_n_heads"),
    ({**SMALL, "layer_types": ["conv", "full_attention"]}, "conv_L_cache"),
    ({**SMALL, "mlp_layer_types": ["dense", "moe"]}, "mlp_layer_types[1]"),
    ({**SMALL, "mlp_layer_types": ["dense", "sparse"]}, "num_experts"),
    ({**SMALL, "num_hidden_layers": 2**63 - 1}, "num_hidden_layers"),
    ({**SMALL, "attn_layer_period": 8, "mamba_d_state": 16}, "attn_layer_period"),
    ({**SMALL, "model_type": "llama", "layers_block_type": ["mamba"] * 2}, "layers_block_type"),
    ({**SMALL, "num_hidden_layers": 100_001}, "num_hidden_layers"),
    # transformers' Lfm2MoeConfig() default: LFM2 mixes convolution and attention layers, and
    # its MoE config reads no full_attn_idxs, so only layer_types says which layer is which.
    ({**SMALL, **LFM2_MOE, "layer_types": None}, "layer_types"),
    ({**SMALL, **LFM2_MOE, "full_attn_idxs": [1]}, "layer_types"),
]  # fmt: skip


@pytest.mark.parametrize("config, field", REFUSED, ids=[field for _, field in REFUSED])
def test_what_it_cannot_model_is_a_value_error_naming_the_field(config, field):
    with pytest.raises(ValueError, match=re.escape(field)):
        ModelCost.from_config(config)


@pytest.mark.parametrize("case", FAMILIES, ids=[case[0] for case in FAMILIES])
def test_huge_layer_counts_are_refused_by_name_in_every_family(case):
    config = {**case[1], "num_hidden_layers": 2**63 - 1}
    config.pop("layers_block_type", None)  # NemotronH counts its blocks instead
    if "layer_types" in config or "mlp_layer_types" in config:
        config.pop("layer_types", None)
        config.pop("mlp_layer_types", None)
    with pytest.raises(ValueError, match="num_hidden_layers|layers_block_type"):
        ModelCost.from_config(config)


def test_huge_layer_counts_are_refused_before_anything_is_allocated():
    # 2**63 - 1 layers once raised a bare MemoryError building the layer list.
    with pytest.raises(
        ValueError, match=r"num_hidden_layers must be <= 100,000, got 9223372036854775807"
    ):
        ModelCost(
            hidden_size=8, num_hidden_layers=2**63 - 1, num_attention_heads=2, intermediate_size=8
        )
    assert (
        ModelCost.from_config({**SMALL, "num_hidden_layers": 100_000}).layer_types[-1]
        == "full_attention"
    )


def test_nemotron_h_reads_the_older_pattern_string():
    config = next(case[1] for case in FAMILIES if case[0].startswith("nemotron_h"))
    older = {**config, "hybrid_override_pattern": "ME*-"}
    del older["layers_block_type"]
    assert ModelCost.from_config(older).flops([5, 900]) == ModelCost.from_config(config).flops(
        [5, 900]
    )
    with pytest.raises(ValueError, match=re.escape("layers_block_type[1]")):
        ModelCost.from_config({**older, "hybrid_override_pattern": "M?"})


def test_sliding_window_zero_means_none_only_from_a_config():
    on = ModelCost.from_config({**SMALL, "sliding_window": 4})
    off = ModelCost.from_config({**SMALL, "sliding_window": 0})
    assert on.layer_types == ("sliding_attention",) * 2
    assert off.layer_types == ("full_attention",) * 2
    with pytest.raises(ValueError, match="sliding_window must be >= 1, got 0"):
        ModelCost(**SMALL, sliding_window=0)


def test_a_mapping_without_model_type_is_gated_and_describe_says_it_assumed_so():
    assumed = ModelCost.from_config(SMALL)
    assert "gated: assumed, the config has no model_type" in assumed.describe()
    assert "assumed" not in ModelCost.from_config({**SMALL, "model_type": "llama"}).describe()
    assert "assumed" not in ModelCost.from_config(SMALL, gated_mlp=True).describe()
    plain = ModelCost.from_config({**SMALL, "model_type": "phi"})
    assert plain.per_token(1)["linear"] == 6 * (2 * (_attention(4, 2, 4) + _plain(32)) + HEAD)
    assert "not gated" in plain.describe()


def test_ssm_and_conv_layers_cost_per_token_under_attention():
    config = next(case[1] for case in FAMILIES if case[0].startswith("bamba"))
    cost = ModelCost.from_config(config, layer_types=["mamba"] * 3)
    # scan 4 * d_in * state, convolution 2 * (d_in + 2 * groups * state) * kernel, per token
    per_token = 3 * (3 * (4 * 32 * 8 + 2 * (32 + 2 * 8) * 4))
    assert cost.per_token(1)["attention"] == per_token
    assert cost.per_token(5000)["attention"] == per_token
    assert cost.crossover_length() is None
    lfm2 = next(case[1] for case in FAMILIES if case[0].startswith("lfm2"))
    conv_only = ModelCost.from_config(lfm2, layer_types=["conv"] * 3)
    assert conv_only.per_token(7)["attention"] == 3 * 3 * (2 * H * 3)


@pytest.mark.parametrize("case", FAMILIES, ids=[case[0] for case in FAMILIES])
def test_repr_evaluates_to_the_same_cost_without_the_model_type(case):
    cost = ModelCost.from_config(case[1])
    again = eval(repr(cost), {"ModelCost": ModelCost})
    assert again.flops([1, 77, 5000]) == cost.flops([1, 77, 5000])
    assert again.layer_types == cost.layer_types
    assert again.moe_layers == cost.moe_layers


JUNK = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 3),
    st.just(2**63 - 1),
    st.floats(allow_nan=True),
    st.text(max_size=3),
    st.lists(
        st.one_of(st.integers(-2, 5), st.text(max_size=2), st.lists(st.none(), max_size=1)),
        max_size=4,
    ),
    st.dictionaries(st.text(max_size=2), st.integers(), max_size=2),
)


@given(st.data())
def test_any_bad_value_of_any_field_is_a_type_or_value_error_naming_a_field(data):
    name, config, *_ = data.draw(st.sampled_from(FAMILIES))
    field = data.draw(st.sampled_from(sorted(config)))
    bad = {**config, field: data.draw(JUNK)}
    try:
        cost = ModelCost.from_config(bad)
    except (TypeError, ValueError) as error:
        message = str(error)
        # a field of the config, or one ModelCost takes that the config lacks
        assert any(key in message for key in (*bad, *CONFIG_FIELDS)), message
    else:
        assert all(value >= 0 for value in cost.flops([0, 1, 100]))


def test_describe_counts_ssm_conv_and_mlp_only_layers():
    def first_line(prefix: str) -> str:
        config = next(case[1] for case in FAMILIES if case[0].startswith(prefix))
        return ModelCost.from_config(config).describe().splitlines()[0]

    assert first_line("nemotron_h") == (
        "ModelCost: 4 layers (1 full attention, 1 mamba, 2 mlp), 1 MoE and 1 dense MLPs, "
        "2 layers without one (not gated); training = 3 x forward"
    )
    assert first_line("mamba") == "ModelCost: 2 layers (2 mamba), no MLPs; training = 3 x forward"
    assert first_line("lfm2").startswith("ModelCost: 3 layers (1 full attention, 2 conv), dense")


def test_lfm2_moe_is_modelled_once_its_layer_types_are_given():
    config = {**SMALL, **LFM2_MOE, "layer_types": ["conv", "full_attention"]}
    cost = ModelCost.from_config(config)
    assert cost.layer_types == ("conv", "full_attention")
    assert ModelCost.from_config(
        {**SMALL, **LFM2_MOE}, layer_types=["conv", "conv"]
    ).layer_types == (
        "conv",
        "conv",
    )


@pytest.mark.parametrize(
    ("indexes", "kinds"),
    [
        (None, ["full_attention"] * 3),  # Lfm2Config(): every layer attends, as its model builds
        ([1], ["conv", "full_attention", "conv"]),
    ],
)
def test_lfm2_with_null_layer_types_reads_full_attn_idxs_as_transformers_does(indexes, kinds):
    config = {**BASE, "model_type": "lfm2", "num_hidden_layers": 3, "intermediate_size": 32,
              "conv_L_cache": 3, "layer_types": None, "full_attn_idxs": indexes}  # fmt: skip
    assert list(ModelCost.from_config(config).layer_types) == kinds


@pytest.mark.integration
def test_transformers_default_lfm2_configs():
    transformers = pytest.importorskip("transformers")
    moe = transformers.Lfm2MoeConfig()
    assert moe.layer_types is None  # the default this refusal is about
    for config in (moe, moe.to_dict()):
        with pytest.raises(ValueError, match=r"layer_types=None"):
            ModelCost.from_config(config)
    dense = transformers.Lfm2Config()
    cost = ModelCost.from_config(dense)
    assert list(cost.layer_types) == list(dense.layer_types) == ["full_attention"] * 32
    dropped = {**dense.to_dict(), "layer_types": None, "full_attn_idxs": None}
    assert ModelCost.from_config(dropped).flops([1, 1000]) == cost.flops([1, 1000])


def test_layer_types_passed_as_an_override_answers_a_refused_layer_pattern():
    # The refusals say "pass layer_types=": passing it to from_config is enough.
    hybrid = {**SMALL, "attn_layer_period": 8, "mamba_d_state": 16}
    with pytest.raises(ValueError, match="attn_layer_period"):
        ModelCost.from_config(hybrid)
    cost = ModelCost.from_config(hybrid, layer_types=["full_attention"] * 2)
    assert cost.layer_types == ("full_attention", "full_attention")
