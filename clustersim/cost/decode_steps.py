"""The seconds of each step of a pure-decode run: the roofline's hot loop, on its own so that
it compiles with the core (``clustersim.native``; the rest of the cost model stays Python)."""

from __future__ import annotations


def decode_step_times(
    compute: float, memory: float, communication: float, overhead: float,
    attn_s_per_pair: float, kv_s_per_token: float, rows: float,
    first_kv_tokens: int, num_decodes: int, num_steps: int,
) -> list[float]:
    """``num_steps`` step times: step ``m`` attends to ``first_kv_tokens + m * num_decodes``
    tokens; its attention is compute-bound (``kv x attn_s_per_pair``) or memory-bound
    (``(kv + rows) x kv_s_per_token``), whichever is larger, added where ``step_time`` adds
    it (the same floating-point sums, so each element is ``step_time_s`` bit for bit)."""
    return [
        compute + kv * attn_s_per_pair + memory + communication + overhead
        if kv * attn_s_per_pair >= (kv + rows) * kv_s_per_token
        else compute + (memory + (kv + rows) * kv_s_per_token) + communication + overhead
        for kv in range(first_kv_tokens, first_kv_tokens + num_steps * num_decodes, num_decodes)
    ]
