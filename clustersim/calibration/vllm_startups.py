"""vLLM start-ups whose logs state their KV capacity, and clustersim's figure for each.

Two files of the same format (``startups.yaml``): ``fit/vllm_startups/`` holds the start-ups
the KV-capacity model's constants were read from (the sampler's bytes per logit, the non-torch
memory), ``validation/vllm_startups/`` the ones that only check it. :func:`compare` sizes each
engine as clustersim does (``clustersim.cost.memory.kv_budget`` with the release's profile)
and sets the token count vLLM would log ("GPU KV cache size: N tokens") beside the logged one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import yaml

from clustersim.calibration.sources import FIT_DIR, VALIDATION_DIR
from clustersim.catalog import load_gpu, load_model
from clustersim.cost.memory import KvBudget, cuda_graph_bytes, kv_budget
from clustersim.cost.vllm_profile import logged_kv_tokens, profile_rules
from clustersim.engine.quantization import served_model

GIB = 1 << 30
FIT_STARTUPS = FIT_DIR / "vllm_startups" / "startups.yaml"
CHECK_STARTUPS = VALIDATION_DIR / "vllm_startups" / "startups.yaml"
DEFAULT_TOLERANCE_PCT = 1.0
"""How close clustersim's token count must come to the logged one."""


@dataclass(frozen=True, slots=True)
class Startup:
    """One logged vLLM start-up: the engine as launched and what its log printed."""

    id: str
    source: str
    vllm_version: str
    gpu: str
    model: str
    quantization: str | None
    tensor_parallel_size: int
    gpu_memory_utilization: float
    max_num_batched_tokens: int
    max_num_seqs: int
    max_model_len: int
    block_size: int
    enforce_eager: bool
    logged: dict[str, float]
    tolerance_pct: float
    tolerance_reason: str | None


@dataclass(frozen=True, slots=True)
class Comparison:
    """clustersim's KV cache for a start-up beside the logged one."""

    startup: Startup
    budget: KvBudget
    tokens: int
    """The "GPU KV cache size" clustersim's block count gives."""
    logged_tokens: int
    """The log's, or (where the source does not quote the line) the one its "Available KV
    cache memory" gives."""

    @property
    def error(self) -> float:
        return (self.tokens - self.logged_tokens) / self.logged_tokens

    @property
    def within_tolerance(self) -> bool:
        return abs(self.error) * 100 <= self.startup.tolerance_pct


def load_startups(path: Path) -> list[Startup]:
    """The start-ups of one ``startups.yaml``."""
    data = yaml.safe_load(path.read_text())
    return [
        Startup(
            id=s["id"], source=s["source"], vllm_version=str(s["vllm_version"]), gpu=s["gpu"],
            model=s["model"], quantization=s.get("quantization"),
            tensor_parallel_size=s["tensor_parallel_size"],
            gpu_memory_utilization=s["gpu_memory_utilization"],
            max_num_batched_tokens=s["max_num_batched_tokens"], max_num_seqs=s["max_num_seqs"],
            max_model_len=s["max_model_len"], block_size=s["block_size"],
            enforce_eager=bool(s.get("enforce_eager", False)), logged=dict(s["logged"]),
            tolerance_pct=float(s.get("tolerance_pct", DEFAULT_TOLERANCE_PCT)),
            tolerance_reason=s.get("tolerance_reason"),
        )
        for s in data["startups"]
    ]


def compare(startup: Startup) -> Comparison:
    """Size ``startup``'s engine as clustersim does and set it beside the log."""
    gpu = load_gpu(startup.gpu)
    model = served_model(load_model(startup.model), gpu, startup.quantization,
                         vllm_version=startup.vllm_version)
    rules = profile_rules(startup.vllm_version)
    tp = startup.tensor_parallel_size
    graphs = 0 if startup.enforce_eager else cuda_graph_bytes(
        model, startup.max_num_seqs, startup.max_num_batched_tokens)
    budget = kv_budget(model, gpu, tp, gpu_memory_utilization=startup.gpu_memory_utilization,
                       block_size=startup.block_size,
                       max_num_batched_tokens=startup.max_num_batched_tokens,
                       max_num_seqs=startup.max_num_seqs, vllm_version=startup.vllm_version,
                       cuda_graph_bytes=graphs)

    def tokens(num_blocks: int) -> int:
        return logged_kv_tokens(model, num_blocks, startup.block_size, startup.max_model_len,
                                startup.max_num_batched_tokens, rules)

    logged = startup.logged.get("kv_tokens")
    if logged is None:
        logged = tokens(math.floor(startup.logged["available_kv_gib"] * GIB)
                        // budget.bytes_per_block)
    return Comparison(startup=startup, budget=budget, tokens=tokens(budget.num_gpu_blocks),
                      logged_tokens=int(logged))
