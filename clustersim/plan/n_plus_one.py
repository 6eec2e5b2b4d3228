"""N+1: a candidate at its operating rate, with one instance and with one node lost.

A capacity review asks whether the plan survives the loss of one part at the load it is meant
to carry. The planner reruns a candidate at its operating rate (the rate it will carry: the
plan's target, else the highest rate every traffic draw met the SLO at, less the plan's
headroom) with the seed of its run at goodput, a failure a third of the way through the
arrivals lasting for the rest of the run, and the clients retrying what it lost (the
scenario's ``faults.client``, else openai-python's defaults)::

    instance   each role's first instance (a split: one prefill and one decode; colocated:
               one), the worst of them kept: the one whose loss leaves the lowest attainment
    node       the server whose loss takes down the most instances (a one-node deployment:
               everything); not run when that server holds one whole instance and nothing
               else (its loss is an instance loss), which a note says

Each check reads the SLO over the whole run and over the requests that arrived from the
failure on, and prices one spare of what was lost (its GPUs, per hour and per 1M output
tokens of the recommendation at goodput). A few simulations, one executor batch.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from clustersim.catalog.specs import ModelSpec
from clustersim.cluster.domains import ROLES, failure_domains
from clustersim.metrics import RunSummary
from clustersim.metrics.goodput import cost_per_million_tokens
from clustersim.plan.result import CandidateResult, LossCheck, NPlusOne
from clustersim.plan.space import Candidate
from clustersim.scenario import Scenario
from clustersim.scenario.faults import ClientRetries, FaultsSpec, InstanceFault, NodeFault
from clustersim.workload import build_requests
from clustersim.workload.spec import ClosedLoopArrivals
from clustersim.workload.spec_reuse import SessionsWorkload

FAULT_AT = 1 / 3
"""The failure comes this far into the arrivals."""


@dataclass(frozen=True, slots=True)
class Target:
    """Something to lose: an instance or a node, and the GPUs that go with it."""

    kind: str
    name: str
    gpus: dict[str, int]
    roles: dict[str, int]
    """The failure domains it takes down, by role."""


def targets(scenario: Scenario, model: ModelSpec) -> tuple[list[Target], list[str]]:
    """What to lose in ``scenario`` (a job of the recommendation): each role's first
    instance, then the busiest node; and notes on the checks that cannot be made."""
    domains = failure_domains(scenario, model)
    out = []
    for role in ROLES:
        first = domains.first_of(role)
        if first is not None:
            out.append(Target("instance", first.name, first.gpu_counts, {role: 1}))
    if not domains.has_servers:
        return out, ["no node check: the layout has no topology, so no server to lose"]
    best: tuple[int, str, Counter[str], list[str]] | None = None
    for node in domains.servers:
        held = domains.held_by(node)
        if held and (best is None or len(held) > best[0]):
            on = domains.gpus_on(node)
            best = (len(held), node, Counter(domains.gpu_type[g] for g in on), held)
    if best is None:
        return out, []
    _, node, gpus, held = best
    whole = len(held) == 1 and all(domains.server_of[g] == node for i in domains.instances
                                   if i.name == held[0] for g in i.gpus)
    if whole and any(t.kind == "instance" for t in out):
        return out, [f"no separate node check: each server holds at most one instance ({node} "
                     f"holds only {held[0]}), so losing one is losing an instance"]
    roles = Counter(i.role for i in domains.instances if i.name in held)
    out.append(Target("node", node, dict(sorted(gpus.items())), dict(roles)))
    total = sum(len(i.gpus) for i in domains.instances)
    if sum(gpus.values()) == total:
        return out, [f"the whole deployment sits on {node}: no layout on one server survives "
                     "that server's loss; only a second server would"]
    return out, []


def fault_time(scenario: Scenario, window_s: float) -> float:
    """A third of the way from the first arrival to the last (of ``window_s`` when the
    arrivals are only known as the run goes: closed loops, sessions)."""
    workload = scenario.workload
    if isinstance(getattr(workload, "arrivals", None), ClosedLoopArrivals) or isinstance(
            workload, SessionsWorkload):
        return round(FAULT_AT * window_s, 3)
    requests = build_requests(workload, np.random.default_rng(scenario.seed),
                              block_size=scenario.engine.block_size, base_dir=scenario.base_dir)
    arrivals = [r.arrival_s for r in requests]
    first, last = (min(arrivals), max(arrivals)) if arrivals else (0.0, 0.0)
    span = last - first if last > first else window_s
    return round(first + FAULT_AT * span, 3)


def faults_for(target: Target, at_s: float, client: ClientRetries) -> FaultsSpec:
    event = (InstanceFault(kind="instance", name=target.name, at_s=at_s)
             if target.kind == "instance" else NodeFault(kind="node", name=target.name,
                                                         at_s=at_s))
    return FaultsSpec(events=[event], client=client)


def read_check(target: Target, at_s: float, summary: RunSummary, prices: dict[str, float],
               output_tokens_per_s: float) -> LossCheck:
    """One loss's run, read as a check: SLO over the run and after the failure, and what a
    spare of the lost part costs."""
    verdict, faults = summary.slo, summary.faults
    assert verdict is not None and faults is not None
    after = faults.after
    priced = all(gpu in prices for gpu in target.gpus)
    hourly = sum(n * prices[gpu] for gpu, n in target.gpus.items()) if priced else None
    per_million = (cost_per_million_tokens(target.gpus, prices, output_tokens_per_s)
                   if priced else None)
    return LossCheck(
        kind=target.kind, lost=target.name, gpus=target.gpus, at_s=at_s,
        attainment=verdict.attainment,
        attainment_after=None if after is None else after.attainment,
        meets=verdict.meets, meets_after=after is None or after.meets,
        num_lost=faults.num_lost, num_retried_requests=faults.num_retried_requests,
        num_failed=faults.num_failed, spare_cost_per_hour=hourly,
        spare_cost_per_million_output_tokens=per_million, summary=summary,
        roles=target.roles)


def worst(checks: list[LossCheck]) -> LossCheck | None:
    """The check that fares worst: failing first, then the lowest attainment after the
    failure, then over the run."""
    if not checks:
        return None
    return min(checks, key=lambda c: (c.holds, c.attainment_after or 0.0, c.attainment or 0.0,
                                      c.lost))


JobFor = Callable[[Candidate, int, float], Scenario]
"""(candidate, seed index, rate) -> the scenario a probe of it runs."""
RunJobs = Callable[[str, list[Scenario]], list[RunSummary | str]]
"""(stage, scenarios) -> their run summaries, or each one's error."""


def check(rec: CandidateResult, rate: float, basis: str, scenario: Scenario, model: ModelSpec,
          prices: dict[str, float], job: JobFor, run: RunJobs) -> NPlusOne | None:
    """``rec`` at ``rate`` (its operating rate; ``basis`` says where it comes from), losing
    each role's first instance, and the busiest node, a third into the run for the rest of
    it."""
    at = rec.at_goodput
    if at is None or not rate > 0:
        return None
    base = job(rec.candidate, at.seed - scenario.seed, rate)
    lost, notes = targets(base, model)
    at_s = fault_time(base, at.window_s)
    client = scenario.faults.client if scenario.faults is not None else ClientRetries()
    jobs = [base.model_copy(update={"faults": faults_for(t, at_s, client)}) for t in lost]
    tokens = at.throughput.output_tokens_per_s or 0.0
    checks = []
    for target, outcome in zip(lost, run(f"N+1 of {rec.candidate.label()}", jobs), strict=True):
        if isinstance(outcome, str):
            notes.append(f"losing {target.name}: {outcome}")
            continue
        checks.append(read_check(target, at_s, outcome, prices, tokens))
    return NPlusOne(
        candidate=rec.id, rate_per_s=rate, rate_basis=basis, max_retries=client.max_retries,
        instance=worst([c for c in checks if c.kind == "instance"]),
        node=worst([c for c in checks if c.kind == "node"]),
        tried=tuple(checks), notes=tuple(notes))
