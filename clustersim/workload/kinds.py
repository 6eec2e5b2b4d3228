"""The ``workload:`` section: one of the kinds of ``spec`` and ``spec_reuse``, by its ``kind:``."""

from __future__ import annotations

from clustersim.validation import kind_union
from clustersim.workload.spec import (
    BenchmarkWorkload,
    ExplicitWorkload,
    PoissonWorkload,
    ReplayWorkload,
    SyntheticWorkload,
)
from clustersim.workload.spec_reuse import PromptPoolWorkload, SessionsWorkload

Workload = kind_union(ExplicitWorkload, PoissonWorkload, SyntheticWorkload, ReplayWorkload,
                      BenchmarkWorkload, PromptPoolWorkload, SessionsWorkload)
