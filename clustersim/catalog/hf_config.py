"""Read a HuggingFace ``config.json`` into a :class:`ModelSpec`.

Dense decoder-only transformers, mixture-of-experts models that route each token to top-k of E
gated experts (Mixtral, Qwen3-MoE), and DeepSeek-V2/V3-style models (DeepSeek-V3, R1) are
modelled: multi-head latent attention (``kv_lora_rank``, ``q_lora_rank``,
``qk_nope_head_dim``, ``qk_rope_head_dim``, ``v_head_dim``), ``n_routed_experts`` routed and
``n_shared_experts`` shared experts of ``moe_intermediate_size``, and the first
``first_k_dense_replace`` layers dense, and gpt-oss-style models: sliding-window layers
(``layer_types``, ``sliding_window``), learned attention sinks, biased experts and router.
Other layouts (Qwen2-MoE's separately sized shared
expert, dense layers between MoE layers, DeepSeek-V3.2's sparse attention indexer, ...) are
refused with an ``InputError`` rather than priced wrongly. A quantized checkpoint's
``quantization_config`` (AWQ, GPTQ, FP8, compressed-tensors, ModelOpt, MXFP4) is read into
the spec's ``quantization``, from the top level first and then ``text_config``, as vLLM's
``ModelConfig._verify_quantization`` looks for it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError

from clustersim.catalog.quantization import quantization_from_hf
from clustersim.catalog.specs import ModelSpec
from clustersim.errors import InputError
from clustersim.inputs import parse_json, read_text

# OPTLearnedPositionalEmbedding keeps 2 rows ahead of position 0 (a fairseq legacy).
_OPT_POSITION_OFFSET = 2
# config.json keys that mean a layout the cost model does not price.
_UNSUPPORTED_KEYS = {
    "num_shared_experts": "shared-expert mixture-of-experts (num_shared_experts)",
    "shared_expert_intermediate_size": "shared-expert mixture-of-experts",
    "mlp_only_layers": "mixture-of-experts with dense layers",
    "index_topk": "DeepSeek sparse attention (an indexer)",
}
# config values that must be 1 (every layer from the first MoE one is MoE).
_MUST_BE_ONE = {
    "decoder_sparse_step": "dense layers between MoE layers",
    "moe_layer_freq": "dense layers between MoE layers",
}
# The multi-head latent attention keys vLLM reads (DeepseekV2MLAAttention): all but q_lora_rank
# (None: a plain q_proj, as DeepSeek-V2-Lite) are required once kv_lora_rank is set.
_MLA_KEYS = ("qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
# Model types whose experts and router carry biases, and whose heads have learned attention
# sinks (vLLM's GptOssForCausalLM: the config has no switch for either).
_EXPERT_BIAS_SINK_TYPES = {"gpt_oss"}
# Routed-expert counts: Qwen-MoE's key, Mixtral's, then DeepSeek's.
_NUM_EXPERTS_KEYS = ("num_experts", "num_local_experts", "n_routed_experts")
# Model types whose q/k/v projections always carry a bias (the config has no switch for it).
_QKV_BIAS_TYPES = {"qwen2"}
# Model types with a per-head RMSNorm on q and k.
_QK_NORM_TYPES = {"qwen3", "qwen3_moe"}
# vLLM's dtype "auto" serves float32 checkpoints in 16-bit; bfloat16 is what it picks on GPUs
# that support it, which every catalog GPU does.
_DTYPE_ALIASES = {"float32": "bfloat16", "float": "bfloat16", "half": "float16"}


def model_from_hf_config(path: Path) -> ModelSpec:
    """Parse ``path`` (a config.json, or a folder with one); ``InputError`` if it is malformed."""
    if path.is_dir():
        path = path / "config.json"
    where = str(path)
    raw = parse_json(read_text(path, "model config"), where)
    if not isinstance(raw, dict):
        raise InputError(where, "a model config must be a JSON object")
    # multimodal configs nest the language model under text_config
    config: dict[str, Any] = raw.get("text_config") or raw
    if not isinstance(config, dict):
        raise InputError(where, "text_config must be a JSON object")
    for key, layout in _UNSUPPORTED_KEYS.items():
        if config.get(key):
            raise InputError(where, f"{layout} models ({key}) are not supported")
    for key, layout in _MUST_BE_ONE.items():
        if config.get(key) not in (None, 1):
            raise InputError(where, f"mixture-of-experts models with {layout} ({key} "
                             f"{config[key]!r}) are not supported")

    model_type = str(config.get("model_type") or raw.get("model_type") or "")
    is_opt = model_type == "opt"
    heads = _require(config, "num_attention_heads", where)
    hidden = _require(config, "hidden_size", where)
    if is_opt and config.get("word_embed_proj_dim", hidden) != hidden:
        raise InputError(where, "OPT with word_embed_proj_dim != hidden_size is not supported")
    max_pos = _require(config, "max_position_embeddings", where)
    if is_opt:
        # enable_bias switches the bias of every OPT linear layer
        qkv_bias = o_bias = mlp_bias = bool(config.get("enable_bias", True))
    else:
        # attention_bias covers q, k, v and o; Qwen2 has q/k/v biases with no switch
        o_bias = bool(config.get("attention_bias", False))
        qkv_bias = o_bias or model_type in _QKV_BIAS_TYPES
        mlp_bias = (bool(config.get("mlp_bias", False))
                    or model_type in _EXPERT_BIAS_SINK_TYPES)
    dtype = str(config.get("torch_dtype") or config.get("dtype") or "bfloat16")
    fields: dict[str, Any] = {
        "id": path.parent.name or path.stem,
        "hf_repo": raw.get("_name_or_path") or None,
        "num_layers": _require(config, "num_hidden_layers", where),
        "hidden_size": hidden,
        "num_attention_heads": heads,
        "num_key_value_heads": config.get("num_key_value_heads") or heads,
        "head_dim": config.get("head_dim") or _head_dim(hidden, heads, where),
        **_mla_fields(config, where),
        "intermediate_size": _require(config, "ffn_dim" if is_opt else "intermediate_size", where),
        "vocab_size": _require(config, "vocab_size", where),
        "max_position_embeddings": max_pos,
        # transformers' PretrainedConfig ties embeddings unless the config says otherwise
        "tie_word_embeddings": bool(config.get("tie_word_embeddings", True)),
        "dtype": _DTYPE_ALIASES.get(dtype, dtype),
        "mlp": "plain" if is_opt else "gated",
        "qkv_bias": qkv_bias,
        "o_bias": o_bias,
        "mlp_bias": mlp_bias,
        "qk_norm": model_type in _QK_NORM_TYPES,
        # MiniMax-M2 normalises q and k over all heads of a layer (vLLM's minimax_m2.py builds
        # q_norm/k_norm as MiniMaxText01RMSNormTP of head_dim x all heads)
        "qk_norm_across_heads": bool(config.get("use_qk_norm"))
        and config.get("qk_norm_type") == "per_layer",
        "norm": "layernorm" if is_opt else "rmsnorm",
        "learned_position_rows": max_pos + _OPT_POSITION_OFFSET if is_opt else 0,
        **_moe_fields(config, where),
        **_sliding_window_fields(config, where),
        "attention_sinks": model_type in _EXPERT_BIAS_SINK_TYPES,
        "quantization": quantization_from_hf(raw, where) or quantization_from_hf(config, where),
        "source": f"HuggingFace config {where}",
    }
    try:
        return ModelSpec.model_validate(fields)
    except ValidationError as exc:
        first = exc.errors()[0]
        message = first["msg"].removeprefix("Value error, ")
        if first["loc"]:
            got = repr(first.get("input"))
            got = got if len(got) <= 40 else got[:37] + "..."
            field = ".".join(str(part) for part in first["loc"])
            message = f"{field}: {message} (got {got})"
        raise InputError(where, message) from None


def _moe_fields(config: dict[str, Any], where: str) -> dict[str, Any]:
    """The ModelSpec MoE fields of ``config``; none for a dense model."""
    key = next((k for k in _NUM_EXPERTS_KEYS if config.get(k)), None)
    if key is None:
        return {}
    top_k = config.get("num_experts_per_tok", config.get("experts_per_token"))
    if top_k is None:
        raise InputError(
            where, f"mixture-of-experts config ({key}) is missing key 'num_experts_per_tok'"
        )
    others = [k for k in _NUM_EXPERTS_KEYS if k != key and config.get(k)]
    if others:
        raise InputError(where, f"both {key} and {others[0]} count experts; give one")
    # Mixtral's experts are intermediate_size wide; Qwen-MoE and DeepSeek name the width apart
    width = "moe_intermediate_size" if "moe_intermediate_size" in config else "intermediate_size"
    return {
        "num_experts": config[key],
        "num_experts_per_tok": top_k,
        "moe_intermediate_size": _require(config, width, where),
        # DeepSeek: shared experts in every MoE layer, the first k layers dense
        "num_shared_experts": config.get("n_shared_experts") or 0,
        "first_k_dense_replace": config.get("first_k_dense_replace") or 0,
        # DeepSeek-V3's grouped top-k: a token's experts from topk_group of n_group groups
        **({"num_expert_groups": config["n_group"], "topk_expert_groups": config["topk_group"]}
           if (config.get("n_group") or 0) > 1 and config.get("topk_group") else {}),
    }


def _sliding_window_fields(config: dict[str, Any], where: str) -> dict[str, Any]:
    """The ModelSpec sliding-window fields of ``config``: with ``layer_types``, its
    'sliding_attention' layers; without, every layer where ``sliding_window`` is set and
    ``use_sliding_window`` is not false (Qwen2 configs carry a window they do not use), as
    transformers' configs and vLLM's ``get_sliding_window`` read them; none otherwise."""
    window = config.get("sliding_window")
    types = config.get("layer_types")
    if types is not None:
        if not isinstance(types, list) or not all(isinstance(t, str) for t in types):
            raise InputError(where, "layer_types must be a list of strings")
        unknown = sorted(set(types) - {"sliding_attention", "full_attention"})
        if unknown:
            raise InputError(where, f"layer_types {unknown[0]!r} layers are not supported "
                             "(sliding_attention and full_attention are)")
        if len(types) != config.get("num_hidden_layers"):
            raise InputError(where, f"layer_types lists {len(types)} layers, "
                             f"num_hidden_layers is {config.get('num_hidden_layers')!r}")
        count = types.count("sliding_attention")
        if not count:
            return {}
        if window is None:
            raise InputError(where, "layer_types has sliding_attention layers and no "
                             "sliding_window")
        return {"sliding_window": window, "sliding_window_layers": count}
    if window is None or config.get("use_sliding_window") is False:
        return {}
    return {"sliding_window": window,
            "sliding_window_layers": config.get("num_hidden_layers")}


def _mla_fields(config: dict[str, Any], where: str) -> dict[str, Any]:
    """The ModelSpec multi-head latent attention fields of ``config`` (``kv_lora_rank`` set,
    as vLLM's ``ModelConfig.is_deepseek_mla`` asks); none for standard attention. ``head_dim``
    becomes the query/key head size, whatever the config says (transformers' DeepseekV3Config
    sets it to qk_rope_head_dim for the rotary embedding)."""
    if config.get("kv_lora_rank") is None:
        return {}
    missing = [key for key in _MLA_KEYS if config.get(key) is None]
    if missing:
        raise InputError(where, f"multi-head latent attention (kv_lora_rank) needs "
                         f"{', '.join(map(repr, missing))}")
    fields = {key: config[key] for key in _MLA_KEYS}
    nope, rope = fields["qk_nope_head_dim"], fields["qk_rope_head_dim"]
    if not isinstance(nope, int) or not isinstance(rope, int):
        raise InputError(where, f"qk_nope_head_dim and qk_rope_head_dim must be integers, got "
                         f"{nope!r} and {rope!r}")
    return {"kv_lora_rank": config["kv_lora_rank"], "q_lora_rank": config.get("q_lora_rank"),
            **fields, "head_dim": nope + rope}


def _require(config: dict[str, Any], key: str, where: str) -> Any:
    if config.get(key) is None:
        raise InputError(where, f"missing required key {key!r}")
    return config[key]


def _head_dim(hidden: Any, heads: Any, where: str) -> int:
    if not isinstance(hidden, int) or not isinstance(heads, int) or heads <= 0 or hidden % heads:
        raise InputError(
            where,
            f"head_dim missing and hidden_size {hidden!r} is not a multiple of "
            f"num_attention_heads {heads!r}",
        )
    return hidden // heads
