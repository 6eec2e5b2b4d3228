"""The ``layout:`` section of a scenario: pools of instances, routers, and the KV handoff;
and the ``topology:`` field that says where they run.

Without a ``layout:`` a scenario is one colocated instance built from the top-level ``model``,
``gpu``, ``tensor_parallel_size`` and ``engine`` fields; pools inherit those fields too and
override what they set.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    Discriminator,
    Field,
    PositiveFloat,
    PositiveInt,
    Tag,
    model_validator,
)

from clustersim.engine.settings import EngineSettings
from clustersim.limits import (
    GPUS_REASON,
    MAX_NUM_GPUS,
    MAX_NUM_NODES,
    MAX_TIME_S,
    DataParallelSize,
    PipelineParallelSize,
    Seconds,
    TensorParallelSize,
    Tokens,
    Within,
)
from clustersim.validation import Strict

RouterKind = Literal[
    "round_robin",
    "least_outstanding_requests",
    "least_outstanding_tokens",
    "power_of_two",
    "prefix_aware",
]


class PoolSpec(Strict):
    """A group of identical instances (each a tensor-parallel group of GPUs)."""

    name: str = Field(pattern=r"^[A-Za-z0-9_.]+$", description="Used in instance names.")
    role: Literal["colocated", "prefill", "decode"] = Field(
        "colocated",
        description="colocated: prefill and decode on the same instance; prefill: KV producer "
        "(runs each prompt with max_tokens=1 and hands its KV over); decode: KV consumer.",
    )
    gpu: str | None = Field(None, description="Catalog GPU id; default the scenario's gpu.")
    tensor_parallel_size: TensorParallelSize | None = Field(
        None, description="GPUs per instance; default the scenario's tensor_parallel_size."
    )
    pipeline_parallel_size: PipelineParallelSize | None = Field(
        None, description="Pipeline stages per instance, each of tensor_parallel_size GPUs "
        "holding a share of the layers and their KV (a KV handoff moves each stage's layers "
        "to the consumer stage that holds them); default the scenario's "
        "pipeline_parallel_size."
    )
    data_parallel_size: DataParallelSize | None = Field(
        None,
        description="Engine ranks per instance behind vLLM's internal data-parallel load "
        "balancer (each its own scheduler and KV cache; MoE ranks step together and share "
        "their experts); default the scenario's data_parallel_size. On a prefill or decode pool "
        "the pool's router chooses among the ranks (SGLang's DP attention, vLLM's DP ranks "
        "behind an external load balancer), which step together as a colocated group's do "
        "and fail together; a group larger than a node spans nodes, each rank's TP group "
        "inside one.",
    )
    enable_expert_parallel: bool | None = Field(
        None,
        description="MoE: spread whole experts over the instance's dp x tp GPUs instead of "
        "slicing every expert; default the scenario's enable_expert_parallel.",
    )
    instances: Annotated[PositiveInt, Within(high=MAX_NUM_GPUS, reason=GPUS_REASON)] = Field(
        1, description="Number of instances in the pool.")
    engine: EngineSettings | None = Field(
        None, description="Engine settings that override the scenario's engine: for this pool."
    )
    nodes: list[str] | None = Field(
        None, description="Topology nodes the pool may use; default any free GPUs of its type."
    )


class RouterSpec(Strict):
    """How a request picks an instance among a pool's instances."""

    kind: RouterKind = Field(
        "round_robin",
        description="round_robin | least_outstanding_requests | least_outstanding_tokens | "
        "power_of_two (two random instances, the less loaded wins) | prefix_aware (longest "
        "cached prefix of block hashes, then least outstanding requests).",
    )


class KVTransferSpec(Strict):
    """How prefill instances hand the KV cache to decode instances (vLLM's NIXL connector
    or SGLang's push)."""

    connector: Literal["nixl", "sglang"] = Field(
        "nixl",
        description="nixl: vLLM's flow, the proxy sends the prompt to a prefill instance with "
        "max_tokens=1, then to a decode instance that pulls the KV once prefill is done; "
        "sglang: the router sends to both at once, decode allocates early, prefill pushes.",
    )
    vllm_compat: Literal["0.33", "0.10"] = Field(
        "0.33",
        description="0.10: only full blocks are transferred (a prompt shorter than one block "
        "is prefilled again on the decode side); 0.33: all prompt tokens, 1 token recomputed.",
    )
    handshake_s: Seconds = Field(
        0.0, description="Extra latency of the first transfer between a prefill/decode pair."
    )
    proxy_latency_s: Seconds = Field(
        0.0, description="Prefill response -> proxy -> decode request (nixl connector)."
    )
    poll_interval_s: Annotated[PositiveFloat, Within(
        low=1e-6, high=MAX_TIME_S, unit="s", reason="no engine polls faster than once a "
        "microsecond")] = Field(
        1e-3, description="How soon an idle decode engine notices a finished pull."
    )
    kv_load_failure_policy: Literal["recompute", "fail"] = Field(
        "fail",
        description="vLLM's kv_load_failure_policy (nixl connector), what the decode side does "
        "when reading a prompt's KV fails: fail ends the request with an error (its client "
        "may retry it; vLLM's default since PR #34896), recompute prefills the prompt on the "
        "decode instance. SGLang's push always fails the request.",
    )
    link_bandwidth_scale: Annotated[PositiveFloat, Within(
        low=1e-3, high=1e3, reason="a fabric a thousand times slower or faster than the "
        "topology's is another topology")] = Field(
        1.0, description="What-if: every link a KV transfer crosses carries this times its "
        "bandwidth in the topology (0.5: a fabric half as fast, 2: twice as fast); "
        "plan.sensitivity reads the recommendation at 0.5 and 2.")


class LayoutSpec(Strict):
    """Pools, the routers in front of them, and the KV handoff between them."""

    kind: Literal["colocated", "disaggregated", "three_pool"] = Field(
        "colocated",
        description="colocated: colocated pools behind one router; disaggregated: prefill "
        "pool(s) -> decode pool(s); three_pool: prefill-heavy requests take the prefill -> "
        "decode path, decode-heavy ones go to the decode pool, the rest to a colocated pool.",
    )
    pools: list[PoolSpec] = Field(
        min_length=1, max_length=64, description="The pools, each a group of identical "
        "instances with one role; their names are unique.")
    router: RouterSpec = Field(default_factory=RouterSpec,
                               description="Picks the instance of the colocated pools.")
    prefill_router: RouterSpec = Field(default_factory=RouterSpec,
                                       description="Picks the prefill instance of a split.")
    decode_router: RouterSpec = Field(default_factory=RouterSpec,
                                      description="Picks the decode instance of a split.")
    kv_transfer: KVTransferSpec = Field(
        default_factory=KVTransferSpec,
        description="How the prompt's KV cache moves from prefill to decode.")
    long_prompt_tokens: Tokens = Field(
        2048, description="three_pool: a prompt longer than this is prefill-heavy."
    )
    long_output_tokens: Tokens = Field(
        256, description="three_pool: an output longer than this is decode-heavy."
    )

    @model_validator(mode="after")
    def _roles_fit_the_kind(self) -> LayoutSpec:
        names = [p.name for p in self.pools]
        if len(set(names)) != len(names):
            raise ValueError(f"pool names must be unique, got {names}")
        roles = [p.role for p in self.pools]
        wanted = {
            "colocated": ({"colocated"}, "only colocated pools"),
            "disaggregated": ({"prefill", "decode"}, "prefill and decode pools"),
            "three_pool": ({"prefill", "decode", "colocated"}, "one pool of each role"),
        }[self.kind]
        if set(roles) != wanted[0]:
            raise ValueError(f"layout {self.kind} needs {wanted[1]}, got roles {roles}")
        if self.kind == "three_pool" and len(roles) != 3:
            raise ValueError(f"layout three_pool needs exactly three pools, got {len(roles)}")
        return self

    def pools_with_role(self, role: str) -> list[PoolSpec]:
        return [p for p in self.pools if p.role == role]


# ----------------------------------------------------------------- topology
class ReplicatedNode(Strict):
    """``count`` copies of one server with every NIC on one non-blocking leaf switch (``leaf0``),
    as ``dgx-h100-x2`` is wired by hand."""

    node: str = Field(
        description="A shipped one-node topology's name (dgx-h100, a100-8x, rtx4090-pcie-box) "
        "or the path of a one-node topology file, relative to the scenario's folder."
    )
    count: Annotated[PositiveInt, Within(
        high=MAX_NUM_NODES, reason="a topology's graph and paths are built before the run",
    )] = Field(
        description="How many of them: node0 .. node{count-1}; more than one needs a node "
        "with nics.",
    )


def _topology_form(value: Any) -> str | None:
    if isinstance(value, str):
        return "name"
    if isinstance(value, list):
        return "fleet"
    return "nodes" if isinstance(value, dict | ReplicatedNode) else None


Fleet = Annotated[list[ReplicatedNode], Field(min_length=1, max_length=16)]
"""Several node types on one leaf switch, in order: ``[{node: dgx-h100, count: 2},
{node: a100-8x, count: 2}]`` is node0-1 DGX H100 and node2-3 A100 servers."""

TopologyRef = Annotated[
    Annotated[str, Tag("name")] | Annotated[ReplicatedNode, Tag("nodes")]
    | Annotated[Fleet, Tag("fleet")],
    Discriminator(
        _topology_form,
        custom_error_type="topology_form",
        custom_error_message="expected a shipped topology name, a topology file path, "
        "{node: NAME, count: N} or a list of those mappings",
    ),
]
"""The scenario's ``topology:``: a name or path (one file), a node type times a count, or a
list of node types and counts (a heterogeneous fleet)."""


def topology_label(ref: str | ReplicatedNode | list[ReplicatedNode] | None) -> str | None:
    """How a summary names the topology: the name or path, or "2 x dgx-h100 + 1 x a100-8x"."""
    if ref is None or isinstance(ref, str):
        return ref
    parts = ref if isinstance(ref, list) else [ref]
    return " + ".join(f"{part.count} x {part.node}" for part in parts)
