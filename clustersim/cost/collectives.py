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

A group wider than one host (an NVL72 rack's TP8 spans two 4-GPU compute trays) never runs the
custom all-reduce: ``CustomAllreduce.__init__`` turns itself off when the process group spans
nodes ("Custom allreduce is disabled because this process group spans across nodes",
custom_all_reduce.py), so every size goes to NCCL. No table measures NCCL beyond a Grace-
Blackwell tray, so such a group is priced by this rule: the NCCL fit of the tray's own tables
(its latency and its bus bandwidth as a fraction of NVLink 5's 900 GB/s) with the ring's
``2(n - 1)/n`` bytes per GPU at the group's size. Every GPU of the rack reaches every other
through the same NVSwitch trays, a pair in one tray as much as a pair in two, so the tray's
measured bandwidth is the rack's; the latency is kept flat in ``n`` (NCCL's NVLink SHARP
all-reduce reduces in the switches, one hop for any group size), which is optimistic by NCCL's
ring latency for the widest groups.

Where the profile holds a measured curve of vLLM's own all-reduce for the group's world size
(``GpuSpec.allreduce_curves``: ``tensor_model_parallel_all_reduce`` timed under CUDA graphs, so
custom, symmetric-memory or NCCL as that vLLM version routes each size), the curve prices every
size on the GPUs' own link and the fits above are not used: one line through two measured
points has no single latency and bandwidth to fit (at 8 H100s, 128 MiB takes 0.577 ms, a bus
bandwidth of 407 GB/s, where 2 MiB runs at 189 GB/s).
"""

from __future__ import annotations

import itertools
import math

from clustersim.catalog.specs import GpuSpec, LinkSpec, ModelSpec

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
    if tp > gpu.gpus_per_host:
        return 0  # "Custom allreduce is disabled because this process group spans across nodes"
    fully_connected = link.kind == "nvlink"
    if tp > 2 and not fully_connected:
        return 0  # "not supported on more than two PCIe-only GPUs"
    limit = CUSTOM_AR_MAX_BYTES
    capped = SYMM_MEM_CUSTOM_AR_MAX_BYTES.get(gpu.compute_capability or "", {})
    if tp in capped:
        limit = min(limit, capped[tp])
    return limit


AllReduceSegment = tuple[float, float, float, str]
"""``(up to tokens, fixed s, s per token, name)``: a step's all-reduces of a batch of fewer
than ``up to`` tokens (and at least the previous segment's) cost ``fixed + tokens x per``."""

_MEASURED = "all-reduce (vLLM's, measured)"


def allreduce_segments(
    gpu: GpuSpec, tp: int, token_bytes: float, count: int, *,
    link_bytes_per_s: float | None = None, link_latency_s: float | None = None,
) -> tuple[AllReduceSegment, ...]:
    """A step's ``count`` all-reduces among ``tp`` ``gpu``s, of ``token_bytes`` per token, as
    segments rising in batch tokens, the last open-ended.

    ``link_*`` (a topology's slower link for the group) replace the link's effective bandwidth
    and the all-reduce latency; a measured curve is then not used, as it was measured on
    ``gpu.link``."""
    if tp < 2:
        return ((math.inf, 0.0, 0.0, ""),)
    link = gpu.tp_link(tp)
    curve = gpu.allreduce_curve(tp)
    if curve is not None and link is gpu.link and link_bytes_per_s is None \
            and link_latency_s is None:
        points = curve.points
        segments: list[AllReduceSegment] = [
            (points[0][0] / token_bytes, count * points[0][1], 0.0, _MEASURED)]
        for (b0, t0), (b1, t1) in itertools.pairwise(points):
            slope = (t1 - t0) / (b1 - b0)
            segments.append((b1 / token_bytes, count * (t0 - b0 * slope),
                             count * slope * token_bytes, _MEASURED))
        last = segments.pop()
        return (*segments, (math.inf, *last[1:]))
    bytes_per_s = link.effective_bytes_per_s if link_bytes_per_s is None else link_bytes_per_s
    latency = gpu.allreduce_latency_s if link_latency_s is None else link_latency_s
    ring = 2 * (tp - 1) / tp  # a ring all-reduce moves 2(n-1)/n of the message per GPU
    nccl_per_token = count * ring * token_bytes / bytes_per_s
    nccl = (math.inf, count * latency, nccl_per_token, _nccl_name(gpu, tp))
    max_bytes = custom_allreduce_max_bytes(gpu, tp, link)
    if not max_bytes:
        return (nccl,)
    assert gpu.custom_allreduce_latency_s is not None
    # at its own latency and at its bandwidth relative to NCCL's on the same link
    eff = gpu.custom_allreduce_link_efficiency or link.efficiency
    custom = (max_bytes / token_bytes, count * gpu.custom_allreduce_latency_s,
              nccl_per_token * link.efficiency / eff, "all-reduce (vLLM's custom)")
    return (custom, nccl)


def _nccl_name(gpu: GpuSpec, tp: int) -> str:
    """The NCCL all-reduce's operator name; beyond the widest group the GPU's tables measured,
    it says the price is their fit extrapolated (module docstring)."""
    measured = sorted(curve.gpus for curve in gpu.allreduce_curves)
    if measured and tp > measured[-1]:
        return (f"all-reduce (NCCL fit of {measured[0]}-{measured[-1]} GPUs, "
                f"ring of {tp})")
    return "all-reduce (NCCL)"


def add_segments(first: tuple[AllReduceSegment, ...],
                 second: tuple[AllReduceSegment, ...]) -> tuple[AllReduceSegment, ...]:
    """The sum of two steps' worth of all-reduce segments (each rising in tokens, the last
    open-ended) as one list on the union of their bounds, named as ``first`` names them."""
    bounds = sorted({upto for upto, *_ in (*first, *second)})
    merged: list[AllReduceSegment] = []
    lower = -math.inf
    for upto in bounds:
        a = next(seg for seg in first if seg[0] > lower)
        b = next(seg for seg in second if seg[0] > lower)
        merged.append((upto, a[1] + b[1], a[2] + b[2], a[3]))
        lower = upto
    return tuple(merged)


# ------------------------------------------------------------ MoE all-to-all
LOW_LATENCY_DISPATCH_S = 45e-6
"""Fixed seconds of one DeepEP low-latency dispatch (decode): DeepEP V1's measured latency
less its cross-node bytes at the CX7 line rate (docs/legacy.md, H800 + CX7 400 Gb/s, 128
tokens x 7168 hidden x top-8, FP8 dispatch: 118/155/173/194 us at EP 16/32/64/256, i.e.
45/45/45/52 us over ``(G - 8)/G x 7.3 MB / 50 GB/s``)."""
LOW_LATENCY_COMBINE_S = 50e-6
"""The same for one low-latency combine (BF16): 195/273/314 us at EP 16/32/64, i.e. 48, 53,
57 us over the bytes' line-rate time (github.com/deepseek-ai/DeepEP docs/legacy.md)."""
DEEPEP_NORMAL_SMS = 20
"""SMs DeepEP's normal (high-throughput) dispatch and combine kernels hold while they run
(``deep_ep.Buffer.num_sms``'s default, github.com/deepseek-ai/DeepEP ``deep_ep/buffer.py``);
its low-latency kernels receive through a hook and hold none while the other work runs."""
FP8_DISPATCH_BYTES = 1.0 + 4.0 / 128
"""Bytes per hidden element of an FP8 dispatch: one byte plus a 4-byte scale per 128 (DeepEP's
``use_fp8`` dispatch with per-128 block scales, as DeepSeek-V3/R1 serving runs it)."""


class AllToAll:
    """The expert-parallel all-to-all of one MoE layer over ``group_gpus`` GPUs in nodes of
    ``node_gpus`` (DeepEP's dispatch and combine).

    Each token's hidden state goes to the ranks of its top-k experts (dispatch,
    ``dispatch_bytes`` per element) and comes back weighted (combine, ``combine_bytes``).
    Experts spread evenly, so of a token's k routed rows ``k (n - 1) / G`` go to another GPU
    of its node, over NVLink, and the cross-node ones over the GPU's NIC path
    (``nic_bytes_per_s``): DeepEP's low-latency kernels send every one of the
    ``k (G - n) / G`` rows over RDMA; its normal kernels send a token once to each remote node
    its experts sit on (then forward it over that node's NVLink), ``(N - 1)(1 - (1 - 1/N)^k)``
    rows with ``N = G / n`` nodes; a router that limits each token to a few groups of
    consecutive experts (``expert_groups``, DeepSeek-V3's grouped top-k) lets it reach fewer
    nodes (:func:`nodes_reached`). The NVLink and NIC parts go at once (``overlap``: the slower
    one counts) or one after the other; each call adds ``dispatch_s`` / ``combine_s``."""

    __slots__ = ("group_gpus", "node_gpus", "nvlink_bytes_per_s", "nic_bytes_per_s",
                 "dispatch_s", "combine_s", "dispatch_bytes", "combine_bytes", "overlap", "mode",
                 "expert_groups")

    def __init__(self, group_gpus: int, node_gpus: int, nvlink_bytes_per_s: float,
                 nic_bytes_per_s: float, *, dispatch_bytes: float, combine_bytes: float,
                 mode: str, call_latency_s: float = 0.0, overlap: bool = True,
                 expert_groups: tuple[int, int] | None = None) -> None:
        """``mode``: ``low_latency`` (decode: DeepEP's low-latency kernels, their fixed cost
        per call) or ``normal`` (prefill: ``call_latency_s`` per call, the NIC path's).
        ``expert_groups``: (groups, groups a token may use), the model's
        ``expert_group_limit``."""
        if not 1 <= node_gpus <= group_gpus:
            raise ValueError(f"bad all-to-all group: {group_gpus} GPUs, {node_gpus} a node")
        if not (nvlink_bytes_per_s > 0 and nic_bytes_per_s > 0):
            raise ValueError("all-to-all bandwidths must be > 0")
        if mode not in ("low_latency", "normal"):
            raise ValueError(f"unknown all-to-all mode {mode!r}")
        self.group_gpus, self.node_gpus = group_gpus, node_gpus
        self.nvlink_bytes_per_s, self.nic_bytes_per_s = nvlink_bytes_per_s, nic_bytes_per_s
        self.dispatch_bytes, self.combine_bytes = dispatch_bytes, combine_bytes
        self.overlap, self.mode = overlap, mode
        self.expert_groups = expert_groups
        if mode == "low_latency":
            self.dispatch_s, self.combine_s = LOW_LATENCY_DISPATCH_S, LOW_LATENCY_COMBINE_S
        else:
            self.dispatch_s = self.combine_s = call_latency_s

    @property
    def cross_node_fraction(self) -> float:
        """Of a rank's routed rows, the share whose experts sit on another node."""
        return (self.group_gpus - self.node_gpus) / self.group_gpus

    @property
    def in_node_fraction(self) -> float:
        """The share on another GPU of the rank's own node."""
        return (self.node_gpus - 1) / self.group_gpus

    def nic_rows(self, top_k: float) -> float:
        """Hidden states one token sends over the NIC per call (see the class)."""
        if self.mode == "low_latency":
            return top_k * self.cross_node_fraction
        if self.expert_groups is not None:
            return nodes_reached(self.group_gpus, self.node_gpus, top_k, *self.expert_groups)
        nodes = self.group_gpus / self.node_gpus
        return (nodes - 1.0) * (1.0 - (1.0 - 1.0 / nodes) ** top_k)

    def s_per_token_byte(self, top_k: float) -> float:
        """Seconds per token and byte of its hidden state (one call, either direction): the
        NVLink and NIC parts at once (the slower) or in turn."""
        nvlink = top_k * self.in_node_fraction / self.nvlink_bytes_per_s
        nic = self.nic_rows(top_k) / self.nic_bytes_per_s
        return max(nvlink, nic) if self.overlap else nvlink + nic

    def layer_s(self, tokens: float, top_k: float, hidden: float, imbalance: float = 1.0) -> float:
        """Seconds of one layer's dispatch and combine for a rank sending ``tokens`` tokens
        (the busiest rank receives ``imbalance x`` the mean)."""
        return (self.dispatch_s + self.combine_s
                + tokens * imbalance * hidden * (self.dispatch_bytes + self.combine_bytes)
                * self.s_per_token_byte(top_k))


def deepep_all_to_all(model: ModelSpec, group_gpus: int, node_gpus: int,
                      nvlink_bytes_per_s: float, nic_bytes_per_s: float, mode: str,
                      call_latency_s: float = 0.0) -> AllToAll:
    """DeepEP's all-to-all of ``model``'s expert-parallel group as SGLang-style serving runs
    it: an FP8 dispatch (one byte a hidden element plus its block scales) where the model's
    weights are FP8, else in the model's dtype; the combine in the model's dtype; the router's
    group limit, if any, bounding the nodes a token reaches."""
    fp8 = model.quantization is not None and model.quantization.method == "fp8"
    return AllToAll(group_gpus, node_gpus, nvlink_bytes_per_s, nic_bytes_per_s,
                    dispatch_bytes=FP8_DISPATCH_BYTES if fp8 else model.dtype_bytes,
                    combine_bytes=model.dtype_bytes, mode=mode, call_latency_s=call_latency_s,
                    expert_groups=model.expert_group_limit)


def nodes_reached(group_gpus: int, node_gpus: int, top_k: float, groups: int,
                  chosen: int) -> float:
    """Other nodes one token's experts sit on, on average, when the router takes them from
    ``chosen`` of ``groups`` groups of consecutive experts (vLLM's ``grouped_topk``: the groups
    with the best experts' scores first, then the top ``k`` experts within them).

    Experts sit on the group's ranks in order (expert ``e`` of ``E`` on rank ``e G / E``), so
    group ``g`` covers the ranks of ``[g / groups, (g + 1) / groups)`` and node ``m`` those of
    ``[m n / G, (m + 1) n / G)``. Every set of ``chosen`` groups is equally likely and the
    ``k`` experts fall evenly over the chosen groups' experts, so node ``m`` is reached unless
    all ``k`` miss its share ``s_m`` of them: ``1 - (1 - s_m)^k``. The sending rank's own node
    is any node in proportion to its ranks. Without grouping (``chosen == groups``) this is
    the ``(N - 1)(1 - (1 - 1/N)^k)`` of evenly spread experts."""
    bounds = [min(m * node_gpus / group_gpus, 1.0)
              for m in range(math.ceil(group_gpus / node_gpus) + 1)]
    nodes = list(itertools.pairwise(bounds))
    reached = [0.0] * len(nodes)
    subsets = list(itertools.combinations(range(groups), chosen))
    for subset in subsets:
        for m, (lo, hi) in enumerate(nodes):
            covered = sum(max(0.0, min(hi, (g + 1) / groups) - max(lo, g / groups))
                          for g in subset)
            share = covered * groups / chosen
            reached[m] += 1.0 - (1.0 - share) ** top_k
    reached = [r / len(subsets) for r in reached]
    own = sum((hi - lo) * r for (lo, hi), r in zip(nodes, reached, strict=True))
    return sum(reached) - own


def deepep_call_s(a2a: AllToAll, gpu: GpuSpec) -> tuple[float, float]:
    """The fixed seconds of one dispatch and one combine of ``a2a`` on ``gpu``: DeepEP's call
    as measured on the GPU's NVLink where its profile has it (``GpuSpec.deepep_calls``,
    aiconfigurator's moe_a2a table: EP 8 in one node), its normal kernels' plus the NIC path's
    latency; else ``a2a``'s own (the cited low-latency constants, the NIC path's latency)."""
    calls = gpu.deepep_calls
    if calls is None:
        return a2a.dispatch_s, a2a.combine_s
    if a2a.mode == "low_latency":
        return calls.low_latency_dispatch_s, calls.low_latency_combine_s
    return calls.normal_dispatch_s + a2a.dispatch_s, calls.normal_combine_s + a2a.combine_s
