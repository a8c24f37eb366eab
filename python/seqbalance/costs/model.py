"""Model-aware costs: the training FLOPs of each sequence, computed from a model's shape.

`ModelCost` is a ``cost=`` for every planner and sampler. It knows grouped-query (GQA),
multi-latent (MLA, DeepSeek), sliding-window and linear attention (Qwen3-Next's Gated DeltaNet),
dense and mixture-of-experts MLPs with shared experts and dense layers among MoE ones, and the
output head; `ModelCost.from_config` reads the shape from a Hugging Face config without
importing transformers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any

import numpy as np

from .._inputs import MAX_VALUE, check_flag, normalize_lengths
from .config import (
    _FLAGS,
    _NON_NEGATIVE,
    _POSITIVE,
    CONFIG_FIELDS,
    _check_unmodelled,
    _config_items,
    _index_list,
    _int_field,
    read_layers,
)
from .families import normalize
from .layers import REPORTED, _pairs, _pattern

__all__ = ["ModelCost"]


class ModelCost:
    """The training FLOPs of each sequence for one model, as a ``cost=`` for the planners.

    For one sequence of ``L`` tokens (2 FLOPs per multiply-add, ``h`` the hidden size):

        forward(L)  = head * L + sum over layers (proj * L + mlp * L + core(L))
        training(L) = 3 * forward(L)     (4 * forward(L) with recompute=True)

    per layer, by its attention type:

    - full or sliding attention (``n_q`` query heads, ``n_kv`` key/value heads, head dim ``d``;
      ``global_head_dim`` on full-attention layers when set): ``proj = 2*h*d*(2*n_q + 2*n_kv)``
      (``+ 2*h*n_q*d`` with ``attn_output_gate``), ``core = 4*n_q*d*pairs(L)``;
    - MLA (``q_lora_rank`` ``r_q``, 0 = no query compression; ``kv_lora_rank`` ``r_kv``;
      ``qk_nope_head_dim`` ``d_n``, ``qk_rope_head_dim`` ``d_r``, ``v_head_dim`` ``d_v``):
      ``proj = 2*(h*r_q + r_q*n_q*(d_n+d_r) if r_q else h*n_q*(d_n+d_r)) + 2*h*(r_kv+d_r) +
      2*r_kv*n_q*(d_n+d_v) + 2*n_q*d_v*h``, ``core = 2*n_q*(d_n+d_r+d_v)*pairs(L)``;
    - linear attention (``n_k`` key heads of dim ``d_k``, ``n_v`` value heads of dim ``d_v``):
      ``proj = 2*h*(2*n_k*d_k + 2*n_v*d_v + 2*n_v) + 2*n_v*d_v*h`` (q, k, v, output gate,
      decay and beta in, output out), ``core = 4*n_v*d_k*d_v*L`` plus its short convolution
      ``2*(2*n_k*d_k + n_v*d_v)*linear_conv_kernel_dim*L``;
    - ``mamba``: a Mamba-2 mixer of width ``d_in`` (``mamba_d_ssm``, else ``mamba_expand*h``),
      ``mamba_n_heads`` heads, ``mamba_n_groups`` groups of state ``N`` (``mamba_d_state``):
      ``proj = 2*h*(2*d_in + 2*groups*N + heads) + 2*d_in*h``; Mamba-1 when ``mamba_dt_rank``
      ``r`` is set: ``proj = 2*(2*h*d_in + d_in*(r + 2*N) + r*d_in + d_in*h)``; per token,
      under the attention part: the scan ``4*d_in*N*L`` and the convolution
      ``2*channels*mamba_d_conv*L``; ``hybrid`` (attention and a mixer side by side,
      Falcon-H1) is reported as ``full_attention`` with both;
    - ``conv`` (LFM2): ``proj = 8*h*h``, convolution ``2*h*conv_L_cache*L``; ``mlp``: no mixer;
    ``pairs(L) = L*(L+1)/2`` under a causal mask; with a sliding window ``w`` (a query sees at
    most ``w`` keys, itself included) ``w*(w+1)/2 + (L-w)*w`` once ``L > w``; ``L*L`` with
    ``causal=False``. MLP: ``6*h*i`` (gated, SwiGLU-style), ``4*h*i`` with ``gated_mlp=False``;
    a MoE layer ``2*h*E + top_k*6*h*i_e + 6*h*i_s`` (router over ``E`` experts, ``top_k`` routed
    experts of size ``i_e``, shared experts of total size ``i_s``; ``4`` instead of ``6`` with
    ``gated_mlp=False``); ``mlp_layer_types`` (``"dense"``, ``"sparse"``, ``"none"``) says which
    layers are which; Doge's ``is_moe``: ``gate*h*i + 2*h*2*isqrt(E) + top_k*4*h``.
    ``head = 2*h*V`` (``include_head=False`` drops it); Gemma's
    ``hidden_size_per_layer_input`` ``p`` adds ``6*h*p`` per layer; embeddings, norms, rotary
    and softmax count 0.

    The rule `from_config` keeps: for every decoder-only config transformers ships, it either
    models it (linear FLOPs per token = 6 x the weights a token multiplies, within 1 %; layer
    kinds as the config says; a config object and its ``to_dict()`` agree) or refuses it
    with a ``ValueError`` naming the field it cannot model. Never a guess.

    The keywords: the Hugging Face config field names (see `from_config`; ``None`` means
    absent), ``gated_mlp``, ``include_head``, ``recompute``, ``causal``. Use: ``cost(lengths)``
    returns a ``float64`` array, each the correctly rounded value of the exact integer `flops`
    computes; `per_token` splits the cost per token into its linear and attention parts and
    `describe` says from which length attention dominates.

    Relation to `TransformerCost`: with standard multi-head attention,
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

    _assumed_gated = False  # from_config: a mapping without model_type, modelled gated

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
        global_head_dim: int | None = None,
        num_global_key_value_heads: int | None = None,
        conv_L_cache: int | None = None,  # noqa: N803 (LFM2's field name)
        mamba_n_heads: int | None = None,
        mamba_n_groups: int | None = None,
        mamba_d_state: int | None = None,
        mamba_d_conv: int | None = None,
        mamba_expand: int | None = None,
        mamba_d_ssm: int | None = None,
        mamba_dt_rank: int | None = None,
        linear_conv_kernel_dim: int | None = None,
        hidden_size_per_layer_input: int | None = None,
        attn_output_gate: bool | None = None,
        is_moe: bool | None = None,
        mlp_layer_types: Sequence[str] | None = None,
        full_attention_interval: Any = None,
        max_window_layers: Any = None,
        sliding_window_pattern: Any = None,
        moe_layer_freq: Any = None,
        interleave_moe_layer_step: Any = None,
        attention_chunk_size: Any = None,
        index_topk: Any = None,
        gated_mlp: bool = True,
        include_head: bool = True,
        recompute: bool = False,
        causal: bool = True,
    ) -> None:
        # Taken first, before any other local exists: exactly the keyword arguments.
        given = {name: value for name, value in locals().items() if name != "self"}
        self.gated_mlp = check_flag(gated_mlp, "gated_mlp")
        self.include_head = check_flag(include_head, "include_head")
        self.recompute = check_flag(recompute, "recompute")
        self.causal = check_flag(causal, "causal")
        fields = {name: given[name] for name in CONFIG_FIELDS if given[name] is not None}
        for flag in ("use_sliding_window", "attn_output_gate", "is_moe"):
            if flag in fields:
                fields[flag] = check_flag(fields[flag], flag)
        _check_unmodelled(fields)
        ints: dict[str, int] = {}
        for names, minimum in ((_POSITIVE, 1), (_NON_NEGATIVE, 0)):
            ints.update({n: _int_field(n, fields[n], minimum) for n in names if n in fields})
        only = _index_list("mlp_only_layers", fields.get("mlp_only_layers", ()))
        fields.update(ints)  # plain ints (not NumPy scalars) for repr
        for flag in ("attn_output_gate", "is_moe"):
            ints[flag] = int(fields.get(flag, False))
        if "mlp_only_layers" in fields:
            fields["mlp_only_layers"] = list(only)
        self._fields = fields
        self._build(ints, fields, only)

    def _build(self, ints: dict[str, int], fields: dict[str, Any], only: tuple[int, ...]) -> None:
        flags = {name: getattr(self, name) for name in _FLAGS}
        shape = read_layers(ints, fields, only, flags)
        self.layer_types = shape.layer_types
        self.moe_layers = shape.moe_layers
        #: Forward FLOPs per token that do not depend on the length (head, projections, MLPs).
        self._linear = shape.linear
        #: Forward FLOPs per token of the linear-attention cores.
        self._recurrent = shape.recurrent
        #: Forward FLOPs per pair of the full-attention layers, and per window of the sliding ones.
        self._full = shape.full
        self._windows = shape.windows
        self._factor = 4 if self.recompute else 3

    @classmethod
    def from_config(cls, config: Any, /, **overrides: Any) -> ModelCost:
        """A `ModelCost` from a Hugging Face config object or a plain mapping.

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
        ``mlp_only_layers`` and ``(i + 1) % decoder_sparse_step == 0`` (or as
        ``mlp_layer_types`` says). A multimodal config's ``text_config`` is read instead of the
        top level when present. By ``model_type``, the family's own fields (see
        ``docs/model-costs.md``): two-matrix MLPs (gpt_neox, phi, starcoder2, ...), SSM and
        convolution layers (jamba, bamba, falcon_h1, nemotron_h, mamba, lfm2), shared experts
        and dense layers under other names; ``sliding_window`` 0 means none; families it
        cannot model are refused naming ``model_type`` or the field.

        Args:
            config: a config object (read with ``to_dict()``, or its attributes) or a mapping,
                e.g. the parsed ``config.json``.
            overrides: any `ModelCost` keyword; replaces the config's value (``None``
                removes it), e.g. ``layer_types=[...]`` or ``include_head=False``.

        Raises:
            ValueError: a field it cannot read, named in the message: missing, an unknown layer
                type, or one that changes layer shapes it does not model (e.g.
                ``full_attention_interval`` without ``layer_types``, ``index_topk``).
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
        fields = normalize(items, CONFIG_FIELDS, overridden=overrides)
        assumed = "gated_mlp" not in fields and items.get("model_type") is None
        fields.update(overrides)
        cost = cls(**fields)
        cost._assumed_gated = assumed and "gated_mlp" not in overrides  # for describe()
        return cost

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

        Each weight is the exact integer of `flops` correctly rounded to float64 (exact
        up to ``2**53``), never computed in float arithmetic. Raises as `flops`.
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
            f"{kinds.count(kind)} {kind.replace('_', ' ')}" for kind in REPORTED if kind in kinds
        )
        n_moe, n_none = len(self.moe_layers), self._fields.get("mlp_layer_types", []).count("none")
        n_dense = len(kinds) - n_moe - n_none
        mlp = f"{n_moe} MoE and {n_dense} dense MLPs" if n_moe and n_dense else "dense MLPs"
        mlp = mlp if n_dense else "MoE MLPs" if n_moe else "no MLPs"
        mlp += f", {n_none} layers without one" if n_none and (n_dense or n_moe) else ""
        mlp += "" if mlp == "no MLPs" else " ({gated})"
        gated = "gated" if self.gated_mlp else "not gated"
        if self._assumed_gated:
            gated = "gated: assumed, the config has no model_type"
        mla = ", multi-latent" if "kv_lora_rank" in self._fields else ""
        passes = "4 x forward (recompute)" if self.recompute else "3 x forward"
        lines = [
            f"ModelCost: {len(kinds)} layer{'s' if len(kinds) > 1 else ''} ({counts}{mla}), {mlp.format(gated=gated)}; "
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
