"""The ``faults:`` section of a scenario: what fails when, and what the clients do about it.

::

    faults:
      events:
        - {kind: instance, name: decode-1, at_s: 30, repair_after_s: 60}
        - {kind: node, name: node1, at_s: 45}              # every instance with a GPU there
        - {kind: link, id: "leaf0>spine0", at_s: 10}       # a topology link id (both directions)
        - {kind: link, between: [node0/nic0, leaf0], at_s: 10, repair_after_s: 5}
      kv_transfer_failure_probability: 0.01                # each KV transfer, independently
      client: {max_retries: 2, retry_delay_s: 0.5}         # openai-python's defaults
      restart_s: 120                                       # an engine's start after a repair

Names are checked against the built cluster (``clustersim.cluster.faults``); what a failure
does to requests, links and transfers is described there.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, NonNegativeInt, model_validator

from clustersim.limits import PositiveSeconds, Seconds
from clustersim.validation import Strict, kind_union


class _Timed(Strict):
    at_s: Seconds = Field(description="When it fails, seconds from the start of the run.")
    repair_after_s: PositiveSeconds | None = Field(
        None,
        description="It comes back this long after failing (an instance restarts empty); "
        "unset: down for the rest of the run.",
    )


class InstanceFault(_Timed):
    """One engine instance dies (vLLM's EngineDeadError): the requests it was running or
    queueing are lost to their clients, its KV cache with them."""

    kind: Literal["instance"]
    name: str = Field(
        description="The instance's name: its pool's name and index (decode-1, main-0); a "
        "data-parallel instance (ranks main-0.dp0, main-0.dp1, ...), in any pool, fails with "
        "all its ranks, whether it or one of its ranks is named."
    )


class NodeFault(_Timed):
    """A server goes down: every instance with a GPU on it, and every cable of the server."""

    kind: Literal["node"]
    name: str = Field(description="A node of the topology (node0, node1, ...).")


class LinkFault(_Timed):
    """A cable goes down, both directions: transfers on it move to another path where the
    topology has one and fail where it has not; a TP group whose all-reduce crosses it fails
    with its instance."""

    kind: Literal["link"]
    id: str | None = Field(
        None, description="A topology link id, 'u>v' as in summary.json's link_utilization."
    )
    between: tuple[str, str] | None = Field(
        None, description="The two vertices the cable joins, e.g. [leaf0, spine0]."
    )

    @model_validator(mode="after")
    def _one_way_to_name_it(self) -> LinkFault:
        if (self.id is None) == (self.between is None):
            raise ValueError("name the cable by exactly one of id or between")
        return self


Fault = kind_union(InstanceFault, NodeFault, LinkFault)


class ClientRetries(Strict):
    """What a client does with a request a failure lost: send it again from scratch (the
    tokens it had streamed are dropped), as an application on the OpenAI client library
    does with a failed call. Defaults are openai-python's (``DEFAULT_MAX_RETRIES = 2``,
    ``INITIAL_RETRY_DELAY = 0.5``, ``MAX_RETRY_DELAY = 8.0``), without its random jitter."""

    max_retries: NonNegativeInt = Field(
        2, le=100, description="Times a lost request is sent again; 0: never (it ends "
        "rejected, naming the failure)."
    )
    retry_delay_s: Seconds = Field(
        0.5, description="Wait before the first retry, from the moment the request was lost."
    )
    backoff: float = Field(
        2.0, ge=1.0, le=16.0, allow_inf_nan=False,
        description="Each later retry waits this many times longer.",
    )
    max_retry_delay_s: Seconds = Field(8.0, description="No retry waits longer than this.")

    def delay_s(self, retry: int) -> float:
        """The wait before retry number ``retry`` (1 for the first)."""
        return min(self.retry_delay_s * self.backoff ** (retry - 1), self.max_retry_delay_s)


class FaultsSpec(Strict):
    """Failures to inject into the run, and the clients' answer to them."""

    events: list[Fault] = Field(
        default_factory=list, max_length=1000,
        description="Instances, nodes or links that fail at a time (and maybe come back).",
    )
    kv_transfer_failure_probability: float = Field(
        0.0, ge=0.0, lt=1.0,
        description="Chance that a KV transfer fails (drawn per transfer from its own random "
        "stream of the scenario's seed, so the traffic is unchanged); the decode side then "
        "follows layout.kv_transfer.kv_load_failure_policy.",
    )
    client: ClientRetries = Field(
        default_factory=ClientRetries, description="Whether and how clients retry."
    )
    restart_s: Seconds = Field(
        0.0,
        description="How long an engine takes to serve again once what failed is repaired "
        "(repair_after_s): loading its weights, profiling memory, compiling and capturing "
        "CUDA graphs, its whole data-parallel group together, which serves nothing until "
        "then. 0: at once. vLLM's cold start is about 20 s for a 1.5B model (vllm issue "
        "15225), 4.6 min for a 35B MoE (issue 44881) and 8 min for DeepSeek-V4 with expert "
        "parallelism on 8 GPUs (issue 43189); links come back at their repair.",
    )
