"""Building a scenario's engines: pools resolved, placed on the topology and priced.

For every pool of the layout (or the scenario's one colocated pool): its engine settings
merged and resolved as ``vllm serve`` would (``engine.defaults``), its data-parallel, expert-
parallel and pipeline shape checked, its instances placed on the topology's GPUs, and each
engine made with its scheduler, KV manager and step pricer: the roofline with the links of
its GPUs (``cost.roofline``), DeepEP's all-to-all where an expert-parallel group spans nodes,
a pipeline's stages, or a fixed step time. :class:`~clustersim.cluster.system.Cluster` routes
requests between what :class:`EngineBuilder` made.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

from clustersim.catalog import load_gpu
from clustersim.catalog.specs import GpuSpec, ModelSpec
from clustersim.cluster.dispatch import Dispatch
from clustersim.cost.collectives import DEEPEP_NORMAL_SMS, AllToAll, deepep_all_to_all
from clustersim.cost.kernels import gemm_kernel
from clustersim.cost.memory import cudagraph_capture_sizes
from clustersim.cost.roofline import BatchShape, CostModel
from clustersim.engine.clock import Env
from clustersim.engine.config import SchedulerConfig
from clustersim.engine.data_parallel import DataParallelGroup, Lockstep, check_group
from clustersim.engine.defaults import EngineSetup, resolve_engine
from clustersim.engine.fastforward.timer import append_ends
from clustersim.engine.instance import Instance
from clustersim.engine.kv_manager import KVCacheManager
from clustersim.engine.offload import CpuKVTier, HostLink
from clustersim.engine.pipeline import ACTIVATION_TENSORS, Pipeline, PipelinePricer, stage_model
from clustersim.engine.scheduler import Scheduler, StepPlan
from clustersim.engine.settings import EngineSettings
from clustersim.engine.spec_decode import configure_prices, seeded
from clustersim.engine.step_plan import RooflinePricer
from clustersim.errors import ClusterSimError, ConfigError
from clustersim.scenario import Cost, FixedCost, Scenario
from clustersim.scenario.layout import LayoutSpec, PoolSpec

DEFAULT_POOL = "main"
DUMMY_BATCH = BatchShape(num_prefill_tokens=1, prefill_attn_pairs=1.0, prefill_kv_tokens=1)
"""What an idle rank of a lockstep data-parallel group runs (vLLM's dummy batch)."""


@dataclass(frozen=True, slots=True)
class InstanceInfo:
    """One instance's resolved configuration, for summaries."""

    name: str
    pool: str
    role: str
    gpu: str
    tensor_parallel_size: int
    gpus: tuple[str, ...]
    num_gpu_blocks: int
    block_size: int
    max_num_batched_tokens: int
    max_num_seqs: int
    max_model_len: int
    data_parallel_size: int = 1
    """Ranks of the data-parallel instance this engine is one rank of (1: a plain instance)."""
    calibration: str = "default"
    """The GPU profile that priced its steps (a catalog fit id, '+few-shot' when adjusted to a
    user's measurements); docs/validation.md says how far each is trusted."""
    quantization: str | None = None
    """vLLM's quantization method the engine runs (awq_marlin, fp8, ...); None: 16-bit."""
    kv_cache_dtype: str = "auto"
    """vLLM's --kv-cache-dtype of the engine."""
    kv_dtype: str = ""
    """The element type its KV cache is stored in (``auto``: the model's dtype)."""
    gemm_kernel: str = ""
    """The kernel that priced its linear layers, its peak and the fit it used
    (``clustersim.cost.kernels``)."""
    pipeline_parallel_size: int = 1
    """Pipeline stages of the engine, each ``tensor_parallel_size`` GPUs (summary.json lists
    it only when above 1)."""
    cpu_kv_blocks: int = 0
    """Blocks of the engine's CPU tier (``engine.kv_offloading_size``; summary.json lists it
    and the two fields after it only with a tier)."""
    cpu_kv_gib: float = 0.0
    """The CPU tier's host memory, GiB."""
    host_link_gb_per_s: float = 0.0
    """GB/s the engine copies to and from its CPU tier each way (its GPUs' PCIe links)."""

    @property
    def num_gpus(self) -> int:
        """GPUs of the engine: every stage's tensor-parallel group."""
        return self.tensor_parallel_size * self.pipeline_parallel_size


@dataclass(frozen=True, slots=True)
class RankGroup:
    """The ranks of one data-parallel instance of a prefill or decode pool: the pool routes to
    them one by one, and they fail together (one engine core's death stops the group's
    collectives) and restart together."""

    name: str
    role: str
    positions: tuple[int, ...]
    """Each rank's position among the role's instances."""
    lockstep: Lockstep | None
    """Their common step loop (a MoE model); None: each rank steps alone (dense)."""


class FixedPricer:
    """Every step takes the scenario's fixed ``step_time_s``."""

    __slots__ = ("step_time_s",)

    def __init__(self, step_time_s: float) -> None:
        self.step_time_s = step_time_s

    def __call__(self, plan: StepPlan) -> float:
        return self.step_time_s

    def decode_run(self, num_decodes: int, decode_kv_tokens: int, num_steps: int) -> list[float]:
        return [self.step_time_s] * num_steps

    def decode_run_ends(self, ends_s: list[float], start_s: float, num_decodes: int,
                        decode_kv_tokens: int, num_steps: int) -> None:
        append_ends(ends_s, start_s, self.decode_run(num_decodes, decode_kv_tokens, num_steps))


def make_pricer(cost_model: CostModel | None, cost: Cost) -> FixedPricer | RooflinePricer:
    """StepPlan -> seconds, through the roofline cost model (or a fixed time per step)."""
    if isinstance(cost, FixedCost):
        return FixedPricer(cost.step_time_s)
    assert cost_model is not None, "a roofline cost needs a cost model"
    return RooflinePricer(cost_model.prices)


class FixedGroupPricer:
    """Every lockstep step takes the scenario's fixed ``step_time_s``."""

    __slots__ = ("step_time_s",)

    def __init__(self, step_time_s: float) -> None:
        self.step_time_s = step_time_s

    def __call__(self, plans: list[StepPlan | None]) -> float:
        return self.step_time_s

    def decode_run(self, batches: list[tuple[int, int] | None], num_steps: int) -> list[float]:
        return [self.step_time_s] * num_steps


class RooflineGroupPricer:
    """Every rank's plan (None: idle, runs a dummy batch) -> seconds of one lockstep step:
    the slowest rank's, its MoE layers seeing ``dp x`` the largest rank's tokens (padding)."""

    __slots__ = ("cost_model", "dp")

    def __init__(self, cost_model: CostModel, dp: int) -> None:
        self.cost_model = cost_model
        self.dp = dp

    def __call__(self, plans: list[StepPlan | None]) -> float:
        step_time = self.cost_model.step_time
        shapes = [DUMMY_BATCH if p is None else p.batch_shape() for p in plans]
        widest = max(s.num_prefill_tokens + s.num_decode_tokens for s in shapes)
        return max(step_time(s, self.dp * widest).time_s for s in shapes)

    def decode_run(self, batches: list[tuple[int, int] | None], num_steps: int) -> list[float]:
        """Seconds of ``num_steps`` lockstep steps in which each rank decodes its batch
        (size, context of the first step; None: idle, a dummy batch), bit-identical to
        pricing each step's plans."""
        cost_model = self.cost_model
        widest = max(DUMMY_BATCH.num_prefill_tokens if b is None else b[0] for b in batches)
        moe_tokens = self.dp * widest
        columns = [cost_model.decode_run_s(b[0], b[1], num_steps, moe_tokens)
                   for b in batches if b is not None]
        if any(b is None for b in batches):
            columns.append([cost_model.step_time(DUMMY_BATCH, moe_tokens).time_s] * num_steps)
        return [max(step) for step in zip(*columns, strict=True)]


def make_group_pricer(
    cost_model: CostModel | None, cost: Cost, dp: int
) -> FixedGroupPricer | RooflineGroupPricer:
    """Every rank's plan (None: idle, runs a dummy batch) -> seconds of one lockstep step
    (see :class:`RooflineGroupPricer`)."""
    if isinstance(cost, FixedCost):
        return FixedGroupPricer(cost.step_time_s)
    assert cost_model is not None, "a roofline cost needs a cost model"
    return RooflineGroupPricer(cost_model, dp)


def _group_steps_it(plan: StepPlan) -> float:
    raise AssertionError("a lockstep rank is priced by its data-parallel group")


def default_layout() -> LayoutSpec:
    return LayoutSpec(kind="colocated", pools=[PoolSpec(name=DEFAULT_POOL)])


EXPERT_IMBALANCE_NO_EPLB = 1.3
"""The busiest expert-parallel rank's routed tokens over the mean across nodes without EPLB
(docs/scenarios.md, Wide expert parallelism: the sources and how soft they are)."""
EXPERT_IMBALANCE_EPLB = 1.05
"""The same with EPLB's redundant experts placed on the workload's statistics."""


def expert_imbalance(settings: EngineSettings | None, across_nodes: bool) -> float:
    """The busiest expert-parallel rank's load over the mean: the engine's own
    ``expert_imbalance``, else 1 inside a node (as clustersim priced it before) and the cited
    defaults across nodes, lower with EPLB."""
    if settings is not None and settings.expert_imbalance is not None:
        return settings.expert_imbalance
    if not across_nodes:
        return 1.0
    eplb = settings is not None and settings.eplb
    return EXPERT_IMBALANCE_EPLB if eplb else EXPERT_IMBALANCE_NO_EPLB


def hosts_of(group: list[str], gpus_per_host: int) -> set[tuple[str, int]]:
    """The hosts (one operating system, one vLLM node each) a group's GPUs sit on: GPU
    ``node/gpuN`` is on host ``N // gpus_per_host`` of its node (a Grace-Blackwell compute tray
    of an NVL72 rack holds 4 of its 72 GPUs; an HGX server, all 8 of its own)."""
    hosts = set()
    for gpu_id in group:
        node, _, index = gpu_id.rpartition("/gpu")
        hosts.add((node, int(index) // gpus_per_host))
    return hosts


def deepep_mode(role: str) -> str:
    """The DeepEP kernels a pool's all-to-all runs, as SGLang runs them with PD
    disaggregation: low-latency ones for decode, normal ones for prefill; a colocated group
    mixes both in its steps: the normal kernels."""
    return "low_latency" if role == "decode" else "normal"


def _merged_engine(base: EngineSettings, override: EngineSettings | None) -> EngineSettings:
    if override is None:
        return base
    fields = base.model_dump(exclude_unset=True) | override.model_dump(exclude_unset=True)
    return EngineSettings(**fields)


class EngineBuilder:
    """Makes a scenario's engines: each pool's settings resolved (vLLM's defaults and checks,
    its KV size), its instances placed on the topology's GPUs, each engine's scheduler, KV
    manager and pricer (the roofline with its links, the all-to-all of an expert-parallel
    group across nodes, pipeline stages), into ``instances`` by role, for the cluster to
    route between. Run time is the cluster's; what the builder leaves is
    ``infos`` (one per engine), ``served`` (each engine's model as served) and
    ``fresh_scheduler`` (an engine restarting empty after a repair)."""

    def __init__(
        self,
        env: Env,
        scenario: Scenario,
        model: ModelSpec,
        layout: LayoutSpec,
        topology: Any,
        dispatch: Dispatch,
        instances: dict[str, list[Any]],
        *,
        record_steps: bool,
        coalesce: bool,
    ) -> None:
        self.env = env
        self.scenario = scenario
        self.model = model
        self.layout = layout
        self.kv_transfer = layout.kv_transfer
        self.topology = topology
        self.dispatch = dispatch
        self.instances = instances
        self.record_steps = record_steps
        self.coalesce = coalesce
        self.infos: list[InstanceInfo] = []
        self.served: dict[str, ModelSpec] = {}
        """Instance name -> the model as its engine serves it (quantization, KV dtype)."""
        self.fresh_scheduler: dict[str, Callable[[], Scheduler]] = {}
        """Instance name -> a new empty scheduler of its engine."""
        self.rank_groups: list[RankGroup] = []
        """The data-parallel groups of prefill and decode pools, whose ranks the pools route
        to one by one."""

    def build(self) -> None:
        """Resolve, place and make every pool's engines."""
        scenario = self.scenario
        explicit = scenario.layout is not None
        pools: list[tuple[int, PoolSpec, GpuSpec, int]] = []
        self._parallel: dict[str, tuple[int, bool]] = {}
        self._stages: dict[str, int] = {}
        """Each pool's pipeline stages (``pipeline_parallel_size``)."""
        self._moe_settings: dict[str, EngineSettings] = {}
        """Each pool's merged engine settings (its expert imbalance, EPLB)."""
        for i, pool in enumerate(self.layout.pools):
            where = f"layout.pools[{i}]" if explicit else ""
            gpu_id = pool.gpu or scenario.gpu
            gpu = load_gpu(gpu_id, path=f"{where}.gpu" if pool.gpu is not None else "gpu")
            tp = pool.tensor_parallel_size or scenario.tensor_parallel_size
            self._parallel[pool.name] = self._check_parallel(pool, gpu, tp, where)
            self._stages[pool.name] = self._check_stages(pool, where)
            pools.append((i, pool, gpu, tp))
        if self.topology is not None:
            try:
                placement = self.topology.place(
                    [(p.name, gpu.id, tp * self._parallel[p.name][0] * self._stages[p.name],
                      p.instances, p.nodes, tp)
                     for _, p, gpu, tp in pools]
                )
            except ClusterSimError as error:
                where = "layout." if explicit else ""
                raise type(error)(f"{where}{error.path}", error.message) from None
        else:
            placement = {
                pool.name: [
                    [f"{pool.name}-{j}/gpu{r}"
                     for r in range(tp * self._parallel[pool.name][0] * self._stages[pool.name])]
                    for j in range(pool.instances)
                ]
                for _, pool, _, tp in pools
            }
        kv_dtypes: dict[str, tuple[str, str]] = {}  # role -> (kv_cache_dtype, field)
        for i, pool, gpu, tp in pools:
            where = f"layout.pools[{i}]." if explicit else ""
            settings = _merged_engine(scenario.engine, pool.engine)
            if settings.block_size != scenario.engine.block_size:
                raise ConfigError(
                    f"{where}engine.block_size",
                    f"{settings.block_size} differs from the scenario's engine.block_size "
                    f"{scenario.engine.block_size}: prefix-cache keys are built per block, so "
                    "set block_size once, in the scenario's engine",
                )
            dp, _ = self._parallel[pool.name]
            try:
                setup = resolve_engine(settings, self.model, gpu, tp, dp,
                                       self._stages[pool.name])
            except ClusterSimError as error:
                raise type(error)(f"{where}{error.path}", error.message) from None
            self._check_kv_dtype(pool, settings, where, kv_dtypes)
            if setup.offload_blocks and pool.role != "colocated":
                own = pool.engine is not None and "kv_offloading_size" in (
                    pool.engine.model_fields_set)
                raise ConfigError(
                    f"{where if own else ''}engine.kv_offloading_size",
                    f"a CPU KV tier is modelled on colocated pools only, not on {pool.role} "
                    f"pool {pool.name!r} (vLLM runs it there beside the KV connector of the "
                    "split, which clustersim does not combine)")
            if dp > 1 and self.model.is_moe and settings.async_scheduling:
                raise ConfigError(
                    f"{where}engine.async_scheduling",
                    "data-parallel MoE ranks are modelled with synchronous scheduling only",
                )
            if settings.two_batch_overlap:
                self._check_overlap(pool, gpu, settings, where, placement[pool.name][0])
            self._moe_settings[pool.name] = settings
            for j, group in enumerate(placement[pool.name]):
                if dp == 1:
                    self._add_instance(pool, gpu, tp, setup, j, group)
                elif pool.role != "colocated":
                    self._add_ranks(pool, gpu, tp, setup, j, group)
                else:
                    self._add_group(pool, gpu, tp, setup, j, group)

    def _check_stages(self, pool: PoolSpec, where: str) -> int:
        """The pool's pipeline stages, refusing what clustersim does not model with them."""
        pp = pool.pipeline_parallel_size or self.scenario.pipeline_parallel_size
        if pp == 1:
            return pp
        field = ("pipeline_parallel_size" if pool.pipeline_parallel_size is None or not where
                 else f"{where}.pipeline_parallel_size")
        if pool.role != "colocated" and self.model.sliding_window is not None:
            raise ConfigError(field, f"{pp} stages on a {pool.role} pool of {self.model.id}: "
                              "its KV handoff moves each stage's layers, and which of them "
                              "attend through the sliding window is not modelled; use "
                              "pipeline_parallel_size 1")
        if self._parallel[pool.name][0] > 1:
            raise ConfigError(field, f"{pp} stages with data_parallel_size "
                              f"{self._parallel[pool.name][0]}: not modelled together; use "
                              "data_parallel_size 1")
        return pp

    def _pipeline(self, model: ModelSpec, gpu: GpuSpec, tp: int, pp: int, group: list[str],
                  cost_model: CostModel | None) -> Pipeline:
        """The stages of one engine: priced by one stage's roofline (or the fixed step time
        split evenly), the activations sent over the slowest link between two stages (the
        topology's path between their first GPUs, else the catalog's GPU link)."""
        bytes_per_token = ACTIVATION_TENSORS * model.hidden_size * model.dtype_bytes
        topology = self.topology
        if topology is not None:
            views = [topology.path_view(group[k * tp], group[(k + 1) * tp])
                     for k in range(pp - 1)]
            bytes_per_s = min(v.bytes_per_s for v in views)
            latency_s = max(v.latency_s for v in views)
        else:
            bytes_per_s = gpu.link.effective_bytes_per_s
            latency_s = gpu.allreduce_latency_s
        cost: Cost = self.scenario.cost
        if isinstance(cost, FixedCost):
            return Pipeline(PipelinePricer(pp, fixed_step_s=cost.step_time_s))
        assert cost_model is not None, "a roofline cost needs a cost model"
        return Pipeline(PipelinePricer(pp, cost_model.prices,
                                       send_s_per_token=bytes_per_token / bytes_per_s,
                                       send_latency_s=latency_s))

    @staticmethod
    def _check_kv_dtype(pool: PoolSpec, settings: EngineSettings, where: str,
                        seen: dict[str, tuple[str, str]]) -> None:
        """Prefill and decode pools must cache KV alike: the handoff copies blocks as they are,
        and vLLM's NIXL handshake compares ``cache_dtype`` (``compute_nixl_compatibility_hash``,
        vllm/distributed/kv_transfer/kv_connector/v1/nixl_connector.py)."""
        if pool.role == "colocated":
            return
        field = f"{where}engine.kv_cache_dtype"
        seen.setdefault(pool.role, (settings.kv_cache_dtype, field))
        other = seen.get("decode" if pool.role == "prefill" else "prefill")
        if other is not None and other[0] != settings.kv_cache_dtype:
            raise ConfigError(
                field,
                f"{settings.kv_cache_dtype} on the {pool.role} pool but {other[0]} at "
                f"{other[1]}: the KV handoff moves blocks as they are stored, and vLLM's NIXL "
                "connector refuses peers whose cache_dtype differs; set one kv_cache_dtype",
            )

    def _check_overlap(self, pool: PoolSpec, gpu: GpuSpec, settings: EngineSettings,
                       where: str, group: list[str]) -> None:
        """Two-batch overlap hides an expert-parallel all-to-all: a pool needs one (DP ranks
        with expert parallelism across nodes) and, for DeepEP's normal kernels, the GPU's SMs."""
        own = pool.engine is not None and "two_batch_overlap" in pool.engine.model_fields_set
        field = f"{where if own else ''}engine.two_batch_overlap"
        dp, ep = self._parallel[pool.name]
        if not (self.model.is_moe and dp > 1 and ep
                and len(hosts_of(group, gpu.gpus_per_host)) > 1):
            raise ConfigError(field, f"overlaps an expert-parallel all-to-all, which pool "
                              f"{pool.name!r} does not run: it needs data_parallel_size > 1 "
                              "with enable_expert_parallel on a MoE model, across hosts (nodes "
                              "of a topology, or the compute trays of an NVL72 rack)")
        if deepep_mode(pool.role) == "normal" and gpu.sm_count is None:
            raise ConfigError(field, f"the catalog has no SM count for {gpu.id}: DeepEP's "
                              f"normal kernels hold {DEEPEP_NORMAL_SMS} of them while they run")

    def _check_parallel(
        self, pool: PoolSpec, gpu: GpuSpec, tp: int, where: str
    ) -> tuple[int, bool]:
        """The pool's (data_parallel_size, enable_expert_parallel), checked as vLLM would."""
        scenario = self.scenario
        dp = pool.data_parallel_size or scenario.data_parallel_size
        ep = (pool.enable_expert_parallel if pool.enable_expert_parallel is not None
              else scenario.enable_expert_parallel)
        # an error names the field that set the value: the pool's, or the scenario's default
        dp_field = ("data_parallel_size" if pool.data_parallel_size is None or not where
                    else f"{where}.data_parallel_size")
        ep_field = ("enable_expert_parallel" if pool.enable_expert_parallel is None or not where
                    else f"{where}.enable_expert_parallel")
        if ep and not self.model.is_moe:
            raise ConfigError(ep_field, f"{self.model.id} has no experts")
        refusal = self.model.expert_slice_refusal(dp * tp, ep)
        if refusal is not None:
            raise ConfigError(ep_field, refusal)
        if dp > 1 or ep:
            settings = _merged_engine(scenario.engine, pool.engine)
            redundant = settings.num_redundant_experts if ep else 0
            check_group(self.model, gpu.id, tp, dp, ep, self._node_gpus(pool, gpu, dp * tp),
                        names=("data_parallel_size", "tensor_parallel_size"),
                        fields=(dp_field, ep_field), total_gpus=self._type_gpus(pool, gpu),
                        redundant_experts=redundant)
        return dp, ep

    def _type_gpus(self, pool: PoolSpec, gpu: GpuSpec) -> int | None:
        """GPUs of the pool's type on the nodes it may use (None: no topology, one node)."""
        if self.topology is None:
            return None
        return sum(node.gpus.count for node in self.topology.spec.nodes
                   if node.gpus.type == gpu.id and (pool.nodes is None or node.name in pool.nodes))

    def _node_gpus(self, pool: PoolSpec, gpu: GpuSpec, wanted: int) -> int:
        """How many GPUs of one node a data-parallel group may span: it is placed as one block,
        and a MoE group's all-gathers run over one node's link."""
        if self.topology is None:
            if not self.model.is_moe:
                return wanted  # dense ranks never talk to each other
            return max(gpu.link.max_gpus, gpu.pcie.max_gpus)
        return max(
            (node.gpus.count for node in self.topology.spec.nodes
             if node.gpus.type == gpu.id and (pool.nodes is None or node.name in pool.nodes)),
            default=wanted,  # no such node: placement says so
        )

    def _all_to_all(self, model: ModelSpec, gpu: GpuSpec, group: list[str],
                    role: str) -> AllToAll | None:
        """DeepEP's all-to-all over an expert-parallel group that spans hosts (None: the group
        sits in one host, priced by its all-gather): its rows to GPUs of the sender's NVLink
        domain over NVLink, the rest over the NICs, the links read off the topology. A group
        across the compute trays of one NVL72 rack reaches every rank over NVLink; without a
        topology it runs at the catalog link's rate."""
        if len(hosts_of(group, gpu.gpus_per_host)) < 2:
            return None
        topology = self.topology
        mode = deepep_mode(role)
        by_node: dict[str, list[str]] = {}
        for gpu_id in group:
            by_node.setdefault(gpu_id.rpartition("/")[0], []).append(gpu_id)
        if len(by_node) < 2:  # one NVLink domain of several hosts: no row leaves it
            if topology is None:
                nvlink = gpu.link.effective_bytes_per_s
                return deepep_all_to_all(model, len(group), len(group), nvlink, nvlink, mode)
            domain = topology.tp_group_link(group)
            return deepep_all_to_all(model, len(group), len(group), domain.bytes_per_s,
                                     domain.bytes_per_s, mode, domain.latency_s)
        assert topology is not None  # only a topology places a group on several nodes
        local, remote = list(by_node.values())[:2]
        node_gpus = max(len(gpus) for gpus in by_node.values())
        nvlink = topology.tp_group_link(local).bytes_per_s if len(local) > 1 else float("inf")
        nic = topology.path_view(local[0], remote[0])
        return deepep_all_to_all(model, len(group), node_gpus, nvlink, nic.bytes_per_s, mode,
                                 nic.latency_s)

    def _cost_model(self, model: ModelSpec, gpu: GpuSpec, tp: int, group: list[str],
                    scheduler: SchedulerConfig, dp: int = 1, ep: bool = False,
                    role: str = "colocated", settings: EngineSettings | None = None,
                    ) -> CostModel | None:
        """The pool's roofline, its decode batches padded to the engine's CUDA graphs."""
        if isinstance(self.scenario.cost, FixedCost):
            return None
        link: dict[str, Any] = {}
        if self.topology is not None and tp > 1:
            # the group's real link can only be slower than what the catalog assumes; as fast,
            # the GPU's own prices (a measured all-reduce curve among them) hold
            placed = self.topology.tp_group_link(group[:tp]).bytes_per_s
            if placed < gpu.tp_link(tp).effective_bytes_per_s:
                link["tp_link_bytes_per_s"] = placed
        if self.model.is_moe and dp > 1:
            link["dp"] = dp
            a2a = self._all_to_all(model, gpu, group, role) if ep else None
            if a2a is not None:
                link["all_to_all"] = a2a
            else:
                # the group's all-gathers cross all its dp x tp GPUs (rank 0's TP group to
                # rank 1's is not one of the pairs an NVLink bridge joins)
                topology = self.topology
                if topology is not None and len({topology.node_of(g) for g in group}) > 1:
                    catalog = topology.tp_group_link(group).bytes_per_s  # over the NICs
                else:
                    catalog = gpu.tp_link(dp * tp).effective_bytes_per_s
                    if topology is not None:
                        catalog = min(topology.tp_group_link(group).bytes_per_s, catalog)
                link["dp_link_bytes_per_s"] = catalog
        if ep and self.model.is_moe:
            link["expert_imbalance"] = expert_imbalance(settings, "all_to_all" in link)
        if settings is not None and settings.two_batch_overlap:
            link["two_batch_overlap"] = True  # (checked: the group has an all-to-all)
        cost = CostModel(model, gpu, tp, expert_parallel=ep, **link)
        cost.prices.graph_sizes = cudagraph_capture_sizes(
            scheduler.max_num_seqs, scheduler.max_num_batched_tokens)
        configure_prices(cost.prices, scheduler, model.num_layers)  # (speculative decoding)
        cost.prices.host_hidden = scheduler.async_scheduling
        return cost

    def _add_group(
        self, pool: PoolSpec, gpu: GpuSpec, tp: int, setup: EngineSetup, index: int,
        group: list[str],
    ) -> None:
        """A data-parallel instance: ``dp`` ranks of ``tp`` GPUs behind vLLM's balancer."""
        dp, ep = self._parallel[pool.name]
        lockstep = self.model.is_moe
        cost_model = self._cost_model(setup.model, gpu, tp, group, setup.scheduler, dp, ep,
                                      pool.role, self._moe_settings[pool.name])
        position = len(self.instances["colocated"])
        ranks = [
            self._make_instance(
                pool, gpu, tp, setup, f"{pool.name}-{index}.dp{r}", group[r * tp:(r + 1) * tp],
                position, None if lockstep else cost_model, run=not lockstep,
            )
            for r in range(dp)
        ]
        pricer = make_group_pricer(cost_model, self.scenario.cost, dp) if lockstep else None
        self.instances["colocated"].append(
            DataParallelGroup(self.env, f"{pool.name}-{index}", ranks, pricer,
                              coalesce=self.coalesce)
        )

    def _add_instance(
        self, pool: PoolSpec, gpu: GpuSpec, tp: int, setup: EngineSetup, index: int,
        group: list[str],
    ) -> None:
        _, ep = self._parallel[pool.name]
        role = pool.role
        position = len(self.instances[role])
        pp = self._stages[pool.name]
        cost_model = self._cost_model(stage_model(setup.model, pp), gpu, tp, group,
                                      setup.scheduler, 1, ep, role, self._moe_settings[pool.name])
        instance = self._make_instance(
            pool, gpu, tp, setup, f"{pool.name}-{index}", group, position, cost_model,
            pipeline=None if pp == 1 else self._pipeline(setup.model, gpu, tp, pp, group,
                                                         cost_model),
        )
        self.instances[role].append(instance)

    def _add_ranks(
        self, pool: PoolSpec, gpu: GpuSpec, tp: int, setup: EngineSetup, index: int,
        group: list[str],
    ) -> None:
        """A data-parallel instance of a prefill or decode pool (data-parallel attention with
        expert parallelism, as SGLang's ``--enable-dp-attention`` or vLLM's DP ranks behind an
        external load balancer): each of its ``dp`` ranks joins the pool and the pool's router
        chooses among them, and a MoE model's ranks step together exactly as a colocated
        group's do (:class:`~clustersim.engine.data_parallel.Lockstep`: the slowest rank's
        step, its MoE layers seeing ``dp x`` the busiest rank's tokens, dummy batches on idle
        ranks). The ranks are one failure domain (:class:`RankGroup`)."""
        dp, ep = self._parallel[pool.name]
        role = pool.role
        lockstep = self.model.is_moe
        cost_model = self._cost_model(setup.model, gpu, tp, group, setup.scheduler, dp, ep,
                                      role, self._moe_settings[pool.name])
        ranks: list[Instance] = []
        positions: list[int] = []
        for r in range(dp):
            position = len(self.instances[role])
            rank = self._make_instance(
                pool, gpu, tp, setup, f"{pool.name}-{index}.dp{r}", group[r * tp:(r + 1) * tp],
                position, None if lockstep else cost_model, run=not lockstep,
            )
            self.instances[role].append(rank)
            ranks.append(rank)
            positions.append(position)
        stepper = (Lockstep(self.env, ranks, make_group_pricer(cost_model, self.scenario.cost,
                                                               dp), coalesce=self.coalesce)
                   if lockstep else None)
        self.rank_groups.append(RankGroup(f"{pool.name}-{index}", role, tuple(positions),
                                          stepper))

    def _host_link(self, gpu: GpuSpec, group: list[str], setup: EngineSetup) -> HostLink | None:
        """The engine's link to its CPU tier (None: no tier): each of its GPUs copies its own
        share of every block over its own PCIe link, the topology's or else the GPU
        catalog's."""
        if not setup.offload_blocks:
            return None
        if self.topology is not None:
            per_gpu = min(self.topology.pcie_bytes_per_s(g) for g in group)
        else:
            per_gpu = gpu.pcie.effective_bytes_per_s
        return HostLink(per_gpu * len(group), setup.offload_block_bytes)

    def _make_instance(
        self, pool: PoolSpec, gpu: GpuSpec, tp: int, setup: EngineSetup, name: str,
        group: list[str], position: int, cost_model: CostModel | None, run: bool = True,
        pipeline: Pipeline | None = None,
    ) -> Instance:
        config = seeded(replace(
            setup.scheduler, kv_full_blocks_only=self.kv_transfer.vllm_compat == "0.10"
        ), self.scenario.seed, name)  # (speculative decoding: the engine's acceptance stream)

        def fresh_scheduler() -> Scheduler:
            kv = KVCacheManager(
                setup.num_gpu_blocks,
                config.block_size,
                config.max_model_len,
                enable_prefix_caching=config.enable_prefix_caching,
                sliding_window=setup.model.sliding_window or 0,
                window_groups=setup.model.kv_window_groups,
            )
            # (a pipeline's requests do not all decode every step: no decode set)
            return Scheduler(config, kv, keep_token_times=self.record_steps,
                             bulk_decodes=self.coalesce and pipeline is None,
                             offload=(CpuKVTier(setup.offload_blocks) if setup.offload_blocks
                                      else None))

        self.fresh_scheduler[name] = fresh_scheduler  # an engine restarts empty
        role = pool.role
        host_link = self._host_link(gpu, group, setup)
        instance = Instance(
            self.env,
            name,
            fresh_scheduler(),
            (make_pricer(cost_model, self.scenario.cost) if pipeline is None
             else pipeline.pricer) if run else _group_steps_it,
            on_done=partial(self.dispatch.done, role, position),
            start_kv_load=partial(self.dispatch.kv_load, position) if role == "decode" else None,
            poll_interval_s=self.kv_transfer.poll_interval_s,
            run=run,
            record_steps=self.record_steps,
            coalesce=self.coalesce,
            pipeline=pipeline,
            host_link=host_link,
        )
        instance.gpus = tuple(group)
        self.served[name] = setup.model
        self.infos.append(
            InstanceInfo(
                name=instance.name,
                pool=pool.name,
                role=role,
                gpu=gpu.id,
                tensor_parallel_size=tp,
                gpus=tuple(group),
                num_gpu_blocks=setup.num_gpu_blocks,
                block_size=config.block_size,
                max_num_batched_tokens=config.max_num_batched_tokens,
                max_num_seqs=config.max_num_seqs,
                max_model_len=config.max_model_len,
                data_parallel_size=self._parallel[pool.name][0],
                calibration=gpu.calibration,
                quantization=None if setup.model.quantization is None
                else setup.model.quantization.method,
                kv_cache_dtype=setup.model.kv_cache_dtype,
                kv_dtype=setup.model.dtype if setup.model.kv_cache_dtype == "auto"
                else setup.model.kv_cache_dtype,
                gemm_kernel="fixed step time" if isinstance(self.scenario.cost, FixedCost)
                else gemm_kernel(setup.model.quantization, gpu).describe,
                pipeline_parallel_size=1 if pipeline is None else pipeline.depth,
                cpu_kv_blocks=setup.offload_blocks,
                cpu_kv_gib=(0.0 if host_link is None
                            else self._moe_settings[pool.name].kv_offloading_size or 0.0),
                host_link_gb_per_s=0.0 if host_link is None else host_link.bytes_per_s / 1e9,
            )
        )
        return instance
