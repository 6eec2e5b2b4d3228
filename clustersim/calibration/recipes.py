"""How the runs of each shipped serving sweep were served and benchmarked: InferenceX's recipes.

aiconfigurator's silicon rows (``clustersim.calibration.sweeps``) are SemiAnalysis's InferenceX
runs: the MoE rows name InferenceX's database dump, config and workflow-run ids; every sweep's
model, GPU, vLLM image, parallelism, concurrencies (4 to 64 or 128) and shapes (1K/1K, 1K/8K,
8K/1K) are those of InferenceX's config of its date; and aiconfigurator's config adapter reads
InferenceX records (``aiconfigurator.sdk.config_adapter.InferenceXSource``). Each sweep's
"measured" time falls on or just after a commit of its recipe in
github.com/SemiAnalysisAI/InferenceX (below).

Every recipe drives the server with the same client, ``benchmark_serving.py`` (kimbochen's
fork of vLLM's script, cloned at run time until InferenceX vendored it as
``utils/bench_serving`` in PR #480, 2026-01-21)::

    --dataset-name random --random-input-len ISL --random-output-len OSL
    --random-range-ratio 0.8 --num-prompts 10 x C --max-concurrency C --request-rate inf
    --ignore-eos

``sample_random_requests`` draws each request's prompt and answer lengths uniformly from
``int(L x 0.8)`` to ``L`` (``np.random.randint(lower, upper + 1)``; kimbochen/bench_serving
@406abc3, InferenceX utils/bench_serving at the commits below), so an "8192/1024" row's prompts
run 6,553-8,192 tokens (7,373 on average) and its answers 819-1,024. ``--ignore-eos`` makes
every answer exactly its drawn length. ``RANDOM_RANGE_RATIO`` is 0.8 in every recipe
(``full-sweep-tmpl.yml`` in 2025, ``benchmark-tmpl.yml``'s env in 2026). Before PR #480 the
client sent one test request (the first prompt) alone and no warm-ups; from it on, 2 x C
warm-ups of that prompt (``--num-warmups``). TTFT is the client's time from sending to the
first streamed chunk; TPOT a request's (latency - TTFT) / (its answer's tokens - 1).
"""

from __future__ import annotations

from dataclasses import dataclass

INFERENCEX = "github.com/SemiAnalysisAI/InferenceX"
LENGTH_RANGE_RATIO = 0.8
"""``--random-range-ratio`` of every recipe: lengths uniform on ``int(L x 0.8)`` .. ``L``."""


@dataclass(frozen=True)
class Recipe:
    """One sweep's InferenceX recipe: the server's flags that clustersim replays and the
    benchmark client's warm-ups."""

    commit: str
    """The InferenceX commit whose script ran the sweep (the rows' "measured" time)."""
    script: str
    """The server and client script in that commit."""
    warmups_per_client: int
    """Warm-up requests per client before the measured run (2 from PR #480 on)."""
    test_requests: int
    """Requests of the first prompt sent alone before the measured run, when no warm-ups
    are (the old client's initial test run)."""
    gpu_memory_utilization: float
    max_num_seqs: int | None
    """``--max-num-seqs``; None: vLLM's default; 0: the row's concurrency (``$CONC``)."""
    enable_prefix_caching: bool
    async_scheduling: bool | None = None
    """``--async-scheduling`` where the recipe sets it (None: the release's default)."""
    kv_cache_dtype: str | None = None
    """``--kv-cache-dtype`` where the recipe sets it (None: the model's dtype)."""

    def num_warmups(self, concurrency: int) -> int:
        """Requests of the first prompt the client sends before its measured run."""
        return self.warmups_per_client * concurrency or self.test_requests

    def max_seqs(self, concurrency: int) -> int | None:
        """``--max-num-seqs`` of a row with ``concurrency`` clients (None: the default)."""
        return concurrency if self.max_num_seqs == 0 else self.max_num_seqs


RECIPES: dict[str, Recipe] = {
    # 2025-10-29 (PR #148, the day's last commit before the 70B was dropped for a day, PR #149;
    # restored as c198b20): vLLM v0.10.2, nvidia/Llama-3.3-70B-Instruct-FP8, config.yaml with
    # kv-cache-dtype fp8, async-scheduling true, no-enable-prefix-caching,
    # max-num-batched-tokens 8192, max-model-len 10240; --gpu-memory-utilization 0.9,
    # --max-num-seqs $CONC; kimbochen/bench_serving with --random-range-ratio 0.8 (70b-tmpl.yml,
    # full-sweep-tmpl.yml)
    "silicon_vllm_llama31_70b_fp8_h100.csv": Recipe(
        commit="9596d23d74e9e1e4f4bcdb27572c87cafb746a02",
        script="benchmarks/70b_fp8_h100_slurm.sh",
        warmups_per_client=0, test_requests=1, gpu_memory_utilization=0.9, max_num_seqs=0,
        enable_prefix_caching=False, async_scheduling=True, kv_cache_dtype="fp8"),
    # 2026-03-27 07:59:46 UTC, the image bump to v0.18.0 (PR #958), 3 s before the rows'
    # "measured" time: TP4 with EP_SIZE 4 (--enable-expert-parallel), --gpu-memory-utilization 0.90,
    # --max-num-seqs 256, cudagraph_mode PIECEWISE; prefix caching on (turned off that evening,
    # PR #966)
    "silicon_vllm_minimax_m25_fp8_h100_v0180.csv": Recipe(
        commit="1d5cae1417982dd99b77e6ed4758b0eff42edda6",
        script="benchmarks/single_node/minimaxm2.5_fp8_h100.sh",
        warmups_per_client=2, test_requests=0, gpu_memory_utilization=0.9,
        max_num_seqs=256, enable_prefix_caching=True),
    # 2026-03-01, the H200 config's first commit (PR #831): vLLM v0.16.0 at TP4, no expert
    # parallelism, --gpu-memory-utilization 0.95
    "silicon_vllm_minimax_m25_fp8_h200_v0160.csv": Recipe(
        commit="a36346339a98176d70fadb857b5021f6cf36901f",
        script="benchmarks/single_node/minimaxm2.5_fp8_h200.sh",
        warmups_per_client=2, test_requests=0, gpu_memory_utilization=0.95,
        max_num_seqs=None, enable_prefix_caching=True),
    # 2026-03-28 (date only): vLLM v0.18.0 at TP8 (PR #958); the script passes
    # --enable-expert-parallel whenever EP_SIZE >= 1, which is always; prefix caching on in
    # this commit, off from PR #966 (2026-03-28 02:17 UTC): the date cannot tell which, and
    # only the warm-ups' prompt differs (the first measured request)
    "silicon_vllm_minimax_m25_fp8_h200_v0180.csv": Recipe(
        commit="1d5cae1417982dd99b77e6ed4758b0eff42edda6",
        script="benchmarks/single_node/minimaxm2.5_fp8_h200.sh",
        warmups_per_client=2, test_requests=0, gpu_memory_utilization=0.95,
        max_num_seqs=None, enable_prefix_caching=True),
    # 2026-03-02 23:25:01 UTC (PR #847), 24 s before the rows' "measured" time: vLLM v0.16.0
    # at TP8,
    # --gpu-memory-utilization 0.95, --max-num-seqs $CONC; prefix caching on (off from PR
    # #926, 2026-03-27)
    "silicon_vllm_kimi_k25_int4_h200_v0160.csv": Recipe(
        commit="749096c4c5ae4dfc37a878cd9081561483282fb8",
        script="benchmarks/single_node/kimik2.5_int4_h200.sh",
        warmups_per_client=2, test_requests=0, gpu_memory_utilization=0.95, max_num_seqs=0,
        enable_prefix_caching=True),
}
"""Each shipped sweep file's recipe (``sweeps.SWEEP_FILES``)."""


def length_range(named: int) -> tuple[int, int]:
    """The lengths the client draws for a named length: ``(int(named x 0.8), named)``, both
    ends drawn."""
    return int(named * LENGTH_RANGE_RATIO), named
