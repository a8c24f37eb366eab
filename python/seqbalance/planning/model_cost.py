"""Model-aware costs: the training FLOPs of each sequence, computed from a model's shape.

:class:`ModelCost` is a ``cost=`` for every planner and sampler. It knows grouped-query (GQA),
multi-latent (MLA, DeepSeek), sliding-window and linear attention (Qwen3-Next's Gated DeltaNet),
dense and mixture-of-experts MLPs with shared experts and dense layers among MoE ones, and the
output head; :meth:`ModelCost.from_config` reads the shape from a Hugging Face config without
importing transformers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any

import numpy as np

from .._inputs import MAX_VALUE, _describe, normalize_lengths

__all__ = ["ModelCost"]

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
#: Every config field :meth:`ModelCost.from_config` reads, in the order ``repr`` shows them.
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


def _flag(name: str, value: Any) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be a bool, got {_describe(value)}")
    return bool(value)


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


def _pairs(length: int, window: int | None, causal: bool) -> int:
    """Query-key pairs attention computes for one sequence (see :class:`ModelCost`)."""
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


class ModelCost:
    """The training FLOPs of each sequence for one model, as a ``cost=`` for the planners.

    For one sequence of ``L`` tokens (2 FLOPs per multiply-add, ``h`` the hidden size)::

        forward(L)  = head * L + sum over layers (proj * L + mlp * L + core(L))
        training(L) = 3 * forward(L)     (4 * forward(L) with recompute=True)

    per layer, by its attention type:

    - full or sliding attention (``n_q`` query heads, ``n_kv`` key/value heads, head dim ``d``):
      ``proj = 2*h*d*(2*n_q + 2*n_kv)``, ``core = 4*n_q*d*pairs(L)``;
    - MLA (``q_lora_rank`` ``r_q``, 0 = no query compression; ``kv_lora_rank`` ``r_kv``;
      ``qk_nope_head_dim`` ``d_n``, ``qk_rope_head_dim`` ``d_r``, ``v_head_dim`` ``d_v``):
      ``proj = 2*(h*r_q + r_q*n_q*(d_n+d_r) if r_q else h*n_q*(d_n+d_r)) + 2*h*(r_kv+d_r)
      + 2*r_kv*n_q*(d_n+d_v) + 2*n_q*d_v*h``, ``core = 2*n_q*(d_n+d_r+d_v)*pairs(L)``;
    - linear attention (``n_k`` key heads of dim ``d_k``, ``n_v`` value heads of dim ``d_v``):
      ``proj = 2*h*(2*n_k*d_k + 2*n_v*d_v)``, ``core = 4*n_v*d_k*d_v*L`` (gates and short
      convolutions left out);

    ``pairs(L) = L*(L+1)/2`` under a causal mask; with a sliding window ``w`` (a query sees at
    most ``w`` keys, itself included) ``w*(w+1)/2 + (L-w)*w`` once ``L > w``; ``L*L`` with
    ``causal=False``. MLP: ``6*h*i`` (gated, SwiGLU-style), ``4*h*i`` with ``gated_mlp=False``;
    a MoE layer ``2*h*E + top_k*6*h*i_e + 6*h*i_s`` (router over ``E`` experts, ``top_k`` routed
    experts of size ``i_e``, shared experts of total size ``i_s``; ``4`` instead of ``6`` with
    ``gated_mlp=False``). ``head = 2*h*V`` (``include_head=False`` drops it); embeddings,
    norms, rotary and softmax count 0.

    The keywords are the Hugging Face config field names (see :meth:`from_config` for how each
    is read; ``None`` means absent) plus ``gated_mlp``, ``include_head``, ``recompute`` and
    ``causal``.

    Use: ``cost(lengths)`` returns a ``float64`` array, each the correctly rounded value of the
    exact integer :meth:`flops` computes; :meth:`per_token` splits the cost per token into its
    linear and attention parts and :meth:`describe` says from which length attention dominates.

    Relation to :class:`~seqbalance.TransformerCost`: with standard multi-head attention,
    ``gated_mlp=False, include_head=False, causal=False``, ``flops`` equals
    ``TransformerCost(h, layers, intermediate_size, causal=False).flops``; with ``causal=True``
    ModelCost counts ``6 * layers * h * L`` more (the ``L`` diagonal pairs).

    Raises:
        ValueError: a field the model needs is missing, a value is out of range, a layer type
            is unknown, a field changes layer shapes in a way the formula does not model, or
            ``causal=False`` with a sliding-window layer; the message names the field.
        TypeError: a field of the wrong type (a float or bool where an int is expected).

    Example:
        >>> cost = ModelCost(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
        ...                  intermediate_size=256, vocab_size=1000)
        >>> cost.flops([1, 10])
        [1171968, 11788800]
        >>> cost([1, 10]).tolist()
        [1171968.0, 11788800.0]
    """

    def __init__(
        self,
        *,
        hidden_size: int | None = None,
        num_hidden_layers: int | None = None,
        num_attention_heads: int | None = None,
        num_key_value_heads: int | None = None,
        head_dim: int | None = None,
        intermediate_size: int | None = None,
        vocab_size: int | None = None,
        sliding_window: int | None = None,
        use_sliding_window: bool | None = None,
        layer_types: Sequence[str] | None = None,
        num_experts: int | None = None,
        n_routed_experts: int | None = None,
        num_local_experts: int | None = None,
        num_experts_per_tok: int | None = None,
        moe_intermediate_size: int | None = None,
        n_shared_experts: int | None = None,
        shared_expert_intermediate_size: int | None = None,
        first_k_dense_replace: int | None = None,
        mlp_only_layers: Sequence[int] | None = None,
        decoder_sparse_step: int | None = None,
        q_lora_rank: int | None = None,
        kv_lora_rank: int | None = None,
        qk_nope_head_dim: int | None = None,
        qk_rope_head_dim: int | None = None,
        v_head_dim: int | None = None,
        linear_num_key_heads: int | None = None,
        linear_key_head_dim: int | None = None,
        linear_num_value_heads: int | None = None,
        linear_value_head_dim: int | None = None,
        full_attention_interval: Any = None,
        max_window_layers: Any = None,
        sliding_window_pattern: Any = None,
        moe_layer_freq: Any = None,
        interleave_moe_layer_step: Any = None,
        attention_chunk_size: Any = None,
        gated_mlp: bool = True,
        include_head: bool = True,
        recompute: bool = False,
        causal: bool = True,
    ) -> None:
        # Taken first, before any other local exists: exactly the keyword arguments.
        given = {name: value for name, value in locals().items() if name != "self"}
        self.gated_mlp = _flag("gated_mlp", gated_mlp)
        self.include_head = _flag("include_head", include_head)
        self.recompute = _flag("recompute", recompute)
        self.causal = _flag("causal", causal)
        fields = {name: given[name] for name in CONFIG_FIELDS if given[name] is not None}
        if "use_sliding_window" in fields:
            fields["use_sliding_window"] = _flag("use_sliding_window", fields["use_sliding_window"])
        _check_unmodelled(fields)
        ints: dict[str, int] = {}
        for name in _POSITIVE:
            if name in fields:
                ints[name] = _int_field(name, fields[name], 1)
        for name in _NON_NEGATIVE:
            if name in fields:
                ints[name] = _int_field(name, fields[name], 0)
        only = _index_list("mlp_only_layers", fields.get("mlp_only_layers", ()))
        fields.update(ints)  # plain ints (not NumPy scalars) for repr
        if "mlp_only_layers" in fields:
            fields["mlp_only_layers"] = list(only)
        self._fields = fields
        self._build(ints, fields, only)

    def _build(self, ints: dict[str, int], fields: dict[str, Any], only: tuple[int, ...]) -> None:
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
        self.layer_types = kinds
        n_sliding, n_linear = kinds.count(SLIDING), kinds.count(LINEAR)
        n_softmax = n_layers - n_linear
        if n_sliding and "sliding_window" not in ints:
            raise _missing("sliding_window", f"{n_sliding} layers use a sliding window")
        if n_sliding and not self.causal:
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
                    2 * query
                    + 2 * h * (r_kv + d_r)
                    + 2 * r_kv * n_q * (d_n + d_v)
                    + 2 * n_q * d_v * h
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

        moe_layers, mlp_total = self._mlps(ints, only, h, n_layers)
        self.moe_layers = moe_layers
        head = 0
        if self.include_head:
            if "vocab_size" not in ints:
                raise _missing("vocab_size", "the output head; include_head=False leaves it out")
            head = 2 * h * ints["vocab_size"]

        #: Forward FLOPs per token that do not depend on the length (head, projections, MLPs).
        self._linear = head + n_softmax * attention_proj + n_linear * recurrent_proj + mlp_total
        #: Forward FLOPs per token of the linear-attention cores.
        self._recurrent = n_linear * recurrent_core
        #: Forward FLOPs per pair of the full-attention layers, and per window of the sliding ones.
        self._full = (n_softmax - n_sliding) * attention_core
        window = ints.get("sliding_window", 0)
        self._windows = ((window, n_sliding * attention_core),) if n_sliding else ()
        self._factor = 4 if self.recompute else 3

    def _mlps(
        self, ints: dict[str, int], only: tuple[int, ...], h: int, n_layers: int
    ) -> tuple[tuple[int, ...], int]:
        """(the MoE layers, forward MLP FLOPs per token over all layers)."""
        gate = 6 if self.gated_mlp else 4
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
                i
                for i in range(n_layers)
                if i >= first_dense and i not in only and (i + 1) % step == 0
            )
        if moe_layers:
            if "num_experts_per_tok" not in ints:
                raise _missing("num_experts_per_tok", f"{len(moe_layers)} MoE layers")
            top_k = ints["num_experts_per_tok"]
            if top_k > experts:
                raise ValueError(
                    f"num_experts_per_tok ({top_k}) is more than the {experts} experts"
                )
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

    @classmethod
    def from_config(cls, config: Any, /, **overrides: Any) -> ModelCost:
        """A :class:`ModelCost` from a Hugging Face config object or a plain mapping.

        Reads, without importing transformers: ``hidden_size``, ``num_hidden_layers``,
        ``num_attention_heads``, ``num_key_value_heads`` (default: the attention heads),
        ``head_dim`` (default ``hidden_size // num_attention_heads``), ``intermediate_size``,
        ``vocab_size``; ``layer_types`` (``"full_attention"``, ``"sliding_attention"``,
        ``"linear_attention"``) with ``sliding_window``, or without ``layer_types`` every layer
        sliding when ``sliding_window`` is set and ``use_sliding_window`` is not false; the MoE
        fields (expert count ``num_experts``, ``n_routed_experts`` or ``num_local_experts``;
        ``num_experts_per_tok``; ``moe_intermediate_size``, else ``intermediate_size``; shared
        experts ``shared_expert_intermediate_size``, else ``n_shared_experts *
        moe_intermediate_size``); the MLA fields (layers are MLA iff ``kv_lora_rank`` is set);
        the linear-attention fields. A null value counts as absent. Layer ``i`` (0-based) is MoE
        iff the expert count is > 0, ``i >= first_k_dense_replace``, ``i`` is not in
        ``mlp_only_layers`` and ``(i + 1) % decoder_sparse_step == 0``. A multimodal config's
        ``text_config`` is read instead of the top level when present.

        Args:
            config: a config object (read with ``to_dict()``, or its attributes) or a mapping,
                e.g. the parsed ``config.json``.
            overrides: any :class:`ModelCost` keyword; replaces the config's value (``None``
                removes it), e.g. ``layer_types=[...]`` or ``include_head=False``.

        Raises:
            ValueError: a field it cannot read (missing, an unknown layer type, or one that
                changes layer shapes it does not model: ``full_attention_interval`` or
                ``sliding_window_pattern`` without ``layer_types``, ``max_window_layers`` while
                ``use_sliding_window`` is true, ``moe_layer_freq`` other than 1,
                ``interleave_moe_layer_step``, ``attention_chunk_size``), named in the message.
            TypeError: ``config`` is neither a mapping nor an object with attributes, an
                unknown override, or a field of the wrong type.

        Example:
            >>> config = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
            ...           "intermediate_size": 256, "vocab_size": 1000, "head_dim": None}
            >>> ModelCost.from_config(config, include_head=False).flops([10])
            [7948800]
        """
        unknown = sorted(set(overrides) - set(CONFIG_FIELDS) - set(_FLAGS))
        if unknown:
            raise TypeError(
                f"unknown override {unknown[0]!r}: ModelCost takes the config fields "
                f"{', '.join(CONFIG_FIELDS)} and {', '.join(_FLAGS)}"
            )
        items = _config_items(config, "config")
        text = items.get("text_config")
        if not isinstance(config, Mapping) and not callable(getattr(config, "text_config", None)):
            # The object itself rather than to_dict()'s copy, which loses its attribute_map.
            text = getattr(config, "text_config", None) or text
        if text is not None:
            items = _config_items(text, "config.text_config")
        fields = {name: items[name] for name in CONFIG_FIELDS if items.get(name) is not None}
        fields.update(overrides)
        return cls(**fields)

    # -- use ----------------------------------------------------------------------------------

    def _forward(self, length: int) -> int:
        """Exact forward FLOPs of one sequence."""
        total = (self._linear + self._recurrent) * length
        total += self._full * _pairs(length, None, self.causal)
        for window, per_pair in self._windows:
            total += per_pair * _pairs(length, window, self.causal)
        return total

    def _forward_int64(self, lengths: np.ndarray) -> np.ndarray | None:
        """The exact forward FLOPs as int64 when no step can overflow, else ``None``."""
        longest = int(lengths.max()) if lengths.size else 0
        if longest == 0:
            return np.zeros(lengths.size, dtype=np.int64)
        pair_weight = self._full + sum(per_pair for _, per_pair in self._windows)
        # Every product and partial sum below is at most this (pairs(L) <= L*(L+1)).
        bound = self._factor * (
            (self._linear + self._recurrent) * longest
            + max(pair_weight, 1) * longest * (longest + 1)
        )
        if bound > MAX_VALUE:
            return None
        total = (self._linear + self._recurrent) * lengths
        if self._full:
            square = lengths * lengths if not self.causal else lengths * (lengths + 1) // 2
            total += self._full * square
        for window, per_pair in self._windows:
            seen = np.minimum(lengths, window)
            total += per_pair * (seen * (seen + 1) // 2 + (lengths - seen) * window)
        return total

    def _lengths(self, lengths: Any) -> np.ndarray:
        return np.asarray(normalize_lengths(lengths, "lengths"), dtype=np.int64).reshape(-1)

    def flops(self, lengths: Any) -> list[int]:
        """The exact training FLOPs of each sequence, as Python ints.

        Args:
            lengths: token counts, a sequence or 1-D array of non-negative integers.

        Returns:
            One int per length, in order (``3 x`` the forward FLOPs, ``4 x`` with
            ``recompute=True``).

        Raises:
            TypeError, ValueError, OverflowError: lengths that are not non-negative integers
            below ``2**63`` (the message names the position and the value).

        Example:
            >>> ModelCost(hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
            ...           intermediate_size=16, include_head=False).flops([0, 1, 2])
            [0, 3936, 7968]
        """
        values = self._lengths(lengths)
        forward = self._forward_int64(values)
        if forward is not None:
            return (self._factor * forward).tolist()
        return [self._factor * self._forward(length) for length in values.tolist()]

    def __call__(self, lengths: Any) -> np.ndarray:
        """The training FLOPs of each sequence as ``float64`` weights (a ``cost=``).

        Each weight is the exact integer of :meth:`flops` correctly rounded to float64 (exact
        up to ``2**53``), never computed in float arithmetic. Raises as :meth:`flops`.
        """
        values = self._lengths(lengths)
        forward = self._forward_int64(values)
        if forward is not None:
            # int64 -> float64 conversion rounds to nearest (even), as float(int) does.
            return (self._factor * forward).astype(np.float64)
        exact = [self._factor * self._forward(length) for length in values.tolist()]
        return np.array([float(value) for value in exact], dtype=np.float64)

    def per_token(self, length: int) -> dict[str, float]:
        """Training FLOPs per token of a sequence of ``length`` tokens, split in two.

        Returns:
            ``{"linear": ..., "attention": ...}``: the part that does not depend on the length
            (projections, MLPs, head) and the attention part (softmax and linear-attention
            cores, averaged over the sequence's tokens); floats, each correctly rounded from the
            exact value, and ``(linear + attention) * length == flops([length])[0]`` exactly in
            rational arithmetic.

        Raises:
            TypeError, ValueError: ``length`` is not an int >= 1.

        Example:
            >>> cost = ModelCost(hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
            ...                  intermediate_size=16, include_head=False)
            >>> cost.per_token(2)
            {'linear': 3840.0, 'attention': 144.0}
        """
        length = _int_field("length", length, 1)
        linear = self._factor * self._linear
        attention = self._factor * (self._forward(length) - self._linear * length)
        return {"linear": float(linear), "attention": float(Fraction(attention, length))}

    def _attention_dominates(self, length: int) -> bool:
        return self._forward(length) - self._linear * length >= self._linear * length

    def crossover_length(self) -> int | None:
        """The smallest length at which attention costs at least as much as the linear part.

        Attention per token never decreases with the length, so from this length on attention
        is at least half the cost. ``None`` when it never gets there: a model without full
        attention layers has a bounded attention cost per token (sliding windows,
        linear attention), which may stay below the linear part for every length.

        Example:
            >>> ModelCost(hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
            ...           intermediate_size=16, include_head=False).crossover_length()
            79
        """
        if not self._full:
            # Per token, attention tends to recurrent + sum(per_pair * w) from below, and
            # reaches it only when every window is 1 wide.
            limit = self._recurrent + sum(per_pair * w for w, per_pair in self._windows)
            reached = all(w == 1 for w, _ in self._windows)
            if limit < self._linear or (limit == self._linear and not reached):
                return None
        high = 1
        while not self._attention_dominates(high):
            high *= 2
        low = high // 2  # attention does not dominate at low (or low == 0)
        while high - low > 1:
            middle = (low + high) // 2
            if self._attention_dominates(middle):
                high = middle
            else:
                low = middle
        return high

    def describe(self) -> str:
        """A few readable lines: the layers, the cost per token, where attention dominates."""
        kinds = self.layer_types
        counts = ", ".join(
            f"{kinds.count(kind)} {kind.replace('_', ' ')}" for kind in LAYER_TYPES if kind in kinds
        )
        n_moe = len(self.moe_layers)
        n_dense = len(kinds) - n_moe
        mlp = f"{n_moe} MoE and {n_dense} dense MLPs" if n_moe and n_dense else "dense MLPs"
        if not n_dense:
            mlp = "MoE MLPs"
        gated = "gated" if self.gated_mlp else "not gated"
        mla = ", multi-latent" if "kv_lora_rank" in self._fields else ""
        passes = "4 x forward (recompute)" if self.recompute else "3 x forward"
        lines = [
            f"ModelCost: {len(kinds)} layer{'s' if len(kinds) > 1 else ''} ({counts}{mla}), {mlp} ({gated}); "
            f"training = {passes}"
        ]
        sample = 4096
        split = self.per_token(sample)
        lines.append(
            f"training FLOPs per token: {split['linear']:.4g} linear (projections, MLPs"
            f"{', head' if self.include_head else ''}); attention {split['attention']:.4g} "
            f"at {sample:,} tokens"
        )
        crossover = self.crossover_length()
        if crossover is None:
            lines.append(
                "attention never costs as much as the linear part (no full-attention layer: "
                "its cost per token is bounded)"
            )
        else:
            lines.append(
                f"attention costs at least as much as the linear part from {crossover:,} tokens"
            )
        return "\n".join(lines)

    def __repr__(self) -> str:
        parts = []
        for name, value in self._fields.items():
            shown = _pattern(value) if name == "layer_types" else repr(value)
            parts.append(f"{name}={shown}")
        for name, default in _FLAGS.items():
            if getattr(self, name) != default:
                parts.append(f"{name}={getattr(self, name)!r}")
        return f"ModelCost({', '.join(parts)})"


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
