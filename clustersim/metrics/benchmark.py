"""What ``vllm bench serve`` prints for a run of the ``benchmark`` workload.

The tool's own arithmetic (vllm/benchmarks/serve.py, ``calculate_metrics`` and
``benchmark``), over the measured requests only (warm-ups are never among them):

* duration: from the start of the measured run (``benchmark_start_time``, before the first
  dispatch) to the last request's end at the client;
* completed / failed; request, output and total-token throughput = those counts / duration,
  only completed requests' tokens counted;
* TTFT, TPOT, ITL, E2E from each request's send, after its wait for a concurrency slot
  (vllm#54101); that wait is the client queue time, and E2E including it is reported when the
  rate is finite (``e2el_including_client_queue``), as the tool does;
* the peak of concurrent requests: a sweep over the half-open [send, end) intervals of the
  completed requests, ends before starts at equal times.

TTFT, TPOT, ITL and E2E are the run's own distributions (``RunSummary``): the definitions are
the same.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from clustersim.engine.request import Request
from clustersim.metrics.records import RequestRecords
from clustersim.metrics.requests import Distribution


@dataclass(frozen=True)
class BenchmarkSummary:
    """A benchmark run's result as ``vllm bench serve`` reports it (see the module)."""

    max_concurrency: int | None
    request_rate: float
    burstiness: float
    num_warmups: int
    duration_s: float
    completed: int
    failed: int
    request_throughput: float | None
    output_throughput: float | None
    total_token_throughput: float | None
    client_queue_s: Distribution
    e2e_including_client_queue_s: Distribution | None
    max_concurrent_requests: int

    def to_json(self) -> dict[str, Any]:
        return {
            "max_concurrency": self.max_concurrency,
            "request_rate": "inf" if math.isinf(self.request_rate) else self.request_rate,
            "burstiness": "inf" if math.isinf(self.burstiness) else self.burstiness,
            "num_warmups": self.num_warmups,
            "duration_s": self.duration_s,
            "completed": self.completed,
            "failed": self.failed,
            "request_throughput": self.request_throughput,
            "output_throughput": self.output_throughput,
            "total_token_throughput": self.total_token_throughput,
            "client_queue_s": self.client_queue_s.to_json(),
            "e2e_including_client_queue_s": (None if self.e2e_including_client_queue_s is None
                                             else self.e2e_including_client_queue_s.to_json()),
            "max_concurrent_requests": self.max_concurrent_requests,
        }


def benchmark_summary(records: RequestRecords, measured_start_s: float, workload: Any
                      ) -> BenchmarkSummary:
    """The result of the measured requests (``records``) of a ``benchmark`` ``workload``
    whose measured run began at ``measured_start_s``."""
    table = records.table()
    done = table.finished
    end_s = (records.last_finish_s if records.last_finish_s is not None
             else measured_start_s)
    duration = end_s - measured_start_s

    def per_s(amount: int) -> float | None:
        return amount / duration if duration > 0 else None

    num_done = int(done.sum())
    output = int(table.output_tokens[done].sum())
    prompt = int(table.prompt_tokens[done].sum())
    dispatch = records.dispatch_times()
    finish = records.finish_times()
    sent = done if dispatch is None else done & ~np.isnan(dispatch)
    queued = ([] if dispatch is None
              else table.arrival_s[sent] - dispatch[sent])
    with_queue = None
    if not math.isinf(workload.request_rate) and workload.max_concurrency is not None:
        ended = sent & ~np.isnan(finish)
        with_queue = Distribution.of([] if dispatch is None
                                     else finish[ended] - dispatch[ended])
    return BenchmarkSummary(
        max_concurrency=workload.max_concurrency,
        request_rate=workload.request_rate,
        burstiness=workload.burstiness,
        num_warmups=workload.num_warmups,
        duration_s=duration,
        completed=num_done,
        failed=len(table) - num_done,
        request_throughput=per_s(num_done),
        output_throughput=per_s(output),
        total_token_throughput=per_s(prompt + output),
        client_queue_s=Distribution.of(queued) if workload.max_concurrency is not None
        else Distribution.of([]),
        e2e_including_client_queue_s=with_queue,
        max_concurrent_requests=_peak_of(table.arrival_s[done & ~np.isnan(finish)].tolist(),
                                         finish[done & ~np.isnan(finish)].tolist()),
    )


def peak_concurrency(requests: list[Request]) -> int:
    """Most requests in flight at once over the half-open [send, end) intervals."""
    ended = [r for r in requests if r.finish_s is not None]
    return _peak_of([r.arrival_s for r in ended], [r.finish_s for r in ended])


def _peak_of(starts_s: list[float], ends_s: list[float | None]) -> int:
    """Most intervals open at once; ends before starts at equal times."""
    events = sorted([(t, 1) for t in starts_s] + [(t, -1) for t in ends_s])
    current = peak = 0
    for _, delta in events:
        current += delta
        peak = max(peak, current)
    return peak
