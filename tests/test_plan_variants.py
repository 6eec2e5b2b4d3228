"""The planner's engine variants beyond the step budget: speculative decoding on or off
(``plan.speculative``) and pipeline stages where tensor parallelism alone cannot hold the model
(``plan.<pool>.pipeline_parallel_sizes``), each reaching the serve lines of the answer."""

from __future__ import annotations

import json

import pytest
import yaml

from tests.helpers import run_cli
from tests.test_plan import plan, scenario

ONE_DRAW = {"seeds": 1, "tolerance": 0.05, "simulate_top": 3, "min_requests": 200,
            "min_duration_s": 10}
EAGLE = {"method": "eagle", "num_speculative_tokens": 3, "acceptance_rate": 0.7}


def decode_bound(**plan_choices) -> dict:
    """Short prompts, longer outputs and a tight TPOT: the decode step decides."""
    return scenario(
        workload={"kind": "poisson", "rate_per_s": 10, "num_requests": 200,
                  "prompt_tokens": {"kind": "uniform", "low": 200, "high": 600},
                  "output_tokens": {"kind": "uniform", "low": 200, "high": 400}},
        slo={"ttft_s": 1.0, "tpot_s": 0.012},
        plan={"gpu_budget": 1, "layouts": ["colocated"], "search": ONE_DRAW, **plan_choices})


def opt13b_on_rtx4090(**plan_choices) -> dict:
    """OPT-13B's 26 GB of weights do not fit one 24 GB RTX 4090; two pipeline stages do."""
    return scenario(
        model="opt-13b", gpu="rtx4090", engine={"max_model_len": 2048},
        workload={"kind": "poisson", "rate_per_s": 2, "num_requests": 200,
                  "prompt_tokens": {"kind": "uniform", "low": 200, "high": 600},
                  "output_tokens": {"kind": "uniform", "low": 50, "high": 150}},
        slo={"ttft_s": 3.0, "tpot_s": 0.2},
        plan={"gpu_budget": 2, "layouts": ["colocated"], "search": ONE_DRAW,
              "colocated": {"pipeline_parallel_sizes": [1, 2]}, **plan_choices})


def test_a_speculative_choice_is_a_candidate_variant_and_reaches_the_serve_line():
    result = plan(decode_bound(speculative=[None, EAGLE]))
    by_spec = {c.candidate.speculative is not None: c for c in result.candidates}
    assert len(result.candidates) == 2 and set(by_spec) == {False, True}
    on, off = by_spec[True], by_spec[False]
    assert on.id == off.id + "/spec-eagle-k3-a0.7"
    assert on.candidate.label() == "1 x h100-sxm TP1, eagle k3 (acceptance 0.7)"
    assert on.status == off.status == "simulated"
    # 2.4 accepted tokens per verification step at about the step's price: drafts win
    assert on.goodput.mean_per_s > off.goodput.mean_per_s
    assert result.recommended.id == on.id
    line = result.serve_commands[0]
    config = json.loads(line.split("--speculative-config '")[1].split("'")[0])
    assert config == {"method": "eagle", "num_speculative_tokens": 3,
                      "model": "<your EAGLE draft head>"}
    assert on.to_json()["speculative"] == EAGLE and "speculative" not in off.to_json()


def test_without_speculative_choices_the_scenarios_own_setting_is_kept():
    data = decode_bound()
    data["engine"] = {**data["engine"], "speculative": EAGLE}
    result = plan(data)
    (only,) = result.candidates
    assert json.loads(only.candidate.speculative) == EAGLE
    assert "--speculative-config" in result.serve_commands[0]


def test_pipeline_stages_are_tried_where_tensor_parallelism_cannot_fit():
    result = plan(opt13b_on_rtx4090())
    rows = {c.candidate.pool("colocated").pipeline_parallel_size: c for c in result.candidates}
    assert "does not fit on rtx4090" in rows[1].reason
    staged = rows[2]
    assert staged.candidate.label() == "1 x rtx4090 TP1 x PP2"
    assert staged.candidate.num_gpus == 2 and staged.status == "simulated"
    assert staged.to_json()["pools"][0]["pipeline_parallel_size"] == 2
    assert result.recommended.id == staged.id
    assert "--tensor-parallel-size 1 --pipeline-parallel-size 2 " in result.serve_commands[0]


def test_pipeline_stages_are_not_tried_where_the_model_fits_without_them():
    data = scenario(plan={"gpu_budget": 2, "layouts": ["colocated"], "search": ONE_DRAW,
                          "colocated": {"pipeline_parallel_sizes": [1, 2]}})
    result = plan(data)
    staged = next(c for c in result.candidates
                  if c.candidate.pool("colocated").pipeline_parallel_size == 2)
    assert staged.status == "pruned"
    assert "tried only where tensor parallelism alone cannot fit" in staged.reason
    assert "--pipeline-parallel-size" not in result.serve_commands[0]


def test_drafts_with_pipeline_stages_are_pruned_with_the_engines_reason():
    result = plan(opt13b_on_rtx4090(speculative=[None, EAGLE]))
    staged = {c.candidate.speculative is not None: c for c in result.candidates
              if c.candidate.pool("colocated").pipeline_parallel_size == 2}
    assert staged[False].status == "simulated"
    assert staged[True].status == "pruned"
    assert "not modelled with pipeline parallelism" in staged[True].reason


@pytest.mark.parametrize(
    ("choices", "message"),
    [
        ({"decode": {"pipeline_parallel_sizes": [2]}},
         "plan: decode.pipeline_parallel_sizes [2]: the planner tries pipeline stages on "
         "colocated pools only, as vLLM's NIXL connector (its serve lines') refuses a staged "
         "engine"),
        ({"colocated": {"pipeline_parallel_sizes": [0]}},
         "plan.colocated.pipeline_parallel_sizes[0]: Input should be greater than 0"),
        ({"speculative": [None, EAGLE, None]}, "plan.speculative: speculative choices repeat"),
        ({"speculative": [{"method": "eagle", "num_speculative_tokens": 3}]},
         "plan.speculative[0]: give acceptance_rate or acceptance_lengths"),
        ({"speculative": []}, "plan.speculative: List should have at least 1 item"),
    ],
)
def test_bad_variant_choices_exit_2_with_one_line(tmp_path, choices, message):
    data = scenario(plan={"gpu_budget": 2, **choices})
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    code, output = run_cli("plan", str(path), "--out", str(tmp_path / "out"),
                           "--executor", "serial", "--no-report")
    assert code == 2, output
    lines = output.strip().splitlines()
    assert lines[0].startswith(f"{path}: {message}"), lines[0]
    assert "Traceback" not in output
