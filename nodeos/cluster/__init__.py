"""Cluster consensus and the replicated cluster map."""
