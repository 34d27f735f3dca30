"""Peer suites: PyTorch's own Dynamo unit tests run against ember (see plugin.py and compare.py)."""
