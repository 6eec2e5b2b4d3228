"""Pure cost functions: roofline step time and KV-cache capacity (no SimPy here)."""

from clustersim.cost.memory import KvBudget, kv_budget, kv_bytes_per_block, num_gpu_blocks
from clustersim.cost.roofline import BatchShape, CostModel, StepCost, step_time

__all__ = [
    "BatchShape",
    "CostModel",
    "KvBudget",
    "StepCost",
    "kv_budget",
    "kv_bytes_per_block",
    "num_gpu_blocks",
    "step_time",
]
