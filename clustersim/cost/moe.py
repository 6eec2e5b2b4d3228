"""Which fused-MoE kernel vLLM runs a model's routed experts with, and the measured table that
prices it on a GPU.

vLLM picks one experts kernel per MoE layer at start-up from the experts' format and the
parallelism (the ``select_*_moe_backend`` oracles under vllm/model_executor/layers/fused_moe/
oracle/, read at vllm-project/vllm@001a058b); NVIDIA aiconfigurator times the same kernels
per format (its ``moe_dtype``) and records the one vLLM chose as ``kernel_source``::

    experts stored as                  format (moe_dtype)  kernel on Hopper (SM 9.0)
    16-bit                             bfloat16            triton      (UnquantizedFusedMoE)
    FP8 W8A8 per tensor, static        fp8                 flashinfer_cutlass
      activation scales (ModelOpt)
    FP8 W8A8 per tensor, dynamic       fp8                 triton (not measured)
      activations (--quantization fp8)
    FP8 W8A8, 128x128 blocks, TP       fp8_block           triton
    FP8 W8A8, 128x128 blocks, EP       fp8_block           flashinfer_cutlass
    INT4 weight-only (compressed-      int4_wo             marlin      (MarlinExperts)
      tensors W4A16, AWQ/GPTQ Marlin)
    MXFP4 weights, 16-bit activations  w4a16_mxfp4         triton_mxfp4 (OpenAI's Triton
      (gpt-oss)                                                          kernels)

- Unquantized: ``oracle/unquantized.py`` puts Triton first on SM 9.0 ("the FlashInfer
  unquantized MoE kernels are slower than Triton", vllm-project/vllm PR #44220).
- FP8: ``oracle/fp8.py`` ``_get_priority_backends``: FlashInfer TRT-LLM (Blackwell only), then
  FlashInfer CUTLASS, DeepGEMM, Triton; "On Hopper for Block Fp8, prefer Triton for TP and FI
  CUTLASS for EP" moves one of the two to the front by ``ep_size``. The table's rows agree: its
  block-FP8 Triton rows are all ``moe_ep_size`` 1, its FlashInfer CUTLASS ones all
  ``moe_tp_size`` 1. FlashInfer's CUTLASS experts take per-tensor FP8 only with static input
  scales (``FlashInferExperts._supports_quant_scheme``: ``kFp8StaticTensorSym`` activations;
  experts/flashinfer_cutlass_moe.py), as ModelOpt's FP8 checkpoints store them and the table's
  ``fp8`` rows (``vllm_modeloptfp8moe_...``) ran; dynamic per-tensor activations (vLLM's own
  ``fp8`` method) fall through to Triton, which the table does not hold.
- INT4 weight-only: ``oracle/int_wna16.py``: FlashInfer TRT-LLM's MXINT4 kernel (Blackwell),
  else Marlin; compressed-tensors' WNA16, ``awq_marlin`` and ``gptq_marlin`` MoE methods all
  reach it. The legacy ``awq`` / ``gptq`` methods run Triton's WNA16 kernel, not measured.
- MXFP4: the gpt-oss MXFP4 method runs OpenAI's Triton ``matmul_ogs`` kernels on Hopper.

On Blackwell (compute capability 10.x: B200, GB200, B300, GB300) the same oracles put
FlashInfer's TensorRT-LLM experts first and every format but INT4 runs them (the tables' rows
at the catalog's shapes name no other kernel)::

    16-bit                             bfloat16            flashinfer_trtllm (TrtLlmBf16Experts)
    FP8 per tensor, static (ModelOpt)  fp8                 flashinfer_trtllm (TrtLlmFp8Experts
    FP8 128x128 blocks, TP or EP       fp8_block           flashinfer_trtllm   Monolithic)
    FP8 per tensor, dynamic            fp8                 triton (not measured)
    INT4 weight-only                   int4_wo             marlin
    MXFP4 weights (gpt-oss)            w4a16_mxfp4         flashinfer_trtllm_mxfp4
    NVFP4 W4A4 (ModelOpt)              nvfp4               flashinfer_trtllm (TrtLlmNvFp4Experts
                                                                             Monolithic)

- Unquantized: ``oracle/unquantized.py`` lists FlashInfer TRT-LLM first on CUDA and moves it
  back on SM 9.0 only (vllm-project/vllm@011fbfd6).
- FP8: ``_get_priority_backends`` puts FlashInfer TRT-LLM ahead of CUTLASS and Triton, and
  ``TrtLlmFp8ExpertsMonolithic._supports_quant_scheme`` takes block scales and static
  per-tensor activations; its kernels run on the capability-10 family only
  (``_supports_current_device``; experts/trtllm_fp8_moe.py). Dynamic per-tensor activations
  are not among them.
- INT4: aiconfigurator's B200, B300, GB200 and GB300 tables time Marlin for compressed-tensors
  W4A16 experts (the oracle may pick FlashInfer's MXINT4 kernel, which they do not hold).
- NVFP4: ``oracle/nvfp4.py`` puts FlashInfer's TensorRT-LLM FP4 experts first on the
  capability-10 family; the tables time them for compressed-tensors' W4A4 NVFP4 method, the
  kernel ModelOpt's NVFP4 experts reach through the same oracle. Below capability 10 vLLM runs
  NVFP4 experts as Marlin FP4 weight-only (``is_fp4_marlin_supported``: capability 8.0 and up),
  which no table measures.

Formats without a table (NVFP4's Marlin fallback and 8-bit weight-only on Hopper, INT8 W8A8)
and GPUs without one are priced as the format's dense GEMMs (``clustersim.cost.kernels``).
"""

from __future__ import annotations

from dataclasses import dataclass

from clustersim.catalog.quantization import QuantizationSpec
from clustersim.catalog.specs import GpuSpec, ModelSpec, MoeCurve, MoeKernelSpec

_MARLIN_METHODS = ("compressed-tensors", "awq_marlin", "gptq_marlin")
"""Methods whose 4-bit integer MoE layers run vLLM's Marlin MoE kernel."""


def moe_format(quant: QuantizationSpec | None) -> str | None:
    """The aiconfigurator ``moe_dtype`` of experts stored as ``quant`` (None: not one it
    measures)."""
    if quant is None:
        return "bfloat16"
    if quant.activation_bits == 8 and quant.activation_type == "float" \
            and quant.weight_bits == 8 and quant.weight_type == "float":
        return "fp8_block" if quant.weight_block_size is not None else "fp8"
    if quant.method == "mxfp4":
        return "w4a16_mxfp4"
    if quant.activation_bits == 4 and quant.weight_bits == 4 and quant.weight_type == "float":
        return "nvfp4"
    if (quant.weight_only and quant.weight_bits == 4 and quant.weight_type == "int"
            and quant.method in _MARLIN_METHODS):
        return "int4_wo"
    return None


_BLACKWELL_FAMILY = 10
"""Compute capability major of the datacenter Blackwell GPUs (10.0, 10.3): vLLM's
``is_device_capability_family(100)``."""


def moe_kernel_name(fmt: str, quant: QuantizationSpec | None, expert_parallel: bool,
                    capability: int | None = None) -> str:
    """The kernel vLLM's oracle picks for ``fmt`` experts stored as ``quant`` on a GPU of
    ``capability`` (``GpuSpec.capability``; None: Hopper's choice) (module docstring)."""
    static = quant is not None and quant.method == "modelopt"
    if capability is not None and capability // 10 == _BLACKWELL_FAMILY:
        if fmt == "fp8" and not static:
            return "triton"
        return {"int4_wo": "marlin", "w4a16_mxfp4": "flashinfer_trtllm_mxfp4"}.get(
            fmt, "flashinfer_trtllm")
    if fmt == "fp8_block":
        return "flashinfer_cutlass" if expert_parallel else "triton"
    if fmt == "fp8":
        return "flashinfer_cutlass" if static else "triton"
    return {"bfloat16": "triton", "int4_wo": "marlin", "w4a16_mxfp4": "triton_mxfp4",
            "nvfp4": "marlin"}[fmt]


@dataclass(frozen=True, slots=True)
class ExpertPricing:
    """How one model's routed experts are priced on one GPU and split."""

    format: str
    """aiconfigurator's ``moe_dtype`` of the experts."""
    kernel: MoeKernelSpec
    """The measured kernel: its table, its fit."""
    curve: MoeCurve | None
    """The measured curve of the model's shape and split; None: the fit prices it."""
    moe_tp: int
    moe_ep: int

    @property
    def describe(self) -> str:
        """One line: the format, the kernel, the table and which part of it prices."""
        k = self.kernel
        where = (f"measured curve at moe_tp {self.moe_tp}, moe_ep {self.moe_ep} "
                 f"({len(self.curve.points)} token counts, "
                 f"{self.curve.points[0][0]:g}-{self.curve.points[-1][0]:g})"
                 if self.curve is not None else
                 f"the table's fit (rms log error {k.fit_rms_log_error:.2f}): this shape and "
                 f"split (moe_tp {self.moe_tp}, moe_ep {self.moe_ep}) were not measured")
        return f"{k.dtype} experts, kernel {k.kernel}, {k.table}: {where} [{k.fit.calibration}]"


def expert_pricing(model: ModelSpec, gpu: GpuSpec, moe_gpus: int, expert_parallel: bool,
                   stored: QuantizationSpec | None) -> ExpertPricing | None:
    """The measured kernel and curve that price ``model``'s experts, stored as ``stored``
    (None: 16-bit), split over ``moe_gpus`` GPUs (by expert with ``expert_parallel``, else by
    slice); None where ``gpu`` has no table of their format and kernel."""
    fmt = moe_format(stored)
    if fmt is None:
        return None
    kernel = gpu.moe_kernel(fmt, moe_kernel_name(fmt, stored, expert_parallel, gpu.capability))
    if kernel is None:
        return None
    moe_tp, moe_ep = (1, moe_gpus) if expert_parallel else (moe_gpus, 1)
    curve = kernel.curve(model.hidden_size, model.moe_intermediate_size,
                         model.num_experts_per_tok, model.num_experts, moe_tp, moe_ep)
    return ExpertPricing(fmt, kernel, curve, moe_tp, moe_ep)


def curve_segments(curve: MoeCurve, layers: int) -> tuple[list[float], list[float], list[float]]:
    """``curve`` as segments rising in tokens for ``layers`` layers: segment ``i`` prices a
    token count below ``upto[i]`` (and at least the previous bound) at ``fixed[i] + tokens x
    slope[i]``; the first holds the first point's time below it, the last is open-ended on the
    last measured slope."""
    points = curve.points
    upto, fixed, slope = [points[0][0]], [layers * points[0][1]], [0.0]
    for (n0, t0), (n1, t1) in zip(points, points[1:], strict=False):
        per_token = (t1 - t0) / (n1 - n0)
        upto.append(n1)
        fixed.append(layers * (t0 - n0 * per_token))
        slope.append(layers * per_token)
    upto[-1] = float("inf")
    return upto, fixed, slope
