"""ModelCost against every decoder config class transformers ships (the integration job).

For each family of ``MODEL_FOR_CAUSAL_LM_MAPPING_NAMES``, the default config (plus the
variants below) is either modelled or refused:

- modelled: the model built on torch's meta device (no weights) is walked module by module and
  the weights a token multiplies are counted (every ``nn.Linear``; routed experts times
  top_k / experts; 2-D weights such as routers; not embeddings, convolutions, biases or the
  SSMs' elementwise parameters); ``ModelCost``'s linear FLOPs per token must be 6 times that
  within 1 %; the layer kinds must match the layers the model built, and the MoE layers the
  layers that hold experts; the config object and its ``to_dict()`` must give the same cost;
- refused: a ``ValueError`` whose message names a field of the config.

A family that is neither fails with its name. Families that cannot be checked here are listed
in ``NOT_BUILT`` with the reason; there are no other skips.
"""

from __future__ import annotations

import re
import warnings
from typing import Any

import pytest

pytestmark = pytest.mark.integration

torch = pytest.importorskip(
    "torch", reason="the model zoo test builds models on torch's meta device"
)
transformers = pytest.importorskip(
    "transformers", reason="the model zoo test walks transformers' configs"
)

from torch import nn  # noqa: E402
from transformers.models.auto.configuration_auto import CONFIG_MAPPING  # noqa: E402
from transformers.models.auto.modeling_auto import (  # noqa: E402
    MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
)

from seqbalance import ModelCost  # noqa: E402
from seqbalance.costs.config import CONFIG_FIELDS  # noqa: E402

FAMILIES = sorted(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)

# Fields that make a default config buildable or exercise the family's layer kinds; every
# entry says why. Applied as config constructor arguments.
CONFIG_FIXES: dict[str, dict[str, Any]] = {
    # head_dim defaults to None and the model then fails to build; real configs set it.
    "hunyuan_v1_dense": {"head_dim": 128},
    "hunyuan_v1_moe": {"head_dim": 128, "num_experts": 8, "moe_topk": 2},
    "ministral": {"head_dim": 128},
    # num_key_value_heads defaults to None and the attention fails to build.
    "nemotron": {"head_dim": 128, "num_key_value_heads": 8},
    # num_experts_per_tok defaults to None (DeepSeek-V2: 6 of 160 experts per token).
    "deepseek_v2": {"num_experts_per_tok": 6},
    # the expert fields default to None (dots.llm1: 128 experts, 6 per token, 2 shared).
    "dots1": {"n_routed_experts": 128, "num_experts_per_tok": 6, "n_shared_experts": 2},
    # lfm2's default has no convolution layers; LFM2-1.2B's pattern has both kinds.
    "lfm2": {"num_hidden_layers": 6, "full_attn_idxs": [2, 5]},
    # bamba's default has no attention layer; Bamba-9B puts attention at 9, 18, 27.
    "bamba": {"attn_layer_indices": [1, 3]},
    "doge": {"is_moe": False},  # its MoE form is a variant below
    # lfm2_moe's default leaves layer_types None and the model fails to build.
    "lfm2_moe": {"num_hidden_layers": 4, "layer_types": ["conv", "full_attention"] * 2},
}
# Second configs of a family, for layer kinds or MLPs its first config does not have.
VARIANTS: list[tuple[str, dict[str, Any]]] = [
    # Doge's cross-domain MoE: 16,384 one-neuron experts by default (shrunk for speed).
    (
        "doge",
        {"is_moe": True, "num_experts": 1024, "num_experts_per_tok": 16, "num_hidden_layers": 4},
    ),
    # Jamba without experts: every layer dense.
    ("jamba", {"num_experts": 1, "num_hidden_layers": 8}),
    # Falcon-H1 with its mixer width given by the expansion (mamba_d_ssm unset).
    (
        "falcon_h1",
        {"mamba_d_ssm": None, "mamba_n_heads": 64, "mamba_d_head": 128, "num_hidden_layers": 4},
    ),
    # Qwen2-MoE with its sliding window turned on for the lower layers only: refused by name.
    ("qwen2_moe", {"use_sliding_window": True, "sliding_window": 4096, "max_window_layers": 12}),
]
# Families whose default config or model cannot be built here, with the reason; their
# refusal is still checked on a mapping with just their model_type.
NOT_BUILT = {
    "musicgen": "its config needs text_encoder and audio_encoder sub-configs",
    "musicgen_melody": "its config needs text_encoder and audio_encoder sub-configs",
    "gemma3n": "its vision tower needs timm",
}
# Families that must be modelled, not refused (the planning spec, "From a config").
MUST_MODEL = {
    "gpt_neox", "phi", "starcoder2", "nemotron", "apertus", "arcee", "persimmon", "nanochat",
    "jais2", "gemma4_text", "lfm2", "doge", "ernie4_5_moe", "hunyuan_v1_moe", "jamba", "bamba",
    "falcon_h1", "nemotron_h", "qwen2_moe", "qwen3_next", "llama", "mistral", "mixtral",
    "qwen2", "qwen3", "qwen3_moe", "deepseek_v3", "gemma2", "gemma3_text", "phi3", "glm4",
    "jetmoe", "mamba", "mamba2", "lfm2_moe", "afmoe", "hy_v3", "exaone_moe",
}  # fmt: skip
# ModelCost's own layer names <- the kinds the walk finds.
_ELEMENTWISE = re.compile(r"(^|\.)(A_log|D|dt_bias|.*bias)$")


CASES = [(family, CONFIG_FIXES.get(family, {})) for family in FAMILIES] + VARIANTS


def _config(family: str, fixes: dict[str, Any]) -> Any:
    return CONFIG_MAPPING[family](**fixes)


def _build(config: Any) -> nn.Module:
    text = getattr(config, "text_config", None) or config
    with warnings.catch_warnings(), torch.device("meta"):
        warnings.simplefilter("ignore")
        try:
            return transformers.AutoModelForCausalLM.from_config(text)
        except ValueError:  # a text config the auto class does not map (Emu3, Mllama)
            name = MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[config.model_type]
            return getattr(transformers, name)(text)


def _top_k(config: Any) -> int:
    text = getattr(config, "text_config", None) or config
    return int(getattr(text, "num_experts_per_tok", 0) or 0)


def weights_per_token(model: nn.Module, top_k: int) -> float:
    """The weights one token multiplies in ``model``, counted module by module."""
    total = 0.0
    for name, module in model.named_modules():
        if isinstance(module, nn.Embedding) and ".mlp." in f".{name}.":
            # experts kept as embedding rows (Doge): top_k rows of each table per token
            total += module.weight.numel() * top_k / module.num_embeddings
            continue
        if isinstance(module, (nn.Embedding, nn.Conv1d, nn.Conv2d)):
            continue
        if isinstance(module, nn.Linear):
            weights: float = module.in_features * module.out_features
            parts = name.split(".")
            if "experts" in parts:  # one expert of a list: top_k of them run per token
                experts = model.get_submodule(".".join(parts[: parts.index("experts") + 1]))
                if isinstance(experts, nn.ModuleList):
                    weights = weights * top_k / len(experts)
            total += weights
            continue
        for parameter_name, parameter in module.named_parameters(recurse=False):
            if _ELEMENTWISE.search(parameter_name):
                continue
            if parameter.ndim == 3:  # fused experts: [experts, out, in]
                total += parameter.numel() * top_k / parameter.shape[0]
            elif parameter.ndim == 2:  # a router or a projection kept as a parameter
                total += parameter.numel()
    return total


def _layers(model: nn.Module) -> list[nn.Module]:
    for _, module in model.named_modules():
        layers = getattr(module, "layers", None)
        if isinstance(layers, nn.ModuleList) and len(layers):
            return list(layers)
    raise AssertionError(f"{type(model).__name__}: no decoder layers found")


def layer_kind(layer: nn.Module) -> str:
    """The kind of one decoder layer, from the modules it holds."""
    names = {type(module).__name__ for module in layer.modules()}
    attention = [
        module
        for name, module in layer.named_modules()
        if name.split(".")[-1] in ("self_attn", "attention", "attn")
        or (type(module).__name__.endswith("Attention") and "Linear" not in type(module).__name__)
    ]
    ssm = any(
        parameter_name.endswith("A_log") for parameter_name, _ in layer.named_parameters()
    ) and not any("DeltaNet" in name or "GatedDelta" in name for name in names)
    if any("DeltaNet" in name or "LinearAttention" in name for name in names):
        return "linear_attention"
    if ssm:
        return "full_attention" if attention else "mamba"
    if any("ShortConv" in name for name in names):
        return "conv"
    if attention:
        window = getattr(attention[0], "sliding_window", None)
        return "sliding_attention" if window else "full_attention"
    return "mlp"


def has_experts(layer: nn.Module) -> bool:
    """Routed experts: a module named experts, or weights stacked per expert (3-D)."""
    named = any(name.split(".")[-1] == "experts" for name, _ in layer.named_modules())
    stacked = any(
        parameter.ndim == 3
        for module in layer.modules()
        if not isinstance(module, (nn.Conv1d, nn.Conv2d))
        for parameter in module.parameters(recurse=False)
    )
    rows = any(isinstance(module, nn.Embedding) for module in layer.modules())  # Doge
    return named or stacked or rows


def _text(config: Any) -> Any:
    return getattr(config, "text_config", None) or config


def _declared_kinds(config: Any) -> list[str] | None:
    """The attention kind of each layer as the config declares it (``layer_types``)."""
    declared = getattr(_text(config), "layer_types", None)
    if not declared:
        return None
    return [
        "sliding_attention" if kind == "sliding_attention" else "full_attention"
        for kind in declared
    ]


def _slides(config: Any) -> bool:
    """Without layer_types: every attention layer slides when sliding_window is set and on."""
    text = _text(config)
    return (
        bool(getattr(text, "sliding_window", None))
        and getattr(text, "use_sliding_window", True) is not False
    )


_FIELD = re.compile(
    r"cannot model (\w+)=|cannot read the model: (\w+) is missing|^(\w+)(?:\[\d+\])? (?:is|must)"
    r"|^(\w+) = |ambiguous: (\w+)="
)


def _named_field(message: str) -> str:
    match = _FIELD.search(message)
    assert match, f"the refusal names no field: {message}"
    return next(group for group in match.groups() if group)


@pytest.mark.parametrize(
    "family, fixes",
    CASES,
    ids=[
        family + ("" if i < len(FAMILIES) else f"+variant{i}")
        for i, (family, _) in enumerate(CASES)
    ],
)
def test_every_family_is_modelled_within_one_percent_or_refused_by_name(family, fixes):
    if family in NOT_BUILT:
        with pytest.raises(ValueError, match=r"model_type"):
            ModelCost.from_config({"model_type": family, "hidden_size": 8, "num_hidden_layers": 1})
        return
    config = _config(family, fixes)
    items = config.to_dict()
    try:
        cost = ModelCost.from_config(config)
    except ValueError as error:
        field = _named_field(str(error))
        text = getattr(config, "text_config", None) or config
        known = set(text.to_dict()) | set(items) | set(getattr(text, "attribute_map", {}))
        known |= set(CONFIG_FIELDS)  # a field the model needs and the config lacks
        assert field in known, f"{family}: the refusal names {field!r}, not a config field: {error}"
        if fixes is CONFIG_FIXES.get(family, {}):
            assert family not in MUST_MODEL, f"{family} must be modelled, not refused: {error}"
        # The dict refuses too (it may name another field: to_dict() keeps a family's own
        # names, e.g. GPT-2's n_embd where the object also answers hidden_size).
        with pytest.raises(ValueError) as from_dict:
            ModelCost.from_config(items)
        _named_field(str(from_dict.value))
        return
    from_dict = ModelCost.from_config(items)
    assert from_dict.flops([1, 4096]) == cost.flops([1, 4096]), (
        f"{family}: object and dict disagree"
    )
    assert from_dict.layer_types == cost.layer_types, f"{family}: object and dict disagree"
    model = _build(config)
    counted = weights_per_token(model, _top_k(config))
    modelled = cost.per_token(1)["linear"] / 6
    assert modelled == pytest.approx(counted, rel=0.01), (
        f"{family}: ModelCost counts {modelled:,.0f} weights per token, the model has {counted:,.0f}"
    )
    layers = _layers(model)
    kinds = [layer_kind(layer) for layer in layers]
    declared = _declared_kinds(config)
    for i, kind in enumerate(kinds):
        if kind in ("full_attention", "sliding_attention") and declared is not None:
            kinds[i] = declared[i]  # which attention layers slide: the config says
        elif kind == "full_attention" and declared is None and _slides(config):
            kinds[i] = "sliding_attention"
    assert list(cost.layer_types) == kinds, family
    assert list(cost.moe_layers) == [i for i, layer in enumerate(layers) if has_experts(layer)]
