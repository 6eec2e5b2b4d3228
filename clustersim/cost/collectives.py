"""Which all-reduce vLLM runs for a tensor-parallel message: its custom all-reduce or NCCL.

vLLM's ``CudaCommunicator.all_reduce`` tries its custom (peer-to-peer, one- or two-shot)
all-reduce first and falls back to NCCL (PyTorch symmetric memory in between, where enabled)::

    message bytes  0 ............ max_bytes ............................ >
                   custom all-reduce        | symmetric memory / NCCL

``CustomAllreduce`` (vllm/distributed/device_communicators/custom_all_reduce.py) is enabled for
world sizes 2, 4, 6 and 8 inside one node, beyond 2 GPUs only when they are fully connected by
NVLink, and only with working P2P; ``should_custom_ar`` takes a message while
``bytes < max_size``, ``max_size = 8192 * 1024`` by default. With symmetric memory available (on
by default, ``VLLM_ALLREDUCE_USE_SYMM_MEM=1``, for the compute capabilities in
``CUSTOM_ALL_REDUCE_MAX_SIZES``) the limit is the smaller of the two. Those larger messages go
to symmetric memory (up to ``SYMM_MEM_ALL_REDUCE_MAX_SIZES``) and then NCCL; no measurement of
the symmetric-memory path is here, so clustersim prices everything past the custom limit as
NCCL. Read at vllm-project/vllm@00d618aa (custom_all_reduce.py, all_reduce_utils.py) and
@089eca13 (cuda_communicator.py: custom, then symmetric memory, then PyNCCL).

Where the GPU's profile holds no custom all-reduce fit (it was measured on NVLink only: the
H100 and A100 SXM tables), every size is priced as NCCL.
"""

from __future__ import annotations

from clustersim.catalog.specs import GpuSpec, LinkSpec

_MIB = 1024 * 1024
CUSTOM_AR_MAX_BYTES = 8192 * 1024
"""``CustomAllreduce.__init__(..., max_size=8192 * 1024)``."""
CUSTOM_AR_WORLD_SIZES = (2, 4, 6, 8)
"""``CustomAllreduce._SUPPORTED_WORLD_SIZES``."""
SYMM_MEM_CUSTOM_AR_MAX_BYTES: dict[str, dict[int, int]] = {
    "9.0": {2: 64 * _MIB, 4: 32 * _MIB, 6: _MIB // 2, 8: _MIB // 4},
    "10.0": {2: 2 * _MIB, 4: 2 * _MIB, 6: 1 * _MIB, 8: 1 * _MIB},
    "10.3": {2: 4 * _MIB, 4: 4 * _MIB, 6: 8 * _MIB, 8: 4 * _MIB},
}
"""``all_reduce_utils.CUSTOM_ALL_REDUCE_MAX_SIZES``: the custom limit by compute capability and
world size when symmetric memory is enabled."""


def custom_allreduce_max_bytes(gpu: GpuSpec, tp: int, link: LinkSpec) -> int:
    """The message size (bytes) from which vLLM stops using its custom all-reduce among ``tp``
    ``gpu``s joined by ``link``; 0 where it does not use it at all (or no fit prices it)."""
    if gpu.custom_allreduce_latency_s is None or tp not in CUSTOM_AR_WORLD_SIZES:
        return 0
    fully_connected = link.kind == "nvlink"
    if tp > 2 and not fully_connected:
        return 0  # "not supported on more than two PCIe-only GPUs"
    limit = CUSTOM_AR_MAX_BYTES
    capped = SYMM_MEM_CUSTOM_AR_MAX_BYTES.get(gpu.compute_capability or "", {})
    if tp in capped:
        limit = min(limit, capped[tp])
    return limit
