"""The last section of docs/validation.md: clustersim's plans and step prices beside NVIDIA
aiconfigurator's answers to the same MoE capacity questions.

Static text, not computed by ``clustersim validate``: its tables are what one run of
``python benchmarks/aiconfigurator_compare.py`` printed (aiconfigurator 0.12.0, this tree's
clustersim), its reasons read from both tools' per-operator breakdowns. Rerun the benchmark and
replace both when the cost model or the planner moves. ``render_markdown`` appends it to the
generated page; tests/test_validation.py checks that every answer and step price more than
1.5x apart is named in its reasons.
"""

AICONFIGURATOR_SECTION = """\

## Beside NVIDIA aiconfigurator: the same MoE capacity questions

This section is not computed by `clustersim validate`: it is one run of a benchmark, kept as
text in `clustersim/calibration/aiconfigurator_section.py`, which `clustersim validate
--write-docs` copies in as it stands. Rerun it when the cost model or the planner moves, and
replace the tables and the reasons with what it prints:

```
python -m venv /tmp/aic-venv && /tmp/aic-venv/bin/pip install aiconfigurator==0.12.0
python benchmarks/aiconfigurator_compare.py --aiconfigurator /tmp/aic-venv/bin/aiconfigurator
```

aiconfigurator is not a clustersim dependency (it lives in a virtual environment of its own;
without it the script says so and exits). The script asks aiconfigurator 0.12.0 and
clustersim the same two questions and prints each tool's best colocated and best split answer
per GPU, then both tools' price of the same engine steps:

- DeepSeek-R1 (FP8, 128 x 128 block scales) on 32 H200, 2,000-token prompts, 800-token
  answers, TTFT 2 s, TPOT 50 ms;
- Qwen3-235B-A22B in FP8 on one 8 x H200 server, 1,500-token prompts, 300-token answers, TTFT
  2 s, TPOT 60 ms: the question `scenarios/qwen3_235b_h200_plan.yaml` asks, its lengths fixed
  at that scenario's means.

How the questions map onto each other:

- **The same:** model, GPU and GPU count, every prompt and answer exactly the stated length,
  the TTFT and TPOT limits, vLLM's and SGLang's kernels on aiconfigurator's side (one sweep
  each), vLLM's scheduler on clustersim's. DeepSeek-R1's routed experts are priced from the
  same measured fused-MoE table by aiconfigurator's vLLM sweep and by clustersim (vLLM 0.24.0's
  kernels on the H200, aiconfigurator's `moe_perf`, which clustersim ships as
  `moe_h200_sxm.csv`).
- **aiconfigurator** (`aiconfigurator cli default --model M --total-gpus N --system h200_sxm
  --backend B --isl I --osl O --ttft TTFT_MS --tpot TPOT_MS`) answers with a static operating
  point priced from its measured kernel tables, ranked by output tokens/s per GPU. Aggregated:
  one rank's batch over a mean-field cycle of `I x batch / context tokens` mixed steps and
  decode-only steps for the O output tokens, TPOT their weighted mean, TTFT one prefill times a
  queueing factor, the rank's throughput times its attention-DP ranks (`run_agg` in
  aiconfigurator-core 0.12.0's `sdk/backends/base_backend.py`). Disaggregated: prefill workers
  of one prompt per rank (its rows' `(p)bs` 1, `prefill_max_batch_size` in aiconfigurator
  0.12.0's `sdk/task_v2.py`) and decode workers, their step prices raised by its latency
  corrections (1.1 and 1.08), rate-matched into replicas of whole workers with prefill
  throughput taken at 0.9 and decode at 0.92 of its figure, a prefill's TTFT at 1.8 times its
  own against the limit (`sdk/sweep.py`). No arrivals: every request the same age apart from
  the next. Its req/s per GPU here is its output tokens/s per GPU of the whole budget over O (a
  replica's idle GPUs count).
- **clustersim** (`clustersim plan`, `max_goodput_per_gpu` at the same GPU budget, colocated
  and split layouts over TP and over DP with expert parallelism, one traffic draw) answers with
  goodput: the highest Poisson rate at which 90 % of requests meet both limits at once. A
  prefill step holds as many prompts as vLLM's token budget allows (`max_num_batched_tokens`,
  8,192 on the H200). A MoE model's data-parallel ranks step together, each rank's batch padded
  to the group's widest in the MoE layers, so a prompt on one rank stretches every rank's step.
  The `means` rows run the same plans with `slo.criterion: mean` (mean TTFT and mean TPOT
  within the limits, aiconfigurator's verdict on a simulated queue): the gap between a P90 row
  and its means row is the price of the attainment target, the rest is step prices and
  layouts.
- **Not the same:** the Qwen weights (aiconfigurator prices the published FP8 checkpoint, 128 x
  128 block scales, its experts on their measured curve; clustersim prices vLLM's
  `--quantization fp8` on the BF16 checkpoint, per-tensor scales, as the shipped scenario asks,
  whose experts run a fused-MoE kernel no table holds, so clustersim prices them as dense FP8
  GEMMs: `clustersim step-time` says "no measured fused-MoE table for this format on h200");
  the KV cache (aiconfigurator takes FP8 for both models, its rows' `kvcache fp8`; clustersim
  vLLM's default, 16-bit); aiconfigurator's vLLM layouts may put MoE tensor parallelism over
  attention-DP ranks (`etp8`), while clustersim's data-parallel pools are always expert
  parallel (vLLM's `--enable-expert-parallel`).

```
DeepSeek-R1 on 32 x H200, 2,000 / 800 tokens, TTFT 2 s, TPOT 50 ms
kind      tool                  layout                                                           req/s/GPU tok/s/GPU tok/s/user  TTFT ms  TPOT ms     x P90   x means
---------------------------------------------------------------------------------------------------------------------------------------------------------------------
colocated aiconfigurator sglang 4 x tp1pp1dp8etp1ep8 bs 40                                           1.003     802.5      20.80   1436.0     48.1     0.57x     0.68x
colocated aiconfigurator vllm   4 x tp1pp1dp8etp8ep1 bs 20                                           0.513     410.5      20.96    798.3     47.7     1.11x     1.33x
colocated clustersim P90 joint  4 x h200 TP8                                                         0.569     446.7      23.32    162.9     42.9
colocated clustersim means      4 x h200 TP8                                                         0.683     540.2      20.01    180.4     50.0
split     aiconfigurator sglang 1 x (2P tp1pp1dp8etp1ep8 bs 1 + 1D tp1pp1dp16etp1ep16 bs 84)         0.980     784.4      20.27    582.8     49.3     0.90x     0.95x
split     aiconfigurator vllm   1 x (1P tp1pp1dp8etp8ep1 bs 1 + 3D tp4pp1dp2etp8ep1 bs 96)           0.440     351.7      22.26    921.4     44.9     2.02x     2.12x
split     clustersim P90 joint  2P (h200 TP8) + 2D (h200 TP1 x DP8 EP)                               0.887     686.8      22.94   1010.9     43.6
split     clustersim means      2P (h200 TP8) + 2D (h200 TP1 x DP8 EP)                               0.932     726.3      22.79   1878.3     43.9

step (deepseek-r1 on H200)                          phase     clustersim    aic vllm      x  aic sglang      x
--------------------------------------------------------------------------------------------------------------
TP1 x DP8 EP8, one prompt per rank                  prefill        589.7       600.9   1.02       579.8   0.98
TP8 x DP1 MoE TP8, one prompt per rank              prefill         92.0       127.3   1.38        99.1   1.08
TP1 x DP8 EP8, 64 decodes per rank                  decode          46.9        50.6   1.08        63.4   1.35
TP4 x DP2 MoE TP8, 96 decodes per rank              decode          37.0        41.6   1.13        62.6   1.69
TP8 x DP1 MoE TP8, 64 decodes per rank              decode          29.4        32.3   1.10        45.1   1.53

Qwen3-235B-A22B FP8 on 8 x H200, 1,500 / 300 tokens, TTFT 2 s, TPOT 60 ms
kind      tool                  layout                                                           req/s/GPU tok/s/GPU tok/s/user  TTFT ms  TPOT ms     x P90   x means
---------------------------------------------------------------------------------------------------------------------------------------------------------------------
colocated aiconfigurator sglang 2 x tp1pp1dp4etp4ep1 bs 64                                           3.319     995.6      17.00   1546.1     58.8     0.87x     1.00x
colocated aiconfigurator vllm   2 x tp1pp1dp4etp4ep1 bs 28                                           1.595     478.5      17.53    439.1     57.0     1.81x     2.07x
colocated clustersim P90 joint  2 x h200 TP2 x DP2 EP, fp8                                           2.894     843.0      19.47    119.9     51.4
colocated clustersim means      2 x h200 TP2 x DP2 EP, fp8                                           3.304     972.8      16.73    133.0     59.8
split     aiconfigurator sglang 1 x (2P tp1pp1dp2etp2ep1 bs 1 + 1D tp1pp1dp4etp4ep1 bs 160)          3.002     900.7      18.48    269.8     54.1     1.96x     2.01x
split     aiconfigurator vllm   1 x (2P tp1pp1dp2etp2ep1 bs 1 + 1D tp1pp1dp4etp1ep4 bs 96)           2.513     754.0      17.02    321.8     58.8     2.34x     2.40x
split     clustersim P90 joint  2P (h200 TP1 x DP2 EP) + 1D (h200 TP1 x DP4 EP), fp8                 5.885    1731.3      25.01   1311.4     40.0
split     clustersim means      2P (h200 TP1 x DP2 EP) + 1D (h200 TP1 x DP4 EP), fp8                 6.040    1777.8      24.93   1930.3     40.1

step (qwen3-235b-a22b on H200)                      phase     clustersim    aic vllm      x  aic sglang      x
--------------------------------------------------------------------------------------------------------------
TP1 x DP2 EP2, one prompt per rank                  prefill        103.0       175.2   1.70       147.7   1.43
TP2 x DP2 EP4, one prompt per rank                  prefill         72.1       131.4   1.82       117.0   1.62
TP1 x DP4 EP4, 96 decodes per rank                  decode          35.2        54.4   1.55        41.1   1.17
TP2 x DP2 EP4, 64 decodes per rank                  decode          27.6        44.8   1.62        28.7   1.04
```

`x P90` and `x means`: clustersim's req/s per GPU of the same layout kind over the row's. TTFT
and TPOT: aiconfigurator's estimate at its operating point, clustersim's means at goodput. A
step: clustersim's `clustersim step-time` (decodes at the prompt plus half the answer of
context) beside `aiconfigurator cli estimate --estimate-mode static_ctx` (TTFT of one prompt
per rank) or `static_gen` (TPOT averaged over the answer's steps); `x` is aiconfigurator's over
clustersim's. clustersim's step rows count the host's time (`step-time` without
`--async-scheduling`); in the plans an instance without data parallelism (the TP8 ones here)
runs vLLM's async scheduling, on by default since 0.14, which hides it under the GPU's work,
while clustersim runs a data-parallel MoE group's lockstep synchronously.

### Where the two differ by more than 1.5x, and why

Every step price and every answer above 1.5x apart (either way), each read from
`aiconfigurator cli estimate ... --detail time` (the step row's arguments; its per-op times
summed over one prefill, or over the answer's decode steps, 299 for Qwen and 799 for
DeepSeek-R1, its TPOT being their total over that count) beside `python -m clustersim
step-time` on the same shape. Qwen's experts are in two of them, and this table, clustersim's
copy of aiconfigurator's measured vLLM fused-MoE kernels on the H200, gives their scale (ms a
layer, Qwen3-235B's expert shape: 4,096 wide, 1,536 per expert, 128 experts):

```
python -c "
import pandas as pd
d = pd.read_csv('clustersim/data/calibration/fit/aiconfigurator/moe_h200_sxm.csv')
s = d[(d.hidden_size == 4096) & (d.inter_size == 1536) & (d.num_experts == 128)
      & (d.moe_tp_size == 1) & (((d.moe_ep_size == 2) & (d.num_tokens == 3072))
                                | ((d.moe_ep_size == 4) & (d.num_tokens == 384)))]
print(s.pivot_table(index=['moe_ep_size', 'num_tokens'], columns=['moe_dtype', 'kernel'],
                    values='latency').round(3))"
moe_dtype              bfloat16                fp8          fp8_block
kernel                   triton flashinfer_cutlass flashinfer_cutlass
moe_ep_size num_tokens
2           3072          1.498              3.795              1.291
4           384           0.384              1.049              0.258
```

(The `fp8` column is FlashInfer's CUTLASS kernel, which vLLM runs for per-tensor FP8 experts
only with static activation scales, as ModelOpt checkpoints store them; `--quantization fp8`
quantizes activations on the fly and runs vLLM's Triton kernel, which the table does not hold:
`clustersim/cost/moe.py`.)

The step prices:

- **Qwen3-235B prefill: 1.70x and 1.82x against vLLM, 1.62x against SGLang; the experts.** TP1
  x DP2 EP2, one 1,500-token prompt per rank (vLLM): aiconfigurator's `context_moe` is 122.693
  ms of its 175.2 ms, the table's block-scaled curve (1.291 ms a layer at 3,072 tokens over
  EP2, above, x 94 layers); clustersim's experts 54.1 ms (`experts.gate_up_proj` 36.290 +
  `experts.down_proj` 17.816) of its 103.0, 0.58 ms a layer. The projections agree
  (`context_qkv_gemm` + `context_proj_gemm` 10.755 + 10.356 ms; clustersim's `qkv_proj` +
  `o_proj` 11.045 + 9.891); the rest is attention (14.464 against 9.455 + 1.095 ms of kernel
  floor) and the experts' exchange (`context_moe_pre_dispatch` + `context_moe_post_dispatch`
  6.649 + 6.527 against the all-gather and reduce-scatter, 10.461). TP2 x DP2 EP4:
  `context_moe` 72.822 ms (vLLM) and 71.583 (SGLang) against clustersim's 27.4 (18.474 +
  8.908); the exchange 14.533 + 14.071 (vLLM) and 11.597 + 11.526 (SGLang) against the
  all-reduce and the all-gather and reduce-scatter, 11.701 + 10.461; vLLM's block-scaled
  projections 8.459 + 8.083 against 5.851 + 5.274. **This is clustersim's error, as far as the
  table can tell:** the per-tensor experts are the one part of these steps priced by a fit
  rather than a measurement, and the fit comes out below the block-scaled kernel and under half
  of the 16-bit one (1.498 ms a layer), more than FP8's halved bytes and doubled peak could
  save.
- **Qwen3-235B decode against vLLM: 1.55x at TP1 x DP4 EP4, 96 decodes per rank; 1.62x at
  TP2 x DP2 EP4, 64; block-scaled projections and the experts.** DP4 EP4: aiconfigurator's
  `generation_qkv_gemm` 2,432.199 ms and `generation_proj_gemm` 2,449.044 over the 299 steps
  (8.13 and 8.19 ms a step) of its 54.4 ms step, clustersim's `qkv_proj` and `o_proj` 1.721 and
  1.603 of its 35.2; its `generation_moe` 7,235.968 ms (24.20 a step: the table's block-scaled
  curve, 0.258 ms a layer at 384 tokens over EP4, x 94 layers) against clustersim's experts
  15.1 (10.229 + 4.868), 0.16 ms a layer, again below the block-scaled kernel and under half
  of the 16-bit one (0.384). TP2 x DP2: projections 8.05 and 7.90 ms a step against 1.118 and
  1.067, experts 19.90 against 14.9 (10.104 + 4.750). vLLM's block-scaled GEMMs have a high floor at decode sizes; aiconfigurator's
  own table of vLLM 0.24's GEMMs on the H200, read with its interpreter (ms):

  ```
  /tmp/aic-venv/bin/python -c "
  import pathlib, pandas as pd, aiconfigurator_core as a
  d = pd.read_parquet(pathlib.Path(a.__file__).parent
                      / 'systems/data/h200_sxm/gemm/vllm/0.24.0/gemm_perf.parquet')
  s = d[(d.n == 4096) & (d.k == 8192) & d.m.isin([16, 64, 96, 128, 256, 4096])]
  print(s.pivot_table(index='m', columns='gemm_dtype', values='latency').round(4))"
  gemm_dtype  bfloat16     fp8  fp8_block
  m
  16            0.0228  0.0158     0.0597
  64            0.0236  0.0168     0.0868
  96            0.0247  0.0219     0.0871
  128           0.0259  0.0211     0.0827
  256           0.0313  0.0301     0.1507
  4096          0.3265  0.2594     0.2707
  ```

  A 4096 x 8192 GEMM with 128 x 128 block scales (`fp8_block`) takes 3.8-5.2 times the
  per-tensor one (`fp8`) from 16 to 256 rows and 1.04 times at 4,096. The projections are the
  questions' difference (block scales in aiconfigurator's checkpoint, per-tensor weights in
  clustersim's scenario); the experts are clustersim's error above. SGLang's kernels price the
  same steps within 1.17x and 1.04x of clustersim's (its block-scaled projections 1.68 and 2.10
  ms a step at DP4, its experts 22.61).
- **DeepSeek-R1 decode against SGLang: 1.69x at TP4 x DP2 with MoE TP8, 96 decodes per rank;
  1.53x at TP8, 64; SGLang's MLA.** aiconfigurator's SGLang `generation_mla_block` is
  26,245.937 ms over the 799 steps (32.85 a step) at TP4 x DP2, where its vLLM prices the same
  block at 12.00 and clustersim its attention with the attention projections at 7.4 (0.711 +
  0.704 + 0.599 + 0.515 + 0.963 + 3.945); at TP8 22.62, 9.48 and 5.6 (0.711 + 0.667 + 0.506 +
  0.467 + 0.665 + 2.630). The MoE side is close: `generation_moe_overlap` 29.06 and 21.89 ms a
  step (SGLang), 27.23 and 20.61 (vLLM), clustersim's experts with their collectives, shared
  experts, router and dense layers 25.6 and 20.7. A difference in the engine, not clustersim's
  error: clustersim models vLLM, whose price of these steps aiconfigurator puts at 1.13x and
  1.10x of clustersim's.

The answers:

- **DeepSeek-R1 split against vLLM: 2.02x (2.12x on means); one prompt per prefill rank.**
  aiconfigurator's answer is one prefill worker (DP8 with MoE TP8) feeding three decode workers
  (TP4 x DP2 with MoE TP8), and it is prefill-bound: that worker's 15.629 req/s
  (`(p)seq/s/worker` in its `best_config_topn.csv`) taken at 0.9 is the answer's 14.066 req/s
  (the three decode workers, 5.348 req/s each at 0.92, would carry more). Its prefill worker
  runs one 2,000-token prompt per rank: `aiconfigurator cli estimate --tp-size 1
  --attention-dp-size 8 --moe-tp-size 8 --moe-ep-size 1 --batch-size 1` prices that step at
  465.346 ms (17.191 seq/s; the sweep's 15.629 is that under its 1.1 correction).
  clustersim's answer prefills on two TP8 instances and decodes on two DP8 EP ones, 28.38 req/s
  between them (0.887 per GPU, TTFT-bound: 89.5 % of requests within 2 s just above it), its
  scheduler free to pack up to 8,192 prompt tokens (four prompts and part of a fifth) into a
  prefill step. The two tools price such a step within 1.27x of each other: aiconfigurator's
  vLLM four prompts on TP8 (`--tp-size 8 --batch-size 4`) at 381.957 ms, clustersim 8,000
  prompt tokens on TP8 at 301.8 ms (priced as one prompt, whose attention is more than four
  prompts'); but aiconfigurator's sweep does not batch prompts in a prefill worker. On the
  decode side aiconfigurator's vLLM prices 64 decodes per rank on DP8 EP8 at 50.563 ms, over
  the limit before its 1.08 correction, where clustersim prices them at 46.9 and its DP8 EP
  instances hold 43.6 ms mean TPOT at goodput. So most of this difference is the tool's model
  (one prompt per prefill rank, rate matching at 0.9 and 0.92, latency corrections of 1.1 and
  1.08, whole workers), not a kernel: the step prices here are within 1.02-1.38x. The P90
  target costs clustersim 1.05x (0.887 against 0.932 on means).
- **Qwen3-235B split against vLLM: 2.34x (2.40x on means); against SGLang: 1.96x (2.01x).**
  clustersim's answer, two DP2 EP prefill instances and one DP4 EP decode instance (the same
  GPUs aiconfigurator's vLLM answer uses, its prefill workers with MoE TP2), is TTFT-bound
  (89.7 % of requests within 2 s just above its 47.08 req/s), its decodes at 40.0 ms mean TPOT,
  well within 60. aiconfigurator's vLLM answer is decode-bound: its decode worker, 96 per rank
  at 58.8 ms TPOT, carries 21.854 req/s, at 0.92 the answer's 20.106 (its two prefill workers,
  11.187 req/s each at 0.9, about as much). SGLang's is prefill-bound: two workers of 13.343
  req/s at 0.9 are its 24.017. Three things set the prefill rates apart: the step price (one
  prompt per rank on DP2 EP2: 175.2 ms vLLM, 147.7 SGLang, 103.0 clustersim, most of it the
  experts, clustersim's error above), aiconfigurator's one prompt per rank per step against
  vLLM's 8,192-token budget, and its 0.9 and 1.1. On the decode side the vLLM step of 96 per
  rank is 54.4 ms against clustersim's 35.2: the block-scaled projections (the questions'
  difference) and the experts (clustersim's error). The verdict moves little (5.885 and 6.040).
- **Qwen3-235B colocated against vLLM: 1.81x (2.07x on means).** aiconfigurator's best is two
  DP4 workers with MoE TP4 at 28 per rank, TPOT 57.0 ms: its vLLM decode steps, 1.55-1.62x
  clustersim's (above), reach the 60 ms TPOT at a small batch. clustersim's best, TP2 x DP2 EP
  at 2.894 req/s per GPU (3.304 on means), is TPOT-bound too (58.2 ms p90 at goodput). Against
  SGLang's kernels, whose decode steps are within 1.04-1.17x of clustersim's, the colocated
  answers agree (0.87x, 1.00x on means).
- **DeepSeek-R1 colocated against SGLang: 0.57x, aiconfigurator the higher (0.68x on means);
  how data-parallel ranks share a step.** aiconfigurator's best is DP8 with EP8 at 40 per rank:
  its cycle gives each rank the mixed steps of its own prompts (2,000 x 40 / 4,000 = 20 of its
  800 steps, 4,000 being its row's `ctx_tokens`) and multiplies the rank by eight, as if the
  eight ranks' prompts came in the same steps. clustersim's plan has that layout (4 x h200 TP1
  x DP8 EP): 0.105 req/s per GPU (0.114 on means), TPOT-bound (49.97 ms p90 at goodput),
  because its ranks step together and Poisson prompts land on the eight ranks in different
  steps: one rank's 2,000-token prompt pads every rank's MoE layers to 16,000 tokens, a step
  clustersim prices at 589.7 ms with one prompt per rank (its experts, on the measured curve,
  400.1 ms) and aiconfigurator's SGLang at 579.8. clustersim's best colocated is TP8, at 0.569
  (0.683 on means).

What this says about clustersim: where both tools price the same measured kernels (DeepSeek-R1's
block-scaled experts, DP8 EP8 and TP8), its steps are within 1.02-1.38x of aiconfigurator's
vLLM, and the answers' remaining gaps there are the tools' models of serving (a prefill
worker's batch, rate matching, how data-parallel ranks share a step), not step prices. Two of
its prices are still below aiconfigurator's vLLM by more than the tables explain: the
per-tensor FP8 experts that vLLM's `--quantization fp8` runs (no measured table; the dense-GEMM
fit prices them below every kernel measured at the shape, which makes the Qwen answers
optimistic by an amount this comparison cannot separate from the checkpoints' difference), and
DeepSeek-R1's MLA with its projections in a decode step (8.9, 7.4 and 5.6 ms against
aiconfigurator's vLLM 14.19, 12.00 and 9.48; the step totals stay within 1.13x, the MoE side
agreeing), of which the block-scaled projections priced on the per-tensor FP8 fit are one known
part.
"""  # noqa: E501
