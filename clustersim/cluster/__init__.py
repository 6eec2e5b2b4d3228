"""Clusters: topology, KV transfer flows, routers and layouts.

The topology and flow names are re-exported lazily, so importing the package (the scenario
schema does) does not pay for networkx.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

_EXPORTS = {
    "LinkView": "clustersim.cluster.topology",
    "Topology": "clustersim.cluster.topology",
    "shipped_topologies": "clustersim.cluster.topology",
    "FlowNetwork": "clustersim.cluster.flows",
    "TransferRecord": "clustersim.cluster.flows",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(_EXPORTS[name]), name)
