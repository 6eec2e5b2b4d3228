"""Clusters: topology, KV transfer flows, routers and layouts."""
