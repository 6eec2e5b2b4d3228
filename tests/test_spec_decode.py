"""Speculative decoding (``engine.speculative``): drafts in the budget, the acceptance draws,
the KV lookahead, the verification step's price, and the end-to-end effect on TPOT."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from clustersim.catalog import load_gpu, load_model
from clustersim.cost.memory import draft_weight_bytes_per_gpu, kv_bytes_per_block
from clustersim.cost.roofline import CostModel
from clustersim.engine.clock import Clock
from clustersim.engine.config import SchedulerConfig, SpecDecodeConfig
from clustersim.engine.defaults import resolve_engine
from clustersim.engine.instance import Instance
from clustersim.engine.kv_manager import KVCacheManager, cdiv
from clustersim.engine.request import Request
from clustersim.engine.scheduler import Scheduler
from clustersim.engine.settings import EngineSettings
from clustersim.engine.spec_decode import (
    AcceptanceSampler,
    capture_sizes,
    configure_prices,
    seeded,
)
from tests.helpers import explicit, run_cli, scenario, simulate, write_scenario


def spec(k: int = 3, rate: float | None = None, lengths: list[float] | None = None,
         method: str = "eagle") -> SpecDecodeConfig:
    settings = EngineSettings(speculative={
        "method": method, "num_speculative_tokens": k,
        **({"acceptance_rate": rate} if rate is not None else {"acceptance_lengths": lengths}),
    })
    assert settings.speculative is not None
    return SpecDecodeConfig(method=method, num_speculative_tokens=k,
                            acceptance_cdf=settings.speculative.acceptance_cdf(),
                            draft_layers=settings.speculative.resolved_draft_layers,
                            seed=(5, 4, 0))


def make_scheduler(speculative: SpecDecodeConfig | None, blocks: int = 1000,
                   **config: int) -> Scheduler:
    defaults = {"max_num_batched_tokens": 512, "max_num_seqs": 16, "max_model_len": 4096}
    cfg = SchedulerConfig(**{**defaults, **config}, speculative=speculative)
    return Scheduler(cfg, KVCacheManager(blocks, cfg.block_size, cfg.max_model_len),
                     keep_token_times=False, bulk_decodes=True)


def prefill(s: Scheduler, num: int, prompt: int = 16, max_tokens: int = 1000) -> list[Request]:
    requests = [Request(f"r{i}", 0.0, prompt, max_tokens) for i in range(num)]
    for r in requests:
        s.add_request(r)
    plan = s.schedule()
    assert plan.num_prefill_tokens == num * prompt
    s.update_from_output(plan, 1.0)
    assert all(r.num_output_tokens == 1 for r in requests)
    return requests


@pytest.mark.parametrize(("rate", "gained"), [(1.0, 4), (0.0, 1)])
def test_each_verification_step_emits_accepted_plus_one_tokens(rate, gained):
    s = make_scheduler(spec(3, rate))
    requests = prefill(s, 4)
    for step in range(5):
        plan = s.schedule()
        assert [n for _, n in plan.scheduled] == [4] * 4  # 1 + k each, drafts included
        assert plan.num_scheduled_tokens == plan.num_decode_tokens == 4 * 4
        assert plan.num_spec_tokens == 4 * 3
        s.update_from_output(plan, 2.0 + step)
        for r in requests:
            assert r.num_output_tokens == 1 + gained * (step + 1)
            assert r.num_computed_tokens == r.num_tokens - 1  # the rejected drafts undone
            times = r.token_times_s  # a step's tokens arrive together
            assert len(times) == r.num_output_tokens
            assert list(times[-gained:]) == [2.0 + step] * gained


@pytest.mark.parametrize(("lengths", "rate"), [([0.1, 0.2, 0.3, 0.4], None), (None, 0.7)])
def test_acceptance_model_gives_its_mean_tokens_per_step(lengths, rate):
    config = spec(3, rate, lengths)
    mean = (sum(n * p for n, p in enumerate(lengths)) if lengths is not None
            else rate + rate ** 2 + rate ** 3)  # accepted drafts, P(n >= j) = a^j
    s = make_scheduler(config)
    requests = prefill(s, 8, max_tokens=2000)
    steps = 400
    for step in range(steps):
        s.update_from_output(s.schedule(), 2.0 + step)
    per_step = sum(r.num_output_tokens - 1 for r in requests) / (8 * steps)
    # 3,200 draws: the standard error of the mean is about 0.02 tokens
    assert per_step == pytest.approx(1 + mean, abs=0.08)
    assert max(r.num_output_tokens for r in requests) <= 1 + 4 * steps


def test_sampler_is_seeded_and_capped_at_the_drafts_verified():
    config = spec(3, 0.7)
    a, b = AcceptanceSampler(config), AcceptanceSampler(config)
    draws = [a.draw(3) for _ in range(3000)]
    assert draws == [b.draw(3) for _ in range(3000)]
    assert set(draws) == {0, 1, 2, 3}
    assert all(a.draw(1) <= 1 for _ in range(100))
    cfg = SchedulerConfig(8, 2, 64, speculative=config)

    def stream(engine: str) -> tuple[int, ...]:
        seeded_spec = seeded(cfg, 7, engine).speculative
        assert seeded_spec is not None
        return seeded_spec.seed

    assert stream("main-0") == stream("main-0") == (7, 4, stream("main-0")[2])
    assert stream("main-0") != stream("main-1")  # one stream per engine
    assert seeded(SchedulerConfig(8, 2, 64), 7, "main-0") == SchedulerConfig(8, 2, 64)


def test_max_tokens_is_never_exceeded():
    s = make_scheduler(spec(3, 1.0))
    requests = [Request(f"r{i}", 0.0, 16, m) for i, m in enumerate((2, 5, 7, 10))]
    for r in requests:
        s.add_request(r)
    step = 0
    while s.num_unfinished:
        s.update_from_output(s.schedule(), 1.0 + step)
        step += 1
        assert all(r.num_output_tokens <= r.max_tokens for r in requests)
    assert [r.num_output_tokens for r in requests] == [2, 5, 7, 10]
    assert [len(r.token_times_s) for r in requests] == [2, 5, 7, 10]
    assert s.kv.num_used_blocks == 0


def test_the_budget_counts_draft_tokens():
    s = make_scheduler(spec(3, 0.5), max_num_batched_tokens=16)
    prefill(s, 4, prompt=4)
    plan = s.schedule()
    assert [n for _, n in plan.scheduled] == [4, 4, 4, 4]
    s.update_from_output(plan, 2.0)
    s = make_scheduler(spec(3, 0.5), max_num_batched_tokens=10)
    prefill(s, 2, prompt=4)
    s.add_request(Request("late", 0.0, 2, 100))
    plan = s.schedule()  # r0, r1 verify 4 each; late's whole 2-token prompt
    assert [(r.request_id, n) for r, n in plan.scheduled] == [("r0", 4), ("r1", 4), ("late", 2)]
    assert plan.num_spec_tokens == 6 and plan.num_prefill_tokens == 2
    s.update_from_output(plan, 2.0)
    plan = s.schedule()
    # r0 and r1 take 4 each; late gets 1 + 1 draft, the budget's last 2 tokens
    assert [(r.request_id, n) for r, n in plan.scheduled] == [("r0", 4), ("r1", 4), ("late", 2)]
    assert plan.num_spec_tokens == 3 + 3 + 1
    s.update_from_output(plan, 3.0)


@pytest.mark.parametrize(("method", "lookahead"), [("eagle", 3), ("mtp", 3), ("ngram", 0)])
def test_kv_slots_cover_the_drafts_and_the_lookahead(method, lookahead):
    s = make_scheduler(spec(3, 0.0, method=method), block_size=4)
    (r,) = prefill(s, 1, prompt=14)
    for _ in range(6):
        plan = s.schedule()
        held = s.kv.num_blocks_of(r.request_id)
        # vLLM allocate_slots: num_computed + 1 + k scheduled + the lookahead
        assert held == cdiv(r.num_computed_tokens + lookahead, 4)
        s.update_from_output(plan, 2.0)
    s.kv.check_invariants()


def test_speculative_engines_step_one_step_at_a_time():
    s = make_scheduler(spec(3, 0.7))
    assert s.decoding is None and s.keep_token_times
    instance = Instance(Clock(), "main-0", s, lambda plan: 0.01, coalesce=True)
    assert not instance.coalesce
    plain = make_scheduler(None)
    assert plain.decoding is not None and not plain.keep_token_times


def test_cuda_graph_sizes_are_multiples_of_the_verification_rows():
    sizes = capture_sizes(256, 8192, 4)
    assert sizes[0] == 4 and all(size % 4 == 0 for size in sizes)
    assert sizes[-1] == 512 and sorted(set(sizes)) == sizes
    assert capture_sizes(256, 8192, 1) == capture_sizes(256, 8192, 1)


def test_verification_step_price():
    model, gpu = load_model("llama-3.1-8b"), load_gpu("h100-sxm")
    cfg = SchedulerConfig(8192, 256, 8192)
    plain = CostModel(model, gpu).prices
    configure_prices(plain, cfg, model.num_layers)
    assert not plain.speculative  # no section: the prices are untouched
    b, context = 64, 1000
    decode = plain.step_time_s(0, 0.0, 0, b, b * (context + 1), b, b)

    def priced(method: str, k: int, rows: int) -> float:
        prices = CostModel(model, gpu).prices
        configure_prices(prices, SchedulerConfig(8192, 256, 8192, speculative=spec(
            k, 0.5, method=method)), model.num_layers)
        drafts = rows - 1
        return prices.spec_step_time_s(
            0, 0.0, 0, b * rows, b * (context + rows), b, b, b * drafts,
            b * (drafts * context + (drafts + 1) * drafts / 2))

    # no drafts, no draft passes: the plain decode step
    assert priced("ngram", 3, 1) == pytest.approx(decode, rel=1e-12)
    ngram, eagle = priced("ngram", 3, 4), priced("eagle", 3, 4)
    assert decode < ngram < eagle  # 4x the rows and LM-head rows; then 3 draft passes
    assert eagle < 2 * decode  # a memory-bound step: far less than four steps


def test_speculative_section_reaches_the_scheduler_and_shrinks_kv():
    model, gpu = load_model("llama-3.1-8b"), load_gpu("h100-sxm")
    plain = resolve_engine(EngineSettings(max_model_len=8192), model, gpu, 1)
    settings = EngineSettings(max_model_len=8192, speculative={
        "method": "eagle", "num_speculative_tokens": 2, "acceptance_lengths": [0.2, 0.3, 0.5]})
    setup = resolve_engine(settings, model, gpu, 1)
    assert setup.scheduler.speculative is not None
    assert setup.scheduler.speculative.acceptance_cdf == pytest.approx((0.2, 0.5))
    assert setup.num_gpu_blocks < plain.num_gpu_blocks  # the draft layer's KV
    assert plain.scheduler.speculative is None


def test_the_draft_heads_weights_take_kv_blocks():
    """The head's own layers and input projection are loaded before the KV cache is sized
    (the target lends it the embedding and LM head): Llama-3.1-8B's EAGLE layer is a dense
    16-bit decoder layer plus a 2h x h projection, 0.50 GB on one H100, about 240 blocks of
    2 MiB beyond what its KV share already takes."""
    model, gpu = load_model("llama-3.1-8b"), load_gpu("h100-sxm")
    h = model.hidden_size
    head = model.layer_params(dense=True) * 2 + 2 * h * h * 2
    assert draft_weight_bytes_per_gpu(model, "eagle", 1.0, 1) == pytest.approx(head)
    assert draft_weight_bytes_per_gpu(model, "eagle", 1.0, 2) == pytest.approx(
        (head - 4 * h * h) / 2 + 4 * h * h)  # the projection is whole on every rank
    assert draft_weight_bytes_per_gpu(model, "ngram", 0.0, 1) == 0

    def blocks(method: str) -> int:
        return resolve_engine(EngineSettings(max_model_len=8192, speculative={
            "method": method, "num_speculative_tokens": 1, "acceptance_rate": 0.7}),
            model, gpu, 1).num_gpu_blocks

    plain = resolve_engine(EngineSettings(max_model_len=8192), model, gpu, 1).num_gpu_blocks
    kv_share_only = 1 + (plain - 1) * model.num_layers // (model.num_layers + 1)
    assert blocks("ngram") == plain
    taken = kv_share_only - blocks("eagle")
    layers = model.num_layers
    assert taken == pytest.approx(
        head / kv_bytes_per_block(model, 1, 16) * layers / (layers + 1), abs=2)
    assert 200 < taken < 280


def test_an_mtp_layer_is_the_targets_own_layer_with_its_experts_split_like_the_targets():
    """DeepSeek-V3's MTP module: one of its MoE layers stored in FP8 like the rest, about
    11.5 GB whole; on TP8 its experts split eight ways, with DP its experts over dp x tp."""
    model = load_model("deepseek-v3")
    whole = draft_weight_bytes_per_gpu(model, "mtp", 1.0, 1)
    join = 2 * model.hidden_size ** 2 * model.dtype_bytes
    assert 10.5e9 < whole - join < 12.5e9
    experts = model.expert_weight_bytes / model.num_moe_layers
    tp8 = draft_weight_bytes_per_gpu(model, "mtp", 1.0, 8)
    assert tp8 == pytest.approx((whole - join) / 8 + join)
    dp4 = draft_weight_bytes_per_gpu(model, "mtp", 1.0, 8, dp=4)
    assert tp8 - dp4 == pytest.approx(experts / 8 * 3 / 4)


def test_tpot_falls_and_decode_steps_schedule_one_plus_k_per_request(tmp_path):
    requests = explicit(*((f"r{i}", 0.0, 64, 40) for i in range(8)))
    base = simulate(tmp_path / "k0", scenario(model="llama-3.1-8b", workload=requests))
    fast = simulate(tmp_path / "k3", scenario(
        model="llama-3.1-8b", workload=requests, engine={"speculative": {
            "method": "eagle", "num_speculative_tokens": 3, "acceptance_rate": 0.7}}))
    assert all(int(r["output_tokens"]) == 40 for r in fast["requests"].values())
    means = [sum(float(r["tpot_s"]) for r in run["requests"].values()) / 8
             for run in (base, fast)]
    assert means[1] < 0.7 * means[0], means
    decode_steps = [s for s in fast["steps"] if not s["prefill_chunks"]
                    and int(s["num_running"]) == 8]
    assert decode_steps
    assert all(int(s["num_scheduled_tokens"]) == 8 * 4 for s in decode_steps)
    assert len(fast["steps"]) < len(base["steps"])


def test_a_bad_speculative_section_fails_with_one_line(tmp_path):
    path = write_scenario(tmp_path, scenario(engine={"speculative": {
        "method": "eagle", "num_speculative_tokens": 0, "acceptance_rate": 0.7}}))
    code, output = run_cli("simulate", str(path), "--out", str(tmp_path / "out"))
    assert code == 2, output
    lines = output.strip().splitlines()
    assert len(lines) == 1, output
    assert lines[0].startswith(f"{path}: engine.speculative.num_speculative_tokens: "), output
    path = write_scenario(tmp_path, scenario(engine={"async_scheduling": True, "speculative": {
        "method": "ngram", "num_speculative_tokens": 2, "acceptance_rate": 0.5}}), "a.yaml")
    code, output = run_cli("simulate", str(path), "--out", str(tmp_path / "out"))
    assert code == 2 and "engine.speculative: " in output and "Traceback" not in output, output


def test_the_documented_example_validates():
    page = (Path(__file__).parent.parent / "docs" / "scenarios.md").read_text()
    section = page.split("## Speculative decoding", 1)[1]
    block = re.search(r"```\n(.*?)```", section, re.S)
    assert block is not None
    engine = EngineSettings(**yaml.safe_load(block.group(1))["engine"])
    assert engine.speculative is not None and engine.speculative.resolved_draft_layers == 1.0


def test_step_time_prices_a_verification_step():
    base = ["step-time", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--decode-batch", "64",
            "--context", "1000", "--json"]
    code, output = run_cli(*base, "--num-speculative-tokens", "3")
    assert code == 0, output
    result = json.loads(output)
    spec_part = result["speculative"]
    assert spec_part["time_s"] > result["time_s"] and spec_part["draft_s"] > 0
    assert 1.0 < spec_part["break_even_tokens_per_step"] < 2.0
    code, output = run_cli(*base, "--num-speculative-tokens", "3", "--draft-layers", "0")
    assert json.loads(output)["speculative"]["draft_s"] == 0.0
    code, output = run_cli("step-time", "--model", "llama-3.1-8b", "--gpu", "h100-sxm",
                           "--prefill-tokens", "8", "--num-speculative-tokens", "2")
    assert code == 2 and output.startswith("--num-speculative-tokens: "), output


@pytest.mark.parametrize("method", ["eagle", "ngram"])
def test_tight_kv_preempts_and_still_finishes_every_request_exactly(method):
    s = make_scheduler(spec(3, 0.6, method=method), blocks=24, block_size=4,
                       max_num_batched_tokens=32, max_model_len=64)
    requests = [Request(f"r{i}", 0.0, 6 + i % 5, 10 + 3 * i) for i in range(8)]
    for r in requests:
        s.add_request(r)
    preempted = 0
    for step in range(2000):
        if not s.num_unfinished:
            break
        plan = s.schedule()
        assert plan.num_scheduled_tokens <= 32
        preempted += len(plan.preempted)
        s.update_from_output(plan, 1.0 + step)
        s.kv.check_invariants()
    assert not s.num_unfinished and preempted > 0
    assert [r.num_output_tokens for r in requests] == [r.max_tokens for r in requests]
    assert s.kv.num_used_blocks == 0
