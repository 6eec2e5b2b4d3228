"""A cluster of engine instances: pools placed on a topology, routers, and the P/D handoff.

The request paths (spec §7.2, §8)::

    colocated      client -> router -> instance (prefill + decode)
    disaggregated  client -> proxy -> prefill instance (max_tokens=1, keeps its blocks)
                          -> proxy -> decode instance (pulls the KV, recomputes 1 token, decodes)
    sglang         client -> router -> prefill and decode instance at once; decode allocates
                          early, prefill pushes when done
    three_pool     prefill-heavy -> the disaggregated path; decode-heavy -> a decode instance;
                   mixed -> the colocated pool

The client's request object travels to the instance that produces its tokens; a prefill
instance works on a copy, so every per-request timestamp is what the client saw.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import simpy

from clustersim.catalog import load_gpu
from clustersim.catalog.specs import GpuSpec, ModelSpec
from clustersim.cluster.router import InstanceLoad, Router
from clustersim.cluster.spec import LayoutSpec, PoolSpec
from clustersim.cost.kernels import gemm_kernel
from clustersim.cost.roofline import BatchShape, CostModel
from clustersim.engine.data_parallel import DataParallelGroup, check_group
from clustersim.engine.defaults import EngineSetup, resolve_engine
from clustersim.engine.instance import Instance
from clustersim.engine.kv_manager import KVCacheManager
from clustersim.engine.request import Request, RequestStatus
from clustersim.engine.scheduler import Scheduler, StepPlan
from clustersim.engine.settings import EngineSettings
from clustersim.errors import ClusterSimError, ConfigError
from clustersim.scenario import Cost, FixedCost, Scenario

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
    gemm_kernel: str = ""
    """The kernel that priced its linear layers, its peak and the fit it used
    (``clustersim.cost.kernels``)."""


class FixedPricer:
    """Every step takes the scenario's fixed ``step_time_s``."""

    __slots__ = ("step_time_s",)

    def __init__(self, step_time_s: float) -> None:
        self.step_time_s = step_time_s

    def __call__(self, plan: StepPlan) -> float:
        return self.step_time_s

    def decode_run(self, num_decodes: int, decode_kv_tokens: int, num_steps: int) -> list[float]:
        return [self.step_time_s] * num_steps


class RooflinePricer:
    """A step's seconds from the roofline cost model, read straight off the plan."""

    __slots__ = ("cost_model",)

    def __init__(self, cost_model: CostModel) -> None:
        self.cost_model = cost_model

    def __call__(self, plan: StepPlan) -> float:
        return self.cost_model.step_time_s(
            plan.num_prefill_tokens, plan.prefill_attn_pairs, plan.prefill_kv_tokens,
            plan.num_decode_tokens, plan.decode_kv_tokens, plan.num_sampled, plan.num_seqs,
        )

    def decode_run(self, num_decodes: int, decode_kv_tokens: int, num_steps: int) -> list[float]:
        """Seconds of each of ``num_steps`` pure-decode steps (``CostModel.decode_run_s``)."""
        return self.cost_model.decode_run_s(num_decodes, decode_kv_tokens, num_steps)


def make_pricer(cost_model: CostModel | None, cost: Cost) -> FixedPricer | RooflinePricer:
    """StepPlan -> seconds, through the roofline cost model (or a fixed time per step)."""
    if isinstance(cost, FixedCost):
        return FixedPricer(cost.step_time_s)
    assert cost_model is not None, "a roofline cost needs a cost model"
    return RooflinePricer(cost_model)


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


def _merged_engine(base: EngineSettings, override: EngineSettings | None) -> EngineSettings:
    if override is None:
        return base
    fields = base.model_dump(exclude_unset=True) | override.model_dump(exclude_unset=True)
    return EngineSettings(**fields)


@dataclass(slots=True)
class _Handoff:
    """A request on the disaggregated path: its prefill copy and where each half runs."""

    client: Request
    producer: Request
    prefill_index: int
    decode_index: int | None = None
    prefill_done: simpy.Event | None = None
    """sglang only: fires when the prefill copy finished (the push may start)."""
    producer_sent: bool = False


class Cluster:
    """Builds the instances of a scenario and moves requests through them."""

    def __init__(
        self,
        env: simpy.Environment,
        scenario: Scenario,
        model: ModelSpec,
        rng: np.random.Generator,
        on_done: Callable[[Request], None],
        *,
        record_steps: bool = True,
        coalesce: bool = False,
    ) -> None:
        """``record_steps=False``: engines keep step totals, not every step, and requests
        keep no per-token times (a lean run). ``coalesce``: engines advance runs of pure-decode
        steps in one event where that is provably the same (see ``engine.instance``)."""
        self.env = env
        self.record_steps = record_steps
        self.coalesce = coalesce
        self.scenario = scenario
        self.model = model
        self.layout = scenario.layout or default_layout()
        self.on_done = on_done
        self.kv_transfer = self.layout.kv_transfer
        self.topology = self._load_topology()
        self.flows = self._flow_network()
        self.instances: dict[str, list[Any]] = {"colocated": [], "prefill": [], "decode": []}
        """Per role: an :class:`Instance`, or a :class:`DataParallelGroup` of them."""
        self.infos: list[InstanceInfo] = []
        self._served: dict[str, ModelSpec] = {}
        """Instance name -> the model as its engine serves it (quantization, KV dtype)."""
        self._build_pools()
        self.routers = {
            role: Router(spec.kind, [InstanceLoad(i.name) for i in self.instances[role]], rng)
            for role, spec in (
                ("colocated", self.layout.router),
                ("prefill", self.layout.prefill_router),
                ("decode", self.layout.decode_router),
            )
            if self.instances[role]
        }
        self._handoffs: dict[int, _Handoff] = {}  # id(producer copy or client) -> handoff
        self._route_of: dict[int, tuple[str, int]] = {}  # id(client) -> (role, index)
        self._paired: set[tuple[int, int]] = set()

    # ------------------------------------------------------------------ build
    def _load_topology(self):
        source = self.scenario.topology
        if source is None:
            if self.layout.kind != "colocated":
                raise ConfigError(
                    "topology",
                    f"layout {self.layout.kind} needs a topology: the KV handoff runs over its "
                    "links (e.g. topology: dgx-h100-x2)",
                )
            return None
        from clustersim.cluster.topology import Topology

        return Topology.load(source, base_dir=self.scenario.base_dir)

    def _flow_network(self):
        if self.topology is None:
            return None
        from clustersim.cluster.flows import FlowNetwork

        # a lean run reports no transfer's time alone on idle links (transfers.csv does)
        return FlowNetwork(self.env, self.topology, ideal_times=self.record_steps)

    def _build_pools(self) -> None:
        scenario = self.scenario
        explicit = scenario.layout is not None
        pools: list[tuple[int, PoolSpec, GpuSpec, int]] = []
        self._parallel: dict[str, tuple[int, bool]] = {}
        for i, pool in enumerate(self.layout.pools):
            where = f"layout.pools[{i}]" if explicit else ""
            gpu_id = pool.gpu or scenario.gpu
            gpu = load_gpu(gpu_id, path=f"{where}.gpu" if pool.gpu is not None else "gpu")
            tp = pool.tensor_parallel_size or scenario.tensor_parallel_size
            self._parallel[pool.name] = self._check_parallel(pool, gpu, tp, where)
            pools.append((i, pool, gpu, tp))
        if self.topology is not None:
            try:
                placement = self.topology.place(
                    [(p.name, gpu.id, tp * self._parallel[p.name][0], p.instances, p.nodes)
                     for _, p, gpu, tp in pools]
                )
            except ClusterSimError as error:
                where = "layout." if explicit else ""
                raise type(error)(f"{where}{error.path}", error.message) from None
        else:
            placement = {
                pool.name: [
                    [f"{pool.name}-{j}/gpu{r}" for r in range(tp * self._parallel[pool.name][0])]
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
                setup = resolve_engine(settings, self.model, gpu, tp, dp)
            except ClusterSimError as error:
                raise type(error)(f"{where}{error.path}", error.message) from None
            self._check_kv_dtype(pool, settings, where, kv_dtypes)
            if dp > 1 and self.model.is_moe and settings.async_scheduling:
                raise ConfigError(
                    f"{where}engine.async_scheduling",
                    "data-parallel MoE ranks are modelled with synchronous scheduling only",
                )
            for j, group in enumerate(placement[pool.name]):
                if dp == 1:
                    self._add_instance(pool, gpu, tp, setup, j, group)
                else:
                    self._add_group(pool, gpu, tp, setup, j, group)

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
        if dp > 1 and pool.role != "colocated":
            raise ConfigError(
                dp_field,
                f"{dp} on a {pool.role} pool: data-parallel ranks are modelled for colocated "
                "pools only (use instances: N for prefill/decode pools)",
            )
        if ep and not self.model.is_moe:
            raise ConfigError(ep_field, f"{self.model.id} has no experts")
        if dp > 1 or ep:
            check_group(self.model, gpu.id, tp, dp, ep, self._node_gpus(pool, gpu, dp * tp),
                        names=("data_parallel_size", "tensor_parallel_size"),
                        fields=(dp_field, ep_field))
        return dp, ep

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

    def _cost_model(self, model: ModelSpec, gpu: GpuSpec, tp: int, group: list[str],
                    dp: int = 1, ep: bool = False) -> CostModel | None:
        if isinstance(self.scenario.cost, FixedCost):
            return None
        link: dict[str, Any] = {}
        if self.topology is not None and tp > 1:
            # the group's real link can only be slower than what the catalog assumes
            placed = self.topology.tp_group_link(group[:tp]).bytes_per_s
            link["tp_link_bytes_per_s"] = min(placed, gpu.tp_link(tp).effective_bytes_per_s)
        if self.model.is_moe and dp > 1:
            link["dp"] = dp
            # the group's all-gathers cross all its dp x tp GPUs (rank 0's TP group to rank
            # 1's is not one of the pairs an NVLink bridge joins)
            catalog = gpu.tp_link(dp * tp).effective_bytes_per_s
            if self.topology is not None:
                catalog = min(self.topology.tp_group_link(group).bytes_per_s, catalog)
            link["dp_link_bytes_per_s"] = catalog
        return CostModel(model, gpu, tp, expert_parallel=ep, **link)

    def _add_group(
        self, pool: PoolSpec, gpu: GpuSpec, tp: int, setup: EngineSetup, index: int,
        group: list[str],
    ) -> None:
        """A data-parallel instance: ``dp`` ranks of ``tp`` GPUs behind vLLM's balancer."""
        dp, ep = self._parallel[pool.name]
        lockstep = self.model.is_moe
        cost_model = self._cost_model(setup.model, gpu, tp, group, dp, ep)
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
        instance = self._make_instance(
            pool, gpu, tp, setup, f"{pool.name}-{index}", group, position,
            self._cost_model(setup.model, gpu, tp, group, 1, ep),
        )
        self.instances[role].append(instance)

    def _make_instance(
        self, pool: PoolSpec, gpu: GpuSpec, tp: int, setup: EngineSetup, name: str,
        group: list[str], position: int, cost_model: CostModel | None, run: bool = True,
    ) -> Instance:
        config = replace(
            setup.scheduler, kv_full_blocks_only=self.kv_transfer.vllm_compat == "0.10"
        )
        kv = KVCacheManager(
            setup.num_gpu_blocks,
            config.block_size,
            config.max_model_len,
            enable_prefix_caching=config.enable_prefix_caching,
        )
        role = pool.role
        instance = Instance(
            self.env,
            name,
            Scheduler(config, kv, keep_token_times=self.record_steps,
                      bulk_decodes=self.coalesce),
            make_pricer(cost_model, self.scenario.cost) if run else _group_steps_it,
            on_done=lambda request, role=role, position=position: self._done(
                role, position, request
            ),
            start_kv_load=(
                lambda request, tokens, position=position: self._pull(position, request, tokens)
            )
            if role == "decode"
            else None,
            poll_interval_s=self.kv_transfer.poll_interval_s,
            run=run,
            record_steps=self.record_steps,
            coalesce=self.coalesce,
        )
        instance.gpus = tuple(group)
        self._served[name] = setup.model
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
                gemm_kernel="fixed step time" if isinstance(self.scenario.cost, FixedCost)
                else gemm_kernel(setup.model.quantization, gpu).describe,
            )
        )
        return instance

    # ---------------------------------------------------------------- routing
    def submit(self, request: Request) -> None:
        """A client request reaches the cluster's entry point now."""
        kind = self.layout.kind
        if kind == "colocated":
            self._send("colocated", request)
        elif kind == "disaggregated":
            self._to_prefill(request)
        else:
            self._three_pool(request)

    def _three_pool(self, request: Request) -> None:
        """Golden S6: a long prompt with a short output takes the prefill -> decode path, a
        long output with a short prompt goes to the decode pool, everything else shares."""
        long_prompt = request.num_prompt_tokens > self.layout.long_prompt_tokens
        long_output = request.max_tokens > self.layout.long_output_tokens
        if long_prompt and not long_output:
            self._to_prefill(request)
        elif long_output and not long_prompt:
            self._send("decode", request)
        else:
            self._send("colocated", request)

    def _send(self, role: str, request: Request) -> None:
        """Route a request to an instance that will produce all its tokens."""
        router = self.routers[role]
        index = router.choose(request)
        router.sent(index, request)
        instance = self.instances[role][index]
        self._route_of[id(request)] = (role, index)
        request.prefill_instance = request.decode_instance = instance.name
        instance.submit(request)  # a data-parallel group names the rank it picks

    def _to_prefill(self, request: Request) -> None:
        router = self.routers["prefill"]
        index = router.choose(request)
        router.sent(index, request)
        instance = self.instances["prefill"][index]
        producer = Request(
            request.request_id,
            self.env.now,
            request.num_prompt_tokens,
            1,  # the proxy asks the prefill instance for one token (max_tokens=1)
            priority=request.priority,
            block_hashes=request.block_hashes,
            kv_producer=True,
        )
        handoff = _Handoff(client=request, producer=producer, prefill_index=index)
        self._handoffs[id(producer)] = handoff
        self._handoffs[id(request)] = handoff
        request.prefill_instance = instance.name
        if self.kv_transfer.connector == "sglang":
            # The router contacts both sides. The prefill side holds the request in its
            # bootstrap queue until the decode side has allocated the KV (early allocation),
            # so a prefill never holds blocks for a decode that has no room for them.
            reason = instance.refusal(producer)
            if reason is not None:
                instance.reject(producer, reason)
                return
            handoff.prefill_done = self.env.event()
            self._to_decode(handoff)
        else:
            handoff.producer_sent = True
            instance.submit(producer)

    def _to_decode(self, handoff: _Handoff) -> None:
        router = self.routers["decode"]
        client = handoff.client
        index = router.choose(client)
        router.sent(index, client)
        handoff.decode_index = index
        instance = self.instances["decode"][index]
        self._route_of[id(client)] = ("decode", index)
        client.decode_instance = instance.name
        client.do_remote_prefill = True
        instance.submit(client)

    def _proxy_to_decode(self, handoff: _Handoff):
        if self.kv_transfer.proxy_latency_s > 0:
            yield self.env.timeout(self.kv_transfer.proxy_latency_s)
        self._to_decode(handoff)

    # --------------------------------------------------------------- handoff
    def _pull(self, decode_index: int, client: Request, num_tokens: int) -> simpy.Event:
        """The decode instance starts reading a prompt's KV from its prefill instance."""
        done = self.env.event()
        self.env.process(self._transfer(decode_index, client, num_tokens, done))
        return done

    def _transfer(self, decode_index: int, client: Request, num_tokens: int, done: simpy.Event):
        handoff = self._handoffs[id(client)]
        prefill = self.instances["prefill"][handoff.prefill_index]
        decode = self.instances["decode"][decode_index]
        if num_tokens == 0:  # nothing to read (local prefix hit): the producer may free now
            if handoff.producer_sent:
                prefill.release_kv(handoff.producer)
            else:  # sglang: the prefill never started; take it back from the prefill router
                self.routers["prefill"].returned(handoff.prefill_index, client)
                self._handoffs.pop(id(handoff.producer), None)
            done.succeed()
            return
        if handoff.prefill_done is not None:
            if not handoff.producer_sent:
                handoff.producer_sent = True
                prefill.submit(handoff.producer)  # decode has allocated: prefill may start
            yield handoff.prefill_done
            if handoff.producer.status is RequestStatus.REJECTED:
                return  # the decode side has dropped the request
        tp = len(decode.gpus)
        num_bytes = num_tokens * self._served[decode.name].kv_bytes_per_token(tp) * tp
        pair = (handoff.prefill_index, decode_index)
        extra = 0.0
        if pair not in self._paired:
            self._paired.add(pair)
            extra = self.kv_transfer.handshake_s
        yield self.flows.transfer(
            client.request_id, list(prefill.gpus), list(decode.gpus), num_bytes, extra
        )
        prefill.release_kv(handoff.producer)
        client.handoff_bytes = num_bytes
        client.handoff_start_s = handoff.producer.finish_s
        client.handoff_end_s = self.env.now
        done.succeed()

    # ------------------------------------------------------------ completion
    def _done(self, role: str, index: int, request: Request) -> None:
        if request.kv_producer:
            self._prefill_done(index, request)
            return
        route = self._route_of.pop(id(request), None)
        if route is not None:
            self.routers[route[0]].returned(route[1], request)
        handoff = self._handoffs.pop(id(request), None)
        if handoff is not None and request.status is RequestStatus.REJECTED:
            # rejected on the decode side: the prefill copy's blocks will never be read
            prefill = self.instances["prefill"][handoff.prefill_index]
            if not handoff.producer_sent:  # sglang: the prefill never started
                self.routers["prefill"].returned(handoff.prefill_index, request)
                self._handoffs.pop(id(handoff.producer), None)
            elif handoff.producer.status is RequestStatus.FINISHED:
                prefill.release_kv(handoff.producer)
        self.on_done(request)

    def _prefill_done(self, index: int, producer: Request) -> None:
        handoff = self._handoffs.pop(id(producer))
        client = handoff.client
        self.routers["prefill"].returned(index, client)
        client.num_preemptions += producer.num_preemptions
        reason = f"prefill: {producer.reject_reason}"
        if producer.status is RequestStatus.REJECTED and handoff.decode_index is not None:
            # sglang: the decode side already holds blocks for it; take it back there
            handoff.prefill_done.succeed()
            self.instances["decode"][handoff.decode_index].abort(client, reason)
            return
        if producer.status is RequestStatus.REJECTED:
            self._handoffs.pop(id(client), None)
            client.status = RequestStatus.REJECTED
            client.reject_reason = reason
            client.finish_s = self.env.now
            self.on_done(client)
            return
        prefill = self.instances["prefill"][index]
        if producer.request_id not in prefill.scheduler.kv_held and prefill.scheduler.offers_blocks(
            producer
        ):
            # async scheduling preempted it while its only token was in flight: the token
            # arrived but the blocks are gone, so the prompt is prefilled again
            self._rerun_prefill(index, handoff)
            return
        if handoff.prefill_done is not None:
            handoff.prefill_done.succeed()
            return
        self.env.process(self._proxy_to_decode(handoff))

    def _rerun_prefill(self, index: int, handoff: _Handoff) -> None:
        old = handoff.producer
        producer = Request(old.request_id, self.env.now, old.num_prompt_tokens, 1,
                           priority=old.priority, block_hashes=old.block_hashes, kv_producer=True)
        handoff.producer = producer
        self._handoffs[id(producer)] = handoff
        self.routers["prefill"].sent(index, handoff.client)
        self.instances["prefill"][index].submit(producer)

    # ---------------------------------------------------------------- results
    def all_instances(self) -> list[Instance]:
        """Every engine, the ranks of data-parallel groups included."""
        return [
            rank
            for role in ("colocated", "prefill", "decode")
            for i in self.instances[role]
            for rank in (i.ranks if isinstance(i, DataParallelGroup) else (i,))
        ]
