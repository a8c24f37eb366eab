"""ModelCost against verl's own FLOPs counter (``verl.utils.flops_counter.FlopsCounter``).

Both count training FLOPs (3 x forward, 2 per multiply-add). Where both are right they are
equal; every difference is one of the known terms, asserted exactly:

- embedding: verl counts the input embedding as a matmul (``6 * V * h`` per token), ModelCost
  does not (a lookup);
- diagonal: verl's causal attention is ``L**2 / 2`` pairs, ModelCost's ``L * (L + 1) / 2`` (a
  token attends to itself);
- sliding windows: verl ignores Mistral's window, and counts Gemma 3's sliding layers as
  ``L * min(L, w) / 2`` pairs where a causal window has ``w*(w+1)/2 + (L-w)*w``;
- shared experts: verl leaves out Qwen2-MoE's shared expert;
- gates: verl counts Qwen3.5's shared-expert gate (``h`` weights) and 15 FLOPs per Gated
  DeltaNet state entry where ModelCost counts 12 (update and readout);
- head size: verl's Qwen3-VL uses ``hidden_size // num_attention_heads`` for ``head_dim``.
"""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = pytest.mark.integration

pytest.importorskip("torch", reason="verl's flops counter imports torch")
transformers = pytest.importorskip("transformers", reason="the configs are transformers'")
flops_counter = pytest.importorskip(
    "verl.utils.flops_counter", reason="verl is not installed: pip install --no-deps verl"
)

from seqbalance import ModelCost  # noqa: E402

LENGTHS = [1, 17, 300, 4096, 9000]
T = sum(LENGTHS)


@pytest.fixture(autouse=True)
def _no_device(monkeypatch):
    """FlopsCounter also asks the GPU for its peak FLOPs; there is none here (not compared)."""
    monkeypatch.setattr(flops_counter, "get_device_flops", lambda *args, **kwargs: 0.0)


def verl(config: Any, lengths: list[int] = LENGTHS) -> float:
    achieved, _ = flops_counter.FlopsCounter(config).estimate_flops(lengths, 1.0)
    return achieved * 1e12


def ours(config: Any, lengths: list[int] = LENGTHS, **overrides: Any) -> int:
    return sum(ModelCost.from_config(config, **overrides).flops(lengths))


def embedding(text: Any) -> int:
    return 6 * text.vocab_size * text.hidden_size * T


def diagonal(heads: int, head_dim: int, layers: int) -> int:
    """Training FLOPs of the ``L`` diagonal pairs (4 per head dim, times 3)."""
    return 12 * heads * head_dim * layers * T // 2


def window_pairs(length: int, window: int) -> int:
    if length <= window:
        return length * (length + 1) // 2
    return window * (window + 1) // 2 + (length - window) * window


def _config(family: str, **fields: Any) -> Any:
    return transformers.CONFIG_MAPPING[family](**fields)


@pytest.mark.parametrize(
    "family, fields",
    [
        ("llama", {"num_hidden_layers": 4}),
        ("qwen2", {"num_hidden_layers": 4}),
        ("qwen3", {"num_hidden_layers": 4, "head_dim": 128, "hidden_size": 2560}),
        ("qwen3_moe", {"num_hidden_layers": 4}),
    ],
)
def test_equal_up_to_the_embedding_and_the_diagonal(family, fields):
    config = _config(family, **fields)
    d = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    expected = ours(config) + embedding(config)
    expected -= diagonal(config.num_attention_heads, d, config.num_hidden_layers)
    assert verl(config) == pytest.approx(expected, rel=1e-12)


def test_deepseek_v3_mla_equal_up_to_the_embedding_and_the_diagonal():
    config = _config("deepseek_v3", num_hidden_layers=5, first_k_dense_replace=2)
    n, q = config.num_attention_heads, config.qk_nope_head_dim + config.qk_rope_head_dim
    # MLA: (q + v) per pair and head instead of 2 * d
    diag = 3 * n * (q + config.v_head_dim) * config.num_hidden_layers * T
    assert verl(config) == pytest.approx(ours(config) + embedding(config) - diag, rel=1e-12)


def test_qwen2_moe_verl_leaves_out_the_shared_expert():
    config = _config("qwen2_moe", num_hidden_layers=4)
    d = config.hidden_size // config.num_attention_heads
    shared = 18 * config.hidden_size * config.shared_expert_intermediate_size * 4 * T
    expected = ours(config) + embedding(config) - diagonal(config.num_attention_heads, d, 4)
    assert verl(config) == pytest.approx(expected - shared, rel=1e-12)


def test_mistral_verl_ignores_the_sliding_window():
    config = _config("mistral", num_hidden_layers=4, sliding_window=4096)
    n, d = config.num_attention_heads, config.head_dim or config.hidden_size // 32
    beyond = sum(
        12 * n * d * 4 * (length * (length + 1) // 2 - window_pairs(length, 4096))
        for length in LENGTHS
    )
    assert beyond > 0  # the 9000-token sequence is past the window
    expected = ours(config) + embedding(config) - diagonal(n, d, 4) + beyond
    assert verl(config) == pytest.approx(expected, rel=1e-12)


def test_gemma3_sliding_layers_are_half_a_window_in_verl():
    config = _config("gemma3_text", num_hidden_layers=6, sliding_window=512)
    n, d, w = config.num_attention_heads, config.head_dim, config.sliding_window
    kinds = config.layer_types
    n_full = kinds.count("full_attention")
    sliding = sum(
        6 * n * d * (2 * window_pairs(length, w) - length * min(length, w))
        for length in LENGTHS
        for kind in kinds
        if kind == "sliding_attention"
    )
    expected = ours(config) + embedding(config) - diagonal(n, d, n_full) - sliding
    assert verl(config) == pytest.approx(expected, rel=1e-12)


def test_qwen3_5_moe_verl_adds_the_shared_expert_gate_and_a_costlier_recurrence():
    config = _config("qwen3_5_moe")
    text = config.text_config
    text.num_hidden_layers = 8
    text.layer_types = ["linear_attention"] * 3 + ["full_attention"]
    text.layer_types = text.layer_types * 2
    n_linear = text.layer_types.count("linear_attention")
    gate = 6 * text.hidden_size * text.num_hidden_layers * T
    recurrence = (
        (3 * text.linear_key_head_dim * text.linear_value_head_dim * text.linear_num_value_heads)
        * n_linear
        * T
    )
    expected = ours(config) + embedding(text) - diagonal(text.num_attention_heads, text.head_dim, 2)
    assert verl(config) == pytest.approx(expected + gate + recurrence, rel=1e-12)


def test_qwen3_vl_verl_takes_the_head_size_from_the_hidden_size():
    config = _config(
        "qwen3_vl",
        text_config={"hidden_size": 2560, "num_attention_heads": 32, "num_key_value_heads": 8,
                     "head_dim": 128, "num_hidden_layers": 4, "intermediate_size": 9728},
    )  # fmt: skip
    text = config.text_config
    verl_head = text.hidden_size // text.num_attention_heads  # 80, where the model has 128
    as_verl = ours(config, head_dim=verl_head) + embedding(text)
    as_verl -= diagonal(text.num_attention_heads, verl_head, 4)
    assert verl(config) == pytest.approx(as_verl, rel=1e-12)
    assert ours(config) > ours(config, head_dim=verl_head)  # the model's 128 costs more
