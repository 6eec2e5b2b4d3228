"""Which GEMM kernel runs a (quantized) linear layer on a GPU, and the roofline it is priced on.

Every kernel is priced like the 16-bit one, ``floor + max((M + half) x FLOPs / (eff_c x peak x
ratio), (weights + M x activations) / (eff_m x bandwidth))``, with its own terms::

    kernel                 peak    efficiencies          weights streamed          ratio
    w16a16                 bf16    16-bit fit            2 B each                  1
    w8a8_fp8 (native)      fp8     fp8 fit               1 B + fp32 scales         1
    w8a8_int8              int8    fp8 fit, else 16-bit  1 B + scales              1
    w4a4_fp4 (NVFP4)       fp4     fp4 fit (else fp8)    0.5 B + FP8 scale / 16    1
    marlin (W4A16, W8A16)  bf16    16-bit fit, no half   codes + scales (+zeros)   r
    mxfp4 (W4A16 experts)  bf16    16-bit fit            0.5 B + E8M0 scale / 32   r
    dequant (awq, gptq)    bf16    16-bit fit            codes + scales (+zeros)   r
                           from ``dequant_rows`` rows: dequantize the whole weight to 16 bits
                           (read codes, write 2 B each), then a 16-bit GEMM reads it back

The FP4 fit is the GPU's own, on its NVFP4 table (``FlashInferCuteDslNvFp4LinearKernel``, vLLM
0.24: the B200, B300, GB200 and GB300). A GPU with FP4 tensor cores and no NVFP4 table is
priced by this rule: its FP8 fit's efficiencies at its FP4 peak (the FP4 kernel assumed to run
as close to its peak as the FP8 one does), which its kernel line says.

``r`` is the GPU's ``weight_only_compute_ratio``: what dequantizing in registers costs where the
GEMM is compute-bound (gpus.yaml says where its value comes from).

Which one vLLM picks, as its quantization methods pick it:

- FP8 (``fp8``, ``compressed-tensors`` W8A8-FP8): native W8A8 from compute capability 8.9
  and on ROCm; below 8.9 vLLM keeps the FP8 weights and runs Marlin W8A16
  (``Fp8LinearMethod.use_marlin = not current_platform.has_device_capability(89)``, fp8.py).
- ``modelopt_fp4`` (NVFP4): native W4A4 from compute capability 10.0 (Blackwell), else Marlin
  FP4 weight-only (``ModelOptNvFp4LinearMethod``: flashinfer/cutlass, else marlin).
- ``awq_marlin``, ``gptq_marlin``, compressed-tensors W4A16/W8A16: Marlin.
- ``awq``: vLLM's ``AWQLinearMethod.apply`` runs ``awq_gemm`` below 256 rows and
  ``awq_dequantize`` + a 16-bit matmul from 256 (awq.py); ``gptq``: exllama's q_gemm below
  ``MAX_Q_GEMM_ROWS`` = 50 rows (24 at 8 bits), else it reconstructs the 16-bit weight and
  calls cuBLAS (csrc/quantization/gptq/q_gemm.cu).

A MoE layer's routed experts run vLLM's fused-MoE kernel instead, priced on its measured
table where the GPU has one (``fused_moe_kernel``; clustersim.cost.moe picks it).

Below the dispatch threshold the legacy fused kernels are priced as Marlin: optimistic past a
few rows (the MARLIN README shows earlier 4-bit kernels losing their speed-up beyond batch 4).
"""

from __future__ import annotations

from dataclasses import dataclass

from clustersim.catalog.quantization import QuantizationSpec
from clustersim.catalog.specs import TERA, GemmFit, GpuSpec
from clustersim.cost.moe import ExpertPricing

_NATIVE_FP8_CAPABILITY = 89
_NATIVE_FP4_CAPABILITY = 100
_NEVER = float("inf")
_FP4_BYTES = 0.5 + 1.0 / 16
"""Bytes per NVFP4 activation element a W4A4 GEMM reads: the 4-bit code and one FP8 scale per
16 (as the FP4 fit reads its table)."""
NO_FP4_TABLE = "FP8 fit at the FP4 peak: no NVFP4 table"
AWQ_DEQUANT_ROWS = 256
"""awq.py: ``FP16_MATMUL_HEURISTIC_CONDITION = x.shape[:-1].numel() >= 256``."""
GPTQ_DEQUANT_ROWS = {4: 50, 8: 24}
"""csrc/quantization/gptq/q_gemm.cu: ``MAX_Q_GEMM_ROWS`` 50, ``MAX_Q_GEMM_ROWS_8BIT`` 24."""


@dataclass(frozen=True, slots=True)
class GemmKernel:
    """How one linear layer's GEMM is priced on one GPU."""

    name: str
    """w16a16, w8a8_fp8, w8a8_int8, w4a4_fp4, marlin, mxfp4, dequant."""
    peak_flops: float
    fit: GemmFit
    """compute and memory efficiencies and the half-saturation rows."""
    compute_ratio: float
    """Throughput relative to ``fit`` where compute-bound (dequantization in registers)."""
    weight: QuantizationSpec | None
    """How the weights are stored; None: in the model's dtype."""
    activation_bytes: float | None
    """Bytes per input element the GEMM reads (it writes the model's dtype); None: the
    model's dtype."""
    dequant_rows: float = _NEVER
    """Rows from which the weight is dequantized to 16 bits and a 16-bit GEMM runs."""

    @property
    def describe(self) -> str:
        """``w8a8_fp8 at 1978.9 TFLOPS (fit-v1:h100-sxm)`` and the like."""
        return f"{self.name} at {self.peak_flops / TERA:g} TFLOPS ({self.fit.calibration})"


def sixteen_bit_fit(gpu: GpuSpec) -> GemmFit:
    """The GPU's 16-bit GEMM fit, as the profile merged it."""
    return GemmFit(compute_efficiency=gpu.compute_efficiency,
                   compute_half_tokens=gpu.compute_half_tokens,
                   memory_efficiency=gpu.memory_efficiency, floor_s=gpu.gemm_floor_s,
                   calibration=gpu.calibration)


def gemm_kernel(quant: QuantizationSpec | None, gpu: GpuSpec) -> GemmKernel:
    """The kernel vLLM runs layers stored as ``quant`` with on ``gpu`` (module docstring).
    ``quant`` has been through ``clustersim.engine.quantization.served_model``: what vLLM
    refuses never gets here."""
    bf16 = sixteen_bit_fit(gpu)
    if quant is None:
        return GemmKernel("w16a16", gpu.peak_flops, bf16, 1.0, None, None)
    fp8_fit = gpu.fp8_gemm or bf16
    if quant.activation_bits == 8 and quant.activation_type == "int":
        if gpu.int8_dense_tops is None:
            raise ValueError(f"{gpu.id} has no INT8 peak in the catalog")
        return GemmKernel("w8a8_int8", gpu.int8_dense_tops * TERA, fp8_fit, 1.0, quant, 1)
    if quant.activation_bits == 8:  # FP8 W8A8
        native = gpu.platform == "rocm" or (gpu.capability or 0) >= _NATIVE_FP8_CAPABILITY
        if native:
            if gpu.fp8_dense_tflops is None:
                raise ValueError(f"{gpu.id} has no FP8 peak in the catalog")
            return GemmKernel("w8a8_fp8", gpu.fp8_dense_tflops * TERA, fp8_fit, 1.0, quant, 1)
        return _weight_only("marlin", quant, gpu, bf16)
    if quant.activation_bits == 4:  # NVFP4 W4A4
        if (gpu.capability or 0) >= _NATIVE_FP4_CAPABILITY:
            if gpu.fp4_dense_tflops is None:
                raise ValueError(f"{gpu.id} has no FP4 peak in the catalog")
            fp4_fit = gpu.fp4_gemm or fp8_fit.model_copy(
                update={"calibration": f"{fp8_fit.calibration}, {NO_FP4_TABLE}"})
            return GemmKernel("w4a4_fp4", gpu.fp4_dense_tflops * TERA, fp4_fit, 1.0, quant,
                              _FP4_BYTES)
        return _weight_only("marlin", quant, gpu, bf16)
    if quant.method == "mxfp4":
        # MXFP4 experts with 16-bit activations on every GPU vLLM serves them on: Marlin
        # below 9.0, OpenAI's Triton MoE kernels (matmul_ogs) on Hopper, FlashInfer's
        # MXFP4 x BF16 MoE on Blackwell by default (vllm/model_executor/layers/quantization/
        # mxfp4.py, get_mxfp4_backend); where the GPU measured the kernel, the experts are
        # priced on its table (fused_moe_kernel)
        return _weight_only("mxfp4", quant, gpu, bf16)
    if quant.method == "awq":
        return _weight_only("dequant", quant, gpu, bf16, AWQ_DEQUANT_ROWS)
    if quant.method == "gptq":
        return _weight_only("dequant", quant, gpu, bf16, GPTQ_DEQUANT_ROWS[quant.weight_bits])
    return _weight_only("marlin", quant, gpu, bf16)


def fused_moe_kernel(pricing: ExpertPricing, quant: QuantizationSpec | None,
                     gpu: GpuSpec) -> GemmKernel:
    """The routed experts on their measured fused-MoE kernel (clustersim.cost.moe): its fit,
    at the FP8 peak with FP8 activations for the FP8 formats, at the FP4 peak with NVFP4
    activations for NVFP4, at the 16-bit peak for the others (the fit was made on the kernel
    itself: no weight-only compute ratio on top)."""
    fit = pricing.kernel.fit
    name = f"fused_moe_{pricing.format}_{pricing.kernel.kernel}"
    if pricing.format == "nvfp4":
        if gpu.fp4_dense_tflops is None:
            raise ValueError(f"{gpu.id} has no FP4 peak in the catalog")
        return GemmKernel(name, gpu.fp4_dense_tflops * TERA, fit, 1.0, quant, _FP4_BYTES)
    if pricing.format in ("fp8", "fp8_block"):
        if gpu.fp8_dense_tflops is None:
            raise ValueError(f"{gpu.id} has no FP8 peak in the catalog")
        return GemmKernel(name, gpu.fp8_dense_tflops * TERA, fit, 1.0, quant, 1)
    return GemmKernel(name, gpu.peak_flops, fit, 1.0, quant, None)


def _weight_only(name: str, quant: QuantizationSpec, gpu: GpuSpec, fit: GemmFit,
                 dequant_rows: float = _NEVER) -> GemmKernel:
    if name == "marlin":
        # Marlin's design point: streaming 4-bit weights stays memory-bound up to batch 16-32
        # ("as long as we perform less than 25-50 tensor core multiply-accumulates per 4-bit
        # quantized weight ... near ideal 4x speedup", IST-DASLab/marlin README), so its
        # small-M GEMMs lose nothing to tiles: no half-saturation rows. The legacy kernels
        # keep the 16-bit GEMM's.
        fit = fit.model_copy(update={"compute_half_tokens": 0.0})
    return GemmKernel(name, gpu.peak_flops, fit, gpu.weight_only_compute_ratio, quant, None,
                      dequant_rows)
