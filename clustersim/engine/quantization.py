"""Which quantization an engine serves a model with, or why vLLM refuses to start.

vLLM decides at start-up, and so does :func:`served_model`, in vLLM's order:

1. the checkpoint's ``quantization_config`` names a method (``ModelConfig._verify_quantization``,
   vllm/config/model.py); a faster kernel family may take it over on CUDA: ``awq`` becomes
   ``awq_marlin`` and a symmetric ``gptq`` becomes ``gptq_marlin`` unless ``--quantization``
   insists on the old name (``override_quantization_method`` in awq_marlin.py and
   gptq_marlin.py); a different ``--quantization`` is refused as a mismatch;
2. without a config, only ``fp8`` can quantize a 16-bit checkpoint while loading; any other
   method looks for its config file and fails (``get_quant_config``,
   vllm/model_executor/model_loader/weight_utils.py: "Cannot find the config file for awq");
3. the platform must list the method (``Platform.verify_quantization``; ROCm's
   ``supported_quantization`` in vllm/platforms/rocm.py has no Marlin and no ModelOpt);
4. the GPU must have the method's minimum compute capability and the model's dtype must be one
   the method takes (``VllmConfig._get_quantization_config``, vllm/config/vllm.py;
   ``get_min_capability`` and ``get_supported_act_dtypes`` of each method's config class);
5. ``--kv-cache-dtype`` fp8 stores one byte per cached element (vllm/config/cache.py
   ``CacheDType``: "CUDA 11.8+ supports fp8 (=fp8_e4m3) and fp8_e5m2"); left at auto, it is
   what a ModelOpt checkpoint's ``kv_cache_quant_algo`` declares, from vLLM 0.14
   (``resolve_kv_cache_dtype_string``, vllm/utils/torch_utils.py), else the model's dtype.

Which kernel then runs each GEMM (native FP8 or vLLM's Marlin weight-only fallback below
compute capability 8.9, ...) is the cost model's business (``clustersim.cost.kernels``).
"""

from __future__ import annotations

from clustersim.catalog.quantization import QuantizationSpec, online_fp8
from clustersim.catalog.specs import GpuSpec, ModelSpec
from clustersim.cost.vllm_profile import parse_vllm_version
from clustersim.errors import ConfigError

CHECKPOINT_KV_DTYPE_SINCE = (0, 14)
"""The first vLLM release that stores the KV cache in the dtype a ModelOpt checkpoint declares
when ``--kv-cache-dtype`` is auto (absent from v0.13.0's wheel, present in v0.14.0's)."""

MIN_CAPABILITY: dict[str, int] = {
    "fp8": 80,  # Fp8Config: Marlin W8A16 below 89, native W8A8 from 89
    "modelopt": 89,  # ModelOptFp8Config
    "modelopt_fp4": 75,  # ModelOptNvFp4Config (native FP4 GEMMs need Blackwell; else Marlin)
    "awq": 75,  # AWQConfig: "The AWQ kernel only supports Turing or newer GPUs."
    "awq_marlin": 75,  # AWQMarlinConfig
    "gptq": 60,  # GPTQConfig
    "gptq_marlin": 75,  # GPTQMarlinConfig
    "compressed-tensors": 70,  # CompressedTensorsConfig; its schemes ask more (below)
    "mxfp4": 80,  # Mxfp4Config: Marlin MXFP4 below 9.0, Triton kernels on 9.0, FlashInfer 10.0
}
"""``get_min_capability()`` of each method's QuantizationConfig (vllm/model_executor/layers/
quantization/{fp8,modelopt,awq,awq_marlin,gptq,gptq_marlin}.py,
compressed_tensors/compressed_tensors.py)."""

# compressed-tensors schemes (compressed_tensors/schemes/): CompressedTensorsW8A8Int8 needs 7.5,
# the W4A16/W8A16 integer scheme runs on Marlin (8.0), W8A8 FP8 falls back to Marlin W8A16
# below 8.9 (CompressedTensorsConfig._get_scheme_from_parts checks _check_scheme_supported).
_CT_INT8_W8A8_CAPABILITY = 75
_MARLIN_CAPABILITY = 80
"""marlin_utils.query_marlin_supported_quant_types: no Marlin type below compute capability
8.0 (the kernel's README: "NVIDIA GPU with compute capability >= 8.0")."""
_MARLIN_GROUP_SIZES = (-1, 32, 64, 128)
"""marlin_utils.MARLIN_SUPPORTED_GROUP_SIZES."""
_HALF_ONLY = {"awq", "gptq"}
"""Methods whose ``get_supported_act_dtypes()`` is [torch.half] only (the legacy AWQ and GPTQ
kernels); the Marlin, FP8 and compressed-tensors ones take bfloat16 too."""
ROCM_METHODS = ("awq", "gptq", "fp8", "compressed-tensors", "mxfp4")
NATIVE_FP4_CAPABILITY = 100
"""ModelOptNvFp4LinearMethod runs FlashInfer/CUTLASS FP4 GEMMs on Blackwell (``cutlass_fp4_
supported``) and Marlin weight-only FP4 elsewhere."""
"""The priced methods in vllm/platforms/rocm.py ``RocmPlatform.supported_quantization``."""


def served_model(
    model: ModelSpec, gpu: GpuSpec, quantization: str | None = None,
    kv_cache_dtype: str = "auto", *, where: str = "engine.quantization",
    vllm_version: str | None = None,
) -> ModelSpec:
    """``model`` as an engine on ``gpu`` with ``--quantization quantization`` and
    ``--kv-cache-dtype kv_cache_dtype`` serves it: its ``quantization`` the method vLLM picks
    (module docstring), its ``kv_cache_dtype`` the engine's (for auto, the checkpoint's
    declared one where vLLM ``vllm_version`` reads it; None: the latest). ``ConfigError`` at
    ``where`` where vLLM refuses. The model comes back unchanged when nothing is quantized."""
    spec = _resolve_method(model, gpu, quantization, where)
    if spec is not None:
        _check_platform(spec, model, gpu, where)
        if (kv_cache_dtype == "auto" and spec.kv_cache_dtype is not None
                and (vllm_version is None
                     or parse_vllm_version(vllm_version) >= CHECKPOINT_KV_DTYPE_SINCE)):
            kv_cache_dtype = spec.kv_cache_dtype
    if spec == model.quantization and kv_cache_dtype == model.kv_cache_dtype:
        return model
    return model.model_copy(update={"quantization": spec, "kv_cache_dtype": kv_cache_dtype})


def _resolve_method(model: ModelSpec, gpu: GpuSpec, user: str | None,
                    where: str) -> QuantizationSpec | None:
    checkpoint = model.quantization
    if checkpoint is None:
        if user is None:
            return None
        if user == "fp8":
            return online_fp8()
        raise ConfigError(
            where,
            f"{user}: {model.id} is a {model.dtype} checkpoint without a quantization_config, "
            f"and only fp8 quantizes while loading; vLLM stops with 'Cannot find the config "
            f"file for {user}'. Serve a checkpoint quantized with {user} instead (a catalog "
            "variant such as qwen2.5-7b-instruct-awq, or a config.json with its "
            "quantization_config)",
        )
    method = _override(checkpoint, gpu, user)
    if user is not None and user != method:
        raise ConfigError(
            where,
            f"{user}: the model's quantization_config says {checkpoint.method}, which vLLM "
            f"serves as {method} on {gpu.id}; it stops with 'Quantization method specified in "
            f"the model config ({method}) does not match the quantization method specified in "
            f"the `quantization` argument ({user})'",
        )
    if method == checkpoint.method:
        return checkpoint
    return checkpoint.model_copy(update={"method": method})


def _override(checkpoint: QuantizationSpec, gpu: GpuSpec, user: str | None) -> str:
    """The method vLLM runs a checkpoint with: Marlin takes AWQ and symmetric GPTQ over on CUDA
    GPUs it supports, unless the user named the legacy method."""
    method = checkpoint.method
    if method not in ("awq", "gptq") or user == method:
        return method
    marlin = f"{method}_marlin"
    convertible = (
        gpu.platform == "cuda"
        and gpu.capability is not None and gpu.capability >= _MARLIN_CAPABILITY
        and checkpoint.group_size in _MARLIN_GROUP_SIZES
        # AWQ Marlin: 4-bit with zero points; GPTQ Marlin: 4 or 8 bits, symmetric
        and (checkpoint.zero_point if method == "awq" else not checkpoint.zero_point)
    )
    return marlin if convertible and user in (None, marlin) else method


def _check_peak(spec: QuantizationSpec, gpu: GpuSpec, where: str) -> None:
    """A native low-precision GEMM needs its tensor-core peak in the catalog to be priced."""
    capability = gpu.capability or 0
    if spec.activation_bits == 8 and spec.activation_type == "int":
        peak, name = gpu.int8_dense_tops, "INT8"
    elif spec.activation_bits == 4 and capability >= NATIVE_FP4_CAPABILITY:
        peak, name = gpu.fp4_dense_tflops, "FP4"
    else:
        return
    if peak is None:
        raise ConfigError(where, f"{spec.method}: vLLM runs {name} GEMMs on {gpu.id} "
                          f"(compute capability {gpu.compute_capability}) and the catalog has "
                          f"no {name} peak for it to price them (gpus.yaml)")


def _check_platform(spec: QuantizationSpec, model: ModelSpec, gpu: GpuSpec, where: str) -> None:
    method = spec.method
    if gpu.platform == "rocm" and method not in ROCM_METHODS:
        raise ConfigError(where, f"{method} quantization is currently not supported in rocm "
                          f"({gpu.id}); vLLM's ROCm platform takes {', '.join(ROCM_METHODS)}")
    if gpu.capability is None:
        raise ConfigError(where, f"{method}: the catalog has no compute capability for "
                          f"{gpu.id}, so whether vLLM runs it there is unknown")
    need = MIN_CAPABILITY[method]
    if method == "compressed-tensors":
        if spec.activation_bits == 8 and spec.activation_type == "int":
            need = max(need, _CT_INT8_W8A8_CAPABILITY)
        elif spec.weight_only:
            need = max(need, _MARLIN_CAPABILITY)
    if gpu.platform == "cuda" and gpu.capability < need:
        raise ConfigError(
            where,
            f"{method} needs compute capability {need / 10:.1f} and {gpu.id} has "
            f"{gpu.compute_capability}; vLLM stops with 'The quantization method {method} is "
            f"not supported for the current GPU. Minimum capability: {need}. Current "
            f"capability: {gpu.capability}.'",
        )
    _check_peak(spec, gpu, where)
    if method == "mxfp4" and model.dtype != "bfloat16":
        raise ConfigError(
            where,
            f"mxfp4: vLLM's MXFP4 MoE kernels take bfloat16 activations only "
            f"(Mxfp4Config.get_supported_act_dtypes) and {model.id} is {model.dtype}",
        )
    if method in _HALF_ONLY and model.dtype != "float16":
        raise ConfigError(
            where,
            f"{method}: the legacy {method} kernels take float16 activations only and "
            f"{model.id} is {model.dtype}; vLLM stops with 'torch.{model.dtype} is not "
            f"supported for quantization method {method}' ({method}_marlin takes both)",
        )
