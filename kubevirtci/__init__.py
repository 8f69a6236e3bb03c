"""Cluster providers and installers for the KubeVirt DRA conformance suite."""
