"""How a checkpoint's linear layers are stored: what a HuggingFace ``quantization_config`` says.

A :class:`QuantizationSpec` is the format the cost and memory models need (bits per weight, one
scale per how many weights, zero points, the activation precision), under the method name vLLM
gives it (``--quantization``). :func:`quantization_from_hf` parses a config.json's
``quantization_config`` (or compressed-tensors' ``compression_config``) the way vLLM's
``ModelConfig._parse_quant_hf_config`` and each method's ``from_config`` read it
(vllm/config/model.py; vllm/model_executor/layers/quantization/{awq,awq_marlin,gptq,
gptq_marlin,fp8,modelopt}.py, compressed_tensors/compressed_tensors.py)::

    AWQ 4-bit, group 128 (one K x N layer)          bytes
      qweight  K x N/8 int32 (8 nibbles each)       K N / 2
      qzeros   K/128 x N/8 int32                    K N / 256
      scales   K/128 x N fp16                       K N / 64
                                                    = 4.156 bits per weight

Which method serves a checkpoint on which GPU, and what vLLM refuses, is decided at engine
start-up (``clustersim.engine.quantization``); this module only reads formats.
"""

from __future__ import annotations

import math
import re
from fnmatch import fnmatchcase
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from clustersim.errors import InputError

QuantMethod = Literal[
    "fp8", "modelopt", "modelopt_fp4", "awq", "awq_marlin", "gptq", "gptq_marlin",
    "compressed-tensors", "mxfp4",
]
"""vLLM's ``--quantization`` spellings that clustersim prices (vllm/model_executor/layers/
quantization/__init__.py ``QuantizationMethods``)."""

QUANT_METHODS: tuple[str, ...] = QuantMethod.__args__  # type: ignore[attr-defined]

_BITS_PER_BYTE = 8


class QuantizationSpec(BaseModel):
    """The stored format of every quantized linear layer (attention projections, MLP or
    experts; the LM head too when ``lm_head``). Embeddings, norms, biases and a MoE router
    stay in the model's 16-bit dtype, as vLLM loads them."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    method: QuantMethod = Field(description="vLLM's --quantization name for this format.")
    weight_bits: Literal[4, 8]
    weight_type: Literal["int", "float"] = Field(
        description="int: integer codes (AWQ, GPTQ, INT8); float: FP8 E4M3 or FP4 E2M1.")
    group_size: int = Field(
        ge=-1, description="Weights along the input dimension sharing one scale; -1: one scale "
        "per output channel; 0: one per tensor.")
    weight_block_size: tuple[int, int] | None = Field(
        None, description="Block-wise FP8: one scale per (n, k) block (DeepSeek-style 128x128).")
    scale_bytes: int = Field(2, ge=1, le=4, description="Bytes of one scale.")
    zero_point: bool = Field(False, description="Asymmetric: one weight_bits zero per scale.")
    activation_bits: Literal[4, 8, 16] = Field(
        16, description="16: weight-only (W4A16, W8A16); 8 or 4: activations are quantized "
        "per step too (W8A8, W4A4) and the GEMM runs at that precision.")
    activation_type: Literal["int", "float"] = "float"
    lm_head: bool = Field(False, description="The LM head is quantized too (GPTQ/AWQ 'lm_head').")
    modules: Literal["linear", "experts"] = Field(
        "linear", description="linear: every linear layer of the decoder; experts: the routed "
        "experts only, attention, router, shared experts, dense MLPs, embeddings and LM head "
        "left in the model's dtype (gpt-oss's MXFP4 checkpoints: modules_to_not_convert; "
        "Kimi-K2.5's INT4 experts: compressed-tensors' ignore list).")
    serialized: bool = Field(
        True, description="The checkpoint stores quantized weights; False: vLLM quantizes a "
        "16-bit checkpoint while loading (--quantization fp8 on a BF16 model).")
    excluded: tuple[str, ...] = Field(
        (), description="Modules the checkpoint leaves in the model's dtype (its "
        "quantization_config's ignore / ignored_layers / modules_to_not_convert / "
        "exclude_modules), as patterns over vLLM's module names: 're:' and a regular "
        "expression matched from the name's start, else a shell-style glob (a bare name matches "
        "itself; a name the format matches as a substring is stored as '*name*').")
    kv_cache_dtype: Literal["fp8"] | None = Field(
        None, description="The KV cache dtype the checkpoint declares (ModelOpt's "
        "kv_cache_quant_algo FP8): vLLM stores the cache in it when --kv-cache-dtype is auto "
        "(from v0.14).")

    def excludes(self, name: str) -> bool:
        """Whether the checkpoint leaves module ``name`` (e.g.
        ``model.layers.3.self_attn.q_proj``) unquantized."""
        return any(re.match(p[3:], name) if p.startswith("re:") else fnmatchcase(name, p)
                   for p in self.excluded)

    @property
    def weight_only(self) -> bool:
        return self.activation_bits == 16

    def weight_bytes(self, k: float, n: float) -> float:
        """Bytes of one ``k``-in, ``n``-out layer: codes, scales and zero points."""
        codes = k * n * self.weight_bits / _BITS_PER_BYTE
        if self.weight_block_size is not None:
            block_n, block_k = self.weight_block_size
            num_scales = math.ceil(n / block_n) * math.ceil(k / block_k)
        elif self.group_size > 0:
            num_scales = math.ceil(k / self.group_size) * n
        elif self.group_size == -1:
            num_scales = n
        else:
            num_scales = 1
        zeros = self.weight_bits / _BITS_PER_BYTE if self.zero_point else 0.0
        return codes + num_scales * (self.scale_bytes + zeros)

    def describe(self) -> str:
        """``awq_marlin W4A16 g128``, ``fp8 W8A8 FP8`` and the like."""
        if self.weight_block_size is not None:
            grouping = f" block {self.weight_block_size[0]}x{self.weight_block_size[1]}"
        elif self.group_size > 0:
            grouping = f" g{self.group_size}"
        else:
            grouping = ""
        kind = f" FP{self.weight_bits}" if self.weight_type == "float" else ""
        scope = " experts" if self.modules == "experts" else ""
        return f"{self.method} W{self.weight_bits}A{self.activation_bits}{kind}{grouping}{scope}"


def online_fp8() -> QuantizationSpec:
    """``--quantization fp8`` on a 16-bit checkpoint: vLLM's Fp8Config with dynamic activation
    scales quantizes every linear layer to FP8 E4M3 with one float32 scale per tensor at load
    time (fp8.py ``Fp8LinearMethod``; ``get_config_filenames()`` is empty, so no file is
    needed)."""
    return QuantizationSpec(method="fp8", weight_bits=8, weight_type="float", group_size=0,
                            scale_bytes=4, activation_bits=8, serialized=False)


def quantization_from_hf(raw: dict[str, Any], where: str) -> QuantizationSpec | None:
    """The format a config.json's ``quantization_config`` (or ``compression_config``,
    compressed-tensors' key) describes; None for an unquantized model. ``InputError`` for a
    method or scheme clustersim does not price."""
    cfg = raw.get("quantization_config") or raw.get("compression_config")
    if cfg is None:
        return None
    if not isinstance(cfg, dict):
        raise InputError(where, "quantization_config must be a JSON object")
    where = f"{where}:quantization_config"
    method = str(cfg.get("quant_method") or "").lower().replace("compressed_tensors",
                                                                  "compressed-tensors")
    # ModelOpt names its algorithm under producer/quantization (vLLM's _parse_quant_hf_config)
    if (cfg.get("producer") or {}).get("name") == "modelopt":
        method = "modelopt"
    parse = _PARSERS.get(method)
    if parse is None:
        known = ", ".join(sorted(_PARSERS))
        raise InputError(where, f"quant_method {method or None!r} is not priced by clustersim "
                         f"(it prices {known})")
    return parse(cfg, where)


def _require(cfg: dict[str, Any], keys: tuple[str, ...], where: str) -> Any:
    for key in keys:
        if cfg.get(key) is not None:
            return cfg[key]
    raise InputError(where, f"missing required key {keys[0]!r}")


def _bits(value: Any, allowed: tuple[int, ...], where: str, key: str = "bits") -> Any:
    if value not in allowed:
        raise InputError(where, f"{key} {value!r} is not supported (vLLM takes "
                         f"{' or '.join(map(str, allowed))})")
    return value


def _awq(cfg: dict[str, Any], where: str) -> QuantizationSpec:
    # AWQConfig.from_config: w_bit/bits, q_group_size/group_size, zero_point; only 4 bits
    bits = _bits(_require(cfg, ("bits", "w_bit"), where), (4,), where)
    return QuantizationSpec(
        method="awq", weight_bits=bits, weight_type="int",
        group_size=_group(_require(cfg, ("group_size", "q_group_size"), where), where),
        zero_point=bool(_require(cfg, ("zero_point",), where)), scale_bytes=2,
        lm_head=bool(cfg.get("lm_head", False)),
        # AWQConfig skips a layer when any entry is a substring of its name
        excluded=_excluded(cfg, ("modules_to_not_convert",), where, substring=True))


def _gptq(cfg: dict[str, Any], where: str) -> QuantizationSpec:
    # GPTQConfig.from_config: bits (2/3/4/8), group_size, desc_act, lm_head; qzeros are stored
    # whatever sym says, but Marlin drops them for symmetric checkpoints
    bits = _bits(_require(cfg, ("bits",), where), (4, 8), where)
    return QuantizationSpec(
        method="gptq", weight_bits=bits, weight_type="int",
        group_size=_group(_require(cfg, ("group_size",), where), where),
        zero_point=not bool(cfg.get("sym", True)), scale_bytes=2,
        lm_head=bool(cfg.get("lm_head", False)))


def _fp8(cfg: dict[str, Any], where: str) -> QuantizationSpec:
    # Fp8Config.from_config: a serialized FP8 checkpoint, per-tensor or block scales (fp32)
    block = cfg.get("weight_block_size")
    if block is not None and (not isinstance(block, list | tuple) or len(block) != 2):
        raise InputError(where, f"weight_block_size must be [block_n, block_k], got {block!r}")
    return QuantizationSpec(
        method="fp8", weight_bits=8, weight_type="float", group_size=0,
        weight_block_size=None if block is None else (int(block[0]), int(block[1])),
        scale_bytes=4, activation_bits=8,
        # Fp8Config: ignored_layers, else modules_to_not_convert; exact names
        excluded=_excluded(cfg, ("ignored_layers", "modules_to_not_convert"), where))


def _modelopt(cfg: dict[str, Any], where: str) -> QuantizationSpec:
    # ModelOptQuantConfigBase.from_config: {"quantization": {"quant_algo": ...}} or a flat
    # quant_algo; FP8 (per-tensor), NVFP4 (FP4 E2M1, one FP8 scale per 16 weights)
    inner = cfg.get("quantization") if isinstance(cfg.get("quantization"), dict) else cfg
    algo = str(inner.get("quant_algo") or "").upper()
    # ModelOptQuantConfigBase.is_layer_excluded: an entry excludes the layers it names, is a
    # substring of, or matches as a wildcard
    excluded = _excluded(inner, ("exclude_modules", "ignore"), where, substring=True)
    kv = _modelopt_kv_cache_dtype(inner, where)
    if "NVFP4" in algo or algo == "FP4":
        group = int(inner.get("group_size") or 16)
        return QuantizationSpec(method="modelopt_fp4", weight_bits=4, weight_type="float",
                                group_size=group, scale_bytes=1, activation_bits=4,
                                excluded=excluded, kv_cache_dtype=kv)
    if "FP8" in algo:
        return QuantizationSpec(method="modelopt", weight_bits=8, weight_type="float",
                                group_size=-1 if "PER_CHANNEL" in algo else 0, scale_bytes=4,
                                activation_bits=8, excluded=excluded, kv_cache_dtype=kv)
    raise InputError(where, f"ModelOpt quant_algo {algo or None!r} is not priced "
                     "(FP8 and NVFP4 are)")


def _compressed_tensors(cfg: dict[str, Any], where: str) -> QuantizationSpec:
    """The first config group's scheme (llm-compressor writes one for the linear layers):
    W8A8 INT8 or FP8, W4A16 / W8A16 integer, W8A16 FP8 (CompressedTensorsConfig schemes)."""
    groups = cfg.get("config_groups")
    if not isinstance(groups, dict) or not groups:
        raise InputError(where, "compressed-tensors config needs config_groups")
    scheme = next(iter(groups.values()))
    weights = scheme.get("weights") if isinstance(scheme, dict) else None
    if not isinstance(weights, dict):
        raise InputError(where, "the compressed-tensors scheme has no weights entry")
    inputs = scheme.get("input_activations")
    w_bits = _bits(weights.get("num_bits"), (4, 8), where, "weights.num_bits")
    w_type = "float" if weights.get("type") == "float" else "int"
    strategy = weights.get("strategy") or "tensor"
    if strategy == "group":
        group = _group(weights.get("group_size"), where)
    elif strategy == "channel":
        group = -1
    elif strategy == "block":
        group = 0
    else:
        group = 0
    block = weights.get("block_structure")
    a_bits, a_type = 16, "float"
    if isinstance(inputs, dict):
        a_bits = _bits(inputs.get("num_bits"), (4, 8), where, "input_activations.num_bits")
        a_type = "float" if inputs.get("type") == "float" else "int"
    if w_type == "float" and w_bits == 4:
        raise InputError(where, "compressed-tensors FP4 schemes are not priced (NVFP4 "
                         "checkpoints in ModelOpt format are)")
    return QuantizationSpec(
        method="compressed-tensors", weight_bits=w_bits, weight_type=w_type, group_size=group,
        weight_block_size=tuple(block) if isinstance(block, list) and len(block) == 2 else None,
        scale_bytes=2 if strategy == "group" else 4,
        zero_point=not bool(weights.get("symmetric", True)), activation_bits=a_bits,
        activation_type=a_type,
        modules="experts" if _ignores_all_but_routed_experts(cfg.get("ignore"), where)
        else "linear",
        # CompressedTensorsConfig.ignore: exact layer names and 're:' regular expressions
        excluded=_excluded(cfg, ("ignore",), where))


_NOT_ROUTED_EXPERTS = (
    "model.layers.0.self_attn.o_proj",
    "model.layers.1.mlp.shared_experts.down_proj",
    "model.layers.0.mlp.down_proj",
)
"""A DeepSeek-style decoder's linear layers other than its routed experts, as vLLM names
them (vllm/model_executor/models/deepseek_v2.py): attention, the shared experts, the dense
first layers' MLP."""
_ROUTED_EXPERTS = "model.layers.1.mlp.experts"
"""vLLM's FusedMoE layer of the same decoder."""


def _ignores_all_but_routed_experts(ignore: Any, where: str) -> bool:
    """Whether a compressed-tensors ``ignore`` list leaves every linear layer but the routed
    experts unquantized (Kimi-K2-Thinking / K2.5's native INT4: ``re:.*self_attn.*``,
    ``re:.*shared_experts.*``, ``re:.*mlp\\.(gate|up|gate_up|down)_proj.*``). Each entry is
    an exact layer name or, after ``re:``, a regular expression matched from the name's start,
    as compressed-tensors' ``find_name_or_class_matches`` and vLLM's ``should_ignore_layer``
    read them. Other partial lists are read as quantizing every linear layer."""
    if ignore is None:
        return False
    if not isinstance(ignore, list) or not all(isinstance(p, str) for p in ignore):
        raise InputError(where, "ignore must be a list of layer names and 're:' patterns")

    def ignored(name: str) -> bool:
        for pattern in ignore:
            if pattern.startswith("re:"):
                try:
                    if re.match(pattern[3:], name):
                        return True
                except re.error as exc:
                    raise InputError(where, f"ignore pattern {pattern!r}: {exc}") from None
            elif pattern == name:
                return True
        return False

    return all(map(ignored, _NOT_ROUTED_EXPERTS)) and not ignored(_ROUTED_EXPERTS)


def _mxfp4(cfg: dict[str, Any], where: str) -> QuantizationSpec:
    """OCP MXFP4 (gpt-oss): FP4 E2M1 codes with one E8M0 (1-byte) scale per 32 weights along
    the input dimension, on the routed experts only (the checkpoint's modules_to_not_convert
    lists attention, router, embeddings and LM head; vLLM's ``Mxfp4Config.get_quant_method``
    quantizes ``FusedMoE`` layers alone and leaves linear layers unquantized)."""
    return QuantizationSpec(method="mxfp4", weight_bits=4, weight_type="float",
                            group_size=_MXFP4_BLOCK, scale_bytes=1, modules="experts",
                            excluded=_excluded(cfg, ("modules_to_not_convert",), where,
                                               substring=True))


def _excluded(cfg: dict[str, Any], keys: tuple[str, ...], where: str,
              substring: bool = False) -> tuple[str, ...]:
    """The first of ``keys`` that ``cfg`` lists, as :attr:`QuantizationSpec.excluded`
    patterns: 're:' expressions as they are (checked here), the rest as globs; ``substring``:
    the format also matches an entry anywhere in a name (vLLM's ``is_layer_skipped`` in
    substring mode), so a bare entry becomes ``*entry*``."""
    for key in keys:
        entries = cfg.get(key)
        if entries is None:
            continue
        if not isinstance(entries, list) or not all(isinstance(e, str) for e in entries):
            raise InputError(where, f"{key} must be a list of module names or patterns")
        patterns = []
        for entry in entries:
            if entry.startswith("re:"):
                try:
                    re.compile(entry[3:])
                except re.error as exc:
                    raise InputError(where, f"{key} entry {entry!r}: {exc}") from None
                patterns.append(entry)
            else:
                patterns.append(f"*{entry}*" if substring and "*" not in entry else entry)
        return tuple(patterns)
    return ()


def _modelopt_kv_cache_dtype(cfg: dict[str, Any], where: str) -> Literal["fp8"] | None:
    """The KV cache dtype a ModelOpt config declares: ``kv_cache_quant_algo`` "FP8", or a
    ``kv_cache_scheme`` of static 8-bit floats (vllm/utils/torch_utils.py
    ``get_kv_cache_quant_algo_string``); None for none. An NVFP4 KV cache is not priced."""
    algo = cfg.get("kv_cache_scheme") or cfg.get("kv_cache_quant_algo")
    if algo is None:
        return None
    if isinstance(algo, dict):
        if (algo.get("num_bits"), algo.get("type"), algo.get("dynamic")) == (8, "float", False):
            return "fp8"
    elif str(algo).lower() == "fp8":
        return "fp8"
    raise InputError(where, f"kv_cache_quant_algo {algo!r} is not priced (FP8 is)")


_MXFP4_BLOCK = 32
"""OCP Microscaling Formats (MX) v1.0, section 5.1: MXFP4 blocks of 32 E2M1 elements share
one E8M0 scale."""


def _group(value: Any, where: str) -> int:
    if not isinstance(value, int) or value == 0 or value < -1:
        raise InputError(where, f"group_size must be -1 or a positive integer, got {value!r}")
    return value


_PARSERS = {
    "awq": _awq,
    "gptq": _gptq,
    "fp8": _fp8,
    "modelopt": _modelopt,
    "compressed-tensors": _compressed_tensors,
    "mxfp4": _mxfp4,
}
