"""clustersim: a capacity planner for LLM serving built on a vLLM-faithful simulator."""

__version__ = "0.1.0"
