"""clustersim: a capacity planner for LLM serving built on a vLLM-faithful simulator."""

from clustersim import native

native.use_pure_when_needed()

__version__ = "0.1.0"
